//! `cargo xtask build-index`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use octex_build::{Backend, BuildParams, RowMethod, SizeEstimate};
use octex_index::{Metric, VectorDtype};

use crate::data;

#[derive(Args, Clone, Debug)]
pub struct BuildFlags {
    /// Copies C (default 16 for CPU builds up to 100k vectors, else 32;
    /// halved down to 8 when the index would not fit the memory budget).
    #[arg(long)]
    pub copies: Option<usize>,
    /// E8 blocks per copy (default 4).
    #[arg(long)]
    pub blocks: Option<usize>,
    /// Ripple length l (default 16).
    #[arg(long)]
    pub list_len: Option<usize>,
    /// What a ripple holds: nearest (the l vectors nearest to the fragment's
    /// centre, the paper's) or members (its own members, topped up from the
    /// parent fragment: octex's first rule, for comparison).
    #[arg(long, default_value = "nearest")]
    pub ripple_rule: octex_build::RippleRule,
    /// Inverted-file lists probed per fragment centre. Default: the ripples
    /// are found through the neighbour rows instead.
    #[arg(long)]
    pub ripple_probes: Option<usize>,
    /// Smallest stored fragment pmin (default by n).
    #[arg(long)]
    pub min_fragment: Option<usize>,
    /// Spacings, comma-separated, ascending (default: chosen from the data).
    #[arg(long, value_delimiter = ',')]
    pub spacings: Option<Vec<f32>>,
    /// Share of vectors whose finest fragment is populated, when spacings are
    /// chosen from the data (default 0.8).
    #[arg(long)]
    pub finest_hit_rate: Option<f64>,
    /// Most spacings when chosen from the data (default 6).
    #[arg(long)]
    pub max_spacings: Option<usize>,
    /// Sketch width w, a multiple of 16 (default by D).
    #[arg(long)]
    pub sketch_width: Option<usize>,
    /// Residual sketch (codes relative to centres from the data): 0 never, 1
    /// always (default: where it ranks a sample's neighbours better).
    #[arg(long)]
    pub sketch_centres: Option<usize>,
    /// Neighbour row length Lt (default 64, the paper's).
    #[arg(long)]
    pub row_len: Option<usize>,
    /// Forward neighbours at the head of a row (default Lt/2).
    #[arg(long)]
    pub forward_head: Option<usize>,
    /// Most reverse entries per row, k_r (default Lt/2).
    #[arg(long)]
    pub reverse_max: Option<usize>,
    /// A reverse entry of u lists u among its first k_s forward neighbours
    /// (default Lt/2).
    #[arg(long)]
    pub reverse_source: Option<usize>,
    /// Neighbour rows: auto, exact or search.
    #[arg(long, default_value = "auto")]
    pub rows: RowMethod,
    /// Order of the forward neighbours a row takes its head and reverse
    /// entries from: detours (fewest two-edge detours first, chosen from
    /// 2 Lt neighbours; the default) or distance (nearest first, the paper's).
    #[arg(long, default_value = "detours")]
    pub row_order: octex_build::RowOrder,
    /// Forward neighbours found per vector before its row is assembled
    /// (default Lt in distance order, 2 Lt in detour order).
    #[arg(long)]
    pub row_candidates: Option<usize>,
    /// Rerank vectors in f32 (default: f16 unless the rounding would lose
    /// neighbours of a sample).
    #[arg(long)]
    pub f32_vectors: bool,
    /// Seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// GiB the index may take (default: 80% of the GPU's memory when it
    /// builds on a GPU, else half the host's); the defaults shrink to fit it,
    /// and a build that still does not fit a budget given here is refused.
    #[arg(long)]
    pub memory_budget_gib: Option<f64>,
}

impl BuildFlags {
    pub fn params(&self, backend: Backend) -> Result<BuildParams> {
        let mut p = BuildParams {
            backend: backend.resolve()?,
            copies: self.copies,
            blocks: self.blocks,
            list_len: self.list_len,
            min_fragment: self.min_fragment,
            ..Default::default()
        };
        p.spacings = self.spacings.clone();
        if let Some(h) = self.finest_hit_rate {
            p.finest_hit_rate = h;
        }
        if let Some(m) = self.max_spacings {
            p.max_spacings = m;
        }
        p.ripple_rule = self.ripple_rule;
        p.ripple_probes = self.ripple_probes;
        p.sketch_width = self.sketch_width;
        p.sketch_centres = self.sketch_centres;
        p.row_len = self.row_len;
        p.forward_head = self.forward_head;
        p.reverse_max = self.reverse_max;
        p.reverse_source = self.reverse_source;
        p.row_method = self.rows;
        p.row_order = self.row_order;
        p.row_candidates = self.row_candidates;
        if self.f32_vectors {
            p.vector_dtype = Some(VectorDtype::F32);
        }
        if let Some(s) = self.seed {
            p.seed = s;
        }
        if let Some(g) = self.memory_budget_gib {
            if !(g.is_finite() && g > 0.0) {
                anyhow::bail!("--memory-budget-gib {g}: expected a positive number");
            }
            p.memory_budget = Some((g * (1u64 << 30) as f64) as u64);
        }
        Ok(p)
    }
}

