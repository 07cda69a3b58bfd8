//! The OctEx GPU kernels, in Rust for rustc's `nvptx64-nvidia-cuda` target.
//!
//! Built to PTX by `../build.rs` (pinned nightly, `-Zbuild-std=core`); the host
//! crate embeds the PTX and launches these kernels through typed launchers.
//! The E8 decoder, the fragment-key hash and the shared layouts are the very
//! source files the CPU uses (`#[path]` includes), so both sides decode alike.
//!
//! - `wave_search`: the whole search of one query per block (first round, `W`
//!   waves, exact rerank), with the visited set and the candidate list in
//!   shared memory;
//! - `fragment_keys`: key and centre distance of every (vector, copy, spacing);
//! - `sub_bias`, `row_sq_norms`: small helpers around the cuBLAS products;
//! - `topk_tile`: the running top-k of a tile of dot products (exact brute
//!   force, exact neighbour rows).
#![no_std]
#![feature(
    abi_ptx,
    stdarch_nvptx,
    asm_experimental_arch,
    core_intrinsics,
    gpu_intrinsics,
    gpu_launch_sized_workgroup_mem
)]
#![allow(internal_features)]
#![allow(clippy::missing_safety_doc)]

#[allow(dead_code)]
#[path = "../../../lattice/src/e8.rs"]
mod e8;
#[allow(dead_code)]
#[path = "../../../lattice/src/key.rs"]
mod key;
#[allow(dead_code)]
#[path = "../../src/layout.rs"]
mod layout;

use core::arch::asm;
use core::arch::nvptx::{_block_idx_x, _syncthreads, _thread_idx_x};
use core::intrinsics::gpu::gpu_launch_sized_workgroup_mem;

use e8::decode_e8;
use key::{EMPTY_KEY, KeyHasher};
use layout::*;

const T: u32 = BLOCK_THREADS;
const PAD_ID: u32 = u32::MAX;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: trap ends the kernel; the host sees a launch failure.
    unsafe { core::arch::nvptx::trap() }
}

#[inline(always)]
fn tid() -> u32 {
    // SAFETY: reads a special register.
    unsafe { _thread_idx_x() as u32 }
}

#[inline(always)]
fn bid() -> u32 {
    // SAFETY: reads a special register.
    unsafe { _block_idx_x() as u32 }
}

#[inline(always)]
fn sync() {
    // SAFETY: every call site is reached by all threads of the block.
    unsafe { _syncthreads() }
}

#[inline(always)]
unsafe fn ballot(pred: bool) -> u32 {
    let r: u32;
    // SAFETY: all 32 lanes call it (full mask).
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.u32 p, {1}, 0; vote.sync.ballot.b32 {0}, p, 0xffffffff; }}",
             out(reg32) r, in(reg32) pred as u32);
    }
    r
}

#[inline(always)]
unsafe fn shfl_xor_f32(v: f32, mask: u32) -> f32 {
    let r: u32;
    // SAFETY: all 32 lanes call it (full mask).
    unsafe {
        asm!("shfl.sync.bfly.b32 {0}, {1}, {2}, 0x1f, 0xffffffff;",
             out(reg32) r, in(reg32) v.to_bits(), in(reg32) mask);
    }
    f32::from_bits(r)
}

#[inline(always)]
unsafe fn warp_sum(mut v: f32) -> f32 {
    let mut m = 16;
    while m > 0 {
        // SAFETY: called by full warps.
        v += unsafe { shfl_xor_f32(v, m) };
        m >>= 1;
    }
    v
}

#[inline(always)]
unsafe fn f16_to_f32(h: u16) -> f32 {
    let f: f32;
    // SAFETY: a register conversion.
    unsafe { asm!("cvt.f32.f16 {0}, {1};", out(reg32) f, in(reg16) h) };
    f
}

/// Shared-memory compare-and-swap on a generic pointer into shared memory.
#[inline(always)]
unsafe fn cas_shared(p: *mut u32, cmp: u32, new: u32) -> u32 {
    let old: u32;
    // SAFETY: `p` points into this block's shared memory.
    unsafe {
        asm!("{{ .reg .u64 a; cvta.to.shared.u64 a, {1}; atom.shared.cas.b32 {0}, [a], {2}, {3}; }}",
             out(reg32) old, in(reg64) p, in(reg32) cmp, in(reg32) new);
    }
    old
}

