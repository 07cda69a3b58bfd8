//! The index in device memory: one buffer per section, reached by the
//! kernels through the pointer table [`IndexView`].

use octex_index::RerankView;
use octex_kernels::driver::{CudaSlice, DeviceRepr};
use octex_kernels::layout::IndexView;
use octex_kernels::{device_address, DeviceIndexView, Gpu, GpuError};

use super::launch_plan::ProjectionShape;
use crate::{GpuTuning, Index, SearchError};

/// The index sections in device memory.
pub(super) struct DeviceIndex {
    _parts: Vec<DevicePart>,
    pub(super) projection: Projection,
    pub(super) view: DeviceIndexView,
    pub(super) bytes: u64,
}

/// The matrices that project a batch of queries ([`super::batch::project`];
/// which batch takes which is [`ProjectionShape`]'s rule).
/// Exact `f32` products take the queries as they are and write the principal
/// coordinates and the projections before their biases, which the search
/// kernel accounts for (it subtracts `IndexView::basis_bias`;
/// `IndexView::search_shifts` holds the other), so no kernel runs before
/// the products. TF32 products take the queries centred on the data's mean
/// ([`Projection::mean`]), so that their rounding error follows a query's
/// distance from the data and not from the origin; the view's biases are
/// then zero.
pub(super) struct Projection {
    /// `[P | 0 | P_c R]`, `dim x (pc_cols + width)`
    /// ([`octex_lattice::CopyMap::fused_projection`]): one product gives both
    /// the principal coordinates and the projections.
    pub(super) fused: Option<CudaSlice<f32>>,
    /// `P` (`dim x m`), then `R` (`m_c x width`) on the first `m_c`
    /// coordinates: two products, for larger batches of wide vectors, where
    /// `P_c R` would multiply `dim / m_c` times as much.
    pub(super) two: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
    /// Which batches take which, and the fused rows' layout.
    pub(super) shape: ProjectionShape,
    /// The data's mean (`dim` values), subtracted from a batch's queries
    /// before TF32 products; `None` with exact products. The products run on
    /// TF32 tensor cores exactly when it is there
    /// ([`crate::GpuOptions::tf32_projection`]).
    pub(super) mean: Option<CudaSlice<f32>>,
}

impl Projection {
    fn upload(
        gpu: &Gpu,
        map: &octex_lattice::CopyMap,
        mean: &[f32],
        tf32: bool,
        tuning: &GpuTuning,
    ) -> Result<(Self, usize), GpuError> {
        let shape = ProjectionShape::new(
            map.dim,
            map.basis_dim,
            map.rotation_dim(),
            map.width(),
            tuning,
        );
        let mut floats = 0;
        let fused = if shape.fused_max_batch > 0 {
            let m = map.fused_projection(shape.pc_cols as usize);
            floats += m.len();
            Some(gpu.upload(&m)?)
        } else {
            None
        };
        let two = if shape.two {
            floats += map.basis.len() + map.rotation.len();
            Some((gpu.upload(&map.basis)?, gpu.upload(&map.rotation)?))
        } else {
            None
        };
        let mean = if tf32 {
            floats += mean.len();
            Some(gpu.upload(mean)?)
        } else {
            None
        };
        Ok((
            Self {
                fused,
                two,
                shape,
                mean,
            },
            floats,
        ))
    }
}

/// One uploaded section, kept alive for the pointer table.
type DevicePart = Box<dyn std::any::Any + Send + Sync>;

/// The uploaded sections and their bytes.
#[derive(Default)]
struct DeviceParts {
    buffers: Vec<DevicePart>,
    bytes: u64,
}

impl DeviceParts {
    /// Upload `host` as one section; returns its device address. An empty
    /// section still gets a valid address for the pointer table (one
    /// uninitialised element, which the kernels never read).
    fn put<T: DeviceRepr + Send + Sync + 'static>(
        &mut self,
        gpu: &Gpu,
        host: &[T],
    ) -> Result<u64, GpuError> {
        let d = if host.is_empty() {
            // SAFETY: never read (see above).
            unsafe { gpu.stream().alloc::<T>(1) }?
        } else {
            gpu.upload(host)?
        };
        self.bytes += std::mem::size_of_val(host) as u64;
        let addr = device_address(&d, gpu.stream());
        self.buffers.push(Box::new(d));
        Ok(addr)
    }
}

