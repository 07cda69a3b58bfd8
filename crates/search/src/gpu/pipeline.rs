//! Two batches in flight: while the GPU searches batch `i` (its graph on the
//! compute stream), the host prepares batch `i + 1` into page-locked memory and
//! a copy stream uploads it, and batch `i - 1`'s results come back
//! asynchronously. Each of the two slots owns its device buffers, its
//! page-locked host buffers and two events (queries uploaded; batch done).

use octex_kernels::driver::CudaEvent;
use octex_kernels::{GpuError, PinnedBuf};

use super::batch::{capture, launch_batch, BatchBuffers};
use super::device_index::DeviceIndex;
use super::{GpuSearcher, MAX_GRAPHS};
use crate::{SearchError, SearchPlan, SearchStats};
use octex_kernels::layout::{
    STAT_COPIES_WITHOUT_FRAGMENT, STAT_EXACT_DISTANCES, STAT_FIRST_ROUND_ENTRIES,
    STAT_SEEDED_QUERIES, STAT_SKETCH_DISTANCES, STAT_SLOTS,
};

/// One pipeline slot.
pub(super) struct Slot {
    pub buffers: BatchBuffers,
    queries: PinnedBuf<f32>,
    ids: PinnedBuf<u32>,
    dists: PinnedBuf<f32>,
    stats: PinnedBuf<u64>,
    uploaded: CudaEvent,
    done: CudaEvent,
    /// The batch whose results are in flight: (first query, queries, norms,
    /// whether distances stay in the stored space).
    pending: Option<(usize, usize, Vec<f32>, bool)>,
}

impl Slot {
    pub fn new(
        gpu: &octex_kernels::Gpu,
        dev: &DeviceIndex,
        max_batch: usize,
        k_cap: usize,
    ) -> Result<Self, GpuError> {
        let ctx = gpu.context();
        let ix = &dev.view.view;
        Ok(Self {
            buffers: BatchBuffers::new(gpu, dev, max_batch, k_cap)?,
            queries: PinnedBuf::new(ctx, max_batch * ix.dim as usize, true)?,
            ids: PinnedBuf::new(ctx, max_batch * k_cap, false)?,
            dists: PinnedBuf::new(ctx, max_batch * k_cap, false)?,
            stats: PinnedBuf::new(ctx, STAT_SLOTS, false)?,
            uploaded: gpu.event(false)?,
            done: gpu.event(false)?,
            pending: None,
        })
    }

    /// Wait for the slot's batch and move its results into the outputs.
    fn finish(
        &mut self,
        searcher_index: &crate::Index,
        k: usize,
        ids: &mut [u32],
        dists: &mut [f32],
        stats: &mut SearchStats,
    ) -> Result<(), SearchError> {
        let Some((start, n, norms, stored_space)) = self.pending.take() else {
            return Ok(());
        };
        self.done.synchronize()?;
        ids[start * k..(start + n) * k].copy_from_slice(&self.ids.as_slice()[..n * k]);
        let out = &mut dists[start * k..(start + n) * k];
        out.copy_from_slice(&self.dists.as_slice()[..n * k]);
        if !stored_space {
            for (i, row) in out.chunks_exact_mut(k).enumerate() {
                for v in row {
                    *v = searcher_index.report_distance(*v, norms[i]);
                }
            }
        }
        let c = self.stats.as_slice();
        stats.add(&SearchStats {
            queries: n as u64,
            first_round_entries: c[STAT_FIRST_ROUND_ENTRIES],
            copies_without_fragment: c[STAT_COPIES_WITHOUT_FRAGMENT],
            sketch_distances: c[STAT_SKETCH_DISTANCES],
            exact_distances: c[STAT_EXACT_DISTANCES],
            spacing_hits: [0; 8],
            seeded_queries: c[STAT_SEEDED_QUERIES],
            ..SearchStats::default()
        });
        Ok(())
    }
}

impl GpuSearcher {
    /// Search `nq` checked queries in batches of `max_batch`, two in flight.
    /// `stored_space`: the queries are in the stored space already and the
    /// distances stay squared L2 there.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn search_pipelined(
        &mut self,
        queries: &[f32],
        nq: usize,
        plan: &SearchPlan,
        ids: &mut [u32],
        dists: &mut [f32],
        stored_space: bool,
    ) -> Result<SearchStats, SearchError> {
        let k = plan.k;
        let index = &self.index.clone();
        let sdim = index.raw.stored_dim();
        let qdim = if stored_space { sdim } else { index.dim() };
        self.ensure_k(k)?;
        let mut stats = SearchStats::default();
        let compute = self.gpu.stream().clone();
        let result = (|| -> Result<(), SearchError> {
            for (b, start) in (0..nq).step_by(self.max_batch).enumerate() {
                let s = b % self.slots.len();
                let n = self.max_batch.min(nq - start);
                // The slot's previous batch must be done before its buffers
                // are reused.
                self.slots[s].finish(index, k, ids, dists, &mut stats)?;
                let view = self.bind_batch(s, n, plan)?;
                // Stored-space queries straight into page-locked memory, on all
                // cores (host preparation bounds the end-to-end rate of wide
                // queries: 31 MB per batch of Fashion-MNIST).
                let slot = &mut self.slots[s];
                let norms = index.prepare_parallel(
                    &queries[start * qdim..(start + n) * qdim],
                    &mut slot.queries.as_mut_slice()[..n * sdim],
                    stored_space,
                )?;
                slot.queries.upload_prefix(
                    n * sdim,
                    &mut slot.buffers.queries,
                    &self.copy_stream,
                )?;
                slot.uploaded.record(&self.copy_stream)?;

                // The view first: the launch passes it by value, and
                // capturing reads it (grid and shared-memory size too).
                let slot = &mut self.slots[s];
                slot.buffers.view.update(view);
                // Profilers see the kernels of a direct launch by name
                // (`GpuTuning::direct_launches`); the default replays a
                // captured graph.
                let graphs = !self.tuning.direct_launches;
                if graphs && !self.graphs.contains_key(&view) {
                    if self.graphs.len() >= MAX_GRAPHS {
                        self.graphs.clear();
                    }
                    let graph = capture(&self.gpu, &self.dev, &mut self.slots[s].buffers, n)?;
                    self.graphs.insert(view, graph);
                }
                let slot = &mut self.slots[s];
                compute.wait(&slot.uploaded)?;
                compute.memset_zeros(&mut slot.buffers.stats)?;
                if graphs {
                    self.graphs[&view].launch()?;
                } else {
                    launch_batch(&self.gpu, &self.dev, &mut slot.buffers, n)?;
                }
                slot.ids
                    .download_prefix(n * k, &slot.buffers.ids, &compute)?;
                slot.dists
                    .download_prefix(n * k, &slot.buffers.dists, &compute)?;
                slot.stats
                    .download_prefix(STAT_SLOTS, &slot.buffers.stats, &compute)?;
                slot.done.record(&compute)?;
                slot.pending = Some((start, n, norms, stored_space));
                self.last_slot = s;
            }
            Ok(())
        })();
        // Drain both slots, also after an error (nothing may be in flight
        // into buffers we hand back or free).
        // An upload may be in flight if the loop stopped between it and the
        // launch.
        let mut drained = self.copy_stream.synchronize().map_err(SearchError::from);
        for s in 0..self.slots.len() {
            let r = self.slots[s].finish(index, k, ids, dists, &mut stats);
            if drained.is_ok() {
                drained = r;
            }
        }
        result?;
        drained?;
        Ok(stats)
    }
}
