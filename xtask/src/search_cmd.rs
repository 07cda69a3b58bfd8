//! `cargo xtask search`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use octex_search::{GpuOptions, Index, SearchParams};

use crate::data;

#[derive(Args, Clone, Copy, Debug)]
pub struct SearchFlags {
    /// r: ids read per copy's ripple.
    #[arg(long, default_value_t = SearchParams::default().read_depth)]
    pub read_depth: usize,
    /// S: start points per wave.
    #[arg(long, default_value_t = SearchParams::default().start_points)]
    pub start_points: usize,
    /// W: waves.
    #[arg(long, default_value_t = SearchParams::default().waves)]
    pub waves: usize,
    /// R: rerank depth.
    #[arg(long, default_value_t = SearchParams::default().rerank)]
    pub rerank: usize,
}

impl SearchFlags {
    pub fn params(&self) -> SearchParams {
        SearchParams {
            read_depth: self.read_depth,
            start_points: self.start_points,
            waves: self.waves,
            rerank: self.rerank,
        }
    }
}

/// Which engine searches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Auto,
    Cpu,
    Gpu,
}

/// The backend to use: `auto` is the GPU when a CUDA driver reports a device,
/// else the CPU; `gpu` without one is a clear error.
pub fn pick_backend(b: Backend) -> Result<&'static str> {
    let gpu = octex_search::gpu_available();
    match b {
        Backend::Cpu => Ok("cpu"),
        Backend::Auto => Ok(if gpu { "gpu" } else { "cpu" }),
        Backend::Gpu if gpu => Ok("gpu"),
        Backend::Gpu => bail!(
            "--backend gpu: no CUDA driver or device on this machine; use --backend cpu or auto"
        ),
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
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    #[command(flatten)]
    pub flags: SearchFlags,
}

/// Search all queries in batches; returns ids (`nq x k`) and seconds.
pub fn timed_search(
    index: &Index,
    queries: &[f32],
    k: usize,
    p: &SearchParams,
    batch: usize,
) -> Result<(Vec<u32>, f64, octex_search::SearchStats)> {
    let dim = index.dim();
    let mut ids = Vec::with_capacity(queries.len() / dim * k);
    let mut stats = octex_search::SearchStats::default();
    let t = Instant::now();
    for chunk in queries.chunks(batch.max(1) * dim) {
        let r = index.search(chunk, k, p)?;
        ids.extend_from_slice(&r.ids);
        stats.add(&r.stats);
    }
    Ok((ids, t.elapsed().as_secs_f64(), stats))
}

pub fn recall_of(ids: &[u32], k: usize, gt_path: &Path) -> Result<f64> {
    let (gt, gk) = data::read_ids(gt_path)?;
    let res: Vec<i32> = ids
        .iter()
        .map(|&i| if i == u32::MAX { -1 } else { i as i32 })
        .collect();
    data::recall_at(&res, k, &gt, gk, k)
}

pub fn run(args: SearchArgs) -> Result<()> {
    let backend = pick_backend(args.backend)?;
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
    let p = args.flags.params();
    let (ids, secs, stats) = if backend == "gpu" {
        let batch = args.batch.unwrap_or(nq.min(10_000));
        let mut g = index.gpu(&GpuOptions {
            device: 0,
            max_batch: batch,
        })?;
        eprintln!("GPU: {}", g.device());
        // Warm-up (module load, graph capture), then the timed run.
        g.search(&queries[..dim * nq.min(batch)], args.k, &p)?;
        let t = Instant::now();
        let r = g.search(&queries, args.k, &p)?;
        (r.ids, t.elapsed().as_secs_f64(), r.stats)
    } else {
        // Warm-up pass over a slice (page in the map), then the timed run.
        index.search(&queries[..dim * nq.min(1000)], args.k, &p)?;
        timed_search(&index, &queries, args.k, &p, args.batch.unwrap_or(nq))?
    };
    let recall = match &args.gt {
        Some(g) => Some(recall_of(&ids, args.k, g)?),
        None => None,
    };
    if let Some(out) = &args.out {
        data::write_ids(out, &ids, args.k)?;
    }
    let q = stats.queries.max(1) as f64;
    eprintln!(
        "{nq} queries, k={}, {p:?}, kernel {}, {} threads: {:.0} sketch + {:.0} exact distances per query, {:.2} copies without fragment",
        args.k,
        index.kernel_name(),
        rayon::current_num_threads(),
        stats.sketch_distances as f64 / q,
        stats.exact_distances as f64 / q,
        stats.copies_without_fragment as f64 / q
    );
    let json = serde_json::json!({
        "backend": backend,
        "queries": nq,
        "seconds": secs,
        "qps": nq as f64 / secs,
        "recall": recall,
    });
    println!("{json}");
    Ok(())
}
