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
//! `default-features = false` no CUDA crate is compiled. [`Backend`] and
//! [`Index::open_on`] are the one place a backend is chosen (`auto` takes the
//! GPU when [`gpu_available`]); [`Queries`] carries a batch's shape;
//! [`Index::params_for_recall`] picks parameters for a recall target.
//!
//! Files: `index.rs` (the shared [`Index`], input checks, query
//! preparation), `plan.rs` ([`SearchPlan`] and its bounds), `cpu.rs` and
//! `engine.rs` (the CPU backend), `seeds.rs` (the fallback seeds and when a
//! query visits them, for both backends), [`shell`] (where an inner-product
//! query's first round starts, for both backends), `simd.rs`, `visited.rs`, `gpu.rs` and
//! `gpu/` (the GPU backend), `backend.rs` ([`Backend`], [`GpuOptions`],
//! [`GpuTuning`]), `handle.rs` ([`SharedIndex`], what the Python and C
//! bindings hold), `tune.rs` (`recall=`), `filter.rs` ([`IdFilter`] and
//! [`Index::search_filtered`]'s choice of search or scan), [`knn`] (exact
//! k-NN, ground truth and recall@k: the one home of evaluation). Place in the pipeline:
//! after `octex-build`; depends on `octex-index` (the layout) and
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
mod cpu;
mod engine;
#[cfg(any(feature = "gpu", test))]
mod fan_out;
mod filter;
#[cfg(feature = "gpu")]
pub mod gpu;
mod handle;
mod index;
pub mod knn;
mod plan;
mod seeds;
pub mod shell;
pub mod simd;
mod tune;
mod visited;

use octex_index::IndexError;
use serde::{Deserialize, Serialize};

pub use backend::{
    Backend, BackendSearcher, FragmentLookupChoice, GpuOptions, GpuTuning, ProjectionChoice,
    SearchKernelChoice,
};
pub use cpu::SingleQuerySearcher;
pub use engine::SearchStats;
pub use filter::IdFilter;
#[cfg(feature = "gpu")]
pub use gpu::{GpuError, GpuPhaseTimes, GpuSearcher, MultiGpuSearcher};
pub use handle::{ParamsFrom, SharedIndex};
pub use index::Index;
pub use octex_index::Index as RawIndex;
pub use octex_index::Metric;
pub use plan::{SearchPlan, MAX_ENTRIES, MAX_WAVES};
pub use tune::{
    cost_per_query, deepest_params, rebuild_advice, required_sample_recall, Reach, Tuned,
    DEFAULTS_K, DEFAULTS_TARGET, MIN_QUERY_SAMPLE, REACH_TARGET, TUNE_MARGIN, TUNE_MISS_FRACTION,
    TUNE_QUERIES,
};

