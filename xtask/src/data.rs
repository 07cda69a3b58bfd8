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

/// Read ids (ivecs or .npy i32) with their row width; negative ids (none)
/// become `u32::MAX`, as octex reports a missing result.
pub fn read_ids(path: &Path) -> Result<(Vec<u32>, usize)> {
    let f = VectorFile::open(path)?;
    let ids = f.read_all_i32()?;
    Ok((
        ids.into_iter()
            .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
            .collect(),
        f.dim(),
    ))
}

/// Exact top-`k` ids of every query, nearest first, with a progress bar.
pub fn ground_truth(
    base: &[f32],
    queries: &[f32],
    dim: usize,
    k: usize,
    metric: Metric,
) -> Result<Vec<u32>> {
    let pb = indicatif::ProgressBar::new((queries.len() / dim) as u64);
    let ids =
        octex_search::knn::ground_truth(base, queries, dim, k, metric, &|n| pb.inc(n as u64))?;
    pb.finish_and_clear();
    Ok(ids)
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
pub fn recall_at(results: &[u32], rk: usize, gt: &[u32], gk: usize, k: usize) -> Result<f64> {
    Ok(octex_search::knn::recall_at_k(results, rk, gt, gk, k)?)
}
