//! Structures shared bit for bit by the host launchers and the GPU kernels.
//!
//! Compiled for the host (re-exported as `octex_kernels::layout`) and for the
//! nvptx kernel crate alike, so it uses `core` only. Device addresses are
//! `u64`, so the layouts are identical on both sides.

/// Threads per block of the wave-search and top-k kernels.
pub const BLOCK_THREADS: u32 = 256;

/// Threads per block of `wave_search_narrow`, the build for small per-query
/// work (more queries resident per multiprocessor).
pub const NARROW_BLOCK_THREADS: u32 = 128;

/// Threads per block of `wave_search_latency`, the build for batches of at
/// most one query per multiprocessor: each query has a whole multiprocessor,
/// so it gets as many threads as a block can have.
pub const LATENCY_BLOCK_THREADS: u32 = 1024;

/// Items per block of the scan and radix-sort kernels (16 per thread).
pub const SORT_TILE: u32 = 16 * BLOCK_THREADS;

/// Parent members a short fragment's completion considers (the CPU builder's
/// `PARENT_CANDIDATES`).
pub const PARENT_CANDIDATES: u32 = 64;

/// "No stored fragment" in the builder's per-vector fragment ordinals.
pub const NO_FRAGMENT: u32 = u32::MAX;

/// One spacing's stored fragments, as the GPU builder's `complete_short`
/// reads them (device addresses; `perm == 0` for "no parent").
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RippleLevel {
    /// `u32` vector ids sorted by (key, centre distance, id), `n`.
    pub perm: u64,
    /// `u32` first sorted position of each stored fragment.
    pub frag_start: u64,
    /// `u32` members of each stored fragment.
    pub frag_size: u64,
    /// `u32` ripples, `list_len` per stored fragment.
    pub ripples: u64,
    /// `u32` stored fragment of each vector, or [`NO_FRAGMENT`].
    pub vec_ord: u64,
}

// SAFETY: repr(C), integers, floats and u64 device addresses only.
unsafe impl crate::DeviceLayout for RippleLevel {}

/// Empty slot of the shared-memory visited set (never a stored id: ids are
/// below `2^31`, and `u32::MAX` is the padding id).
pub const EMPTY_SLOT: u32 = u32::MAX;

/// Most slots of a query's shared-memory visited set.
pub const MAX_HASH_SLOTS: u32 = 32_768;

/// Most slots of a query's visited set in the global scratch (a spilled
/// batch): one per entry read up to this bound.
pub const MAX_SPILL_HASH_SLOTS: u32 = 1 << 20;

/// Marks an expanded entry in the low word of a candidate (ids are `< 2^31`).
pub const EXPANDED_BIT: u32 = 1 << 31;

/// Marks a candidate that has an exact distance (per-wave rerank; ids are then
/// `< 2^30`, [`MAX_WAVE_RERANK_VECTORS`]).
pub const EXACT_BIT: u32 = 1 << 30;

/// Most vectors an index searched with per-wave rerank may hold on the GPU.
pub const MAX_WAVE_RERANK_VECTORS: usize = 1 << 30;

/// Most `k` of the brute-force top-k kernel (per-thread lists live in registers
/// and local memory). 128, twice the default row length: rows in detour order
/// are chosen from twice `Lt` exact neighbours, and GPU builds of up to
/// `gpu_exact_rows_limit` vectors get them exactly (at 32, rows of 64 once fell
/// back to the two search passes).
pub const MAX_TOPK: u32 = 128;

/// Centroids one block of `nearest_centroids` stages in shared memory at a time.
pub const IVF_CENTROID_TILE: u32 = 128;
/// Widest projection the inverted-file kernels take (8 blocks of 8).
pub const IVF_MAX_DIM: u32 = 64;
/// Most lists `nearest_centroids` returns per row (probes per centre).
pub const IVF_MAX_PROBES: u32 = 32;

