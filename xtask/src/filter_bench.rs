//! `cargo xtask bench-filter`: filtered search on the CPU. For filters
//! allowing 50%, 10%, 1% and 0.1% of the ids (spread by a hash), recall@10
//! against the exact filtered answer and throughput of octex over a few
//! search points, beside hnswlib's and Faiss HNSW32's filtered search on the
//! same cores in the same run (`--peers`). Prints, per filter, the cheapest
//! point of each system at recall >= 0.95 and the ratio.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use octex_search::{IdFilter, Index, SearchParams};
use serde_json::{json, Value};

use crate::data::{read_vectors, write_ids, Dataset};

#[derive(Args, Debug)]
pub struct FilterBenchArgs {
    /// Data set name or folder (with base.fvecs, query.fvecs, manifest.json).
    #[arg(long)]
    pub data: String,
    /// The index of the data set (built on the CPU with the defaults).
    #[arg(long)]
    pub index: PathBuf,
    /// Queries used (the first of the set).
    #[arg(long, default_value_t = 1_000)]
    pub queries: usize,
    /// Filters, as allowed ids per 1,000.
    #[arg(long, value_delimiter = ',', default_value = "500,100,10,1")]
    pub per_mille: Vec<u64>,
    /// hnswlib and Faiss HNSW32 filtered search in the same run.
    #[arg(long)]
    pub peers: bool,
    /// Where masks, ground truths and results.json go.
    #[arg(long, default_value = "bench-out/filter")]
    pub out: PathBuf,
}

/// The search points octex is timed at, cheap to deep.
fn points() -> Vec<SearchParams> {
    [
        (8, 16, 1, 32),
        (12, 32, 2, 64),
        (16, 64, 3, 128),
        (16, 128, 4, 256),
    ]
    .into_iter()
    .map(|(read_depth, start_points, waves, rerank)| SearchParams {
        read_depth,
        start_points,
        waves,
        rerank,
        wave_rerank: false,
    })
    .collect()
}

