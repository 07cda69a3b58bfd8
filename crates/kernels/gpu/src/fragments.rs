//! The first step of a query's search: its fragment in every (copy,
//! spacing), as a key (the E8 decoding of the copy's projection, hashed as
//! the builder hashes it) looked up in that key table.
//!
//! Safety contract of the `unsafe fn`s here: see [`crate::prims`].

use core::intrinsics::gpu::gpu_launch_sized_workgroup_mem;

use crate::e8::decode_e8;
use crate::key::{EMPTY_KEY, KeyHasher};
use crate::layout::*;
use crate::prims::*;

/// Key and centre distance of one copy's projection at one spacing: the same
/// arithmetic as `CopyMap::decode` + `fragment_key` (`y = z * inv + shift`).
#[inline(always)]
pub(crate) unsafe fn fragment_key_of(
    z: *const f32,
    shift: *const f32,
    inv: f32,
    blocks: u32,
) -> (u64, f32) {
    let mut h = KeyHasher::for_key(8 * blocks as usize);
    let mut total = 0.0f32;
    for b in 0..blocks as usize {
        let o = 8 * b;
        // SAFETY: z and shift hold 8 * blocks values.
        let y: [f32; 8] =
            core::array::from_fn(|i| unsafe { *z.add(o + i) * inv + *shift.add(o + i) });
        let (p, d) = decode_e8(&y);
        for i in 0..4 {
            h.push_pair(p[2 * i], p[2 * i + 1]);
        }
        total += d;
    }
    (h.finish_key(), total)
}

/// Key of one copy's projection at one spacing, as [`fragment_key_of`] with
/// the same arithmetic, for `query_fragments`: block `b`'s eight coordinates
/// come from `coords(b)` (read 16 bytes at a time by the caller), and the
/// spacing's shifts are read 16 bytes at a time here. The key only (the
/// lookup needs no centre distance).
///
/// # Safety
/// `shift` holds `8 * blocks` values from a 16-byte aligned address in
/// read-only global memory.
#[inline(always)]
unsafe fn lookup_key(
    coords: impl Fn(u32) -> [f32; 8],
    shift: *const f32,
    inv: f32,
    blocks: u32,
) -> u64 {
    let mut h = KeyHasher::for_key(8 * blocks as usize);
    for b in 0..blocks {
        let x = coords(b);
        // SAFETY: the caller's contract; block b's shifts start at a
        // multiple of 8 values.
        let s = unsafe { load8_nc(shift.add(8 * b as usize)) };
        let y: [f32; 8] = core::array::from_fn(|i| x[i] * inv + s[i]);
        let (p, _) = decode_e8(&y);
        for i in 0..4 {
            h.push_pair(p[2 * i], p[2 * i + 1]);
        }
    }
    h.finish_key()
}

/// Eight `f32`s from a 16-byte aligned address in read-only global memory.
///
/// # Safety
/// `p` holds 8 values there.
#[inline(always)]
unsafe fn load8_nc(p: *const f32) -> [f32; 8] {
    // SAFETY: the caller's contract.
    let (a, b) = unsafe { (load16_nc(p as *const u8), load16_nc(p.add(4) as *const u8)) };
    [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]].map(f32::from_bits)
}

/// Eight `f32`s from a 16-byte aligned address in this block's shared memory.
///
/// # Safety
/// `p` holds 8 values there.
#[inline(always)]
unsafe fn load8_shared(p: *const f32) -> [f32; 8] {
    // SAFETY: the caller's contract.
    let (a, b) = unsafe {
        (
            load16_shared(p as *const u32),
            load16_shared(p.add(4) as *const u32),
        )
    };
    [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]].map(f32::from_bits)
}

/// Fragment ordinal of `key` in the key table of (copy, spacing), if stored.
#[inline(always)]
unsafe fn lookup(ix: &IndexView, table: u32, key: u64) -> Option<u64> {
    // SAFETY: the host validated the tables (bounds of every slot range).
    unsafe {
        let e = (ix.tables as *const u64).add(4 * table as usize);
        let (offset, cap, ripple_base) = (*e, *e.add(1), *e.add(2));
        if cap == 0 {
            return None;
        }
        let keys = (ix.table_keys as *const u64).add(offset as usize);
        let slots = (ix.table_slots as *const u32).add(offset as usize);
        let mask = cap - 1;
        let mut s = key & mask;
        let mut probes = 0;
        while probes < cap {
            let k = *keys.add(s as usize);
            if k == key {
                return Some(ripple_base + *slots.add(s as usize) as u64);
            }
            if k == EMPTY_KEY {
                return None;
            }
            s = (s + 1) & mask;
            probes += 1;
        }
        None
    }
}

