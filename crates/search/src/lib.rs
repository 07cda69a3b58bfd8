//! # octex-search
//!
//! Load an OctEx index and search batches of queries with the wave search (the
//! paper's Algorithm 1): one matrix product projects the batch into all copies;
//! each copy's finest stored fragment contributes the first `r` ids of its ripple;
//! the de-duplicated union is ranked by the int8 sketch; `W` waves expand the `S`
//! best entries' neighbour rows; the `R` best by sketch are reranked exactly.
//!
//! Every search first makes a [`SearchPlan`] (the effective rerank depth,
//! ids read per ripple, candidates kept, entries read) from the index and
//! [`SearchParams`]; both backends size their work from it.
//!
//! Two backends search the same loaded [`Index`]: the CPU (all cores through
//! `rayon`, AVX2 sketch distances with runtime detection, per-thread scratch
//! reused across queries) and one CUDA GPU ([`Index::gpu`], module [`gpu`]:
//! the index in device memory, one CUDA graph per batch shape running cuBLAS
//! projections and the `wave_search` kernel of `octex-kernels`). The GPU
//! backend is the `gpu` cargo feature (on by default); with
//! `default-features = false` no CUDA crate is compiled. Place in the
//! pipeline: after `octex-build`; depends on `octex-index` (the layout) and
//! `octex-lattice` (the decoders).
//!
//! ```no_run
//! use octex_search::{Index, SearchParams};
//! # fn main() -> Result<(), octex_search::SearchError> {
//! let index = Index::load("glove.octex")?;
//! let queries: Vec<f32> = vec![0.1; 3 * index.dim()];
//! let res = index.search(&queries, 10, &SearchParams::default())?;
//! for q in 0..res.len() {
//!     println!("query {q}: ids {:?}", res.ids(q));
//! }
//! # Ok(()) }
//! ```

mod backend;
mod engine;
#[cfg(feature = "gpu")]
pub mod gpu;
mod plan;
pub mod simd;
mod visited;

use std::path::Path;

use octex_index::{IndexError, Metric};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

pub use backend::{Backend, BackendSearcher, GpuOptions};
pub use engine::SearchStats;
#[cfg(feature = "gpu")]
pub use gpu::{GpuError, GpuPhaseTimes, GpuSearcher};
pub use octex_index::Index as RawIndex;
pub use plan::SearchPlan;

/// Whether this program can search on a GPU: built with the `gpu` feature,
/// a CUDA driver loads and reports at least one device. For embedders that
/// choose a backend before opening one (`Index::gpu` then fails only for
/// reasons of that device).
pub fn gpu_available() -> bool {
    #[cfg(feature = "gpu")]
    return octex_kernels::driver_available();
    #[cfg(not(feature = "gpu"))]
    false
}

/// Search parameters (the paper's `r`, `S`, `W`, `R`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchParams {
    /// `r`: ids read from the head of each copy's ripple (at most the ripple
    /// length). More: a stronger first round, more sketch distances.
    pub read_depth: usize,
    /// `S`: entries expanded per wave.
    pub start_points: usize,
    /// `W`: waves (dependent steps after the first round).
    pub waves: usize,
    /// `R`: entries reranked by exact distance. A search for more than `R`
    /// neighbours reranks `k` ([`SearchParams::for_k`]).
    pub rerank: usize,
}

impl SearchParams {
    /// The parameters a search for `k` neighbours runs with: the rerank depth
    /// raised to `k` when it is smaller (`R' = max(R, k)`), so `k = 100` works
    /// at the default `R = 32`, as a Faiss or cuVS user expects. Both backends
    /// search with what this returns; nothing else changes.
    pub fn for_k(&self, k: usize) -> SearchParams {
        SearchParams {
            rerank: self.rerank.max(k),
            ..*self
        }
    }
}

impl Default for SearchParams {
    /// `r=16, S=64, W=3, R=32`: recall@10 0.959 on GloVe-50 and 0.975 on
    /// Fashion-MNIST with default build parameters (`cargo xtask bench`, 2 cores).
    /// Lower `S`/`W` for speed at lower recall; raise `R` where the sketch is
    /// coarse relative to the data (Fashion-MNIST: `R=64` gives 0.996).
    fn default() -> Self {
        Self {
            read_depth: 16,
            start_points: 64,
            waves: 3,
            rerank: 32,
        }
    }
}

