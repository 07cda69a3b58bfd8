//! Build parameters, their data-dependent defaults, and the size estimate.

use octex_index::VectorDtype;

pub use crate::memory::MemoryBudget;
use octex_search::Backend;
use serde::{Deserialize, Serialize};

pub use crate::ripples::RippleRule;
pub use crate::rows::RowOrder;

/// How neighbour rows are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RowMethod {
    /// Exact k-NN for `n <= exact_rows_limit`, the index's own search above.
    Auto,
    /// Exact k-NN by blocked matrix products (cost `n^2 D`).
    Exact,
    /// The paper's two passes of the index's own search (sketch-ranked).
    Search,
}

impl std::str::FromStr for RowMethod {
    type Err = String;
    /// `auto`, `exact` or `search`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(RowMethod::Auto),
            "exact" => Ok(RowMethod::Exact),
            "search" => Ok(RowMethod::Search),
            o => Err(format!("row method {o:?}: auto, exact or search")),
        }
    }
}

/// Default neighbour row length `Lt`: the paper's 64. Hard data, which needs
/// several waves, gains more than easy data loses against rows of 32
/// (`docs/RESULTS.md`, "Decisions").
pub const DEFAULT_ROW_LEN: usize = 64;

/// Default reverse entries of a row of `row_len` ids: at most `k_r = Lt / 2`
/// reverse entries, each a vector that lists the row's owner among its first
/// `k_s = Lt / 2` forward neighbours. The paper fixes the row's structure
/// (`k_f` forward, up to `k_r` reverse, the rest forward) but not the numbers;
/// `Lt / 2` misses fewer neighbours than `Lt / 4` on hard data
/// (`docs/RESULTS.md`, "Decisions").
pub fn default_reverse_entries(row_len: usize) -> usize {
    row_len / 2
}

/// Largest index that the CPU backend's default of 16 copies serves; above it,
/// and for builds on a GPU, the default is 32.
pub const CPU_FEW_COPIES_LIMIT: usize = 100_000;

/// Default copies `C` for `n` vectors, by where the build (and so, as a rule,
/// the search) runs: 16 on the CPU up to [`CPU_FEW_COPIES_LIMIT`] vectors, else 32.
/// On small CPU indexes fewer copies reach the same recall for less work a
/// query (docs/RESULTS.md, "Decisions").
pub fn default_copies(n: usize, on_gpu: bool) -> usize {
    if !on_gpu && n <= CPU_FEW_COPIES_LIMIT {
        16
    } else {
        32
    }
}

