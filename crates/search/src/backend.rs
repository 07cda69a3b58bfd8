//! [`Backend`]: where a search (or a build's heavy phases) runs, and
//! [`BackendSearcher`]: an index opened on one backend. The CLI, the
//! builder's row passes and embedders choose through these, so "auto", "no
//! driver" and "not built with the `gpu` feature" are decided in one place.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[cfg(feature = "gpu")]
use crate::GpuSearcher;
use crate::{Index, Queries, SearchError, SearchParams, SearchResults};

/// Where work runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Backend {
    /// The GPU when [`crate::gpu_available`] (built with the `gpu` feature, a
    /// CUDA driver reporting a device), else the CPU.
    #[default]
    Auto,
    /// The CPU (all rayon threads).
    Cpu,
    /// A GPU; an error where there is none.
    Gpu,
}

impl Backend {
    /// The backend this request runs on: `Auto` becomes `Cpu` or `Gpu`;
    /// `Gpu` without a usable GPU is [`SearchError::BackendUnavailable`].
    pub fn resolve(self) -> Result<Backend, SearchError> {
        let gpu = crate::gpu_available();
        match self {
            Backend::Cpu => Ok(Backend::Cpu),
            Backend::Auto if gpu => Ok(Backend::Gpu),
            Backend::Auto => Ok(Backend::Cpu),
            Backend::Gpu if gpu => Ok(Backend::Gpu),
            Backend::Gpu if cfg!(feature = "gpu") => Err(SearchError::BackendUnavailable(
                "no CUDA driver or device on this machine; use the cpu or auto backend".into(),
            )),
            Backend::Gpu => Err(SearchError::BackendUnavailable(
                "this program was built without the `gpu` feature; use the cpu or auto backend"
                    .into(),
            )),
        }
    }

    /// `"auto"`, `"cpu"` or `"gpu"`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Cpu => "cpu",
            Backend::Gpu => "gpu",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Backend::Auto),
            "cpu" => Ok(Backend::Cpu),
            "gpu" => Ok(Backend::Gpu),
            other => Err(format!("unknown backend {other:?}: auto, cpu or gpu")),
        }
    }
}

/// Where and how large the GPU backend runs (read only when a search runs
/// on the GPU; it exists without the `gpu` feature so that calls compile
/// alike).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuOptions {
    /// CUDA device ordinal.
    pub device: usize,
    /// Most queries per launch (device buffers are sized for it).
    pub max_batch: usize,
    /// Project queries with cuBLAS on TF32 tensor cores (operands rounded
    /// to 10 bits of mantissa, sums in f32) instead of exact f32 products.
    /// On by default. The queries are centred on the data's mean first, so
    /// the rounding error follows a query's distance from the data, not
    /// from the origin; it moves only the fragments read and the sketch
    /// coordinates (recall the same to 1e-4), never the exact rerank. The
    /// index builder's row search always takes exact products.
    pub tf32_projection: bool,
    /// Overrides of the launch rules, for measurements (the defaults follow
    /// the rules).
    pub tuning: GpuTuning,
}

/// Overrides of the GPU launch rules for measurements: `cargo xtask bench`
/// fills them in (from `OCTEX_GPU_*` variables); the library reads no
/// environment. The default overrides nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuTuning {
    /// One build of `wave_search` for every batch.
    pub search_kernel: Option<SearchKernelChoice>,
    /// The 1,024-thread latency build only for batches of at most one query
    /// per multiprocessor, never for a single block per multiprocessor.
    pub latency_build_small_batches_only: bool,
    /// Where every batch's fragments are found.
    pub fragment_lookup: Option<FragmentLookupChoice>,
    /// Visited-set slots per entry a query may read, 1/16 to 64.
    pub visited_slots_per_entry: Option<f32>,
    /// Launch the kernels directly instead of replaying captured graphs
    /// (profilers see them by name).
    pub direct_launches: bool,
    /// Which projection products every batch takes.
    pub projection: Option<ProjectionChoice>,
    /// Leave the fused product's principal columns unpadded.
    pub unpadded_principal_columns: bool,
}

/// A build of the search kernel ([`GpuTuning::search_kernel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchKernelChoice {
    Wide,
    Dense,
    Narrow,
    Latency,
}

/// Where a batch's fragments are found ([`GpuTuning::fragment_lookup`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FragmentLookupChoice {
    /// Inside `wave_search`, by each query's block.
    InSearch,
    /// In `query_fragments`, before `wave_search`.
    OwnKernel,
}

/// The projection products ([`GpuTuning::projection`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProjectionChoice {
    /// Principal coordinates, then the copies' rotation (vectors wider than
    /// the copies' subspace).
    Two,
    /// One fused product.
    Fused,
}

impl Default for GpuOptions {
    fn default() -> Self {
        Self {
            device: 0,
            max_batch: 10_000,
            tf32_projection: true,
            tuning: GpuTuning::default(),
        }
    }
}

