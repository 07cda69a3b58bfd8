//! # octex-build
//!
//! Builds an OctEx index from vectors on the CPU (all cores, `rayon`) or, when
//! a GPU is present, with every heavy step on the GPU ([`gpu_ripples`],
//! [`gpu_rows`]; same steps, same format):
//!
//! 1. metric preparation (cosine: normalise; inner product: append
//!    `sqrt(M^2 - |x|^2)`, see `octex_index::Metric`);
//! 2. mean and principal basis on a sample ([`pca`], faer), scale sigma;
//! 3. the copy map ([`octex_lattice::CopyMap`]) with spacings chosen from the
//!    data ([`spacing`]);
//! 4. fragment ripples of every copy ([`ripples`]): the stored fragments by
//!    sorting, each one's ripple the `l` vectors nearest to its centre. The
//!    build keeps each fragment's nearest members here and finds the
//!    nearest vectors through the rows after step 6 ([`ripples_by_rows`]);
//!    given a probe count, it searches an inverted file over the copy's
//!    projection instead ([`centre_knn`], on the GPU [`gpu_centre_knn`]);
//! 5. the int8 sketch ([`sketch`]);
//! 6. neighbour rows: exact k-NN ([`octex_search::knn`]) or the index's own search
//!    ([`search_rows`]) for `2 Lt` neighbours a vector, ordered by detour
//!    count ([`rows::order_by_detours`]), then the row's head, reverse
//!    entries and the rest ([`rows`]);
//! 7. the rerank vectors (f16 or f32), assembled into an [`octex_index::Index`].
//!
//! With a GPU, the exact rows' products run first, alone on the device; their
//! exact re-scoring and detour order then run on the host, on a thread of
//! their own, beside steps 2-5 and 7. The GPU
//! phases are the `gpu` cargo feature (on by default); without it no CUDA
//! crate is compiled, the phases are stand-ins that are never reached
//! (`no_gpu.rs`) and `Backend::Gpu` is an error.
//!
//! [`LiveIndex`] keeps a built index living: adds with user ids, inserted in
//! place ([`insert`]: rows by the index's own search, reverse entries,
//! ripples and sketch by the built map and scales), removes, and rebuilds
//! on request. [`ShardedIndex`] ([`sharded`]) is one index per shard of the
//! data with a manifest, and [`merge_topk`] merges shards' answers.
//!
//! Place in the pipeline: after the data, before `octex-search`; `cargo xtask
//! build-index` drives it. Parameters are [`BuildParams`], with defaults that
//! scale with `n` and `D` and a size estimate callable before building. Long
//! stages report through [`Progress`] ([`build_with_progress`]); the library
//! draws nothing itself.

// The API is the crate root: `build`, `build_with_progress`, `BuildParams`,
// `Built`, `BuildReport`, `BuildError`, `Progress` and the enums re-exported
// below. The stage modules stay public for octex's own tests and `xtask`
// (which check each stage, the GPU's against the CPU's), hidden from the
// documented API: they change without notice.
#[doc(hidden)]
pub mod centre_knn;
#[doc(hidden)]
pub mod check;
#[cfg(feature = "gpu")]
#[doc(hidden)]
pub mod gpu_centre_knn;
#[cfg(feature = "gpu")]
#[doc(hidden)]
pub mod gpu_ripples;
#[cfg(feature = "gpu")]
#[doc(hidden)]
pub mod gpu_rows;
#[cfg(feature = "gpu")]
#[doc(hidden)]
pub mod gpu_sort_builder;
#[cfg(not(feature = "gpu"))]
mod no_gpu;
#[cfg(not(feature = "gpu"))]
use no_gpu::{gpu_ripples, gpu_rows};
#[doc(hidden)]
pub mod insert;
mod live;
#[doc(hidden)]
pub mod memory;
#[doc(hidden)]
pub mod params;
#[doc(hidden)]
pub mod pca;
#[doc(hidden)]
pub mod probes;
#[doc(hidden)]
pub mod progress;
#[doc(hidden)]
pub mod query_shell;
#[doc(hidden)]
pub mod refine;
#[doc(hidden)]
pub mod ripples;
#[doc(hidden)]
pub mod ripples_by_rows;
#[doc(hidden)]
pub mod rows;
#[doc(hidden)]
pub mod search_rows;
#[doc(hidden)]
pub mod sketch;
#[doc(hidden)]
pub mod sketch_centres;
#[doc(hidden)]
pub mod spacing;
mod structure;
use structure::structure;

