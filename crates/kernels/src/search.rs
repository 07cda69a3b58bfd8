//! Launchers of the search kernels (`gpu/src/search.rs`,
//! `gpu/src/fragments.rs`): the per-query `wave_search`, the per-item
//! passes of `query_fragments` that run before it for large batches, and
//! `fragment_keys`; and the views they read: [`DeviceIndexView`] (an index
//! view with its copy in device memory, which `fragment_keys` reads) and
//! [`DeviceBatchView`] (a batch view; `wave_search` and `query_fragments`
//! take both views by value, as kernel parameters).

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, PushKernelArg};

use crate::device::cfg_threads;
use crate::layout::{
    BatchView, FragmentLookupLayout, IndexView, SearchSmem, BLOCK_THREADS, LATENCY_BLOCK_THREADS,
    LOOKUP_TILE_SMEM, MAX_LOOKUP_SPACINGS, NARROW_BLOCK_THREADS,
};
use crate::{blocks_for, cfg, Gpu, GpuError, Layout};

impl Gpu {
    /// Fragment key and centre distance of every (vector, copy, spacing) of `n`
    /// projected vectors `z` (`n x width`): `keys`/`dists` are
    /// `n x copies x spacings`.
    pub fn fragment_keys(
        &self,
        index: &DeviceIndexView,
        z: &CudaView<f32>,
        n: usize,
        keys: &mut CudaViewMut<u64>,
        dists: &mut CudaViewMut<f32>,
    ) -> Result<(), GpuError> {
        let v = index.view;
        let items = n as u64 * v.copies as u64 * v.spacings as u64;
        assert!(z.len() >= n * v.width as usize);
        assert!(keys.len() as u64 >= items && dists.len() as u64 >= items);
        let n32 = n as u32;
        let mut b = self.stream.launch_builder(&self.fragment_keys);
        b.arg(&index.dev).arg(z).arg(&n32).arg(keys).arg(dists);
        // SAFETY: sizes asserted above; the view's pointers are live (DeviceIndexView
        // is built from buffers its owner keeps).
        unsafe { b.launch(cfg(blocks_for(items)?, 0)) }?;
        Ok(())
    }

    /// The fragment of every (query, copy) of a batch whose view names a
    /// `frag_hits` buffer ([`FragmentLookupLayout`]), for the `wave_search`
    /// launch that follows: its counts zeroed, then one `query_fragments`
    /// pass per spacing, finest first. Does nothing for a view without one
    /// (`wave_search` then finds them itself).
    pub fn query_fragments(
        &self,
        index: &DeviceIndexView,
        batch: &DeviceBatchView,
        buffer: &mut CudaSlice<u32>,
    ) -> Result<(), GpuError> {
        let (iv, bv) = (index.view, batch.view);
        if bv.frag_hits == 0 {
            return Ok(());
        }
        let lay = FragmentLookupLayout::new(bv.nq, iv.copies);
        let copy_dim = 8 * iv.blocks;
        if !FragmentLookupLayout::takes(iv.spacings, copy_dim) || buffer.len() < lay.words as usize
        {
            return Err(GpuError::Unsupported(format!(
                "internal: a fragment lookup of {} spacings, copies of {copy_dim} coordinates, into {} words (at most {MAX_LOOKUP_SPACINGS} spacings, tiles of {LOOKUP_TILE_SMEM} bytes, {} words)",
                iv.spacings,
                buffer.len(),
                lay.words
            )));
        }
        let counts = lay.counts as usize;
        self.stream
            .memset_zeros(&mut buffer.slice_mut(counts..counts + MAX_LOOKUP_SPACINGS as usize))?;
        let items = bv.nq as u64 * iv.copies as u64;
        let (index_view, batch_view) = (Layout(iv), Layout(bv));
        for spacing in 0..iv.spacings {
            // Pass 0 in tiles with their projections in shared memory; the
            // later ones a thread per item.
            let launch = if spacing == 0 {
                cfg(
                    FragmentLookupLayout::tiles(bv.nq, iv.copies, copy_dim),
                    FragmentLookupLayout::tile_smem(copy_dim),
                )
            } else {
                cfg(blocks_for(items)?, 0)
            };
            let mut b = self.stream.launch_builder(&self.query_fragments);
            b.arg(&index_view).arg(&batch_view).arg(&spacing);
            // SAFETY: the views' pointers are live and sized as they say
            // (their owners build them; the buffer holds `lay.words` words,
            // checked above); pass 0 gets its tiles' shared memory (at most
            // LOOKUP_TILE_SMEM, the default limit), the later passes a thread
            // per item (the kernel returns past the pass's count).
            unsafe { b.launch(launch) }?;
        }
        Ok(())
    }

