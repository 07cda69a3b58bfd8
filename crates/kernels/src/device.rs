//! [`Gpu`]: one device's context, stream, kernel module and cuBLAS handle,
//! with buffers, transfers, events, streams and graph capture for the
//! launchers' callers.

use std::sync::Arc;

use cudarc::cublas::{sys as blas_sys, CudaBlas};
use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaFunction, CudaGraph, CudaModule, CudaSlice, CudaStream,
    DevicePtr, DeviceRepr, LaunchConfig, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;

use crate::layout::{BLOCK_THREADS, LATENCY_BLOCK_THREADS, NARROW_BLOCK_THREADS};
use crate::{GpuError, PTX};

/// Total memory of device `ordinal` in bytes (a context is created for the
/// question, not a [`Gpu`]: no kernels are loaded).
pub fn total_memory(ordinal: usize) -> Result<usize, GpuError> {
    // SAFETY: only tries to dlopen libcuda.
    if !unsafe { sys::is_culib_present() } {
        return Err(GpuError::NoDriver);
    }
    Ok(CudaContext::new(ordinal)?.total_mem()?)
}

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
/// (~60 KB each) share an SM instead of two.
const SEARCH_BLOCKS_PER_SM: u32 = 3;

/// Blocks per multiprocessor of `wave_search_dense` (64 registers a thread),
/// launched when the batch's shared memory lets four fit (faster than three
/// where it does).
const DENSE_SEARCH_BLOCKS_PER_SM: u32 = 4;

/// Blocks per multiprocessor of `wave_search_narrow` (`NARROW_BLOCK_THREADS`
/// threads, 64 registers a thread), launched when the batch's shared memory
/// lets this many fit and the batch fills every multiprocessor with them
/// (faster than the dense build for small per-query work in full batches,
/// slower elsewhere).
const NARROW_SEARCH_BLOCKS_PER_SM: u32 = 8;

/// Blocks per multiprocessor of `wave_search_latency`: one block of
/// `LATENCY_BLOCK_THREADS` threads (64 registers a thread), launched for
/// batches of at most one query per multiprocessor, and for batches of any
/// size whose shared memory lets only one block fit (GloVe-50 at rows of 64,
/// S64-S96 W4-W5, batch 10,000: 5-23% faster than one 256-thread block).
const LATENCY_SEARCH_BLOCKS_PER_SM: u32 = 1;

/// Bytes per second of a double-data-rate memory at `clock_khz` on a bus
/// of `bus_bits`.
fn peak_bandwidth(clock_khz: f64, bus_bits: f64) -> f64 {
    2.0 * clock_khz * 1e3 * bus_bits / 8.0
}

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

/// The builds of `wave_search`: entry, threads per block and blocks per
/// multiprocessor (the launch bounds that set each build's register cap).
pub const SEARCH_BUILDS: [(&str, u32, u32); 5] = [
    ("wave_search", BLOCK_THREADS, SEARCH_BLOCKS_PER_SM),
    ("wave_search_spilled", BLOCK_THREADS, SEARCH_BLOCKS_PER_SM),
    (
        "wave_search_dense",
        BLOCK_THREADS,
        DENSE_SEARCH_BLOCKS_PER_SM,
    ),
    (
        "wave_search_narrow",
        NARROW_BLOCK_THREADS,
        NARROW_SEARCH_BLOCKS_PER_SM,
    ),
    (
        "wave_search_latency",
        LATENCY_BLOCK_THREADS,
        LATENCY_SEARCH_BLOCKS_PER_SM,
    ),
];

/// The module as the driver loads it: [`PTX`] with the launch bounds of each
/// of [`SEARCH_BUILDS`] (`cargo xtask kernel-report` compiles the same text
/// with `ptxas` to show each build's registers and spills).
pub fn bounded_ptx() -> String {
    SEARCH_BUILDS
        .iter()
        .fold(PTX.to_string(), |ptx, &(entry, threads, blocks)| {
            with_launch_bounds(&ptx, entry, threads, blocks)
        })
}

