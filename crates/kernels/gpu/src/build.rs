//! The GPU builder's kernels: fragment keys of one copy, the segments of the
//! sorted members (fragments), their ripples, the completion of short
//! fragments from the coarser spacing, key-table inserts and the int8 sketch.
//! The sort between `ripple_keys` and `segment_heads` is [`crate::sort`]'s.
//!
//! Every kernel mirrors a step of the CPU builder (`octex-build`'s `ripples`
//! and `sketch` modules) with the same arithmetic, so the same projected
//! coordinates give the same ripples.
//!
//! Safety contract of the `unsafe fn`s here: see [`crate::prims`]; the host
//! sizes every buffer as each kernel's doc says.

use core::arch::asm;
use core::intrinsics::gpu::gpu_launch_sized_workgroup_mem;

use crate::e8::decode_e8;
use crate::key::KeyHasher;
use crate::layout::{NO_FRAGMENT, PARENT_CANDIDATES, RippleLevel};
use crate::prims::*;
use octex_core::distance::squared_l2;

#[inline(always)]
fn gid() -> u64 {
    bid() as u64 * T as u64 + tid() as u64
}

/// Key, check word and centre distance (f32 bits) of every vector's fragment:
/// `z` is `n x 8 * blocks` (one copy's projection), `shift` that copy's shift.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn ripple_keys(
    z: *const f32,
    n: u32,
    blocks: u32,
    shift: *const f32,
    inv_spacing: f32,
    keys: *mut u64,
    checks: *mut u64,
    dists: *mut u32,
) {
    let i = gid();
    if i >= n as u64 {
        return;
    }
    let cd = 8 * blocks as usize;
    let mut key = KeyHasher::for_key(cd);
    let mut check = KeyHasher::for_check(cd);
    let mut total = 0.0f32;
    // SAFETY: row i of z and shift hold cd values; outputs n each.
    unsafe {
        let row = z.add(i as usize * cd);
        for b in 0..blocks as usize {
            let o = 8 * b;
            let y: [f32; 8] =
                core::array::from_fn(|j| *row.add(o + j) * inv_spacing + *shift.add(o + j));
            let (p, d) = decode_e8(&y);
            for j in 0..4 {
                key.push_pair(p[2 * j], p[2 * j + 1]);
                check.push_pair(p[2 * j], p[2 * j + 1]);
            }
            total += d;
        }
        *keys.add(i as usize) = key.finish_key();
        *checks.add(i as usize) = check.finish();
        *dists.add(i as usize) = total.to_bits();
    }
}

/// Whether sorted position `i` starts a fragment (its key differs from the
/// previous position's).
#[inline(always)]
unsafe fn is_head(perm: *const u32, keys: *const u64, i: usize) -> bool {
    // SAFETY: i < n; perm holds ids of keys.
    unsafe { i == 0 || *keys.add(*perm.add(i) as usize) != *keys.add(*perm.add(i - 1) as usize) }
}

/// `flags[i] = 1` where sorted position `i` starts a fragment.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn segment_heads(
    perm: *const u32,
    n: u32,
    keys: *const u64,
    flags: *mut u32,
) {
    let i = gid();
    if i < n as u64 {
        // SAFETY: flags has n values.
        unsafe { *flags.add(i as usize) = is_head(perm, keys, i as usize) as u32 };
    }
}

/// The fragment (segment) of sorted position `i`, from the scanned head flags.
#[inline(always)]
unsafe fn segment_of(
    perm: *const u32,
    keys: *const u64,
    heads_scanned: *const u32,
    i: usize,
) -> usize {
    // SAFETY: i < n.
    unsafe { (*heads_scanned.add(i) + is_head(perm, keys, i) as u32 - 1) as usize }
}

/// `starts[f]` = first sorted position of fragment `f`, and `starts[F] = n`
/// (`starts` holds `F + 1` values, F the number of fragments).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn segment_starts(
    perm: *const u32,
    n: u32,
    keys: *const u64,
    heads_scanned: *const u32,
    starts: *mut u32,
) {
    let i = gid() as usize;
    if i >= n as usize {
        return;
    }
    // SAFETY: as documented.
    unsafe {
        let head = is_head(perm, keys, i);
        if head {
            *starts.add(*heads_scanned.add(i) as usize) = i as u32;
        }
        if i + 1 == n as usize {
            *starts.add((*heads_scanned.add(i) + head as u32) as usize) = n;
        }
    }
}