use std::borrow::Cow;
use std::time::Instant;

pub use octex_index::Metric;
use octex_index::{
    Index, IndexError, IndexHeader, IndexParts, RerankVectors, VectorDtype, VectorProblem,
};
use octex_lattice::{CopyMap, CopyMapParams};
use octex_search::knn;
use rayon::prelude::*;
use serde::Serialize;

pub mod sharded;
pub use live::{stored_vector, LiveError, LiveIndex, LiveResults, COMPACT_ON_SAVE};
pub use memory::MemoryBudget;
#[cfg(not(feature = "gpu"))]
use no_gpu::Gpu as Device;
#[cfg(feature = "gpu")]
use octex_kernels::Gpu as Device;
pub use octex_search::Backend;
pub use params::{
    default_copies, BuildParams, ResolvedParams, RippleRule, RowMethod, RowOrder, SizeEstimate,
    CPU_FEW_COPIES_LIMIT,
};
use progress::Stage;
pub use progress::{NoProgress, Progress};
use ripples::FlatRipples;
pub use sharded::{merge_topk, Order, ShardAnswer, ShardError, ShardManifest, ShardedIndex};

// GPU builds take exact rows at the default row length: while the GPU's
// top-k took 32, rows of 64 silently fell back to the search passes.
const _: () = assert!(2 * params::DEFAULT_ROW_LEN <= gpu_rows::MAX_K);

/// Why a build refused its input.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("no vectors to index")]
    Empty,
    #[error("{len} values are not a whole number of vectors of dimension {dim}")]
    Ragged { len: usize, dim: usize },
    #[error("vector {row}, coordinate {col} is {value}: vectors must be finite")]
    NotFinite { row: usize, col: usize, value: f32 },
    #[error(
        "dimension {dim} is above the {max} the builder takes (its PCA holds dim x dim values)"
    )]
    DimensionTooLarge { dim: usize, max: usize },
    #[error("vector {row} has zero norm and cannot be normalised for the cosine metric")]
    ZeroVector { row: usize },
    #[error("vector {row} has squared norm {norm2:e}, above {max:e}: squared distances would overflow f32; scale the data down", max = octex_index::MAX_SQUARED_NORM)]
    HugeVector { row: usize, norm2: f64 },
    #[error("{n} vectors exceed the u32 id space")]
    TooMany { n: usize },
    #[error("{message}: lower copies or list_len, or raise memory_budget")]
    OverMemoryBudget { message: String },
    #[error("{blocks} blocks need {} dimensions, the data has {dim}", 8 * blocks)]
    TooManyBlocks { blocks: usize, dim: usize },
    #[error("copies ({copies}) and list_len ({list_len}) must be positive, sketch_width ({sketch_width}) a multiple of 16 from 16 to {max_sketch_width}")]
    Shape {
        copies: usize,
        list_len: usize,
        sketch_width: usize,
        max_sketch_width: usize,
    },
    #[error("spacings must be positive and ascending, got {spacings:?}")]
    Spacings { spacings: Vec<f32> },
    #[error("GPU exact rows take a row length of at most {max}, got {k}")]
    GpuRowLength { max: usize, k: usize },
    #[error("this octex-build was compiled without its `gpu` feature: build with `--backend cpu`")]
    NoGpuFeature,
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The build's own search (neighbour rows by search) refused or failed.
    #[error("{stage}: {source}")]
    Search {
        stage: &'static str,
        #[source]
        source: octex_search::SearchError,
    },
    #[error("GPU build: {0}")]
    #[cfg(feature = "gpu")]
    Gpu(#[from] octex_kernels::GpuError),
}

