//! `cargo xtask demo`: fetch GloVe-50, build an index, search the 10,000 held-out
//! queries, print recall@10, QPS and the speedup over exact brute force.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use octex_search::{Backend, Index};

use crate::data::{self, Dataset};
use crate::search_cmd::{open, timed_search, warm_up};

pub fn run(name: &str, root: &Path, backend: Backend, recall: Option<f64>) -> Result<()> {
    let backend = backend.resolve()?;
    crate::fetch::fetch(name, root)?;
    let ds = Dataset::open(name, root)?;
    let metric = ds.metric()?;
    let (base, dim) = data::read_vectors(&ds.base())?;
    let (queries, _) = data::read_vectors(&ds.queries())?;
    let n = base.len() / dim;
    let nq = queries.len() / dim;
    println!("{name}: {n} vectors, {nq} queries, dimension {dim}, {metric}; backend {backend}, {} threads", rayon::current_num_threads());

    let params = octex_build::BuildParams {
        backend,
        ..Default::default()
    };
    let t = Instant::now();
    let built = octex_build::build_with_progress(
        &base,
        dim,
        metric,
        &params,
        &crate::progress::Bars::default(),
    )?;
    let build_secs = t.elapsed().as_secs_f64();
    crate::build_cmd::print_report(&built.report, n);
    let path = root.join(format!("{name}.octex"));
    built.index.save(&path)?;
    println!("built in {build_secs:.1} s -> {}", path.display());

    let index = Index::load(&path)?;
    let p = match recall {
        Some(target) => {
            let t = index.tune_for_recall_on(&queries, target, 10)?;
            println!(
                "--recall {target}: {:?} (recall@10 {:.4} on the tuning queries, {:.4} held back)",
                t.params, t.sample_recall, t.held_out_recall
            );
            if let Some(advice) = t.advice(&index) {
                println!("  warning: {advice}");
            }
            t.params
        }
        None => index.default_params(),
    };
    let batch = match backend {
        Backend::Gpu => nq.min(10_000),
        _ => nq,
    };
    let mut searcher = open(&index, backend, batch)?;
    warm_up(&mut searcher, &queries, dim, 10, &p, batch)?;
    let (ids, secs, _) = timed_search(&mut searcher, &queries, dim, 10, &p, batch)?;
    let recall = crate::search_cmd::recall_of(&ids, 10, &ds.gt())?;
    let qps = nq as f64 / secs;

    let t = Instant::now();
    let exact = data::ground_truth(&base, &queries, dim, 10, metric)?;
    let bf_secs = t.elapsed().as_secs_f64();
    let bf_qps = nq as f64 / bf_secs;
    let bf_recall = crate::search_cmd::recall_of(&exact, 10, &ds.gt())?;
    println!("octex ({p:?}): recall@10 {recall:.4}, {qps:.0} QPS");
    println!(
        "exact brute force on the CPU (blocked GEMM, all threads): recall@10 {bf_recall:.4}, {bf_qps:.0} QPS"
    );
    println!("speedup over brute force: {:.1}x", qps / bf_qps);
    println!(
        "{}",
        serde_json::json!({"backend": backend.name(), "queries": nq, "seconds": secs, "qps": qps, "recall": recall, "brute_force_qps": bf_qps, "speedup": qps / bf_qps, "build_seconds": build_secs})
    );
    Ok(())
}
