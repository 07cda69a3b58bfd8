//! Every launch decision of a batch on the GPU, in one place: which
//! projection products run, where the fragments are looked up, the sizes
//! of the per-query arrays and whether they spill to global memory, and
//! which build of `wave_search` runs. [`GpuLaunchPlan::new`] is a pure
//! function of the search plan, the batch size, the index's shape, the
//! device's limits and the measurement overrides ([`GpuTuning`]); `batch.rs`
//! binds a plan to buffers and the kernels crate launches what it says.

use octex_kernels::layout::{
    fused_pc_cols, BatchView, FragmentLookupLayout, IndexView, SearchSmem, MAX_HASH_SLOTS,
    MAX_LOOKUP_SPACINGS, MAX_SPILL_HASH_SLOTS,
};
use octex_kernels::{DeviceLimits, SearchKernel};

use crate::{FragmentLookupChoice, GpuTuning, ProjectionChoice, SearchKernelChoice, SearchPlan};

/// The launches of one batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct GpuLaunchPlan {
    /// The batch view's sizes; its device addresses are zero until
    /// `batch::bind` fills them.
    pub sizes: BatchView,
    /// The build of `wave_search`.
    pub kernel: SearchKernel,
    pub lookup: FragmentLookup,
    pub products: Products,
    /// Dynamic shared memory of one query's block.
    pub smem: usize,
}

/// Where a batch's fragments (the decoding of every copy and spacing of a
/// query and its key-table lookup) are found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FragmentLookup {
    /// In `query_fragments`, one pass per spacing before `wave_search`, at
    /// full occupancy: faster for batches that fill the device.
    OwnKernel,
    /// Inside `wave_search`, by each query's block, before its first round.
    InSearch,
}

/// The projection products of a batch ([`super::batch::project`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Products {
    /// `[P | 0 | P_c R]`: principal coordinates and projections from one
    /// product, the projections `z_offset` values into each row.
    Fused { z_offset: u32 },
    /// `P`, then `R` on the first `m_c` principal coordinates.
    Two,
}

/// The projection matrices an index is uploaded with, and which batches
/// take which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ProjectionShape {
    /// The largest batch that takes the fused product; 0 when it is not
    /// uploaded.
    pub fused_max_batch: usize,
    /// `P` and `R` are uploaded (for batches past `fused_max_batch`).
    pub two: bool,
    /// Columns of the principal coordinates in the fused product's rows:
    /// `basis_dim` padded so the projections after them start 16-byte
    /// aligned ([`fused_pc_cols`]).
    pub pc_cols: u32,
}

/// Multiply-adds the fused product may add to a batch's projection over the
/// two products: about what one more launch costs (a few microseconds).
const FUSED_EXTRA_MULTIPLY_ADDS: usize = 1 << 26;

impl ProjectionShape {
    /// The products for an index of `dim` stored coordinates, `basis_dim`
    /// principal coordinates, copies drawn from the first `rotation_dim` and
    /// `width` projections: the fused product for every batch when `dim <=
    /// m_c` (it also multiplies the fewest numbers), else for batches where it
    /// multiplies at most [`FUSED_EXTRA_MULTIPLY_ADDS`] more than the two
    /// (`width (dim - m_c)` more per query); `tuning` may put every batch on
    /// one of them.
    pub fn new(
        dim: usize,
        basis_dim: usize,
        rotation_dim: usize,
        width: usize,
        tuning: &GpuTuning,
    ) -> Self {
        let fused_max_batch = match tuning.projection {
            Some(ProjectionChoice::Two) if dim > rotation_dim => 0,
            Some(ProjectionChoice::Fused) => usize::MAX,
            _ if dim <= rotation_dim => usize::MAX,
            _ => FUSED_EXTRA_MULTIPLY_ADDS / (width.max(1) * (dim - rotation_dim)),
        };
        let pc_cols = if tuning.unpadded_principal_columns {
            basis_dim as u32
        } else {
            fused_pc_cols(basis_dim as u32)
        };
        Self {
            fused_max_batch,
            two: fused_max_batch < usize::MAX,
            pc_cols,
        }
    }

    /// The products of a batch of `nq`.
    pub fn products(&self, nq: usize) -> Products {
        if nq <= self.fused_max_batch {
            Products::Fused {
                z_offset: self.pc_cols,
            }
        } else {
            Products::Two
        }
    }

    /// `f32` values per query of the principal-coordinate rows of a batch
    /// taking `products` (with the projections after them when fused).
    pub fn pcs_stride(&self, index: &IndexView, products: Products) -> u32 {
        match products {
            Products::Fused { .. } => self.pc_cols + index.width,
            Products::Two => index.basis_dim,
        }
    }
}