/// One GPU: context, stream, kernels and cuBLAS.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
    pub(crate) blas: CudaBlas,
    _blas_workspace: CudaSlice<u8>,
    pub(crate) wave_search: CudaFunction,
    pub(crate) wave_search_spilled: CudaFunction,
    pub(crate) wave_search_dense: CudaFunction,
    pub(crate) wave_search_narrow: CudaFunction,
    pub(crate) wave_search_latency: CudaFunction,
    pub(crate) fragment_keys: CudaFunction,
    pub(crate) query_fragments: CudaFunction,
    pub(crate) sub_bias: CudaFunction,
    pub(crate) sub_bias_into: CudaFunction,
    pub(crate) row_sq_norms: CudaFunction,
    pub(crate) topk_tile: CudaFunction,
    pub(crate) max_smem: usize,
    /// Most dynamic shared memory of a `wave_search_dense` launch.
    pub(crate) dense_max_smem: usize,
    /// Most dynamic shared memory of a `wave_search_narrow` launch.
    pub(crate) narrow_max_smem: usize,
    /// Fewest queries of a `wave_search_narrow` launch (enough blocks for
    /// every multiprocessor).
    pub(crate) narrow_min_batch: u32,
    /// Most queries of a `wave_search_latency` launch (one per
    /// multiprocessor), unless only one block fits a multiprocessor
    /// (`one_block_latency`).
    pub(crate) latency_max_batch: u32,
    /// Batches of any size whose shared memory lets only one block fit a
    /// multiprocessor ([`Gpu::wide_search_blocks`] is 1) run the latency
    /// build, which gives that block its threads.
    /// [`Gpu::set_search_overrides`] turns that choice off (measurements).
    pub(crate) one_block_latency: bool,
    /// Shared memory of a multiprocessor, and what each block reserves of it.
    smem_per_sm: usize,
    smem_reserved: usize,
    multiprocessors: u32,
    /// Set by [`Gpu::set_search_overrides`]: one build for every
    /// launch whose large arrays are in shared memory, whatever its shared
    /// memory or batch size, for measurements (spilled launches keep theirs).
    pub(crate) forced_search_kernel: Option<SearchKernel>,
}

/// The builds of the shared-memory wave search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchKernel {
    /// `wave_search`: `BLOCK_THREADS` threads, 3 blocks per multiprocessor.
    Wide,
    /// `wave_search_dense`: `BLOCK_THREADS` threads, 4 blocks.
    Dense,
    /// `wave_search_narrow`: `NARROW_BLOCK_THREADS` threads, 8 blocks.
    Narrow,
    /// `wave_search_latency`: `LATENCY_BLOCK_THREADS` threads, 1 block.
    Latency,
}

/// Device address of a buffer (for the pointer tables the kernels read).
pub fn device_address<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _guard) = s.device_ptr(stream);
    p
}

pub(crate) fn cfg(blocks: u32, shared: u32) -> LaunchConfig {
    cfg_threads(blocks, BLOCK_THREADS, shared)
}

pub(crate) fn cfg_threads(blocks: u32, threads: u32, shared: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks.max(1), 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: shared,
    }
}