/// Why a search refused its input.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("queries have dimension {got}, the index has {expected}")]
    Dimension { expected: usize, got: usize },
    #[error("{len} values are not a whole number of queries of dimension {dim}")]
    Ragged { len: usize, dim: usize },
    #[error("empty batch: no queries")]
    EmptyBatch,
    #[error("query {query}, coordinate {col} is {value}: queries must be finite")]
    NotFinite {
        query: usize,
        col: usize,
        value: f32,
    },
    #[error("query {query} has zero norm: cosine distance is undefined")]
    ZeroQuery { query: usize },
    #[error("k = {k} exceeds the {n} vectors in the index")]
    KAboveCount { k: usize, n: usize },
    #[error("invalid search parameters: {0}")]
    Params(String),
    #[error("backend unavailable: {0}")]
    BackendUnavailable(String),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[cfg(feature = "gpu")]
    #[error("GPU backend: {0}")]
    Gpu(#[from] GpuError),
}

/// Results of a batch: `k` ids and distances per query, nearest first. Missing
/// entries (a query that found fewer than `k` vectors) are `u32::MAX` and
/// infinity. Distances: squared L2 for L2, `1 - cos` for cosine, `-<q, x>` for
/// inner product (computed from the rerank vectors, f16 by default).
#[derive(Clone, Debug, PartialEq)]
pub struct SearchResults {
    pub k: usize,
    pub ids: Vec<u32>,
    pub distances: Vec<f32>,
    pub stats: SearchStats,
}

impl SearchResults {
    pub fn len(&self) -> usize {
        self.ids.len() / self.k.max(1)
    }
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
    pub fn ids(&self, q: usize) -> &[u32] {
        &self.ids[q * self.k..(q + 1) * self.k]
    }
    pub fn distances(&self, q: usize) -> &[f32] {
        &self.distances[q * self.k..(q + 1) * self.k]
    }
}

/// A loaded index, ready to search on the CPU, and the handle a GPU searcher
/// keeps: cloning it is cheap (one shared copy of the index), so a program
/// can hold an `Index` and its `GpuSearcher` side by side.
#[derive(Clone)]
pub struct Index(std::sync::Arc<IndexInner>);

/// What an [`Index`] shares between its clones.
pub struct IndexInner {
    raw: octex_index::Index,
    engine: engine::Engine,
    kernel_name: &'static str,
}

impl std::ops::Deref for Index {
    type Target = IndexInner;
    fn deref(&self) -> &IndexInner {
        &self.0
    }
}

/// Batches of at least this many query values are checked and prepared on
/// all cores (below it, waking the thread pool costs more than it saves).
const PARALLEL_VALUES: usize = 1 << 18;

/// Queries projected per GEMM (one rayon task).
const QUERY_CHUNK: usize = 32;

