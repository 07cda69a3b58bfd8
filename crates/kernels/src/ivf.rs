//! Typed launchers of the inverted-file kernels (`gpu/src/ivf.rs`) that find
//! each stored fragment's ripple by the paper's rule: row gathers, the nearest
//! centroids of many rows, fragment centres and the scan of probed lists.
//! The algorithm that strings them together (k-means, filing, probing) lives
//! in `octex-build` (`gpu_centre_knn`).

use cudarc::driver::{CudaFunction, CudaSlice, CudaView, CudaViewMut, PushKernelArg};

use crate::layout::{IVF_CENTROID_TILE, IVF_MAX_DIM, IVF_MAX_PROBES};
use crate::{blocks_for, cfg, Gpu, GpuError};

/// The inverted-file kernels, loaded once.
pub struct IvfKernels {
    gather_rows: CudaFunction,
    nearest_centroids: CudaFunction,
    fragment_centres: CudaFunction,
    ivf_scan: CudaFunction,
}

/// Shared memory of one `ivf_scan` block for `dim` and ripples of `l`.
fn scan_shared_bytes(dim: usize, l: usize) -> usize {
    8 * (dim / 2 + 1) + 8 * (l + 2 * crate::layout::BLOCK_THREADS as usize).next_power_of_two()
}

impl IvfKernels {
    /// Widest projection the kernels take.
    pub const MAX_DIM: usize = IVF_MAX_DIM as usize;
    /// Most probes per centre.
    pub const MAX_PROBES: usize = IVF_MAX_PROBES as usize;
    /// Longest ripple the scan takes.
    pub const MAX_LIST_LEN: usize = 1024;

