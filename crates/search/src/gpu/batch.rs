//! One batch on the device: its buffers ([`BatchBuffers`]), its sizes
//! ([`batch_view`], from the search plan), and its launches (the projection
//! products, then `wave_search`), run directly or captured as a CUDA graph.

use octex_kernels::driver::{CudaGraph, CudaSlice};
use octex_kernels::layout::{
    BatchView, IndexView, SearchSmem, MAX_HASH_SLOTS, MAX_SPILL_HASH_SLOTS, STAT_SLOTS,
};
use octex_kernels::{device_address, DeviceBatchView, Gpu, GpuError};

use super::device_index::DeviceIndex;
use crate::SearchPlan;

/// Per-batch device buffers, sized for `max_batch` queries and `k_cap` results.
pub(super) struct BatchBuffers {
    pub queries: CudaSlice<f32>,
    pub pcs: CudaSlice<f32>,
    pub z: CudaSlice<f32>,
    pub ids: CudaSlice<u32>,
    pub dists: CudaSlice<f32>,
    pub stats: CudaSlice<u64>,
    /// Global scratch of a spilled batch ([`batch_view`]), grown on demand.
    pub scratch: Option<CudaSlice<u8>>,
    pub k_cap: usize,
    pub view: DeviceBatchView,
}

impl BatchBuffers {
    pub(super) fn new(
        gpu: &Gpu,
        index: &IndexView,
        max_batch: usize,
        k_cap: usize,
    ) -> Result<Self, GpuError> {
        let n = max_batch;
        Ok(Self {
            queries: gpu.zeros(n * index.dim as usize)?,
            pcs: gpu.zeros(n * index.basis_dim as usize)?,
            z: gpu.zeros(n * index.width as usize)?,
            ids: gpu.zeros(n * k_cap)?,
            dists: gpu.zeros(n * k_cap)?,
            stats: gpu.zeros(STAT_SLOTS)?,
            scratch: None,
            k_cap,
            view: DeviceBatchView::new(gpu, BatchView::default())?,
        })
    }
}

/// Sizes of one search on the device, with the batch's buffer addresses. The
/// large per-query arrays (candidates, exact list, visited set, fresh ids)
/// stay in shared memory while the block fits the device's; past that they
/// spill to a global scratch of `max_batch` query slices (allocated here, kept
/// for later batches), where the visited set may also grow with the entries
/// read. Nothing is refused for its size.
pub(super) fn batch_view(
    ix: &IndexView,
    b: &mut BatchBuffers,
    nq: usize,
    max_batch: usize,
    plan: &SearchPlan,
    s: &Gpu,
) -> Result<BatchView, GpuError> {
    let (p, k) = (&plan.params, plan.k);
    let r = plan.read_depth as u32;
    let (start_points, waves, row_len) = (p.start_points as u32, p.waves as u32, ix.row_len);
    let keep = plan.keep as u32;
    let first = ix.copies * r + ix.n_seeds;
    // The block sort takes any length: no rounding to a power of two.
    let buf_len = first.max(keep + start_points * row_len);
    let entries = first + waves * start_points * row_len;
    // The set holds distinct ids only, fewer than the entries read (ids recur
    // across copies and rows): one slot per entry (rounded up to a power of
    // two) bounds the load at 1 in the worst case, at half the shared memory
    // of a load-0.5 table (more blocks per SM). Measured (distinct ids per
    // slot, H200 benches): 0.2-0.3 at S >= 32, up to 0.65 at S8 W1 with r16,
    // where the first round's ripple heads are most of the entries and few
    // recur. A full set drops ids.
    let hash_slots = entries.next_power_of_two().clamp(64, MAX_HASH_SLOTS);
    let st = s.stream();
    let mut view = BatchView {
        z: device_address(&b.z, st),
        pcs: device_address(&b.pcs, st),
        queries: device_address(&b.queries, st),
        out_ids: device_address(&b.ids, st),
        out_dists: device_address(&b.dists, st),
        stats: device_address(&b.stats, st),
        scratch: 0,
        nq: nq as u32,
        k: k as u32,
        read_depth: r,
        start_points,
        waves,
        rerank: p.rerank as u32,
        keep,
        hash_slots,
        buf_len,
        // Per-wave rerank sorts the exact list (at most `keep`) with one
        // pass's new entries (at most `R`).
        rerank_len: if p.wave_rerank {
            keep + p.rerank as u32
        } else {
            p.rerank as u32
        },
        wave_rerank: p.wave_rerank as u32,
        scratch_per_query: 0,
        stop_after: 0,
    };
    if SearchSmem::new(ix, &view).total as usize > s.max_shared_memory() {
        view.hash_slots = entries.next_power_of_two().clamp(64, MAX_SPILL_HASH_SLOTS);
        view.scratch_per_query = 1;
        view.scratch_per_query = SearchSmem::new(ix, &view).large;
        let bytes = max_batch * view.scratch_per_query as usize;
        if b.scratch.as_ref().is_none_or(|sc| sc.len() < bytes) {
            b.scratch = None;
            b.scratch = Some(s.zeros::<u8>(bytes)?);
        }
        if let Some(sc) = &b.scratch {
            view.scratch = device_address(sc, st);
        }
    }
    Ok(view)
}

/// The two products and the bias subtraction that project a batch: principal
/// coordinates `pcs = q P - mu P`, then all copies `z = pcs[.., ..m_c] R`.
pub(super) fn project(
    g: &Gpu,
    dev: &DeviceIndex,
    b: &mut BatchBuffers,
    nq: usize,
) -> Result<(), GpuError> {
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
pub(super) fn capture(
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