/// A batch of at most one query per multiprocessor runs one block on each,
/// whatever its shared memory: its blocks may take more of it, and its
/// lookup and search are best done by the block itself with all its threads.
fn one_query_per_multiprocessor(nq: usize, device: &DeviceLimits) -> bool {
    nq <= device.multiprocessors as usize
}

/// Visited-set slots per entry a query may read in batches of at most one
/// query per multiprocessor, whose shared memory has room: their linear
/// probes stay short (a power-of-two set of one slot per entry may be
/// three-quarters full; docs/RESULTS.md, "Decisions").
const SPARE_SMEM_SLOTS_PER_ENTRY: f32 = 4.0;

/// Fewest ids in a query's largest round for which a launch of one block a
/// multiprocessor takes the 1,024-thread latency build: below it more warps
/// wait at every barrier than the round has work for.
const LATENCY_MIN_ROUND_IDS: u32 = 2048;

/// The visited set's size is a multiple of this many slots.
const VISITED_SLOT_STEP: u32 = 32;

impl GpuLaunchPlan {
    /// The launches of a batch of `nq` queries searched with `plan` over
    /// an index of `index`'s shape uploaded with `projection`, on a device
    /// of `device`'s limits.
    pub fn new(
        index: &IndexView,
        plan: &SearchPlan,
        nq: usize,
        device: &DeviceLimits,
        projection: &ProjectionShape,
        tuning: &GpuTuning,
    ) -> Self {
        let products = projection.products(nq);
        let lookup = FragmentLookup::for_batch(nq, index, device, tuning.fragment_lookup);
        let sizes = sizes(index, plan, nq, device, projection, products, tuning);
        let smem = SearchSmem::new(index, &sizes).total as usize;
        let kernel = search_kernel(index, &sizes, smem, device, tuning);
        Self {
            sizes,
            kernel,
            lookup,
            products,
            smem,
        }
    }
}

impl FragmentLookup {
    /// The lookup of a batch of `nq` queries: its own kernel, except for
    /// batches of at most one query per multiprocessor (there the kernel's
    /// extra launches cost more than they save) and for indexes whose
    /// spacings or copies pass its limits ([`FragmentLookupLayout::takes`]).
    /// `forced` sets it for every batch the kernel can take.
    fn for_batch(
        nq: usize,
        index: &IndexView,
        device: &DeviceLimits,
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
            None if one_query_per_multiprocessor(nq, device) => FragmentLookup::InSearch,
            None => FragmentLookup::OwnKernel,
        }
    }
}

/// Words of `query_fragments`' buffer for `nq` queries of `copies` copies,
/// if its offsets fit the kernel's 32-bit arithmetic.
pub(super) fn lookup_words(nq: usize, copies: u32) -> Option<usize> {
    let items = u32::try_from(nq).ok()?.checked_mul(copies)?;
    items.checked_mul(3)?.checked_add(MAX_LOOKUP_SPACINGS)?;
    Some(FragmentLookupLayout::new(nq as u32, copies).words as usize)
}

/// The batch view's sizes. The large per-query arrays (candidates, exact
/// list, visited set, fresh ids) stay in shared memory while the block fits
/// the device's; past that they spill to a global scratch, where the visited
/// set may also grow with the entries read. Nothing is refused for its size.
fn sizes(
    index: &IndexView,
    plan: &SearchPlan,
    nq: usize,
    device: &DeviceLimits,
    projection: &ProjectionShape,
    products: Products,
    tuning: &GpuTuning,
) -> BatchView {
    let (p, k) = (&plan.params, plan.k);
    let r = plan.read_depth as u32;
    let (start_points, waves, row_len) = (p.start_points as u32, p.waves as u32, index.row_len);
    let keep = plan.keep as u32;
    // The block sort takes any length: no rounding to a power of two.
    let first = SearchSmem::first_round_ids(index, r, start_points);
    let buf_len = first.max(keep + start_points * row_len);
    // The visited set: a slot per entry the query may read, the seeds
    // counted beside the ripple heads. It holds distinct ids only, fewer
    // than the entries, so one slot per entry bounds its load at 1 at half
    // the shared memory of a load-0.5 table; a full set drops ids.
    let entries = index.copies * r + index.n_seeds + waves * start_points * row_len;
    let slots =
        |per_entry: f32| visited_slots(entries, per_entry, MAX_HASH_SLOTS, Rounding::PowerOfTwo);
    let per_entry =
        tuning
            .visited_slots_per_entry
            .unwrap_or(if one_query_per_multiprocessor(nq, device) {
                SPARE_SMEM_SLOTS_PER_ENTRY
            } else {
                1.0
            });
    let pcs_stride = projection.pcs_stride(index, products);
    let mut view = BatchView {
        pcs_stride,
        z_stride: match products {
            Products::Two => index.width,
            Products::Fused { .. } => pcs_stride,
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
        ..BatchView::default()
    };
    let smem = |v: &BatchView| SearchSmem::new(index, v).total as usize;
    let mut one_slot_per_entry = per_entry == 1.0;
    if per_entry > 1.0 && smem(&view) > device.max_block_smem {
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
            wide_blocks(smem(&view), device),
            wide_blocks(smem(&tight), device),
        ) {
            if before <= 1 && after > before {
                view = tight;
            }
        }
    }
    if smem(&view) > device.max_block_smem {
        view.hash_slots = visited_slots(entries, 1.0, MAX_SPILL_HASH_SLOTS, Rounding::Step);
        view.scratch_per_query = 1;
        view.scratch_per_query = SearchSmem::new(index, &view).large;
    }
    view
}