/// What to build. `None` fields take defaults that scale with `n` and `D`
/// (see [`BuildParams::resolve`]); every field is documented with its default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BuildParams {
    /// Copies `C` (random projections). Default [`default_copies`]: 16 for
    /// CPU builds up to 100k vectors, else 32.
    pub copies: Option<usize>,
    /// E8 blocks per copy `b`. Default 4 (32 projected dimensions), fewer when
    /// `D < 32` (`D / 8`; `D >= 8` is required).
    pub blocks: Option<usize>,
    /// Ripple length `l`: ids stored per fragment. Default 16.
    pub list_len: Option<usize>,
    /// What a fragment's ripple holds. Default [`RippleRule::Nearest`], the
    /// paper's: the `l` vectors nearest to the fragment's centre.
    pub ripple_rule: RippleRule,
    /// Inverted-file lists probed per fragment centre when the ripples are
    /// searched ([`RippleRule::Nearest`] with `pmin < l`), of `sqrt(n)` lists.
    /// `None` (the default, on both backends) finds those ripples through
    /// the neighbour rows instead ([`crate::ripples_by_rows`]); a count asks
    /// for the inverted file.
    pub ripple_probes: Option<usize>,
    /// Smallest fragment (members) that gets a stored ripple, `pmin`. Default 1
    /// below 2M vectors, 2 up to 20M, 10 above (memory).
    pub min_fragment: Option<usize>,
    /// Spacings in units of the projected standard deviation, ascending. Default:
    /// chosen from the data (see `spacing`): the finest where about
    /// `finest_hit_rate` of vectors find another vector in their fragment, then
    /// geometric steps of `spacing_ratio` until the median vector's fragment holds
    /// `l` members, at most `max_spacings`.
    pub spacings: Option<Vec<f32>>,
    /// Target share of vectors whose finest fragment is populated. Default 0.8:
    /// the same search recall as 0.5 (GloVe-50 and Fashion-MNIST) with 40-60%
    /// less memory for ripples and key tables.
    pub finest_hit_rate: f64,
    /// Ratio of consecutive spacings. Default 1.37.
    pub spacing_ratio: f64,
    /// Most spacings. Default 6.
    pub max_spacings: usize,
    /// Sketch width `w` (int8 principal coordinates, a multiple of 16, up to
    /// `D` rounded up to 16 and at most 1024). Default: chosen from the data,
    /// the fewest leading principal coordinates that hold
    /// [`crate::sketch::AUTO_VARIANCE`] of the variance
    /// ([`crate::sketch::width_for_spectra`]).
    pub sketch_width: Option<usize>,
    /// Residual sketch: `Some(0)` never, `Some(_)` always (centres from the
    /// data), `None` (default) where it ranks a sample's neighbours better
    /// ([`crate::sketch_centres`]).
    pub sketch_centres: Option<usize>,
    /// Neighbour row length `Lt`. Default [`DEFAULT_ROW_LEN`] (64).
    pub row_len: Option<usize>,
    /// Forward neighbours at the head of a row, `k_f`. Default `Lt / 2`.
    pub forward_head: Option<usize>,
    /// Most reverse entries per row, `k_r`. Default `Lt / 2`
    /// ([`default_reverse_entries`]).
    pub reverse_max: Option<usize>,
    /// `v` is a reverse entry of `u` when `u` is among `v`'s first `k_s` forward
    /// neighbours. Default `Lt / 2` ([`default_reverse_entries`]).
    pub reverse_source: Option<usize>,
    /// The order of the forward neighbours a row takes its head and its
    /// reverse entries from. Default [`RowOrder::Detours`], from
    /// [`Self::row_candidates`] = `2 Lt` exact neighbours: a departure from
    /// the paper's distance order that gains recall on data that needs
    /// several waves (`docs/RESULTS.md`, "Decisions"). The build pays
    /// `n (2 Lt)^2` rank lookups for it.
    #[serde(default)]
    pub row_order: RowOrder,
    /// Forward neighbours found per vector before its row is assembled, `k`
    /// (at least `Lt`). Default `Lt` in distance order, `2 Lt` in detour
    /// order, which then chooses a row's entries from twice as many.
    #[serde(default)]
    pub row_candidates: Option<usize>,
    /// How rows are computed. Default [`RowMethod::Auto`].
    pub row_method: RowMethod,
    /// Largest `n` for exact rows under [`RowMethod::Auto`]. Default 20,000: above
    /// it the two search passes give rows of the same search recall in a
    /// fraction of the time (Fashion-MNIST: 8.3 s vs 41 s, recall@10 0.9721 vs
    /// 0.9723 at r=16 S=16 W=1 R=32).
    pub exact_rows_limit: usize,
    /// Largest `n` for exact rows under [`RowMethod::Auto`] when the GPU builds
    /// them (cuBLAS products + top-k, `n^2 D` on the GPU). Default 10,000,000.
    pub gpu_exact_rows_limit: usize,
    /// Where the heavy phases run. Default [`Backend::Auto`]. The GPU
    /// computes the principal coordinates, spacing probes, ripples and key
    /// tables, sketch, exact neighbour rows and reverse entries; the index is
    /// the same format either way.
    pub backend: Backend,
    /// Precision of the rerank vectors. Default: f16, unless rounding to f16
    /// would lose more than [`crate::check::F16_MIN_RECALL`] allows of a
    /// sample's exact neighbours ([`crate::check::f16_recall`]), then f32.
    pub vector_dtype: Option<VectorDtype>,
    /// Rows sampled for PCA and for the sketch scales. Default 100,000.
    pub pca_sample: usize,
    /// Seed of every random choice. Default fixed, so builds are reproducible.
    pub seed: u64,
    /// Bytes the index may take in the memory that will hold it for search.
    /// Default: chosen from the target ([`MemoryBudget::for_backend`]): 80% of
    /// GPU 0's memory when the build runs on a GPU, else half the host's.
    /// Defaults whose [`SizeEstimate::typical`] size would not fit shrink,
    /// in this order: `min_fragment` to 2 then 10, `copies` halved down to 8,
    /// `list_len` halved down to 8. Values set explicitly are kept; a build
    /// still over a budget set here is refused before it starts, one over
    /// the default budget is logged as a warning.
    #[serde(default)]
    pub memory_budget: Option<u64>,
}