/// The per-part table of device pointers of one index: every kernel reaches
/// the index through it, so moving a part (another GPU, host memory) changes
/// no kernel, only this table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IndexView {
    /// `TableEntry` (`4 x u64`) per (copy, spacing), `copies x spacings`.
    pub tables: u64,
    /// `u64` keys of all key tables.
    pub table_keys: u64,
    /// `u32` fragment ordinals of all key tables.
    pub table_slots: u64,
    /// `u32` ripples, `list_len` per fragment.
    pub ripples: u64,
    /// `u32` neighbour rows, `row_len` per vector.
    pub rows: u64,
    /// `i8` sketch, `sketch_width` per vector.
    pub sketch: u64,
    /// `f32` per sketch coordinate.
    pub sketch_scales: u64,
    /// `f32` per vector: its sketch row's norm ([`crate::sketch::row_norm`]).
    pub sketch_norms: u64,
    /// Rerank vectors, `f16` (`vectors_f16 == 1`) or `f32`, `dim` per vector.
    pub vectors: u64,
    /// `f32` shifts, `copies x 8 * blocks`.
    pub shifts: u64,
    /// `f32` reciprocal spacings (`1 / spacing`, computed in `f32` as the CPU does).
    pub inv_spacings: u64,
    /// `u32` fallback entry points.
    pub seeds: u64,
    /// `f32` bias of the principal coordinates, `basis_dim` (subtracted from
    /// `BatchView::pcs`).
    pub basis_bias: u64,
    /// `f32` shifts of the search, `spacings x width`: at spacing `s`, `shift
    /// - b * inv_s` (`b`: the projections' bias, which `BatchView::z` still
    /// holds), so that `z * inv_s + search_shifts[s]` is the builder's
    /// `(z - b) * inv_s + shift` without a load of the bias.
    pub search_shifts: u64,
    /// Residual sketch ([`crate::sketch::centre_term`]): `f32` centres,
    /// `sketch_centre_count x sketch_width`; `f32` scale multiplier per
    /// centre; `u16` centre per vector. Unused when the count is 0.
    pub sketch_centres: u64,
    pub sketch_centre_scales: u64,
    pub sketch_centre_ids: u64,
    pub n: u32,
    /// Stored dimension (the rerank vectors').
    pub dim: u32,
    pub copies: u32,
    pub blocks: u32,
    pub spacings: u32,
    pub list_len: u32,
    pub row_len: u32,
    pub sketch_width: u32,
    /// `m`, the principal coordinates per query.
    pub basis_dim: u32,
    /// `copies * 8 * blocks`.
    pub width: u32,
    pub vectors_f16: u32,
    pub n_seeds: u32,
    /// Residual sketch centres `K` (0: a plain sketch).
    pub sketch_centre_count: u32,
    /// Squared distance beyond which a query's nearest first-round
    /// candidate sends it to the seeds ([`visits_seeds`]).
    pub far_seed_distance: f32,
}

// SAFETY: repr(C), integers, floats and u64 device addresses only.
unsafe impl crate::DeviceLayout for IndexView {}

