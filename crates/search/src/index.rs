//! [`Index`]: a loaded index shared by both backends, with the input checks
//! and the query preparation (stored space, norms) they both use.

use std::path::Path;

use octex_index::{Metric, VectorProblem};
use rayon::prelude::*;

use crate::{engine, simd, SearchError, SearchParams};

/// A loaded index, ready to search on the CPU, and the handle a GPU searcher
/// keeps: cloning it is cheap (one shared copy of the index), so a program
/// can hold an `Index` and its `GpuSearcher` side by side.
#[derive(Clone)]
pub struct Index(std::sync::Arc<IndexInner>);

/// What an [`Index`] shares between its clones (not part of the API: the
/// crate reaches its fields through `Deref`).
#[doc(hidden)]
pub struct IndexInner {
    pub(crate) raw: octex_index::Index,
    pub(crate) engine: engine::Engine,
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
pub(crate) const PARALLEL_VALUES: usize = 1 << 18;

/// Queries projected per GEMM (one rayon task).
pub(crate) const QUERY_CHUNK: usize = 32;

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

    /// Use the portable sketch kernel and decoder even where SIMD exists (tests,
    /// comparisons). Only before the index is shared (cloned, or held by a
    /// GPU searcher).
    pub fn force_portable_kernel(&mut self) -> Result<(), SearchError> {
        let inner = std::sync::Arc::get_mut(&mut self.0).ok_or(SearchError::IndexShared)?;
        inner.engine.kernel = simd::sketch_dot_portable;
        inner.engine.decode = octex_lattice::decoder::decode_portable;
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
    /// The parameters a search takes when none are given: the point the
    /// build chose for this index ([`octex_index::SearchDefaults`],
    /// [`Index::choose_defaults`]), else [`SearchParams::default`].
    pub fn default_params(&self) -> SearchParams {
        self.raw
            .header()
            .search_defaults
            .map_or_else(SearchParams::default, SearchParams::from)
    }

    /// The row length of a query batch: the user's dimension, or the stored
    /// space's (normalised or augmented vectors, the builder's passes).
    pub(crate) fn query_dim(&self, stored_space: bool) -> usize {
        if stored_space {
            self.raw.stored_dim()
        } else {
            self.dim()
        }
    }

    pub(crate) fn check(
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
        for (what, v) in [
            ("k", k),
            ("read_depth", p.read_depth),
            ("start_points", p.start_points),
        ] {
            if v == 0 {
                return Err(SearchError::NotPositive { what });
            }
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
    pub(crate) fn prepare(
        &self,
        queries: &[f32],
        out: &mut Vec<f32>,
        norms: &mut Vec<f32>,
        stored_space: bool,
    ) -> Result<(), SearchError> {
        let qdim = self.query_dim(stored_space);
        let n = queries.len() / qdim.max(1);
        out.resize(n * self.raw.stored_dim(), 0.0);
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
        let sdim = self.raw.stored_dim();
        let qdim = if stored_space { sdim } else { self.dim() };
        let rows = queries
            .chunks_exact(qdim)
            .zip(out.chunks_exact_mut(sdim))
            .zip(norms.iter_mut());
        let max_norm = self.raw.header().max_norm as f64;
        for (qi, ((q, o), norm)) in rows.enumerate() {
            let n2 = Metric::squared_norm(q);
            // Bounded below MAX_SQUARED_NORM where the metric reads it (inner
            // product); cosine ignores it.
            *norm = n2 as f32;
            if stored_space {
                o.copy_from_slice(q);
                continue;
            }
            self.metric()
                .prepare_query(q, n2, max_norm * max_norm, o)
                .map_err(|problem| match problem {
                    VectorProblem::ZeroNorm => SearchError::ZeroQuery { query: qi },
                    VectorProblem::TooLarge { norm2 } => {
                        SearchError::HugeQuery { query: qi, norm2 }
                    }
                })?;
        }
        Ok(())
    }

    /// [`Index::prepare_rows`] on all cores for large batches (the GPU
    /// pipeline writes straight into page-locked memory with it); returns the
    /// queries' squared norms.
    #[cfg(feature = "gpu")]
    pub(crate) fn prepare_parallel(
        &self,
        queries: &[f32],
        out: &mut [f32],
        stored_space: bool,
    ) -> Result<Vec<f32>, SearchError> {
        const ROWS: usize = 256;
        let sdim = self.raw.stored_dim();
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
                        SearchError::HugeQuery { query, norm2 } => SearchError::HugeQuery {
                            query: query + ci * ROWS,
                            norm2,
                        },
                        e => e,
                    })
            })?;
        Ok(norms)
    }

    /// Convert a stored-space squared L2 distance to the metric's distance.
    pub(crate) fn report_distance(&self, d: f32, query_norm2: f32) -> f32 {
        let max_norm = self.raw.header().max_norm;
        self.metric().user_distance(d, query_norm2, max_norm)
    }
}
