//! `cargo xtask search`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use octex_search::{
    Backend, BackendSearcher, FragmentLookupChoice, GpuOptions, GpuTuning, Index, ProjectionChoice,
    SearchKernelChoice, SearchParams,
};

use crate::data;

#[derive(Args, Clone, Copy, Debug)]
pub struct SearchFlags {
    /// r: ids read per copy's ripple (default: the index's own, as for S, W, R).
    #[arg(long)]
    pub read_depth: Option<usize>,
    /// S: start points per wave.
    #[arg(long)]
    pub start_points: Option<usize>,
    /// W: waves.
    #[arg(long)]
    pub waves: Option<usize>,
    /// R: rerank depth.
    #[arg(long)]
    pub rerank: Option<usize>,
    /// Rerank the best R exactly in every wave and start the next wave from
    /// the best by exact distance (the paper's mode when vectors are resident).
    #[arg(long)]
    pub wave_rerank: bool,
    /// A recall@k target: the parameters are tuned for it on a sample of the
    /// queries (`Index::tune_for_recall_on`) instead of taken from r, S, W, R.
    #[arg(long)]
    pub recall: Option<f64>,
}

impl SearchFlags {
    /// The parameters given (those left out: the index's defaults), or (with
    /// `--recall`) tuned for the target on a sample of `queries`.
    pub fn params_for(&self, index: &Index, k: usize, queries: &[f32]) -> Result<SearchParams> {
        let Some(target) = self.recall else {
            let d = index.default_params();
            return Ok(SearchParams {
                read_depth: self.read_depth.unwrap_or(d.read_depth),
                start_points: self.start_points.unwrap_or(d.start_points),
                waves: self.waves.unwrap_or(d.waves),
                rerank: self.rerank.unwrap_or(d.rerank),
                wave_rerank: self.wave_rerank,
            });
        };
        let t = Instant::now();
        let tuned = index.tune_for_recall_on(queries, target, k)?;
        eprintln!(
            "--recall {target}: {:?} (recall@{k} {:.4} on the tuning queries, {:.4} on as many held back; {:.0} bytes read a query; {:.1} s)",
            tuned.params,
            tuned.sample_recall,
            tuned.held_out_recall,
            tuned.cost,
            t.elapsed().as_secs_f64()
        );
        if let Some(advice) = tuned.advice(index) {
            eprintln!("  warning: {advice}");
        }
        Ok(tuned.params)
    }
}

#[derive(Args, Debug)]
pub struct SearchArgs {
    #[arg(long)]
    pub index: PathBuf,
    /// Query vectors (fvecs, bvecs, npy).
    #[arg(long)]
    pub queries: PathBuf,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Write result ids here (ivecs).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Ground truth (ivecs) to print recall@k.
    #[arg(long)]
    pub gt: Option<PathBuf>,
    /// Queries per call of the search (default: all at once).
    #[arg(long)]
    pub batch: Option<usize>,
    /// auto (the GPU when one is usable), cpu or gpu.
    #[arg(long, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// Host memory the index may take on a CPU search (`8GB`): the
    /// placement plan keeps the per-wave parts in memory and, when the rerank
    /// vectors do not fit beside them, reads those from the file on demand.
    #[arg(long, value_parser = octex_placement::parse_bytes)]
    pub host_mem: Option<u64>,
    #[command(flatten)]
    pub flags: SearchFlags,
}

/// Follow the CPU placement plan for `host_mem` bytes: per-wave sections
/// read ahead, the rerank vectors read at random where the plan puts them
/// on disk. Returns whether it does.
fn place_on_host(index: &Index, host_mem: u64) -> Result<bool> {
    let sizes = octex_build::placement_sizes(index.raw());
    let machine = octex_placement::Machine::new(0, 0, host_mem);
    let on_disk = match octex_placement::plan(&sizes, &machine) {
        Ok(plan) => {
            eprintln!("placement for {host_mem} bytes of memory:\n{plan}");
            plan.placement(octex_placement::Part::Vectors).tier == octex_placement::Tier::Disk
        }
        Err(e) => {
            eprintln!("warning: {e}; the search pages the index in and out");
            true
        }
    };
    index.raw().advise_memory(on_disk)?;
    Ok(on_disk)
}

