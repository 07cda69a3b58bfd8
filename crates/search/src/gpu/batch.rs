//! One batch on the device: its buffers ([`BatchBuffers`]), its sizes
//! ([`batch_view`], from the search plan), and its launches
//! ([`launch_batch`]: the projection products, the fragment lookup, then
//! `wave_search`), run directly or captured as a CUDA graph.

use octex_kernels::driver::{CudaGraph, CudaSlice};
use octex_kernels::layout::{
    BatchView, FragmentLookupLayout, IndexView, SearchSmem, MAX_HASH_SLOTS, MAX_LOOKUP_SPACINGS,
    MAX_SPILL_HASH_SLOTS, STAT_SLOTS,
};
use octex_kernels::{device_address, DeviceBatchView, Gpu, GpuError};

use super::device_index::DeviceIndex;
use crate::{FragmentLookupChoice, GpuTuning, SearchPlan};

/// Per-batch device buffers, sized for `max_batch` queries and `k_cap` results.
pub(super) struct BatchBuffers {
    pub queries: CudaSlice<f32>,
    /// The queries less the data's mean, which TF32 products take
    /// ([`super::device_index::Projection`]); `None` with exact products.
    pub centred: Option<CudaSlice<f32>>,
    /// Principal coordinates (with the projections after them when one
    /// product gives both), `Projection::pcs_stride` per query ([`project`]).
    pub pcs: CudaSlice<f32>,
    /// Projections, `width` per query, for batches that take two products
    /// (when the largest batch does).
    pub z: Option<CudaSlice<f32>>,
    pub ids: CudaSlice<u32>,
    pub dists: CudaSlice<f32>,
    pub stats: CudaSlice<u64>,
    /// `query_fragments`' buffer ([`FragmentLookupLayout`]), for batches that
    /// find their fragments in a kernel of their own ([`FragmentLookup`]).
    pub frag_hits: CudaSlice<u32>,
    /// Global scratch of a spilled batch ([`batch_view`]), grown on demand.
    pub scratch: Option<CudaSlice<u8>>,
    pub k_cap: usize,
    pub view: DeviceBatchView,
}

