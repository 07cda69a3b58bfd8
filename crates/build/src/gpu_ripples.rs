//! Fragment ripples, key tables and the int8 sketch on the GPU.
//!
//! Principal coordinates stay in device memory when they fit in
//! [`RESIDENT_SHARE`] of it; otherwise each copy streams them from the host in
//! chunks. Per copy: one cuBLAS product projects every vector
//! (`n x m` times the copy's `m x 8b` rotation), then
//! [`crate::gpu_sort_builder::GpuRippleBuilder`] keys, sorts (radix, by key, centre
//! distance and id), cuts, completes and tables the fragments of every
//! spacing. Member ripples equal the CPU builder's for the same projected
//! coordinates (a GPU test checks it on the CPU's own projection). By the
//! nearest-to-centre rule ([`RippleSpec::searches`]) each copy also gets an
//! inverted file in device memory ([`crate::gpu_centre_knn`]) and every stored
//! fragment's ripple is searched from its centre, as the CPU builder does.

use octex_kernels::driver::{CudaSlice, CudaView};
use octex_kernels::{Gpu, GpuError, IvfKernels};
use octex_lattice::CopyMap;

use crate::gpu_centre_knn::{GpuProjectedIvf, IvfScratch};
use crate::gpu_sort_builder::{GpuRippleBuilder, LevelOut, LevelRipples};
use crate::progress::Stage;
use crate::ripples::{copy_rotation, FlatRipples, RippleSpec};
use crate::spacing::{self, Probe, SpacingChoice, SpacingTargets};
use crate::BuildError;

/// Largest share of free device memory the resident principal coordinates take.
pub const RESIDENT_SHARE: f64 = 0.4;

/// Rows per streamed chunk of principal coordinates.
const STREAM_ROWS: usize = 1 << 20;

/// Principal coordinates in device memory, or the host copy to stream from.
pub struct DevicePrincipal<'a> {
    pub host: &'a [f32],
    pub device: Option<CudaSlice<f32>>,
    pub m: usize,
}

impl<'a> DevicePrincipal<'a> {
    /// Upload `host` (`n x m`) when it fits in [`RESIDENT_SHARE`] of free memory.
    pub fn new(g: &Gpu, host: &'a [f32], m: usize) -> Result<Self, BuildError> {
        let bytes = std::mem::size_of_val(host) as f64;
        let (free, _) = g.memory_info()?;
        let device = if bytes <= RESIDENT_SHARE * free as f64 {
            Some(g.upload(host)?)
        } else {
            tracing::info!(
                gib = bytes / (1u64 << 30) as f64,
                free_gib = free as f64 / (1u64 << 30) as f64,
                "principal coordinates stream from the host per copy"
            );
            None
        };
        Ok(Self { host, device, m })
    }

    fn rows(&self) -> usize {
        self.host.len() / self.m
    }
}

/// Whether the GPU ripple builder for `n` vectors and `spec` fits in free
/// device memory (with a margin) and in the kernels' limits; if not, the build
/// runs the ripples on the CPU and says so.
pub fn fits(g: &Gpu, n: usize, spec: &RippleSpec, copy_dim: usize) -> Result<bool, BuildError> {
    let (free, _) = g.memory_info()?;
    let list_len = spec.list_len;
    let mut need = GpuRippleBuilder::device_bytes(n, list_len) + 4 * n * copy_dim;
    if spec.searches() {
        need += GpuProjectedIvf::bytes(n) + IvfScratch::bytes(n, copy_dim, spec.ivf.probes);
    }
    let searchable = !spec.searches()
        || (spec.ivf.probes <= IvfKernels::MAX_PROBES
            && list_len <= IvfKernels::MAX_LIST_LEN
            && copy_dim <= IvfKernels::MAX_DIM);
    let ok = n < GpuRippleBuilder::MAX_VECTORS
        && list_len <= GpuRippleBuilder::MAX_LIST_LEN
        && searchable
        && (need as f64) < 0.9 * free as f64;
    if !ok {
        tracing::warn!(
            need_gib = need as f64 / (1u64 << 30) as f64,
            free_gib = free as f64 / (1u64 << 30) as f64,
            n,
            probes = spec.ivf.probes,
            "the GPU ripple builder does not fit (memory, 2^30 vectors, ripples over 1024 ids or over {} probes): ripples are built on the CPU",
            IvfKernels::MAX_PROBES
        );
    }
    Ok(ok)
}

