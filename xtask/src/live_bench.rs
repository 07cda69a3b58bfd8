//! `cargo xtask bench-live`: an index grown by adds and shrunk by removes
//! ([`octex_build::LiveIndex`]) against a fresh build of the same vectors,
//! and hnswlib's adds on the same cores in the same run (`--peers`): the
//! first half of the base built, the second added in 10 steps and
//! inserted (the insertions in the add time), recall@10 at the default search after growing
//! and after removing every tenth vector.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use octex_build::{build, BuildParams, LiveIndex};
use octex_search::SearchParams;

use crate::data::{read_vectors, write_ids, Dataset};

#[derive(Args, Debug)]
pub struct LiveBenchArgs {
    /// Data set name or folder.
    #[arg(long)]
    pub data: String,
    /// Queries used (the first of the set).
    #[arg(long, default_value_t = 1_000)]
    pub queries: usize,
    /// hnswlib's adds and removals in the same run.
    #[arg(long)]
    pub peers: bool,
}

/// recall@10 of user-id results against exact positions (user id =
/// position).
fn recall_by_id(found: &[u64], truth: &[u32], tk: usize, keep: &dyn Fn(u32) -> bool) -> f64 {
    let (mut hits, mut total) = (0usize, 0usize);
    for (f, t) in found.chunks_exact(10).zip(truth.chunks_exact(tk)) {
        let want: Vec<u32> = t.iter().copied().filter(|&p| keep(p)).take(10).collect();
        total += want.len();
        hits += want.iter().filter(|&&p| f.contains(&(p as u64))).count();
    }
    hits as f64 / total.max(1) as f64
}

pub fn run(args: LiveBenchArgs, root: &Path) -> Result<()> {
    let ds = Dataset::open(&args.data, root)?;
    let metric = ds.metric()?;
    let (base, dim) = read_vectors(&ds.base())?;
    let (queries, _) = read_vectors(&ds.queries())?;
    let n = base.len() / dim;
    let nq = args.queries.min(queries.len() / dim);
    let queries = &queries[..nq * dim];
    // The exact 20 nearest: the 10 nearest that are left after every tenth
    // vector goes are among them (but for queries with many removed ones).
    let gk = 20;
    let gt = octex_search::knn::ground_truth(&base, queries, dim, gk, metric, &|_| {})?;
    let gt_path = std::env::temp_dir().join(format!("octex-live-gt-{}.ivecs", std::process::id()));
    write_ids(&gt_path, &gt, gk)?;
    let half = n / 2;
    let params = BuildParams::default();
    let p = SearchParams::default();
    let threads = rayon::current_num_threads();
    println!(
        "{}: {n} x {dim} ({metric:?}), {nq} queries, {threads} threads",
        ds.manifest.name
    );

    let t = Instant::now();
    let first = build(&base[..half * dim], dim, metric, &params)?;
    let first_secs = t.elapsed().as_secs_f64();
    let mut live = LiveIndex::new(octex_search::Index::new(first.index), params.clone());
    let step = (n - half).div_ceil(10);
    let t = Instant::now();
    for a in (half..n).step_by(step) {
        let b = (a + step).min(n);
        live.add(&base[a * dim..b * dim], None)?;
    }
    // Every added vector in the index, none left to the exact scan.
    live.flush()?;
    let add_secs = t.elapsed().as_secs_f64();
    let all = |_: u32| true;
    let grown = recall_by_id(
        &live.search(queries, 10, &p, None)?.ids,
        &gt[..nq * gk],
        gk,
        &all,
    );
    let t = Instant::now();
    let res = live.search(queries, 10, &p, None)?;
    let grown_qps = nq as f64 / t.elapsed().as_secs_f64();
    drop(res);
    let t = Instant::now();
    let fresh = octex_search::Index::new(build(&base, dim, metric, &params)?.index);
    let fresh_secs = t.elapsed().as_secs_f64();
    let fres = fresh.search(queries, 10, &p)?;
    let fresh_ids: Vec<u64> = fres.ids.iter().map(|&i| i as u64).collect();
    let fresh_recall = recall_by_id(&fresh_ids, &gt[..nq * gk], gk, &all);
    println!(
        "octex: build of the first {half} {first_secs:.1} s; {} added in 10 steps in {add_secs:.1} s ({:.0} vectors/s, inserted in place, {} pending at the end); recall@10 {grown:.4} at {grown_qps:.0} QPS; a fresh build of all {n}: {fresh_secs:.1} s, recall@10 {fresh_recall:.4}",
        n - half,
        (n - half) as f64 / add_secs,
        live.pending()
    );
    let removed: Vec<u64> = (0..n as u64).step_by(10).collect();
    let t = Instant::now();
    live.remove(&removed);
    let remove_secs = t.elapsed().as_secs_f64();
    let kept = |pos: u32| pos % 10 != 0;
    let res = live.search(queries, 10, &p, None)?;
    if res.ids.iter().any(|&id| id != u64::MAX && id % 10 == 0) {
        bail!("a removed id came back");
    }
    let after = recall_by_id(&res.ids, &gt[..nq * gk], gk, &kept);
    println!("octex: every tenth removed in {remove_secs:.3} s; none returned; recall@10 over the rest {after:.4}");

    if args.peers {
        let py = crate::bench::peer_python()?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/live_peers.py");
        let out = Command::new(py)
            .arg(script)
            .args(["--base".as_ref(), ds.base().as_os_str()])
            .args(["--queries".as_ref(), ds.queries().as_os_str()])
            .args(["--gt".as_ref(), gt_path.as_os_str()])
            .args(["--metric", &ds.manifest.metric])
            .args(["--nq", &nq.to_string(), "--threads", &threads.to_string()])
            .output()
            .context("running live_peers.py")?;
        if !out.status.success() {
            bail!(
                "live_peers.py failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
    std::fs::remove_file(&gt_path).ok();
    Ok(())
}