/// Most E8 blocks per copy whose decoding is spread over the lanes of a group
/// (one block per lane); copies of more blocks are decoded by one thread.
const SPREAD_BLOCKS: u32 = 8;

/// `hits[i]` for every (copy, spacing) `i = c * spacings + s` of query `qi`:
/// the ordinal of the stored fragment its key finds, or `u32::MAX`. Called by
/// every thread of the block (`TH` of them); no barrier inside.
///
/// When one pass of the block covers every (copy, spacing) with a group of
/// lanes each (`copies x spacings x lanes <= TH`, `lanes` the blocks per copy
/// rounded up to a power of two), each takes such a group, one E8 block per
/// lane (the decoding is most of a key's serial work); the points are
/// shuffled to every lane of the group in block order and hashed there, and
/// the group's first lane looks the key up. In the 128-thread narrow build,
/// where full groups would take two passes but groups of half the lanes fit
/// one (C = 32 with two spacings: 64 pairs of four blocks), each lane decodes
/// two blocks ([`find_fragments_half_groups`]). Otherwise, and for copies of
/// more than [`SPREAD_BLOCKS`] blocks, one thread per (copy, spacing):
/// spreading would take several passes, each with the shuffles and the
/// hashing on every lane, where one pass of the serial decoding keeps the
/// block busy.
/// Spreading pays where it takes one pass (decode-and-lookup a third
/// shorter on synth-1m at C = 32) and loses where it would take several
/// (`docs/RESULTS.md`, "Decisions").
///
/// # Safety
/// The views are the kernel's; `hits` holds `copies x spacings` values.
#[inline(always)]
pub(crate) unsafe fn find_fragments<const TH: u32>(
    ix: &IndexView,
    bt: &BatchView,
    qi: u32,
    hits: *mut u32,
) {
    let t = tid();
    let cd = 8 * ix.blocks;
    let nsp = ix.spacings;
    let items = ix.copies * nsp;
    // SAFETY: z holds width values per query (rows z_stride apart), the
    // search shifts nsp x width values, the spacings nsp values; i < items =
    // the length of hits. The half groups get the same views and a group
    // size for which items x lanes <= TH, as their contract asks.
    unsafe {
        let lanes = ix.blocks.next_power_of_two();
        // A constant condition first: the other builds compile without it.
        if TH <= HALF_GROUP_MAX_THREADS
            && (2..=SPREAD_BLOCKS).contains(&lanes)
            && items * lanes > TH
            && items * (lanes / 2) <= TH
        {
            find_fragments_half_groups::<TH>(ix, bt, qi, hits, lanes / 2);
            return;
        }
        if ix.blocks > SPREAD_BLOCKS || items * lanes > TH {
            let mut i = t;
            while i < items {
                let (c, sp) = (i / nsp, i % nsp);
                let z = (bt.z as *const f32).add((qi * bt.z_stride + c * cd) as usize);
                let shift = (ix.search_shifts as *const f32).add((sp * ix.width + c * cd) as usize);
                let inv = *(ix.inv_spacings as *const f32).add(sp as usize);
                let (key, _) = fragment_key_of(z, shift, inv, ix.blocks);
                *hits.add(i as usize) = lookup(ix, i, key).map_or(u32::MAX, |f| f as u32);
                i += TH;
            }
            return;
        }
        // Groups of `lanes` (a power of two dividing 32) never straddle a warp.
        let (b, leader) = (t % lanes, (t & 31) & !(lanes - 1));
        // Block-uniform bounds: every lane reaches the shuffles.
        let mut first = 0;
        while first < items * lanes {
            let i = (first + t) / lanes;
            let mut p = [0i32; 8];
            if i < items && b < ix.blocks {
                let (c, sp) = (i / nsp, i % nsp);
                let o = (c * cd + 8 * b) as usize;
                let z = (bt.z as *const f32).add(qi as usize * bt.z_stride as usize + o);
                let shift = (ix.search_shifts as *const f32).add((sp * ix.width) as usize + o);
                let inv = *(ix.inv_spacings as *const f32).add(sp as usize);
                let y: [f32; 8] = core::array::from_fn(|k| *z.add(k) * inv + *shift.add(k));
                p = decode_e8(&y).0;
            }
            let mut h = KeyHasher::for_key(cd as usize);
            for block in 0..SPREAD_BLOCKS {
                if block < ix.blocks {
                    let src = leader + block;
                    let mut q = [0i32; 8];
                    for k in 0..8 {
                        q[k] = shfl_idx_u32(p[k] as u32, src) as i32;
                    }
                    for k in 0..4 {
                        h.push_pair(q[2 * k], q[2 * k + 1]);
                    }
                }
            }
            if b == 0 && i < items {
                *hits.add(i as usize) =
                    lookup(ix, i, h.finish_key()).map_or(u32::MAX, |f| f as u32);
            }
            first += TH;
        }
    }
}

