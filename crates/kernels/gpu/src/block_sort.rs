//! Block-wide sorts of `u64` entries in shared (or global) memory: the
//! plain bitonic network for powers of two ([`bitonic_sort`], [`sort_prefix`]),
//! the search's sort of any length ([`sort_block`]), and its selection of the
//! smallest entries ([`select_smallest`]), which keeps the best `M`
//! candidates of the first round without sorting all of them.
//!
//! Safety contract of the `unsafe fn`s here: see [`crate::prims`].

use core::arch::asm;

use crate::prims::*;

/// Bitonic sort of `a[..p]` ascending, `p` a power of two; all threads call it.
#[inline(always)]
pub unsafe fn bitonic_sort(a: *mut u64, p: u32) {
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
pub unsafe fn sort_prefix(a: *mut u64, n: u32) {
    let p = n.max(2).next_power_of_two();
    let mut i = n + tid();
    while i < p {
        // SAFETY: p <= the buffer length (a power of two >= n).
        unsafe { *a.add(i as usize) = u64::MAX };
        i += T;
    }
    sync();
    // SAFETY: as above; the padding is already in order.
    unsafe { sort_block::<T>(a, n) };
}

/// Elements per warp-resident chunk of [`sort_block`]: two per lane.
const CHUNK: u32 = 64;

#[inline(always)]
unsafe fn shfl_xor_u64(v: u64, m: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: all 32 lanes call it (full mask).
    unsafe {
        asm!("shfl.sync.bfly.b32 {0}, {1}, {2}, 0x1f, 0xffffffff;",
             out(reg32) lo, in(reg32) v as u32, in(reg32) m);
        asm!("shfl.sync.bfly.b32 {0}, {1}, {2}, 0x1f, 0xffffffff;",
             out(reg32) hi, in(reg32) (v >> 32) as u32, in(reg32) m);
    }
    ((hi as u64) << 32) | lo as u64
}

/// One compare-exchange stage of a 64-element chunk held in registers (lane
/// `l` holds elements `l` and `l + 32`): element `e` meets `e ^ m`, and the
/// lower index keeps the smaller; `top` is the highest bit of `m`. Called by
/// all lanes of the warp.
#[inline(always)]
unsafe fn chunk_stage(x0: &mut u64, x1: &mut u64, m: u32, top: u32, lane: u32) {
    // SAFETY: full warps (the caller's contract).
    unsafe {
        if m >= 32 {
            // Partners sit in the other register of lane `lane ^ (m & 31)`;
            // x0 always holds the lower index.
            let p0 = shfl_xor_u64(*x1, m & 31);
            let p1 = shfl_xor_u64(*x0, m & 31);
            *x0 = (*x0).min(p0);
            *x1 = (*x1).max(p1);
        } else {
            let lower = lane & top == 0;
            let p0 = shfl_xor_u64(*x0, m);
            let p1 = shfl_xor_u64(*x1, m);
            *x0 = if lower { (*x0).min(p0) } else { (*x0).max(p0) };
            *x1 = if lower { (*x1).min(p1) } else { (*x1).max(p1) };
        }
    }
}

/// The chunk at `base` of `a[..n]` into this lane's two registers (elements
/// `base + lane` and `base + lane + 32`; past `n`, `u64::MAX`).
#[inline(always)]
unsafe fn load_chunk(a: *mut u64, n: u32, base: u32, lane: u32) -> (u64, u64) {
    let (i0, i1) = (base + lane, base + lane + 32);
    // SAFETY: indices below n are inside the caller's buffer.
    unsafe {
        let x0 = if i0 < n {
            *a.add(i0 as usize)
        } else {
            u64::MAX
        };
        let x1 = if i1 < n {
            *a.add(i1 as usize)
        } else {
            u64::MAX
        };
        (x0, x1)
    }
}

/// [`load_chunk`]'s inverse; elements past `n` are not written.
#[inline(always)]
unsafe fn store_chunk(a: *mut u64, n: u32, base: u32, lane: u32, x0: u64, x1: u64) {
    let (i0, i1) = (base + lane, base + lane + 32);
    // SAFETY: indices below n are inside the caller's buffer.
    unsafe {
        if i0 < n {
            *a.add(i0 as usize) = x0;
        }
        if i1 < n {
            *a.add(i1 as usize) = x1;
        }
    }
}

/// The half-cleaners of strides 32 to 1 on a chunk in registers, which end
/// a bitonic merge of a larger size. Called by all lanes of the warp.
#[inline(always)]
unsafe fn half_clean(x0: &mut u64, x1: &mut u64, lane: u32) {
    let mut stride = 32;
    while stride > 0 {
        // SAFETY: full warps (the caller's contract).
        unsafe { chunk_stage(x0, x1, stride, stride, lane) };
        stride /= 2;
    }
}

/// Run the stages `(size, first mask)` of every 64-element chunk of
/// `a[..n]` in registers, one warp per chunk: with `full`, the whole sort of
/// each chunk (sizes 2 to 64); else the half-cleaners of strides 32 to 1 that
/// end a merge of a larger size. Elements past `n` count as `u64::MAX` and
/// are not written.
#[inline(always)]
unsafe fn chunk_pass<const TH: u32>(a: *mut u64, n: u32, full: bool) {
    let (lane, warp) = (lane(), tid() >> 5);
    let mut base = warp * CHUNK;
    while base < n {
        // SAFETY: full warps; indices below n are inside the caller's buffer.
        unsafe {
            let (mut x0, mut x1) = load_chunk(a, n, base, lane);
            if full {
                let mut size = 2;
                while size <= CHUNK {
                    chunk_stage(&mut x0, &mut x1, size - 1, size / 2, lane);
                    let mut stride = size / 4;
                    while stride > 0 {
                        chunk_stage(&mut x0, &mut x1, stride, stride, lane);
                        stride /= 2;
                    }
                    size *= 2;
                }
            } else {
                half_clean(&mut x0, &mut x1, lane);
            }
            store_chunk(a, n, base, lane, x0, x1);
        }
        base += (TH / 32) * CHUNK;
    }
}

/// Sort `a[..n]`, `n <= 32`, by the first warp, one entry per lane: 15
/// stages of one shuffled register against the 21 of [`chunk_pass`]'s two
/// (the rerank's list of 16 to 32 entries, sorted once a query, and the
/// selections of rounds that append at most 32). Entries past `n` count as
/// `u64::MAX` and are not written.
#[inline(always)]
unsafe fn sort_warp(a: *mut u64, n: u32) {
    if tid() >= 32 {
        return;
    }
    let lane = lane();
    // SAFETY: lane < n <= the caller's buffer; full first warp.
    unsafe {
        let x = if lane < n {
            *a.add(lane as usize)
        } else {
            u64::MAX
        };
        let x = sort_lanes(x, lane);
        if lane < n {
            *a.add(lane as usize) = x;
        }
    }
}

/// The warp's 32 registers `x` (one a lane) sorted ascending across the
/// lanes: the bitonic network whose merges start by pairing mirrored lanes.
/// Called by all lanes of the warp.
#[inline(always)]
unsafe fn sort_lanes(mut x: u64, lane: u32) -> u64 {
    let mut size = 2;
    while size <= 32 {
        // SAFETY: full warps (the caller's contract).
        x = unsafe { lane_stage(x, size - 1, size / 2, lane) };
        let mut stride = size / 4;
        while stride > 0 {
            // SAFETY: as above.
            x = unsafe { lane_stage(x, stride, stride, lane) };
            stride /= 2;
        }
        size *= 2;
    }
    x
}

/// One compare-exchange stage across the lanes: lane `l` meets `l ^ m`, and
/// the lane without `top` keeps the smaller. Called by all lanes of the warp.
#[inline(always)]
unsafe fn lane_stage(x: u64, m: u32, top: u32, lane: u32) -> u64 {
    // SAFETY: full warps (the caller's contract).
    let partner = unsafe { shfl_xor_u64(x, m) };
    if lane & top == 0 {
        x.min(partner)
    } else {
        x.max(partner)
    }
}

/// [`select_smallest`] for `run = 32` ([`selection_run`] of a `keep` of at
/// most 32): every run of 32 is sorted in one register a lane by one warp,
/// and each fold (the smaller of an entry and its mirror in the partner run,
/// then the half-cleaners of strides 16 to 1) stays in that warp's
/// registers: 15 shuffled stages a run and 5 a fold, against 21 on two
/// registers a chunk of 64 and folds through shared memory.
#[inline(always)]
unsafe fn select_smallest_lanes<const TH: u32>(a: *mut u64, n: u32) {
    let (lane, warp) = (lane(), tid() >> 5);
    // SAFETY: every index read or written is below n; full warps reach the
    // shuffles (the loops' bounds are warp-uniform).
    unsafe {
        let mut base = warp * 32;
        while base < n {
            let i = base + lane;
            let x = if i < n { *a.add(i as usize) } else { u64::MAX };
            let x = sort_lanes(x, lane);
            if i < n {
                *a.add(i as usize) = x;
            }
            base += TH;
        }
        sync();
        let mut gap = 32;
        while gap < n {
            let step = 2 * gap;
            let mut b = warp * step;
            // Runs whose partner starts at or past n are sorted already.
            while b + gap < n {
                // b + lane < b + gap < n: the run is full.
                let mut x = *a.add((b + lane) as usize);
                let hi = b + gap + 31 - lane;
                if hi < n {
                    x = x.min(*a.add(hi as usize));
                }
                let mut stride = 16;
                while stride > 0 {
                    x = lane_stage(x, stride, stride, lane);
                    stride /= 2;
                }
                *a.add((b + lane) as usize) = x;
                b += (TH / 32) * step;
            }
            sync();
            gap *= 2;
        }
    }
}

/// [`select_smallest`] for `run = 64` ([`selection_run`] of a `keep` from
/// 33 to 64): the runs of 64 sorted in two registers a lane ([`sort_runs`]),
/// then each fold in the registers of one warp, as in
/// [`select_smallest_lanes`]: the smaller of each entry and its mirror in
/// the partner run, then the half-cleaners of strides 32 to 1 (one pass and
/// one barrier a level, against a compare pass through shared memory, a
/// barrier, the half-cleaners and a second barrier).
#[inline(always)]
unsafe fn select_smallest_pairs<const TH: u32>(a: *mut u64, n: u32) {
    let (lane, warp) = (lane(), tid() >> 5);
    // SAFETY: every index read or written is below n; full warps reach the
    // shuffles (the loops' bounds are warp-uniform).
    unsafe {
        sort_runs::<TH>(a, n, CHUNK);
        let mut gap = CHUNK;
        while gap < n {
            let step = 2 * gap;
            let mut b = warp * step;
            // Runs whose partner starts at or past n are sorted already.
            while b + gap < n {
                // b + 63 < b + gap < n: the run is full.
                let (lo0, lo1) = (b + lane, b + 32 + lane);
                let (mut x0, mut x1) = (*a.add(lo0 as usize), *a.add(lo1 as usize));
                // Entry p meets entry 63 - p of the partner run.
                let (hi0, hi1) = (b + gap + 63 - lane, b + gap + 31 - lane);
                if hi0 < n {
                    x0 = x0.min(*a.add(hi0 as usize));
                }
                if hi1 < n {
                    x1 = x1.min(*a.add(hi1 as usize));
                }
                half_clean(&mut x0, &mut x1, lane);
                *a.add(lo0 as usize) = x0;
                *a.add(lo1 as usize) = x1;
                b += (TH / 32) * step;
            }
            sync();
            gap *= 2;
        }
    }
}

/// Put the smaller of `a[lo]` and `a[hi]` at `lo` (`lo < hi`); positions
/// `n` and past count as `u64::MAX`, so nothing happens when `hi >= n`.
#[inline(always)]
unsafe fn compare_exchange(a: *mut u64, n: u32, lo: u32, hi: u32) {
    if hi < n {
        // SAFETY: lo < hi < n, inside the caller's buffer.
        unsafe {
            let x = *a.add(lo as usize);
            let y = *a.add(hi as usize);
            if x > y {
                *a.add(lo as usize) = y;
                *a.add(hi as usize) = x;
            }
        }
    }
}

/// Sort `a[..n]` ascending, any `n`, in a block of `TH` threads; all threads call it, after a barrier
/// that published `a`, and it ends with one.
///
/// A bitonic network in the form whose every compare-exchange is ascending
/// (each merge starts by comparing mirrored positions), so positions past
/// `n` act as `u64::MAX` and are neither read nor written: no padding, and a
/// buffer of exactly `n`. Stages whose partners are less than 64 apart run
/// in registers with warp shuffles, a 64-element chunk per warp; only the
/// wider ones go through shared memory, one barrier each (10 barriers for
/// 512 elements, against 45 for the plain network).
#[inline(always)]
pub unsafe fn sort_block<const TH: u32>(a: *mut u64, n: u32) {
    // SAFETY: the caller's contract.
    unsafe { sort_runs::<TH>(a, n, u32::MAX) }
}

/// [`sort_block`]'s network stopped at merges of `run` entries: every run of
/// `run` entries of `a[..n]` (at multiples of `run`; a power of two at least
/// 64, or `u32::MAX` for one run) sorted. Same contract as [`sort_block`].
#[inline(always)]
unsafe fn sort_runs<const TH: u32>(a: *mut u64, n: u32, run: u32) {
    if n < 2 {
        return;
    }
    if n <= 32 {
        // SAFETY: the caller's contract.
        unsafe {
            sort_warp(a, n);
            sync();
        }
        return;
    }
    let t = tid();
    // SAFETY: every index stays below n; chunk_pass is reached by full warps.
    unsafe {
        chunk_pass::<TH>(a, n, true);
        sync();
        let p = n.next_power_of_two();
        let mut size = 2 * CHUNK;
        while size <= p.min(run) {
            // The merge's first stage pairs mirrored positions (mask size - 1),
            // then strides halve; `top` is the mask's highest bit.
            let (mut mask, mut top) = (size - 1, size / 2);
            while mask >= CHUNK {
                let mut j = t;
                while j < p / 2 {
                    let lo = ((j & !(top - 1)) << 1) | (j & (top - 1));
                    compare_exchange(a, n, lo, lo ^ mask);
                    j += TH;
                }
                sync();
                top /= 2;
                mask = top;
            }
            chunk_pass::<TH>(a, n, false);
            sync();
            size *= 2;
        }
    }
}

/// The runs of [`select_smallest`] that keep the best `keep`: 32 (a warp's
/// lanes) for a `keep` of at most 32, else `keep` rounded up to a power of
/// two, at least a chunk.
#[inline(always)]
pub fn selection_run(keep: u32) -> u32 {
    if keep <= 32 {
        32
    } else {
        keep.next_power_of_two().max(CHUNK)
    }
}

/// Leave the `run` smallest entries of `a[..n]` sorted in `a[..min(n, run)]`
/// (`run` 32, or a power of two at least 64; the rest of `a[..n]` is left in no
/// particular order), without sorting all of them: runs of `run` entries are
/// sorted, then folded pairwise ([`fold_runs`]) until one holds the smallest.
/// For 1,500 entries and `run = 256`, a third fewer compare-exchanges than
/// [`sort_block`] and fewer barriers. Same contract as [`sort_block`].
#[inline(always)]
pub unsafe fn select_smallest<const TH: u32>(a: *mut u64, n: u32, run: u32) {
    // SAFETY: the caller's contract.
    unsafe {
        if run == 32 {
            select_smallest_lanes::<TH>(a, n);
            return;
        }
        if run == CHUNK {
            select_smallest_pairs::<TH>(a, n);
            return;
        }
        sort_runs::<TH>(a, n, run);
        let mut gap = run;
        while gap < n {
            fold_runs::<TH>(a, n, run, gap);
            gap *= 2;
        }
    }
}

/// One level of [`select_smallest`]: for every `b` a multiple of `2 gap`
/// whose partner run at `b + gap` starts below `n`, entry `p` of the sorted
/// run at `b` keeps the smaller of itself and entry `run - 1 - p` of the
/// sorted partner. That leaves the `run` smallest of both as a bitonic
/// sequence, which half-cleaners of strides `run / 2` to 1 sort. Runs without
/// a partner are sorted already and stay so. The partner runs are left as
/// they were (their entries are not needed again).
#[inline(always)]
unsafe fn fold_runs<const TH: u32>(a: *mut u64, n: u32, run: u32, gap: u32) {
    let t = tid();
    let step = 2 * gap;
    let runs = n.div_ceil(step);
    let run_log = run.trailing_zeros();
    // SAFETY: every index stays below n; chunk_pass_runs is reached by full
    // warps.
    unsafe {
        let mut j = t;
        while j < runs * run {
            let b = (j >> run_log) * step;
            let p = j & (run - 1);
            let hi = b + gap + run - 1 - p;
            if hi < n {
                let lo = b + p;
                let y = *a.add(hi as usize);
                if y < *a.add(lo as usize) {
                    *a.add(lo as usize) = y;
                }
            }
            j += TH;
        }
        sync();
        let half = run / 2;
        let mut stride = half;
        while stride >= CHUNK {
            let mut j = t;
            while j < runs * half {
                let b = (j >> (run_log - 1)) * step;
                let q = j & (half - 1);
                let lo = b + (((q & !(stride - 1)) << 1) | (q & (stride - 1)));
                compare_exchange(a, n, lo, lo + stride);
                j += TH;
            }
            sync();
            stride /= 2;
        }
        chunk_pass_runs::<TH>(a, n, run, step);
        sync();
    }
}

/// The half-cleaners of strides 32 to 1 ([`chunk_pass`] without `full`) on
/// the chunks of the runs of `run` entries that start at multiples of `step`
/// (`run <= step`, both powers of two at least 64) only.
#[inline(always)]
unsafe fn chunk_pass_runs<const TH: u32>(a: *mut u64, n: u32, run: u32, step: u32) {
    let (lane, warp) = (lane(), tid() >> 5);
    let chunks_per_run_log = (run / CHUNK).trailing_zeros();
    let mut c = warp;
    loop {
        let base = (c >> chunks_per_run_log) * step + (c & ((run / CHUNK) - 1)) * CHUNK;
        if base >= n {
            break;
        }
        // SAFETY: full warps; indices below n are inside the caller's buffer.
        unsafe {
            let (mut x0, mut x1) = load_chunk(a, n, base, lane);
            half_clean(&mut x0, &mut x1, lane);
            store_chunk(a, n, base, lane, x0, x1);
        }
        c += TH / 32;
    }
}
