//! One batch on the device: its buffers ([`BatchBuffers`]), a launch plan
//! bound to them ([`bind`]), and its launches ([`launch_batch`]: the
//! projection products, the fragment lookup, then `wave_search`, as the
//! plan says), run directly or captured as a CUDA graph.

use octex_kernels::driver::{CudaGraph, CudaSlice};
use octex_kernels::layout::{BatchView, STAT_SLOTS};
use octex_kernels::{device_address, DeviceBatchView, Gpu, GpuError};

use super::device_index::DeviceIndex;
use super::launch_plan::{lookup_words, FragmentLookup, GpuLaunchPlan, Products};

/// Per-batch device buffers, sized for `max_batch` queries and `k_cap` results.
pub(super) struct BatchBuffers {
    pub queries: CudaSlice<f32>,
    /// The queries less the data's mean, which TF32 products take
    /// ([`super::device_index::Projection`]); `None` with exact products.
    pub centred: Option<CudaSlice<f32>>,
    /// Principal coordinates (with the projections after them when one
    /// product gives both), `Projection::pcs_stride` per query ([`project`]).
    pub pcs: CudaSlice<f32>,
    /// Projections, `width` per query, for batches that take two products
    /// (when the largest batch does).
    pub z: Option<CudaSlice<f32>>,
    pub ids: CudaSlice<u32>,
    pub dists: CudaSlice<f32>,
    pub stats: CudaSlice<u64>,
    /// `query_fragments`' buffer (`FragmentLookupLayout`), for batches that
    /// find their fragments in a kernel of their own ([`FragmentLookup`]).
    pub frag_hits: CudaSlice<u32>,
    /// Global scratch of a spilled batch ([`bind`]), grown on demand.
    pub scratch: Option<CudaSlice<u8>>,
    pub k_cap: usize,
    pub view: DeviceBatchView,
    /// The plan `view` was bound from ([`bind`]).
    pub launch: Option<GpuLaunchPlan>,
}

impl BatchBuffers {
    pub(super) fn new(
        gpu: &Gpu,
        dev: &DeviceIndex,
        max_batch: usize,
        k_cap: usize,
    ) -> Result<Self, GpuError> {
        let n = max_batch;
        let index = &dev.view.view;
        let shape = &dev.projection.shape;
        // The principal-coordinate rows of the largest batch of either product.
        let fused_rows =
            n.min(shape.fused_max_batch) * shape.pcs_stride(index, shape.products(1)) as usize;
        let pcs_len = (n * index.basis_dim as usize).max(fused_rows);
        let z = match shape.products(n) {
            Products::Two => Some(gpu.zeros(n * index.width as usize)?),
            Products::Fused { .. } => None,
        };
        let centred = match dev.projection.mean {
            Some(_) => Some(gpu.zeros(n * index.dim as usize)?),
            None => None,
        };
        Ok(Self {
            queries: gpu.zeros(n * index.dim as usize)?,
            centred,
            pcs: gpu.zeros(pcs_len)?,
            z,
            ids: gpu.zeros(n * k_cap)?,
            dists: gpu.zeros(n * k_cap)?,
            stats: gpu.zeros(STAT_SLOTS)?,
            frag_hits: gpu.zeros(lookup_words(n, index.copies).unwrap_or(1))?,
            scratch: None,
            k_cap,
            view: DeviceBatchView::new(BatchView::default()),
            launch: None,
        })
    }
}

/// `launch`'s batch view with the addresses of `b`'s buffers; the global
/// scratch of a spilled batch is allocated here for `max_batch` queries and
/// kept for later batches. `b` remembers the plan for its launches.
pub(super) fn bind(
    b: &mut BatchBuffers,
    launch: &GpuLaunchPlan,
    max_batch: usize,
    gpu: &Gpu,
) -> Result<BatchView, GpuError> {
    let st = gpu.stream();
    let pcs = device_address(&b.pcs, st);
    let mut view = BatchView {
        z: match (launch.products, &b.z) {
            (Products::Fused { z_offset }, _) => pcs + 4 * z_offset as u64,
            (Products::Two, Some(z)) => device_address(z, st),
            (Products::Two, None) => {
                return Err(GpuError::Unsupported(
                    "internal: two products without a buffer for the projections".into(),
                ))
            }
        },
        pcs,
        queries: device_address(&b.queries, st),
        out_ids: device_address(&b.ids, st),
        out_dists: device_address(&b.dists, st),
        stats: device_address(&b.stats, st),
        frag_hits: match launch.lookup {
            FragmentLookup::OwnKernel => device_address(&b.frag_hits, st),
            FragmentLookup::InSearch => 0,
        },
        ..launch.sizes
    };
    if view.scratch_per_query > 0 {
        let bytes = max_batch * view.scratch_per_query as usize;
        if b.scratch.as_ref().is_none_or(|sc| sc.len() < bytes) {
            b.scratch = None;
            b.scratch = Some(gpu.zeros::<u8>(bytes)?);
        }
        if let Some(sc) = &b.scratch {
            view.scratch = device_address(sc, st);
        }
    }
    b.launch = Some(*launch);
    Ok(view)
}

