//! A sharded index: one octex index per shard, a manifest that names them,
//! and [`merge_topk`] of the shards' answers. Engine-neutral: a process
//! holding every shard searches them here; a cluster (one worker per shard)
//! merges its workers' answers with the same [`merge_topk`].
//!
//! Ids are global: shard `s` holds the vectors `first_id .. first_id + len`
//! of the data it was cut from. The manifest (`manifest.json` in the shard
//! directory, written atomically after the shard files) records the metric,
//! dimension, each shard's file, first id and size, and the build
//! parameters. Each shard is built on its own vectors (its own projections
//! and spacings).

use std::path::Path;

use octex_index::{atomic::write_atomically, Metric, PAD_ID};
use octex_search::{Backend, Queries, SearchParams, SharedIndex};
use serde::{Deserialize, Serialize};

use crate::{build, BuildError, BuildParams};

/// The version of the manifest this crate reads and writes.
pub const MANIFEST_VERSION: u32 = 1;
/// The manifest's file name in a shard directory.
pub const MANIFEST: &str = "manifest.json";

/// One shard of a [`ShardManifest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// The shard's index file, relative to the directory.
    pub file: String,
    /// Global id of the shard's first vector.
    pub first_id: u64,
    /// Vectors in the shard.
    pub len: u64,
}

/// What a shard directory holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardManifest {
    pub version: u32,
    pub metric: Metric,
    pub dim: usize,
    pub shards: Vec<ShardEntry>,
    pub build_params: BuildParams,
}