impl DeviceIndex {
    pub(super) fn upload(
        gpu: &Gpu,
        index: &Index,
        tf32: bool,
        tuning: &GpuTuning,
    ) -> Result<Self, SearchError> {
        let raw = &index.raw;
        let h = raw.header();
        if raw.len() >= (1usize << 31) {
            return Err(SearchError::TooManyVectorsForGpu { n: raw.len() });
        }
        let mut parts = DeviceParts::default();
        let tables: &[u64] = bytemuck::cast_slice(raw.tables());
        let tables_at = parts.put(gpu, tables)?;
        let keys_at = parts.put(gpu, raw.table_keys())?;
        let slots_at = parts.put(gpu, raw.table_slots())?;
        let ripples_at = parts.put(gpu, raw.ripples())?;
        let rows_at = parts.put(gpu, raw.rows())?;
        let sketch_at = parts.put(gpu, raw.sketch())?;
        let scales_at = parts.put(gpu, raw.sketch_scales())?;
        let norms_at = parts.put(gpu, &index.engine.sketch_norms)?;
        let centres_at = parts.put(gpu, raw.sketch_centres())?;
        let centre_scales_at = parts.put(gpu, raw.sketch_centre_scales())?;
        let centre_ids_at = parts.put(gpu, raw.sketch_centre_ids())?;
        let (vectors_at, f16) = match raw.vectors() {
            RerankView::F16(v) => {
                let at = parts.put(gpu, bytemuck::cast_slice::<_, u16>(v))?;
                (at, 1)
            }
            RerankView::F32(v) => {
                let at = parts.put(gpu, v)?;
                (at, 0)
            }
        };
        let shifts_at = parts.put(gpu, raw.shifts())?;
        let inv: Vec<f32> = raw.spacings().iter().map(|s| 1.0f32 / s).collect();
        let inv_at = parts.put(gpu, &inv)?;
        let seeds = &index.engine.seeds;
        let seeds_at = parts.put(gpu, seeds)?;
        // An inner-product shell ([`crate::shell`]): its factor scales the
        // projection matrices, its offset joins the biases below. Every
        // batch is moved; stored-space batches come from the build's row
        // passes, which run before a build chooses a shell.
        let shelled;
        let (map, shell_offset) = match &index.engine.query_shell {
            Some(shell) => {
                let mut m = index.engine.map.clone();
                m.rotation.iter_mut().for_each(|r| *r *= shell.alpha);
                shelled = m;
                (&shelled, Some(shell.offset.as_slice()))
            }
            None => (&index.engine.map, None),
        };
        let mean = raw.mean();
        if mean.len() != raw.stored_dim() {
            return Err(SearchError::Index(octex_index::IndexError::Invalid {
                where_: String::new(),
                problem: format!(
                    "the mean has {} values for vectors of {}",
                    mean.len(),
                    raw.stored_dim()
                ),
            }));
        }
        let (projection, projection_floats) = Projection::upload(gpu, map, mean, tf32, tuning)?;
        // The biases of the products' outputs: zero when the queries are
        // centred before them.
        let (basis_bias, mut z_bias) = match projection.mean {
            Some(_) => (vec![0.0; map.basis_dim], vec![0.0; map.width()]),
            None => (map.basis_bias.clone(), map.projection_bias()),
        };
        if let Some(offset) = shell_offset {
            z_bias.iter_mut().zip(offset).for_each(|(b, o)| *b -= o);
        }
        let basis_bias_at = parts.put(gpu, &basis_bias)?;
        // The projections' bias folded into the shifts, per spacing, so the
        // kernel's decoding reads one value per coordinate besides `z`, as the
        // builder's does (as fast as a second load, and a simpler kernel).
        let width = map.width();
        let search_shifts: Vec<f32> = inv
            .iter()
            .flat_map(|&inv_s| (0..width).map(move |k| (k, inv_s)))
            .map(|(k, inv_s)| map.shifts[k] - z_bias[k] * inv_s)
            .collect();
        let search_shifts_at = parts.put(gpu, &search_shifts)?;
        let view = IndexView {
            tables: tables_at,
            table_keys: keys_at,
            table_slots: slots_at,
            ripples: ripples_at,
            rows: rows_at,
            sketch: sketch_at,
            sketch_scales: scales_at,
            sketch_norms: norms_at,
            vectors: vectors_at,
            shifts: shifts_at,
            inv_spacings: inv_at,
            seeds: seeds_at,
            basis_bias: basis_bias_at,
            search_shifts: search_shifts_at,
            sketch_centres: centres_at,
            sketch_centre_scales: centre_scales_at,
            sketch_centre_ids: centre_ids_at,
            n: raw.len() as u32,
            dim: raw.stored_dim() as u32,
            copies: map.copies as u32,
            blocks: map.blocks as u32,
            spacings: map.spacings.len() as u32,
            list_len: h.list_len,
            row_len: h.row_len,
            sketch_width: h.sketch_width,
            basis_dim: map.basis_dim as u32,
            width: map.width() as u32,
            vectors_f16: f16,
            n_seeds: seeds.len() as u32,
            sketch_centre_count: raw.sketch_centre_scales().len() as u32,
            far_seed_distance: index.engine.far_seeds,
        };
        let bytes = parts.bytes + 4 * projection_floats as u64;
        Ok(Self {
            _parts: parts.buffers,
            projection,
            // SAFETY: the view's addresses are the buffers uploaded above, sized
            // from the validated index, and `_parts` owns them as long as
            // `view` lives (both are fields of this value).
            view: unsafe { DeviceIndexView::new(gpu, view) }?,
            bytes,
        })
    }
}