impl Default for BuildParams {
    fn default() -> Self {
        Self {
            copies: None,
            blocks: None,
            list_len: None,
            ripple_rule: RippleRule::Nearest,
            ripple_probes: None,
            min_fragment: None,
            spacings: None,
            finest_hit_rate: 0.8,
            spacing_ratio: 1.37,
            max_spacings: 6,
            sketch_width: None,
            sketch_centres: None,
            row_len: None,
            forward_head: None,
            reverse_max: None,
            reverse_source: None,
            row_order: RowOrder::Detours,
            row_candidates: None,
            row_method: RowMethod::Auto,
            exact_rows_limit: 20_000,
            gpu_exact_rows_limit: 10_000_000,
            backend: Backend::Auto,
            vector_dtype: None,
            pca_sample: 100_000,
            seed: 0x0c7e_5eed,
            memory_budget: None,
        }
    }
}

/// [`BuildParams`] with every default filled in for one data set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResolvedParams {
    pub n: usize,
    pub dim: usize,
    pub copies: usize,
    pub blocks: usize,
    pub list_len: usize,
    pub ripple_rule: RippleRule,
    pub ripple_probes: Option<usize>,
    pub min_fragment: usize,
    pub spacings: Option<Vec<f32>>,
    pub finest_hit_rate: f64,
    pub spacing_ratio: f64,
    pub max_spacings: usize,
    /// The width asked for; when the data chooses it ([`Self::sketch_width_auto`]),
    /// its upper bound (for size estimates) until the PCA decides.
    pub sketch_width: usize,
    /// The sketch width is chosen from the PCA spectrum at build time.
    pub sketch_width_auto: bool,
    #[serde(default)]
    pub sketch_centres: Option<usize>,
    pub row_len: usize,
    pub forward_head: usize,
    pub reverse_max: usize,
    pub reverse_source: usize,
    #[serde(default)]
    pub row_order: RowOrder,
    #[serde(default)]
    pub row_candidates: usize,
    pub exact_rows: bool,
    pub vector_dtype: VectorDtype,
    pub pca_sample: usize,
    pub seed: u64,
}

impl BuildParams {
    /// Fill in defaults for `n` vectors of stored dimension `dim`, fitted to
    /// the memory budget: [`Self::memory_budget`] if set, else the target's
    /// ([`MemoryBudget::for_backend`]), which it returns too. The build and
    /// the CLI both resolve through here.
    pub fn resolve_for_target(
        &self,
        n: usize,
        dim: usize,
    ) -> (ResolvedParams, Option<MemoryBudget>) {
        let budget = match self.memory_budget {
            Some(bytes) => Some(MemoryBudget::explicit(bytes)),
            None => MemoryBudget::for_backend(self.backend),
        };
        let on_gpu = self.backend.resolve().ok() == Some(Backend::Gpu);
        let p = self.resolve_on(n, dim, on_gpu);
        let p = match &budget {
            Some(b) => self.fit_memory(p, b.bytes),
            None => p,
        };
        (p, budget)
    }