#[inline(always)]
unsafe fn add_shared(p: *mut u32, v: u32) -> u32 {
    let old: u32;
    // SAFETY: `p` points into this block's shared memory.
    unsafe {
        asm!("{{ .reg .u64 a; cvta.to.shared.u64 a, {1}; atom.shared.add.u32 {0}, [a], {2}; }}",
             out(reg32) old, in(reg64) p, in(reg32) v);
    }
    old
}

#[inline(always)]
unsafe fn add_global_u64(p: *mut u64, v: u64) {
    // SAFETY: `p` is a valid global address.
    unsafe {
        asm!("red.global.add.u64 [{0}], {1};", in(reg64) p, in(reg64) v);
    }
}

/// 16 bytes from read-only global memory.
#[inline(always)]
unsafe fn load16_nc(p: *const u8) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: `p` is 16-byte aligned global memory that no kernel writes.
    unsafe {
        asm!("ld.global.nc.v4.u32 {{{0}, {1}, {2}, {3}}}, [{4}];",
             out(reg32) a, out(reg32) b, out(reg32) c, out(reg32) d, in(reg64) p);
    }
    [a, b, c, d]
}

/// Bitonic sort of `a[..p]` ascending, `p` a power of two; all threads call it.
#[inline(always)]
unsafe fn bitonic_sort(a: *mut u64, p: u32) {
    let t = tid();
    let mut size = 2;
    while size <= p {
        let mut stride = size / 2;
        while stride > 0 {
            let mut i = t;
            while i < p / 2 {
                let lo = 2 * i - (i & (stride - 1));
                let hi = lo + stride;
                let ascending = (lo & size) == 0;
                // SAFETY: lo < hi < p, inside the caller's buffer.
                unsafe {
                    let x = *a.add(lo as usize);
                    let y = *a.add(hi as usize);
                    if (x > y) == ascending {
                        *a.add(lo as usize) = y;
                        *a.add(hi as usize) = x;
                    }
                }
                i += T;
            }
            sync();
            stride /= 2;
        }
        size *= 2;
    }
}

/// Pad `a[n..p]` with `u64::MAX` (p = next power of two of n) and sort `a[..p]`.
#[inline(always)]
unsafe fn sort_prefix(a: *mut u64, n: u32) {
    let p = n.max(2).next_power_of_two();
    let mut i = n + tid();
    while i < p {
        // SAFETY: p <= the buffer length (a power of two >= n).
        unsafe { *a.add(i as usize) = u64::MAX };
        i += T;
    }
    sync();
    // SAFETY: as above.
    unsafe { bitonic_sort(a, p) };
}

#[inline(always)]
fn candidate(d: f32, id: u32) -> u64 {
    ((f32_order_key(d) as u64) << 32) | id as u64
}

