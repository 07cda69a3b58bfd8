//! # octex-kernels
//!
//! The GPU kernels of OctEx and their typed host launchers; nothing else (the
//! algorithms that string launches together live in `octex-build` and
//! `octex-search`, as candle keeps its kernels apart from its CUDA backend).
//!
//! - The kernels (`gpu/src/lib.rs`) are Rust, `#![no_std]`, built for rustc's
//!   `nvptx64-nvidia-cuda` target by `build.rs` with a pinned nightly and
//!   `-Zbuild-std=core`, and embedded here as PTX ([`PTX`]). Without that
//!   nightly the committed `ptx/octex_kernels.ptx` is embedded instead
//!   ([`PTX_ORIGIN`] says which); a test fails when the two differ.
//! - [`Gpu`] (`device.rs`) opens the driver and cuBLAS through `cudarc` with
//!   dynamic loading: nothing of CUDA is needed to build, and a machine
//!   without a driver gets [`GpuError::NoDriver`] from [`Gpu::open`], never a
//!   panic. It owns the context, one stream, the module and a cuBLAS handle
//!   (with a fixed workspace, so products can be captured in CUDA graphs),
//!   and hands out buffers, events, streams and captured graphs.
//! - Launchers take typed device buffers and check the sizes their kernel
//!   relies on; callers never see a launch configuration:
//!   - `linalg.rs`: the cuBLAS products, `sub_bias` (and `_into`), `row_sq_norms`,
//!     `topk_tile` (methods of [`Gpu`]); [`brute`]: exact brute force;
//!   - `search.rs`: the launchers of `wave_search` (which of its four entry
//!     points a batch gets), of `query_fragments` (its passes before it) and
//!     of `fragment_keys`, and the device views they read
//!     ([`DeviceIndexView`], [`DeviceBatchView`]);
//!   - [`builder`]: the builder's kernels (fragment keys of a copy, the
//!     segment kernels, short-fragment completion, key tables, the sketch);
//!   - [`ivf`]: the inverted-file kernels that search each fragment's ripple
//!     around its centre; [`sort`]: prefix sums and a stable radix sort of ids
//!     by multi-word keys;
//!   - [`pinned`]: page-locked buffers and the staged `Fetcher` for large
//!     device-to-host copies.
//! - [`layout`] (from `octex-core`): the `repr(C)` structures and constants
//!   the kernels and the launchers share bit for bit; [`Layout`] passes them.
//! - [`driver`]: the device types callers hold (buffers, views, events,
//!   graphs), so that no other crate depends on `cudarc` itself.
//!
//! Place in the pipeline: `octex-search` (GPU backend) and `octex-build` (GPU
//! phases) call the launchers; the kernels read the index in the layout of
//! `octex-index`, decoded with the very E8 and key code (`octex-core`) that
//! `octex-lattice` gives the CPU.

pub mod brute;
pub mod builder;
mod device;
pub mod ivf;
mod linalg;
pub mod pinned;
mod search;
pub mod sort;

pub use brute::GpuBruteForce;
pub use builder::BuilderKernels;
pub use device::{
    bounded_ptx, device_address, device_count, driver_available, total_memory, with_launch_bounds,
    DeviceLimits, Gpu,
};
pub use ivf::IvfKernels;
pub use octex_core::layout;
pub use pinned::PinnedBuf;
pub use search::{DeviceBatchView, DeviceIndexView, SearchKernel};
pub use sort::GpuSort;

use cudarc::driver::DeviceRepr;
use octex_core::DeviceLayout;

pub(crate) use device::{blocks_for, cfg};

/// The device types that callers of the launchers hold, from the `cudarc`
/// this crate is built on. Other crates use these names and have no `cudarc`
/// dependency of their own: one pinned version, one crate that talks to the
/// driver.
pub mod driver {
    pub use cudarc::driver::{
        CudaEvent, CudaGraph, CudaSlice, CudaStream, CudaView, CudaViewMut, DeviceRepr,
        DriverError, ValidAsZeroBits,
    };
}

/// The kernels' PTX (`.version 8.0`, `.target sm_90`).
pub const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/octex_kernels.ptx"));

/// `"built"` when [`PTX`] was compiled from `gpu/` in this build, `"committed"`
/// when it is the committed copy.
pub const PTX_ORIGIN: &str = env!("OCTEX_PTX_ORIGIN");

/// The committed PTX (what stable-only machines embed).
pub const COMMITTED_PTX: &str = include_str!("../ptx/octex_kernels.ptx");

/// Why the GPU path is unavailable or failed.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no CUDA driver on this machine (libcuda could not be loaded)")]
    NoDriver,
    #[error("no CUDA device {0} (the driver reports {1} devices)")]
    NoDevice(usize, i32),
    #[error("cuBLAS could not be loaded: {0}")]
    NoBlas(String),
    #[error("CUDA driver error: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    #[error("cuBLAS error: {0}")]
    Blas(#[from] cudarc::cublas::result::CublasError),
    #[error("{0}")]
    Unsupported(String),
}

