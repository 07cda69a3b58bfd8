//! # octex-kernels
//!
//! The GPU kernels of OctEx and their typed host launchers.
//!
//! - The kernels (`gpu/src/lib.rs`) are Rust, `#![no_std]`, built for rustc's
//!   `nvptx64-nvidia-cuda` target by `build.rs` with a pinned nightly and
//!   `-Zbuild-std=core`, and embedded here as PTX ([`PTX`]). Without that
//!   nightly the committed `ptx/octex_kernels.ptx` is embedded instead
//!   ([`PTX_ORIGIN`] says which); a test fails when the two differ.
//! - The host side opens the driver and cuBLAS through `cudarc` with dynamic
//!   loading: nothing of CUDA is needed to build, and a machine without a driver
//!   gets [`GpuError::NoDriver`] from [`Gpu::open`], never a panic.
//! - [`Gpu`] owns the context, one stream, the module and a cuBLAS handle (with
//!   a fixed workspace, so products can be captured in CUDA graphs), and its
//!   launchers take typed device buffers: callers never see a launch
//!   configuration or a raw pointer.
//! - the search launchers (`wave_search`, `fragment_keys`) and the device
//!   views they read ([`DeviceIndexView`], [`DeviceBatchView`]), in `search.rs`;
//! - [`sort`]: prefix sums and a stable radix sort of ids by multi-word keys;
//!   [`ripples`]: the GPU ripple builder (`GpuRippleBuilder`), the sketch and
//!   f16 kernels of the builder; [`ivf`]: the inverted-file kernels that
//!   search each fragment's ripple around its centre; [`pinned`]: page-locked buffers and the
//!   staged `Fetcher` for large device-to-host copies.
//! - [`layout`]: the structures the kernels read ([`layout::IndexView`], the
//!   per-part table of device pointers of an index, and [`layout::BatchView`]),
//!   compiled into both sides from one file.
//!
//! Place in the pipeline: `octex-search` (GPU backend) and `octex-build` (GPU
//! phases) call the launchers; the kernels read the index in the layout of
//! `octex-index`, decoded with the very E8 and key code of `octex-lattice`.

pub mod brute;
pub mod ivf;
pub use octex_core::layout;
pub mod pinned;
pub mod ripples;
mod search;
pub mod sort;

pub use brute::GpuBruteForce;
/// The `cudarc` this crate is built on, for callers that hold device buffers.
pub use cudarc;
pub use ivf::IvfKernels;
pub use pinned::PinnedBuf;
pub use ripples::{GpuRippleBuilder, LevelRipples};
pub use search::{DeviceBatchView, DeviceIndexView};
pub use sort::GpuSort;

use std::sync::Arc;

use cudarc::cublas::{sys as blas_sys, CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, CudaView, CudaViewMut,
    DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;

use layout::{BLOCK_THREADS, MAX_TOPK};
use octex_core::DeviceLayout;

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

/// Whether a CUDA driver can be loaded and reports at least one device.
pub fn driver_available() -> bool {
    // SAFETY: is_culib_present only tries to dlopen the library.
    if !unsafe { sys::is_culib_present() } {
        return false;
    }
    std::panic::catch_unwind(|| CudaContext::device_count().unwrap_or(0) > 0).unwrap_or(false)
}

/// cuBLAS workspace (fixed, so products can be captured in graphs).
const BLAS_WORKSPACE: usize = 32 << 20;

/// `wave_search` blocks that should fit one multiprocessor: the register cap
/// this implies (80 of 255) lets three blocks of typical shared memory
/// (~70 KB each) share an SM instead of two, with no spills (ptxas -v).
const SEARCH_BLOCKS_PER_SM: u32 = 3;

/// Add `.maxntid` / `.minnctapersm` (CUDA's `__launch_bounds__`) to one entry
/// of a PTX module; rustc has no attribute for them.
pub fn with_launch_bounds(ptx: &str, entry: &str, threads: u32, blocks_per_sm: u32) -> String {
    let Some(start) = ptx.find(&format!(".entry {entry}(")) else {
        return ptx.to_string();
    };
    let Some(body) = ptx[start..].find("\n{") else {
        return ptx.to_string();
    };
    let at = start + body;
    format!(
        "{}\n.maxntid {threads}, 1, 1\n.minnctapersm {blocks_per_sm}{}",
        &ptx[..at],
        &ptx[at..]
    )
}

/// Candidates `topk_tile` sorts at most (its shared memory).
const TOPK_CANDIDATES: usize = 2048;

/// One GPU: context, stream, kernels and cuBLAS.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
    blas: CudaBlas,
    _blas_workspace: CudaSlice<u8>,
    wave_search: CudaFunction,
    fragment_keys: CudaFunction,
    sub_bias: CudaFunction,
    row_sq_norms: CudaFunction,
    topk_tile: CudaFunction,
    max_smem: usize,
}

/// Device address of a buffer (for the pointer tables the kernels read).
pub fn device_address<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _guard) = s.device_ptr(stream);
    p
}

fn cfg(blocks: u32, shared: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks.max(1), 1, 1),
        block_dim: (BLOCK_THREADS, 1, 1),
        shared_mem_bytes: shared,
    }
}