/// One batch of queries for `wave_search`: device buffers and parameters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BatchView {
    /// `f32` projections into all copies, before their bias is subtracted
    /// (`IndexView::search_shifts` holds it): `width` per query, rows
    /// `z_stride` apart.
    pub z: u64,
    /// `f32` principal coordinates, before `IndexView::basis_bias` is
    /// subtracted: `basis_dim` per query, rows `pcs_stride` apart. When one
    /// product gives both (`CopyMap::fused_projection`), `pcs` and `z` point
    /// into the same rows.
    pub pcs: u64,
    /// `f32` queries in the stored space, `nq x dim`.
    pub queries: u64,
    /// `u32` result ids, `nq x k`.
    pub out_ids: u64,
    /// `f32` result squared L2 distances (stored space), `nq x k`.
    pub out_dists: u64,
    /// `u64` work counters, [`STAT_SLOTS`] of them, summed over the batch.
    pub stats: u64,
    /// Device address of `nq x scratch_per_query` bytes of global scratch
    /// (used when `scratch_per_query > 0`).
    pub scratch: u64,
    /// `u32` words of `query_fragments`' buffer ([`FragmentLookupLayout`]):
    /// per (query, copy) the fragment of the finest spacing stored, written
    /// before `wave_search` runs, which reads it; `0`: `wave_search` decodes
    /// and looks up every (copy, spacing) itself.
    pub frag_hits: u64,
    /// Queries in the batch (blocks beyond it return at once).
    pub nq: u32,
    pub k: u32,
    /// `r`, already clamped to the ripple length.
    pub read_depth: u32,
    /// `S`.
    pub start_points: u32,
    /// `W`.
    pub waves: u32,
    /// `R`.
    pub rerank: u32,
    /// `M = max(R, S*W, S, k)`: candidates kept.
    pub keep: u32,
    /// Slots of the visited set: any count (the host takes a power of two
    /// or a multiple of 32).
    pub hash_slots: u32,
    /// Entries of the candidate buffer: the kept candidates plus one round's
    /// new entries (the block sort takes any length).
    pub buf_len: u32,
    /// Entries of the rerank sort (`R`; with `wave_rerank`, `keep + R`, the
    /// exact list plus one pass's new entries).
    pub rerank_len: u32,
    /// 1: rerank in every wave (`SearchParams::wave_rerank` on the host);
    /// 0: once, after the last wave.
    pub wave_rerank: u32,
    /// Bytes of global scratch per query when the large per-query arrays
    /// (candidates, exact list, visited set, fresh ids) do not fit in shared
    /// memory; 0 keeps them in shared memory.
    pub scratch_per_query: u32,
    /// Profiling only: end each query after this phase ([`STOP_AFTER_INIT`]
    /// ...); `0` runs the whole search. Timing the variants gives the cost of
    /// each phase inside the one kernel.
    pub stop_after: u32,
    /// `f32` values from one query's row of `pcs` to the next's.
    pub pcs_stride: u32,
    /// `f32` values from one query's row of `z` to the next's.
    pub z_stride: u32,
}

// SAFETY: repr(C), integers, floats and u64 device addresses only.
unsafe impl crate::DeviceLayout for BatchView {}

/// The `u32` words of `query_fragments`' buffer (`BatchView::frag_hits`) for
/// `nq` queries of `copies` copies, as offsets: one pass per spacing, finest
/// first; each pass decodes only the (query, copy) items the passes before it
/// left without a stored fragment, listed by the pass before (two lists, used
/// in turn), and counts the items it leaves in `counts[spacing]` (zeroed
/// before the first pass).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentLookupLayout {
    /// Items left by each pass, [`MAX_LOOKUP_SPACINGS`] of them.
    pub counts: u32,
    /// Per (query, copy) item, `q * copies + c`: the fragment's ordinal, or
    /// [`NO_FRAGMENT`].
    pub hits: u32,
    /// The items a pass leaves to the next (pass `s` writes list `s % 2`).
    pub lists: [u32; 2],
    /// Words of the buffer.
    pub words: u32,
}

/// Queries of a tile of `query_fragments`' first pass: a block stages
/// their projections into a tile's copies in shared memory with coalesced
/// loads, then warp `w` decodes copy `w` of the tile for the tile's queries,
/// one per lane (the spacing's shifts are then the same for the whole warp).
/// Loaded directly, each lane's coordinates sat 128 bytes or more from its
/// neighbours' (32 cache lines per warp-wide load).
pub const LOOKUP_TILE_QUERIES: u32 = 32;