/// Blocks of at most this many threads decode in half groups
/// ([`find_fragments_half_groups`]) where full groups need two passes.
/// Only the narrow build gains from half groups; the 256-thread builds lost
/// to them at W >= 3.
const HALF_GROUP_MAX_THREADS: u32 = 128;

/// [`find_fragments`] in groups of `lanes` lanes per (copy, spacing), half
/// the blocks per copy rounded up to a power of two: lane `b` decodes block
/// `b`, then block `b + lanes` where the copy has it, each hashed (in block
/// order) before the next is decoded, so that one array of points is live
/// at a time. `copies x spacings x lanes <= TH`; called by every thread.
///
/// # Safety
/// As [`find_fragments`].
#[inline(always)]
unsafe fn find_fragments_half_groups<const TH: u32>(
    ix: &IndexView,
    bt: &BatchView,
    qi: u32,
    hits: *mut u32,
    lanes: u32,
) {
    let t = tid();
    let cd = 8 * ix.blocks;
    let nsp = ix.spacings;
    let items = ix.copies * nsp;
    // Groups of `lanes` (a power of two dividing 32) never straddle a warp.
    let (b, leader) = (t % lanes, (t & 31) & !(lanes - 1));
    // SAFETY: as in find_fragments: z holds width values per query, the
    // search shifts nsp x width values, the spacings nsp values; blocks stay
    // below ix.blocks; i < items = the length of hits.
    unsafe {
        // The same decoding as find_fragments' full groups, written out again:
        // a shared helper changed the PTX of every build, and the A/B above
        // measured the other builds' code as it is.
        let decode = |i: u32, block: u32| {
            let (c, sp) = (i / nsp, i % nsp);
            let o = (c * cd + 8 * block) as usize;
            let z = (bt.z as *const f32).add(qi as usize * bt.z_stride as usize + o);
            let shift = (ix.search_shifts as *const f32).add((sp * ix.width) as usize + o);
            let inv = *(ix.inv_spacings as *const f32).add(sp as usize);
            let y: [f32; 8] = core::array::from_fn(|k| *z.add(k) * inv + *shift.add(k));
            decode_e8(&y).0
        };
        // Block-uniform bounds: every lane reaches the shuffles.
        let mut first = 0;
        while first < items * lanes {
            let i = (first + t) / lanes;
            let mut h = KeyHasher::for_key(cd as usize);
            let mut done = 0;
            while done < ix.blocks {
                let mut p = [0i32; 8];
                if i < items && done + b < ix.blocks {
                    p = decode(i, done + b);
                }
                for j in 0..SPREAD_BLOCKS {
                    if j < lanes && done + j < ix.blocks {
                        let mut q = [0i32; 8];
                        for k in 0..8 {
                            q[k] = shfl_idx_u32(p[k] as u32, leader + j) as i32;
                        }
                        for k in 0..4 {
                            h.push_pair(q[2 * k], q[2 * k + 1]);
                        }
                    }
                }
                done += lanes;
            }
            if b == 0 && i < items {
                *hits.add(i as usize) =
                    lookup(ix, i, h.finish_key()).map_or(u32::MAX, |f| f as u32);
            }
            first += TH;
        }
    }
}

