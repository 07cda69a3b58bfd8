//! Device primitives: thread indices, barriers, warp votes and shuffles,
//! shared-memory atomics, read-only 16-byte loads and the candidate encoding
//! shared by the search and the top-k kernels (the block-wide sorts are in
//! [`crate::block_sort`]).
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
        let out = (
            *scratch.add((t / 32) as usize) + x - v,
            *scratch.add(warps as usize),
        );
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

/// Start copying 4 bytes from global to shared memory without a register in
/// between (`cp.async`): a thread's copies are all in flight at once, where a
/// load followed by a store waits for each load before the next (the load is
/// generic, so the compiler cannot move it past the store to shared memory).
/// [`copy_async_wait_all`] then a barrier make them visible to the block.
///
/// # Safety
/// `dst` is a 4-byte aligned address in this block's shared memory, `src`
/// a 4-byte aligned address in global memory that no kernel writes until
/// the copy is waited for.
#[inline(always)]
pub unsafe fn copy_async_4(dst: *mut f32, src: *const f32) {
    // SAFETY: `dst` is 4-byte aligned in this block's shared memory, `src`
    // 4-byte aligned global memory that no kernel writes while the copy runs.
    unsafe {
        asm!("{{ .reg .u64 s; .reg .u64 g; cvta.to.shared.u64 s, {0}; cvta.to.global.u64 g, {1}; cp.async.ca.shared.global [s], [g], 4; }}",
             in(reg64) dst, in(reg64) src);
    }
}

/// [`copy_async_4`] of 16 bytes (`cp.async.cg`, which keeps them out of L1).
///
/// # Safety
/// `dst` is a 16-byte aligned address in this block's shared memory, `src`
/// a 16-byte aligned address in global memory that no kernel writes until
/// the copy is waited for.
#[inline(always)]
pub unsafe fn copy_async_16(dst: *mut f32, src: *const f32) {
    // SAFETY: the caller's contract.
    unsafe {
        asm!("{{ .reg .u64 s; .reg .u64 g; cvta.to.shared.u64 s, {0}; cvta.to.global.u64 g, {1}; cp.async.cg.shared.global [s], [g], 16; }}",
             in(reg64) dst, in(reg64) src);
    }
}

/// Wait for this thread's [`copy_async_4`] copies.
///
/// # Safety
/// None beyond the module's: it only waits (other threads' copies need a
/// barrier after it as well).
#[inline(always)]
pub unsafe fn copy_async_wait_all() {
    // SAFETY: only waits.
    unsafe { asm!("cp.async.wait_all;") };
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

#[inline(always)]
pub fn candidate(d: f32, id: u32) -> u64 {
    ((f32_order_key(d) as u64) << 32) | id as u64
}
