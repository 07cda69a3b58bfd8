//! The profiled GPU paths, for benchmarks: a batch searched without graphs
//! with CUDA events between its phases ([`GpuSearcher::search_profiled`]),
//! graph replays of the last batch ([`GpuSearcher::replay_seconds`]) and the
//! cost of each phase inside the kernel ([`GpuSearcher::phase_costs`]).

use octex_kernels::driver::CudaEvent;
use octex_kernels::layout::{
    STAT_COPIES_WITHOUT_FRAGMENT, STAT_EXACT_DISTANCES, STAT_FIRST_ROUND_ENTRIES,
    STAT_SEEDED_QUERIES, STAT_SKETCH_DISTANCES, STAT_SLOTS,
};
use octex_kernels::GpuError;

use super::batch::{project, search_launches};
use super::{GpuPhaseTimes, GpuSearcher};
use crate::{SearchError, SearchParams, SearchPlan, SearchResults, SearchStats};

impl GpuSearcher {
    /// As [`GpuSearcher::search`], without graphs, timing each phase with CUDA
    /// events (summed over the batches).
    pub fn search_profiled(
        &mut self,
        queries: &[f32],
        k: usize,
        p: &SearchParams,
    ) -> Result<(SearchResults, GpuPhaseTimes), SearchError> {
        let mut times = GpuPhaseTimes::default();
        let stored_space = false;
        let (nq, plan) = self.plan(queries, k, p, stored_space)?;
        let index = &self.index.clone();
        let qdim = index.dim();
        let mut ids = vec![0u32; nq * k];
        let mut dists = vec![0f32; nq * k];
        let mut stats = SearchStats::default();
        let sdim = index.raw.stored_dim();
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
            let st = self.run_batch_profiled(&stored[..n * sdim], n, &plan, bi, bd, &mut times)?;
            for (i, d) in bd.chunks_exact_mut(k).enumerate() {
                for v in d.iter_mut().filter(|_| !stored_space) {
                    *v = index.report_distance(*v, norms[i]);
                }
            }
            stats.add(&st);
            self.stored = stored;
            self.norms = norms;
        }
        let results = SearchResults {
            k,
            ids,
            distances: dists,
            stats,
        };
        Ok((results, times))
    }

    /// Replay the search of the queries already on the device (from the last
    /// call) `reps` times and return the device seconds per replay: throughput
    /// with the queries resident, as GPU ANN benchmarks report it.
    pub fn replay_seconds(&mut self, reps: usize) -> Result<f64, SearchError> {
        let view = self.slots[self.last_slot].buffers.view.view;
        let graph = self.graphs.get(&view).ok_or(SearchError::NothingSearched)?;
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
    /// `[projection (with the fragment lookup's passes, for batches that
    /// take `query_fragments`) + init, decode and lookups inside the search
    /// kernel (for those batches: reading the fragments found),
    /// first-round gather and sort, waves, rerank]`.
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

    #[allow(clippy::too_many_arguments)]
    fn run_batch_profiled(
        &mut self,
        stored: &[f32],
        nq: usize,
        plan: &SearchPlan,
        out_ids: &mut [u32],
        out_dists: &mut [f32],
        times: &mut GpuPhaseTimes,
    ) -> Result<SearchStats, SearchError> {
        let k = plan.k;
        self.ensure_k(k)?;
        self.last_slot = 0;
        let view = self.bind_batch(0, nq, plan)?;
        let st = self.gpu.stream().clone();
        let e: [CudaEvent; 5] = [
            self.gpu.event(true)?,
            self.gpu.event(true)?,
            self.gpu.event(true)?,
            self.gpu.event(true)?,
            self.gpu.event(true)?,
        ];
        e[0].record(&st)?;
        st.memcpy_htod(
            stored,
            &mut self.slots[0].buffers.queries.slice_mut(..stored.len()),
        )?;
        self.slots[0].buffers.view.update(view);
        st.memset_zeros(&mut self.slots[0].buffers.stats)?;
        e[1].record(&st)?;
        // The launches of the graph, outside it, with events between.
        project(&self.gpu, &self.dev, &mut self.slots[0].buffers, nq)?;
        e[2].record(&st)?;
        search_launches(&self.gpu, &self.dev, &mut self.slots[0].buffers)?;
        e[3].record(&st)?;
        st.memcpy_dtoh(&self.slots[0].buffers.ids.slice(..nq * k), out_ids)?;
        st.memcpy_dtoh(&self.slots[0].buffers.dists.slice(..nq * k), out_dists)?;
        let mut counters = [0u64; STAT_SLOTS];
        st.memcpy_dtoh(&self.slots[0].buffers.stats, &mut counters[..])?;
        e[4].record(&st)?;
        st.synchronize()?;
        let ms =
            |a: usize, b: usize| -> Result<f64, GpuError> { Ok(e[a].elapsed_ms(&e[b])? as f64) };
        times.upload_ms += ms(0, 1)?;
        times.project_ms += ms(1, 2)?;
        times.search_ms += ms(2, 3)?;
        times.download_ms += ms(3, 4)?;
        Ok(SearchStats {
            queries: nq as u64,
            first_round_entries: counters[STAT_FIRST_ROUND_ENTRIES],
            copies_without_fragment: counters[STAT_COPIES_WITHOUT_FRAGMENT],
            sketch_distances: counters[STAT_SKETCH_DISTANCES],
            exact_distances: counters[STAT_EXACT_DISTANCES],
            spacing_hits: [0; 8],
            seeded_queries: counters[STAT_SEEDED_QUERIES],
            ..SearchStats::default()
        })
    }
}