/// Key and centre distance of one copy's projection at one spacing: the same
/// arithmetic as `CopyMap::decode` + `fragment_key`.
#[inline(always)]
unsafe fn fragment_key_of(z: *const f32, shift: *const f32, inv: f32, blocks: u32) -> (u64, f32) {
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

/// Insert `id` into the visited set; true when it was not there.
#[inline(always)]
unsafe fn visit(hash: *mut u32, mask: u32, id: u32) -> bool {
    let h = id.wrapping_mul(0x9E37_79B1);
    let mut s = (h ^ (h >> 15)) & mask;
    let mut probes = 0;
    while probes <= mask {
        // SAFETY: s <= mask < the set's length.
        unsafe {
            let slot = hash.add(s as usize);
            let cur = core::ptr::read_volatile(slot);
            if cur == id {
                return false;
            }
            if cur == EMPTY_SLOT {
                let prev = cas_shared(slot, EMPTY_SLOT, id);
                if prev == EMPTY_SLOT {
                    return true;
                }
                if prev == id {
                    return false;
                }
            }
        }
        s = (s + 1) & mask;
        probes += 1;
    }
    // Full set (sizes make this unreachable): treat as seen.
    false
}

/// Most 16-byte chunks of a sketch row (widths up to 96).
const SKETCH_CHUNKS: usize = 6;

/// Sketch distance `sum_j (q_j - scale_j * s_j)^2` of vector `id`. All of the
/// row's loads are issued before the first is used.
#[inline(always)]
unsafe fn sketch_distance(ix: &IndexView, qs: *const f32, scales: *const f32, id: u32) -> f32 {
    let w = ix.sketch_width as usize;
    let mut acc = 0.0f32;
    // SAFETY: id < n; rows are w <= 96 bytes, w a multiple of 16, the section
    // 64-aligned.
    unsafe {
        let row = (ix.sketch as *const u8).add(id as usize * w);
        let mut words = [[0u32; 4]; SKETCH_CHUNKS];
        for (c, chunk) in words.iter_mut().enumerate() {
            if 16 * c < w {
                *chunk = load16_nc(row.add(16 * c));
            }
        }
        for (c, chunk) in words.iter().enumerate() {
            if 16 * c >= w {
                break;
            }
            for (wi, word) in chunk.iter().enumerate() {
                for b in 0..4 {
                    let v = (*word >> (8 * b)) as u8 as i8 as f32;
                    let j = 16 * c + 4 * wi + b;
                    let d = *qs.add(j) - *scales.add(j) * v;
                    acc += d * d;
                }
            }
        }
    }
    acc
}

/// Exact squared L2 distance of vector `id` to the shared-memory query, by one
/// warp (every lane returns the sum). Rows whose length allows it are read 16
/// bytes per lane (8 halves or 4 floats), else 4 bytes, else one value.
#[inline(always)]
unsafe fn exact_distance(ix: &IndexView, query: *const f32, id: u32, lane: u32) -> f32 {
    let dim = ix.dim as usize;
    let mut acc = 0.0f32;
    // SAFETY: id < n; every index below is < dim; the 16- and 4-byte loads are
    // aligned because the section is 64-aligned and the row length in bytes is
    // a multiple of the load width whenever that path is taken.
    unsafe {
        if ix.vectors_f16 != 0 {
            let v = (ix.vectors as *const u16).add(id as usize * dim);
            if dim % 8 == 0 {
                let mut c = lane as usize;
                while c < dim / 8 {
                    let words = load16_nc(v.add(8 * c) as *const u8);
                    for (wi, word) in words.iter().enumerate() {
                        for h in 0..2 {
                            let x = f16_to_f32((*word >> (16 * h)) as u16);
                            let d = *query.add(8 * c + 2 * wi + h) - x;
                            acc += d * d;
                        }
                    }
                    c += 32;
                }
            } else if dim % 2 == 0 {
                let v32 = v as *const u32;
                let mut c = lane as usize;
                while c < dim / 2 {
                    let word = *v32.add(c);
                    for h in 0..2 {
                        let d = *query.add(2 * c + h) - f16_to_f32((word >> (16 * h)) as u16);
                        acc += d * d;
                    }
                    c += 32;
                }
            } else {
                let mut j = lane as usize;
                while j < dim {
                    let d = *query.add(j) - f16_to_f32(*v.add(j));
                    acc += d * d;
                    j += 32;
                }
            }
        } else {
            let v = (ix.vectors as *const f32).add(id as usize * dim);
            if dim % 4 == 0 {
                let mut c = lane as usize;
                while c < dim / 4 {
                    let words = load16_nc(v.add(4 * c) as *const u8);
                    for (i, word) in words.iter().enumerate() {
                        let d = *query.add(4 * c + i) - f32::from_bits(*word);
                        acc += d * d;
                    }
                    c += 32;
                }
            } else {
                let mut j = lane as usize;
                while j < dim {
                    let d = *query.add(j) - *v.add(j);
                    acc += d * d;
                    j += 32;
                }
            }
        }
        warp_sum(acc)
    }
}

/// Mark the first `S` unexpanded entries of `buf[..nbest]` expanded and list
/// their ids in `starts`; returns how many (block-uniform).
#[inline(always)]
unsafe fn select_starts(
    buf: *mut u64,
    nbest: u32,
    s_max: u32,
    starts: *mut u32,
    warp_sums: *mut u32,
) -> u32 {
    let t = tid();
    let (lane, warp) = (t & 31, t >> 5);
    let mut found = 0u32;
    let mut chunk = 0u32;
    while chunk < nbest && found < s_max {
        let i = chunk + t;
        // SAFETY: i < nbest <= buffer length; warp_sums has T/32 slots.
        unsafe {
            let entry = if i < nbest {
                *buf.add(i as usize)
            } else {
                u64::MAX
            };
            let flag = i < nbest && (entry as u32 & EXPANDED_BIT) == 0;
            let votes = ballot(flag);
            let below = (votes & ((1u32 << lane) - 1)).count_ones();
            if lane == 0 {
                *warp_sums.add(warp as usize) = votes.count_ones();
            }
            sync();
            let (mut before, mut total) = (0u32, 0u32);
            for wi in 0..T / 32 {
                let c = *warp_sums.add(wi as usize);
                before += if wi < warp { c } else { 0 };
                total += c;
            }
            let rank = found + before + below;
            if flag && rank < s_max {
                *buf.add(i as usize) = entry | EXPANDED_BIT as u64;
                *starts.add(rank as usize) = entry as u32;
            }
            found += total;
            sync();
        }
        chunk += T;
    }
    found.min(s_max)
}

/// Per-thread work counts, summed into the batch's counters at the end.
#[derive(Default)]
struct Counts {
    first_round: u32,
    sketch: u32,
    no_fragment: u32,
    row_entries: u32,
}

/// Entries a thread loads before it visits them (loads in flight together).
const GATHER: usize = 8;

/// Visit entries `0..total` (`load(e)` gives entry `e`'s id or `PAD_ID`),
/// `GATHER` per thread at a time with all loads issued first, and list the ids
/// not seen before in `fresh`.
#[inline(always)]
unsafe fn gather(
    total: u32,
    load: impl Fn(u32) -> u32,
    hash: *mut u32,
    mask: u32,
    fresh: *mut u32,
    fresh_count: *mut u32,
    seen: &mut u32,
) {
    let t = tid();
    let mut base = 0;
    while base < total {
        let mut ids = [PAD_ID; GATHER];
        for (g, id) in ids.iter_mut().enumerate() {
            let e = base + t + g as u32 * T;
            if e < total {
                *id = load(e);
            }
        }
        for id in ids {
            if id != PAD_ID {
                *seen += 1;
                // SAFETY: shared pointers of the layout; fresh holds every id a
                // round can see (fresh_len).
                unsafe {
                    if visit(hash, mask, id) {
                        let p = add_shared(fresh_count, 1);
                        *fresh.add(p as usize) = id;
                    }
                }
            }
        }
        base += GATHER as u32 * T;
    }
}

/// Score the `n` fresh ids and append those whose key beats `threshold`.
/// (Scoring two rows per thread with their loads interleaved measured slower
/// on the H200: rounds hold a few hundred fresh ids, so it idled half the
/// threads.)
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn score_fresh(
    ix: &IndexView,
    qs: *const f32,
    scales: *const f32,
    fresh: *const u32,
    n: u32,
    buf: *mut u64,
    count: *mut u32,
    threshold: u32,
    counts: &mut Counts,
) {
    let mut i = tid();
    while i < n {
        // SAFETY: i < n <= fresh_len; pushes stay under buf_len (sizes).
        unsafe {
            let id = *fresh.add(i as usize);
            let d = sketch_distance(ix, qs, scales, id);
            counts.sketch += 1;
            if f32_order_key(d) < threshold {
                let pos = add_shared(count, 1);
                *buf.add(pos as usize) = candidate(d, id);
            }
        }
        i += T;
    }
}

/// Wait for the round's gather, then score its fresh ids.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn score_round(
    ix: &IndexView,
    qs: *const f32,
    scales: *const f32,
    fresh: *const u32,
    fresh_count: *mut u32,
    buf: *mut u64,
    count: *mut u32,
    threshold: u32,
    counts: &mut Counts,
) {
    sync();
    // SAFETY: shared counter, complete after the barrier.
    unsafe {
        let n = core::ptr::read_volatile(fresh_count);
        score_fresh(ix, qs, scales, fresh, n, buf, count, threshold, counts);
    }
}

