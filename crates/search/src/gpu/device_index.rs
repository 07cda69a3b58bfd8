//! The index in device memory: one buffer per section, reached by the
//! kernels through the pointer table [`IndexView`].

use octex_index::RerankView;
use octex_kernels::driver::{CudaSlice, DeviceRepr};
use octex_kernels::layout::IndexView;
use octex_kernels::{device_address, DeviceIndexView, Gpu, GpuError};

use crate::{Index, SearchError};

/// The index sections in device memory.
pub(super) struct DeviceIndex {
    _parts: Vec<DevicePart>,
    pub(super) basis: CudaSlice<f32>,
    pub(super) basis_bias: CudaSlice<f32>,
    pub(super) rotation: CudaSlice<f32>,
    pub(super) view: DeviceIndexView,
    pub(super) bytes: u64,
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
    pub(super) fn upload(gpu: &Gpu, index: &Index) -> Result<Self, SearchError> {
        let raw = &index.raw;
        let h = raw.header();
        if raw.len() >= (1usize << 31) {
            return Err(SearchError::Params(format!(
                "the GPU backend takes indexes of fewer than 2^31 vectors, this one has {}",
                raw.len()
            )));
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
        let map = &index.engine.map;
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
            n: raw.len() as u32,
            dim: raw.dim() as u32,
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
        };
        let basis = gpu.upload(&map.basis)?;
        let basis_bias = gpu.upload(&map.basis_bias)?;
        let rotation = gpu.upload(&map.rotation)?;
        let bytes =
            parts.bytes + 4 * (map.basis.len() + map.basis_bias.len() + map.rotation.len()) as u64;
        Ok(Self {
            _parts: parts.buffers,
            basis,
            basis_bias,
            rotation,
            // SAFETY: the view's addresses are the buffers uploaded above, sized
            // from the validated index, and `_parts` owns them as long as
            // `view` lives (both are fields of this value).
            view: unsafe { DeviceIndexView::new(gpu, view) }?,
            bytes,
        })
    }
}
