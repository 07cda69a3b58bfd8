//! The GPU backend: the same wave search on one CUDA device.
//!
//! [`GpuSearcher`] copies the index to device memory in its on-disk layout (one
//! buffer per section, reached by the kernels through the per-part pointer
//! table `IndexView`; `gpu/device_index.rs`) and searches batches
//! (`gpu/pipeline.rs`, two in flight; `gpu/batch.rs`, one batch's buffers
//! and launches). Every launch decision of a batch is made in one place,
//! `gpu/launch_plan.rs` (`GpuLaunchPlan`: products, fragment lookup, sizes,
//! spill, build of `wave_search`):
//!
//! 1. queries to the device (stored space: normalised or augmented on the host,
//!    exactly as the CPU backend does);
//! 2. one CUDA graph per batch shape, captured at first use and replayed:
//!    cuBLAS projects the batch (principal coordinates and all copies, in one
//!    product or two); for batches of more queries than multiprocessors,
//!    `query_fragments` finds every query's fragment in every copy (one pass
//!    per spacing, finest first); then `wave_search` runs each query's first
//!    round (finding the fragments itself in small batches), `W` waves and
//!    exact rerank in one block, with no host synchronisation inside;
//! 3. ids and distances back to the host.
//!
//! Batches larger than [`GpuOptions::max_batch`] are split. Without a driver,
//! [`Index::gpu`] returns [`SearchError::Gpu`] with [`GpuError::NoDriver`].
//! The bench's profiled paths (events between phases, graph replays, phase
//! costs inside the kernel) are in `gpu/profile.rs`.
//!
//! A query goes one way down: [`GpuSearcher::search`] → `search_inner` (the
//! checks and the [`SearchPlan`]) → `search_pipelined` (stored-space
//! preparation, upload, `bind_batch` with the batch's launch plan) →
//! `batch::launch_batch` (directly, or captured once per batch shape by
//! `batch::capture`) → `batch::search_launches` → `Gpu::wave_search` in
//! `octex-kernels`, which launches the build the plan chose.

use std::collections::HashMap;
use std::time::Instant;

use octex_kernels::driver::{CudaGraph, CudaStream, DriverError};
use octex_kernels::layout::{BatchView, SearchSmem};
use octex_kernels::Gpu;
pub use octex_kernels::GpuError;

use crate::{GpuOptions, GpuTuning, Index, SearchError, SearchParams, SearchPlan, SearchResults};

mod batch;
mod device_index;
mod launch_plan;
#[cfg(test)]
mod launch_table;
mod multi;
mod pipeline;
mod profile;
use batch::bind;
use device_index::DeviceIndex;
use launch_plan::GpuLaunchPlan;
pub use multi::MultiGpuSearcher;
use pipeline::Slot;

/// Device time of the phases of one batch (CUDA events), in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct GpuPhaseTimes {
    pub upload_ms: f64,
    pub project_ms: f64,
    /// The fragment lookup's passes (batches that take them) and
    /// `wave_search`.
    pub search_ms: f64,
    pub download_ms: f64,
}

/// Searches an [`Index`] on one GPU. Create with [`Index::gpu`]. It holds
/// its own handle of the index (a cheap clone), so it can live beside the
/// `Index` in one struct or move to another thread.
pub struct GpuSearcher {
    index: Index,
    gpu: Gpu,
    dev: DeviceIndex,
    /// Two pipeline slots (device and page-locked buffers); the profiled path
    /// uses the first.
    slots: Vec<Slot>,
    /// Uploads of the next batch run here, beside the compute stream.
    copy_stream: std::sync::Arc<CudaStream>,
    /// The slot of the last batch (what `replay_seconds` replays).
    last_slot: usize,
    graphs: Graphs,
    max_batch: usize,
    /// Measurement overrides of the launch rules ([`GpuOptions::tuning`]).
    tuning: GpuTuning,
    stored: Vec<f32>,
    norms: Vec<f32>,
    /// Profiling: `BatchView::stop_after` of the next searches.
    stop_after: u32,
}

impl From<DriverError> for SearchError {
    fn from(e: DriverError) -> Self {
        SearchError::Gpu(GpuError::Driver(e))
    }
}

/// The captured graphs, one per batch shape and parameter set.
#[derive(Default)]
struct Graphs(HashMap<BatchView, CudaGraph>);

// SAFETY: a CUDA graph and its executable belong to the searcher's context,
// not to a thread: the driver lets any thread launch or destroy them as long
// as calls on one graph are serialized (cudarc's `CudaGraph::launch` makes the
// context current itself). The graphs are reached only through `&mut
// GpuSearcher` (the searcher is not `Sync`), so one thread at a time uses
// them; moving the searcher to another thread is then sound, as it is for
// the buffers and streams beside them.
unsafe impl Send for Graphs {}

