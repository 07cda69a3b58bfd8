//! The GPU backend: the same wave search on one CUDA device.
//!
//! [`GpuSearcher`] copies the index to device memory in its on-disk layout (one
//! buffer per section, reached by the kernels through the per-part pointer
//! table [`IndexView`]) and searches batches:
//!
//! 1. queries to the device (stored space: normalised or augmented on the host,
//!    exactly as the CPU backend does);
//! 2. one CUDA graph per batch shape, captured at first use and replayed: two
//!    cuBLAS products project the batch (principal coordinates, then all
//!    copies), then `wave_search` runs each query's first round, `W` waves and
//!    exact rerank in one block, with no host synchronisation inside;
//! 3. ids and distances back to the host.
//!
//! Batches larger than [`GpuOptions::max_batch`] are split. Without a driver,
//! [`Index::gpu`] returns [`SearchError::Gpu`] with [`GpuError::NoDriver`].

use std::collections::HashMap;
use std::time::Instant;

use octex_kernels::driver::{CudaEvent, CudaGraph, CudaSlice, CudaStream, DriverError};
use octex_kernels::layout::{
    BatchView, IndexView, SearchSmem, MAX_HASH_SLOTS, STAT_COPIES_WITHOUT_FRAGMENT,
    STAT_EXACT_DISTANCES, STAT_FIRST_ROUND_ENTRIES, STAT_SEEDED_QUERIES, STAT_SKETCH_DISTANCES,
    STAT_SLOTS,
};
pub use octex_kernels::GpuError;
use octex_kernels::{device_address, DeviceBatchView, Gpu};

use crate::{GpuOptions, Index, SearchError, SearchParams, SearchPlan, SearchResults, SearchStats};

mod device_index;
mod pipeline;
use device_index::DeviceIndex;
use pipeline::Slot;

/// Device time of the phases of one batch (CUDA events), in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct GpuPhaseTimes {
    pub upload_ms: f64,
    pub project_ms: f64,
    pub search_ms: f64,
    pub download_ms: f64,
}

/// Per-batch device buffers, sized for `max_batch` queries and `k_cap` results.
struct BatchBuffers {
    queries: CudaSlice<f32>,
    pcs: CudaSlice<f32>,
    z: CudaSlice<f32>,
    ids: CudaSlice<u32>,
    dists: CudaSlice<f32>,
    stats: CudaSlice<u64>,
    k_cap: usize,
    view: DeviceBatchView,
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
    graphs: HashMap<BatchView, CudaGraph>,
    max_batch: usize,
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

/// Most graphs kept (one per batch shape and parameter set).
const MAX_GRAPHS: usize = 16;

impl BatchBuffers {
    fn new(gpu: &Gpu, index: &IndexView, max_batch: usize, k_cap: usize) -> Result<Self, GpuError> {
        let n = max_batch;
        Ok(Self {
            queries: gpu.zeros(n * index.dim as usize)?,
            pcs: gpu.zeros(n * index.basis_dim as usize)?,
            z: gpu.zeros(n * index.width as usize)?,
            ids: gpu.zeros(n * k_cap)?,
            dists: gpu.zeros(n * k_cap)?,
            stats: gpu.zeros(STAT_SLOTS)?,
            k_cap,
            view: DeviceBatchView::new(gpu, BatchView::default())?,
        })
    }
}

impl Index {
    /// Copy this index to GPU `opts.device` and return a searcher for it.
    /// Without a CUDA driver this is `SearchError::Gpu(GpuError::NoDriver)`.
    pub fn gpu(&self, opts: &GpuOptions) -> Result<GpuSearcher, SearchError> {
        let gpu = Gpu::open(opts.device)?;
        let t = Instant::now();
        let dev = DeviceIndex::upload(&gpu, self)?;
        let max_batch = opts.max_batch.max(1);
        let slots = vec![
            Slot::new(&gpu, &dev.view.view, max_batch, 16)?,
            Slot::new(&gpu, &dev.view.view, max_batch, 16)?,
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
            graphs: HashMap::new(),
            max_batch,
            stored: Vec::new(),
            norms: Vec::new(),
            stop_after: 0,
        })
    }
}

