//! Prefix sums and a stable LSD radix sort of `(u32 key, u32 value)` pairs,
//! 8 bits per pass, for the GPU builder.
//!
//! A sum runs in three launches: `tile_sums` (one total per tile of
//! [`SORT_TILE`] values), `scan_small` (one block scans the totals) and
//! `scan_apply` (each tile scans itself from its offset). A radix pass is
//! `radix_histogram` (digit counts per tile, digit-major), a sum of the counts,
//! and `radix_scatter`, which places each tile's pairs in input order within a
//! digit (warp ballots find the lanes with equal digits), so every pass is stable.
//!
//! Safety contract of the `unsafe fn`s here: see [`crate::prims`]; the host
//! sizes every buffer as each kernel's doc says.

use core::intrinsics::gpu::gpu_launch_sized_workgroup_mem;

use crate::layout::SORT_TILE;
use crate::prims::*;

const ITEMS: u32 = SORT_TILE / T;
const WARPS: u32 = T / 32;

/// `sums[b]` = the sum of tile `b` of `data[..n]`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn tile_sums(data: *const u32, n: u32, sums: *mut u32) {
    // SAFETY: data has n values, sums one per tile; shared scratch T/32 + 1.
    unsafe {
        let base = bid() as u64 * SORT_TILE as u64;
        let mut acc = 0u32;
        for it in 0..ITEMS as u64 {
            let i = base + it * T as u64 + tid() as u64;
            if i < n as u64 {
                acc = acc.wrapping_add(*data.add(i as usize));
            }
        }
        let scratch = gpu_launch_sized_workgroup_mem::<u32>();
        let (_, total) = block_exclusive_scan(acc, scratch);
        if tid() == 0 {
            *sums.add(bid() as usize) = total;
        }
    }
}

/// Exclusive prefix sum of `data[..n]` in place by one block, and the total
/// in `data[n]` (`data` holds `n + 1` values).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn scan_small(data: *mut u32, n: u32) {
    // SAFETY: as documented; shared scratch T/32 + 1.
    unsafe {
        let scratch = gpu_launch_sized_workgroup_mem::<u32>();
        let mut carry = 0u32;
        let mut base = 0u32;
        while base < n {
            // Thread t owns ITEMS consecutive values.
            let start = base as u64 + (tid() * ITEMS) as u64;
            let mut local = [0u32; ITEMS as usize];
            let mut sum = 0u32;
            for (j, v) in local.iter_mut().enumerate() {
                let i = start + j as u64;
                if i < n as u64 {
                    *v = *data.add(i as usize);
                    sum = sum.wrapping_add(*v);
                }
            }
            let (mut run, total) = block_exclusive_scan(sum, scratch);
            run = run.wrapping_add(carry);
            for (j, v) in local.iter().enumerate() {
                let i = start + j as u64;
                if i < n as u64 {
                    *data.add(i as usize) = run;
                    run = run.wrapping_add(*v);
                }
            }
            carry = carry.wrapping_add(total);
            base = base.saturating_add(SORT_TILE);
        }
        if tid() == 0 {
            *data.add(n as usize) = carry;
        }
    }
}

/// Exclusive prefix sum of tile `b` of `data[..n]` in place, starting from
/// `offsets[b]` (the scanned `tile_sums`).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn scan_apply(data: *mut u32, n: u32, offsets: *const u32) {
    // SAFETY: as documented; shared memory SORT_TILE + T/32 + 1 values.
    unsafe {
        let smem = gpu_launch_sized_workgroup_mem::<u32>();
        let scratch = smem.add(SORT_TILE as usize);
        let base = bid() as u64 * SORT_TILE as u64;
        // Coalesced load of the tile, then each thread scans ITEMS in a row.
        for it in 0..ITEMS {
            let j = it * T + tid();
            let i = base + j as u64;
            *smem.add(j as usize) = if i < n as u64 {
                *data.add(i as usize)
            } else {
                0
            };
        }
        sync();
        let own = smem.add((tid() * ITEMS) as usize);
        let mut sum = 0u32;
        for j in 0..ITEMS as usize {
            sum = sum.wrapping_add(*own.add(j));
        }
        let (mut run, _) = block_exclusive_scan(sum, scratch);
        run = run.wrapping_add(*offsets.add(bid() as usize));
        for j in 0..ITEMS as usize {
            let v = *own.add(j);
            *own.add(j) = run;
            run = run.wrapping_add(v);
        }
        sync();
        for it in 0..ITEMS {
            let j = it * T + tid();
            let i = base + j as u64;
            if i < n as u64 {
                *data.add(i as usize) = *smem.add(j as usize);
            }
        }
    }
}

