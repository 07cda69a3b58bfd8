//! Device primitives: thread indices, barriers, warp votes and shuffles,
//! shared-memory atomics, read-only 16-byte loads, the block-wide bitonic sort
//! and the candidate encoding shared by the search and the top-k kernels.
//!
//! # Safety (every `unsafe fn` of the kernel crate)
//!
//! Pointers come from the host's views ([`crate::layout::IndexView`],
//! [`crate::layout::BatchView`]) or from this block's dynamic shared memory as
//! [`crate::layout::SearchSmem`] lays it out, and indices stay inside the sizes
//! those describe. Functions that contain a barrier, a warp vote or a shuffle
//! are called by every thread of the block (or warp) on the same path.

use core::arch::asm;
use core::arch::nvptx::{_block_idx_x, _syncthreads, _thread_idx_x};

use crate::layout::f32_order_key;

/// Threads per block of every kernel.
pub const T: u32 = crate::layout::BLOCK_THREADS;
/// The padding id of rows and ripples.
pub const PAD_ID: u32 = u32::MAX;

#[inline(always)]
pub fn tid() -> u32 {
    // SAFETY: reads a special register.
    unsafe { _thread_idx_x() as u32 }
}

#[inline(always)]
pub fn bid() -> u32 {
    // SAFETY: reads a special register.
    unsafe { _block_idx_x() as u32 }
}

#[inline(always)]
pub fn sync() {
    // SAFETY: every call site is reached by all threads of the block.
    unsafe { _syncthreads() }
}

#[inline(always)]
pub unsafe fn ballot(pred: bool) -> u32 {
    let r: u32;
    // SAFETY: all 32 lanes call it (full mask).
    unsafe {
        asm!("{{ .reg .pred p; setp.ne.u32 p, {1}, 0; vote.sync.ballot.b32 {0}, p, 0xffffffff; }}",
             out(reg32) r, in(reg32) pred as u32);
    }
    r
}

#[inline(always)]
pub unsafe fn shfl_xor_f32(v: f32, mask: u32) -> f32 {
    let r: u32;
    // SAFETY: all 32 lanes call it (full mask).
    unsafe {
        asm!("shfl.sync.bfly.b32 {0}, {1}, {2}, 0x1f, 0xffffffff;",
             out(reg32) r, in(reg32) v.to_bits(), in(reg32) mask);
    }
    f32::from_bits(r)
}

/// `v` of lane `src` of the warp.
#[inline(always)]
pub unsafe fn shfl_idx_u32(v: u32, src: u32) -> u32 {
    let r: u32;
    // SAFETY: all 32 lanes call it (full mask).
    unsafe {
        asm!("shfl.sync.idx.b32 {0}, {1}, {2}, 0x1f, 0xffffffff;",
             out(reg32) r, in(reg32) v, in(reg32) src);
    }
    r
}

/// Sum of `v` over each aligned group of `lanes` lanes (a power of two up to
/// 32), returned to every lane of the group.
#[inline(always)]
pub unsafe fn group_sum(mut v: f32, lanes: u32) -> f32 {
    let mut m = lanes / 2;
    while m > 0 {
        // SAFETY: called by full warps; xor with m < lanes stays in the group.
        v += unsafe { shfl_xor_f32(v, m) };
        m >>= 1;
    }
    v
}

/// `v` of lane `lane - delta` (own `v` for the first `delta` lanes).
#[inline(always)]
pub unsafe fn shfl_up_u32(v: u32, delta: u32) -> u32 {
    let r: u32;
    // SAFETY: all 32 lanes call it (full mask).
    unsafe {
        asm!("shfl.sync.up.b32 {0}, {1}, {2}, 0, 0xffffffff;",
             out(reg32) r, in(reg32) v, in(reg32) delta);
    }
    r
}

/// Lane index within the warp.
#[inline(always)]
pub fn lane() -> u32 {
    tid() & 31
}