    /// Shrink the defaults of `p` (never a value set explicitly) until its
    /// typical size fits `budget` bytes or nothing is left to shrink.
    fn fit_memory(&self, mut p: ResolvedParams, budget: u64) -> ResolvedParams {
        while SizeEstimate::typical(&p).total() > budget {
            if self.min_fragment.is_none() && p.min_fragment < 10 {
                p.min_fragment = if p.min_fragment < 2 { 2 } else { 10 };
            } else if self.copies.is_none() && p.copies > 8 {
                p.copies /= 2;
            } else if self.list_len.is_none() && p.list_len > 8 {
                p.list_len /= 2;
            } else {
                break;
            }
        }
        p
    }

    /// Fill in defaults for `n` vectors of stored dimension `dim`, without
    /// a memory budget and without probing for a GPU: [`Backend::Auto`]
    /// counts as the CPU (see [`Self::resolve_for_target`]).
    pub fn resolve(&self, n: usize, dim: usize) -> ResolvedParams {
        self.resolve_on(n, dim, self.backend == Backend::Gpu)
    }

    fn resolve_on(&self, n: usize, dim: usize, on_gpu: bool) -> ResolvedParams {
        let row_len = self.row_len.unwrap_or(DEFAULT_ROW_LEN).max(1);
        ResolvedParams {
            n,
            dim,
            copies: self.copies.unwrap_or(default_copies(n, on_gpu)),
            blocks: self.blocks.unwrap_or((dim / 8).clamp(1, 4)),
            list_len: self.list_len.unwrap_or(16),
            ripple_rule: self.ripple_rule,
            ripple_probes: self.ripple_probes.map(|p| p.max(1)),
            min_fragment: self.min_fragment.unwrap_or(match n {
                0..=2_000_000 => 1,
                2_000_001..=20_000_000 => 2,
                _ => 10,
            }),
            spacings: self.spacings.clone(),
            finest_hit_rate: self.finest_hit_rate,
            spacing_ratio: self.spacing_ratio,
            max_spacings: self.max_spacings.max(1),
            sketch_width: self
                .sketch_width
                .unwrap_or(crate::sketch::auto_width_bound(dim)),
            sketch_width_auto: self.sketch_width.is_none(),
            sketch_centres: self.sketch_centres,
            row_len,
            forward_head: self.forward_head.unwrap_or(row_len / 2).min(row_len),
            reverse_max: self.reverse_max.unwrap_or(default_reverse_entries(row_len)),
            reverse_source: self
                .reverse_source
                .unwrap_or(default_reverse_entries(row_len).max(1)),
            row_order: self.row_order,
            row_candidates: self
                .row_candidates
                .unwrap_or(match self.row_order {
                    RowOrder::Distance => row_len,
                    RowOrder::Detours => 2 * row_len,
                })
                .max(row_len),
            exact_rows: match self.row_method {
                RowMethod::Exact => true,
                RowMethod::Search => false,
                RowMethod::Auto => n <= self.exact_rows_limit,
            },
            vector_dtype: self.vector_dtype.unwrap_or(VectorDtype::F16),
            pca_sample: self.pca_sample.max(1),
            seed: self.seed,
        }
    }
}

/// Bytes of each part of an index.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SizeEstimate {
    pub sketch: u64,
    pub rows: u64,
    pub ripples: u64,
    pub key_tables: u64,
    pub vectors: u64,
    /// Copy maps, sketch basis and the like.
    pub small: u64,
}

impl SizeEstimate {
    /// The placement planner's view of these sizes, measured at `copies`
    /// copies of ripples of `list_len` entries.
    pub fn for_placement(&self, copies: u32, list_len: u32) -> octex_placement::IndexSizes {
        octex_placement::IndexSizes {
            copies,
            list_len,
            ripples: self.ripples,
            key_tables: self.key_tables,
            sketch: self.sketch,
            rows: self.rows,
            vectors: self.vectors,
            small: self.small,
        }
    }