/// Columns of the principal coordinates in a fused projection product's
/// rows (`CopyMap::fused_projection`), `basis_dim` rounded up to a multiple
/// of 4: the projections after them then start 16-byte aligned in every
/// row, and `query_fragments` copies and reads them 16 bytes at a time
/// (GloVe-50's 50 principal coordinates become 52 columns; measured
/// +0.6% there, `crates/search/src/gpu/device_index.rs`).
pub const fn fused_pc_cols(basis_dim: u32) -> u32 {
    basis_dim.div_ceil(4) * 4
}

/// Words after each staged row of a first-pass tile
/// ([`FragmentLookupLayout::tile_row`]).
pub const TILE_ROW_PAD: u32 = 4;

/// Shared memory a block of the first pass may take (the default limit,
/// which needs no opt-in).
pub const LOOKUP_TILE_SMEM: u32 = 48 * 1024;

/// Most spacings `query_fragments` takes (an index with more finds its
/// fragments inside `wave_search`).
pub const MAX_LOOKUP_SPACINGS: u32 = 16;

impl FragmentLookupLayout {
    /// Whether `query_fragments` takes an index of `spacings` spacings and
    /// copies of `copy_dim` coordinates (else `wave_search` finds the
    /// fragments itself): the counts have room, and a tile fits
    /// [`LOOKUP_TILE_SMEM`].
    pub const fn takes(spacings: u32, copy_dim: u32) -> bool {
        spacings <= MAX_LOOKUP_SPACINGS && Self::tile_smem(copy_dim) <= LOOKUP_TILE_SMEM
    }

    /// Copies of a first-pass tile whose copies have `copy_dim` coordinates:
    /// one per warp of a `BLOCK_THREADS` block, fewer where the staged
    /// projections would pass [`LOOKUP_TILE_SMEM`].
    pub const fn tile_copies(copy_dim: u32) -> u32 {
        let fit = (LOOKUP_TILE_SMEM / 4 / LOOKUP_TILE_QUERIES - TILE_ROW_PAD) / copy_dim;
        let warps = BLOCK_THREADS / 32;
        if fit < 1 {
            1
        } else if fit > warps {
            warps
        } else {
            fit
        }
    }

    /// `f32` values from one query's staged row to the next's: the tile's
    /// coordinates and [`TILE_ROW_PAD`] more, so that rows stay 16-byte
    /// aligned (copied and read 16 bytes at a time) and the eight lanes of a
    /// 16-byte read's phase, reading rows apart, hit distinct banks (a row of
    /// an odd multiple of 4 words, modulo 32: copies' dimensions are
    /// multiples of 8).
    pub const fn tile_row(copy_dim: u32) -> u32 {
        Self::tile_copies(copy_dim) * copy_dim + TILE_ROW_PAD
    }

    /// Shared-memory bytes of a first-pass block.
    pub const fn tile_smem(copy_dim: u32) -> u32 {
        4 * LOOKUP_TILE_QUERIES * Self::tile_row(copy_dim)
    }

    /// Blocks of the first pass for `nq` queries of `copies` copies of
    /// `copy_dim` coordinates: query tiles times copy tiles.
    pub const fn tiles(nq: u32, copies: u32, copy_dim: u32) -> u32 {
        nq.div_ceil(LOOKUP_TILE_QUERIES) * copies.div_ceil(Self::tile_copies(copy_dim))
    }

    pub const fn new(nq: u32, copies: u32) -> Self {
        let items = nq * copies;
        let hits = MAX_LOOKUP_SPACINGS;
        Self {
            counts: 0,
            hits,
            lists: [hits + items, hits + 2 * items],
            words: hits + 3 * items,
        }
    }
}

/// `BatchView::stop_after` values: after loading the query and clearing the
/// visited set; after the first round's decode and key lookups; after the
/// first round; after the waves (before the rerank).
pub const STOP_AFTER_INIT: u32 = 1;
pub const STOP_AFTER_LOOKUP: u32 = 2;
pub const STOP_AFTER_FIRST_ROUND: u32 = 3;
pub const STOP_AFTER_WAVES: u32 = 4;

