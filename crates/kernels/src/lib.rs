//! # octex-kernels
//!
//! Will hold the GPU kernels of OctEx, written in Rust (`#![no_std]`, rustc's
//! `nvptx64-nvidia-cuda` target, compiled to PTX by a build script, with committed
//! PTX for machines without the pinned nightly) and their typed host launchers on
//! `cudarc` with dynamic loading.
//!
//! Place in the pipeline: `octex-search` (GPU backend) and `octex-build` (GPU
//! build) call the launchers; the kernels read the index in the layout of
//! `octex-index`. Depends on `cudarc` only.
//!
//! Empty for now: the CPU backend comes first and is the reference the GPU must
//! agree with.