/// A [`layout`] structure as a kernel argument or device buffer element
/// (`repr(transparent)`: the same bytes as `T`).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout<T: DeviceLayout>(pub T);

// SAFETY: `T: DeviceLayout` is repr(C) plain old data compiled alike for the
// host and the nvptx kernels (octex-core), and the wrapper adds no bytes.
unsafe impl<T: DeviceLayout> DeviceRepr for Layout<T> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(ptx: &str) -> Vec<String> {
        ptx.lines()
            .filter_map(|l| l.split(".entry ").nth(1))
            .map(|s| s.trim_end_matches('(').trim().to_string())
            .collect()
    }

    #[test]
    fn ptx_targets_sm90_and_has_every_kernel() {
        assert!(PTX.contains(".target sm_90"), "PTX target");
        let e = entries(PTX);
        for k in [
            "wave_search",
            "wave_search_spilled",
            "wave_search_dense",
            "wave_search_narrow",
            "wave_search_latency",
            "fragment_keys",
            "query_fragments",
            "sub_bias",
            "sub_bias_into",
            "row_sq_norms",
            "topk_tile",
        ] {
            assert!(e.iter().any(|x| x == k), "missing kernel {k} in {e:?}");
        }
    }

    /// The committed PTX must be what the sources build to. Where the pinned
    /// nightly exists (CI installs it), `PTX` was just built from `gpu/`.
    #[test]
    fn committed_ptx_is_current() {
        if PTX_ORIGIN != "built" {
            eprintln!("skipped: the pinned nightly is absent, the committed PTX was embedded");
            return;
        }
        if PTX != COMMITTED_PTX {
            if std::env::var("OCTEX_UPDATE_PTX").as_deref() == Ok("1") {
                let p = concat!(env!("CARGO_MANIFEST_DIR"), "/ptx/octex_kernels.ptx");
                std::fs::write(p, PTX).expect("write the committed PTX");
                eprintln!("updated {p}");
                return;
            }
            panic!(
                "crates/kernels/ptx/octex_kernels.ptx is stale: run \
                 `OCTEX_UPDATE_PTX=1 cargo test -p octex-kernels committed_ptx` and commit it"
            );
        }
    }

    #[test]
    fn search_parameters_are_the_host_views() {
        // The search kernels take the views by value: each build's two
        // parameters must be exactly the host structs' bytes.
        for entry in SearchKernel::ALL.map(SearchKernel::entry) {
            let at = PTX.find(&format!(".entry {entry}(")).expect(entry);
            let head = &PTX[at..at + PTX[at..].find(')').unwrap()];
            let sizes: Vec<usize> = head
                .lines()
                .filter(|l| l.contains(".param"))
                .map(|l| {
                    let n = l.rsplit('[').next().unwrap();
                    n.trim_end_matches([']', ',', ' ']).parse().unwrap()
                })
                .collect();
            assert_eq!(
                sizes,
                [
                    std::mem::size_of::<layout::IndexView>(),
                    std::mem::size_of::<layout::BatchView>()
                ],
                "{entry}"
            );
        }
    }

    #[test]
    fn launch_bounds_go_between_parameters_and_body() {
        let p = with_launch_bounds(PTX, "wave_search", 256, 3);
        let at = p.find(".entry wave_search(").unwrap();
        let rest = &p[at..];
        let bounds = rest.find(".maxntid 256, 1, 1\n.minnctapersm 3\n{").unwrap();
        assert!(
            rest[..bounds].contains(".param"),
            "bounds must follow the parameters"
        );
        assert_eq!(
            p.len(),
            PTX.len() + ".maxntid 256, 1, 1\n.minnctapersm 3\n".len()
        );
    }

    #[test]
    fn order_keys_sort_like_floats() {
        use layout::{f32_from_order_key, f32_order_key};
        let vals = [-3.5f32, -1e-30, -0.0, 0.0, 1e-30, 2.0, 7.25, f32::INFINITY];
        for w in vals.windows(2) {
            assert!(f32_order_key(w[0]) <= f32_order_key(w[1]), "{w:?}");
        }
        for v in vals {
            assert_eq!(f32_from_order_key(f32_order_key(v)).to_bits(), v.to_bits());
        }
    }

    #[test]
    fn open_without_driver_is_an_error_not_a_panic() {
        if driver_available() {
            eprintln!("a GPU is present: the no-driver path is not exercised here");
            return;
        }
        assert!(matches!(
            Gpu::open(0),
            Err(GpuError::NoDriver) | Err(GpuError::NoDevice(..))
        ));
    }
}
