//! [`crate::centre_knn`] on the GPU: the inverted file over one copy's
//! projection, in device memory, that gives each stored fragment the `l` base
//! vectors nearest to its centre (the paper's ripple, section 3.3).
//!
//! The same algorithm as the CPU's [`crate::centre_knn::ProjectedIvf`]:
//! the same training sample and Lloyd rounds (`centre_knn::lloyd`,
//! with the assignment on the GPU), every row filed in its nearest list, each
//! centre probing its nearest `probes` lists. The scan differs in shape only:
//! one thread block per centre walks its probed lists (`ivf_scan`) where the
//! CPU gathers the centres of each list into one matrix product. Distances
//! are computed from the coordinates on the GPU and by `|c|^2 + |x|^2 - 2 c.x`
//! on the CPU, so near-ties may order differently; a GPU test
//! (`gpu_nearest_ripples_match_cpu_nearest_ripples`) checks that the two
//! give the same stored fragments and almost the same ripple ids.

use octex_kernels::driver::{CudaSlice, CudaView, CudaViewMut};
use octex_kernels::{Gpu, GpuError, IvfKernels};

use crate::centre_knn::{bucket, lloyd, sq_norms, training_rows, IvfParams};

/// One copy's inverted file in device memory (the rows stay where the caller
/// keeps them; lists hold row ids).
pub struct GpuProjectedIvf {
    dim: usize,
    centroids: CudaSlice<f32>,
    centroid_norms: CudaSlice<f32>,
    /// List `j` holds `ids[offsets[j]..offsets[j + 1]]`.
    offsets: CudaSlice<u32>,
    ids: CudaSlice<u32>,
}

/// Device buffers [`GpuProjectedIvf::nearest`] reuses across calls.
pub struct IvfScratch {
    centres: CudaSlice<f32>,
    probes: CudaSlice<u32>,
    /// The centres grouped by nearest list (the scan's block order).
    order: CudaSlice<u32>,
    host_probes: Vec<u32>,
}

impl IvfScratch {
    /// Room for `count` centres of `dim` values probing `probes` lists each.
    pub fn new(g: &Gpu, count: usize, dim: usize, probes: usize) -> Result<Self, GpuError> {
        Ok(Self {
            centres: g.zeros(count * dim)?,
            probes: g.zeros(count * probes)?,
            order: g.zeros(count)?,
            host_probes: Vec::new(),
        })
    }

    /// Scratch holding `centres` (`count x dim`, host) already.
    pub fn with_centres(
        g: &Gpu,
        centres: &[f32],
        dim: usize,
        probes: usize,
    ) -> Result<Self, GpuError> {
        let count = centres.len() / dim;
        Ok(Self {
            centres: g.upload(centres)?,
            probes: g.zeros(count * probes)?,
            order: g.zeros(count)?,
            host_probes: Vec::new(),
        })
    }

    /// Device bytes of [`IvfScratch::new`].
    pub fn bytes(count: usize, dim: usize, probes: usize) -> usize {
        4 * count * (dim + probes + 1)
    }
}

impl GpuProjectedIvf {
    /// Device bytes of the inverted file of `n` rows, beyond the rows (list
    /// ids, every row's list while filing, the centroids and offsets).
    pub fn bytes(n: usize) -> usize {
        8 * n + (1 << 20)
    }

    /// Train the lists on `z` (`n x dim`, device) and file every row.
    pub fn build(
        g: &Gpu,
        k: &IvfKernels,
        z: &CudaView<f32>,
        dim: usize,
        params: &IvfParams,
    ) -> Result<Self, GpuError> {
        let n = z.len() / dim;
        let lists = params.lists_for(n.max(1));
        let rows: Vec<u32> = training_rows(n, lists, params)
            .into_iter()
            .map(|r| r as u32)
            .collect();
        let idx = g.upload(&rows)?;
        let mut train_dev = g.zeros::<f32>(rows.len() * dim)?;
        k.gather_rows(g, z, dim, &idx, &mut train_dev)?;
        let mut train = vec![0f32; rows.len() * dim];
        g.download(&train_dev, &mut train)?;
        let mut owner_dev = g.zeros::<u32>(n.max(rows.len()))?;
        let centroids = lloyd(&train, dim, lists, params, |c, cn| {
            let (cd, cnd) = (g.upload(c)?, g.upload(cn)?);
            let mut out = owner_dev.slice_mut(..rows.len());
            k.nearest_centroids(
                g,
                &train_dev.slice(..),
                (rows.len(), dim),
                &cd,
                &cnd,
                1,
                &mut out,
            )?;
            let mut owner = vec![0u32; rows.len()];
            g.download(&owner_dev, &mut owner)?;
            Ok::<_, GpuError>(owner)
        })?;
        let lists = centroids.len() / dim;
        let centroid_norms = g.upload(&sq_norms(&centroids, dim))?;
        let centroids = g.upload(&centroids)?;
        let mut out = owner_dev.slice_mut(..n);
        k.nearest_centroids(g, z, (n, dim), &centroids, &centroid_norms, 1, &mut out)?;
        let mut owner = vec![0u32; n];
        g.download(&owner_dev, &mut owner)?;
        let (starts, ids) = bucket(&owner, lists);
        let offsets: Vec<u32> = starts.iter().map(|&s| s as u32).collect();
        Ok(Self {
            dim,
            centroids,
            centroid_norms,
            offsets: g.upload(&offsets)?,
            ids: g.upload(&ids)?,
        })
    }

    pub fn lists(&self) -> usize {
        self.centroid_norms.len()
    }

    /// The `l` rows of `z` nearest to each of the `count` centres already in
    /// `scratch` (see [`IvfScratch::centres_mut`]), probing `probes` lists each,
    /// into `out` (`count x l`, nearest first, `PAD_ID` past what was found).
    #[allow(clippy::too_many_arguments)]
    pub fn nearest(
        &self,
        g: &Gpu,
        k: &IvfKernels,
        z: &CudaView<f32>,
        scratch: &mut IvfScratch,
        count: usize,
        (l, probes): (usize, usize),
        out: &mut CudaViewMut<u32>,
    ) -> Result<(), GpuError> {
        let probes = probes.clamp(1, self.lists().min(IvfKernels::MAX_PROBES));
        let dim = self.dim;
        let mut probe_out = scratch.probes.slice_mut(..count * probes);
        k.nearest_centroids(
            g,
            &scratch.centres.slice(..count * dim),
            (count, dim),
            &self.centroids,
            &self.centroid_norms,
            probes,
            &mut probe_out,
        )?;
        // Blocks in the order of the centres' nearest lists: neighbours in the
        // launch then read the same lists, mostly from L2.
        scratch.host_probes.resize(count * probes, 0);
        g.download(&scratch.probes, &mut scratch.host_probes)?;
        let first: Vec<u32> = scratch
            .host_probes
            .iter()
            .step_by(probes)
            .copied()
            .collect();
        let (_, order) = bucket(&first, self.lists());
        g.stream()
            .memcpy_htod(&order, &mut scratch.order.slice_mut(..count))?;
        k.scan(
            g,
            z,
            dim,
            (&self.offsets, &self.ids),
            &scratch.centres,
            (&scratch.probes, probes),
            &scratch.order,
            (count, l),
            out,
        )?;
        Ok(())
    }
}

impl IvfScratch {
    /// The centre buffer, for `IvfKernels::fragment_centres` to fill.
    pub fn centres_mut(&mut self) -> &mut CudaSlice<f32> {
        &mut self.centres
    }
}