/// One pass of the batch's fragment lookup (`FragmentLookupLayout`, in
/// `batch.frag_hits`): every (query, copy) item left by the pass before (in
/// pass 0, every item) decoded at `spacing` and looked up, with the same
/// decoding and lookup as [`find_fragments`]. A stored fragment, or none at
/// the coarsest spacing, settles the item's entry of `hits`; the others go to
/// the list of the next pass (a warp's together, after one atomic add).
/// `wave_search` then reads `hits` instead of finding the fragments itself.
/// Launched once per spacing, finest first: pass 0 in tiles of
/// `LOOKUP_TILE_QUERIES` queries by `tile_copies` copies, one block each,
/// with `tile_smem` bytes of shared memory ([`stage_tile`]); the later passes
/// with a thread for every item (those past the pass's count return).
///
/// Why a kernel of its own: inside `wave_search` every (copy, spacing) of a
/// query is decoded at once (a query's rounds wait on it), so the coarser
/// spacings are decoded for the copies whose finest fragment is stored too
/// (80% of them at the builder's default hit rate), and the decoding and the
/// key-table loads ran at the search's occupancy. Here a pass decodes only
/// what is left, at full occupancy.
///
/// # Safety
/// Launched by `Gpu::query_fragments`: the views' pointers are live and
/// sized as they say, `frag_hits` holds `FragmentLookupLayout::words`
/// words with the counts zeroed before pass 0, the passes run in order on
/// one stream, pass 0 with the grid of `tiles` and `tile_smem` bytes of
/// shared memory, the later ones with a thread per item.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn query_fragments(
    index: IndexView,
    batch: BatchView,
    spacing: u32,
) {
    let (ix, bt) = (index, batch);
    let lay = FragmentLookupLayout::new(bt.nq, ix.copies);
    let words = bt.frag_hits as *mut u32;
    let cd = 8 * ix.blocks;
    // SAFETY: the buffer holds `lay.words` words (the host sizes it), the
    // counts are past passes' (complete: an earlier launch on the stream);
    // z holds width values per query (rows z_stride apart), read 16 bytes
    // at a time only where `z_rows_aligned`; the search shifts spacings x
    // width values in a device allocation of their own (aligned; every copy's
    // and block's shifts start at a multiple of 8 values); pass 0 has
    // `tile_smem` bytes of dynamic shared memory.
    unsafe {
        let counts = words.add(lay.counts as usize);
        let hits = words.add(lay.hits as usize);
        let shifts = (ix.search_shifts as *const f32).add((spacing * ix.width) as usize);
        let inv = *(ix.inv_spacings as *const f32).add(spacing as usize);
        let mut item = 0;
        let mut left = false;
        if spacing == 0 {
            let (qi, c, z) = stage_tile(&ix, &bt);
            if qi < bt.nq && c < ix.copies {
                item = qi * ix.copies + c;
                let coords = |b: u32| load8_shared(z.add(8 * b as usize));
                let key = lookup_key(coords, shifts.add((c * cd) as usize), inv, ix.blocks);
                left = settle(&ix, hits, item, c, spacing, key);
            }
        } else {
            let n = core::ptr::read_volatile(counts.add(spacing as usize - 1));
            let g = bid() * T + tid();
            // Whole warps past the count leave; the others vote together.
            if g & !31 >= n {
                return;
            }
            if g < n {
                item = *words.add((lay.lists[((spacing - 1) & 1) as usize] + g) as usize);
                let (qi, c) = (item / ix.copies, item % ix.copies);
                let z = (bt.z as *const f32)
                    .add(qi as usize * bt.z_stride as usize + (c * cd) as usize);
                // Rows 16-byte aligned: two 16-byte loads per E8 block
                // instead of eight of 4 bytes (a warp's items sit rows apart).
                let key = if z_rows_aligned(&bt) {
                    lookup_key(
                        |b| load8_nc(z.add(8 * b as usize)),
                        shifts.add((c * cd) as usize),
                        inv,
                        ix.blocks,
                    )
                } else {
                    fragment_key_of(z, shifts.add((c * cd) as usize), inv, ix.blocks).0
                };
                left = settle(&ix, hits, item, c, spacing, key);
            }
        }
        let votes = ballot(left);
        if votes != 0 {
            let first = votes.trailing_zeros();
            let mut at = 0;
            if lane() == first {
                at = add_global_u32(counts.add(spacing as usize), votes.count_ones());
            }
            at = shfl_idx_u32(at, first);
            if left {
                let below = (votes & ((1u32 << lane()) - 1)).count_ones();
                *words.add((lay.lists[(spacing & 1) as usize] + at + below) as usize) = item;
            }
        }
    }
}