/// What a build measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BuildReport {
    /// Seconds per phase, in order.
    pub phases: Vec<(String, f64)>,
    /// `"cpu"` or `"gpu"` (where the principal coordinates and exact rows ran).
    pub backend: String,
    pub params: Option<ResolvedParams>,
    /// The memory budget the defaults were fitted to.
    pub memory_budget: Option<MemoryBudget>,
    pub spacings: Vec<f32>,
    /// Share of vectors whose copy-0 fragment holds another vector, per spacing.
    pub spacing_hit_rates: Vec<f64>,
    /// Median fragment size of a vector, per spacing.
    pub spacing_median_sizes: Vec<usize>,
    /// Stored fragments per spacing, over all copies.
    pub fragments: Vec<usize>,
    /// Of those, fragments with fewer than `l` members (their ripples hold
    /// non-members: searched, or completed from the parent under the members rule).
    pub short_fragments: Vec<usize>,
    pub key_collisions: usize,
    /// Recall of copy 0's stored ripples against the exact `l` nearest of
    /// their fragments' centres (brute force over the fragments of
    /// [`RIPPLE_RECALL_SAMPLES`] sample vectors): 1 for the paper's rule
    /// built exactly.
    pub ripple_recall: f64,
    /// Inverted-file lists probed per centre, when the ripples were searched.
    pub ripple_probes: Option<usize>,
    /// Whether the ripples were found through the neighbour rows
    /// ([`ripples_by_rows`]).
    pub ripples_through_rows: bool,
    /// Sketch width built, and the share of the variance its principal
    /// coordinates hold.
    pub sketch_width: usize,
    pub sketch_variance: f64,
    /// Share of the exact nearest neighbours of sample vectors that their
    /// neighbour rows hold ([`check::row_recall`]).
    pub row_recall: f64,
    /// Rows by search: the forward lists' recall after pass 2 and after the
    /// deeper pass, where one ran.
    pub row_search: Option<search_rows::RowSearchReport>,
    /// Share of a sample's exact neighbours an exact search over f16 vectors
    /// finds ([`check::f16_recall`]); measured when the precision is chosen.
    pub f16_recall: Option<f64>,
    /// How well the plain and the residual sketch rank a sample's neighbours
    /// ([`sketch_centres::ranking_recall`]).
    pub sketch_ranking: Option<(f64, f64)>,
    /// Residual sketch centres kept (0: the plain sketch).
    pub sketch_centres: usize,
    /// The inner-product query shell tried, and whether it was kept
    /// ([`query_shell`]).
    pub query_shell: Option<query_shell::ShellChoice>,
    /// The search defaults chosen for the index.
    pub search_defaults: Option<octex_index::SearchDefaults>,
    pub sizes: SizeEstimate,
}

/// The mark of a phase that ran beside the main path ([`BuildReport::phases`]).
pub const OVERLAPPED: &str = " (overlapped)";

/// Fragments whose stored ripples the build checks against brute force.
pub const RIPPLE_RECALL_SAMPLES: usize = 256;

impl BuildReport {
    fn phase<T>(&mut self, name: &str, f: impl FnOnce() -> T) -> T {
        let span = tracing::info_span!("build_phase", phase = name);
        let _g = span.enter();
        let t = Instant::now();
        let out = f();
        let secs = t.elapsed().as_secs_f64();
        tracing::info!(phase = name, seconds = secs, "phase done");
        self.phases.push((name.to_string(), secs));
        out
    }
    /// Seconds of the phases on the build's main path (those marked
    /// "(overlapped)" ran beside them).
    pub fn total_seconds(&self) -> f64 {
        self.phases
            .iter()
            .filter(|p| !p.0.ends_with(OVERLAPPED))
            .map(|p| p.1)
            .sum()
    }
}

/// Widest vectors the builder takes: its PCA holds a `dim x dim` covariance
/// in `f32` and `f64` and an eigendecomposition (about `24 dim^2` bytes, 6 GiB
/// here), checked before anything is allocated.
pub const MAX_DIM: usize = 16_384;

/// Check and prepare the vectors for `metric`: finite, normalised (cosine) or
/// augmented (inner product), padded to [`octex_index::MIN_STORED_DIM`].
/// Returns the stored vectors, their dimension and,
/// for inner product, the largest norm.
pub fn prepare(
    data: &[f32],
    dim: usize,
    metric: Metric,
) -> Result<(Cow<'_, [f32]>, usize, f32), BuildError> {
    if dim == 0 || data.len() % dim != 0 {
        return Err(BuildError::Ragged {
            len: data.len(),
            dim,
        });
    }
    if data.is_empty() {
        return Err(BuildError::Empty);
    }
    if dim > MAX_DIM {
        return Err(BuildError::DimensionTooLarge { dim, max: MAX_DIM });
    }
    if let Some(i) = data.iter().position(|v| !v.is_finite()) {
        return Err(BuildError::NotFinite {
            row: i / dim,
            col: i % dim,
            value: data[i],
        });
    }
    let n = data.len() / dim;
    if n >= octex_index::PAD_ID as usize {
        return Err(BuildError::TooMany { n });
    }
    // The rules are `Metric`'s (octex-index), shared with the search: norms
    // in f64, zero norms refused for cosine, huge ones for L2 and inner product.
    let norms: Vec<f64> = data.par_chunks(dim).map(Metric::squared_norm).collect();
    let refuse = |row: usize, problem: VectorProblem| match problem {
        VectorProblem::ZeroNorm => BuildError::ZeroVector { row },
        VectorProblem::TooLarge { norm2 } => BuildError::HugeVector { row, norm2 },
    };
    for (row, &n2) in norms.iter().enumerate() {
        metric.check_norm(n2).map_err(|p| refuse(row, p))?;
    }
    let sdim = metric.stored_dim(dim);
    if metric == Metric::L2 && sdim == dim {
        return Ok((Cow::Borrowed(data), dim, 0.0));
    }
    let max2 = match metric {
        Metric::InnerProduct => norms.iter().cloned().fold(0.0f64, f64::max),
        Metric::L2 | Metric::Cosine => 0.0,
    };
    let mut out = vec![0f32; n * sdim];
    out.par_chunks_mut(sdim)
        .zip(data.par_chunks(dim))
        .zip(&norms)
        .enumerate()
        .try_for_each(|(row, ((o, r), &n2))| {
            metric
                .prepare_base(r, n2, max2, o)
                .map_err(|p| refuse(row, p))
        })?;
    Ok((Cow::Owned(out), sdim, max2.sqrt() as f32))
}