/// Block-wide exclusive prefix sum of one value per thread, and the block
/// total. `scratch` holds `T / 32 + 1` values of shared memory; all threads call it.
#[inline(always)]
pub unsafe fn block_exclusive_scan(v: u32, scratch: *mut u32) -> (u32, u32) {
    let (t, l) = (tid(), lane());
    let mut x = v;
    let mut o = 1;
    while o < 32 {
        // SAFETY: full warps (T is a multiple of 32).
        let y = unsafe { shfl_up_u32(x, o) };
        if l >= o {
            x += y;
        }
        o *= 2;
    }
    let warps = T / 32;
    // SAFETY: scratch has warps + 1 values.
    unsafe {
        if l == 31 {
            *scratch.add((t / 32) as usize) = x;
        }
        sync();
        if t == 0 {
            let mut run = 0u32;
            for w in 0..warps as usize {
                let c = *scratch.add(w);
                *scratch.add(w) = run;
                run += c;
            }
            *scratch.add(warps as usize) = run;
        }
        sync();
        let out = (*scratch.add((t / 32) as usize) + x - v, *scratch.add(warps as usize));
        sync();
        out
    }
}

/// Global 64-bit compare-and-swap; returns the old value.
#[inline(always)]
pub unsafe fn cas_global_u64(p: *mut u64, cmp: u64, new: u64) -> u64 {
    let old: u64;
    // SAFETY: `p` is a valid, 8-byte aligned global address.
    unsafe {
        asm!("atom.global.cas.b64 {0}, [{1}], {2}, {3};",
             out(reg64) old, in(reg64) p, in(reg64) cmp, in(reg64) new);
    }
    old
}

/// Global 32-bit atomic add; returns the old value.
#[inline(always)]
pub unsafe fn add_global_u32(p: *mut u32, v: u32) -> u32 {
    let old: u32;
    // SAFETY: `p` is a valid global address.
    unsafe {
        asm!("atom.global.add.u32 {0}, [{1}], {2};", out(reg32) old, in(reg64) p, in(reg32) v);
    }
    old
}

#[inline(always)]
pub unsafe fn f16_to_f32(h: u16) -> f32 {
    let f: f32;
    // SAFETY: a register conversion.
    unsafe { asm!("cvt.f32.f16 {0}, {1};", out(reg32) f, in(reg16) h) };
    f
}

/// Shared-memory compare-and-swap on a generic pointer into shared memory.
#[inline(always)]
pub unsafe fn cas_shared(p: *mut u32, cmp: u32, new: u32) -> u32 {
    let old: u32;
    // SAFETY: `p` points into this block's shared memory.
    unsafe {
        asm!("{{ .reg .u64 a; cvta.to.shared.u64 a, {1}; atom.shared.cas.b32 {0}, [a], {2}, {3}; }}",
             out(reg32) old, in(reg64) p, in(reg32) cmp, in(reg32) new);
    }
    old
}

/// Compare-and-swap on a generic pointer (shared or global memory).
///
/// # Safety
/// `p` is a valid, 4-byte aligned address in shared or global memory.
#[inline(always)]
pub unsafe fn cas_generic(p: *mut u32, cmp: u32, new: u32) -> u32 {
    let old: u32;
    // SAFETY: `p` is a valid, 4-byte aligned shared or global address.
    unsafe {
        asm!("atom.cas.b32 {0}, [{1}], {2}, {3};",
             out(reg32) old, in(reg64) p, in(reg32) cmp, in(reg32) new);
    }
    old
}

#[inline(always)]
pub unsafe fn add_shared(p: *mut u32, v: u32) -> u32 {
    let old: u32;
    // SAFETY: `p` points into this block's shared memory.
    unsafe {
        asm!("{{ .reg .u64 a; cvta.to.shared.u64 a, {1}; atom.shared.add.u32 {0}, [a], {2}; }}",
             out(reg32) old, in(reg64) p, in(reg32) v);
    }
    old
}

#[inline(always)]
pub unsafe fn add_global_u64(p: *mut u64, v: u64) {
    // SAFETY: `p` is a valid global address.
    unsafe {
        asm!("red.global.add.u64 [{0}], {1};", in(reg64) p, in(reg64) v);
    }
}