impl Index {
    /// Load (memory-map) and validate an index file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, SearchError> {
        Ok(Self::new(octex_index::Index::load(path)?))
    }

    /// Wrap an index already in memory (e.g. just built).
    pub fn new(raw: octex_index::Index) -> Self {
        let (kernel, kernel_name) = simd::best_kernel();
        let engine = engine::Engine::new(&raw, kernel);
        Self(std::sync::Arc::new(IndexInner {
            raw,
            engine,
            kernel_name,
        }))
    }

    /// Use the portable sketch kernel even where SIMD exists (tests,
    /// comparisons). Only before the index is shared (cloned, or held by a
    /// GPU searcher).
    pub fn force_portable_kernel(&mut self) -> Result<(), SearchError> {
        let inner = std::sync::Arc::get_mut(&mut self.0).ok_or_else(|| {
            SearchError::Params("the index is shared: choose the kernel before cloning it".into())
        })?;
        inner.engine.kernel = simd::sketch_distance_portable;
        inner.kernel_name = "portable";
        Ok(())
    }

    /// Name of the sketch distance kernel in use.
    pub fn kernel_name(&self) -> &'static str {
        self.kernel_name
    }
    pub fn raw(&self) -> &octex_index::Index {
        &self.raw
    }
    /// The index itself, when no clone shares it (else `self` back).
    pub fn into_raw(self) -> Result<octex_index::Index, Self> {
        std::sync::Arc::try_unwrap(self.0)
            .map(|inner| inner.raw)
            .map_err(Self)
    }
    /// Vectors in the index.
    pub fn len(&self) -> usize {
        self.raw.len()
    }
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }
    /// Dimension of the queries it takes.
    pub fn dim(&self) -> usize {
        self.raw.input_dim()
    }
    pub fn metric(&self) -> Metric {
        self.raw.metric()
    }

    fn check(
        &self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
        dim: usize,
    ) -> Result<usize, SearchError> {
        if queries.is_empty() {
            return Err(SearchError::EmptyBatch);
        }
        if queries.len() % dim != 0 {
            return Err(SearchError::Ragged {
                len: queries.len(),
                dim,
            });
        }
        if k == 0 || p.read_depth == 0 || p.start_points == 0 {
            return Err(SearchError::Params(
                "k, read_depth and start_points must be positive".into(),
            ));
        }
        if k > self.len() {
            return Err(SearchError::KAboveCount { k, n: self.len() });
        }
        // On all cores for large batches; small ones (latency) stay on this
        // thread, where waking the pool would cost more than the scan.
        let bad = if queries.len() >= PARALLEL_VALUES {
            queries.par_iter().position_first(|v| !v.is_finite())
        } else {
            queries.iter().position(|v| !v.is_finite())
        };
        if let Some(i) = bad {
            return Err(SearchError::NotFinite {
                query: i / dim,
                col: i % dim,
                value: queries[i],
            });
        }
        Ok(queries.len() / dim)
    }

    /// Queries in the stored space: normalised (cosine) or with a 0 appended
    /// (inner product); also returns each query's squared norm before that.
    fn prepare(
        &self,
        queries: &[f32],
        out: &mut Vec<f32>,
        norms: &mut Vec<f32>,
        stored_space: bool,
    ) -> Result<(), SearchError> {
        let qdim = if stored_space {
            self.raw.dim()
        } else {
            self.dim()
        };
        let n = queries.len() / qdim.max(1);
        out.resize(n * self.raw.dim(), 0.0);
        norms.resize(n, 0.0);
        self.prepare_rows(queries, out, norms, stored_space)
    }

    /// [`Index::prepare`] into slices sized for the queries (`out` is
    /// `n x stored dim`, `norms` is `n`).
    fn prepare_rows(
        &self,
        queries: &[f32],
        out: &mut [f32],
        norms: &mut [f32],
        stored_space: bool,
    ) -> Result<(), SearchError> {
        let sdim = self.raw.dim();
        let qdim = if stored_space { sdim } else { self.dim() };
        let rows = queries
            .chunks_exact(qdim)
            .zip(out.chunks_exact_mut(sdim))
            .zip(norms.iter_mut());
        for (qi, ((q, o), norm)) in rows.enumerate() {
            let n2: f32 = q.iter().map(|v| v * v).sum();
            *norm = n2;
            if stored_space {
                o.copy_from_slice(q);
                continue;
            }
            self.metric()
                .prepare_query(q, n2, o)
                .ok_or(SearchError::ZeroQuery { query: qi })?;
        }
        Ok(())
    }

    /// [`Index::prepare_rows`] on all cores for large batches (the GPU
    /// pipeline writes straight into page-locked memory with it); returns the
    /// queries' squared norms.
    #[cfg(feature = "gpu")]
    fn prepare_parallel(
        &self,
        queries: &[f32],
        out: &mut [f32],
        stored_space: bool,
    ) -> Result<Vec<f32>, SearchError> {
        const ROWS: usize = 256;
        let sdim = self.raw.dim();
        let qdim = if stored_space { sdim } else { self.dim() };
        let mut norms = vec![0f32; queries.len() / qdim.max(1)];
        if queries.len() < PARALLEL_VALUES {
            self.prepare_rows(queries, out, &mut norms, stored_space)?;
            return Ok(norms);
        }
        queries
            .par_chunks(ROWS * qdim)
            .zip(out.par_chunks_mut(ROWS * sdim))
            .zip(norms.par_chunks_mut(ROWS))
            .enumerate()
            .try_for_each(|(ci, ((q, o), nr))| {
                self.prepare_rows(q, o, nr, stored_space)
                    .map_err(|e| match e {
                        SearchError::ZeroQuery { query } => SearchError::ZeroQuery {
                            query: query + ci * ROWS,
                        },
                        e => e,
                    })
            })?;
        Ok(norms)
    }

    /// Convert a stored-space squared L2 distance to the metric's distance.
    fn report_distance(&self, d: f32, query_norm2: f32) -> f32 {
        let max_norm = self.raw.header().max_norm;
        self.metric().user_distance(d, query_norm2, max_norm)
    }

    /// Search a batch (`nq x dim`, row-major) for the `k` nearest of each query.
    pub fn search(
        &self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
    ) -> Result<SearchResults, SearchError> {
        self.search_batch(queries, k, p, false)
    }

    /// Search queries already in the stored space (`nq x stored dim`: normalised
    /// for cosine, augmented for inner product), returning squared L2 distances
    /// in that space. The builder uses it to compute neighbour rows of the base
    /// vectors themselves.
    pub fn search_stored(
        &self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
    ) -> Result<SearchResults, SearchError> {
        self.search_batch(queries, k, p, true)
    }

    fn search_batch(
        &self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
        stored_space: bool,
    ) -> Result<SearchResults, SearchError> {
        let qdim = if stored_space {
            self.raw.dim()
        } else {
            self.dim()
        };
        let nq = self.check(queries, k, p, qdim)?;
        let plan = SearchPlan::new(self.raw.header(), p, k);
        let sdim = self.raw.dim();
        let width = self.engine.map.width();
        let w = self.engine.sketch_width;
        let mut ids = vec![0u32; nq * k];
        let mut dists = vec![0f32; nq * k];
        let chunk_out: Vec<Result<SearchStats, SearchError>> = ids
            .par_chunks_mut(QUERY_CHUNK * k)
            .zip(dists.par_chunks_mut(QUERY_CHUNK * k))
            .enumerate()
            .map_init(
                || {
                    (
                        engine::Scratch::new(&self.engine, &plan, self.len()),
                        Vec::new(),
                        Vec::new(),
                        Vec::new(),
                        Vec::new(),
                        Vec::new(),
                    )
                },
                |(scratch, stored, norms, pcs, z, qs), (ci, (id_out, d_out))| {
                    let q0 = ci * QUERY_CHUNK;
                    let qn = id_out.len() / k;
                    self.prepare(
                        &queries[q0 * qdim..(q0 + qn) * qdim],
                        stored,
                        norms,
                        stored_space,
                    )?;
                    z.resize(qn * width, 0.0);
                    self.engine.map.project_batch(stored, pcs, z, false);
                    self.engine.sketch_coords(pcs, qs);
                    scratch.stats = SearchStats::default();
                    for i in 0..qn {
                        self.engine.search_one(
                            &self.raw,
                            &z[i * width..(i + 1) * width],
                            &qs[i * w..(i + 1) * w],
                            &stored[i * sdim..(i + 1) * sdim],
                            &plan,
                            scratch,
                            &mut id_out[i * k..(i + 1) * k],
                            &mut d_out[i * k..(i + 1) * k],
                        );
                        if !stored_space {
                            for d in &mut d_out[i * k..(i + 1) * k] {
                                *d = self.report_distance(*d, norms[i]);
                            }
                        }
                    }
                    Ok(scratch.stats)
                },
            )
            .collect();
        let mut stats = SearchStats::default();
        for r in chunk_out {
            stats.add(&r?);
        }
        Ok(SearchResults {
            k,
            ids,
            distances: dists,
            stats,
        })
    }

    /// Search one query (single-query latency path; runs on the calling thread).
    pub fn search_one(
        &self,
        query: &[f32],
        k: usize,
        p: &SearchParams,
    ) -> Result<(Vec<u32>, Vec<f32>), SearchError> {
        let mut searcher = self.searcher(p);
        searcher.search(query, k)
    }

    /// A reusable single-query searcher that keeps its scratch between calls.
    pub fn searcher(&self, p: &SearchParams) -> Searcher<'_> {
        Searcher {
            index: self,
            params: *p,
            scratch: engine::Scratch::new(
                &self.engine,
                &SearchPlan::new(self.raw.header(), p, 1),
                self.len(),
            ),
            stored: Vec::new(),
            norms: Vec::new(),
            pcs: Vec::new(),
            z: Vec::new(),
            qs: Vec::new(),
        }
    }
}