/// A built index and what the build measured.
pub struct Built {
    pub index: Index,
    pub report: BuildReport,
}

/// Build an index over `data` (`n x dim`, row-major), reporting no progress.
pub fn build(
    data: &[f32],
    dim: usize,
    metric: Metric,
    params: &BuildParams,
) -> Result<Built, BuildError> {
    build_with_progress(data, dim, metric, params, &NoProgress)
}

/// [`build`], reporting the long stages to `progress` (`cargo xtask` draws
/// them as bars).
pub fn build_with_progress(
    data: &[f32],
    dim: usize,
    metric: Metric,
    params: &BuildParams,
    progress: &dyn Progress,
) -> Result<Built, BuildError> {
    let mut report = BuildReport::default();
    let (stored, sdim, max_norm) = report.phase("prepare", || prepare(data, dim, metric))?;
    let n = stored.len() / sdim;
    let (p, budget) = params.resolve_for_target(n, sdim);
    if let Some(b) = &budget {
        let typical = SizeEstimate::typical(&p).total();
        if typical > b.bytes {
            let msg = format!(
                "the index would take about {:.1} GiB (C={} l={} pmin={}), more than its memory budget of {:.1} GiB ({})",
                typical as f64 / (1u64 << 30) as f64,
                p.copies,
                p.list_len,
                p.min_fragment,
                b.bytes as f64 / (1u64 << 30) as f64,
                b.source
            );
            if params.memory_budget.is_some() {
                return Err(BuildError::OverMemoryBudget { message: msg });
            }
            tracing::warn!("{msg}");
        }
    }
    report.memory_budget = budget;
    if p.blocks == 0 || 8 * p.blocks > sdim.min(64) {
        return Err(BuildError::TooManyBlocks {
            blocks: p.blocks,
            dim: sdim,
        });
    }
    // Any multiple of 16 up to the stored dimension (rounded up to 16): the
    // sketch holds principal coordinates, and there are `sdim` of them.
    let max_sw = (octex_index::MAX_SKETCH_WIDTH as usize).min(sdim.div_ceil(16) * 16);
    if p.copies == 0
        || p.list_len == 0
        || p.sketch_width % 16 != 0
        || p.sketch_width == 0
        || p.sketch_width > max_sw
    {
        return Err(BuildError::Shape {
            copies: p.copies,
            list_len: p.list_len,
            sketch_width: p.sketch_width,
            max_sketch_width: max_sw,
        });
    }
    let x: &[f32] = &stored;
    let gpu = open_gpu(params.backend)?;
    let exact_rows = match (params.row_method, &gpu) {
        (RowMethod::Auto, Some(_)) => {
            let within_limit = n <= params.gpu_exact_rows_limit;
            let fits_top_k = p.row_candidates.min(n.saturating_sub(1)) <= gpu_rows::MAX_K;
            if within_limit && !fits_top_k {
                // Said aloud: rows of 64 once fell back here unnoticed while
                // the GPU's top-k took 32.
                tracing::warn!(
                    row_len = p.row_len,
                    row_candidates = p.row_candidates,
                    gpu_top_k = gpu_rows::MAX_K,
                    "row candidates beyond the GPU's exact top-k: neighbour rows by search"
                );
            }
            within_limit && fits_top_k
        }
        _ => p.exact_rows,
    };
    let mut p = ResolvedParams { exact_rows, ..p };
    // The precision check decides the rerank vectors (when not given) and
    // whether the GPU's exact rows may use TF32 products.
    if params.vector_dtype.is_none() || (gpu.is_some() && exact_rows) {
        report.f16_recall = Some(report.phase("precision_check", || {
            let sample = pca::sample_rows(n, check::ROW_CHECK_SAMPLE, p.seed ^ 0xf16);
            check::f16_recall(x, sdim, &sample)
        }));
        if params.vector_dtype.is_none() && report.f16_recall < Some(check::F16_MIN_RECALL) {
            p.vector_dtype = VectorDtype::F32;
        }
        tracing::info!(f16_recall = report.f16_recall, vectors = ?p.vector_dtype, "rerank precision");
    }
    if let Some(g) = &gpu {
        tracing::info!(device = %g.describe(), exact_rows, "building on the GPU");
    }

    // Neighbour rows need only the vectors: on the GPU their products run
    // first, and the host's share of them overlaps everything after.
    let shape = rows::RowShape {
        row_len: p.row_len,
        forward_head: p.forward_head,
        reverse_max: p.reverse_max,
        reverse_source: p.reverse_source,
        order: p.row_order,
        candidates: p.row_candidates,
    };
    let k_fwd = p.row_candidates.min(n.saturating_sub(1)).max(1);
    let pb = Stage::new(progress, "neighbour rows", n as u64);
    let (parts, map, choice) = std::thread::scope(|scope| -> Result<_, BuildError> {
        // Rows longer than the GPU's top-k (`--rows exact` with Lt > 64)
        // take the CPU's exact k-NN below: slower, but what was asked for.
        let gpu_rows_job = match (&gpu, exact_rows) {
            (Some(g), true) if k_fwd <= gpu_rows::MAX_K => {
                let pb = &pb;
                let tf32 = report
                    .f16_recall
                    .is_none_or(|r| r >= check::TF32_ROWS_MIN_RECALL);
                // The GPU's products run alone, before the structure: beside
                // the ripples both took longer than one after the other
                // (docs/RESULTS.md, "Build time"). The host's exact
                // re-scoring and detour order then overlap the structure.
                let found = report.phase("rows_exact_gpu", || {
                    gpu_rows::exact_knn(g, x, sdim, k_fwd, tf32, pb)
                });
                let detours = shape.order == rows::RowOrder::Detours;
                let job = scope.spawn(move || {
                    let t = Instant::now();
                    let found = found.map(|(mut ids, mut dists)| {
                        rows::rescore(x, sdim, k_fwd, &mut ids, &mut dists);
                        (ids, dists)
                    });
                    let rescore_secs = t.elapsed().as_secs_f64();
                    let found = found.map(|(mut ids, mut dists)| {
                        if detours {
                            rows::order_by_detours(&mut ids, &mut dists, k_fwd);
                        }
                        (ids, dists)
                    });
                    (
                        found,
                        rescore_secs,
                        t.elapsed().as_secs_f64() - rescore_secs,
                    )
                });
                Some((g, job))
            }
            _ => None,
        };
        let (parts, map, choice, anchors) = structure(
            x,
            sdim,
            dim,
            metric,
            max_norm,
            &p,
            gpu.is_some(),
            &mut report,
            progress,
        )?;
        let mut parts = parts;
        parts.rows = match gpu_rows_job {
            Some((g, job)) => {
                let (found, rescore_secs, detour_secs) =
                    job.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
                let (ids, dists) = found?;
                report
                    .phases
                    .push((format!("rows_rescore{OVERLAPPED}"), rescore_secs));
                if shape.order == rows::RowOrder::Detours {
                    report
                        .phases
                        .push((format!("rows_order_by_detours{OVERLAPPED}"), detour_secs));
                }
                let rev = report.phase("rows_reverse_gpu", || {
                    gpu_rows::reverse_lists(g, &ids, &dists, k_fwd, shape.reverse_source)
                })?;
                report.phase("rows_assemble", || {
                    rows::assemble_with(&ids, k_fwd, shape, &rev)
                })
            }
            None if exact_rows => report.phase("rows_exact", || {
                let (ids, dists) = knn::neighbour_rows(x, sdim, k_fwd, &|done| pb.inc(done as u64));
                rows::assemble(&ids, &dists, k_fwd, shape)
            }),
            None => {
                let (rows, searched) = report.phase("rows_search", || {
                    search_rows::rows_by_search(&mut parts, x, sdim, shape, &pb, gpu.is_some())
                })?;
                report.row_search = Some(searched);
                rows
            }
        };
        pb.finish();
        if !anchors.is_empty() {
            let stage = Stage::new(progress, "ripples through rows", p.copies as u64);
            let mut pcs = vec![0f32; n * map.basis_dim];
            report.phase("ripples_by_rows", || {
                map.principal(x, &mut pcs, true);
                ripples_by_rows::nearest_through_rows(&mut parts, &map, &pcs, &anchors, &|| {
                    stage.inc(1)
                });
            });
            stage.finish();
            report.ripple_recall = report.phase("ripple_recall", || {
                let z0 = ripples::project_copy(&pcs, &map, 0, None);
                let stored = ripples::RippleTables::of_parts(&parts);
                probes::stored_ripple_recall(
                    &map,
                    0,
                    &z0,
                    stored,
                    p.list_len,
                    RIPPLE_RECALL_SAMPLES,
                )
            });
            report.ripples_through_rows = true;
            tracing::info!(
                recall = report.ripple_recall,
                "ripples through the rows against the exact l nearest of their centres (copy 0)"
            );
        }
        report.row_recall = report.phase("row_check", || {
            let sample = pca::sample_rows(n, check::ROW_CHECK_SAMPLE, p.seed ^ 0xc4ec);
            check::row_recall(x, sdim, &parts.rows, shape.row_len, &sample)
        });
        tracing::info!(
            row_recall = report.row_recall,
            "rows hold this share of sample vectors' exact 10 nearest"
        );
        Ok((parts, map, choice))
    })?;
    let index = report.phase("finish", || Index::from_parts(parts))?;
    let (index, shell) = report.phase("query_shell", || {
        query_shell::choose(index, x, sdim, p.seed)
    })?;
    if let Some(c) = shell {
        tracing::info!(
            shell = c.shell,
            without = ?c.recall_without,
            with = ?c.recall_with,
            kept = c.kept,
            "inner-product query shell"
        );
    }
    report.query_shell = shell;
    let index = report.phase("search_defaults", || with_chosen_defaults(index))?;
    report.search_defaults = index.header().search_defaults;
    if let Some(d) = report.search_defaults {
        tracing::info!(?d, "search defaults chosen on the index's own sample");
    }
    report.sizes = sizes_of(&index);
    report.spacings = map.spacings.clone();
    report.spacing_hit_rates = choice.hit_rates;
    report.spacing_median_sizes = choice.median_sizes;
    report.params = Some(p);
    report.backend = if gpu.is_some() { "gpu" } else { "cpu" }.to_string();
    Ok(Built { index, report })
}

