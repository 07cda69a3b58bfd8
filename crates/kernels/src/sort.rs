//! Host side of the scan and radix-sort kernels (`gpu/src/sort.rs`): exclusive
//! prefix sums of `u32` and stable sorts of item ids by multi-word keys.

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr, PushKernelArg};

use crate::layout::SORT_TILE;
use crate::{blocks_for, cfg, Gpu, GpuError};

const WARPS: usize = crate::layout::BLOCK_THREADS as usize / 32;

/// One 32-bit word of a sort key: the words of `u32` values, or the low or
/// high word of `u64` values (the GPU is little-endian).
#[derive(Clone, Copy)]
pub enum KeyWord<'a> {
    U32(&'a CudaSlice<u32>),
    U64Low(&'a CudaSlice<u64>),
    U64High(&'a CudaSlice<u64>),
}

impl KeyWord<'_> {
    fn len(&self) -> usize {
        match self {
            KeyWord::U32(s) => s.len(),
            KeyWord::U64Low(s) | KeyWord::U64High(s) => s.len(),
        }
    }
}

/// Element types made of whole 4-byte words, for [`GpuSort::fill_ones`].
pub trait AllOnes {}
impl AllOnes for u32 {}
impl AllOnes for u64 {}

/// The scan and sort kernels, with scratch buffers for up to `capacity` items.
pub struct GpuSort {
    stream: std::sync::Arc<CudaStream>,
    capacity: usize,
    tile_sums: CudaFunction,
    scan_small: CudaFunction,
    scan_apply: CudaFunction,
    radix_histogram: CudaFunction,
    radix_scatter: CudaFunction,
    gather_word: CudaFunction,
    iota: CudaFunction,
    fill_u32: CudaFunction,
    keys_a: CudaSlice<u32>,
    keys_b: CudaSlice<u32>,
    perm_b: CudaSlice<u32>,
    counts: CudaSlice<u32>,
    sums: CudaSlice<u32>,
}

fn tiles(n: usize) -> usize {
    n.div_ceil(SORT_TILE as usize).max(1)
}

/// Device address of a buffer.
pub(crate) fn addr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _g) = s.device_ptr(stream);
    p
}

impl GpuSort {
    /// Kernels and scratch (about 12 bytes per item) for sorts of up to
    /// `capacity` items and sums of up to `256 * capacity / SORT_TILE` values.
    pub fn new(gpu: &Gpu, capacity: usize) -> Result<Self, GpuError> {
        let capacity = capacity.max(1);
        let count_len = 256 * tiles(capacity);
        // Sums of the counts need their own tile totals.
        let sums_len = tiles(count_len.max(capacity)) + 1;
        Ok(Self {
            stream: gpu.stream().clone(),
            capacity,
            tile_sums: gpu.function("tile_sums")?,
            scan_small: gpu.function("scan_small")?,
            scan_apply: gpu.function("scan_apply")?,
            radix_histogram: gpu.function("radix_histogram")?,
            radix_scatter: gpu.function("radix_scatter")?,
            gather_word: gpu.function("gather_word")?,
            iota: gpu.function("iota")?,
            fill_u32: gpu.function("fill_u32")?,
            keys_a: gpu.zeros(capacity)?,
            keys_b: gpu.zeros(capacity)?,
            perm_b: gpu.zeros(capacity)?,
            counts: gpu.zeros(count_len + 1)?,
            sums: gpu.zeros(sums_len)?,
        })
    }

    /// Exclusive prefix sum of `data[..n]` in place, the total in `data[n]`.
    pub fn scan(&self, data: &mut CudaSlice<u32>, n: usize) -> Result<(), GpuError> {
        assert!(data.len() > n);
        let a = addr(data, &self.stream);
        // SAFETY: data holds n + 1 values; sums holds tiles(n) + 1 (asserted).
        unsafe { self.scan_raw(a, n) }
    }

