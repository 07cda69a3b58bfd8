//! `cargo xtask synth`: a deterministic synthetic data set for scale tests
//! where real data of that size cannot be fetched (the GPU machine has no
//! network): a Gaussian mixture whose cluster centres and spreads decay along
//! the coordinates, like real embeddings' spectra, plus held-out queries from
//! the same mixture and their exact ground truth.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use octex_index::vecfile::write_fvecs;
use octex_index::Metric;
use octex_lattice::GaussianRng;
use rayon::prelude::*;

use crate::data::{self, Manifest};
use crate::families;

/// Rows drawn per parallel task (each task has its own random stream).
const CHUNK: usize = 16_384;

fn mixture(n: usize, dim: usize, clusters: usize, seed: u64, stream0: u64) -> Vec<f32> {
    let decay: Vec<f64> = (0..dim).map(|j| 1.0 / (1.0 + j as f64 / 12.0)).collect();
    let mut crng = GaussianRng::new(seed, 0);
    let centres: Vec<f64> = (0..clusters * dim)
        .map(|i| 2.5 * crng.normal() * decay[i % dim])
        .collect();
    let mut out = vec![0f32; n * dim];
    out.par_chunks_mut(CHUNK * dim)
        .enumerate()
        .for_each(|(ci, rows)| {
            let mut rng = GaussianRng::new(seed, stream0 + 1 + ci as u64);
            for row in rows.chunks_exact_mut(dim) {
                let c = (rng.next_u64() % clusters as u64) as usize;
                for (j, v) in row.iter_mut().enumerate() {
                    *v = (centres[c * dim + j] + rng.normal() * decay[j]) as f32;
                }
            }
        });
    out
}

/// What `cargo xtask synth` makes: the default mixture (synth-1m) or one of
/// the robustness families, under a metric.
pub struct SynthSpec {
    pub name: Option<String>,
    pub family: Option<String>,
    pub n: usize,
    pub queries: usize,
    pub dim: Option<usize>,
    pub clusters: usize,
    pub metric: Metric,
    pub seed: u64,
}

pub fn run(spec: SynthSpec, root: &Path) -> Result<()> {
    if spec.family.as_deref() == Some("list") {
        for f in families::FAMILIES {
            println!("{:<11} {:>4}-d  {}", f.name, f.dim, f.about);
        }
        return Ok(());
    }
    let t = Instant::now();
    let (name, base, qs, dim, notes) = match &spec.family {
        None => {
            let dim = spec.dim.unwrap_or(128);
            let c = spec.clusters;
            (
                spec.name.clone().unwrap_or_else(|| "synth-1m".into()),
                mixture(spec.n, dim, c, 0x5e7_0001, 0),
                mixture(spec.queries, dim, c, 0x5e7_0001, 1 << 32),
                dim,
                format!("Gaussian mixture of {c} clusters, spectrum decaying as 1/(1+j/12)"),
            )
        }
        Some(f) => {
            let fam = families::family(f).with_context(|| {
                let all: Vec<_> = families::FAMILIES.iter().map(|f| f.name).collect();
                format!("no family {f}; the families: {}", all.join(", "))
            })?;
            let dim = spec.dim.unwrap_or(fam.dim);
            let (b, q) =
                families::make(fam.name, spec.n, spec.queries, dim, spec.seed).context("family")?;
            let metric = match spec.metric {
                Metric::L2 => String::new(),
                m => format!("-{m}"),
            };
            (
                spec.name
                    .clone()
                    .unwrap_or_else(|| format!("fam-{f}{metric}")),
                b,
                q,
                dim,
                fam.about.to_string(),
            )
        }
    };
    let (n, queries, metric) = (spec.n, spec.queries, spec.metric);
    let dir = root.join(&name);
    std::fs::create_dir_all(&dir)?;
    write_fvecs(&dir.join("base.fvecs"), &base, dim)?;
    write_fvecs(&dir.join("query.fvecs"), &qs, dim)?;
    println!(
        "{n} + {queries} vectors of {dim} dims in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let k = 10;
    let gt = data::ground_truth(&base, &qs, dim, k, metric)?;
    data::write_ids(&dir.join("gt.ivecs"), &gt, k)?;
    println!(
        "exact top-{k} ground truth in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let m = Manifest {
        name: name.clone(),
        source: "cargo xtask synth (deterministic)".into(),
        version: "1".into(),
        base: n,
        queries,
        dim,
        metric: metric.to_string(),
        gt_k: k,
        notes,
    };
    std::fs::write(dir.join("manifest.json"), serde_json::to_string_pretty(&m)?)?;
    println!("wrote {}", dir.display());
    Ok(())
}
