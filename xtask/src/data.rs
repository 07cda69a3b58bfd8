//! Data sets on disk: a folder with `base.fvecs`, `query.fvecs`, `gt.ivecs` (exact
//! top-100 ids) and `manifest.json`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use octex_index::vecfile::{write_ivecs, VectorFile};
use octex_index::Metric;
use serde::{Deserialize, Serialize};

/// Ground-truth depth stored by `fetch`.
pub const GT_K: usize = 100;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub name: String,
    pub source: String,
    pub version: String,
    pub base: usize,
    pub queries: usize,
    pub dim: usize,
    pub metric: String,
    pub gt_k: usize,
    pub notes: String,
}

/// Where data sets live: `--data-dir`, else `$OCTEX_DATA`, else `./data`.
pub fn data_root(arg: Option<&Path>) -> PathBuf {
    arg.map(Path::to_path_buf)
        .or_else(|| std::env::var_os("OCTEX_DATA").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("data"))
}

/// A fetched data set.
pub struct Dataset {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

impl Dataset {
    /// Resolve `NAME` (under the data root) or a folder path.
    pub fn open(name_or_dir: &str, root: &Path) -> Result<Self> {
        let p = Path::new(name_or_dir);
        let dir = if p.join("manifest.json").exists() {
            p.to_path_buf()
        } else {
            root.join(name_or_dir)
        };
        let mpath = dir.join("manifest.json");
        let text = std::fs::read_to_string(&mpath).with_context(|| {
            format!(
                "{}: no data set here; run `cargo xtask fetch {name_or_dir}` first",
                mpath.display()
            )
        })?;
        let manifest: Manifest = serde_json::from_str(&text)
            .with_context(|| format!("{}: bad manifest", mpath.display()))?;
        Ok(Self { dir, manifest })
    }
    pub fn base(&self) -> PathBuf {
        self.dir.join("base.fvecs")
    }
    #[allow(dead_code)]
    pub fn queries(&self) -> PathBuf {
        self.dir.join("query.fvecs")
    }
    #[allow(dead_code)]
    pub fn gt(&self) -> PathBuf {
        self.dir.join("gt.ivecs")
    }
    pub fn metric(&self) -> Result<Metric> {
        self.manifest.metric.parse().map_err(anyhow::Error::msg)
    }
}

/// Read a whole vector file as f32.
pub fn read_vectors(path: &Path) -> Result<(Vec<f32>, usize)> {
    let f = VectorFile::open(path)?;
    if f.is_empty() {
        bail!("{}: holds no vectors", path.display());
    }
    Ok((f.read_all_f32()?, f.dim()))
}

/// Read ids (ivecs or .npy i32) with their row width.
pub fn read_ids(path: &Path) -> Result<(Vec<i32>, usize)> {
    let f = VectorFile::open(path)?;
    Ok((f.read_all_i32()?, f.dim()))
}

/// Exact top-`k` ids of every query, nearest first.
pub fn ground_truth(
    base: &[f32],
    queries: &[f32],
    dim: usize,
    k: usize,
    metric: Metric,
) -> Vec<u32> {
    let norm = |v: &[f32]| -> Vec<f32> {
        v.chunks_exact(dim)
            .flat_map(|r| {
                let n = r
                    .iter()
                    .map(|x| x * x)
                    .sum::<f32>()
                    .sqrt()
                    .max(f32::MIN_POSITIVE);
                r.iter().map(move |x| x / n)
            })
            .collect()
    };
    let pb = indicatif::ProgressBar::new((queries.len() / dim) as u64);
    let tick = |n: usize| pb.inc(n as u64);
    let (ids, _) = match metric {
        Metric::L2 => octex_build::knn::exact_knn(
            base,
            queries,
            dim,
            k,
            octex_build::knn::KnnMetric::L2,
            false,
            &tick,
        ),
        Metric::Cosine => octex_build::knn::exact_knn(
            &norm(base),
            &norm(queries),
            dim,
            k,
            octex_build::knn::KnnMetric::L2,
            false,
            &tick,
        ),
        Metric::InnerProduct => octex_build::knn::exact_knn(
            base,
            queries,
            dim,
            k,
            octex_build::knn::KnnMetric::NegDot,
            false,
            &tick,
        ),
    };
    pb.finish_and_clear();
    ids
}

/// Write ids as ivecs (`u32::MAX` as -1).
pub fn write_ids(path: &Path, ids: &[u32], k: usize) -> Result<()> {
    let v: Vec<i32> = ids
        .iter()
        .map(|&i| if i == u32::MAX { -1 } else { i as i32 })
        .collect();
    write_ivecs(path, &v, k)?;
    Ok(())
}

/// recall@k of `results` (`nq x rk`) against `gt` (`nq x gk`), both nearest first.
pub fn recall_at(results: &[i32], rk: usize, gt: &[i32], gk: usize, k: usize) -> Result<f64> {
    if rk < k || gk < k {
        bail!("recall@{k} needs at least {k} results and {k} true neighbours per query (have {rk} and {gk})");
    }
    let nq = results.len() / rk;
    if gt.len() / gk != nq {
        bail!(
            "{nq} result rows against {} ground-truth rows",
            gt.len() / gk
        );
    }
    let mut hits = 0usize;
    for q in 0..nq {
        let truth = &gt[q * gk..q * gk + k];
        hits += results[q * rk..q * rk + k]
            .iter()
            .filter(|id| **id >= 0 && truth.contains(id))
            .count();
    }
    Ok(hits as f64 / (nq * k).max(1) as f64)
}