    /// # Safety
    /// `data` addresses `n + 1` values; `n <= 256 * capacity / SORT_TILE` or
    /// `n <= capacity`.
    unsafe fn scan_raw(&self, data: u64, n: usize) -> Result<(), GpuError> {
        let n32 = u32::try_from(n).map_err(|_| GpuError::Unsupported("scan over 2^32".into()))?;
        let small_smem = 4 * (WARPS as u32 + 1);
        if n <= SORT_TILE as usize {
            let mut b = self.stream.launch_builder(&self.scan_small);
            b.arg(&data).arg(&n32);
            // SAFETY: per the caller's contract.
            unsafe { b.launch(cfg(1, small_smem)) }?;
            return Ok(());
        }
        let t = tiles(n);
        assert!(self.sums.len() > t);
        let sums = addr(&self.sums, &self.stream);
        let t32 = t as u32;
        let mut b = self.stream.launch_builder(&self.tile_sums);
        b.arg(&data).arg(&n32).arg(&sums);
        // SAFETY: data has n values, sums t + 1.
        unsafe { b.launch(cfg(t32, small_smem)) }?;
        let mut b = self.stream.launch_builder(&self.scan_small);
        b.arg(&sums).arg(&t32);
        // SAFETY: as above.
        unsafe { b.launch(cfg(1, small_smem)) }?;
        let mut b = self.stream.launch_builder(&self.scan_apply);
        b.arg(&data).arg(&n32).arg(&sums);
        // SAFETY: as above; shared memory as scan_apply documents.
        unsafe { b.launch(cfg(t32, 4 * SORT_TILE + small_smem)) }?;
        // The total: tile sums' total to data[n].
        // SAFETY: both addresses hold a u32 at these offsets; same stream.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(
                data + 4 * n as u64,
                sums + 4 * t as u64,
                4,
                self.stream.cu_stream(),
            )
        }?;
        Ok(())
    }

    /// Set every bit of `out` (`u32::MAX`, `u64::MAX`: the free slots of a
    /// key table, `EMPTY_KEY` and ordinal `u32::MAX`).
    pub fn fill_ones<T: cudarc::driver::DeviceRepr + AllOnes>(
        &self,
        out: &mut cudarc::driver::CudaViewMut<T>,
    ) -> Result<(), GpuError> {
        let words = (out.len() * std::mem::size_of::<T>() / 4) as u64;
        let value = u32::MAX;
        let mut b = self.stream.launch_builder(&self.fill_u32);
        b.arg(out).arg(&words).arg(&value);
        // SAFETY: `out` holds exactly `words` 4-byte words (T is u32 or u64).
        unsafe { b.launch(cfg(blocks_for(words)?, 0)) }?;
        Ok(())
    }

    /// Sort the ids `0..n` into `perm` by a key of 32-bit `words`, least
    /// significant first; ties keep id order (every pass is stable).
    pub fn sort_ids(
        &mut self,
        perm: &mut CudaSlice<u32>,
        n: usize,
        words: &[KeyWord],
    ) -> Result<(), GpuError> {
        if n > self.capacity || perm.len() < n || words.iter().any(|w| w.len() < n) {
            return Err(GpuError::Unsupported(format!(
                "sort of {n} items: scratch for {} (or short inputs)",
                self.capacity
            )));
        }
        let n32 = n as u32;
        let s = &self.stream;
        let perm_a = addr(perm, s);
        {
            let mut b = s.launch_builder(&self.iota);
            b.arg(&perm_a).arg(&n32);
            // SAFETY: perm holds n values.
            unsafe { b.launch(cfg(blocks_for(n as u64)?, 0)) }?;
        }
        let (ka, kb, pb) = (
            addr(&self.keys_a, s),
            addr(&self.keys_b, s),
            addr(&self.perm_b, s),
        );
        let counts = addr(&self.counts, s);
        let t = tiles(n);
        let t32 = t as u32;
        for w in words {
            let (src, stride, word) = match w {
                KeyWord::U32(x) => (addr(*x, s), 1u32, 0u32),
                KeyWord::U64Low(x) => (addr(*x, s), 2, 0),
                KeyWord::U64High(x) => (addr(*x, s), 2, 1),
            };
            let mut b = s.launch_builder(&self.gather_word);
            b.arg(&src)
                .arg(&stride)
                .arg(&word)
                .arg(&perm_a)
                .arg(&n32)
                .arg(&ka);
            // SAFETY: src holds n items of `stride` words; perm and keys_a n values.
            unsafe { b.launch(cfg(blocks_for(n as u64)?, 0)) }?;
            // Four 8-bit passes: (a -> b), (b -> a), (a -> b), (b -> a).
            for pass in 0..4u32 {
                let shift = 8 * pass;
                let (kin, pin, kout, pout) = if pass % 2 == 0 {
                    (ka, perm_a, kb, pb)
                } else {
                    (kb, pb, ka, perm_a)
                };
                let mut b = s.launch_builder(&self.radix_histogram);
                b.arg(&kin).arg(&n32).arg(&shift).arg(&counts).arg(&t32);
                // SAFETY: kin has n values, counts 256 * t + 1.
                unsafe { b.launch(cfg(t32, 4 * 256)) }?;
                // SAFETY: counts holds 256 * t + 1 values, within the sums' scratch.
                unsafe { self.scan_raw(counts, 256 * t) }?;
                let mut b = s.launch_builder(&self.radix_scatter);
                b.arg(&kin)
                    .arg(&pin)
                    .arg(&n32)
                    .arg(&shift)
                    .arg(&counts)
                    .arg(&t32)
                    .arg(&kout)
                    .arg(&pout);
                // SAFETY: all four buffers hold n values; shared memory as documented.
                unsafe { b.launch(cfg(t32, 4 * (256 + 256 * WARPS as u32))) }?;
            }
        }
        Ok(())
    }

    /// Read one value back (synchronises the stream).
    pub fn read(&self, s: &CudaSlice<u32>, i: usize) -> Result<u32, GpuError> {
        let mut v = [0u32];
        self.stream.memcpy_dtoh(&s.slice(i..i + 1), &mut v)?;
        Ok(v[0])
    }
}