/// Sizes of one search on the device.
fn batch_view(
    ix: &IndexView,
    b: &BatchBuffers,
    nq: usize,
    plan: &SearchPlan,
    s: &Gpu,
) -> BatchView {
    let (p, k) = (&plan.params, plan.k);
    let r = plan.read_depth as u32;
    let (start_points, waves, row_len) = (p.start_points as u32, p.waves as u32, ix.row_len);
    let keep = plan.keep as u32;
    let first = ix.copies * r + ix.n_seeds;
    let buf_len = first.max(keep + start_points * row_len).next_power_of_two();
    let entries = first + waves * start_points * row_len;
    // The set holds distinct ids only, far fewer than the entries read (most
    // ids recur across copies and rows): one slot per entry bounds the load at
    // 1 in the worst case and keeps it near 0.2 in practice, at half the shared
    // memory of a load-0.5 table (more blocks per SM). A full set drops ids.
    let hash_slots = entries.next_power_of_two().clamp(64, MAX_HASH_SLOTS);
    let st = s.stream();
    BatchView {
        z: device_address(&b.z, st),
        pcs: device_address(&b.pcs, st),
        queries: device_address(&b.queries, st),
        out_ids: device_address(&b.ids, st),
        out_dists: device_address(&b.dists, st),
        stats: device_address(&b.stats, st),
        nq: nq as u32,
        k: k as u32,
        read_depth: r,
        start_points,
        waves,
        rerank: p.rerank as u32,
        keep,
        hash_slots,
        buf_len,
        rerank_len: (p.rerank as u32).max(2).next_power_of_two(),
        stop_after: 0,
    }
}

impl GpuSearcher {
    /// The device, in words.
    pub fn device(&self) -> String {
        self.gpu.describe()
    }

    /// The index it searches (a handle of the same shared copy).
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Bytes of index data in device memory.
    pub fn index_bytes(&self) -> u64 {
        self.dev.bytes
    }

    /// Shared memory one query's block needs with these parameters.
    pub fn shared_memory_per_query(&self, k: usize, p: &SearchParams) -> usize {
        let plan = SearchPlan::new(self.index.raw.header(), p, k);
        let v = batch_view(
            &self.dev.view.view,
            &self.slots[0].buffers,
            1,
            &plan,
            &self.gpu,
        );
        SearchSmem::new(&self.dev.view.view, &v).total as usize
    }