/// The launches of one batch's search, after its queries are on the device:
/// the projection products ([`project`]), the fragment lookup when the view
/// asks for its own kernel, and `wave_search`. The profiled path times the
/// projection apart: it calls [`project`] and [`search_launches`] itself.
pub(super) fn launch_batch(
    g: &Gpu,
    dev: &DeviceIndex,
    b: &mut BatchBuffers,
    nq: usize,
) -> Result<(), GpuError> {
    project(g, dev, b, nq)?;
    search_launches(g, dev, b)
}

/// The launches after the projection: `query_fragments` (a view without a
/// `frag_hits` buffer launches nothing there) and `wave_search`.
pub(super) fn search_launches(
    g: &Gpu,
    dev: &DeviceIndex,
    b: &mut BatchBuffers,
) -> Result<(), GpuError> {
    let kernel = planned(b)?.kernel;
    g.query_fragments(&dev.view, &b.view, &mut b.frag_hits)?;
    g.wave_search(&dev.view, &b.view, kernel)
}

/// The plan the buffers' view was bound from.
fn planned(b: &BatchBuffers) -> Result<GpuLaunchPlan, GpuError> {
    b.launch.ok_or_else(|| {
        GpuError::Unsupported("internal: a batch launched before a plan was bound".into())
    })
}

/// The projection of a batch ([`Projection`]): the principal coordinates and
/// the projections into all copies. Exact f32 products take the queries as
/// they are and write both before their biases (the search kernel accounts
/// for them, so no kernel runs before the products); TF32 products, where
/// the searcher was opened so, take the queries less the data's mean (the
/// handle goes back to exact products after them).
pub(super) fn project(
    g: &Gpu,
    dev: &DeviceIndex,
    b: &mut BatchBuffers,
    nq: usize,
) -> Result<(), GpuError> {
    let ix = &dev.view.view;
    let (dim, m, width) = (ix.dim as usize, ix.basis_dim as usize, ix.width as usize);
    let products = planned(b)?.products;
    let tf32 = dev.projection.mean.is_some();
    let queries = match (&dev.projection.mean, &mut b.centred) {
        (Some(mean), Some(centred)) => {
            g.sub_bias_into(
                &b.queries.slice(..nq * dim),
                &mut centred.slice_mut(..nq * dim),
                nq,
                mean,
            )?;
            &*centred
        }
        (None, _) => &b.queries,
        (Some(_), None) => {
            return Err(GpuError::Unsupported(
                "internal: centred products without a buffer for the centred queries".into(),
            ))
        }
    };
    if tf32 {
        g.set_tf32(true)?;
    }
    let r = match (
        products,
        &dev.projection.fused,
        &dev.projection.two,
        &mut b.z,
    ) {
        (Products::Fused { .. }, Some(matrix), _, _) => {
            let cols = dev.projection.shape.pcs_stride(ix, products) as usize;
            g.matmul(
                &queries.slice(..nq * dim),
                dim,
                &matrix.slice(..),
                cols,
                &mut b.pcs.slice_mut(..nq * cols),
                cols,
                (nq, dim, cols),
            )
        }
        (Products::Two, _, Some((basis, rotation)), Some(z)) => {
            let mc = rotation.len() / width.max(1);
            g.matmul(
                &queries.slice(..nq * dim),
                dim,
                &basis.slice(..),
                m,
                &mut b.pcs.slice_mut(..nq * m),
                m,
                (nq, dim, m),
            )?;
            g.matmul(
                &b.pcs.slice(..nq * m),
                m,
                &rotation.slice(..),
                width,
                &mut z.slice_mut(..nq * width),
                width,
                (nq, mc, width),
            )
        }
        _ => Err(GpuError::Unsupported(format!(
            "internal: no projection for a batch of {nq} (buffers sized for another)"
        ))),
    };
    if tf32 {
        g.set_tf32(false)?;
    }
    r
}

/// Capture projection and search of one batch shape as a CUDA graph.
pub(super) fn capture(
    g: &Gpu,
    dev: &DeviceIndex,
    b: &mut BatchBuffers,
    nq: usize,
) -> Result<CudaGraph, GpuError> {
    // The launch configuration comes from the view's host copy: it must
    // already describe this batch (a stale one once captured a launch with
    // the wrong shared-memory size).
    if b.view.view.nq as usize != nq {
        return Err(GpuError::Unsupported(format!(
            "internal: batch view describes {} queries, capturing {nq}",
            b.view.view.nq
        )));
    }
    g.capture(|| launch_batch(g, dev, b, nq))
}
