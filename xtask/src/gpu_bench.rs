//! `cargo xtask bench --backend gpu`: the GPU sweep of one index at batch
//! 10,000 and batch 100, next to exact brute force on the same GPU (cuBLAS
//! products + our top-k kernel), the CPU backend on the same index (parity),
//! phase times from CUDA events and the bytes each query touches; with
//! `--peers`, cuVS CAGRA, IVF-Flat, IVF-PQ and brute force on the same GPU in
//! the same run (`peers/cuvs_peers.py`), and every ratio from that run.
//! Writes `results-gpu.json` and `pareto-gpu.png`.

use std::time::Instant;

use anyhow::{Context, Result};
use octex_index::Metric;
use octex_kernels::{Gpu, GpuBruteForce};
use octex_search::{Index, SearchParams, SearchStats};
use serde_json::{json, Value};

use crate::bench::{high_recall_points, machine, median, plot_results, Sweep};
use crate::data::{self, Dataset};

/// Every (S, W) pair with every rerank depth `R` and read depth `r` given.
fn sweep(sw: &[(usize, usize)], reranks: &[usize], read_depths: &[usize]) -> Vec<SearchParams> {
    let mut g = Vec::new();
    for &(start_points, waves) in sw {
        for &rerank in reranks {
            for &read_depth in read_depths {
                g.push(SearchParams {
                    read_depth,
                    start_points,
                    waves,
                    rerank,
                    wave_rerank: false,
                });
            }
        }
    }
    g
}

/// The GPU sweep: (S, W) pairs, each with several `R` and `r`; `quick`
/// (`bench --quick`) keeps 42 points of the middle; `shapes` (`bench
/// --shapes`), when given, are the only (S, W) pairs, with the quick grid's
/// `R` and `r` unless `--reranks` and `--read-depths` name others.
fn grid(s: Sweep) -> Vec<SearchParams> {
    if !s.shapes.is_empty() {
        return sweep(
            s.shapes,
            Sweep::or(s.reranks, &[16, 32]),
            Sweep::or(s.read_depths, &[8, 12, 16]),
        );
    }
    if s.quick {
        // Measurements that compare builds on one index: the points near
        // recall 0.95-0.995 on the sets of the README, without the high end.
        let sw = [
            (16, 1),
            (24, 1),
            (32, 2),
            (64, 3),
            (64, 4),
            (96, 4),
            (128, 4),
        ];
        return sweep(&sw, &[16, 32], &[8, 12, 16]);
    }
    let sw = [
        (8, 1),
        (16, 1),
        (24, 1),
        (16, 2),
        (24, 2),
        (32, 2),
        (32, 3),
        (40, 3),
        (30, 4),
        (24, 5),
        (20, 6),
        (48, 3),
        (48, 4),
        (64, 3),
        (64, 4),
        (64, 5),
        (80, 4),
        (96, 3),
        (96, 4),
        (128, 4),
        (128, 5),
    ];
    // (48, 4), (64, 5), (80, 4) and (96, 3) fill the step from S64 W4 to
    // S96 W4, where hard data crosses 0.995; (40, 3), (30, 4), (24, 5) and
    // (20, 6) read 7,680 row entries, within the 8,192-slot visited set that
    // keeps three blocks an SM at r8.
    let mut g = sweep(&sw, &[16, 32, 64], &[8, 12, 16]);
    // The high-recall end (the paper's sizes: S up to 512, W up to 6, R 128
    // to 256 reranked once or in every wave); large S spills the per-query
    // arrays to global memory.
    g.extend(high_recall_points(
        &[
            (64, 3),
            (96, 4),
            (128, 4),
            (192, 4),
            (256, 4),
            (256, 6),
            (512, 4),
        ],
        &[32, 64, 128, 256],
    ));
    // The cheap end: one wave from few start points, shallow reads of the
    // ripples, reranks between the grid's. Data that one wave answers gets
    // its high-recall points here.
    g.extend(sweep(&[(8, 1), (12, 1), (16, 1)], &[16, 24, 32], &[4, 6]));
    g
}