/// Work counters written by `wave_search` (indices into `BatchView::stats`).
pub const STAT_FIRST_ROUND_ENTRIES: usize = 0;
pub const STAT_COPIES_WITHOUT_FRAGMENT: usize = 1;
pub const STAT_SKETCH_DISTANCES: usize = 2;
pub const STAT_EXACT_DISTANCES: usize = 3;
pub const STAT_SEEDED_QUERIES: usize = 4;
pub const STAT_ROW_ENTRIES: usize = 5;
pub const STAT_SLOTS: usize = 8;

/// Byte offsets of the parts of `wave_search`'s per-query memory. The large
/// arrays (`buf`, `exact`, `hash`, `fresh`) are offsets into shared memory, or,
/// when the batch spills (`BatchView::scratch_per_query > 0`), into the
/// query's slice of the global scratch; the rest is always shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchSmem {
    /// `u32` counters ([`SearchSmem::COUNTERS`]).
    pub counters: u32,
    /// `u64` candidates, `buf_len`.
    pub buf: u32,
    /// `u64` rerank entries, `rerank_len`.
    pub exact: u32,
    /// `u32` visited set, `hash_slots`.
    pub hash: u32,
    /// `u32` ids first seen in the current round, [`SearchSmem::fresh_len`].
    pub fresh: u32,
    /// `i16` sketch query codes ([`crate::sketch`]), `sketch_width`.
    pub qs: u32,
    /// `f32` stored-space query, `dim`.
    pub query: u32,
    /// `u32` ripple start per copy, `copies`.
    pub hits: u32,
    /// `u32` fragment found per (copy, spacing), `copies x spacings`.
    pub hits_by_spacing: u32,
    /// `u32` start points of a wave, `start_points`.
    pub starts: u32,
    /// `(f32, f32)` per residual sketch centre: its term and step for this
    /// query ([`crate::sketch::centre_estimate`]), `sketch_centre_count`.
    pub centres: u32,
    /// Shared-memory bytes.
    pub total: u32,
    /// Bytes of the large arrays (in shared memory, or per query in the
    /// global scratch when spilled).
    pub large: u32,
    /// The large arrays live in the global scratch.
    pub spilled: bool,
}

const fn align_up(x: u32, a: u32) -> u32 {
    x.div_ceil(a) * a
}

impl SearchSmem {
    pub const COUNTERS: u32 = CTR_WARP_SUMS as u32 + LATENCY_BLOCK_THREADS / 32;

    pub const fn new(index: &IndexView, batch: &BatchView) -> Self {
        let spilled = batch.scratch_per_query > 0;
        let counters = 0;
        let after_counters = align_up(counters + 4 * Self::COUNTERS, 16);
        // The large arrays, from `start` (the scratch slice's 0 when spilled).
        let start = if spilled { 0 } else { after_counters };
        let buf = start;
        let exact = buf + 8 * batch.buf_len;
        let hash = exact + 8 * batch.rerank_len;
        let fresh = align_up(hash + 4 * batch.hash_slots, 16);
        let large_end = align_up(fresh + 4 * Self::fresh_len(index, batch), 16);
        let large = large_end - start;
        let qs = if spilled { after_counters } else { large_end };
        let query = align_up(qs + 2 * index.sketch_width, 16);
        let hits = align_up(query + 4 * index.dim, 16);
        let hits_by_spacing = hits + 4 * index.copies;
        let starts = hits_by_spacing + 4 * index.copies * index.spacings;
        let centres = align_up(starts + 4 * batch.start_points, 16);
        let total = align_up(centres + 8 * index.sketch_centre_count, 16);
        Self {
            counters,
            buf,
            exact,
            hash,
            fresh,
            qs,
            query,
            hits,
            hits_by_spacing,
            starts,
            centres,
            total,
            large,
            spilled,
        }
    }