/// One copy's ripples on the GPU by a [`RippleSpec`]: the sort builder's
/// stored fragments and key tables, and, by the nearest-to-centre rule, each
/// stored fragment's ripple searched from its centre in an inverted file over
/// the copy's projection (overwriting the member ripples before they are
/// fetched).
pub struct GpuCopyRipples {
    spec: RippleSpec,
    builder: GpuRippleBuilder,
    ivf_kernels: IvfKernels,
    scratch: Option<IvfScratch>,
    /// Seconds in the inverted files (training, filing) and in the searches
    /// from the centres, counted when profiling.
    ivf_secs: f64,
    search_secs: f64,
    profiling: bool,
}

impl GpuCopyRipples {
    /// Buffers for `n` vectors projected to `copy_dim` dimensions.
    pub fn new(g: &Gpu, n: usize, copy_dim: usize, spec: &RippleSpec) -> Result<Self, BuildError> {
        let scratch = match spec.searches() {
            true => Some(IvfScratch::new(g, n, copy_dim, spec.ivf.probes.max(1))?),
            false => None,
        };
        Ok(Self {
            spec: *spec,
            builder: GpuRippleBuilder::new(g, n, spec.list_len)?,
            ivf_kernels: IvfKernels::new(g)?,
            scratch,
            ivf_secs: 0.0,
            search_secs: 0.0,
            profiling: false,
        })
    }

    /// The ripples of copy `c` projected to `z` (`n x copy_dim`, device),
    /// spacing by spacing (coarsest first) into `sink`.
    pub fn copy(
        &mut self,
        g: &Gpu,
        map: &CopyMap,
        c: usize,
        z: &CudaView<f32>,
        sink: &mut dyn FnMut(usize, &mut LevelOut) -> Result<(), GpuError>,
    ) -> Result<(), BuildError> {
        let cd = map.copy_dim();
        let shift = g.upload(&map.shifts[c * cd..(c + 1) * cd])?;
        let ivf = match self.scratch.is_some() {
            true => {
                let t = std::time::Instant::now();
                let ivf = GpuProjectedIvf::build(g, &self.ivf_kernels, z, cd, &self.spec.ivf)?;
                self.ivf_secs += t.elapsed().as_secs_f64();
                Some(ivf)
            }
            false => None,
        };
        let (spec, kernels, scratch) = (&self.spec, &self.ivf_kernels, &mut self.scratch);
        let (profiling, search_secs) = (self.profiling, &mut self.search_secs);
        self.builder.build_copy_with(
            g,
            z,
            map.blocks,
            &shift,
            &map.spacings,
            spec.pmin,
            &mut |sp, level| {
                if let (Some(ivf), Some(scratch)) = (&ivf, &mut *scratch) {
                    if profiling {
                        g.synchronize()?;
                    }
                    let t = std::time::Instant::now();
                    let stored = level.stored;
                    kernels.fragment_centres(
                        g,
                        z,
                        map.blocks,
                        &shift,
                        map.spacings[sp],
                        level.members(),
                        stored,
                        scratch.centres_mut(),
                    )?;
                    let lp = (spec.list_len, spec.ivf.probes);
                    ivf.nearest(g, kernels, z, scratch, stored, lp, level.ripples_mut())?;
                    if profiling {
                        g.synchronize()?;
                        *search_secs += t.elapsed().as_secs_f64();
                    }
                }
                sink(sp, level)
            },
        )?;
        Ok(())
    }

    /// [`Self::copy`] fetched to the host, finest spacing first.
    pub fn copy_to_host(
        &mut self,
        g: &Gpu,
        map: &CopyMap,
        c: usize,
        z: &CudaView<f32>,
    ) -> Result<Vec<LevelRipples>, BuildError> {
        let mut out = vec![LevelRipples::default(); map.spacings.len()];
        self.copy(g, map, c, z, &mut |sp, level| {
            out[sp] = level.to_host()?;
            Ok(())
        })?;
        Ok(out)
    }
}