    pub fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        Ok(Self {
            gather_rows: gpu.function("gather_rows")?,
            nearest_centroids: gpu.function("nearest_centroids")?,
            fragment_centres: gpu.function("fragment_centres")?,
            ivf_scan: gpu.function("ivf_scan")?,
        })
    }

    /// `dst[r] = src[idx[r]]` for the `idx.len()` rows of `dim` values.
    pub fn gather_rows(
        &self,
        gpu: &Gpu,
        src: &CudaView<f32>,
        dim: usize,
        idx: &CudaSlice<u32>,
        dst: &mut CudaSlice<f32>,
    ) -> Result<(), GpuError> {
        let count = idx.len();
        assert!(dst.len() >= count * dim);
        let (d32, c32) = (dim as u32, count as u32);
        let mut b = gpu.stream().launch_builder(&self.gather_rows);
        b.arg(src).arg(&d32).arg(idx).arg(&c32).arg(dst);
        // SAFETY: dst holds count x dim values; the caller's idx are rows of src.
        unsafe { b.launch(cfg(blocks_for((count * dim) as u64)?, 0)) }?;
        Ok(())
    }

    /// The `p` centroids (`k x dim`, squared norms `cnorms`) nearest to each
    /// of the `n` rows of `rows`, nearest first, into `out` (`n x p`).
    #[allow(clippy::too_many_arguments)]
    pub fn nearest_centroids(
        &self,
        gpu: &Gpu,
        rows: &CudaView<f32>,
        (n, dim): (usize, usize),
        centroids: &CudaSlice<f32>,
        cnorms: &CudaSlice<f32>,
        p: usize,
        out: &mut CudaViewMut<u32>,
    ) -> Result<(), GpuError> {
        let k = cnorms.len();
        if dim == 0 || dim > Self::MAX_DIM || p == 0 || p > Self::MAX_PROBES || p > k {
            return Err(GpuError::Unsupported(format!(
                "nearest centroids need 0 < dim <= {} and 0 < p <= min(k, {}) (dim {dim}, p {p}, k {k})",
                Self::MAX_DIM,
                Self::MAX_PROBES
            )));
        }
        assert!(rows.len() >= n * dim && centroids.len() >= k * dim && out.len() >= n * p);
        if n == 0 {
            return Ok(());
        }
        let smem = 4 * IVF_CENTROID_TILE as usize * (dim + 1);
        let (n32, d32, k32, p32) = (n as u32, dim as u32, k as u32, p as u32);
        let mut b = gpu.stream().launch_builder(&self.nearest_centroids);
        b.arg(rows)
            .arg(&n32)
            .arg(&d32)
            .arg(centroids)
            .arg(cnorms)
            .arg(&k32)
            .arg(&p32)
            .arg(out);
        // SAFETY: sizes checked above; shared memory as the kernel documents.
        unsafe { b.launch(cfg(blocks_for(n as u64)?, smem as u32)) }?;
        Ok(())
    }

    /// The centres (`count x 8 blocks`, into `out`) of the `count` stored
    /// fragments whose first members are `perm[frag_start[f]]`, at `spacing`,
    /// for the copy projected to `z` with `shift`.
    #[allow(clippy::too_many_arguments)]
    pub fn fragment_centres(
        &self,
        gpu: &Gpu,
        z: &CudaView<f32>,
        blocks: usize,
        shift: &CudaSlice<f32>,
        spacing: f32,
        (perm, frag_start): (&CudaView<u32>, &CudaView<u32>),
        count: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<(), GpuError> {
        assert!(frag_start.len() >= count && out.len() >= count * 8 * blocks);
        assert!(shift.len() >= 8 * blocks);
        if count == 0 {
            return Ok(());
        }
        let (b32, c32, inv) = (blocks as u32, count as u32, 1.0f32 / spacing);
        let mut b = gpu.stream().launch_builder(&self.fragment_centres);
        b.arg(z)
            .arg(&b32)
            .arg(shift)
            .arg(&inv)
            .arg(&spacing)
            .arg(perm)
            .arg(frag_start)
            .arg(&c32)
            .arg(out);
        // SAFETY: out holds count x 8 blocks; the builder's perm and frag_start
        // name rows of z.
        unsafe { b.launch(cfg(blocks_for((count * blocks) as u64)?, 0)) }?;
        Ok(())
    }

    /// The `l` rows of `z` nearest to each of the `count` centres, scanning
    /// the `p` lists each centre's row of `probes` names (`list_offsets`,
    /// `list_ids`: list `j` holds `list_ids[list_offsets[j]..list_offsets[j+1]]`),
    /// into `out` (`count x l`, nearest first, `PAD_ID` past what was found),
    /// the centres taken in `order` (a permutation of `0..count`; grouping
    /// centres by nearest list keeps the lists they read in L2).
    #[allow(clippy::too_many_arguments)]
    pub fn scan(
        &self,
        gpu: &Gpu,
        z: &CudaView<f32>,
        dim: usize,
        (list_offsets, list_ids): (&CudaSlice<u32>, &CudaSlice<u32>),
        centres: &CudaSlice<f32>,
        (probes, p): (&CudaSlice<u32>, usize),
        order: &CudaSlice<u32>,
        (count, l): (usize, usize),
        out: &mut CudaViewMut<u32>,
    ) -> Result<(), GpuError> {
        if l == 0 || l > Self::MAX_LIST_LEN || dim == 0 || dim > Self::MAX_DIM || dim % 2 != 0 {
            return Err(GpuError::Unsupported(format!(
                "the list scan needs 0 < l <= {} and an even dim <= {} (l {l}, dim {dim})",
                Self::MAX_LIST_LEN,
                Self::MAX_DIM
            )));
        }
        assert!(centres.len() >= count * dim && probes.len() >= count * p);
        assert!(order.len() >= count);
        assert!(out.len() >= count * l);
        if count == 0 {
            return Ok(());
        }
        let grid = u32::try_from(count)
            .map_err(|_| GpuError::Unsupported(format!("{count} centres in one scan")))?;
        let (d32, p32, l32) = (dim as u32, p as u32, l as u32);
        let mut b = gpu.stream().launch_builder(&self.ivf_scan);
        b.arg(z)
            .arg(&d32)
            .arg(list_offsets)
            .arg(list_ids)
            .arg(centres)
            .arg(probes)
            .arg(&p32)
            .arg(order)
            .arg(&l32)
            .arg(out);
        // SAFETY: sizes checked above; list ids are rows of z (the caller
        // filed them) and order is a permutation of the centres (the caller's
        // contract); shared memory as the kernel documents.
        unsafe { b.launch(cfg(grid, scan_shared_bytes(dim, l) as u32)) }?;
        Ok(())
    }
}
