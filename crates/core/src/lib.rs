//! # octex-core
//!
//! The part of OctEx that both sides of the machine compile: the host crates
//! (through `octex-lattice` and `octex-kernels`) and the nvptx GPU kernels
//! (`octex-kernels/gpu`, built by its build script with `-Zbuild-std=core`).
//! It is `no_std`, allocation-free and has no dependencies, so the CPU and the
//! GPU decode, hash and lay out data from the very same source:
//!
//! - [`distance`]: the build's exact squared L2 distance, one summation order;
//! - [`e8`]: nearest point of D8 and E8 with one fixed tie rule;
//! - [`key`]: the 64-bit fragment key and check word of a tuple of E8 points;
//! - [`layout`]: the `repr(C)` argument structures and constants the kernels
//!   and their host launchers share bit for bit;
//! - [`sketch`]: the sketch distance's integer form (the query's int16 code,
//!   the per-row norm, the estimate) that the CPU and GPU searches compute.
//!
//! Place in the pipeline: the bottom. Users reach these through
//! `octex-lattice` (which re-exports [`e8`] and [`key`]) and `octex-kernels`
//! (which re-exports [`layout`]).
#![cfg_attr(not(test), no_std)]
// The GPU build rounds down with the hardware's `cvt.rmi` ([`e8`]'s floor)
// and converts with `cvt.rzi` (inline PTX).
#![cfg_attr(
    target_arch = "nvptx64",
    feature(core_intrinsics, asm_experimental_arch)
)]
#![cfg_attr(target_arch = "nvptx64", allow(internal_features))]

pub mod distance;
pub mod e8;
pub mod key;
pub mod layout;
pub mod sketch;

/// A `repr(C)` plain-old-data structure that the kernels read from device
/// memory exactly as the host wrote it: only integers, floats and `u64`
/// device addresses, no references, no padding that carries meaning.
///
/// # Safety
/// Implement only for `repr(C)` types of that kind, declared in [`layout`]
/// and compiled identically for the host and the nvptx target.
pub unsafe trait DeviceLayout: Copy + 'static {}
