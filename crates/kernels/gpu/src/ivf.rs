//! The inverted file over one copy's projection that finds each stored
//! fragment's ripple by the paper's rule (the `l` base vectors nearest to the
//! fragment's centre): row gathers for the k-means sample, the nearest
//! centroids of many rows (list assignment and probes), fragment centres, and
//! the scan of a centre's probed lists. The host side is
//! `octex_kernels::ivf`; the CPU twin is `octex-build`'s `centre_knn`.
//!
//! Safety contract of the `unsafe fn`s here: see [`crate::prims`]; the host
//! sizes every buffer as each kernel's doc says.

use core::intrinsics::gpu::gpu_launch_sized_workgroup_mem;

use crate::block_sort::sort_prefix;
use crate::e8::decode_e8;
use crate::layout::{IVF_CENTROID_TILE, IVF_MAX_DIM, IVF_MAX_PROBES};
use crate::prims::*;

#[inline(always)]
fn gid() -> u64 {
    bid() as u64 * T as u64 + tid() as u64
}

/// `dst[r] = src[idx[r]]` for `count` rows of `dim` values.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn gather_rows(
    src: *const f32,
    dim: u32,
    idx: *const u32,
    count: u32,
    dst: *mut f32,
) {
    let g = gid();
    if g < count as u64 * dim as u64 {
        let (r, j) = (g / dim as u64, g % dim as u64);
        // SAFETY: r < count; idx values are rows of src.
        unsafe {
            let s = *idx.add(r as usize) as u64;
            *dst.add(g as usize) = *src.add((s * dim as u64 + j) as usize);
        }
    }
}

/// The `p` centroids nearest to each of `n` rows (`rows`: `n x dim`), nearest
/// first (ties: smaller index), into `out` (`n x p`): one thread per row,
/// centroids (`k x dim`, squared norms `cnorms`) staged through shared memory
/// [`IVF_CENTROID_TILE`] at a time. Shared memory: `IVF_CENTROID_TILE x (dim +
/// 1)` f32. `dim <= IVF_MAX_DIM`, `p <= IVF_MAX_PROBES`, `p <= k`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn nearest_centroids(
    rows: *const f32,
    n: u32,
    dim: u32,
    centroids: *const f32,
    cnorms: *const f32,
    k: u32,
    p: u32,
    out: *mut u32,
) {
    // SAFETY: as documented.
    unsafe {
        let smem = gpu_launch_sized_workgroup_mem::<f32>();
        let tile = smem;
        let tile_norms = smem.add((IVF_CENTROID_TILE * dim) as usize);
        let i = bid() * T + tid();
        let live = i < n;
        let d = dim as usize;
        let mut row = [0f32; IVF_MAX_DIM as usize];
        if live {
            for (j, r) in row.iter_mut().enumerate().take(d) {
                *r = *rows.add(i as usize * d + j);
            }
        }
        let pu = p as usize;
        let mut best = [u64::MAX; IVF_MAX_PROBES as usize];
        let mut start = 0;
        while start < k {
            let count = (k - start).min(IVF_CENTROID_TILE);
            let mut e = tid();
            while e < count * dim {
                *tile.add(e as usize) = *centroids.add((start * dim + e) as usize);
                e += T;
            }
            let mut e = tid();
            while e < count {
                *tile_norms.add(e as usize) = *cnorms.add((start + e) as usize);
                e += T;
            }
            sync();
            if live {
                for c in 0..count as usize {
                    let cr = tile.add(c * d);
                    let mut dot = 0.0f32;
                    for (j, r) in row.iter().enumerate().take(d) {
                        dot += r * *cr.add(j);
                    }
                    let key = candidate(*tile_norms.add(c) - 2.0 * dot, start + c as u32);
                    if key < best[pu - 1] {
                        let mut at = pu - 1;
                        while at > 0 && best[at - 1] > key {
                            best[at] = best[at - 1];
                            at -= 1;
                        }
                        best[at] = key;
                    }
                }
            }
            sync();
            start += count;
        }
        if live {
            for (j, b) in best.iter().enumerate().take(pu) {
                *out.add(i as usize * pu + j) = *b as u32;
            }
        }
    }
}

