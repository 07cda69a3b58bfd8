//! `cargo xtask bench`: sweep the search parameters of an index over a data set,
//! measure recall@10 and QPS (median of `--repeats` runs after a warm-up), and
//! with `--peers` run hnswlib, Faiss HNSW32, Faiss IVF-Flat and brute force in the
//! same run on the same number of threads. Writes `results.json` and `pareto.png`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use octex_search::{Index, SearchParams};
use serde_json::{json, Value};

use crate::build_cmd::{print_report, BuildFlags};
use crate::data::{self, Dataset};
use crate::plot::{frontier, pareto_png, Series};
use crate::search_cmd::{open, timed_search, warm_up};
use octex_search::Backend;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// A fetched data set's name (glove-50, fashion-mnist) or its folder.
    #[arg(long)]
    pub data: String,
    /// Also run the peers in the same run: hnswlib, Faiss HNSW32, Faiss
    /// IVF-Flat and Faiss brute force on the CPU; cuVS CAGRA, IVF-Flat, IVF-PQ
    /// and brute force with `--backend gpu` (needs cuVS in `OCTEX_PEERS_PYTHON`,
    /// default `python3`).
    #[arg(long)]
    pub peers: bool,
    /// Search this index instead of building one.
    #[arg(long)]
    pub index: Option<PathBuf>,
    /// Output folder (results.json, pareto.png, the index).
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Timed runs per point (median reported), after one warm-up.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// A smaller parameter grid.
    #[arg(long)]
    pub quick: bool,
    /// Sweep only these search shapes, as start points x waves
    /// (`--shapes 32x3,48x4`), each with the grid's rerank and read depths;
    /// instead of the built-in (S, W) pairs of the full or quick grid.
    #[arg(long, value_delimiter = ',', value_parser = parse_shape)]
    pub shapes: Vec<(usize, usize)>,
    /// With `--shapes`: the read depths `r` of every shape (`--read-depths
    /// 4,6,8`) instead of the grid's (GPU 8,12,16; CPU 16).
    #[arg(long, value_delimiter = ',', requires = "shapes")]
    pub read_depths: Vec<usize>,
    /// With `--shapes`: the reranks `R` of every shape instead of the grid's
    /// (GPU 16,32; CPU 32,64).
    #[arg(long, value_delimiter = ',', requires = "shapes")]
    pub reranks: Vec<usize>,
    /// Recall@10 targets (repeatable): each adds, before the grid, the point
    /// `Index::tune_for_recall_on` tunes for it on a sample of the queries,
    /// so its real recall and speed are measured beside the sweep.
    #[arg(long)]
    pub recall: Vec<f64>,
    #[arg(long, default_value_t = Backend::Auto)]
    pub backend: Backend,
    #[command(flatten)]
    pub build: BuildFlags,
}

/// One `--shapes` item, `SxW` (start points x waves), both at least 1.
fn parse_shape(v: &str) -> Result<(usize, usize), String> {
    let bad = || format!("{v:?} is not a search shape: start points x waves, as in 32x3");
    let (s, w) = v.trim().split_once(['x', 'X']).ok_or_else(bad)?;
    let s: usize = s.trim().parse().map_err(|_| bad())?;
    let w: usize = w.trim().parse().map_err(|_| bad())?;
    if s == 0 || w == 0 {
        return Err(bad());
    }
    Ok((s, w))
}

/// What `bench` sweeps: the quick or full grid, or only the given shapes,
/// each with the given read depths and reranks (empty: the grid's).
#[derive(Clone, Copy, Debug)]
pub struct Sweep<'a> {
    pub quick: bool,
    pub shapes: &'a [(usize, usize)],
    pub read_depths: &'a [usize],
    pub reranks: &'a [usize],
}

impl<'a> Sweep<'a> {
    pub fn of(args: &'a BenchArgs) -> Self {
        Self {
            quick: args.quick,
            shapes: &args.shapes,
            read_depths: &args.read_depths,
            reranks: &args.reranks,
        }
    }