/// Ripples and key tables of every copy, fetched straight into their place in
/// the index's flat arrays.
pub fn build_all(
    g: &Gpu,
    map: &CopyMap,
    pcs: &DevicePrincipal,
    spec: &RippleSpec,
    pb: &Stage,
) -> Result<FlatRipples, BuildError> {
    let (n, m, cd) = (pcs.rows(), pcs.m, map.copy_dim());
    let list_len = spec.list_len;
    let mut rippler = GpuCopyRipples::new(g, n, cd, spec)?;
    let profiling = tracing::enabled!(tracing::Level::DEBUG);
    rippler.builder.set_profiling(profiling);
    rippler.profiling = profiling;
    let mut projection_secs = 0.0;
    let mut z = g.zeros::<f32>(n * cd)?;
    let mut staging = match pcs.device {
        Some(_) => None,
        None => Some(g.zeros::<f32>(STREAM_ROWS.min(n) * m)?),
    };
    let nsp = map.spacings.len();
    let mut flat = FlatRipples::new(map.copies, nsp);
    for c in 0..map.copies {
        let t = std::time::Instant::now();
        let rot = g.upload(&copy_rotation(map, c))?;
        for start in (0..n).step_by(STREAM_ROWS) {
            let rows = STREAM_ROWS.min(n - start);
            let src = match (&pcs.device, &mut staging) {
                (Some(d), _) => d.slice(start * m..(start + rows) * m),
                (None, Some(st)) => {
                    g.stream()
                        .memcpy_htod(
                            &pcs.host[start * m..(start + rows) * m],
                            &mut st.slice_mut(..rows * m),
                        )
                        .map_err(GpuError::from)?;
                    st.slice(..rows * m)
                }
                (None, None) => unreachable!("staging exists when not resident"),
            };
            g.matmul(
                &src,
                m,
                &rot.slice(..),
                cd,
                &mut z.slice_mut(start * cd..(start + rows) * cd),
                cd,
                (rows, m, cd),
            )?;
        }
        if profiling {
            g.synchronize()?;
            projection_secs += t.elapsed().as_secs_f64();
        }
        rippler.copy(g, map, c, &z.slice(..), &mut |sp, level| {
            let e = flat.append(c * nsp + sp, level.capacity, level.ripple_len(), list_len);
            let (so, cap) = (e.slot_offset as usize, level.capacity);
            let rb = e.ripple_base as usize * list_len;
            level.fetch_table(
                &mut flat.table_keys[so..so + cap],
                &mut flat.table_slots[so..so + cap],
            )?;
            level.fetch_ripples(&mut flat.ripples[rb..rb + level.ripple_len()])?;
            if !spec.searches() {
                let at = flat.anchors.len();
                flat.anchors.resize(at + level.stored, 0);
                level.fetch_anchors(&mut flat.anchors[at..])?;
            }
            flat.fragments[sp] += level.stored;
            flat.short[sp] += level.short;
            flat.collisions += level.collisions;
            Ok(())
        })?;
        pb.inc(1);
    }
    if profiling {
        tracing::debug!(
            projection_secs,
            ivf_secs = rippler.ivf_secs,
            search_secs = rippler.search_secs,
            steps = ?rippler.builder.profile(),
            "GPU ripples: seconds per step"
        );
    }
    Ok(flat)
}

/// The int8 sketch rows (`n x w`) on the GPU, for the given scales.
pub fn sketch(
    g: &Gpu,
    pcs: &DevicePrincipal,
    w: usize,
    scales: &[f32],
) -> Result<Vec<i8>, BuildError> {
    let (n, m) = (pcs.rows(), pcs.m);
    let inv: Vec<f32> = scales.iter().map(|s| 1.0 / s).collect();
    let inv = g.upload(&inv)?;
    let mut rows = vec![0i8; n * w];
    let chunk = STREAM_ROWS.min(n);
    let mut dev_out = g.zeros::<i8>(chunk * w)?;
    let mut staging = None;
    for start in (0..n).step_by(chunk) {
        let c = chunk.min(n - start);
        let src = match &pcs.device {
            Some(d) => d.slice(start * m..(start + c) * m),
            None => {
                let st = match &mut staging {
                    Some(st) => st,
                    None => staging.insert(g.zeros::<f32>(chunk * m)?),
                };
                g.stream()
                    .memcpy_htod(
                        &pcs.host[start * m..(start + c) * m],
                        &mut st.slice_mut(..c * m),
                    )
                    .map_err(GpuError::from)?;
                st.slice(..c * m)
            }
        };
        octex_kernels::builder::sketch_encode(g, &src, (c, m, w), &inv, &mut dev_out)?;
        g.download(&dev_out, &mut rows[start * w..(start + c) * w])?;
    }
    Ok(rows)
}

/// [`crate::spacing::choose`] with the probes on the GPU (keys, a radix sort
/// and the fragment sizes of `z`, copy 0's projection of the probe rows).
pub fn choose_spacings(
    g: &Gpu,
    map: &CopyMap,
    z: &[f32],
    t: &SpacingTargets,
) -> Result<SpacingChoice, BuildError> {
    let cd = map.copy_dim();
    let rows = z.len() / cd;
    // list_len 1: the probe needs no ripples.
    let mut builder = GpuRippleBuilder::new(g, rows, 1)?;
    let zd = g.upload(z)?;
    let shift = g.upload(&map.shifts[..cd])?;
    let mut probe = |f: f32| -> Result<Probe, BuildError> {
        let runs = builder.fragment_sizes(g, &zd.slice(..), map.blocks, &shift, f)?;
        Ok(Probe::from_runs(
            runs.into_iter().map(|r| r as usize).collect(),
            t.pmin,
        ))
    };
    spacing::choose_with(&mut probe, t)
}