/// The centre (in the copy's projection, unscaled) of each of `count` stored
/// fragments, from its first member `perm[frag_start[f]]` at this spacing, as
/// the CPU's `CopyMap::centre`: one thread per (fragment, 8-d block). `out` is
/// `count x 8 blocks`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn fragment_centres(
    z: *const f32,
    blocks: u32,
    shift: *const f32,
    inv_spacing: f32,
    spacing: f32,
    perm: *const u32,
    frag_start: *const u32,
    count: u32,
    out: *mut f32,
) {
    let g = gid();
    if g >= count as u64 * blocks as u64 {
        return;
    }
    let (f, b) = ((g / blocks as u64) as usize, (g % blocks as u64) as usize);
    let cd = 8 * blocks as usize;
    // SAFETY: f < count; perm and frag_start as the builder's level holds them.
    unsafe {
        let first = *perm.add(*frag_start.add(f) as usize) as usize;
        let row = z.add(first * cd + 8 * b);
        let sh = shift.add(8 * b);
        let y: [f32; 8] = core::array::from_fn(|j| *row.add(j) * inv_spacing + *sh.add(j));
        let (pt, _) = decode_e8(&y);
        for (j, &c) in pt.iter().enumerate() {
            *out.add(f * cd + 8 * b + j) = (c as f32 * 0.5 - *sh.add(j)) * spacing;
        }
    }
}

/// The `l` base vectors nearest to each of `count` centres (`centres`:
/// `count x dim`), nearest first (ties: smaller id), `PAD_ID` where fewer were
/// found, into `out` (`count x l`): block `b` takes centre `order[b]` and
/// scans the `p` lists its `probes` row names (`list_offsets`, `list_ids`: the
/// vectors of list `j` are `list_ids[list_offsets[j]..list_offsets[j + 1]]`,
/// rows of `z`). An `order` that groups centres by their nearest list lets
/// blocks that run together read the same lists from L2.
///
/// Each thread scores one vector per step; only keys below the running `l`-th
/// best enter a shared buffer of `2 T`, merged with the best by a bitonic sort
/// when it could overflow. Shared memory: `dim` f32, one counter (u32, padded
/// to 8 bytes), then `next_power_of_two(l + 2 T)` u64.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn ivf_scan(
    z: *const f32,
    dim: u32,
    list_offsets: *const u32,
    list_ids: *const u32,
    centres: *const f32,
    probes: *const u32,
    p: u32,
    order: *const u32,
    l: u32,
    out: *mut u32,
) {
    // SAFETY: as documented; every id in list_ids is a row of z, order holds
    // one centre per block.
    unsafe {
        let t = tid();
        let c = *order.add(bid() as usize) as usize;
        let d = dim as usize;
        let smem = gpu_launch_sized_workgroup_mem::<u64>();
        let centre = smem as *mut f32;
        // `dim` is even (8 per block): the counter sits in the u64 after the centre.
        let counter = (smem as *mut u32).add(d);
        let all = smem.add(d / 2 + 1);
        let buffer = all.add(l as usize);
        let mut e = t;
        while e < dim {
            *centre.add(e as usize) = *centres.add(c * d + e as usize);
            e += T;
        }
        let mut e = t;
        while e < l {
            *all.add(e as usize) = u64::MAX;
            e += T;
        }
        if t == 0 {
            *counter = 0;
        }
        sync();
        let mut worst = u64::MAX;
        for q in 0..p as usize {
            let list = *probes.add(c * p as usize + q) as usize;
            let (a, b) = (*list_offsets.add(list), *list_offsets.add(list + 1));
            let mut base = a;
            while base < b {
                let i = base + t;
                if i < b {
                    let id = *list_ids.add(i as usize);
                    let row = z.add(id as usize * d);
                    let mut acc = 0.0f32;
                    for j in 0..d {
                        let e = *row.add(j) - *centre.add(j);
                        acc += e * e;
                    }
                    let key = candidate(acc, id);
                    if key < worst {
                        let at = add_shared(counter, 1);
                        *buffer.add(at as usize) = key;
                    }
                }
                sync();
                let filled = core::ptr::read_volatile(counter);
                // Every thread reads the count before any thread of the next
                // chunk adds to it: the merge decision (which holds barriers)
                // must be the same in every thread.
                sync();
                if filled > T {
                    worst = merge(all, l, filled, counter);
                }
                base += T;
            }
        }
        let filled = core::ptr::read_volatile(counter);
        if filled > 0 {
            merge(all, l, filled, counter);
        }
        let dst = out.add(c * l as usize);
        let mut e = t;
        while e < l {
            let v = *all.add(e as usize);
            *dst.add(e as usize) = if v == u64::MAX { PAD_ID } else { v as u32 };
            e += T;
        }
    }
}

/// Sort the best `l` and the `filled` buffered keys behind them together,
/// keep the first `l`, empty the buffer; returns the new `l`-th best. Every
/// thread calls it (after a barrier).
#[inline(always)]
unsafe fn merge(all: *mut u64, l: u32, filled: u32, counter: *mut u32) -> u64 {
    // SAFETY: `all` holds next_power_of_two(l + 2 T) >= l + filled keys.
    unsafe {
        sort_prefix(all, l + filled);
        let worst = *all.add(l as usize - 1);
        sync();
        if tid() == 0 {
            *counter = 0;
        }
        sync();
        worst
    }
}