    /// The shared memory `view`'s blocks need, or why the device cannot give
    /// it (`p`: the parameters, for the message).
    fn shared_memory(&self, view: &BatchView, p: &SearchParams) -> Result<usize, SearchError> {
        let smem = SearchSmem::new(&self.dev.view.view, view).total as usize;
        if smem > self.gpu.max_shared_memory() {
            return Err(SearchError::Params(format!(
                "S={} W={} r={} need {smem} bytes of GPU shared memory per query, the device has {}: lower S or W",
                p.start_points,
                p.waves,
                p.read_depth,
                self.gpu.max_shared_memory()
            )));
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
        self.search_inner(queries, k, p, None, false)
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
        self.search_inner(queries, k, p, None, true)
    }

    /// As [`GpuSearcher::search`], without graphs, timing each phase with CUDA
    /// events (summed over the batches).
    pub fn search_profiled(
        &mut self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
    ) -> Result<(SearchResults, GpuPhaseTimes), SearchError> {
        let mut times = GpuPhaseTimes::default();
        let r = self.search_inner(queries, k, p, Some(&mut times), false)?;
        Ok((r, times))
    }

    /// Replay the search of the queries already on the device (from the last
    /// call) `reps` times and return the device seconds per replay: throughput
    /// with the queries resident, as GPU ANN benchmarks report it.
    pub fn replay_seconds(&mut self, reps: usize) -> Result<f64, SearchError> {
        let view = self.slots[self.last_slot].buffers.view.view;
        let graph = self
            .graphs
            .get(&view)
            .ok_or_else(|| SearchError::Params("no batch searched yet".into()))?;
        let st = self.gpu.stream();
        let (a, b) = (self.gpu.event(true)?, self.gpu.event(true)?);
        graph.launch()?;
        a.record(st)?;
        for _ in 0..reps {
            graph.launch()?;
        }
        b.record(st)?;
        let ms = a.elapsed_ms(&b)? as f64;
        Ok(ms / 1e3 / reps.max(1) as f64)
    }

    /// Device time of each phase inside `wave_search` for these queries (one
    /// batch): the kernel is replayed ending after each phase in turn, and the
    /// differences are the phases' costs, in milliseconds per batch:
    /// `[projection + init, decode and lookups, first-round gather and sort,
    /// waves, rerank]`.
    pub fn phase_costs(
        &mut self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
        reps: usize,
    ) -> Result<[f64; 5], SearchError> {
        use octex_kernels::layout::{
            STOP_AFTER_FIRST_ROUND, STOP_AFTER_INIT, STOP_AFTER_LOOKUP, STOP_AFTER_WAVES,
        };
        let batch = &queries[..queries.len().min(self.max_batch * self.index.dim())];
        let mut cumulative = [0f64; 5];
        for (i, stop) in [
            STOP_AFTER_INIT,
            STOP_AFTER_LOOKUP,
            STOP_AFTER_FIRST_ROUND,
            STOP_AFTER_WAVES,
            0,
        ]
        .into_iter()
        .enumerate()
        {
            self.stop_after = stop;
            let r = self
                .search(batch, k, p)
                .map(|_| ())
                .and_then(|_| self.replay_seconds(reps));
            self.stop_after = 0;
            cumulative[i] = r? * 1e3;
        }
        let mut out = [0f64; 5];
        for i in 0..5 {
            out[i] = cumulative[i] - if i > 0 { cumulative[i - 1] } else { 0.0 };
        }
        Ok(out)
    }

    /// Grow the result buffers of both slots for `k` (dropping the graphs,
    /// which point at the old buffers).
    fn ensure_k(&mut self, k: usize) -> Result<(), SearchError> {
        if k > self.slots[0].buffers.k_cap {
            self.graphs.clear();
            let cap = k.next_power_of_two();
            for slot in &mut self.slots {
                *slot = Slot::new(&self.gpu, &self.dev.view.view, self.max_batch, cap)?;
            }
        }
        Ok(())
    }

    fn search_inner(
        &mut self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
        mut times: Option<&mut GpuPhaseTimes>,
        stored_space: bool,
    ) -> Result<SearchResults, SearchError> {
        // A handle of our own (one reference count), so `self` stays free to borrow.
        let index = &self.index.clone();
        let qdim = if stored_space {
            index.raw.dim()
        } else {
            index.dim()
        };
        let nq = index.check(queries, k, p, qdim)?;
        let plan = SearchPlan::new(index.raw.header(), p, k);
        let mut ids = vec![0u32; nq * k];
        let mut dists = vec![0f32; nq * k];
        if times.is_none() {
            let stats =
                self.search_pipelined(queries, nq, &plan, &mut ids, &mut dists, stored_space)?;
            return Ok(SearchResults {
                k,
                ids,
                distances: dists,
                stats,
            });
        }
        let mut stats = SearchStats::default();
        let sdim = index.raw.dim();
        for start in (0..nq).step_by(self.max_batch) {
            let n = self.max_batch.min(nq - start);
            let mut stored = std::mem::take(&mut self.stored);
            let mut norms = std::mem::take(&mut self.norms);
            index.prepare(
                &queries[start * qdim..(start + n) * qdim],
                &mut stored,
                &mut norms,
                stored_space,
            )?;
            let (bi, bd) = (
                &mut ids[start * k..(start + n) * k],
                &mut dists[start * k..(start + n) * k],
            );
            let st = self.run_batch(&stored[..n * sdim], n, &plan, bi, bd, times.as_deref_mut())?;
            for (i, d) in bd.chunks_exact_mut(k).enumerate() {
                for v in d.iter_mut().filter(|_| !stored_space) {
                    *v = index.report_distance(*v, norms[i]);
                }
            }
            stats.add(&st);
            self.stored = stored;
            self.norms = norms;
        }
        Ok(SearchResults {
            k,
            ids,
            distances: dists,
            stats,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn run_batch(
        &mut self,
        stored: &[f32],
        nq: usize,
        plan: &SearchPlan,
        out_ids: &mut [u32],
        out_dists: &mut [f32],
        times: Option<&mut GpuPhaseTimes>,
    ) -> Result<SearchStats, SearchError> {
        let (k, p) = (plan.k, &plan.params);
        self.ensure_k(k)?;
        self.last_slot = 0;
        self.slots[0].view_on_device = None;
        let view = BatchView {
            stop_after: self.stop_after,
            ..batch_view(
                &self.dev.view.view,
                &self.slots[0].buffers,
                nq,
                plan,
                &self.gpu,
            )
        };
        self.shared_memory(&view, p)?;
        let st = self.gpu.stream().clone();
        let ev = |g: &Gpu| g.event(true);
        let events: Option<[CudaEvent; 5]> = match times {
            Some(_) => Some([
                ev(&self.gpu)?,
                ev(&self.gpu)?,
                ev(&self.gpu)?,
                ev(&self.gpu)?,
                ev(&self.gpu)?,
            ]),
            None => None,
        };
        let record = |i: usize| -> Result<(), GpuError> {
            if let Some(e) = &events {
                e[i].record(&st)?;
            }
            Ok(())
        };
        record(0)?;
        st.memcpy_htod(
            stored,
            &mut self.slots[0].buffers.queries.slice_mut(..stored.len()),
        )?;
        self.slots[0].buffers.view.update(&self.gpu, view)?;
        st.memset_zeros(&mut self.slots[0].buffers.stats)?;
        record(1)?;
        if events.is_some() {
            // Profiled: the same launches, outside a graph, with events between.
            project(&self.gpu, &self.dev, &mut self.slots[0].buffers, nq)?;
            record(2)?;
            self.gpu
                .wave_search(&self.dev.view, &self.slots[0].buffers.view)?;
            record(3)?;
        } else {
            if !self.graphs.contains_key(&view) {
                if self.graphs.len() >= MAX_GRAPHS {
                    self.graphs.clear();
                }
                let graph = capture(&self.gpu, &self.dev, &mut self.slots[0].buffers, nq)?;
                self.graphs.insert(view, graph);
            }
            self.graphs[&view].launch()?;
        }
        st.memcpy_dtoh(&self.slots[0].buffers.ids.slice(..nq * k), out_ids)?;
        st.memcpy_dtoh(&self.slots[0].buffers.dists.slice(..nq * k), out_dists)?;
        let mut counters = [0u64; STAT_SLOTS];
        st.memcpy_dtoh(&self.slots[0].buffers.stats, &mut counters[..])?;
        record(4)?;
        st.synchronize()?;
        if let (Some(e), Some(t)) = (&events, times) {
            let ms = |a: usize, b: usize| e[a].elapsed_ms(&e[b]).map(|v| v as f64);
            t.upload_ms += ms(0, 1)?;
            t.project_ms += ms(1, 2)?;
            t.search_ms += ms(2, 3)?;
            t.download_ms += ms(3, 4)?;
        }
        Ok(SearchStats {
            queries: nq as u64,
            first_round_entries: counters[STAT_FIRST_ROUND_ENTRIES],
            copies_without_fragment: counters[STAT_COPIES_WITHOUT_FRAGMENT],
            sketch_distances: counters[STAT_SKETCH_DISTANCES],
            exact_distances: counters[STAT_EXACT_DISTANCES],
            spacing_hits: [0; 8],
            seeded_queries: counters[STAT_SEEDED_QUERIES],
        })
    }
}

/// The two products and the bias subtraction that project a batch: principal
/// coordinates `pcs = q P - mu P`, then all copies `z = pcs[.., ..m_c] R`.
fn project(g: &Gpu, dev: &DeviceIndex, b: &mut BatchBuffers, nq: usize) -> Result<(), GpuError> {
    let ix = &dev.view.view;
    let (dim, m, width) = (ix.dim as usize, ix.basis_dim as usize, ix.width as usize);
    let mc = dev.rotation.len() / width.max(1);
    g.matmul(
        &b.queries.slice(..nq * dim),
        dim,
        &dev.basis.slice(..),
        m,
        &mut b.pcs.slice_mut(..nq * m),
        m,
        (nq, dim, m),
    )?;
    g.sub_bias(&mut b.pcs.slice_mut(..nq * m), nq, &dev.basis_bias)?;
    g.matmul(
        &b.pcs.slice(..nq * m),
        m,
        &dev.rotation.slice(..),
        width,
        &mut b.z.slice_mut(..nq * width),
        width,
        (nq, mc, width),
    )
}

/// Capture projection and search of one batch shape as a CUDA graph.
fn capture(
    g: &Gpu,
    dev: &DeviceIndex,
    b: &mut BatchBuffers,
    nq: usize,
) -> Result<CudaGraph, GpuError> {
    // The launch configuration comes from the view's host copy: it must
    // already describe this batch (a stale one once captured a launch with
    // the wrong shared-memory size).
    if b.view.view.nq as usize != nq {
        return Err(GpuError::Unsupported(format!(
            "internal: batch view describes {} queries, capturing {nq}",
            b.view.view.nq
        )));
    }
    g.capture(|| project(g, dev, b, nq).and_then(|_| g.wave_search(&dev.view, &b.view)))
}