/// Shared-memory maximum (unsigned) on a generic pointer into shared memory.
#[inline(always)]
pub unsafe fn max_shared(p: *mut u32, v: u32) {
    // SAFETY: `p` points into this block's shared memory.
    unsafe {
        asm!("{{ .reg .u64 a; .reg .u32 o; cvta.to.shared.u64 a, {0}; atom.shared.max.u32 o, [a], {1}; }}",
             in(reg64) p, in(reg32) v);
    }
}

/// `acc` plus the dot product of the two `i16` halves of `a` with bytes 0-1
/// (`HI = false`) or 2-3 (`HI = true`) of `b` as `i8` (PTX `dp2a`).
#[inline(always)]
pub fn dp2a<const HI: bool>(a: u32, b: u32, acc: i32) -> i32 {
    let d: i32;
    // SAFETY: register-only arithmetic.
    unsafe {
        if HI {
            asm!("dp2a.hi.s32.s32 {0}, {1}, {2}, {3};", out(reg32) d, in(reg32) a, in(reg32) b, in(reg32) acc);
        } else {
            asm!("dp2a.lo.s32.s32 {0}, {1}, {2}, {3};", out(reg32) d, in(reg32) a, in(reg32) b, in(reg32) acc);
        }
    }
    d
}

/// 16 bytes from shared memory (a generic pointer into it).
#[inline(always)]
pub unsafe fn load16_shared(p: *const u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: `p` is a 16-byte aligned address in this block's shared memory.
    unsafe {
        asm!("{{ .reg .u64 s; cvta.to.shared.u64 s, {4}; ld.shared.v4.u32 {{{0}, {1}, {2}, {3}}}, [s]; }}",
             out(reg32) a, out(reg32) b, out(reg32) c, out(reg32) d, in(reg64) p);
    }
    [a, b, c, d]
}

/// An `f32` from read-only global memory.
#[inline(always)]
pub unsafe fn load_f32_nc(p: *const f32) -> f32 {
    let v: f32;
    // SAFETY: `p` is 4-byte aligned global memory that no kernel writes.
    unsafe {
        asm!("ld.global.nc.f32 {0}, [{1}];", out(reg32) v, in(reg64) p);
    }
    v
}

/// 16 bytes from read-only global memory.
#[inline(always)]
pub unsafe fn load16_nc(p: *const u8) -> [u32; 4] {
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
        let (i0, i1) = (base + lane, base + lane + 32);
        // SAFETY: indices below n are inside the caller's buffer.
        unsafe {
            let mut x0 = if i0 < n { *a.add(i0 as usize) } else { u64::MAX };
            let mut x1 = if i1 < n { *a.add(i1 as usize) } else { u64::MAX };
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
                let mut stride = 32;
                while stride > 0 {
                    chunk_stage(&mut x0, &mut x1, stride, stride, lane);
                    stride /= 2;
                }
            }
            if i0 < n {
                *a.add(i0 as usize) = x0;
            }
            if i1 < n {
                *a.add(i1 as usize) = x1;
            }
        }
        base += (TH / 32) * CHUNK;
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
    if n < 2 {
        return;
    }
    let t = tid();
    // SAFETY: every index stays below n; chunk_pass is reached by full warps.
    unsafe {
        chunk_pass::<TH>(a, n, true);
        sync();
        let p = n.next_power_of_two();
        let mut size = 2 * CHUNK;
        while size <= p {
            // The merge's first stage pairs mirrored positions (mask size - 1),
            // then strides halve; `top` is the mask's highest bit.
            let (mut mask, mut top) = (size - 1, size / 2);
            while mask >= CHUNK {
                let mut j = t;
                while j < p / 2 {
                    let lo = ((j & !(top - 1)) << 1) | (j & (top - 1));
                    let hi = lo ^ mask;
                    if hi < n {
                        let x = *a.add(lo as usize);
                        let y = *a.add(hi as usize);
                        if x > y {
                            *a.add(lo as usize) = y;
                            *a.add(hi as usize) = x;
                        }
                    }
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

#[inline(always)]
pub fn candidate(d: f32, id: u32) -> u64 {
    ((f32_order_key(d) as u64) << 32) | id as u64
}