fn blocks_for(items: u64) -> Result<u32, GpuError> {
    let b = items.div_ceil(BLOCK_THREADS as u64);
    u32::try_from(b)
        .map_err(|_| GpuError::Unsupported(format!("{items} threads is too many for one launch")))
}

impl Gpu {
    /// Open device `ordinal`, load the kernels and cuBLAS.
    pub fn open(ordinal: usize) -> Result<Self, GpuError> {
        // SAFETY: only tries to dlopen libcuda.
        if !unsafe { sys::is_culib_present() } {
            return Err(GpuError::NoDriver);
        }
        let count = CudaContext::device_count()?;
        if ordinal as i32 >= count {
            return Err(GpuError::NoDevice(ordinal, count));
        }
        // SAFETY: only tries to dlopen libcublas.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(GpuError::NoBlas("libcublas not found".into()));
        }
        let ctx = CudaContext::new(ordinal)?;
        // One stream orders all our work, and graphs cannot be captured with
        // cudarc's per-buffer event tracking on.
        // SAFETY: every buffer of this context is used on `stream` only.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let ptx = with_launch_bounds(PTX, "wave_search", BLOCK_THREADS, SEARCH_BLOCKS_PER_SM);
        let module = ctx.load_module(Ptx::from_src(ptx))?;
        let f = |name: &str| module.load_function(name);
        let wave_search = f("wave_search")?;
        let max_smem = ctx.attribute(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )? as usize;
        let topk_tile = f("topk_tile")?;
        for func in [&wave_search, &topk_tile] {
            func.set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                max_smem as i32,
            )?;
        }
        let blas = CudaBlas::new(stream.clone())?;
        let workspace = stream.alloc_zeros::<u8>(BLAS_WORKSPACE)?;
        {
            let (p, _g) = workspace.device_ptr(&stream);
            // SAFETY: the workspace lives as long as the handle (both in Self).
            let st = unsafe {
                blas_sys::cublasSetWorkspace_v2(*blas.handle(), p as *mut _, BLAS_WORKSPACE)
            };
            st.result()?;
        }
        Ok(Self {
            fragment_keys: f("fragment_keys")?,
            sub_bias: f("sub_bias")?,
            row_sq_norms: f("row_sq_norms")?,
            ctx,
            stream,
            module,
            blas,
            _blas_workspace: workspace,
            wave_search,
            topk_tile,
            max_smem,
        })
    }

    /// A kernel of the module by name (for the launchers of other modules).
    pub(crate) fn function(&self, name: &str) -> Result<CudaFunction, GpuError> {
        Ok(self.module.load_function(name)?)
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream all launchers use.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Device name and memory, for logs and bench records.
    pub fn describe(&self) -> String {
        let name = self.ctx.name().unwrap_or_default();
        let mem = self.ctx.total_mem().unwrap_or(0) as f64 / (1u64 << 30) as f64;
        format!("{name} ({mem:.0} GiB)")
    }

    /// Free and total device memory in bytes, as the driver reports them now.
    pub fn memory_info(&self) -> Result<(usize, usize), GpuError> {
        self.ctx.bind_to_thread()?;
        Ok(cudarc::driver::result::mem_get_info()?)
    }

    /// Most dynamic shared memory one block may take.
    pub fn max_shared_memory(&self) -> usize {
        self.max_smem
    }

    /// Copy a host slice to a new device buffer.
    pub fn upload<T: DeviceRepr>(&self, host: &[T]) -> Result<CudaSlice<T>, GpuError> {
        Ok(self.stream.clone_htod(host)?)
    }

    /// A zeroed device buffer.
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, GpuError> {
        Ok(self.stream.alloc_zeros::<T>(len.max(1))?)
    }

    /// Copy a device buffer (or its first `host.len()` values) to the host.
    pub fn download<T: DeviceRepr>(
        &self,
        dev: &CudaSlice<T>,
        host: &mut [T],
    ) -> Result<(), GpuError> {
        let n = host.len();
        self.stream.memcpy_dtoh(&dev.slice(..n), host)?;
        Ok(())
    }

    pub fn synchronize(&self) -> Result<(), GpuError> {
        Ok(self.stream.synchronize()?)
    }

    /// Let cuBLAS use TF32 tensor cores for f32 products (about 10 bits of
    /// mantissa per operand: several times faster, relative error ~1e-3), or
    /// go back to exact f32.
    pub fn set_tf32(&self, on: bool) -> Result<(), GpuError> {
        let mode = if on {
            blas_sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH
        };
        // SAFETY: a valid handle; the mode only changes how later products run.
        unsafe { blas_sys::cublasSetMathMode(*self.blas.handle(), mode) }.result()?;
        Ok(())
    }

    /// Row-major `c (n x k) = a (n x d, row stride lda) * b (d x k, row stride ldb)`,
    /// `c` with row stride `ldc`.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &self,
        a: &CudaView<f32>,
        lda: usize,
        b: &CudaView<f32>,
        ldb: usize,
        c: &mut CudaViewMut<f32>,
        ldc: usize,
        (n, d, k): (usize, usize, usize),
    ) -> Result<(), GpuError> {
        // Row-major C = A B is column-major C^T = B^T A^T.
        let g = GemmConfig {
            transa: blas_sys::cublasOperation_t::CUBLAS_OP_N,
            transb: blas_sys::cublasOperation_t::CUBLAS_OP_N,
            m: k as i32,
            n: n as i32,
            k: d as i32,
            alpha: 1.0f32,
            lda: ldb as i32,
            ldb: lda as i32,
            beta: 0.0f32,
            ldc: ldc as i32,
        };
        // SAFETY: the shapes and strides describe buffers of at least these sizes
        // (checked by the callers' constructors).
        unsafe { self.blas.gemm(g, b, a, c) }?;
        Ok(())
    }

    /// Row-major `c (nq x nt) = q (nq x d) * x^T` for `x` (`nt x d`), `c` dense.
    pub fn matmul_transposed(
        &self,
        q: &CudaView<f32>,
        x: &CudaView<f32>,
        c: &mut CudaViewMut<f32>,
        (nq, nt, d): (usize, usize, usize),
    ) -> Result<(), GpuError> {
        // Column-major: C^T (nt x nq) = X (as d x nt)^T * Q^T (d x nq).
        let g = GemmConfig {
            transa: blas_sys::cublasOperation_t::CUBLAS_OP_T,
            transb: blas_sys::cublasOperation_t::CUBLAS_OP_N,
            m: nt as i32,
            n: nq as i32,
            k: d as i32,
            alpha: 1.0f32,
            lda: d as i32,
            ldb: d as i32,
            beta: 0.0f32,
            ldc: nt as i32,
        };
        // SAFETY: as in `matmul`.
        unsafe { self.blas.gemm(g, x, q, c) }?;
        Ok(())
    }

    /// `x[i][j] -= bias[j]` for `n x m` row-major `x`.
    pub fn sub_bias(
        &self,
        x: &mut CudaViewMut<f32>,
        n: usize,
        bias: &CudaSlice<f32>,
    ) -> Result<(), GpuError> {
        let m = bias.len();
        assert!(x.len() >= n * m);
        let (n32, m32) = (n as u32, m as u32);
        let mut b = self.stream.launch_builder(&self.sub_bias);
        b.arg(x).arg(&n32).arg(&m32).arg(bias);
        // SAFETY: the kernel touches n * m values of x and m of bias.
        unsafe { b.launch(cfg(blocks_for((n * m) as u64)?, 0)) }?;
        Ok(())
    }

    /// `out[i] = |x_i|^2` for `n x d` row-major `x`.
    pub fn row_sq_norms(
        &self,
        x: &CudaView<f32>,
        n: usize,
        d: usize,
        out: &mut CudaViewMut<f32>,
    ) -> Result<(), GpuError> {
        assert!(x.len() >= n * d && out.len() >= n);
        let (n32, d32) = (n as u32, d as u32);
        let mut b = self.stream.launch_builder(&self.row_sq_norms);
        b.arg(x).arg(&n32).arg(&d32).arg(out);
        // SAFETY: sizes asserted above.
        unsafe { b.launch(cfg(blocks_for(n as u64)?, 0)) }?;
        Ok(())
    }

    /// Merge the tile `dots` (`nq x nt`, row-major; ids `tile_base..`) into the
    /// running top-`k` lists `best` (`nq x k`, start at `u64::MAX`); scores are
    /// `norms[t] - 2 dots[q][t]`; `self_base` (or `u32::MAX`) names the id of
    /// query 0 to skip.
    #[allow(clippy::too_many_arguments)]
    pub fn topk_tile(
        &self,
        dots: &CudaView<f32>,
        (nq, nt): (usize, usize),
        norms: &CudaView<f32>,
        tile_base: u32,
        self_base: u32,
        k: usize,
        best: &mut CudaViewMut<u64>,
    ) -> Result<(), GpuError> {
        if k == 0 || k > MAX_TOPK as usize {
            return Err(GpuError::Unsupported(format!(
                "GPU top-k needs 1 <= k <= {MAX_TOPK}, got {k}"
            )));
        }
        assert!(dots.len() >= nq * nt && norms.len() >= nt && best.len() >= nq * k);
        let smem = 8 * (BLOCK_THREADS as usize + 2 + TOPK_CANDIDATES);
        let (nq32, nt32, k32) = (nq as u32, nt as u32, k as u32);
        let mut b = self.stream.launch_builder(&self.topk_tile);
        b.arg(dots)
            .arg(&nq32)
            .arg(&nt32)
            .arg(norms)
            .arg(&tile_base)
            .arg(&self_base)
            .arg(&k32)
            .arg(best);
        // SAFETY: sizes asserted above.
        unsafe { b.launch(cfg(nq32, smem as u32)) }?;
        Ok(())
    }
}

/// Silence unused-import lints for traits used only through method syntax.
#[allow(dead_code)]
fn _traits(_: &dyn DevicePtrMut<f32>) {}

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
            "fragment_keys",
            "sub_bias",
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