/// `index` with the search defaults its own sample chooses
/// ([`octex_search::Index::choose_defaults`]) in its header.
pub fn with_chosen_defaults(index: Index) -> Result<Index, BuildError> {
    let stage = "choosing the search defaults";
    let searchable = octex_search::Index::new(index);
    let chosen = searchable
        .choose_defaults()
        .map_err(|source| BuildError::Search { stage, source })?;
    let raw = searchable.into_raw().map_err(|_| BuildError::Search {
        stage,
        source: octex_search::SearchError::IndexShared,
    })?;
    Ok(raw.with_search_defaults(chosen)?)
}

/// The placement planner's sizes of a built or loaded index.
pub fn placement_sizes(index: &Index) -> octex_placement::IndexSizes {
    let h = index.header();
    sizes_of(index).for_placement(h.copies, h.list_len)
}

/// Bytes per part of a built or loaded index.
pub fn sizes_of(index: &Index) -> SizeEstimate {
    use octex_index::SectionKind::*;
    let mut s = SizeEstimate::default();
    for (kind, len) in index.section_sizes() {
        match kind {
            Sketch => s.sketch += len,
            Rows => s.rows += len,
            Ripples => s.ripples += len,
            Tables | TableKeys | TableSlots => s.key_tables += len,
            Vectors => s.vectors += len,
            _ => s.small += len,
        }
    }
    s
}

/// The GPU the build uses: none for `Cpu`, or for `Auto` without a usable
/// device; GPU 0 otherwise ([`Backend::resolve`] decides, and says why a
/// `Gpu` request cannot be met).
fn open_gpu(backend: Backend) -> Result<Option<Device>, BuildError> {
    let resolved = backend.resolve().map_err(|source| BuildError::Search {
        stage: "choosing the backend",
        source,
    })?;
    match resolved {
        Backend::Gpu => Ok(Some(Device::open(0)?)),
        _ => Ok(None),
    }
}
