//! The OctEx GPU kernels, in Rust for rustc's `nvptx64-nvidia-cuda` target.
//!
//! Built to PTX by `../build.rs` (pinned nightly, `-Zbuild-std=core`); the host
//! crate embeds the PTX and launches these kernels through typed launchers.
//! The E8 decoder, the fragment-key hash and the shared layouts come from the
//! `no_std` crate `octex-core`, which the host crates compile too, so both
//! sides decode alike. The manifest is `kernels.toml` (filled in by the build
//! script), not `Cargo.toml`, so that the folder ships in the package.
//!
//! - [`search`]: `wave_search`, the whole search of one query per block (first
//!   round, `W` waves, exact rerank), with the visited set and the candidate
//!   list in shared memory (`wave_search_dense`: the same body built for four
//!   blocks per SM; `wave_search_narrow`: blocks of 128 threads, eight per SM,
//!   for small per-query work in large batches; `wave_search_latency`: blocks
//!   of 1,024 threads, one per SM, for batches of at most one query per SM;
//!   `wave_search_spilled`: those arrays in a global scratch);
//!   `fragment_keys`, the key and centre distance of every (vector, copy,
//!   spacing);
//! - [`visit`]: a round's visits: the visited set's hash, probes and
//!   claims, and `Round`, which gathers a round's entries, claims them and
//!   scores the ids first seen;
//! - [`fragments`]: the first step of a search, the query's fragment in every
//!   (copy, spacing): E8 decoding spread over lanes, the key hash, the
//!   key-table lookup; and `query_fragments`, the same for a whole batch
//!   before `wave_search`, one pass per spacing over what the finer ones
//!   left;
//! - [`distance`]: the search's sketch estimate (`dp2a` over the query's
//!   int16 codes) and exact distance;
//! - [`brute`]: `sub_bias`, `sub_bias_into` (centred queries before TF32
//!   products) and `row_sq_norms` around the cuBLAS products, and
//!   `topk_tile`, the running top-k of a tile of dot products (exact brute
//!   force, exact neighbour rows);
//! - [`sort`]: prefix sums and the stable radix sort of (key, value) pairs;
//! - [`build`]: the GPU builder's steps (fragment keys of a copy, fragment
//!   segments and ripples, completion of short fragments, key-table inserts,
//!   the int8 sketch);
//! - [`ivf`]: the inverted file that finds each stored fragment's ripple by
//!   the paper's rule (nearest centroids of many rows, fragment centres, the
//!   scan of a centre's probed lists);
//! - [`block_sort`]: block-wide sorts: the plain bitonic network (top-k,
//!   inverted file), and for the search's rounds the sort of any length (warp
//!   shuffles below 64 apart) and the selection of the smallest entries;
//! - [`prims`]: the device primitives they share (warp votes and shuffles,
//!   shared-memory atomics, 16-byte loads).
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

// The decoder, the key hash and the shared layouts: the same `octex-core`
// source the host crates compile.
use octex_core::{e8, key, layout, sketch};

mod block_sort;
mod brute;
mod build;
mod distance;
mod fragments;
mod ivf;
mod prims;
mod search;
mod sort;
mod visit;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: trap ends the kernel; the host sees a launch failure.
    unsafe { core::arch::nvptx::trap() }
}