    pub fn total(&self) -> u64 {
        self.sketch + self.rows + self.ripples + self.key_tables + self.vectors + self.small
    }

    /// The estimate for `p`. `fragments_per_copy[s]` is the number of stored
    /// fragments of one copy at spacing `s` when known (after the spacings are
    /// chosen); otherwise an upper bound of `n` at the finest spacing, halving
    /// with every coarser one, over `spacings` spacings.
    pub fn estimate(
        p: &ResolvedParams,
        spacings: usize,
        fragments_per_copy: Option<&[usize]>,
    ) -> Self {
        let n = p.n as u64;
        let per_copy: u64 = match fragments_per_copy {
            Some(f) => f.iter().map(|&v| v as u64).sum(),
            None => (0..spacings).map(|s| n >> s).sum(),
        };
        let slots: u64 = match fragments_per_copy {
            Some(f) => f
                .iter()
                .map(|&v| octex_index::table::table_capacity(v) as u64)
                .sum(),
            None => 2 * per_copy,
        };
        let width = (p.copies * 8 * p.blocks) as u64;
        let vsize = match p.vector_dtype {
            VectorDtype::F16 => 2,
            VectorDtype::F32 => 4,
        };
        Self {
            sketch: n * p.sketch_width as u64,
            rows: n * p.row_len as u64 * 4,
            ripples: p.copies as u64 * per_copy * p.list_len as u64 * 4,
            key_tables: p.copies as u64 * slots * 12,
            vectors: n * p.dim as u64 * vsize,
            small: 4 * (p.dim as u64 * (width + p.sketch_width as u64) + 3 * width),
        }
    }
}

/// Stored fragments per copy and vector, over all spacings, at `pmin = 1`,
/// for [`SizeEstimate::typical`]: 0.36-0.42 measured on Fashion-MNIST,
/// GloVe-50, the text set and synth-1m; with `pmin` members each, a spacing
/// holds at most `n / pmin`, so the typical count is taken as this over `pmin`.
pub const TYPICAL_FRAGMENTS_PER_VECTOR: f64 = 0.5;

impl SizeEstimate {
    /// The size of a typical build of `p` (fragments per copy
    /// [`TYPICAL_FRAGMENTS_PER_VECTOR`] `* n / pmin`), for fitting the
    /// defaults to a memory budget. Against the built sizes at the defaults:
    /// Fashion-MNIST -2%, synth-1m +3%, the text set (C = 64) +14%, GloVe-50
    /// +24% (its key tables round up to a power of two). [`SizeEstimate::estimate`]
    /// without fragment counts is the upper bound.
    pub fn typical(p: &ResolvedParams) -> Self {
        let fragments =
            (p.n as f64 * TYPICAL_FRAGMENTS_PER_VECTOR / p.min_fragment.max(1) as f64) as usize;
        Self::estimate(p, 1, Some(&[fragments.max(1)]))
    }
}