#[derive(Args, Debug)]
pub struct BuildArgs {
    /// Base vectors (fvecs, bvecs, npy), or a fetched data set's name.
    #[arg(long)]
    pub base: String,
    /// l2, cosine or ip (default: the data set's, else l2).
    #[arg(long)]
    pub metric: Option<Metric>,
    /// Output index file.
    #[arg(long)]
    pub out: PathBuf,
    /// Where the heavy phases run: auto (the GPU when present), cpu or gpu.
    /// auto (the GPU when one is usable), cpu or gpu.
    #[arg(long, default_value_t = Backend::Auto)]
    pub backend: Backend,
    #[command(flatten)]
    pub flags: BuildFlags,
}

/// Base vectors and metric from a file path or a data set name.
pub fn resolve_base(
    base: &str,
    metric: Option<Metric>,
    root: &Path,
) -> Result<(Vec<f32>, usize, Metric)> {
    let path = Path::new(base);
    if path.is_file() {
        let (v, d) = data::read_vectors(path)?;
        return Ok((v, d, metric.unwrap_or(Metric::L2)));
    }
    // A path (a separator or a file extension) that is not there is a missing
    // file, not a data set to fetch.
    let looks_like_path = base.contains(['/', '\\']) || path.extension().is_some();
    if looks_like_path && !path.join("manifest.json").exists() {
        if path.is_dir() {
            bail!("{base}: a folder without manifest.json (pass a vector file or a data set name)");
        }
        bail!("{base}: no such file");
    }
    let ds = data::Dataset::open(base, root)?;
    let (v, d) = data::read_vectors(&ds.base())?;
    Ok((v, d, metric.unwrap_or(ds.metric()?)))
}

pub fn run(args: BuildArgs, root: &Path) -> Result<()> {
    // Before the build, not after it: the output must be writable.
    octex_index::atomic::check_writable(&args.out)
        .with_context(|| format!("--out {}", args.out.display()))?;
    let (base, dim, metric) = resolve_base(&args.base, args.metric, root)?;
    let params = args.flags.params(args.backend)?;
    let n = base.len() / dim;
    let (resolved, budget) = params.resolve_for_target(n, metric.stored_dim(dim));
    if let Some(b) = &budget {
        println!(
            "memory budget {:.1} GiB ({}); typical size of these parameters {:.1} GiB",
            b.bytes as f64 / (1u64 << 30) as f64,
            b.source,
            SizeEstimate::typical(&resolved).total() as f64 / (1u64 << 30) as f64
        );
    }
    println!(
        "building over {n} x {dim} ({metric}) on {} threads: C={} b={} l={} pmin={} w={} Lt={} rows={}",
        rayon::current_num_threads(),
        resolved.copies,
        resolved.blocks,
        resolved.list_len,
        resolved.min_fragment,
        if resolved.sketch_width_auto {
            format!("auto (<= {})", resolved.sketch_width)
        } else {
            resolved.sketch_width.to_string()
        },
        resolved.row_len,
        if resolved.exact_rows { "exact" } else { "search" }
    );
    if octex_search::gpu_available() && params.backend == Backend::Gpu {
        println!(
            "a GPU is present: principal coordinates and exact rows (n <= {}) run there",
            params.gpu_exact_rows_limit
        );
    }
    println!(
        "size estimate before build (upper bound): {}",
        SizeEstimate::estimate(&resolved, resolved.max_spacings, None)
    );
    let t = Instant::now();
    let built = octex_build::build_with_progress(
        &base,
        dim,
        metric,
        &params,
        &crate::progress::Bars::default(),
    )?;
    let wall = t.elapsed().as_secs_f64();
    print_report(&built.report, n);
    println!("backend: {}", built.report.backend);
    built
        .index
        .save(&args.out)
        .with_context(|| format!("saving {}", args.out.display()))?;
    println!(
        "built in {wall:.1} s; saved {} ({:.1} MiB)",
        args.out.display(),
        built.index.as_bytes().len() as f64 / 1048576.0
    );
    if n > 10 {
        print_reach(&octex_search::Index::new(built.index))?;
    }
    Ok(())
}

/// The index's check of what its search reaches ([`octex_search::Index::reach`]),
/// with a warning and what to rebuild with when it stays below 0.99.
pub fn print_reach(index: &octex_search::Index) -> Result<()> {
    let t = Instant::now();
    let reach = index.reach(10)?;
    let deepest = octex_search::deepest_params(index.raw().header().list_len as usize);
    println!(
        "self-check ({} held-back sample queries, {:.1} s): recall@10 {:.4} at the default search, {:.4} at the deepest (S={} W={} R={})",
        octex_search::TUNE_QUERIES.min(index.len() / 2),
        t.elapsed().as_secs_f64(),
        reach.default_recall,
        reach.best_recall,
        deepest.start_points,
        deepest.waves,
        deepest.rerank
    );
    if let Some(advice) = reach.advice(index) {
        println!("warning: {advice}");
    }
    Ok(())
}