    /// Most ids one round can see for the first time: the first round's
    /// ripple heads, the seeds (a round of their own, after the fresh list is
    /// emptied), or one wave's rows.
    pub const fn fresh_len(index: &IndexView, batch: &BatchView) -> u32 {
        let ripples = index.copies * batch.read_depth;
        let wave = batch.start_points * index.row_len;
        max_u32(max_u32(ripples, index.n_seeds), wave)
    }

    /// Most distinct ids the first round leaves in the visited set and the
    /// candidate buffer, for a read depth `read_depth` and `start_points`
    /// start points: its `copies x read_depth` ripple heads, or, where the
    /// query visits the seeds ([`visits_seeds`]; it keeps at most
    /// `start_points - 1` of its first-round ids then), those and the
    /// `n_seeds` seeds. It
    /// sizes the candidate buffer; the visited set keeps a slot per entry
    /// read (`crates/search/src/gpu/launch_plan.rs` says why).
    pub const fn first_round_ids(index: &IndexView, read_depth: u32, start_points: u32) -> u32 {
        let ripples = index.copies * read_depth;
        let seeded = min_u32(ripples, start_points.saturating_sub(1)) + index.n_seeds;
        max_u32(ripples, seeded)
    }
}

const fn max_u32(a: u32, b: u32) -> u32 {
    if a > b {
        a
    } else {
        b
    }
}

const fn min_u32(a: u32, b: u32) -> u32 {
    if a < b {
        a
    } else {
        b
    }
}

/// How much farther than the data's typical nearest-neighbour distance
/// (squared) a query's nearest first-round candidate may lie before the query
/// counts as outside the data ([`visits_seeds`]).
pub const FAR_FACTOR: f32 = 8.0;

/// Whether a query visits the fallback seeds after its first round: it found
/// fewer distinct ids than `start_points`, or its nearest first-round
/// candidate (least sketch distance, then id) lies at an exact squared
/// distance `nearest` beyond `far` ([`FAR_FACTOR`] x the data's typical
/// nearest-neighbour distance). Such a query keeps only its `start_points - 1`
/// nearest first-round candidates.
/// Why: a query outside the data meets stray fragments whose ripples hold
/// vectors of whatever region lies nearest those fragments, often not the
/// query's nearest; its waves then never leave that region.
#[inline(always)]
pub fn visits_seeds(found: u32, start_points: u32, nearest: f32, far: f32) -> bool {
    found < start_points || nearest > far
}

/// Counter slots in `wave_search`'s shared memory.
pub const CTR_COUNT: usize = 0;
/// Append position of the exact list (per-wave rerank).
pub const CTR_EXACT_LIST: usize = 1;
pub const CTR_FIRST_ROUND: usize = 2;
pub const CTR_SKETCH: usize = 3;
pub const CTR_NO_FRAGMENT: usize = 4;
pub const CTR_ROW_ENTRIES: usize = 5;
pub const CTR_FRESH: usize = 6;
/// Exact distances computed (work counter).
pub const CTR_EXACT: usize = 7;
/// The largest `|q_j sigma_j|` of the query (`f32` bits; [`crate::sketch`]).
pub const CTR_QUERY_AMAX: usize = 8;
/// The exact distance of the nearest first-round candidate (`f32` bits).
pub const CTR_NEAREST: usize = 9;
/// One slot per warp of the largest block (`LATENCY_BLOCK_THREADS / 32`),
/// for block scans; the last counter slots.
pub const CTR_WARP_SUMS: usize = 10;

