//! Kernels around the cuBLAS products: bias subtraction (in place, or into
//! another buffer for the search's centred queries), row norms and the
//! running top-k of a tile of dot products (exact brute force, exact rows).
//!
//! Safety contract of the `unsafe fn`s here: see [`crate::prims`].

use core::intrinsics::gpu::gpu_launch_sized_workgroup_mem;
use core::mem::MaybeUninit;

use crate::block_sort::{bitonic_sort, sort_prefix};
use crate::layout::*;
use crate::prims::*;

/// `x[i][j] -= bias[j]` for an `n x m` row-major matrix.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn sub_bias(x: *mut f32, n: u32, m: u32, bias: *const f32) {
    // SAFETY: the caller's sizes; in place, each value read before written.
    unsafe { sub_bias_at(x, x, n, m, bias) }
}

/// `out[i][j] = x[i][j] - bias[j]` for `n x m` row-major matrices (the
/// search centres a batch of queries before TF32 products).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn sub_bias_into(
    x: *const f32,
    out: *mut f32,
    n: u32,
    m: u32,
    bias: *const f32,
) {
    // SAFETY: the caller's sizes.
    unsafe { sub_bias_at(x, out, n, m, bias) }
}

/// One thread's value of [`sub_bias`] / [`sub_bias_into`].
///
/// # Safety
/// `x` and `out` hold `n * m` values (they may be the same buffer), `bias`
/// holds `m`.
#[inline(always)]
unsafe fn sub_bias_at(x: *const f32, out: *mut f32, n: u32, m: u32, bias: *const f32) {
    let g = bid() as u64 * T as u64 + tid() as u64;
    if g < n as u64 * m as u64 {
        // SAFETY: g < n * m; bias has m values.
        unsafe { *out.add(g as usize) = *x.add(g as usize) - *bias.add((g % m as u64) as usize) };
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

/// New entries of a tile up to which `topk_tile` merges them into the running
/// list by counted ranks instead of sorting both together.
const RANK_MERGE_MAX: u32 = 256;

/// Running top-k of a tile: query `q` (one block each) scores tile columns
/// `t < nt` as `norms[t] - 2 dots[q][t]` (`dots` is `nq x nt`, row-major), ids
/// `tile_base + t`, skipping id `self_base + q` (exact rows exclude the vector
/// itself; pass `u32::MAX` to keep all), and merges them into `best[q][..k]`
/// (sorted candidates, `u64::MAX` when empty).
///
/// Each thread keeps its own top-k. Only entries no worse than the running
/// k-th best can make the result; when those are too many for the candidate
/// buffer (the first tiles), the bound tightens to the k-th smallest of the
/// threads' minima, and when even those are too many (many equal distances), a
/// bisection over the candidate keys finds the exact k-th smallest first.
/// A few new entries (the later tiles) merge into the running list by rank.
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
        // This thread's best entries, sorted, `local[..filled]` initialised.
        // Nothing is written before a first insert: once the running list is
        // full, most threads insert nothing and touch no local memory at all.
        let mut local = [const { MaybeUninit::<u64>::uninit() }; MAX_TOPK as usize];
        let mut filled = 0usize;
        let mut worst = prev_worst;
        let row = dots.add(q as usize * nt as usize);
        let insert = |v: u64,
                      local: &mut [MaybeUninit<u64>; MAX_TOPK as usize],
                      filled: &mut usize,
                      worst: &mut u64| {
            let mut p = if *filled < ku {
                *filled += 1;
                *filled - 1
            } else {
                ku - 1
            };
            // SAFETY: entries below `filled` are initialised.
            while p > 0 && unsafe { local[p - 1].assume_init() } > v {
                local[p] = local[p - 1];
                p -= 1;
            }
            local[p] = MaybeUninit::new(v);
            if *filled == ku {
                // SAFETY: all ku entries are initialised.
                *worst = unsafe { local[ku - 1].assume_init() }.min(prev_worst);
            }
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
                    insert(x, &mut local, &mut filled, &mut worst);
                }
            }
            c += 4 * T;
        }
        let smem = gpu_launch_sized_workgroup_mem::<u64>();
        let mins = smem;
        let counter = smem.add(T as usize) as *mut u32;
        let cand = smem.add(T as usize + 2);
        // SAFETY: entries below `filled` are initialised.
        let entries = || local[..filled].iter().map(|v| unsafe { v.assume_init() });
        // How many local entries are <= `x`, over the block.
        let block_count = |x: u64| -> u32 {
            sync();
            if t == 0 {
                core::ptr::write_volatile(counter, 0);
            }
            sync();
            let mine = entries().filter(|v| *v <= x).count() as u32;
            if mine > 0 {
                add_shared(counter, mine);
            }
            sync();
            core::ptr::read_volatile(counter)
        };
        // Once the running list is full, its worst entry bounds the
        // candidates, and few entries of a new tile pass it: sort only those.
        let mut threshold = prev_worst;
        if block_count(threshold) + k > TOPK_CANDIDATES {
            // Too many (the first tiles): the k-th smallest thread minimum.
            *mins.add(t as usize) = entries().next().unwrap_or(u64::MAX);
            sync();
            bitonic_sort(mins, T);
            threshold = (*mins.add(ku - 1)).min(prev_worst);
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
        }
        sync();
        if t == 0 {
            core::ptr::write_volatile(counter, 0);
        }
        sync();
        for v in entries() {
            if v <= threshold {
                let pos = add_shared(counter, 1);
                *cand.add(pos as usize) = v;
            }
        }
        // The running list, sorted, beside the new entries (`mins` is free).
        let old = mins;
        let mut j = t;
        while j < k {
            *old.add(j as usize) = *own.add(j as usize);
            j += T;
        }
        sync();
        let m = core::ptr::read_volatile(counter);
        if m == 0 {
            return;
        }
        if m <= RANK_MERGE_MAX {
            // Keys are unique (ids differ) and the running list is sorted:
            // each entry's place in the merged list is its rank, counted
            // directly; no sort, no further barrier.
            let below_new = |x: u64| (0..m).filter(|&i| *cand.add(i as usize) < x).count() as u32;
            let mut j = t;
            while j < k {
                let v = *old.add(j as usize);
                let pos = j + below_new(v);
                if pos < k {
                    *own.add(pos as usize) = v;
                }
                j += T;
            }
            let mut i = t;
            while i < m {
                let v = *cand.add(i as usize);
                let (mut lo, mut hi) = (0u32, k);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if *old.add(mid as usize) < v {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                let pos = lo + below_new(v);
                if pos < k {
                    *own.add(pos as usize) = v;
                }
                i += T;
            }
            return;
        }
        let mut j = t;
        while j < k {
            let v = *old.add(j as usize);
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
