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

use crate::layout::BLOCK_THREADS;
use crate::search::SearchKernel;
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

/// CUDA devices the driver reports (0 without a driver).
pub fn device_count() -> usize {
    if !driver_available() {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

/// cuBLAS workspace (fixed, so products can be captured in graphs).
const BLAS_WORKSPACE: usize = 32 << 20;

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

/// The module as the driver loads it: [`PTX`] with the launch bounds of each
/// build of `wave_search` ([`SearchKernel::ALL`]; `cargo xtask kernel-report`
/// compiles the same text with `ptxas` to show each build's registers and
/// spills).
pub fn bounded_ptx() -> String {
    SearchKernel::ALL.iter().fold(PTX.to_string(), |ptx, k| {
        with_launch_bounds(&ptx, k.entry(), k.threads(), k.blocks_per_sm())
    })
}

/// One GPU: context, stream, kernels and cuBLAS.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
    pub(crate) blas: CudaBlas,
    _blas_workspace: CudaSlice<u8>,
    /// The builds of `wave_search`, in the order of [`SearchKernel::ALL`].
    pub(crate) wave_search_builds: Vec<CudaFunction>,
    pub(crate) fragment_keys: CudaFunction,
    pub(crate) query_fragments: CudaFunction,
    pub(crate) sub_bias: CudaFunction,
    pub(crate) sub_bias_into: CudaFunction,
    pub(crate) row_sq_norms: CudaFunction,
    pub(crate) topk_tile: CudaFunction,
    pub(crate) limits: DeviceLimits,
}

/// What a device offers the search kernels' launches: multiprocessors and
/// shared memory (read once when the device is opened).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    pub multiprocessors: u32,
    /// Most dynamic shared memory one block may take (opted in).
    pub max_block_smem: usize,
    /// Shared memory of one multiprocessor.
    pub smem_per_sm: usize,
    /// What each block reserves of it beside its dynamic shared memory.
    pub smem_reserved: usize,
}

impl DeviceLimits {
    /// Most dynamic shared memory a block may take for `blocks` of them to
    /// share one multiprocessor.
    pub fn smem_for_blocks(&self, blocks: u32) -> usize {
        (self.smem_per_sm / blocks as usize).saturating_sub(self.smem_reserved)
    }

    /// Blocks of `smem` bytes of dynamic shared memory that fit one
    /// multiprocessor (0 past a block's limit).
    pub fn blocks_per_sm(&self, smem: usize) -> u32 {
        if smem > self.max_block_smem {
            return 0;
        }
        (self.smem_per_sm / (smem + self.smem_reserved)) as u32
    }
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
        let wave_search_builds = SearchKernel::ALL
            .iter()
            .map(|k| f(k.entry()))
            .collect::<Result<Vec<_>, _>>()?;
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
        let multiprocessors =
            attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let topk_tile = f("topk_tile")?;
        for func in wave_search_builds.iter().chain([&topk_tile]) {
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
            wave_search_builds,
            topk_tile,
            limits: DeviceLimits {
                multiprocessors: multiprocessors as u32,
                max_block_smem: max_smem,
                smem_per_sm,
                smem_reserved,
            },
        })
    }

    /// The device's multiprocessors and shared memory.
    pub fn limits(&self) -> DeviceLimits {
        self.limits
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
        self.limits.max_block_smem
    }

    /// Streaming multiprocessors of the device: a launch of at most this many
    /// blocks runs one block per multiprocessor, whatever its shared memory.
    pub fn multiprocessors(&self) -> u32 {
        self.limits.multiprocessors
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