/// Zero a shared counter between barriers.
#[inline(always)]
unsafe fn reset_counter(c: *mut u32) {
    sync();
    if tid() == 0 {
        // SAFETY: a shared counter.
        unsafe { core::ptr::write_volatile(c, 0) };
    }
    sync();
}

/// Sort the appended candidates and keep the best `keep`; returns how many.
#[inline(always)]
unsafe fn sort_and_trim(buf: *mut u64, count: *mut u32, keep: u32) -> u32 {
    sync();
    // SAFETY: count is a shared counter; buf holds `n` entries.
    unsafe {
        let n = core::ptr::read_volatile(count);
        sync();
        sort_prefix(buf, n);
        let nbest = n.min(keep);
        if tid() == 0 {
            core::ptr::write_volatile(count, nbest);
        }
        sync();
        nbest
    }
}

/// The wave search of one query per block (`BLOCK_THREADS` threads; dynamic
/// shared memory as `SearchSmem` lays it out).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn wave_search(index: *const IndexView, batch: *const BatchView) {
    // SAFETY: the host passes valid views; every access below stays inside the
    // sizes they describe.
    unsafe {
        let ix = *index;
        let bt = *batch;
        let qi = bid();
        if qi >= bt.nq {
            return;
        }
        let t = tid();
        let lay = SearchSmem::new(&ix, &bt);
        let base = gpu_launch_sized_workgroup_mem::<u64>() as *mut u8;
        let ctr = base.add(lay.counters as usize) as *mut u32;
        let buf = base.add(lay.buf as usize) as *mut u64;
        let exact = base.add(lay.exact as usize) as *mut u64;
        let hash = base.add(lay.hash as usize) as *mut u32;
        let qs = base.add(lay.qs as usize) as *mut f32;
        let scales = base.add(lay.scales as usize) as *mut f32;
        let query = base.add(lay.query as usize) as *mut f32;
        let hits = base.add(lay.hits as usize) as *mut u32;
        let starts = base.add(lay.starts as usize) as *mut u32;
        let count = ctr.add(CTR_COUNT);
        let mask = bt.hash_slots - 1;
        let w = ix.sketch_width;
        let m = ix.basis_dim;
        let mut counts = Counts::default();

        // Load the query and clear the visited set.
        let mut i = t;
        while i < SearchSmem::COUNTERS {
            *ctr.add(i as usize) = 0;
            i += T;
        }
        i = t;
        while i < bt.hash_slots {
            *hash.add(i as usize) = EMPTY_SLOT;
            i += T;
        }
        i = t;
        while i < w {
            let pcs = bt.pcs as *const f32;
            *qs.add(i as usize) = if i < m {
                *pcs.add((qi * m + i) as usize)
            } else {
                0.0
            };
            *scales.add(i as usize) = *(ix.sketch_scales as *const f32).add(i as usize);
            i += T;
        }
        i = t;
        while i < ix.dim {
            *query.add(i as usize) = *(bt.queries as *const f32).add((qi * ix.dim + i) as usize);
            i += T;
        }

        if bt.stop_after == STOP_AFTER_INIT {
            sync();
            return;
        }
        // First round: every (copy, spacing) decoded and looked up at once; per
        // copy, the finest spacing whose fragment is stored.
        let cd = 8 * ix.blocks;
        let nsp = ix.spacings;
        let hits_by_spacing = base.add(lay.hits_by_spacing as usize) as *mut u32;
        let fresh = base.add(lay.fresh as usize) as *mut u32;
        let fresh_count = ctr.add(CTR_FRESH);
        let mut i = t;
        while i < ix.copies * nsp {
            let (c, sp) = (i / nsp, i % nsp);
            let z = (bt.z as *const f32).add((qi * ix.width + c * cd) as usize);
            let shift = (ix.shifts as *const f32).add((c * cd) as usize);
            let inv = *(ix.inv_spacings as *const f32).add(sp as usize);
            let (key, _) = fragment_key_of(z, shift, inv, ix.blocks);
            *hits_by_spacing.add(i as usize) = match lookup(&ix, i, key) {
                Some(frag) => frag as u32,
                None => u32::MAX,
            };
            i += T;
        }
        sync();
        let mut c = t;
        while c < ix.copies {
            let mut hit = u32::MAX;
            let mut sp = 0;
            while sp < nsp && hit == u32::MAX {
                hit = *hits_by_spacing.add((c * nsp + sp) as usize);
                sp += 1;
            }
            counts.no_fragment += (hit == u32::MAX) as u32;
            *hits.add(c as usize) = hit;
            c += T;
        }
        sync();
        if bt.stop_after == STOP_AFTER_LOOKUP {
            return;
        }

        // Gather the first `r` ids of every ripple found, de-duplicated, scored.
        let r = bt.read_depth;
        let l = ix.list_len as u64;
        let ripples = ix.ripples as *const u32;
        let load_ripple = |e: u32| {
            let frag = *hits.add((e / r) as usize);
            if frag == u32::MAX {
                PAD_ID
            } else {
                *ripples.add((frag as u64 * l + (e % r) as u64) as usize)
            }
        };
        gather(
            ix.copies * r,
            load_ripple,
            hash,
            mask,
            fresh,
            fresh_count,
            &mut counts.first_round,
        );
        score_round(
            &ix,
            qs,
            scales,
            fresh,
            fresh_count,
            buf,
            count,
            u32::MAX,
            &mut counts,
        );
        sync();
        let found = core::ptr::read_volatile(count);
        let seeded = found < bt.start_points;
        if seeded {
            reset_counter(fresh_count);
            let seeds = ix.seeds as *const u32;
            let mut unused = 0;
            gather(
                ix.n_seeds,
                |e| *seeds.add(e as usize),
                hash,
                mask,
                fresh,
                fresh_count,
                &mut unused,
            );
            score_round(
                &ix,
                qs,
                scales,
                fresh,
                fresh_count,
                buf,
                count,
                u32::MAX,
                &mut counts,
            );
        }
        let mut nbest = sort_and_trim(buf, count, bt.keep);
        if bt.stop_after == STOP_AFTER_FIRST_ROUND {
            return;
        }

        // Waves.
        let lt = ix.row_len;
        let rows = ix.rows as *const u32;
        let mut wave = 0;
        while wave < bt.waves {
            let ns = select_starts(buf, nbest, bt.start_points, starts, ctr.add(CTR_WARP_SUMS));
            if ns == 0 {
                break;
            }
            let threshold = if nbest >= bt.keep {
                (*buf.add(bt.keep as usize - 1) >> 32) as u32
            } else {
                u32::MAX
            };
            reset_counter(fresh_count);
            let load_row = |e: u32| {
                let u = *starts.add((e / lt) as usize);
                *rows.add((u as u64 * lt as u64 + (e % lt) as u64) as usize)
            };
            gather(
                ns * lt,
                load_row,
                hash,
                mask,
                fresh,
                fresh_count,
                &mut counts.row_entries,
            );
            score_round(
                &ix,
                qs,
                scales,
                fresh,
                fresh_count,
                buf,
                count,
                threshold,
                &mut counts,
            );
            nbest = sort_and_trim(buf, count, bt.keep);
            wave += 1;
        }

        if bt.stop_after == STOP_AFTER_WAVES {
            return;
        }

        // Exact rerank of the best R, one warp per candidate.
        let nr = bt.rerank.min(nbest);
        let (lane, warp) = (t & 31, t >> 5);
        let mut j = warp;
        while j < nr {
            let id = (*buf.add(j as usize) as u32) & !EXPANDED_BIT;
            let d = exact_distance(&ix, query, id, lane);
            if lane == 0 {
                *exact.add(j as usize) = candidate(d, id);
            }
            j += T / 32;
        }
        sync();
        sort_prefix(exact, nr);
        let mut j = t;
        while j < bt.k {
            let o = (qi * bt.k + j) as usize;
            if j < nr {
                let v = *exact.add(j as usize);
                *(bt.out_ids as *mut u32).add(o) = v as u32;
                *(bt.out_dists as *mut f32).add(o) = f32_from_order_key((v >> 32) as u32);
            } else {
                *(bt.out_ids as *mut u32).add(o) = PAD_ID;
                *(bt.out_dists as *mut f32).add(o) = f32::INFINITY;
            }
            j += T;
        }

        // Work counters: per thread into shared memory, then one add per block.
        add_shared(ctr.add(CTR_FIRST_ROUND), counts.first_round);
        add_shared(ctr.add(CTR_SKETCH), counts.sketch);
        add_shared(ctr.add(CTR_NO_FRAGMENT), counts.no_fragment);
        add_shared(ctr.add(CTR_ROW_ENTRIES), counts.row_entries);
        sync();
        if t == 0 {
            let stats = bt.stats as *mut u64;
            add_global_u64(
                stats.add(STAT_FIRST_ROUND_ENTRIES),
                *ctr.add(CTR_FIRST_ROUND) as u64,
            );
            add_global_u64(
                stats.add(STAT_COPIES_WITHOUT_FRAGMENT),
                *ctr.add(CTR_NO_FRAGMENT) as u64,
            );
            add_global_u64(
                stats.add(STAT_SKETCH_DISTANCES),
                *ctr.add(CTR_SKETCH) as u64,
            );
            add_global_u64(stats.add(STAT_EXACT_DISTANCES), nr as u64);
            add_global_u64(stats.add(STAT_SEEDED_QUERIES), seeded as u64);
            add_global_u64(
                stats.add(STAT_ROW_ENTRIES),
                *ctr.add(CTR_ROW_ENTRIES) as u64,
            );
        }
    }
}