pub(crate) fn blocks_for(items: u64) -> Result<u32, GpuError> {
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
        let module = ctx.load_module(Ptx::from_src(bounded_ptx()))?;
        let f = |name: &str| module.load_function(name);
        let wave_search = f("wave_search")?;
        let wave_search_spilled = f("wave_search_spilled")?;
        let wave_search_dense = f("wave_search_dense")?;
        let wave_search_narrow = f("wave_search_narrow")?;
        let wave_search_latency = f("wave_search_latency")?;
        let attribute = |a| ctx.attribute(a).map(|v| v as usize);
        let max_smem = attribute(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )?;
        let smem_per_sm = attribute(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
        )?;
        let smem_reserved = attribute(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
        )?;
        // The dense kernel when DENSE_SEARCH_BLOCKS_PER_SM blocks of this much
        // dynamic shared memory fit one multiprocessor.
        let fitting = |blocks: u32| (smem_per_sm / blocks as usize).saturating_sub(smem_reserved);
        let dense_max_smem = fitting(DENSE_SEARCH_BLOCKS_PER_SM);
        let narrow_max_smem = fitting(NARROW_SEARCH_BLOCKS_PER_SM);
        let multiprocessors =
            attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let narrow_min_batch = multiprocessors as u32 * NARROW_SEARCH_BLOCKS_PER_SM;
        let latency_max_batch = multiprocessors as u32 * LATENCY_SEARCH_BLOCKS_PER_SM;
        let topk_tile = f("topk_tile")?;
        for func in [
            &wave_search,
            &wave_search_spilled,
            &wave_search_dense,
            &wave_search_narrow,
            &wave_search_latency,
            &topk_tile,
        ] {
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
            query_fragments: f("query_fragments")?,
            sub_bias: f("sub_bias")?,
            sub_bias_into: f("sub_bias_into")?,
            row_sq_norms: f("row_sq_norms")?,
            ctx,
            stream,
            module,
            blas,
            _blas_workspace: workspace,
            wave_search,
            wave_search_spilled,
            wave_search_dense,
            wave_search_narrow,
            wave_search_latency,
            topk_tile,
            max_smem,
            dense_max_smem,
            narrow_max_smem,
            narrow_min_batch,
            latency_max_batch,
            one_block_latency: true,
            smem_per_sm,
            smem_reserved,
            multiprocessors: multiprocessors as u32,
            forced_search_kernel: None,
        })
    }

    /// Overrides of the search kernel's choice, for measurements: one build
    /// for every launch (`forced`), and whether the 1,024-thread latency
    /// build may take any batch whose block has a multiprocessor to itself
    /// (`one_block_latency`, the default) or only small batches.
    pub fn set_search_overrides(&mut self, forced: Option<SearchKernel>, one_block_latency: bool) {
        self.forced_search_kernel = forced;
        self.one_block_latency = one_block_latency;
    }

    /// Blocks of the wide build per multiprocessor for a search launch with
    /// `smem` bytes of dynamic shared memory a block (at one block the
    /// latency build takes it instead): at most [`SEARCH_BLOCKS_PER_SM`],
    /// and 0 past a block's shared memory (the launch spills). `None` where
    /// the dense or narrow build takes it.
    pub fn wide_search_blocks(&self, smem: usize) -> Option<u32> {
        if smem <= self.dense_max_smem {
            return None;
        }
        if smem > self.max_smem {
            return Some(0);
        }
        let fit = self.smem_per_sm / (smem + self.smem_reserved);
        Some((fit as u32).min(SEARCH_BLOCKS_PER_SM))
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

    /// The card's theoretical DRAM bandwidth in bytes per second: twice the
    /// memory clock (double data rate) times the bus width, as the driver
    /// reports them; `None` unless it reports both.
    pub fn peak_memory_bandwidth(&self) -> Option<f64> {
        let attribute = |a| {
            self.ctx
                .attribute(a)
                .ok()
                .filter(|&v| v > 0)
                .map(|v| v as f64)
        };
        let clock_khz = attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)?;
        let bus_bits =
            attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)?;
        Some(peak_bandwidth(clock_khz, bus_bits))
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

    /// Streaming multiprocessors of the device: a launch of at most this many
    /// blocks runs one block per multiprocessor, whatever its shared memory.
    pub fn multiprocessors(&self) -> u32 {
        self.multiprocessors
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

    /// Copy `dst.len()` bytes from device address `src` (memory of this
    /// device that the caller owns, e.g. a DLPack tensor's) to the host.
    ///
    /// # Safety
    /// `src .. src + dst.len()` is live device memory of this context.
    pub unsafe fn copy_from_device_address(
        &self,
        src: u64,
        dst: &mut [u8],
    ) -> Result<(), GpuError> {
        self.ctx.bind_to_thread()?;
        // SAFETY: the caller's contract.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(dst, src) }?;
        Ok(())
    }

    /// Copy `src` to device address `dst` (memory of this device that the
    /// caller owns).
    ///
    /// # Safety
    /// `dst .. dst + src.len()` is live, writable device memory of this context.
    pub unsafe fn copy_to_device_address(&self, src: &[u8], dst: u64) -> Result<(), GpuError> {
        self.ctx.bind_to_thread()?;
        // SAFETY: the caller's contract.
        unsafe { cudarc::driver::result::memcpy_htod_sync(dst, src) }?;
        Ok(())
    }

    /// A new event; `timing`: it can measure elapsed time.
    pub fn event(&self, timing: bool) -> Result<CudaEvent, GpuError> {
        let flags = timing.then_some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        Ok(self.ctx.new_event(flags)?)
    }

    /// A second stream of this context (uploads beside the compute stream).
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, GpuError> {
        Ok(self.ctx.new_stream()?)
    }

    /// Capture what `launch` puts on [`Gpu::stream`] as a CUDA graph (the
    /// launches are recorded, not run; replay the graph to run them).
    pub fn capture(
        &self,
        launch: impl FnOnce() -> Result<(), GpuError>,
    ) -> Result<CudaGraph, GpuError> {
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        let launched = launch();
        let graph = self.stream.end_capture(sys::CUgraphInstantiate_flags(0));
        launched?;
        graph?.ok_or_else(|| GpuError::Unsupported("stream capture produced no graph".into()))
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
}

#[cfg(test)]
mod tests {
    use super::peak_bandwidth;

    #[test]
    fn peak_bandwidth_is_double_data_rate_times_the_bus() {
        // An H100 SXM as the driver reports it: 2,619 MHz, 5,120 bits; its
        // data sheet says 3.35 TB/s.
        let b = peak_bandwidth(2_619_000.0, 5_120.0);
        assert!((b / 3.35e12 - 1.0).abs() < 0.01, "{b}");
    }
}