/// Resident and peak resident memory of this process in MiB (Linux).
fn resident_mib() -> Option<(f64, f64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Search all queries in batches of `batch` on `searcher`; returns ids
/// (`nq x k`), seconds and the search counters.
pub fn timed_search(
    searcher: &mut BackendSearcher,
    queries: &[f32],
    dim: usize,
    k: usize,
    p: &SearchParams,
    batch: usize,
) -> Result<(Vec<u32>, f64, octex_search::SearchStats)> {
    let mut ids = Vec::with_capacity(queries.len() / dim * k);
    let mut stats = octex_search::SearchStats::default();
    let t = Instant::now();
    for chunk in queries.chunks(batch.max(1) * dim) {
        let r = searcher.search(chunk, k, p)?;
        ids.extend_from_slice(&r.ids);
        stats.add(&r.stats);
    }
    Ok((ids, t.elapsed().as_secs_f64(), stats))
}

/// One untimed search before a timed run: it pages in the index map on the
/// CPU (1,000 queries) and, on the GPU, loads the module and captures the
/// graph of the full batch shape the timed run replays.
pub fn warm_up(
    searcher: &mut BackendSearcher,
    queries: &[f32],
    dim: usize,
    k: usize,
    p: &SearchParams,
    batch: usize,
) -> Result<()> {
    let nq = queries.len() / dim;
    let warm = match searcher.backend() {
        Backend::Gpu => nq.min(batch),
        _ => nq.min(1000),
    };
    searcher.search(&queries[..dim * warm], k, p)?;
    Ok(())
}

/// GPU options for batches of `batch` queries, with the launch-rule
/// overrides of the `OCTEX_GPU_*` variables (for measurements; the library
/// reads no environment): `OCTEX_GPU_SEARCH_KERNEL=wide|dense|narrow|latency`,
/// `OCTEX_GPU_ONE_BLOCK_LATENCY=0`, `OCTEX_GPU_FRAGMENT_LOOKUP=search|kernel`,
/// `OCTEX_GPU_VISITED_SLOTS_PER_ENTRY=F` (1/16 to 64), `OCTEX_GPU_GRAPHS=0`,
/// `OCTEX_GPU_PROJECTION=two|fused`, `OCTEX_GPU_PAD_PCS=0` and
/// `OCTEX_GPU_PROJECTION_TF32=0|1`.
pub fn gpu_options(batch: usize) -> GpuOptions {
    let var = |name: &str| std::env::var(name).ok();
    let choice = |name: &str, options: &[&str]| -> Option<usize> {
        let v = var(name)?;
        let at = options.iter().position(|o| *o == v);
        if at.is_none() {
            tracing::warn!("{name}={v} is not one of {options:?}; ignored");
        }
        at
    };
    let kernels = [
        SearchKernelChoice::Wide,
        SearchKernelChoice::Dense,
        SearchKernelChoice::Narrow,
        SearchKernelChoice::Latency,
    ];
    let tuning = GpuTuning {
        search_kernel: choice(
            "OCTEX_GPU_SEARCH_KERNEL",
            &["wide", "dense", "narrow", "latency"],
        )
        .map(|i| kernels[i]),
        latency_build_small_batches_only: var("OCTEX_GPU_ONE_BLOCK_LATENCY").as_deref()
            == Some("0"),
        fragment_lookup: choice("OCTEX_GPU_FRAGMENT_LOOKUP", &["search", "kernel"]).map(|i| {
            [FragmentLookupChoice::InSearch, FragmentLookupChoice::OwnKernel][i]
        }),
        visited_slots_per_entry: var("OCTEX_GPU_VISITED_SLOTS_PER_ENTRY").and_then(|v| {
            let f = parse_slots_per_entry(&v);
            if f.is_none() {
                tracing::warn!(
                    "OCTEX_GPU_VISITED_SLOTS_PER_ENTRY={v} is not a number from 0.0625 to 64; ignored"
                );
            }
            f
        }),
        direct_launches: var("OCTEX_GPU_GRAPHS").as_deref() == Some("0"),
        projection: choice("OCTEX_GPU_PROJECTION", &["two", "fused"])
            .map(|i| [ProjectionChoice::Two, ProjectionChoice::Fused][i]),
        unpadded_principal_columns: var("OCTEX_GPU_PAD_PCS").as_deref() == Some("0"),
    };
    let defaults = GpuOptions::default();
    GpuOptions {
        device: 0,
        max_batch: batch.max(1),
        tf32_projection: match var("OCTEX_GPU_PROJECTION_TF32").as_deref() {
            Some("0") => false,
            Some("1") => true,
            _ => defaults.tf32_projection,
        },
        tuning,
    }
}

/// A number of visited-set slots per entry from 1/16 to 64.
fn parse_slots_per_entry(v: &str) -> Option<f32> {
    v.trim()
        .parse::<f32>()
        .ok()
        .filter(|f| (0.0625..=64.0).contains(f))
}

/// `index` opened on `backend` with GPU batches of `batch` queries.
pub fn open(index: &Index, backend: Backend, batch: usize) -> Result<BackendSearcher> {
    let opts = gpu_options(batch);
    let s = index.open_on(backend, &opts)?;
    eprintln!("searching on {} ({})", s.backend(), s.device());
    Ok(s)
}

pub fn recall_of(ids: &[u32], k: usize, gt_path: &Path) -> Result<f64> {
    let (gt, gk) = data::read_ids(gt_path)?;
    data::recall_at(ids, k, &gt, gk, k)
}

pub fn run(args: SearchArgs) -> Result<()> {
    let backend = args.backend.resolve()?;
    let index = Index::load(&args.index)?;
    let (queries, dim) = data::read_vectors(&args.queries)?;
    if dim != index.dim() {
        bail!(
            "{}: queries have dimension {dim}, the index {}",
            args.queries.display(),
            index.dim()
        );
    }
    let nq = queries.len() / dim;
    let vectors_on_disk = match (args.host_mem, backend) {
        (Some(mem), Backend::Cpu) => place_on_host(&index, mem)?,
        (Some(_), _) => bail!("--host-mem plans a CPU search (add --backend cpu)"),
        (None, _) => false,
    };
    let p = args.flags.params_for(&index, args.k, &queries)?;
    // GPU launches take 10,000 queries at most by default; the CPU searches
    // all at once unless told otherwise.
    let batch = match backend {
        Backend::Gpu => args.batch.unwrap_or(nq.min(10_000)),
        _ => args.batch.unwrap_or(nq),
    };
    let mut searcher = open(&index, backend, batch)?;
    warm_up(&mut searcher, &queries, dim, args.k, &p, batch)?;
    let (ids, secs, stats) = timed_search(&mut searcher, &queries, dim, args.k, &p, batch)?;
    let recall = match &args.gt {
        Some(g) => Some(recall_of(&ids, args.k, g)?),
        None => None,
    };
    if let Some(out) = &args.out {
        data::write_ids(out, &ids, args.k)?;
    }
    let q = stats.queries.max(1) as f64;
    eprintln!(
        "{nq} queries, k={}, {p:?}, kernel {}, {} threads: {:.0} sketch + {:.0} exact distances per query, {:.2} copies without fragment, {:.1}% of queries seeded",
        args.k,
        index.kernel_name(),
        rayon::current_num_threads(),
        stats.sketch_distances as f64 / q,
        stats.exact_distances as f64 / q,
        stats.copies_without_fragment as f64 / q,
        100.0 * stats.seeded_queries as f64 / q
    );
    let (rss, peak) = resident_mib().unzip();
    let json = serde_json::json!({
        "backend": backend.name(),
        "queries": nq,
        "seconds": secs,
        "qps": nq as f64 / secs,
        "recall": recall,
        "vectors_on_disk": vectors_on_disk,
        "resident_mib": rss,
        "peak_resident_mib": peak,
    });
    println!("{json}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_per_entry_parse_fractions_and_refuse_the_rest() {
        assert_eq!(parse_slots_per_entry("0.5"), Some(0.5));
        assert_eq!(parse_slots_per_entry(" 4 "), Some(4.0));
        assert_eq!(parse_slots_per_entry("0.01"), None);
        assert_eq!(parse_slots_per_entry("65"), None);
        assert_eq!(parse_slots_per_entry("NaN"), None);
        assert_eq!(parse_slots_per_entry("two"), None);
    }
}