/// Order-preserving map of an `f32` to a `u32` (negative values too): sorting
/// the `u32`s sorts the floats.
#[inline(always)]
pub const fn f32_order_key(v: f32) -> u32 {
    let b = v.to_bits();
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// Inverse of [`f32_order_key`].
#[inline(always)]
pub const fn f32_from_order_key(k: u32) -> f32 {
    if k & 0x8000_0000 != 0 {
        f32::from_bits(k & 0x7FFF_FFFF)
    } else {
        f32::from_bits(!k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_round_bound_counts_the_seeds_only_where_they_are_visited() {
        let index = IndexView {
            copies: 32,
            n_seeds: 256,
            row_len: 64,
            ..IndexView::default()
        };
        // r4 S12: the ripple heads (128) or fewer than 12 of them and the
        // seeds (11 + 256).
        assert_eq!(SearchSmem::first_round_ids(&index, 4, 12), 267);
        // r16: the 512 ripple heads bound it.
        assert_eq!(SearchSmem::first_round_ids(&index, 16, 12), 512);
        // More start points than ripple heads: every first round is seeded.
        assert_eq!(SearchSmem::first_round_ids(&index, 1, 64), 32 + 256);
        // The fresh list holds one round: the ripple heads, the seeds, or a
        // wave's rows.
        let batch = |read_depth, start_points| BatchView {
            read_depth,
            start_points,
            ..BatchView::default()
        };
        assert_eq!(SearchSmem::fresh_len(&index, &batch(4, 12)), 768);
        assert_eq!(SearchSmem::fresh_len(&index, &batch(4, 2)), 256);
        assert_eq!(SearchSmem::fresh_len(&index, &batch(16, 4)), 512);
    }

    #[test]
    fn fused_projections_start_16_byte_aligned() {
        for m in [1, 3, 4, 8, 50, 63, 64, 384] {
            let cols = fused_pc_cols(m);
            assert!(cols >= m && cols < m + 4, "{m}: {cols}");
            assert_eq!(cols % 4, 0, "{m}");
        }
        assert_eq!(fused_pc_cols(50), 52);
        assert_eq!(fused_pc_cols(64), 64);
    }

    #[test]
    fn fragment_lookup_tiles_fit_and_cover_every_item() {
        // Copies of 4 E8 blocks (32 coordinates): a copy per warp.
        assert_eq!(FragmentLookupLayout::tile_copies(32), BLOCK_THREADS / 32);
        for copy_dim in [8, 16, 24, 32, 40, 64, 128, 256, 512, 1024] {
            let copies = FragmentLookupLayout::tile_copies(copy_dim);
            assert!((1..=BLOCK_THREADS / 32).contains(&copies), "{copy_dim}");
            assert!(FragmentLookupLayout::tile_smem(copy_dim) <= LOOKUP_TILE_SMEM || copies == 1);
            // The staged row holds the tile's coordinates and the pad: 16-byte
            // aligned, an odd multiple of 4 words modulo 32 (distinct banks
            // for the 8 lanes of a 16-byte read's phase).
            let row = FragmentLookupLayout::tile_row(copy_dim);
            assert_eq!(row, copies * copy_dim + TILE_ROW_PAD);
            if copy_dim % 8 == 0 {
                assert_eq!(row % 4, 0, "{copy_dim}");
                assert_eq!((row / 4) % 2, 1, "{copy_dim}");
            }
            for (nq, c) in [(1, 1), (10_000, 32), (33, 9), (100, 128)] {
                let tiles = FragmentLookupLayout::tiles(nq, c, copy_dim);
                assert!(tiles * LOOKUP_TILE_QUERIES * copies >= nq * c);
            }
        }
        assert!(FragmentLookupLayout::takes(2, 32));
        assert!(!FragmentLookupLayout::takes(MAX_LOOKUP_SPACINGS + 1, 32));
        assert!(!FragmentLookupLayout::takes(2, 1024));
        let lay = FragmentLookupLayout::new(10_000, 128);
        assert_eq!(lay.hits, MAX_LOOKUP_SPACINGS);
        assert_eq!(lay.lists, [lay.hits + 1_280_000, lay.hits + 2_560_000]);
        assert_eq!(lay.words, lay.hits + 3 * 1_280_000);
    }
}