impl std::ops::Deref for Graphs {
    type Target = HashMap<BatchView, CudaGraph>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Graphs {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// Most graphs kept (one per batch shape and parameter set).
const MAX_GRAPHS: usize = 16;

impl Index {
    /// Copy this index to GPU `opts.device` and return a searcher for it.
    /// Without a CUDA driver this is `SearchError::Gpu(GpuError::NoDriver)`.
    pub fn gpu(&self, opts: &GpuOptions) -> Result<GpuSearcher, SearchError> {
        let gpu = Gpu::open(opts.device)?;
        let tuning = opts.tuning;
        let t = Instant::now();
        let dev = DeviceIndex::upload(&gpu, self, opts.tf32_projection, &tuning)?;
        let max_batch = opts.max_batch.max(1);
        let slots = vec![
            Slot::new(&gpu, &dev, max_batch, 16)?,
            Slot::new(&gpu, &dev, max_batch, 16)?,
        ];
        let copy_stream = gpu.new_stream()?;
        gpu.synchronize()?;
        tracing::info!(
            device = %gpu.describe(),
            bytes = dev.bytes,
            seconds = t.elapsed().as_secs_f64(),
            "index copied to the GPU"
        );
        Ok(GpuSearcher {
            index: self.clone(),
            gpu,
            dev,
            slots,
            copy_stream,
            last_slot: 0,
            graphs: Graphs::default(),
            max_batch,
            tuning,
            stored: Vec::new(),
            norms: Vec::new(),
            stop_after: 0,
        })
    }
}

impl GpuSearcher {
    /// The device context the searcher runs on.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The device, in words.
    pub fn device(&self) -> String {
        self.gpu.describe()
    }

    /// The card's theoretical DRAM bandwidth in bytes per second, when the
    /// driver reports its memory clock and bus width.
    pub fn peak_memory_bandwidth(&self) -> Option<f64> {
        self.gpu.peak_memory_bandwidth()
    }

    /// The index it searches (a handle of the same shared copy).
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Bytes of index data in device memory.
    pub fn index_bytes(&self) -> u64 {
        self.dev.bytes
    }

    /// Shared memory one query's block needs with these parameters in a full
    /// batch, and the global scratch per query when its large arrays spill
    /// there (0 when they fit in shared memory). Batches of at most one query
    /// per multiprocessor may give the visited set more of the shared memory.
    pub fn memory_per_query(
        &mut self,
        k: usize,
        p: &SearchParams,
    ) -> Result<(usize, usize), SearchError> {
        let plan = SearchPlan::new(self.index.raw.header(), p, k)?;
        let launch = self.launch_plan(self.max_batch, &plan);
        Ok((launch.smem, launch.sizes.scratch_per_query as usize))
    }

    /// Every launch decision of a batch of `nq` searched with `plan` on this
    /// device ([`GpuLaunchPlan`]).
    fn launch_plan(&self, nq: usize, plan: &SearchPlan) -> GpuLaunchPlan {
        GpuLaunchPlan::new(
            &self.dev.view.view,
            plan,
            nq,
            &self.gpu.limits(),
            &self.dev.projection.shape,
            &self.tuning,
        )
    }

    /// The plan of a batch of `nq` bound to slot `slot`'s buffers: the view
    /// its launches pass, checked against the device's shared memory.
    fn bind_batch(
        &mut self,
        slot: usize,
        nq: usize,
        plan: &SearchPlan,
    ) -> Result<BatchView, SearchError> {
        let launch = self.launch_plan(nq, plan);
        let view = BatchView {
            stop_after: self.stop_after,
            ..bind(
                &mut self.slots[slot].buffers,
                &launch,
                self.max_batch,
                &self.gpu,
            )?
        };
        self.shared_memory(&view, &plan.params)?;
        Ok(view)
    }

    /// The shared memory `view`'s blocks need, or why the device cannot give
    /// it (`p`: the parameters, for the message).
    fn shared_memory(&self, view: &BatchView, p: &SearchParams) -> Result<usize, SearchError> {
        if p.wave_rerank && self.index.len() > octex_kernels::layout::MAX_WAVE_RERANK_VECTORS {
            return Err(SearchError::WaveRerankTooLarge {
                max: octex_kernels::layout::MAX_WAVE_RERANK_VECTORS,
                n: self.index.len(),
            });
        }
        let smem = SearchSmem::new(&self.dev.view.view, view).total as usize;
        if smem > self.gpu.max_shared_memory() {
            return Err(SearchError::SharedMemory {
                start_points: p.start_points,
                waves: p.waves,
                read_depth: p.read_depth,
                need: smem,
                have: self.gpu.max_shared_memory(),
            });
        }
        Ok(smem)
    }

    /// Search a batch (`nq x dim`, row-major) for the `k` nearest of each query:
    /// the same contract and results layout as [`Index::search`].
    pub fn search(
        &mut self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
    ) -> Result<SearchResults, SearchError> {
        self.search_inner(queries, k, p, false)
    }

    /// Search queries already in the stored space (normalised for cosine,
    /// augmented for inner product), returning squared L2 distances in that
    /// space: [`Index::search_stored`] on the GPU (the builder's row passes).
    pub fn search_stored(
        &mut self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
    ) -> Result<SearchResults, SearchError> {
        self.search_inner(queries, k, p, true)
    }

    /// Grow the result buffers of both slots for `k` (dropping the graphs,
    /// which point at the old buffers).
    fn ensure_k(&mut self, k: usize) -> Result<(), SearchError> {
        if k > self.slots[0].buffers.k_cap {
            self.graphs.clear();
            let cap = k.next_power_of_two();
            for slot in &mut self.slots {
                *slot = Slot::new(&self.gpu, &self.dev, self.max_batch, cap)?;
            }
        }
        Ok(())
    }

    fn search_inner(
        &mut self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
        stored_space: bool,
    ) -> Result<SearchResults, SearchError> {
        let (nq, plan) = self.plan(queries, k, p, stored_space)?;
        let mut ids = vec![0u32; nq * k];
        let mut dists = vec![0f32; nq * k];
        let stats =
            self.search_pipelined(queries, nq, &plan, &mut ids, &mut dists, stored_space)?;
        Ok(SearchResults {
            k,
            ids,
            distances: dists,
            stats,
        })
    }

    /// The checked batch's query count and its search plan.
    fn plan(
        &self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
        stored_space: bool,
    ) -> Result<(usize, SearchPlan), SearchError> {
        let index = &self.index;
        let nq = index.check(queries, k, p, index.query_dim(stored_space))?;
        Ok((nq, SearchPlan::new(index.raw.header(), p, k)?))
    }
}