impl std::fmt::Display for SizeEstimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        write!(
            f,
            "ripples {:.1} MiB, key tables {:.1} MiB, neighbour rows {:.1} MiB, sketch {:.1} MiB, rerank vectors {:.1} MiB, maps {:.1} MiB; total {:.1} MiB",
            mib(self.ripples),
            mib(self.key_tables),
            mib(self.rows),
            mib(self.sketch),
            mib(self.vectors),
            mib(self.small),
            mib(self.total())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut BuildParams)) -> BuildParams {
        let mut p = BuildParams::default();
        f(&mut p);
        p
    }

    fn shape(p: &ResolvedParams) -> (usize, usize, usize) {
        (p.copies, p.list_len, p.min_fragment)
    }

    #[test]
    fn copies_default_to_16_for_small_cpu_builds_and_32_otherwise() {
        let copies = |n, backend| with(|p| p.backend = backend).resolve(n, 64).copies;
        assert_eq!(copies(CPU_FEW_COPIES_LIMIT, Backend::Cpu), 16);
        assert_eq!(copies(CPU_FEW_COPIES_LIMIT + 1, Backend::Cpu), 32);
        assert_eq!(copies(1_000, Backend::Gpu), 32);
        assert_eq!(with(|p| p.copies = Some(24)).resolve(1_000, 64).copies, 24);
    }

    #[test]
    fn defaults_shrink_to_the_memory_budget_in_order_and_explicit_values_stay() {
        let (n, dim) = (100_000_000, 96);
        let typical =
            |f: fn(&mut BuildParams)| SizeEstimate::typical(&with(f).resolve(n, dim)).total();
        let (roomy, budget) = with(|p| p.memory_budget = Some(1 << 50)).resolve_for_target(n, dim);
        assert_eq!(shape(&roomy), (32, 16, 10));
        assert_eq!(budget.unwrap().source, "set by the caller");
        // Copies halve before the ripples shorten.
        let half = typical(|p| p.copies = Some(16));
        let (p, _) = with(|p| p.memory_budget = Some(half)).resolve_for_target(n, dim);
        assert_eq!(shape(&p), (16, 16, 10));
        // The floor: 8 copies of 8 ids; below it nothing shrinks further.
        let floor = typical(|p| {
            p.copies = Some(8);
            p.list_len = Some(8);
        });
        for budget in [floor, floor / 2] {
            let (p, _) = with(|p| p.memory_budget = Some(budget)).resolve_for_target(n, dim);
            assert_eq!(shape(&p), (8, 8, 10), "budget {budget}");
        }
        // Values set explicitly are kept.
        let (p, _) = with(|p| {
            p.copies = Some(64);
            p.memory_budget = Some(floor);
        })
        .resolve_for_target(n, dim);
        assert_eq!(shape(&p), (64, 8, 10));
        // Below 2M vectors pmin is 1 by default, and rises first.
        let n = 1_000_000;
        let at_pmin2 =
            SizeEstimate::typical(&with(|p| p.min_fragment = Some(2)).resolve(n, dim)).total();
        let (p, _) = with(|p| p.memory_budget = Some(at_pmin2)).resolve_for_target(n, dim);
        assert_eq!(shape(&p), (32, 16, 2));
    }

    #[test]
    fn rows_choose_from_twice_their_length_in_detour_order_only() {
        let rows = |f: fn(&mut BuildParams)| {
            let p = with(f).resolve(1_000, 16);
            (p.row_order, p.row_len, p.row_candidates)
        };
        assert_eq!(rows(|_| {}), (RowOrder::Detours, 64, 128));
        assert_eq!(
            rows(|p| p.row_order = RowOrder::Distance),
            (RowOrder::Distance, 64, 64)
        );
        assert_eq!(rows(|p| p.row_len = Some(32)), (RowOrder::Detours, 32, 64));
        // An explicit count is kept, but never below the row length.
        assert_eq!(
            rows(|p| p.row_candidates = Some(96)),
            (RowOrder::Detours, 64, 96)
        );
        assert_eq!(
            rows(|p| p.row_candidates = Some(8)),
            (RowOrder::Detours, 64, 64)
        );
    }

    #[test]
    fn a_build_over_a_budget_it_was_given_is_refused_before_it_starts() {
        let dim = 16;
        let data: Vec<f32> = (0..2_000 * dim)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0)
            .collect();
        let tiny = with(|p| {
            p.copies = Some(8);
            p.memory_budget = Some(10_000);
        });
        let Err(err) = crate::build(&data, dim, octex_index::Metric::L2, &tiny) else {
            panic!("a 10 kB budget was accepted");
        };
        assert!(
            err.to_string().contains("more than its memory budget"),
            "{err}"
        );
        let roomy = with(|p| {
            p.copies = Some(8);
            p.memory_budget = Some(1 << 30);
        });
        let built = crate::build(&data, dim, octex_index::Metric::L2, &roomy).unwrap();
        assert_eq!(built.report.memory_budget.unwrap().bytes, 1 << 30);
    }
}