/// Blocks of the wide build a multiprocessor holds at `smem` bytes of
/// shared memory a block (0 past a block's: the batch spills); `None` where
/// the dense or narrow build takes the launch.
fn wide_blocks(smem: usize, device: &DeviceLimits) -> Option<u32> {
    if smem <= device.smem_for_blocks(SearchKernel::Dense.blocks_per_sm()) {
        return None;
    }
    Some(
        device
            .blocks_per_sm(smem)
            .min(SearchKernel::Wide.blocks_per_sm()),
    )
}

/// The build of `wave_search` for a batch of `sizes` needing `smem` bytes a
/// block. Spilled batches take the spilled build. Of the shared-memory
/// builds, the one with the most blocks per multiprocessor the shared
/// memory allows; the narrow one only for batches that fill the device with
/// it, the latency one for launches of one block a multiprocessor (batches
/// of at most one query per multiprocessor, or shared memory that lets only
/// one block fit) whose rounds have work for its threads. `tuning` may force
/// a build; the dense and narrow builds hash power-of-two sets only, so a
/// forced one meeting another set runs the wide build.
fn search_kernel(
    index: &IndexView,
    sizes: &BatchView,
    smem: usize,
    device: &DeviceLimits,
    tuning: &GpuTuning,
) -> SearchKernel {
    if sizes.scratch_per_query > 0 {
        return SearchKernel::Spilled;
    }
    let nq = sizes.nq as usize;
    let fits = |k: SearchKernel| smem <= device.smem_for_blocks(k.blocks_per_sm());
    let one_block = one_query_per_multiprocessor(nq, device)
        || (!tuning.latency_build_small_batches_only && wide_blocks(smem, device) == Some(1));
    let narrow_fills_device =
        nq >= (device.multiprocessors * SearchKernel::Narrow.blocks_per_sm()) as usize;
    let fitting = if one_block && SearchSmem::fresh_len(index, sizes) >= LATENCY_MIN_ROUND_IDS {
        SearchKernel::Latency
    } else if fits(SearchKernel::Narrow) && narrow_fills_device {
        SearchKernel::Narrow
    } else if fits(SearchKernel::Dense) {
        SearchKernel::Dense
    } else {
        SearchKernel::Wide
    };
    let forced = tuning.search_kernel.map(|k| match k {
        SearchKernelChoice::Wide => SearchKernel::Wide,
        SearchKernelChoice::Dense => SearchKernel::Dense,
        SearchKernelChoice::Narrow => SearchKernel::Narrow,
        SearchKernelChoice::Latency => SearchKernel::Latency,
    });
    match forced.unwrap_or(fitting) {
        SearchKernel::Dense | SearchKernel::Narrow if !sizes.hash_slots.is_power_of_two() => {
            SearchKernel::Wide
        }
        k => k,
    }
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
    /// global scratch of a spilled batch.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_batches_of_wide_vectors_take_the_fused_product() {
        let most = |dim, mc, width| {
            ProjectionShape::new(dim, dim, mc, width, &GpuTuning::default()).fused_max_batch
        };
        // Narrow vectors: one product at every batch size.
        assert_eq!(most(50, 64, 1024), usize::MAX);
        assert_eq!(most(64, 64, 1024), usize::MAX);
        // 128-d, C = 32 (width 1,024), m_c = 64: 64 Ki more per query.
        assert_eq!(most(128, 64, 1024), 1024);
        // 784-d at C = 128 (width 4,096): batch 10,000 keeps two products.
        let wide = most(784, 64, 4096);
        assert!((1..10_000).contains(&wide), "{wide}");
        // The bound is what the rule says, and one more query is past it.
        let extra = |nq: usize| nq * 4096 * (784 - 64);
        assert!(extra(wide) <= FUSED_EXTRA_MULTIPLY_ADDS);
        assert!(extra(wide + 1) > FUSED_EXTRA_MULTIPLY_ADDS);
        let shape = ProjectionShape::new(784, 784, 64, 4096, &GpuTuning::default());
        assert!(matches!(shape.products(wide), Products::Fused { .. }));
        assert_eq!(shape.products(wide + 1), Products::Two);
    }

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