/// Whether this program can search on a GPU: built with the `gpu` feature,
/// a CUDA driver loads and reports at least one device. For embedders that
/// choose a backend before opening one (`Index::gpu` then fails only for
/// reasons of that device).
///
/// Asked of the driver once per process (loading it costs tens of
/// microseconds, too much for every batch-1 search that resolves `auto`).
pub fn gpu_available() -> bool {
    #[cfg(feature = "gpu")]
    {
        static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVAILABLE.get_or_init(octex_kernels::driver_available)
    }
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
    /// Rerank in every wave (the paper's mode when the vectors are resident):
    /// after the first round and after each wave, the `R` best entries by
    /// sketch that have no exact distance yet get one, and the next start
    /// points are the best by exact distance. Costs up to `R (W + 1)` exact
    /// distances instead of `R`; pays where the sketch ranks poorly (text
    /// embeddings, high dimension).
    pub wave_rerank: bool,
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

impl From<octex_index::SearchDefaults> for SearchParams {
    fn from(d: octex_index::SearchDefaults) -> Self {
        Self {
            read_depth: d.read_depth as usize,
            start_points: d.start_points as usize,
            waves: d.waves as usize,
            rerank: d.rerank as usize,
            wave_rerank: false,
        }
    }
}

impl Default for SearchParams {
    /// `r=16, S=64, W=3, R=128`: a deep point, for an index that holds no
    /// defaults of its own ([`Index::default_params`]: a build chooses them
    /// for its index).
    /// `R=128`: the exact rerank is cheap beside the sketch, and coarse
    /// sketches need it (docs/RESULTS.md, "Decisions").
    fn default() -> Self {
        Self {
            read_depth: 16,
            start_points: 64,
            waves: 3,
            rerank: 128,
            wave_rerank: false,
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
    #[error("query {query} has squared norm {norm2:e}, above {max:e}: squared distances would overflow f32; scale the data down", max = octex_index::MAX_SQUARED_NORM)]
    HugeQuery { query: usize, norm2: f64 },
    #[error("k = {k} exceeds the {n} vectors in the index")]
    KAboveCount { k: usize, n: usize },
    #[error("filter allows id {id}, past the {n} vectors in the index")]
    FilterId { id: u32, n: usize },
    #[error("filter covers {got} ids, the index has {n} vectors")]
    FilterLength { got: usize, n: usize },
    #[error("filtered search runs on the CPU backend only (the GPU kernels take no filter yet)")]
    FilterOnGpu,
    #[error("a search over several GPUs needs at least one device")]
    NoDevices,
    #[error("{what} must be positive")]
    NotPositive { what: &'static str },
    #[error("recall target {target} is not in (0, 1]")]
    RecallTarget { target: f64 },
    #[error("pass a recall target or search parameters, not both")]
    RecallAndParams,
    #[error("the index is shared: choose the kernel before cloning it")]
    IndexShared,
    #[error("S={start_points} W={waves} r={read_depth} need {need} bytes of GPU shared memory per query, the device has {have}: lower S or W")]
    SharedMemory {
        start_points: usize,
        waves: usize,
        read_depth: usize,
        need: usize,
        have: usize,
    },
    #[error("per-wave rerank on the GPU takes at most {max} vectors, the index has {n}")]
    WaveRerankTooLarge { max: usize, n: usize },
    #[error("the GPU backend takes indexes of fewer than 2^31 vectors, this one has {n}")]
    TooManyVectorsForGpu { n: usize },
    #[error("no batch searched yet")]
    NothingSearched,
    #[error("{what} = {value} is above the {max} one query may use")]
    TooLarge {
        what: &'static str,
        value: usize,
        max: usize,
    },
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

/// A batch of queries with its shape: `values.len() / dim` rows of `dim`.
/// A flat slice alone cannot say its row length (3 rows of 32 values read
/// as 6 rows of 16), so callers that hold the shape pass it here and
/// [`Index::search_queries`] refuses a batch whose `dim` is not the index's
/// instead of silently reshaping it.
#[derive(Clone, Copy, Debug)]
pub struct Queries<'a> {
    values: &'a [f32],
    dim: usize,
}

impl<'a> Queries<'a> {
    /// `values` as rows of `dim`; an error for an empty batch, `dim = 0` or a
    /// length that is not a whole number of rows.
    pub fn new(values: &'a [f32], dim: usize) -> Result<Self, SearchError> {
        if values.is_empty() {
            return Err(SearchError::EmptyBatch);
        }
        if dim == 0 || values.len() % dim != 0 {
            return Err(SearchError::Ragged {
                len: values.len(),
                dim,
            });
        }
        Ok(Self { values, dim })
    }

    /// Row-major values.
    pub fn values(&self) -> &'a [f32] {
        self.values
    }

    /// Values per query.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Queries in the batch.
    pub fn len(&self) -> usize {
        self.values.len() / self.dim
    }

    /// Never true: an empty batch is refused by [`Queries::new`].
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The values, after checking that rows have `expected` values.
    pub(crate) fn with_dim(&self, expected: usize) -> Result<&'a [f32], SearchError> {
        if self.dim != expected {
            return Err(SearchError::Dimension {
                expected,
                got: self.dim,
            });
        }
        Ok(self.values)
    }
}