/// Look `key` up in the table of (copy `c`, `spacing`): a stored fragment,
/// or none at the coarsest spacing, settles `hits[item]`; returns whether the
/// item is left for the next spacing.
///
/// # Safety
/// `hits` holds `item + 1` values; `c` is a copy of the index.
#[inline(always)]
unsafe fn settle(
    ix: &IndexView,
    hits: *mut u32,
    item: u32,
    c: u32,
    spacing: u32,
    key: u64,
) -> bool {
    // SAFETY: the caller's contract; the table is one of the index's.
    unsafe {
        match lookup(ix, c * ix.spacings + spacing, key) {
            Some(f) => *hits.add(item as usize) = f as u32,
            None if spacing + 1 < ix.spacings => return true,
            None => *hits.add(item as usize) = NO_FRAGMENT,
        }
    }
    false
}

/// Whether every query's row of `z` starts 16-byte aligned (the buffer and
/// its stride), so that the lookup copies and reads its coordinates 16 bytes
/// at a time (copies' offsets are multiples of 8 values).
#[inline(always)]
fn z_rows_aligned(bt: &BatchView) -> bool {
    bt.z % 16 == 0 && bt.z_stride % 4 == 0
}

/// Pass 0's tile of this block (`LOOKUP_TILE_QUERIES` queries by
/// `tile_copies` copies): their projections staged in shared memory, each
/// query's row read by consecutive threads; then this thread's query (lane)
/// and copy (warp; `u32::MAX` for warps past the tile's copies) and its
/// coordinates there. Called by every thread of the block.
///
/// The rows are staged with asynchronous copies ([`copy_async_4`]), all of a
/// thread's in flight at once: as loads and stores, each of the tile's 32
/// rows waited for the load before it (the compiler cannot move a generic
/// load past a store to shared memory).
///
/// Where the rows are 16-byte aligned ([`z_rows_aligned`]: projections from
/// a product of their own, or after a multiple of 4 principal coordinates
/// in one product), the tile is copied 16 bytes at a time in one flat loop
/// (else 4 bytes at a time in the same loop), and each thread reads its
/// coordinates from it 16 bytes at a time
/// (rows padded to an odd multiple of 4 words: no bank conflicts). A copy
/// per value, in a loop per row, was 39% of pass 0's instructions.
///
/// # Safety
/// The block has `tile_smem` bytes of dynamic shared memory; z holds width
/// values per query, rows z_stride apart.
#[inline(always)]
unsafe fn stage_tile(ix: &IndexView, bt: &BatchView) -> (u32, u32, *const f32) {
    let cd = 8 * ix.blocks;
    let tile_copies = FragmentLookupLayout::tile_copies(cd);
    let row = FragmentLookupLayout::tile_row(cd);
    let copy_tiles = ix.copies.div_ceil(tile_copies);
    let (q0, c0) = (
        bid() / copy_tiles * LOOKUP_TILE_QUERIES,
        bid() % copy_tiles * tile_copies,
    );
    let span = tile_copies.min(ix.copies - c0) * cd;
    let staged = gpu_launch_sized_workgroup_mem::<f32>() as *mut f32;
    let rows = LOOKUP_TILE_QUERIES.min(bt.nq - q0);
    // SAFETY: rows r < LOOKUP_TILE_QUERIES of `row > span` values fit the
    // shared memory; the reads stay in query q's row of z. With aligned rows
    // (z and its stride) every 16-byte copy is aligned at both ends: rows
    // and copies start at multiples of 4 values (`row`, `cd`).
    unsafe {
        // One flat loop over the tile's words (or 16-byte words): a loop per
        // row ran its bounds checks and address arithmetic 32 times a thread.
        let (width, per_row) = if z_rows_aligned(bt) {
            (4, span / 4)
        } else {
            (1, span)
        };
        let mut i = tid();
        while i < rows * per_row {
            let (r, o) = (i / per_row, width * (i % per_row));
            let src = (bt.z as *const f32)
                .add((q0 + r) as usize * bt.z_stride as usize + (c0 * cd + o) as usize);
            let dst = staged.add((r * row + o) as usize);
            if width == 4 {
                copy_async_16(dst, src);
            } else {
                copy_async_4(dst, src);
            }
            i += T;
        }
        copy_async_wait_all();
        sync();
        let (w, l) = (tid() / 32, lane());
        let c = if w < tile_copies { c0 + w } else { u32::MAX };
        (
            q0 + l,
            c,
            staged.add((l * row + w.min(tile_copies - 1) * cd) as usize),
        )
    }
}