pub fn print_report(r: &octex_build::BuildReport, n: usize) {
    for (name, secs) in &r.phases {
        println!("  phase {name:<15} {secs:8.2} s");
    }
    println!(
        "  spacings {:?}",
        r.spacings
            .iter()
            .map(|s| format!("{s:.2}"))
            .collect::<Vec<_>>()
    );
    println!(
        "  copy-0 hit rate per spacing {:?}",
        r.spacing_hit_rates
            .iter()
            .map(|s| format!("{s:.2}"))
            .collect::<Vec<_>>()
    );
    println!(
        "  median fragment size per spacing {:?}",
        r.spacing_median_sizes
    );
    println!(
        "  stored fragments per spacing (all copies) {:?}, of them with fewer than l members {:?}, key collisions {}",
        r.fragments, r.short_fragments, r.key_collisions
    );
    println!(
        "  sketch: {} int8 principal coordinates, holding {:.3} of the variance; {}",
        r.sketch_width,
        r.sketch_variance,
        match (r.sketch_centres, r.sketch_ranking) {
            (0, Some((plain, _))) => format!("one grid (ranks {plain:.3} of a sample's neighbours)"),
            (k, Some((plain, resid))) => format!(
                "coded relative to {k} centres (ranks {resid:.3} of a sample's neighbours, one grid {plain:.3})"
            ),
            _ => "one grid".to_string(),
        }
    );
    println!(
        "  neighbour rows: hold {:.4} of the exact {} nearest of {} sample vectors",
        r.row_recall,
        octex_build::check::ROW_CHECK_K,
        octex_build::check::ROW_CHECK_SAMPLE
    );
    if let Some(rs) = r.row_search {
        let third = match (rs.deep_pass_trial, rs.deep_pass_recall) {
            (_, Some(deep)) => format!(", {deep:.4} after a deeper third"),
            (Some(trial), None) => {
                format!("; a deeper third gave the sample {trial:.4}, not run on all")
            }
            (None, None) => String::new(),
        };
        println!(
            "  rows by search: forward lists held {:.4} of the sample's exact neighbours after two passes{third}",
            rs.pass2_recall
        );
    }
    if let Some(c) = r.query_shell {
        println!(
            "  inner-product queries start at norm {:.3} of the largest: {} (sample recall@10 {:.4} / {:.4} against {:.4} / {:.4} left where they are)",
            c.shell,
            if c.kept { "kept" } else { "not kept" },
            c.recall_with[0],
            c.recall_with[1],
            c.recall_without[0],
            c.recall_without[1]
        );
    }
    if let Some(d) = r.search_defaults {
        println!(
            "  search defaults: r={} S={} W={} R={} (recall@10 {:.4} on the held-back sample; chosen for {})",
            d.read_depth, d.start_points, d.waves, d.rerank, d.held_out_recall, d.target
        );
    }
    if let (Some(f16), Some(p)) = (r.f16_recall, &r.params) {
        println!(
            "  rerank vectors: {:?} (exact search over f16 vectors finds {f16:.4} of the exact {} nearest)",
            p.vector_dtype,
            octex_build::check::ROW_CHECK_K
        );
    }
    let how = match r.ripple_probes {
        Some(p) => format!("searched, {p} lists probed per centre"),
        None if r.ripples_through_rows => "found through the neighbour rows".to_string(),
        None => "member lists".to_string(),
    };
    println!(
        "  ripples ({how}): recall {:.4} of the exact l nearest to their centres (copy 0, fragments of {} sample vectors)",
        r.ripple_recall,
        octex_build::RIPPLE_RECALL_SAMPLES
    );
    println!(
        "  bytes: {}; {:.0} bytes per vector",
        r.sizes,
        r.sizes.total() as f64 / n.max(1) as f64
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `--base` that names a missing file says so (not "fetch it"); a bare
    /// unknown name still points at `fetch`; an `--out` in a missing folder is
    /// refused before any build.
    #[test]
    fn missing_paths_get_clear_messages() {
        let root = std::env::temp_dir().join(format!("octex-xtask-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let err = |base: &str| resolve_base(base, None, &root).err().unwrap().to_string();
        assert_eq!(err("bad/nope.fvecs"), "bad/nope.fvecs: no such file");
        assert_eq!(err("nope.fvecs"), "nope.fvecs: no such file");
        assert!(err(root.to_str().unwrap()).contains("without manifest.json"));
        assert!(err("nope").contains("cargo xtask fetch nope"));
        let out = root.join("missing/x.octex");
        let e = octex_index::atomic::check_writable(&out).unwrap_err();
        assert!(e.to_string().contains("no such folder"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