    /// `given`, or `default` when none were given.
    pub fn or<'b>(given: &'b [usize], default: &'b [usize]) -> &'b [usize] {
        if given.is_empty() {
            default
        } else {
            given
        }
    }
}

/// The sweep: (r, S, W, R); `shapes`, when given, are the only (S, W)
/// pairs (no high-recall or cheap end).
fn grid(sweep: Sweep) -> Vec<SearchParams> {
    let (quick, shapes) = (sweep.quick, sweep.shapes);
    let mut g = Vec::new();
    let sw: &[(usize, usize)] = if !shapes.is_empty() {
        shapes
    } else if quick {
        &[(8, 1), (16, 1), (16, 2), (32, 2), (32, 3), (64, 3), (64, 4)]
    } else {
        &[
            (8, 1),
            (8, 2),
            (16, 1),
            (16, 2),
            (16, 3),
            (32, 2),
            (32, 3),
            (32, 4),
            (48, 3),
            (64, 3),
            (64, 4),
            (96, 4),
            (96, 5),
            (128, 4),
            (128, 5),
            (160, 5),
            (192, 6),
        ]
    };
    if !shapes.is_empty() {
        for &(s, w) in sw {
            for &rerank in Sweep::or(sweep.reranks, &[32, 64]) {
                for &read_depth in Sweep::or(sweep.read_depths, &[16]) {
                    g.push(SearchParams {
                        read_depth,
                        start_points: s,
                        waves: w,
                        rerank,
                        wave_rerank: false,
                    });
                }
            }
        }
        return g;
    }
    for &(s, w) in sw {
        for r in [32usize, 64] {
            if r == 64 && s < 16 {
                continue;
            }
            g.push(SearchParams {
                read_depth: 16,
                start_points: s,
                waves: w,
                rerank: r,
                wave_rerank: false,
            });
        }
    }
    // Deeper reranks, once or in every wave (the high-recall end).
    if !quick {
        g.extend(high_recall_points(
            &[(64, 3), (128, 4), (256, 4)],
            &[64, 128],
        ));
    }
    // The cheap end: shallower reads and reranks.
    for (r, s, w, rr) in [(8, 4, 1, 16), (8, 8, 1, 16), (16, 8, 1, 16), (8, 16, 2, 32)] {
        g.push(SearchParams {
            read_depth: r,
            start_points: s,
            waves: w,
            rerank: rr,
            wave_rerank: false,
        });
    }
    g
}

/// The high-recall end of a sweep: every `(S, W)` with every `R`, reranked
/// once and in every wave, at `r = 16`.
pub fn high_recall_points(sw: &[(usize, usize)], reranks: &[usize]) -> Vec<SearchParams> {
    let mut g = Vec::new();
    for &(start_points, waves) in sw {
        for &rerank in reranks {
            for wave_rerank in [false, true] {
                g.push(SearchParams {
                    read_depth: 16,
                    start_points,
                    waves,
                    rerank,
                    wave_rerank,
                });
            }
        }
    }
    g
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

pub fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    json!({"cpu": cpu, "threads": rayon::current_num_threads(), "kernel": octex_search::simd::best_kernel().1})
}

/// The Python environment of the peers: `.venv` at the workspace root, made and
/// filled with pip on first use.
pub fn peer_python() -> Result<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let venv = root.join(".venv");
    let py = venv.join("bin/python");
    let ok = Command::new(&py)
        .args(["-c", "import numpy, hnswlib, faiss"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        return Ok(py);
    }
    println!(
        "setting up the peers' Python environment in {} (numpy, hnswlib, faiss-cpu) ...",
        venv.display()
    );
    if !py.exists() {
        let s = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .context("python3 -m venv")?;
        if !s.success() {
            bail!(
                "python3 -m venv {} failed (Debian: apt-get install python3-venv)",
                venv.display()
            );
        }
    }
    let s = Command::new(&py)
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "numpy",
            "hnswlib",
            "faiss-cpu",
        ])
        .status()
        .context("pip install")?;
    if !s.success() {
        bail!("pip could not install numpy, hnswlib and faiss-cpu");
    }
    Ok(py)
}

