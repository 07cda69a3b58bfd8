//! `cargo xtask synth`: a deterministic synthetic data set for scale tests
//! where real data of that size cannot be fetched (the GPU machine has no
//! network): a Gaussian mixture whose cluster centres and spreads decay along
//! the coordinates, like real embeddings' spectra, plus held-out queries from
//! the same mixture and their exact ground truth.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use octex_index::vecfile::write_fvecs;
use octex_index::Metric;
use octex_lattice::GaussianRng;
use rayon::prelude::*;

use crate::data::{self, Manifest};

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

pub fn run(
    name: &str,
    n: usize,
    queries: usize,
    dim: usize,
    clusters: usize,
    root: &Path,
) -> Result<()> {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir)?;
    let t = Instant::now();
    let base = mixture(n, dim, clusters, 0x5e7_0001, 0);
    let qs = mixture(queries, dim, clusters, 0x5e7_0001, 1 << 32);
    write_fvecs(&dir.join("base.fvecs"), &base, dim)?;
    write_fvecs(&dir.join("query.fvecs"), &qs, dim)?;
    println!(
        "{n} + {queries} vectors of {dim} dims in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let k = 10;
    let gt = data::ground_truth(&base, &qs, dim, k, Metric::L2);
    data::write_ids(&dir.join("gt.ivecs"), &gt, k)?;
    println!(
        "exact top-{k} ground truth in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let m = Manifest {
        name: name.to_string(),
        source: "cargo xtask synth (deterministic)".into(),
        version: "1".into(),
        base: n,
        queries,
        dim,
        metric: "l2".into(),
        gt_k: k,
        notes: format!("Gaussian mixture of {clusters} clusters, spectrum decaying as 1/(1+j/12)"),
    };
    std::fs::write(dir.join("manifest.json"), serde_json::to_string_pretty(&m)?)?;
    println!("wrote {}", dir.display());
    Ok(())
}