/// The cuVS peers script (written next to the results and run with
/// `OCTEX_PEERS_PYTHON`, default `python3`, which must import cuVS).
const CUVS_PEERS_PY: &str = include_str!("../peers/cuvs_peers.py");

/// cuVS CAGRA, IVF-Flat, IVF-PQ and brute force on the same GPU, in this run:
/// their search points and build records.
fn run_cuvs_peers(
    ds: &Dataset,
    batch: usize,
    repeats: usize,
    out: &std::path::Path,
) -> Result<(Vec<Value>, Vec<Value>)> {
    std::fs::create_dir_all(out)?;
    let script = out.join("cuvs_peers.py");
    std::fs::write(&script, CUVS_PEERS_PY)?;
    let py = std::env::var("OCTEX_PEERS_PYTHON").unwrap_or_else(|_| "python3".into());
    println!("running cuVS peers (CAGRA degree 32/64, IVF-Flat, IVF-PQ + refine, brute force) with {py} ...");
    let res = std::process::Command::new(&py)
        .arg(&script)
        .args(["--base".as_ref(), ds.base().as_os_str()])
        .args(["--queries".as_ref(), ds.queries().as_os_str()])
        .args(["--gt".as_ref(), ds.gt().as_os_str()])
        .args(["--metric", &ds.manifest.metric])
        .args([
            "--batch",
            &batch.to_string(),
            "--repeats",
            &repeats.max(3).to_string(),
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {py} {}", script.display()))?;
    if !res.status.success() {
        anyhow::bail!(
            "the cuVS peers failed ({}); see the messages above",
            res.status
        );
    }
    let all: Vec<Value> = String::from_utf8_lossy(&res.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    Ok(all
        .into_iter()
        .partition(|v: &Value| v.get("build").is_none()))
}

/// The point of highest QPS among `points` of systems that `pick` accepts,
/// at recall `>= target`.
fn best_at<'a>(points: &'a [Value], target: f64, pick: &dyn Fn(&str) -> bool) -> Option<&'a Value> {
    points
        .iter()
        .filter(|p| pick(p["system"].as_str().unwrap_or("")))
        .filter(|p| p["recall"].as_f64().unwrap_or(0.0) >= target)
        .max_by(|a, b| {
            a["qps"]
                .as_f64()
                .unwrap_or(0.0)
                .total_cmp(&b["qps"].as_f64().unwrap_or(0.0))
        })
}

fn recall_of(ids: &[u32], gt: &[u32], gk: usize) -> Result<f64> {
    data::recall_at(ids, 10, gt, gk, 10)
}

/// Bytes a query reads from device memory, estimated from the work counters:
/// 32-byte sectors per sketch row, 4 bytes per ripple and row entry, the
/// rerank vectors, key-table probes (8 bytes per copy and spacing tried).
fn bytes_per_query(index: &Index, st: &SearchStats, p: &SearchParams) -> f64 {
    let h = index.raw().header();
    let q = st.queries.max(1) as f64;
    let sector = |b: f64| (b / 32.0).ceil() * 32.0;
    let sketch = st.sketch_distances as f64 / q * sector(h.sketch_width as f64 + 31.0);
    let ripples = st.first_round_entries as f64 / q * 4.0;
    let rows = (p.start_points * p.waves) as f64 * h.row_len as f64 * 4.0;
    let vec_bytes = match h.vector_dtype {
        octex_index::VectorDtype::F16 => 2.0,
        octex_index::VectorDtype::F32 => 4.0,
    };
    let exact = st.exact_distances as f64 / q * sector(index.raw().stored_dim() as f64 * vec_bytes);
    let probes = (h.copies as usize * 2) as f64 * 32.0;
    sketch + ripples + rows + exact + probes
}

#[allow(clippy::too_many_arguments)]
pub fn run(
    ds: &Dataset,
    index: &Index,
    build: Value,
    queries: &[f32],
    dim: usize,
    (gt, gk): (&[u32], usize),
    tuned: &[SearchParams],
    repeats: usize,
    grid_sweep: Sweep,
    peers: bool,
    out: &std::path::Path,
) -> Result<()> {
    let nq = queries.len() / dim;
    let batch = nq.min(10_000);
    let mut g = index.gpu(&crate::search_cmd::gpu_options(batch))?;
    let device = g.device();
    let peak_gbps = g.peak_memory_bandwidth().map(|b| b / 1e9);
    println!(
        "GPU: {device}; peak DRAM bandwidth {}; index in device memory: {:.1} MiB",
        peak_gbps.map_or("not reported".into(), |b| format!("{b:.0} GB/s")),
        g.index_bytes() as f64 / (1 << 20) as f64
    );
    let small = &queries[..dim * nq.min(100)];
    // End to end: four batches through the pipeline (host preparation and
    // transfers of one batch overlap the search of the previous one).
    let streamed: Vec<f32> = queries[..batch * dim].repeat(4);
    let mut points = Vec::new();
    for p in tuned.iter().copied().chain(grid(grid_sweep)) {
        let r = match g.search(&queries[..batch * dim], 10, &p) {
            Ok(r) => r,
            Err(e) => {
                println!("skip {p:?}: {e}");
                continue;
            }
        };
        let recall = recall_of(&r.ids, gt, gk)?;
        let dev = g.replay_seconds(repeats.max(3) * 3)?;
        let mut wall = Vec::new();
        for _ in 0..repeats.max(1) {
            let t = Instant::now();
            g.search(&streamed, 10, &p)?;
            wall.push(t.elapsed().as_secs_f64() / 4.0);
        }
        let wall = median(wall);
        // Latency of a batch of 100 and of 1: device time (graph replay)
        // and the median wall time of 10 searches.
        let mut latency = |qs: &[f32]| -> Result<(f64, f64)> {
            g.search(qs, 10, &p)?;
            let device = g.replay_seconds(20)?;
            let mut wall = Vec::new();
            for _ in 0..10 {
                let t = Instant::now();
                g.search(qs, 10, &p)?;
                wall.push(t.elapsed().as_secs_f64());
            }
            Ok((device, median(wall)))
        };
        let (lat_dev, lat) = latency(small)?;
        let (lat1_dev, lat1) = latency(&queries[..dim])?;
        let q = r.stats.queries.max(1) as f64;
        let bytes = bytes_per_query(index, &r.stats, &p);
        let qps = batch as f64 / dev;
        println!(
            "GPU r={:>2} S={:>3} W={} R={:>3}{}: recall@10 {recall:.4}  {:>10.0} QPS on device, {:>9.0} end to end; batch-100 latency {:.3} ms device, {:.3} ms wall; batch-1 {:.3} / {:.3} ms; {:.0} sketch/query, ~{:.0} KB/query ({:.0} GB/s)",
            p.read_depth,
            p.start_points,
            p.waves,
            p.rerank,
            if p.wave_rerank { " every wave" } else { "" },
            qps,
            batch as f64 / wall,
            lat_dev * 1e3,
            lat * 1e3,
            lat1_dev * 1e3,
            lat1 * 1e3,
            r.stats.sketch_distances as f64 / q,
            bytes / 1e3,
            bytes * qps / 1e9
        );
        points.push(
            json!({"system": "octex GPU", "params": p, "recall": recall, "qps": qps,
            "qps_end_to_end": batch as f64 / wall, "latency100_device_ms": lat_dev * 1e3,
            "latency100_wall_ms": lat * 1e3, "latency1_device_ms": lat1_dev * 1e3,
            "latency1_wall_ms": lat1 * 1e3, "sketch_per_query": r.stats.sketch_distances as f64 / q,
            "bytes_per_query": bytes, "achieved_gbps": bytes * qps / 1e9,
            "seeded_queries": r.stats.seeded_queries}),
        );
    }

    // Cost of each phase inside the kernel (variants that stop early).
    let mut phase_rows = Vec::new();
    for p in [
        SearchParams::default(),
        SearchParams {
            read_depth: 16,
            start_points: 16,
            waves: 1,
            rerank: 64,
            wave_rerank: false,
        },
        SearchParams {
            read_depth: 16,
            start_points: 96,
            waves: 4,
            rerank: 16,
            wave_rerank: false,
        },
    ] {
        // A full batch (throughput) and a batch of 100 (what its latency is made of).
        for phase_batch in [batch, batch.min(100)] {
            let c = g.phase_costs(&queries[..phase_batch * dim], 10, &p, 10)?;
            println!(
                "kernel phases at {p:?}, ms per batch of {phase_batch}: projection(+lookup kernel)+init {:.3}, decode+lookup in search {:.3}, first round {:.3}, waves {:.3}, rerank {:.3}",
                c[0], c[1], c[2], c[3], c[4]
            );
            phase_rows.push(
                json!({"params": p, "batch": phase_batch, "projection_init_ms": c[0], "decode_lookup_ms": c[1],
                "first_round_ms": c[2], "waves_ms": c[3], "rerank_ms": c[4]}),
            );
        }
    }

    // Phase times (CUDA events) and CPU parity at the index's defaults.
    let p = index.default_params();
    let (gres, times) = g.search_profiled(&queries[..batch * dim], 10, &p)?;
    println!(
        "phases at {p:?} for {batch} queries: upload {:.3} ms, projection (cuBLAS) {:.3} ms, wave_search {:.3} ms, download {:.3} ms",
        times.upload_ms, times.project_ms, times.search_ms, times.download_ms
    );
    let t = Instant::now();
    let cres = index.search(&queries[..batch * dim], 10, &p)?;
    let cpu_secs = t.elapsed().as_secs_f64();
    let (rg, rc) = (recall_of(&gres.ids, gt, gk)?, recall_of(&cres.ids, gt, gk)?);
    let same_sets = {
        let hits: usize = gres
            .ids
            .chunks_exact(10)
            .zip(cres.ids.chunks_exact(10))
            .map(|(a, b)| a.iter().filter(|i| b.contains(i)).count())
            .sum();
        hits as f64 / gres.ids.len() as f64
    };
    println!(
        "CPU/GPU parity at {p:?}: recall CPU {rc:.4} GPU {rg:.4}; {:.2}% of top-10 ids shared; CPU {:.0} QPS on {} threads",
        same_sets * 100.0,
        batch as f64 / cpu_secs,
        rayon::current_num_threads()
    );

    let scaling = multi_gpu_scaling(index, &streamed, 10, &p, repeats)?;

    // Exact brute force on the same GPU.
    let (mut base, bdim) = data::read_vectors(&ds.base())?;
    let mut qs = queries[..batch * dim].to_vec();
    if ds.metric()? == Metric::Cosine {
        base = octex_search::knn::cosine_normalised(&base, bdim)?;
        qs = octex_search::knn::cosine_normalised(&qs, dim)?;
    }
    let bf_gpu = Gpu::open(0)?;
    let bf = GpuBruteForce::new(&bf_gpu, &base, bdim)?;
    bf.search(&qs[..dim * 100.min(batch)], 10, None)?;
    let mut bf_times = Vec::new();
    let mut bf_ids = Vec::new();
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        bf_ids = bf.search(&qs, 10, None)?.0;
        bf_times.push(t.elapsed().as_secs_f64());
    }
    let bf_secs = median(bf_times);
    let bf_recall = if ds.metric()? == Metric::InnerProduct {
        None
    } else {
        Some(recall_of(&bf_ids, gt, gk)?)
    };
    println!(
        "GPU exact brute force (cuBLAS + top-k): {:.0} QPS, recall@10 {}",
        batch as f64 / bf_secs,
        bf_recall.map_or("-".into(), |r| format!("{r:.4}"))
    );
    points.push(json!({"system": "brute force GPU (ours)", "params": "cuBLAS sgemm + top-k", "recall": bf_recall.unwrap_or(1.0), "qps": batch as f64 / bf_secs}));

    // cuVS in the same run.
    let mut peer_builds = Vec::new();
    if peers {
        // A failed peer run still leaves octex's points and says why.
        let (peer_points, builds) = run_cuvs_peers(ds, batch, repeats, out).unwrap_or_else(|e| {
            println!("cuVS peers: {e:#}");
            (
                Vec::new(),
                vec![json!({"build": "cuVS", "params": "failed", "error": format!("{e:#}")})],
            )
        });
        for b in &builds {
            match b["error"].as_str() {
                Some(e) => println!("{} failed: {e}", b["build"].as_str().unwrap_or("")),
                None => println!(
                    "{} build ({}): {:.1} s",
                    b["build"].as_str().unwrap_or(""),
                    b["params"].as_str().unwrap_or(""),
                    b["build_seconds"].as_f64().unwrap_or(0.0)
                ),
            }
        }
        for v in &peer_points {
            println!(
                "{:<18} {:<40} recall@10 {:.4}  {:>10.0} QPS",
                v["system"].as_str().unwrap_or(""),
                v["params"].as_str().unwrap_or(""),
                v["recall"].as_f64().unwrap_or(0.0),
                v["qps"].as_f64().unwrap_or(0.0)
            );
        }
        points.extend(peer_points);
        peer_builds = builds;
    }

    // Summary at the recall targets: octex against the best cuVS index of this run.
    let mut summary = Vec::new();
    println!("\nbest at recall@10 >= target (batch {batch}, {device}):");
    let is_octex = |s: &str| s == "octex GPU";
    let is_cuvs = |s: &str| s.starts_with("cuVS") && !s.contains("brute");
    for target in [0.95, 0.99, 0.995] {
        let best = best_at(&points, target, &is_octex);
        let peer = best_at(&points, target, &is_cuvs);
        let lowest = |key: &str| {
            points
                .iter()
                .filter(|p| is_octex(p["system"].as_str().unwrap_or("")))
                .filter(|p| p["recall"].as_f64().unwrap_or(0.0) >= target)
                .filter_map(|p| p[key].as_f64())
                .fold(f64::INFINITY, f64::min)
        };
        let (lat, lat1) = (lowest("latency100_device_ms"), lowest("latency1_device_ms"));
        let qps = best.and_then(|b| b["qps"].as_f64());
        let peer_qps = peer.and_then(|b| b["qps"].as_f64());
        let ratio = qps.zip(peer_qps).map(|(a, b)| a / b);
        // The best point's bytes read (by the kernel's count) per second, and
        // that as a share of the card's peak.
        let gbps = best.and_then(|b| b["achieved_gbps"].as_f64());
        let of_peak = gbps.zip(peak_gbps).map(|(a, p)| a / p);
        println!(
            "  {target:.3}: octex GPU {:>10} QPS ({}), {} GB/s ({} of peak), batch-100 latency {} ms, batch-1 {} ms; best cuVS {:>10} ({} {}); ratio {}",
            qps.map_or("-".into(), |q| format!("{q:.0}")),
            best.map_or("-".into(), |b| b["params"].to_string()),
            gbps.map_or("-".into(), |g| format!("{g:.0}")),
            of_peak.map_or("-".into(), |f| format!("{:.0}%", 100.0 * f)),
            if lat.is_finite() { format!("{lat:.3}") } else { "-".into() },
            if lat1.is_finite() { format!("{lat1:.3}") } else { "-".into() },
            peer_qps.map_or("-".into(), |q| format!("{q:.0}")),
            peer.map_or(if peers { "none reaches it" } else { "not run: --peers" }, |b| b["system"].as_str().unwrap_or("")),
            peer.map_or(String::new(), |b| b["params"].as_str().unwrap_or("").to_string()),
            ratio.map_or("-".into(), |r| format!("{r:.2}x"))
        );
        summary.push(json!({"target": target, "octex_gpu_qps": qps, "params": best.map(|b| b["params"].clone()),
            "latency100_device_ms": if lat.is_finite() { Some(lat) } else { None },
            "latency1_device_ms": if lat1.is_finite() { Some(lat1) } else { None },
            "achieved_gbps": gbps, "fraction_of_peak_bandwidth": of_peak,
            "best_cuvs": peer, "ratio_vs_best_cuvs": ratio}));
    }
    let results = json!({
        "dataset": ds.manifest,
        "queries": batch,
        "backend": "gpu",
        "grid": {"quick": grid_sweep.quick, "shapes": grid_sweep.shapes,
            "read_depths": grid_sweep.read_depths, "reranks": grid_sweep.reranks},
        "machine": {"gpu": device, "peak_dram_gbps": peak_gbps, "cpu": machine()["cpu"], "threads": rayon::current_num_threads()},
        "build": build,
        "points": points,
        "phases_ms": times,
        "kernel_phases": phase_rows,
        "cpu_gpu_parity": {"params": p, "recall_cpu": rc, "recall_gpu": rg, "shared_top10": same_sets},
        "multi_gpu": scaling,
        "peer_builds": peer_builds,
        "summary": summary,
    });
    std::fs::create_dir_all(out)?;
    let rpath = out.join("results-gpu.json");
    std::fs::write(&rpath, serde_json::to_string_pretty(&results)?)?;
    println!("wrote {}", rpath.display());
    let ppath = out.join("pareto-gpu.png");
    // GPU machines often lack fonts: a failed plot is redrawn elsewhere with
    // `cargo xtask plot --results results-gpu.json`.
    match plot_results(&results, &ppath) {
        Ok(()) => println!("wrote {}", ppath.display()),
        Err(e) => tracing::warn!("no plot ({e}); redraw with `cargo xtask plot`"),
    }
    Ok(())
}