/// Searches one query at a time on the calling thread, reusing its buffers.
pub struct Searcher<'a> {
    index: &'a Index,
    params: SearchParams,
    scratch: engine::Scratch,
    stored: Vec<f32>,
    norms: Vec<f32>,
    pcs: Vec<f32>,
    z: Vec<f32>,
    qs: Vec<f32>,
}

impl Searcher<'_> {
    pub fn search(&mut self, query: &[f32], k: usize) -> Result<(Vec<u32>, Vec<f32>), SearchError> {
        let ix = self.index;
        if query.len() != ix.dim() {
            return Err(SearchError::Dimension {
                expected: ix.dim(),
                got: query.len(),
            });
        }
        ix.check(query, k, &self.params, ix.dim())?;
        let plan = SearchPlan::new(ix.raw.header(), &self.params, k);
        ix.prepare(query, &mut self.stored, &mut self.norms, false)?;
        self.z.resize(ix.engine.map.width(), 0.0);
        ix.engine
            .map
            .project_batch(&self.stored, &mut self.pcs, &mut self.z, false);
        ix.engine.sketch_coords(&self.pcs, &mut self.qs);
        let mut ids = vec![0u32; k];
        let mut d = vec![0f32; k];
        ix.engine.search_one(
            &ix.raw,
            &self.z,
            &self.qs,
            &self.stored,
            &plan,
            &mut self.scratch,
            &mut ids,
            &mut d,
        );
        for v in &mut d {
            *v = ix.report_distance(*v, self.norms[0]);
        }
        Ok((ids, d))
    }
}