/// Whether id `id` passes a filter of `per_mille` allowed ids per 1,000
/// (a multiplicative hash, so allowed ids are spread over the index).
fn allowed(id: u32, per_mille: u64) -> bool {
    ((id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) % 1000 < per_mille
}

pub fn run(args: FilterBenchArgs, root: &Path) -> Result<()> {
    const K: usize = 10;
    let ds = Dataset::open(&args.data, root)?;
    let metric = ds.metric()?;
    let (base, dim) = read_vectors(&ds.base())?;
    let (queries, qdim) = read_vectors(&ds.queries())?;
    if qdim != dim {
        bail!("queries have dimension {qdim}, the base {dim}");
    }
    let nq = args.queries.min(queries.len() / dim);
    let queries = &queries[..nq * dim];
    let index = Index::load(&args.index)?;
    let n = index.len();
    if n != base.len() / dim {
        bail!("the index holds {n} vectors, the base {}", base.len() / dim);
    }
    std::fs::create_dir_all(&args.out)?;
    let threads = rayon::current_num_threads();
    println!(
        "{}: {n} x {dim} ({}), {nq} queries, {threads} threads",
        ds.manifest.name, ds.manifest.metric
    );
    let mut records = Vec::new();
    let mut masks = Vec::new();
    for &pm in &args.per_mille {
        let ids: Vec<u32> = (0..n as u32).filter(|&id| allowed(id, pm)).collect();
        if ids.len() < K {
            bail!(
                "{pm} per mille of {n} leaves {} ids, fewer than k = {K}",
                ids.len()
            );
        }
        let sub: Vec<f32> = ids
            .iter()
            .flat_map(|&id| {
                base[id as usize * dim..(id as usize + 1) * dim]
                    .iter()
                    .copied()
            })
            .collect();
        let found = octex_search::knn::ground_truth(&sub, queries, dim, K, metric, &|_| {})?;
        let truth: Vec<u32> = found.iter().map(|&i| ids[i as usize]).collect();
        let filter = IdFilter::from_ids(n, ids.iter().copied())?;
        for p in points() {
            let res = index.search_filtered(queries, K, &p, &filter)?;
            let mut times = Vec::new();
            for _ in 0..3 {
                let t = Instant::now();
                index.search_filtered(queries, K, &p, &filter)?;
                times.push(t.elapsed().as_secs_f64());
            }
            let secs = crate::bench::median(times);
            let recall = octex_search::knn::recall_at_k(&res.ids, K, &truth, K, K)?;
            let st = res.stats;
            println!(
                "octex  {pm:>4}/1000 ({:>7} ids) r={:>2} S={:>3} W={} R={:>3}: recall@10 {recall:.4} {:>9.0} QPS; {} of {nq} scanned, {:.2} extra waves a query",
                ids.len(),
                p.read_depth,
                p.start_points,
                p.waves,
                p.rerank,
                nq as f64 / secs,
                st.scanned_queries,
                st.extra_waves as f64 / nq as f64
            );
            records.push(
                json!({"system": "octex", "per_mille": pm, "params": p, "recall": recall,
                "qps": nq as f64 / secs, "scanned_queries": st.scanned_queries,
                "extra_waves": st.extra_waves}),
            );
        }
        let mask_path = args.out.join(format!("mask-{pm}.u8"));
        let mask: Vec<u8> = (0..n as u32).map(|id| allowed(id, pm) as u8).collect();
        std::fs::write(&mask_path, mask)?;
        let gt_path = args.out.join(format!("gt-{pm}.ivecs"));
        write_ids(&gt_path, &truth, K)?;
        masks.push(format!(
            "{pm}:{}:{}",
            mask_path.display(),
            gt_path.display()
        ));
    }
    if args.peers {
        let query_path = args.out.join("queries.fvecs");
        octex_index::vecfile::write_fvecs(&query_path, queries, dim)?;
        let py = crate::bench::peer_python()?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/filter_peers.py");
        println!("running peers (hnswlib M=16 efC=200 with filter=, Faiss HNSW32 with IDSelectorBitmap) ...");
        let out = Command::new(py)
            .arg(script)
            .args(["--base".as_ref(), ds.base().as_os_str()])
            .args(["--queries".as_ref(), query_path.as_os_str()])
            .args(["--metric", &ds.manifest.metric, "--masks", &masks.join(",")])
            .args(["--threads", &threads.to_string()])
            .output()
            .context("running filter_peers.py")?;
        if !out.status.success() {
            bail!(
                "filter_peers.py failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Ok(v) = serde_json::from_str::<Value>(line) {
                println!(
                    "{:<13} {:>4}/1000 {:<28} recall@10 {:.4} {:>9.0} QPS",
                    v["system"].as_str().unwrap_or("?"),
                    v["per_mille"],
                    v["params"].as_str().unwrap_or("?"),
                    v["recall"].as_f64().unwrap_or(0.0),
                    v["qps"].as_f64().unwrap_or(0.0)
                );
                records.push(v);
            }
        }
    }
    println!("best at recall@10 >= 0.95 ({threads} threads):");
    for &pm in &args.per_mille {
        let best = |system: &str| {
            records
                .iter()
                .filter(|r| r["per_mille"] == pm && r["system"] == system)
                .filter(|r| r["recall"].as_f64().unwrap_or(0.0) >= 0.95)
                .map(|r| r["qps"].as_f64().unwrap_or(0.0))
                .fold(None, |b: Option<f64>, q| Some(b.map_or(q, |b| b.max(q))))
        };
        let ours = best("octex");
        let peer = [best("hnswlib"), best("faiss-hnsw32")]
            .into_iter()
            .flatten()
            .fold(None, |b: Option<f64>, q| Some(b.map_or(q, |b| b.max(q))));
        let show = |q: Option<f64>| q.map_or("not reached".to_string(), |q| format!("{q:.0} QPS"));
        let ratio = match (ours, peer) {
            (Some(a), Some(b)) => format!("{:.2}x", a / b),
            _ => "-".into(),
        };
        println!(
            "  {pm:>4}/1000: octex {}, best peer {}, ratio {ratio}",
            show(ours),
            show(peer)
        );
    }
    let path = args.out.join("results.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&json!({"data": ds.manifest.name, "queries": nq,
            "machine": crate::bench::machine(), "points": records}))?,
    )?;
    println!("wrote {}", path.display());
    Ok(())
}