/// `counts[d * tiles + b]` = how many keys of tile `b` have digit `d` at `shift`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn radix_histogram(
    keys: *const u32,
    n: u32,
    shift: u32,
    counts: *mut u32,
    tiles: u32,
) {
    // SAFETY: keys has n values, counts 256 * tiles; shared memory 256 values.
    unsafe {
        let hist = gpu_launch_sized_workgroup_mem::<u32>();
        *hist.add(tid() as usize) = 0;
        sync();
        let base = bid() as u64 * SORT_TILE as u64;
        for it in 0..ITEMS as u64 {
            let i = base + it * T as u64 + tid() as u64;
            if i < n as u64 {
                let d = (*keys.add(i as usize) >> shift) & 255;
                add_shared(hist.add(d as usize), 1);
            }
        }
        sync();
        *counts.add((tid() * tiles + bid()) as usize) = *hist.add(tid() as usize);
    }
}

/// One stable pass: pair `i` of tile `b` goes to `offsets[d * tiles + b]` plus
/// the number of earlier pairs of its tile with the same digit `d`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn radix_scatter(
    keys_in: *const u32,
    values_in: *const u32,
    n: u32,
    shift: u32,
    offsets: *const u32,
    tiles: u32,
    keys_out: *mut u32,
    values_out: *mut u32,
) {
    // SAFETY: as documented; shared memory 256 + WARPS * 256 values.
    unsafe {
        let smem = gpu_launch_sized_workgroup_mem::<u32>();
        let next = smem; // next output position per digit
        let warp_counts = smem.add(256); // [warp][digit]
        let t = tid();
        let (w, l) = (t / 32, lane());
        *next.add(t as usize) = *offsets.add((t * tiles + bid()) as usize);
        for wi in 0..WARPS {
            *warp_counts.add((wi * 256 + t) as usize) = 0;
        }
        sync();
        let base = bid() as u64 * SORT_TILE as u64;
        let lower_lanes = (1u32 << l) - 1;
        for it in 0..ITEMS as u64 {
            let i = base + it * T as u64 + t as u64;
            let valid = i < n as u64;
            let (key, value) = if valid {
                (*keys_in.add(i as usize), *values_in.add(i as usize))
            } else {
                (0, 0)
            };
            let d = (key >> shift) & 255;
            // Lanes of this warp holding a valid pair with the same digit.
            let v_mask = ballot(valid);
            let mut peers = if valid { v_mask } else { !v_mask };
            for b in 0..8 {
                let bit = (d >> b) & 1 == 1;
                let m = ballot(bit);
                peers &= if bit { m } else { !m };
            }
            let before = (peers & lower_lanes).count_ones();
            if valid && before == 0 {
                *warp_counts.add((w * 256 + d) as usize) = peers.count_ones();
            }
            sync();
            // Thread t: digit t's counts over the warps become warp offsets.
            let mut run = 0u32;
            for wi in 0..WARPS {
                let p = warp_counts.add((wi * 256 + t) as usize);
                let c = *p;
                *p = run;
                run += c;
            }
            sync();
            if valid {
                let pos = *next.add(d as usize) + *warp_counts.add((w * 256 + d) as usize) + before;
                *keys_out.add(pos as usize) = key;
                *values_out.add(pos as usize) = value;
            }
            sync();
            *next.add(t as usize) += run;
            for wi in 0..WARPS {
                *warp_counts.add((wi * 256 + t) as usize) = 0;
            }
            sync();
        }
    }
}

/// `out[i] = words[perm[i] * stride + word]`: one 32-bit word of each item, in
/// the order of `perm` (the next key word of a multi-word sort).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn gather_word(
    words: *const u32,
    stride: u32,
    word: u32,
    perm: *const u32,
    n: u32,
    out: *mut u32,
) {
    let i = bid() as u64 * T as u64 + tid() as u64;
    if i < n as u64 {
        // SAFETY: perm has n ids of items of `stride` words.
        unsafe {
            let p = *perm.add(i as usize) as usize;
            *out.add(i as usize) = *words.add(p * stride as usize + word as usize);
        }
    }
}

/// `out[i] = i` for `i < n`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn iota(out: *mut u32, n: u32) {
    let i = bid() * T + tid();
    if i < n {
        // SAFETY: out has n values.
        unsafe { *out.add(i as usize) = i };
    }
}

/// `out[i] = value` for `i < n`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fill_u32(out: *mut u32, n: u64, value: u32) {
    let i = bid() as u64 * T as u64 + tid() as u64;
    if i < n {
        // SAFETY: out has n values.
        unsafe { *out.add(i as usize) = value };
    }
}
