//! Page-locked host buffers and asynchronous copies between them and device
//! buffers, for pipelines that overlap transfers with kernels.
//!
//! Unlike `cudarc`'s `PinnedHostSlice`, a [`PinnedBuf`] can copy any prefix, and
//! ordering is the caller's: it records and waits on its own events (see
//! `octex_search`'s GPU pipeline).

use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext, CudaSlice, CudaStream, DevicePtr, DeviceRepr};

use rayon::prelude::*;

use crate::GpuError;

/// A page-locked host buffer of `len` values of `T`.
pub struct PinnedBuf<T: DeviceRepr + Copy + Default> {
    ptr: *mut T,
    len: usize,
    _ctx: Arc<CudaContext>,
}

// SAFETY: the buffer is plain host memory owned by this value; access goes
// through `&self` / `&mut self` like a `Vec`.
unsafe impl<T: DeviceRepr + Copy + Default + Send> Send for PinnedBuf<T> {}
// SAFETY: as above.
unsafe impl<T: DeviceRepr + Copy + Default + Sync> Sync for PinnedBuf<T> {}

impl<T: DeviceRepr + Copy + Default> PinnedBuf<T> {
    /// `len` values, set to `T::default()`. `write_combined`: faster host
    /// writes and transfers to the device, very slow host reads (use it for
    /// uploads only).
    pub fn new(ctx: &Arc<CudaContext>, len: usize, write_combined: bool) -> Result<Self, GpuError> {
        let len = len.max(1);
        ctx.bind_to_thread()?;
        let flags = if write_combined {
            sys::CU_MEMHOSTALLOC_WRITECOMBINED
        } else {
            0
        };
        // SAFETY: a fresh allocation of len * size_of::<T>() bytes, filled below
        // before any read.
        let ptr = unsafe { result::malloc_host(len * std::mem::size_of::<T>(), flags) }? as *mut T;
        for i in 0..len {
            // SAFETY: i < len, inside the allocation.
            unsafe { ptr.add(i).write(T::default()) };
        }
        Ok(Self {
            ptr,
            len,
            _ctx: ctx.clone(),
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The host values. The caller must know that no copy into or out of the
    /// buffer is in flight (it synchronised on the event recorded after it).
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: ptr holds len initialised values.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// As [`PinnedBuf::as_slice`], mutable.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: ptr holds len initialised values; &mut self is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Enqueue a copy of the first `n` values to `dst` on `stream`. The buffer
    /// must not be written until the stream has passed this copy.
    pub fn upload_prefix(
        &self,
        n: usize,
        dst: &mut CudaSlice<T>,
        stream: &CudaStream,
    ) -> Result<(), GpuError> {
        assert!(n <= self.len && n <= dst.len());
        let (d, _g) = dst.device_ptr(stream);
        // SAFETY: page-locked source of n values, device destination of at
        // least n values; the copy is ordered on `stream`.
        unsafe { result::memcpy_htod_async(d, &self.as_slice()[..n], stream.cu_stream()) }?;
        Ok(())
    }

    /// Enqueue a copy of the first `n` values of `src` into this buffer on
    /// `stream`. The buffer must not be read until the stream has passed it.
    pub fn download_prefix(
        &mut self,
        n: usize,
        src: &CudaSlice<T>,
        stream: &CudaStream,
    ) -> Result<(), GpuError> {
        assert!(n <= self.len && n <= src.len());
        let (s, _g) = src.device_ptr(stream);
        // SAFETY: as above, the other way.
        unsafe { result::memcpy_dtoh_async(&mut self.as_mut_slice()[..n], s, stream.cu_stream()) }?;
        Ok(())
    }
}

impl<T: DeviceRepr + Copy + Default> Drop for PinnedBuf<T> {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_host; owners synchronise their streams
        // before dropping (the searcher does in its Drop).
        let _ = unsafe { result::free_host(self.ptr as *mut std::ffi::c_void) };
    }
}

/// Page-locked staging for device-to-host copies of any size: chunks go by DMA
/// into the staging buffer, then all cores copy them to the destination (a
/// plain copy into pageable memory runs at a fraction of that speed).
pub struct Fetcher {
    staging: PinnedBuf<u8>,
}

/// Bytes per staged chunk.
const FETCH_CHUNK: usize = 32 << 20;

impl Fetcher {
    pub fn new(gpu: &crate::Gpu) -> Result<Self, GpuError> {
        Ok(Self {
            staging: PinnedBuf::new(gpu.context(), FETCH_CHUNK, false)?,
        })
    }

    /// Copy `src` to `dst` (same length); returns once `dst` holds it.
    pub fn fetch<T: DeviceRepr + bytemuck::Pod>(
        &mut self,
        src: &cudarc::driver::CudaView<T>,
        dst: &mut [T],
        stream: &CudaStream,
    ) -> Result<(), GpuError> {
        assert_eq!(src.len(), dst.len());
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(dst);
        let (base, _g) = src.device_ptr(stream);
        for (i, out) in bytes.chunks_mut(FETCH_CHUNK).enumerate() {
            let stage = &mut self.staging.as_mut_slice()[..out.len()];
            // SAFETY: the device range [base + i * FETCH_CHUNK, + out.len()) lies
            // inside `src`; the staging buffer is page-locked and not read until
            // the stream is synchronised below.
            unsafe {
                result::memcpy_dtoh_async(
                    stage,
                    base + (i * FETCH_CHUNK) as u64,
                    stream.cu_stream(),
                )
            }?;
            stream.synchronize()?;
            out.par_chunks_mut(1 << 20)
                .zip(stage.par_chunks(1 << 20))
                .for_each(|(o, s)| o.copy_from_slice(s));
        }
        Ok(())
    }
}