    /// The wave search of a batch with the build `kernel`: one block per
    /// query. `batch` must describe live buffers sized for `nq` queries (see
    /// [`BatchView`]); the caller's launch plan chose the build, which this
    /// checks against the batch (a spilled batch takes the spilled build
    /// only, the dense and narrow builds hash power-of-two sets only).
    pub fn wave_search(
        &self,
        index: &DeviceIndexView,
        batch: &DeviceBatchView,
        kernel: SearchKernel,
    ) -> Result<(), GpuError> {
        let smem = SearchSmem::new(&index.view, &batch.view).total as usize;
        if smem > self.limits.max_block_smem {
            return Err(GpuError::Unsupported(format!(
                "these search parameters need {smem} bytes of shared memory per query, the GPU has {}",
                self.limits.max_block_smem
            )));
        }
        let spilled = batch.view.scratch_per_query > 0;
        let hashes = match kernel {
            SearchKernel::Dense | SearchKernel::Narrow => batch.view.hash_slots.is_power_of_two(),
            _ => true,
        };
        if spilled != (kernel == SearchKernel::Spilled) || !hashes {
            return Err(GpuError::Unsupported(format!(
                "internal: build {kernel:?} for a batch of {} visited slots{}",
                batch.view.hash_slots,
                if spilled { ", spilled" } else { "" }
            )));
        }
        // The views by value: kernel parameters sit in the constant bank,
        // where ptxas reads their fields again instead of keeping them in
        // registers (fewer spills than pointers to device copies).
        let (index_view, batch_view) = (Layout(index.view), Layout(batch.view));
        let mut b = self
            .stream
            .launch_builder(&self.wave_search_builds[kernel as usize]);
        b.arg(&index_view).arg(&batch_view);
        // SAFETY: the views' pointers are live and sized as they say (their owners
        // build them); shared memory as SearchSmem lays it out; each build is
        // launched with the block size it was compiled for.
        unsafe { b.launch(cfg_threads(batch.view.nq, kernel.threads(), smem as u32)) }?;
        Ok(())
    }
}

/// The builds of `wave_search`: one source compiled with different launch
/// bounds (threads per block and blocks per multiprocessor, hence a register
/// cap each), and one with its large arrays in a global scratch. The search
/// crate's launch plan picks one per batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SearchKernel {
    /// `wave_search`: 3 blocks a multiprocessor (80 of 255 registers, so
    /// three blocks of typical shared memory, ~60 KB, share one).
    Wide,
    /// `wave_search_spilled`: the wide build with the large per-query arrays
    /// in global scratch, for batches past a block's shared memory.
    Spilled,
    /// `wave_search_dense`: 4 blocks (64 registers a thread).
    Dense,
    /// `wave_search_narrow`: 128 threads, 8 blocks (64 registers).
    Narrow,
    /// `wave_search_latency`: 1,024 threads, one block a multiprocessor
    /// (64 registers).
    Latency,
}

impl SearchKernel {
    /// Every build, in the order the device loads them (`kernel as usize`).
    pub const ALL: [SearchKernel; 5] = [
        SearchKernel::Wide,
        SearchKernel::Spilled,
        SearchKernel::Dense,
        SearchKernel::Narrow,
        SearchKernel::Latency,
    ];

    /// The kernel's entry in the module.
    pub const fn entry(self) -> &'static str {
        match self {
            SearchKernel::Wide => "wave_search",
            SearchKernel::Spilled => "wave_search_spilled",
            SearchKernel::Dense => "wave_search_dense",
            SearchKernel::Narrow => "wave_search_narrow",
            SearchKernel::Latency => "wave_search_latency",
        }
    }

    /// Threads per block it was compiled for.
    pub const fn threads(self) -> u32 {
        match self {
            SearchKernel::Wide | SearchKernel::Spilled | SearchKernel::Dense => BLOCK_THREADS,
            SearchKernel::Narrow => NARROW_BLOCK_THREADS,
            SearchKernel::Latency => LATENCY_BLOCK_THREADS,
        }
    }

    /// Blocks per multiprocessor of its launch bounds.
    pub const fn blocks_per_sm(self) -> u32 {
        match self {
            SearchKernel::Wide | SearchKernel::Spilled => 3,
            SearchKernel::Dense => 4,
            SearchKernel::Narrow => 8,
            SearchKernel::Latency => 1,
        }
    }
}

/// An [`IndexView`] and its copy in device memory (what kernels receive).
pub struct DeviceIndexView {
    pub view: IndexView,
    dev: CudaSlice<Layout<IndexView>>,
}

impl DeviceIndexView {
    /// Upload `view`.
    ///
    /// # Safety
    ///
    /// Every address in `view` points to a live device buffer of the size
    /// the view's counts say, and the caller keeps those buffers alive as long
    /// as this value: the search kernels read through them unchecked.
    pub unsafe fn new(gpu: &Gpu, view: IndexView) -> Result<Self, GpuError> {
        Ok(Self {
            view,
            dev: gpu.upload(&[Layout(view)])?,
        })
    }
}

/// The [`BatchView`] of the next `wave_search` launch, which passes it by
/// value (a kernel parameter; no copy in device memory). A captured graph
/// keeps the view it was captured with.
pub struct DeviceBatchView {
    pub view: BatchView,
}

impl DeviceBatchView {
    pub fn new(view: BatchView) -> Self {
        Self { view }
    }

    /// Set the view the next launch or capture passes.
    pub fn update(&mut self, view: BatchView) {
        self.view = view;
    }
}