/// Peers' search points and build records.
fn run_peers(ds: &Dataset, repeats: usize) -> Result<(Vec<Value>, Vec<Value>)> {
    let py = peer_python()?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/peers.py");
    println!("running peers (hnswlib M=16 efC=200, Faiss HNSW32, Faiss IVF-Flat, Faiss flat) on {} threads ...", rayon::current_num_threads());
    let out = Command::new(py)
        .arg(script)
        .args(["--base".as_ref(), ds.base().as_os_str()])
        .args(["--queries".as_ref(), ds.queries().as_os_str()])
        .args(["--gt".as_ref(), ds.gt().as_os_str()])
        .args([
            "--metric",
            &ds.manifest.metric,
            "--threads",
            &rayon::current_num_threads().to_string(),
            "--repeats",
            &repeats.to_string(),
        ])
        .output()
        .context("running peers.py")?;
    if !out.status.success() {
        bail!("peers.py failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let all: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let (builds, points) = all
        .into_iter()
        .partition(|v: &Value| v.get("build").is_some());
    Ok((points, builds))
}

pub fn run(args: BenchArgs, root: &Path) -> Result<()> {
    let backend = args.backend.resolve()?;
    let ds = Dataset::open(&args.data, root)?;
    let metric = ds.metric()?;
    let (queries, dim) = data::read_vectors(&ds.queries())?;
    let nq = queries.len() / dim;
    std::fs::create_dir_all(&args.out)?;
    let index_path = args.out.join(format!("{}.octex", ds.manifest.name));

    let (index, build) = match &args.index {
        Some(p) => (Index::load(p)?, json!({"loaded": p})),
        None => {
            let (base, bdim) = data::read_vectors(&ds.base())?;
            let params = args.build.params(args.backend)?;
            let t = Instant::now();
            let built = octex_build::build_with_progress(
                &base,
                bdim,
                metric,
                &params,
                &crate::progress::Bars::default(),
            )?;
            let secs = t.elapsed().as_secs_f64();
            print_report(&built.report, base.len() / bdim);
            built.index.save(&index_path)?;
            let n = base.len() / bdim;
            let b = json!({
                "seconds": secs,
                "peak_rss_mib": peak_rss_mib(),
                "index_bytes": built.index.as_bytes().len(),
                "bytes_per_vector": built.index.as_bytes().len() as f64 / n as f64,
                "report": built.report,
            });
            println!(
                "octex build: {secs:.1} s, {:.0} bytes per vector, peak RSS {:.0} MiB",
                b["bytes_per_vector"].as_f64().unwrap_or(0.0),
                peak_rss_mib().unwrap_or(0.0)
            );
            (Index::new(built.index), b)
        }
    };
    let (gt, gk) = data::read_ids(&ds.gt())?;
    let mut tuned = Vec::new();
    for &target in &args.recall {
        let t = index.tune_for_recall_on(&queries, target, 10)?;
        println!(
            "--recall {target}: {:?} (recall@10 {:.4} on {} tuning queries, {:.4} held back); measured first below",
            t.params,
            t.sample_recall,
            octex_search::TUNE_QUERIES.min(queries.len() / dim / 2),
            t.held_out_recall
        );
        if let Some(advice) = t.advice(&index) {
            println!("  warning: {advice}");
        }
        tuned.push(t.params);
    }
    if backend == Backend::Gpu {
        return crate::gpu_bench::run(
            &ds,
            &index,
            build,
            &queries,
            dim,
            (&gt, gk),
            &tuned,
            args.repeats,
            Sweep::of(&args),
            args.peers,
            &args.out,
        );
    }

    // octex sweep.
    let mut points = Vec::new();
    let mut searcher = open(&index, Backend::Cpu, nq)?;
    // The defaults, then each tuned point, then the grid.
    let roles: Vec<String> = std::iter::once("defaults".to_string())
        .chain(args.recall.iter().map(|t| format!("recall={t}")))
        .collect();
    let first = std::iter::once(index.default_params()).chain(tuned.iter().copied());
    for (i, p) in first.chain(grid(Sweep::of(&args))).enumerate() {
        warm_up(&mut searcher, &queries, dim, 10, &p, nq)?;
        let mut times = Vec::new();
        let mut ids = Vec::new();
        let mut stats = octex_search::SearchStats::default();
        for _ in 0..args.repeats.max(1) {
            let (i, secs, st) = timed_search(&mut searcher, &queries, dim, 10, &p, nq)?;
            times.push(secs);
            ids = i;
            stats = st;
        }
        let recall = data::recall_at(&ids, 10, &gt, gk, 10)?;
        let secs = median(times);
        let q = stats.queries.max(1) as f64;
        println!(
            "octex r={} S={:>3} W={} R={:>3}{}: recall@10 {recall:.4}  {:>9.0} QPS  ({:.0} sketch + {:.0} exact distances/query)",
            p.read_depth,
            p.start_points,
            p.waves,
            p.rerank,
            if p.wave_rerank { " every wave" } else { "" },
            nq as f64 / secs,
            stats.sketch_distances as f64 / q,
            stats.exact_distances as f64 / q
        );
        points.push(json!({"system": "octex", "params": p, "recall": recall, "qps": nq as f64 / secs, "seconds": secs,
            "sketch_per_query": stats.sketch_distances as f64 / q, "exact_per_query": stats.exact_distances as f64 / q,
            "role": roles.get(i)}));
    }

    // Exact brute force (ours: blocked GEMM on all cores).
    let (base, _) = data::read_vectors(&ds.base())?;
    let t = Instant::now();
    data::ground_truth(&base, &queries, dim, 10, metric)?;
    let bf_secs = t.elapsed().as_secs_f64();
    println!("octex exact brute force: {:.0} QPS", nq as f64 / bf_secs);
    points.push(json!({"system": "brute force (octex exact_knn)", "params": "blocked GEMM", "recall": 1.0, "qps": nq as f64 / bf_secs, "seconds": bf_secs}));
    drop(base);

    let mut peer_builds = Vec::new();
    if args.peers {
        let (peer_points, builds) = run_peers(&ds, args.repeats)?;
        for b in &builds {
            println!(
                "{} build ({}): {:.1} s, {:.0} bytes per vector, peak RSS {:.0} MiB (with the data)",
                b["build"].as_str().unwrap_or(""),
                b["params"].as_str().unwrap_or(""),
                b["build_seconds"].as_f64().unwrap_or(0.0),
                b["bytes_per_vector"].as_f64().unwrap_or(0.0),
                b["peak_rss_mib_with_data"].as_f64().unwrap_or(0.0)
            );
        }
        peer_builds = builds;
        for v in peer_points {
            println!(
                "{:<20} {:<34} recall@10 {:.4}  {:>9.0} QPS",
                v["system"].as_str().unwrap_or(""),
                v["params"].as_str().unwrap_or(""),
                v["recall"].as_f64().unwrap_or(0.0),
                v["qps"].as_f64().unwrap_or(0.0)
            );
            points.push(v);
        }
    }

    // Summary at the recall targets.
    let mut systems: Vec<String> = points
        .iter()
        .filter_map(|p| p["system"].as_str().map(String::from))
        .collect();
    systems.dedup();
    let mut summary = Vec::new();
    println!(
        "\nbest QPS at recall@10 >= target ({}, {} threads):",
        machine()["cpu"].as_str().unwrap_or(""),
        rayon::current_num_threads()
    );
    for target in [0.9, 0.95, 0.99, 0.995] {
        let best = |sys: &str| {
            points
                .iter()
                .filter(|p| p["system"] == sys && p["recall"].as_f64().unwrap_or(0.0) >= target)
                .filter_map(|p| p["qps"].as_f64())
                .fold(None, |a: Option<f64>, q| Some(a.map_or(q, |a| a.max(q))))
        };
        let ours = best("octex");
        let mut row = json!({"target": target, "octex": ours});
        let mut best_peer: Option<(String, f64)> = None;
        for s in systems.iter().filter(|s| s.as_str() != "octex") {
            let q = best(s);
            row[s.as_str()] = json!(q);
            if let Some(q) = q {
                if best_peer.as_ref().is_none_or(|b| q > b.1) {
                    best_peer = Some((s.clone(), q));
                }
            }
        }
        let ratio = match (ours, &best_peer) {
            (Some(o), Some((_, b))) => Some(o / b),
            _ => None,
        };
        row["ratio_vs_best_peer"] = json!(ratio);
        println!(
            "  {target:.3}: octex {:>9}  best peer {:<32} ratio {}",
            ours.map_or("-".into(), |q| format!("{q:.0}")),
            best_peer
                .as_ref()
                .map_or("-".into(), |b| format!("{} {:.0}", b.0, b.1)),
            ratio.map_or("-".into(), |r| format!("{r:.2}x"))
        );
        summary.push(row);
    }

    // The defaults and each tuned point against the best peer at the recall
    // it reached.
    let mut chosen = Vec::new();
    println!("octex's chosen points against the best peer at the recall each reached:");
    for p in points.iter().filter(|p| p["role"].is_string()) {
        let (recall, qps) = (
            p["recall"].as_f64().unwrap_or(0.0),
            p["qps"].as_f64().unwrap_or(0.0),
        );
        let peer = points
            .iter()
            .filter(|v| {
                v["system"] != "octex"
                    && !v["system"]
                        .as_str()
                        .unwrap_or("")
                        .starts_with("brute force")
            })
            .filter(|v| v["recall"].as_f64().unwrap_or(0.0) >= recall)
            .max_by(|a, b| {
                a["qps"]
                    .as_f64()
                    .unwrap_or(0.0)
                    .total_cmp(&b["qps"].as_f64().unwrap_or(0.0))
            });
        let peer_qps = peer.and_then(|v| v["qps"].as_f64());
        println!(
            "  {:<12} recall@10 {recall:.4} {qps:>9.0} QPS; best peer {} ratio {}",
            p["role"].as_str().unwrap_or(""),
            peer.map_or("none reaches it".into(), |v| format!(
                "{} {} {:.0} QPS",
                v["system"].as_str().unwrap_or(""),
                v["params"].as_str().unwrap_or(""),
                v["qps"].as_f64().unwrap_or(0.0)
            )),
            peer_qps.map_or("-".into(), |b| format!("{:.2}x", qps / b))
        );
        chosen.push(json!({"role": p["role"], "recall": recall, "qps": qps,
            "best_peer": peer.map(|v| v["system"].clone()), "best_peer_params": peer.map(|v| v["params"].clone()),
            "best_peer_qps": peer_qps, "ratio": peer_qps.map(|b| qps / b)}));
    }

    let results = json!({
        "dataset": ds.manifest,
        "chosen": chosen,
        "queries": nq,
        "grid": {"quick": args.quick, "shapes": args.shapes},
        "machine": machine(),
        "build": build,
        "peer_builds": peer_builds,
        "points": points,
        "summary": summary,
    });
    let rpath = args.out.join("results.json");
    std::fs::write(&rpath, serde_json::to_string_pretty(&results)?)?;
    let ppath = args.out.join("pareto.png");
    plot_results(&results, &ppath)?;
    println!("wrote {} and {}", rpath.display(), ppath.display());
    Ok(())
}

fn plot_title(results: &Value) -> String {
    match results["machine"]["gpu"].as_str() {
        Some(gpu) => format!(
            "{} ({} queries per batch, {gpu})",
            results["dataset"]["name"].as_str().unwrap_or("?"),
            results["queries"],
        ),
        None => format!(
            "{} ({} queries, {} threads, {})",
            results["dataset"]["name"].as_str().unwrap_or("?"),
            results["queries"],
            results["machine"]["threads"],
            results["machine"]["cpu"].as_str().unwrap_or("?")
        ),
    }
}

/// Redraw `pareto.png` from a `results.json`.
pub fn replot(results: &Path, out: &Path) -> Result<()> {
    let r: Value = serde_json::from_str(&std::fs::read_to_string(results)?)?;
    plot_results(&r, out)?;
    println!("wrote {}", out.display());
    Ok(())
}

/// The Pareto plot of a bench's results: one frontier per system.
pub fn plot_results(r: &Value, out: &Path) -> Result<()> {
    let points = r["points"].as_array().cloned().unwrap_or_default();
    let mut names: Vec<String> = points
        .iter()
        .filter(|p| p.get("recall").is_some())
        .filter_map(|p| p["system"].as_str().map(String::from))
        .collect();
    names.dedup();
    let mut series: Vec<Series> = names
        .iter()
        .map(|s| {
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p["system"] == s.as_str())
                .map(|p| {
                    (
                        p["recall"].as_f64().unwrap_or(0.0),
                        p["qps"].as_f64().unwrap_or(0.0),
                    )
                })
                .collect();
            Series {
                name: s.clone(),
                points: frontier(&pts),
            }
        })
        .collect();
    // Reference figures carried in the results (cuVS on the same kind of GPU,
    // from issue 5), drawn as their own series and named as not measured here.
    if let Some(refs) = r["cuvs_reference_issue5"].as_array() {
        let mut systems: Vec<String> = refs
            .iter()
            .filter_map(|p| p["system"].as_str().map(String::from))
            .collect();
        systems.dedup();
        for sys in systems {
            let pts: Vec<(f64, f64)> = refs
                .iter()
                .filter(|p| p["system"] == sys.as_str())
                .map(|p| {
                    (
                        p["recall"].as_f64().unwrap_or(0.0),
                        p["qps"].as_f64().unwrap_or(0.0),
                    )
                })
                .collect();
            series.push(Series {
                name: format!("{sys} (issue 5 figures, not this run)"),
                points: frontier(&pts),
            });
        }
    }
    pareto_png(out, &plot_title(r), &series)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_and_replace_the_grid() {
        assert_eq!(parse_shape("32x3"), Ok((32, 3)));
        assert_eq!(parse_shape(" 48X4 "), Ok((48, 4)));
        for bad in ["32", "0x3", "32x0", "ax3", "32x3x1", ""] {
            assert!(parse_shape(bad).is_err(), "{bad:?} was accepted");
        }
        let sweep = |shapes, read_depths, reranks| Sweep {
            quick: false,
            shapes,
            read_depths,
            reranks,
        };
        let g = grid(sweep(&[(32, 3), (48, 4)], &[], &[]));
        assert!(!g.is_empty());
        assert!(g
            .iter()
            .all(|p| [(32, 3), (48, 4)].contains(&(p.start_points, p.waves))));
        assert!(grid(sweep(&[], &[], &[])).len() > g.len());
        // Read depths and reranks replace the grid's for the shapes.
        let g = grid(sweep(&[(8, 1)], &[4, 6], &[12]));
        let got: Vec<_> = g.iter().map(|p| (p.read_depth, p.rerank)).collect();
        assert_eq!(got, [(4, 12), (6, 12)]);
    }
}