/// `keys[(v * copies + c) * spacings + s]` and `dists[..]`: the fragment key and
/// centre distance of vector `v` (projections `z`, `n x width`) in copy `c` at
/// spacing `s`. One thread per (vector, copy, spacing).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fragment_keys(
    index: *const IndexView,
    z: *const f32,
    n: u32,
    keys: *mut u64,
    dists: *mut f32,
) {
    // SAFETY: the host sizes keys/dists as n * copies * spacings.
    unsafe {
        let ix = *index;
        let per_vector = ix.copies * ix.spacings;
        let g = bid() as u64 * T as u64 + tid() as u64;
        if g >= n as u64 * per_vector as u64 {
            return;
        }
        let v = (g / per_vector as u64) as u32;
        let rest = (g % per_vector as u64) as u32;
        let (c, s) = (rest / ix.spacings, rest % ix.spacings);
        let cd = 8 * ix.blocks;
        let zc = z.add(v as usize * ix.width as usize + (c * cd) as usize);
        let shift = (ix.shifts as *const f32).add((c * cd) as usize);
        let inv = *(ix.inv_spacings as *const f32).add(s as usize);
        let (k, d) = fragment_key_of(zc, shift, inv, ix.blocks);
        *keys.add(g as usize) = k;
        *dists.add(g as usize) = d;
    }
}