/// `bad[f] = 1` when a member of fragment `f` disagrees with its first member
/// on the check word (two fragments share the key).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn segment_collisions(
    perm: *const u32,
    n: u32,
    keys: *const u64,
    checks: *const u64,
    heads_scanned: *const u32,
    starts: *const u32,
    bad: *mut u32,
) {
    let i = gid() as usize;
    if i >= n as usize {
        return;
    }
    // SAFETY: as documented; bad has one value per fragment.
    unsafe {
        let f = segment_of(perm, keys, heads_scanned, i);
        let first = *perm.add(*starts.add(f) as usize) as usize;
        if *checks.add(*perm.add(i) as usize) != *checks.add(first) {
            *bad.add(f) = 1;
        }
    }
}

#[inline(always)]
unsafe fn stored(starts: *const u32, bad: *const u32, f: usize, pmin: u32) -> bool {
    // SAFETY: f < F.
    unsafe { *starts.add(f + 1) - *starts.add(f) >= pmin && *bad.add(f) == 0 }
}

/// `keep[f] = 1` for fragments that get a ripple (at least `pmin` members, no
/// collision); `stats[0]` counts the collisions among the large-enough ones.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fragment_keep(
    starts: *const u32,
    fragments: u32,
    pmin: u32,
    bad: *const u32,
    keep: *mut u32,
    stats: *mut u32,
) {
    let f = gid() as usize;
    if f >= fragments as usize {
        return;
    }
    // SAFETY: as documented.
    unsafe {
        let keepit = stored(starts, bad, f, pmin);
        *keep.add(f) = keepit as u32;
        if !keepit && *bad.add(f) != 0 && *starts.add(f + 1) - *starts.add(f) >= pmin {
            add_global_u32(stats, 1);
        }
    }
}

/// For each stored fragment `o = keep_scanned[f]`: its key, first sorted
/// position and size, and its ripple (the first `l` members, padded); short
/// ones (fewer than `l` members) are appended to `short_list` (count in
/// `stats[1]`).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn ripple_take(
    perm: *const u32,
    keys: *const u64,
    starts: *const u32,
    fragments: u32,
    pmin: u32,
    bad: *const u32,
    keep_scanned: *const u32,
    l: u32,
    frag_keys: *mut u64,
    frag_start: *mut u32,
    frag_size: *mut u32,
    ripples: *mut u32,
    short_list: *mut u32,
    stats: *mut u32,
) {
    let f = gid() as usize;
    if f >= fragments as usize {
        return;
    }
    // SAFETY: as documented; outputs sized for the stored fragments.
    unsafe {
        if !stored(starts, bad, f, pmin) {
            return;
        }
        let o = *keep_scanned.add(f) as usize;
        let start = *starts.add(f);
        let size = *starts.add(f + 1) - start;
        *frag_keys.add(o) = *keys.add(*perm.add(start as usize) as usize);
        *frag_start.add(o) = start;
        *frag_size.add(o) = size;
        let row = ripples.add(o * l as usize);
        for j in 0..l {
            *row.add(j as usize) = if j < size {
                *perm.add((start + j) as usize)
            } else {
                PAD_ID
            };
        }
        if size < l {
            let at = add_global_u32(stats.add(1), 1);
            *short_list.add(at as usize) = o as u32;
        }
    }
}

/// `vec_ord[id]` = the stored fragment of vector `id` at this spacing, or
/// `NO_FRAGMENT` (what a finer spacing's completion looks its parent up by).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn vector_fragments(
    perm: *const u32,
    n: u32,
    keys: *const u64,
    heads_scanned: *const u32,
    starts: *const u32,
    bad: *const u32,
    pmin: u32,
    keep_scanned: *const u32,
    vec_ord: *mut u32,
) {
    let i = gid() as usize;
    if i >= n as usize {
        return;
    }
    // SAFETY: as documented; vec_ord has n values.
    unsafe {
        let f = segment_of(perm, keys, heads_scanned, i);
        *vec_ord.add(*perm.add(i) as usize) = if stored(starts, bad, f, pmin) {
            *keep_scanned.add(f)
        } else {
            NO_FRAGMENT
        };
    }
}