/// Why a sharded index could not be built, saved or loaded.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(transparent)]
    Index(#[from] octex_index::IndexError),
    #[error(transparent)]
    Search(#[from] octex_search::SearchError),
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Shards and their manifest, in memory.
pub struct ShardedIndex {
    manifest: ShardManifest,
    /// Each shard with its GPU searcher, opened at its first GPU search.
    shards: Vec<SharedIndex>,
}

impl ShardedIndex {
    /// Cut `data` (`n x dim`) into `shards` contiguous id ranges of near
    /// equal size and build an index on each.
    pub fn build(
        data: &[f32],
        dim: usize,
        metric: Metric,
        shards: usize,
        params: &BuildParams,
    ) -> Result<Self, ShardError> {
        if dim == 0 || data.len() % dim != 0 {
            return Err(ShardError::Invalid(format!(
                "{} values are not rows of dimension {dim}",
                data.len()
            )));
        }
        let n = data.len() / dim;
        if shards == 0 || shards > n {
            return Err(ShardError::Invalid(format!(
                "{shards} shards for {n} vectors: between 1 and the number of vectors"
            )));
        }
        let mut entries = Vec::with_capacity(shards);
        let mut built = Vec::with_capacity(shards);
        for s in 0..shards {
            let (a, b) = (n * s / shards, n * (s + 1) / shards);
            let index = build(&data[a * dim..b * dim], dim, metric, params)?.index;
            built.push(SharedIndex::new(octex_search::Index::new(index)));
            entries.push(ShardEntry {
                file: format!("shard-{s:05}.octex"),
                first_id: a as u64,
                len: (b - a) as u64,
            });
        }
        let manifest = ShardManifest {
            version: MANIFEST_VERSION,
            metric,
            dim,
            shards: entries,
            build_params: params.clone(),
        };
        Ok(Self {
            manifest,
            shards: built,
        })
    }

    pub fn manifest(&self) -> &ShardManifest {
        &self.manifest
    }

    /// Shard `s`'s index.
    pub fn shard(&self, s: usize) -> &octex_search::Index {
        self.shards[s].index()
    }

    /// Vectors in all shards.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.index().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Write every shard file, then the manifest, into `dir` (created if
    /// missing), each atomically: a crash leaves the previous manifest.
    pub fn save(&self, dir: &Path) -> Result<(), ShardError> {
        std::fs::create_dir_all(dir).map_err(|source| ShardError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        for (entry, index) in self.manifest.shards.iter().zip(&self.shards) {
            index.index().raw().save(dir.join(&entry.file))?;
        }
        write_manifest(dir, &self.manifest)
    }

    /// Load the manifest of `dir` and every shard it names, validated:
    /// shard sizes as the manifest says, dimensions and metric alike, id
    /// ranges disjoint.
    pub fn load(dir: &Path) -> Result<Self, ShardError> {
        let path = dir.join(MANIFEST);
        let bytes = std::fs::read(&path).map_err(|source| ShardError::Io {
            path: path.clone(),
            source,
        })?;
        let manifest: ShardManifest = serde_json::from_slice(&bytes).map_err(|e| {
            ShardError::Invalid(format!("{}: not a shard manifest: {e}", path.display()))
        })?;
        if manifest.version != MANIFEST_VERSION {
            return Err(ShardError::Invalid(format!(
                "{}: manifest version {}, this build reads {MANIFEST_VERSION}",
                path.display(),
                manifest.version
            )));
        }
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let mut shards = Vec::with_capacity(manifest.shards.len());
        for entry in &manifest.shards {
            if entry.file.contains(['/', '\\']) || entry.file.starts_with('.') {
                return Err(ShardError::Invalid(format!(
                    "shard file {:?} is not a plain name in the directory",
                    entry.file
                )));
            }
            let raw = octex_index::Index::load(dir.join(&entry.file))?;
            if raw.len() as u64 != entry.len
                || raw.input_dim() != manifest.dim
                || raw.metric() != manifest.metric
            {
                return Err(ShardError::Invalid(format!(
                    "{}: {} vectors of dimension {} ({}), the manifest says {} of {} ({})",
                    entry.file,
                    raw.len(),
                    raw.input_dim(),
                    raw.metric(),
                    entry.len,
                    manifest.dim,
                    manifest.metric
                )));
            }
            let end = entry
                .first_id
                .checked_add(entry.len)
                .ok_or_else(|| ShardError::Invalid(format!("{}: ids past 2^64", entry.file)))?;
            if ranges.iter().any(|&(a, b)| entry.first_id < b && a < end) {
                return Err(ShardError::Invalid(format!(
                    "{}: ids {}..{end} overlap another shard's",
                    entry.file, entry.first_id
                )));
            }
            ranges.push((entry.first_id, end));
            shards.push(SharedIndex::new(octex_search::Index::new(raw)));
        }
        if shards.is_empty() {
            return Err(ShardError::Invalid(format!(
                "{}: no shards",
                path.display()
            )));
        }
        Ok(Self { manifest, shards })
    }

    /// The `k` nearest of each query over all shards: global ids
    /// (`u64::MAX` where fewer than `k` exist) and distances, `nq x k`.
    /// With `p` `None`, each shard searches at its own defaults
    /// ([`octex_search::Index::default_params`]). On `backend`
    /// ([`Backend::resolve`]): on the GPU, each shard's searcher opens at its
    /// first search and stays open.
    pub fn search(
        &self,
        queries: &[f32],
        k: usize,
        p: Option<&SearchParams>,
        backend: Backend,
    ) -> Result<(Vec<u64>, Vec<f32>), ShardError> {
        let queries = Queries::new(queries, self.manifest.dim)?;
        let nq = queries.len();
        let mut answers = Vec::with_capacity(self.shards.len());
        for (entry, shard) in self.manifest.shards.iter().zip(&self.shards) {
            let own = shard.index().default_params();
            let kk = k.min(shard.index().len()).max(1);
            let res = shard.search(queries, kk, p.unwrap_or(&own), backend)?;
            let kk = res.k;
            let ids: Vec<u64> = res
                .ids
                .iter()
                .map(|&i| match i {
                    PAD_ID => u64::MAX,
                    i => entry.first_id + i as u64,
                })
                .collect();
            answers.push((ids, res.distances, kk));
        }
        let parts: Vec<ShardAnswer<'_>> = answers
            .iter()
            .map(|(ids, d, kk)| ShardAnswer {
                ids,
                distances: d,
                k: *kk,
            })
            .collect();
        Ok(merge_topk(&parts, nq, k, Order::Ascending))
    }
}

/// Write `manifest` as `dir`'s manifest, atomically (for shards built
/// elsewhere: by workers that each saved their shard file into `dir`).
pub fn write_manifest(dir: &Path, manifest: &ShardManifest) -> Result<(), ShardError> {
    let json = serde_json::to_vec_pretty(manifest)
        .map_err(|e| ShardError::Invalid(format!("manifest does not encode: {e}")))?;
    write_atomically(&dir.join(MANIFEST), |w| std::io::Write::write_all(w, &json)).map_err(
        |source| ShardError::Io {
            path: dir.to_path_buf(),
            source,
        },
    )
}

/// One shard's answer to a batch: `nq x k` ids (`u64::MAX` where missing)
/// and distances.
#[derive(Clone, Copy, Debug)]
pub struct ShardAnswer<'a> {
    pub ids: &'a [u64],
    pub distances: &'a [f32],
    pub k: usize,
}

/// Which distances are nearer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Smaller is nearer (octex's distances: squared L2, `1 - cos`, `-<q, x>`).
    Ascending,
    /// Larger is nearer (similarities, as Faiss reports inner products).
    Descending,
}

/// The `k` nearest of each of `nq` queries over the shards' answers: ids
/// and distances `nq x k`, nearest first, ties by smaller id, an id found
/// by two shards once, padded with `u64::MAX` and the farthest value
/// (`+inf` ascending, `-inf` descending) where fewer than `k` exist.
pub fn merge_topk(
    parts: &[ShardAnswer<'_>],
    nq: usize,
    k: usize,
    order: Order,
) -> (Vec<u64>, Vec<f32>) {
    let far = match order {
        Order::Ascending => f32::INFINITY,
        Order::Descending => f32::NEG_INFINITY,
    };
    let mut ids = vec![u64::MAX; nq * k];
    let mut dists = vec![far; nq * k];
    let mut row: Vec<(f32, u64)> = Vec::new();
    let mut taken = std::collections::HashSet::with_capacity(k);
    for q in 0..nq {
        row.clear();
        taken.clear();
        for p in parts {
            let range = q * p.k..(q + 1) * p.k;
            for (&id, &d) in p.ids[range.clone()].iter().zip(&p.distances[range]) {
                if id != u64::MAX && !d.is_nan() {
                    row.push((d, id));
                }
            }
        }
        row.sort_unstable_by(|a, b| {
            let by = match order {
                Order::Ascending => a.0.total_cmp(&b.0),
                Order::Descending => b.0.total_cmp(&a.0),
            };
            by.then(a.1.cmp(&b.1))
        });
        let mut t = 0;
        for &(d, id) in &row {
            if t == k {
                break;
            }
            if !taken.insert(id) {
                continue;
            }
            ids[q * k + t] = id;
            dists[q * k + t] = d;
            t += 1;
        }
    }
    (ids, dists)
}