/// An index opened on one backend ([`Index::open_on`]): the same search
/// calls on either, results in the same layout.
pub enum BackendSearcher {
    Cpu(Index),
    #[cfg(feature = "gpu")]
    Gpu(Box<GpuSearcher>),
    /// One replica on each of several GPUs ([`crate::MultiGpuSearcher`]).
    #[cfg(feature = "gpu")]
    Gpus(Box<crate::MultiGpuSearcher>),
}

impl Index {
    /// This index opened on `backend` (resolved as [`Backend::resolve`] says;
    /// on the GPU it is copied to `gpu.device`, batches of `gpu.max_batch`).
    pub fn open_on(
        &self,
        backend: Backend,
        gpu: &GpuOptions,
    ) -> Result<BackendSearcher, SearchError> {
        match backend.resolve()? {
            #[cfg(feature = "gpu")]
            Backend::Gpu => Ok(BackendSearcher::Gpu(Box::new(self.gpu(gpu)?))),
            _ => {
                let _ = gpu;
                Ok(BackendSearcher::Cpu(self.clone()))
            }
        }
    }

    /// [`Index::open_on`], where the GPU backend takes every GPU the driver
    /// shows (one replica each, [`Index::every_gpu`]) when there are
    /// several: what the bindings open.
    pub fn open_on_every_gpu(
        &self,
        backend: Backend,
        gpu: &GpuOptions,
    ) -> Result<BackendSearcher, SearchError> {
        #[cfg(feature = "gpu")]
        if backend.resolve()? == Backend::Gpu && octex_kernels::device_count() > 1 {
            return Ok(BackendSearcher::Gpus(Box::new(self.every_gpu(gpu)?)));
        }
        self.open_on(backend, gpu)
    }
}

impl BackendSearcher {
    /// The backend it runs on (`Cpu` or `Gpu`).
    pub fn backend(&self) -> Backend {
        match self {
            BackendSearcher::Cpu(_) => Backend::Cpu,
            #[cfg(feature = "gpu")]
            BackendSearcher::Gpu(_) | BackendSearcher::Gpus(_) => Backend::Gpu,
        }
    }

    /// The machine it runs on, in words.
    pub fn device(&self) -> String {
        match self {
            BackendSearcher::Cpu(_) => format!("CPU, {} threads", rayon::current_num_threads()),
            #[cfg(feature = "gpu")]
            BackendSearcher::Gpu(g) => g.device(),
            #[cfg(feature = "gpu")]
            BackendSearcher::Gpus(g) => g.devices().join(" + "),
        }
    }

    /// [`Index::search`] on this backend.
    pub fn search(
        &mut self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
    ) -> Result<SearchResults, SearchError> {
        match self {
            BackendSearcher::Cpu(ix) => ix.search(queries, k, p),
            #[cfg(feature = "gpu")]
            BackendSearcher::Gpu(g) => g.search(queries, k, p),
            #[cfg(feature = "gpu")]
            BackendSearcher::Gpus(g) => g.search(queries, k, p),
        }
    }

    /// [`Index::search_queries`] on this backend: the batch's rows must have
    /// the index's dimension.
    pub fn search_queries(
        &mut self,
        queries: Queries,
        k: usize,
        p: &SearchParams,
    ) -> Result<SearchResults, SearchError> {
        let dim = match self {
            BackendSearcher::Cpu(ix) => ix.dim(),
            #[cfg(feature = "gpu")]
            BackendSearcher::Gpu(g) => g.index().dim(),
            #[cfg(feature = "gpu")]
            BackendSearcher::Gpus(g) => g.searchers()[0].index().dim(),
        };
        self.search(queries.with_dim(dim)?, k, p)
    }

    /// [`Index::search_stored`] on this backend (queries already in the
    /// stored space, squared L2 distances there: the builder's row passes).
    pub fn search_stored(
        &mut self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
    ) -> Result<SearchResults, SearchError> {
        match self {
            BackendSearcher::Cpu(ix) => ix.search_stored(queries, k, p),
            #[cfg(feature = "gpu")]
            BackendSearcher::Gpu(g) => g.search_stored(queries, k, p),
            #[cfg(feature = "gpu")]
            BackendSearcher::Gpus(g) => g.search_stored(queries, k, p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_resolution_is_consistent() {
        for b in [Backend::Auto, Backend::Cpu, Backend::Gpu] {
            assert_eq!(b.name().parse::<Backend>(), Ok(b));
            assert_eq!(b.to_string().to_uppercase().parse::<Backend>(), Ok(b));
        }
        assert!("tpu"
            .parse::<Backend>()
            .unwrap_err()
            .contains("auto, cpu or gpu"));
        assert_eq!(Backend::Cpu.resolve().unwrap(), Backend::Cpu);
        let auto = Backend::Auto.resolve().unwrap();
        assert_eq!(auto == Backend::Gpu, crate::gpu_available());
        match Backend::Gpu.resolve() {
            Ok(b) => assert!(b == Backend::Gpu && crate::gpu_available()),
            Err(e) => {
                assert!(!crate::gpu_available());
                assert!(matches!(e, SearchError::BackendUnavailable(_)), "{e}");
            }
        }
    }
}