/// Completes short fragment `short_list[block]` of `this` (one block each):
/// its members and up to `PARENT_CANDIDATES` members of its parent (the
/// fragment of its first member at the coarser spacing, `parent`; its
/// completed ripple when the parent is short itself) ranked by distance to
/// the short fragment's centre, the nearest `l` kept. `parent.perm` is null at
/// the coarsest spacing. Shared memory: `8 * blocks` f32, then
/// `l + max(PARENT_CANDIDATES, l)` (id, distance) pairs and a counter.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "ptx-kernel" fn complete_short(
    z: *const f32,
    blocks: u32,
    shift: *const f32,
    inv_spacing: f32,
    spacing: f32,
    l: u32,
    short_list: *const u32,
    this: RippleLevel,
    parent: RippleLevel,
) {
    // SAFETY: as documented; every id is < n and rows of z hold 8 * blocks values.
    unsafe {
        let t = tid();
        let cd = 8 * blocks;
        let smem = gpu_launch_sized_workgroup_mem::<u32>();
        let centre = smem as *mut f32;
        let cap = l + PARENT_CANDIDATES.max(l);
        let cand_id = smem.add(cd as usize);
        let cand_d = smem.add((cd + cap) as usize);
        let counter = smem.add((cd + 2 * cap) as usize);
        let this_perm = this.perm as *const u32;
        let this_ripples = this.ripples as *mut u32;
        let (p_perm, p_start, p_size) = (
            parent.perm as *const u32,
            parent.frag_start as *const u32,
            parent.frag_size as *const u32,
        );
        let (p_ripples, p_ord) = (parent.ripples as *const u32, parent.vec_ord as *const u32);
        let o = *short_list.add(bid() as usize) as usize;
        let start = *(this.frag_start as *const u32).add(o);
        let size = *(this.frag_size as *const u32).add(o);
        let first = *this_perm.add(start as usize);
        if t < blocks {
            let row = z.add(first as usize * cd as usize + 8 * t as usize);
            let sh = shift.add(8 * t as usize);
            let y: [f32; 8] = core::array::from_fn(|j| *row.add(j) * inv_spacing + *sh.add(j));
            let (p, _) = decode_e8(&y);
            for (j, &c) in p.iter().enumerate() {
                *centre.add(8 * t as usize + j) = (c as f32 * 0.5 - *sh.add(j)) * spacing;
            }
        }
        let mut j = t;
        while j < size {
            *cand_id.add(j as usize) = *this_perm.add((start + j) as usize);
            j += T;
        }
        if t == 0 {
            *counter = 0;
        }
        sync();
        if parent.perm != 0 {
            let po = *p_ord.add(first as usize);
            if po != NO_FRAGMENT {
                let psize = *p_size.add(po as usize);
                let (pool, len) = if psize >= l {
                    (
                        p_perm.add(*p_start.add(po as usize) as usize),
                        psize.min(PARENT_CANDIDATES),
                    )
                } else {
                    (p_ripples.add(po as usize * l as usize), l)
                };
                let mut j = t;
                while j < len {
                    let id = *pool.add(j as usize);
                    let mut own = id == PAD_ID;
                    for m in 0..size {
                        own |= *cand_id.add(m as usize) == id;
                    }
                    if !own {
                        let at = add_shared(counter, 1);
                        *cand_id.add((size + at) as usize) = id;
                    }
                    j += T;
                }
            }
        }
        sync();
        let count = size + core::ptr::read_volatile(counter);
        let mut c = t;
        while c < count {
            let row = z.add(*cand_id.add(c as usize) as usize * cd as usize);
            // The CPU's rule and summation order (octex_core::distance). The
            // row holds cd values of z; the centre, cd of shared memory.
            let d = squared_l2(
                core::slice::from_raw_parts(row, cd as usize),
                core::slice::from_raw_parts(centre, cd as usize),
            );
            *cand_d.add(c as usize) = d.to_bits();
            c += T;
        }
        sync();
        let out = this_ripples.add(o * l as usize);
        let mut c = t;
        while c < count {
            let me = ((*cand_d.add(c as usize) as u64) << 32) | *cand_id.add(c as usize) as u64;
            let mut rank = 0;
            for q in 0..count as usize {
                let other = ((*cand_d.add(q) as u64) << 32) | *cand_id.add(q) as u64;
                rank += (other < me) as u32;
            }
            if rank < l {
                *out.add(rank as usize) = *cand_id.add(c as usize);
            }
            c += T;
        }
        let mut j = count + t;
        while j < l {
            *out.add(j as usize) = PAD_ID;
            j += T;
        }
    }
}