/// End-to-end QPS of `queries` at `p` on the first GPU and on every GPU of
/// the machine (one replica each, [`octex_search::MultiGpuSearcher`]), and
/// the scaling efficiency (QPS on G over G times QPS on one); `null` on a
/// machine of one GPU.
fn multi_gpu_scaling(
    index: &Index,
    queries: &[f32],
    k: usize,
    p: &SearchParams,
    repeats: usize,
) -> Result<Value> {
    let devices = octex_kernels::device_count();
    if devices < 2 {
        println!("multi-GPU scaling: not measured (this machine has {devices} GPU)");
        return Ok(Value::Null);
    }
    let nq = queries.len() / index.dim();
    let opts = crate::search_cmd::gpu_options(nq.div_ceil(devices).min(10_000));
    let mut qps = Vec::new();
    for g in [1, devices] {
        let all: Vec<usize> = (0..g).collect();
        let mut multi = index.multi_gpu(&all, &opts)?;
        multi.search(queries, k, p)?;
        let mut wall = Vec::new();
        for _ in 0..repeats.max(1) {
            let t = Instant::now();
            multi.search(queries, k, p)?;
            wall.push(t.elapsed().as_secs_f64());
        }
        qps.push(nq as f64 / median(wall));
    }
    let efficiency = qps[1] / (devices as f64 * qps[0]);
    println!(
        "multi-GPU scaling at {p:?}, {nq} queries end to end: 1 GPU {:.0} QPS, {devices} GPUs {:.0} QPS, efficiency {efficiency:.2}",
        qps[0], qps[1]
    );
    Ok(
        json!({"params": p, "queries": nq, "gpus": devices, "qps_one": qps[0], "qps_all": qps[1], "efficiency": efficiency}),
    )
}