/// `x[i][j] -= bias[j]` for an `n x m` row-major matrix.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn sub_bias(x: *mut f32, n: u32, m: u32, bias: *const f32) {
    let g = bid() as u64 * T as u64 + tid() as u64;
    if g < n as u64 * m as u64 {
        // SAFETY: g < n * m; bias has m values.
        unsafe { *x.add(g as usize) -= *bias.add((g % m as u64) as usize) };
    }
}

/// `out[i] = |x_i|^2` for an `n x d` row-major matrix.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn row_sq_norms(x: *const f32, n: u32, d: u32, out: *mut f32) {
    let i = bid() * T + tid();
    if i < n {
        let mut acc = 0.0f32;
        // SAFETY: row i has d values.
        unsafe {
            let row = x.add(i as usize * d as usize);
            for j in 0..d as usize {
                let v = *row.add(j);
                acc += v * v;
            }
            *out.add(i as usize) = acc;
        }
    }
}

/// Candidates `topk_tile` sorts at most (shared memory `u64 x (T + 2 +
/// TOPK_CANDIDATES)`).
const TOPK_CANDIDATES: u32 = 2048;

/// Running top-k of a tile: query `q` (one block each) scores tile columns
/// `t < nt` as `norms[t] - 2 dots[q][t]` (`dots` is `nq x nt`, row-major), ids
/// `tile_base + t`, skipping id `self_base + q` (exact rows exclude the vector
/// itself; pass `u32::MAX` to keep all), and merges them into `best[q][..k]`
/// (sorted candidates, `u64::MAX` when empty).
///
/// Each thread keeps its own top-k. Only entries no worse than the k-th
/// smallest of the threads' minima (and than the running k-th best) can make
/// the result, so only those are sorted; when even those are too many (many
/// equal distances), a bisection over the candidate keys finds the exact k-th
/// smallest first.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn topk_tile(
    dots: *const f32,
    nq: u32,
    nt: u32,
    norms: *const f32,
    tile_base: u32,
    self_base: u32,
    k: u32,
    best: *mut u64,
) {
    // SAFETY: the host sizes dots (nq x nt), norms (nt), best (nq x k), k <= MAX_TOPK.
    unsafe {
        let q = bid();
        if q >= nq {
            return;
        }
        let t = tid();
        let k = k.min(MAX_TOPK);
        let ku = k as usize;
        let skip = if self_base == u32::MAX {
            u32::MAX
        } else {
            self_base.wrapping_add(q)
        };
        let own = best.add(q as usize * ku);
        let prev_worst = *own.add(ku - 1);
        let mut local = [u64::MAX; MAX_TOPK as usize];
        let mut worst = prev_worst;
        let row = dots.add(q as usize * nt as usize);
        let mut insert = |v: u64, local: &mut [u64; MAX_TOPK as usize], worst: &mut u64| {
            let mut p = ku - 1;
            while p > 0 && local[p - 1] > v {
                local[p] = local[p - 1];
                p -= 1;
            }
            local[p] = v;
            *worst = local[ku - 1].min(prev_worst);
        };
        // Four loads in flight per thread.
        let mut c = t;
        while c < nt {
            let mut v = [u64::MAX; 4];
            for (u, slot) in v.iter_mut().enumerate() {
                let cc = c + u as u32 * T;
                if cc < nt {
                    let d = *norms.add(cc as usize) - 2.0 * *row.add(cc as usize);
                    *slot = candidate(d, tile_base + cc);
                }
            }
            for x in v {
                if x < worst && (x as u32) != skip {
                    insert(x, &mut local, &mut worst);
                }
            }
            c += 4 * T;
        }
        let smem = gpu_launch_sized_workgroup_mem::<u64>();
        let mins = smem;
        let counter = smem.add(T as usize) as *mut u32;
        let cand = smem.add(T as usize + 2);
        *mins.add(t as usize) = local[0];
        sync();
        bitonic_sort(mins, T);
        let mut threshold = (*mins.add(ku - 1)).min(prev_worst);
        // How many local entries are <= `x`, over the block.
        let block_count = |x: u64| -> u32 {
            sync();
            if t == 0 {
                core::ptr::write_volatile(counter, 0);
            }
            sync();
            let mine = local
                .iter()
                .take(ku)
                .filter(|v| **v <= x && **v != u64::MAX)
                .count() as u32;
            if mine > 0 {
                add_shared(counter, mine);
            }
            sync();
            core::ptr::read_volatile(counter)
        };
        if block_count(threshold) + k > TOPK_CANDIDATES {
            // Smallest x with count(<= x) >= k (keys are unique, so exactly k).
            let (mut lo, mut hi) = (0u64, threshold);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if block_count(mid) >= k {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            threshold = hi;
        }
        sync();
        if t == 0 {
            core::ptr::write_volatile(counter, 0);
        }
        sync();
        for v in local.iter().take(ku) {
            if *v <= threshold && *v != u64::MAX {
                let pos = add_shared(counter, 1);
                *cand.add(pos as usize) = *v;
            }
        }
        let mut j = t;
        while j < k {
            let v = *own.add(j as usize);
            if v != u64::MAX {
                let pos = add_shared(counter, 1);
                *cand.add(pos as usize) = v;
            }
            j += T;
        }
        sync();
        let n = core::ptr::read_volatile(counter);
        sort_prefix(cand, n);
        let mut j = t;
        while j < k {
            *own.add(j as usize) = if j < n {
                *cand.add(j as usize)
            } else {
                u64::MAX
            };
            j += T;
        }
    }
}