/// Insert `keys[..count]` (ordinal = position) into an open-addressing table
/// of `mask + 1` slots (filled with `EMPTY_KEY` beforehand) by linear probing,
/// as `octex_index::table` looks them up.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn table_insert(
    keys: *const u64,
    count: u32,
    slot_keys: *mut u64,
    slot_ids: *mut u32,
    mask: u64,
) {
    let i = gid();
    if i >= count as u64 {
        return;
    }
    // SAFETY: the table has mask + 1 slots, at least twice the keys.
    unsafe {
        let k = *keys.add(i as usize);
        let mut s = k & mask;
        loop {
            if cas_global_u64(slot_keys.add(s as usize), crate::key::EMPTY_KEY, k)
                == crate::key::EMPTY_KEY
            {
                *slot_ids.add(s as usize) = i as u32;
                return;
            }
            s = (s + 1) & mask;
        }
    }
}

/// Make a table's layout independent of the insertion order: every cluster
/// (maximal run of used slots) is re-ordered by (home slot relative to the
/// cluster's start, key), one thread per cluster. The set of used slots of a
/// linear-probing table does not depend on the order of insertion, and in this
/// order every key still sits at or after its home slot with no free slot
/// between, so lookups find it; the same keys give the same bytes every run.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn table_canonical(
    slot_keys: *mut u64,
    slot_ids: *mut u32,
    mask: u64,
) {
    let s = gid();
    if s > mask {
        return;
    }
    let empty = crate::key::EMPTY_KEY;
    // SAFETY: mask + 1 slots; the table has free slots (load <= 0.5).
    unsafe {
        let at = |i: u64| (s + i) & mask;
        if *slot_keys.add(s as usize) == empty
            || *slot_keys.add(((s + mask) & mask) as usize) != empty
        {
            return;
        }
        let mut len = 0u64;
        while *slot_keys.add(at(len) as usize) != empty {
            len += 1;
        }
        let order = |k: u64| ((k.wrapping_sub(s)) & mask, k);
        // Insertion sort of the cluster, ids moving with their keys.
        for i in 1..len {
            let (k, id) = (
                *slot_keys.add(at(i) as usize),
                *slot_ids.add(at(i) as usize),
            );
            let mut j = i;
            while j > 0 && order(*slot_keys.add(at(j - 1) as usize)) > order(k) {
                *slot_keys.add(at(j) as usize) = *slot_keys.add(at(j - 1) as usize);
                *slot_ids.add(at(j) as usize) = *slot_ids.add(at(j - 1) as usize);
                j -= 1;
            }
            *slot_keys.add(at(j) as usize) = k;
            *slot_ids.add(at(j) as usize) = id;
        }
    }
}

#[inline(always)]
fn trunc(x: f32) -> f32 {
    let r: f32;
    // SAFETY: a register conversion.
    unsafe { asm!("cvt.rzi.f32.f32 {0}, {1};", out(reg32) r, in(reg32) x) };
    r
}

/// The int8 sketch: `out[i][j]` = principal coordinate `j < min(w, m)` of
/// vector `i` (`pcs` is `n x m`) times `inv_scales[j]`, rounded half away from
/// zero and clamped to ±127 (as `f32::round`); 0 for `j >= m`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn sketch_encode(
    pcs: *const f32,
    n: u32,
    m: u32,
    w: u32,
    inv_scales: *const f32,
    out: *mut i8,
) {
    let g = gid();
    if g >= n as u64 * w as u64 {
        return;
    }
    let (i, j) = (g / w as u64, (g % w as u64) as u32);
    // SAFETY: g < n * w; pcs has n * m values, inv_scales w.
    unsafe {
        let q = if j < m {
            let x = *pcs.add((i * m as u64 + j as u64) as usize) * *inv_scales.add(j as usize);
            let r = trunc(x);
            let r = if x - r >= 0.5 {
                r + 1.0
            } else if r - x >= 0.5 {
                r - 1.0
            } else {
                r
            };
            r.clamp(-127.0, 127.0) as i8
        } else {
            0
        };
        *out.add(g as usize) = q;
    }
}

/// `dst[i]` = `src[i]` as f16 bits, rounded to nearest even (the rerank vectors).
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn to_f16(src: *const f32, n: u64, dst: *mut u16) {
    let i = gid();
    if i < n {
        let h: u16;
        // SAFETY: i < n; a register conversion.
        unsafe {
            asm!("cvt.rn.f16.f32 {0}, {1};", out(reg16) h, in(reg32) *src.add(i as usize));
            *dst.add(i as usize) = h;
        }
    }
}