impl BatchBuffers {
    pub(super) fn new(
        gpu: &Gpu,
        dev: &DeviceIndex,
        max_batch: usize,
        k_cap: usize,
    ) -> Result<Self, GpuError> {
        let n = max_batch;
        let index = &dev.view.view;
        let proj = &dev.projection;
        // The principal-coordinate rows of the largest batch of either product.
        let pcs_len = (n * index.basis_dim as usize)
            .max(n.min(proj.fused_max_batch()) * proj.pcs_stride(index, 1) as usize);
        let z = match proj.two_for(n) {
            Some(_) => Some(gpu.zeros(n * index.width as usize)?),
            None => None,
        };
        let centred = match proj.mean {
            Some(_) => Some(gpu.zeros(n * index.dim as usize)?),
            None => None,
        };
        Ok(Self {
            queries: gpu.zeros(n * index.dim as usize)?,
            centred,
            pcs: gpu.zeros(pcs_len)?,
            z,
            ids: gpu.zeros(n * k_cap)?,
            dists: gpu.zeros(n * k_cap)?,
            stats: gpu.zeros(STAT_SLOTS)?,
            frag_hits: gpu.zeros(lookup_words(n, index.copies).unwrap_or(1))?,
            scratch: None,
            k_cap,
            view: DeviceBatchView::new(BatchView::default()),
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
    dev: &DeviceIndex,
    b: &mut BatchBuffers,
    nq: usize,
    max_batch: usize,
    plan: &SearchPlan,
    s: &Gpu,
    tuning: &GpuTuning,
) -> Result<BatchView, GpuError> {
    let ix = &dev.view.view;
    let (p, k) = (&plan.params, plan.k);
    let r = plan.read_depth as u32;
    let (start_points, waves, row_len) = (p.start_points as u32, p.waves as u32, ix.row_len);
    let keep = plan.keep as u32;
    // The block sort takes any length: no rounding to a power of two.
    let first = SearchSmem::first_round_ids(ix, r, start_points);
    let buf_len = first.max(keep + start_points * row_len);
    // The visited set: a slot per entry the query may read, the seeds
    // counted beside the ripple heads (not the buffer's tighter bound: a
    // nearly full set makes linear probes run long).
    let entries = ix.copies * r + ix.n_seeds + waves * start_points * row_len;
    // The set holds distinct ids only, fewer than the entries read (ids recur
    // across copies and rows): one slot per entry bounds the load at 1 in the
    // worst case, at half the shared memory of a load-0.5 table (more blocks
    // per SM); distinct ids fill 0.2-0.65 of it. A full set drops ids.
    // Small batches take more slots per entry ([`visited_slots_per_entry`])
    // where the shared memory has room.
    let slots =
        |per_entry: f32| visited_slots(entries, per_entry, MAX_HASH_SLOTS, Rounding::PowerOfTwo);
    let per_entry = tuning
        .visited_slots_per_entry
        .unwrap_or_else(|| visited_slots_per_entry(nq, s));
    let st = s.stream();
    let two_products = dev.projection.two_for(nq).is_some();
    let pcs_stride = dev.projection.pcs_stride(ix, nq);
    let mut view = BatchView {
        z: match (&b.z, two_products) {
            (Some(z), true) => device_address(z, st),
            _ => device_address(&b.pcs, st) + 4 * dev.projection.fused_z_offset() as u64,
        },
        pcs: device_address(&b.pcs, st),
        pcs_stride,
        z_stride: if two_products { ix.width } else { pcs_stride },
        queries: device_address(&b.queries, st),
        out_ids: device_address(&b.ids, st),
        out_dists: device_address(&b.dists, st),
        stats: device_address(&b.stats, st),
        scratch: 0,
        frag_hits: match FragmentLookup::for_batch(nq, ix, s, tuning.fragment_lookup) {
            FragmentLookup::OwnKernel => device_address(&b.frag_hits, st),
            FragmentLookup::InSearch => 0,
        },
        nq: nq as u32,
        k: k as u32,
        read_depth: r,
        start_points,
        waves,
        rerank: p.rerank as u32,
        keep,
        hash_slots: slots(per_entry),
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
    let smem = |v: &BatchView| SearchSmem::new(ix, v).total as usize;
    let mut one_slot_per_entry = per_entry == 1.0;
    if per_entry > 1.0 && smem(&view) > s.max_shared_memory() {
        view.hash_slots = slots(1.0);
        one_slot_per_entry = true;
    }
    // A set of exactly the entries where that lets a second block share a
    // multiprocessor, or one fit at all ([`Rounding::Step`]).
    if one_slot_per_entry {
        let tight = BatchView {
            hash_slots: visited_slots(entries, 1.0, MAX_HASH_SLOTS, Rounding::Step),
            ..view
        };
        if let (Some(before), Some(after)) = (
            s.wide_search_blocks(smem(&view)),
            s.wide_search_blocks(smem(&tight)),
        ) {
            if before <= 1 && after > before {
                view = tight;
            }
        }
    }
    if smem(&view) > s.max_shared_memory() {
        view.hash_slots = visited_slots(entries, 1.0, MAX_SPILL_HASH_SLOTS, Rounding::Step);
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

/// Where a batch's fragments (the decoding of every copy and spacing of a
/// query and its key-table lookup) are found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FragmentLookup {
    /// In `query_fragments`, one pass per spacing before `wave_search`
    /// (which reads the fragments found): each decodes only the (query,
    /// copy) items the finer spacings left without a stored fragment, at
    /// full occupancy (faster than `InSearch` for batches that fill the
    /// device).
    OwnKernel,
    /// Inside `wave_search`, by each query's block, before its first round.
    InSearch,
}

impl FragmentLookup {
    /// The lookup of a batch of `nq` queries over `index`: its own kernel,
    /// except for batches of at most one query per multiprocessor, whose
    /// blocks have a multiprocessor each and decode with all its threads
    /// (there the kernel's extra launches cost more than they save), and
    /// for indexes whose spacings or copies
    /// pass its limits ([`FragmentLookupLayout::takes`]).
    /// `forced` ([`GpuTuning::fragment_lookup`]) sets it for every batch the
    /// kernel can take, for measurements.
    pub(super) fn for_batch(
        nq: usize,
        index: &IndexView,
        gpu: &Gpu,
        forced: Option<FragmentLookupChoice>,
    ) -> Self {
        if !FragmentLookupLayout::takes(index.spacings, 8 * index.blocks)
            || lookup_words(nq, index.copies).is_none()
        {
            return FragmentLookup::InSearch;
        }
        match forced {
            Some(FragmentLookupChoice::InSearch) => FragmentLookup::InSearch,
            Some(FragmentLookupChoice::OwnKernel) => FragmentLookup::OwnKernel,
            None if nq <= gpu.multiprocessors() as usize => FragmentLookup::InSearch,
            None => FragmentLookup::OwnKernel,
        }
    }
}

/// Words of `query_fragments`' buffer for `nq` queries of `copies` copies,
/// if its offsets fit the kernel's 32-bit arithmetic.
fn lookup_words(nq: usize, copies: u32) -> Option<usize> {
    let items = u32::try_from(nq).ok()?.checked_mul(copies)?;
    items.checked_mul(3)?.checked_add(MAX_LOOKUP_SPACINGS)?;
    Some(FragmentLookupLayout::new(nq as u32, copies).words as usize)
}

/// The launches of one batch's search, after its queries are on the device:
/// the projection products ([`project`]), the fragment lookup when the view
/// asks for its own kernel, and `wave_search`. The profiled path times the
/// projection apart: it calls [`project`] and [`search_launches`] itself.
pub(super) fn launch_batch(
    g: &Gpu,
    dev: &DeviceIndex,
    b: &mut BatchBuffers,
    nq: usize,
) -> Result<(), GpuError> {
    project(g, dev, b, nq)?;
    search_launches(g, dev, b)
}

/// The launches after the projection: `query_fragments` (a view without a
/// `frag_hits` buffer launches nothing there) and `wave_search`.
pub(super) fn search_launches(
    g: &Gpu,
    dev: &DeviceIndex,
    b: &mut BatchBuffers,
) -> Result<(), GpuError> {
    g.query_fragments(&dev.view, &b.view, &mut b.frag_hits)?;
    g.wave_search(&dev.view, &b.view)
}

/// How [`visited_slots`] rounds the set's size up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rounding {
    /// To a power of two: the set of most launches. At the set's usual
    /// load its linear probes stay short.
    PowerOfTwo,
    /// To a multiple of [`VISITED_SLOT_STEP`]: where the power-of-two set
    /// leaves one block of the wide build a multiprocessor (or none: the
    /// batch would spill) and the smaller set lets more fit, and in the
    /// global scratch of a spilled batch. Not used from two blocks to three
    /// nor where it would move a launch to the dense build: there the load
    /// costs more than the blocks gain.
    Step,
}

/// Visited-set slots for `entries` entries at `per_entry` slots each,
/// rounded as `rounding` says, from 64 to `max` (a multiple of
/// [`VISITED_SLOT_STEP`]). The kernel hashes into any number of slots.
fn visited_slots(entries: u32, per_entry: f32, max: u32, rounding: Rounding) -> u32 {
    let want = (entries as f64 * per_entry as f64).ceil().min(max as f64) as u32;
    let want = want.max(64);
    match rounding {
        Rounding::PowerOfTwo => want.next_power_of_two().min(max),
        Rounding::Step => want.next_multiple_of(VISITED_SLOT_STEP).min(max),
    }
}

/// The visited set's size is a multiple of this many slots.
const VISITED_SLOT_STEP: u32 = 32;

/// Visited-set slots per entry a query may read when the batch has at most
/// one query per multiprocessor ([`visited_slots_per_entry`]).
const SPARE_SMEM_SLOTS_PER_ENTRY: f32 = 4.0;

/// Visited-set slots per entry a query of a batch of `nq` may read (before
/// [`visited_slots`] rounds them). One for large batches, where the set's
/// shared memory limits the blocks per multiprocessor. Batches of at most one
/// query per multiprocessor run one block per multiprocessor whatever its
/// shared memory, so there the set takes [`SPARE_SMEM_SLOTS_PER_ENTRY`] and
/// its linear probes stay short: at one slot per entry, rounding up to a
/// power of two leaves some shapes with a set three-quarters full (GloVe-50,
/// C = 128, r = 12, S = 8: 2,048 slots for 1,546 distinct ids), and their
/// batch-100 latency was 1.3-1.7 times that of r = 16, which reads more
/// entries into a set of twice the slots.
/// [`GpuTuning::visited_slots_per_entry`] sets it for every batch, for
/// measurements. It may be a fraction from 1/16 (a set smaller than the
/// entries read, so more blocks fit a multiprocessor at large `S W`): the
/// set holds distinct ids only, but one that fills drops the ids it cannot
/// place, which shows as lost recall.
fn visited_slots_per_entry(nq: usize, gpu: &Gpu) -> f32 {
    if nq <= gpu.multiprocessors() as usize {
        SPARE_SMEM_SLOTS_PER_ENTRY
    } else {
        1.0
    }
}

/// The projection of a batch ([`Projection`]): the principal coordinates and
/// the projections into all copies. Exact f32 products take the queries as
/// they are and write both before their biases (the search kernel accounts
/// for them, so no kernel runs before the products); TF32 products, where
/// the searcher was opened so, take the queries less the data's mean (the
/// handle goes back to exact products after them).
pub(super) fn project(
    g: &Gpu,
    dev: &DeviceIndex,
    b: &mut BatchBuffers,
    nq: usize,
) -> Result<(), GpuError> {
    let ix = &dev.view.view;
    let (dim, m, width) = (ix.dim as usize, ix.basis_dim as usize, ix.width as usize);
    let tf32 = dev.projection.mean.is_some();
    let queries = match (&dev.projection.mean, &mut b.centred) {
        (Some(mean), Some(centred)) => {
            g.sub_bias_into(
                &b.queries.slice(..nq * dim),
                &mut centred.slice_mut(..nq * dim),
                nq,
                mean,
            )?;
            &*centred
        }
        (None, _) => &b.queries,
        (Some(_), None) => {
            return Err(GpuError::Unsupported(
                "internal: centred products without a buffer for the centred queries".into(),
            ))
        }
    };
    if tf32 {
        g.set_tf32(true)?;
    }
    let r = match (
        dev.projection.fused_for(nq),
        dev.projection.two_for(nq),
        &mut b.z,
    ) {
        (Some(matrix), _, _) => {
            let cols = dev.projection.pcs_stride(ix, nq) as usize;
            g.matmul(
                &queries.slice(..nq * dim),
                dim,
                &matrix.slice(..),
                cols,
                &mut b.pcs.slice_mut(..nq * cols),
                cols,
                (nq, dim, cols),
            )
        }
        (None, Some((basis, rotation)), Some(z)) => {
            let mc = rotation.len() / width.max(1);
            g.matmul(
                &queries.slice(..nq * dim),
                dim,
                &basis.slice(..),
                m,
                &mut b.pcs.slice_mut(..nq * m),
                m,
                (nq, dim, m),
            )?;
            g.matmul(
                &b.pcs.slice(..nq * m),
                m,
                &rotation.slice(..),
                width,
                &mut z.slice_mut(..nq * width),
                width,
                (nq, mc, width),
            )
        }
        _ => Err(GpuError::Unsupported(format!(
            "internal: no projection for a batch of {nq} (buffers sized for another)"
        ))),
    };
    if tf32 {
        g.set_tf32(false)?;
    }
    r
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
    g.capture(|| launch_batch(g, dev, b, nq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visited_slots_round_up_within_bounds() {
        use Rounding::{PowerOfTwo, Step};
        // GloVe-50 at C = 128, r8 S96 W3: 1,024 ripple entries, 256 seeds
        // and 18,432 row entries.
        let entries = 1_024 + 256 + 3 * 96 * 64;
        assert_eq!(
            visited_slots(entries, 1.0, MAX_HASH_SLOTS, PowerOfTwo),
            MAX_HASH_SLOTS
        );
        assert_eq!(visited_slots(entries, 1.0, MAX_HASH_SLOTS, Step), 19_712);
        assert_eq!(
            visited_slots(entries, 0.5, MAX_HASH_SLOTS, PowerOfTwo),
            16_384
        );
        assert_eq!(visited_slots(entries, 0.5, MAX_HASH_SLOTS, Step), 9_856);
        assert_eq!(
            visited_slots(entries, 4.0, MAX_HASH_SLOTS, Step),
            MAX_HASH_SLOTS
        );
        assert_eq!(visited_slots(10, 1.0, MAX_HASH_SLOTS, PowerOfTwo), 64);
        assert_eq!(visited_slots(10, 1.0, MAX_HASH_SLOTS, Step), 64);
        assert_eq!(visited_slots(100, 1.0, MAX_HASH_SLOTS, Step), 128);
        assert_eq!(visited_slots(4_096, 1.0, MAX_HASH_SLOTS, PowerOfTwo), 4_096);
        for rounding in [PowerOfTwo, Step] {
            assert_eq!(
                visited_slots(u32::MAX, 64.0, MAX_HASH_SLOTS, rounding),
                MAX_HASH_SLOTS
            );
            assert_eq!(
                visited_slots(u32::MAX, 1.0, MAX_SPILL_HASH_SLOTS, rounding),
                MAX_SPILL_HASH_SLOTS
            );
            // At one slot per entry the set holds every entry read: no id
            // is ever dropped.
            for entries in [64, 1_000, 4_097, 30_000] {
                let slots = visited_slots(entries, 1.0, MAX_HASH_SLOTS, rounding);
                assert!(slots >= entries, "{entries}: {slots}");
                assert_eq!(slots % VISITED_SLOT_STEP, 0);
            }
        }
    }
}
