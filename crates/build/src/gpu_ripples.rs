//! Fragment ripples, key tables and the int8 sketch on the GPU.
//!
//! Principal coordinates stay in device memory when they fit in
//! [`RESIDENT_SHARE`] of it; otherwise each copy streams them from the host in
//! chunks. Per copy: one cuBLAS product projects every vector
//! (`n x m` times the copy's `m x 8b` rotation), then
//! `octex_kernels::GpuRippleBuilder` keys, sorts (radix, by key, centre
//! distance and id), cuts, completes and tables the fragments of every
//! spacing. The ripples equal the CPU builder's for the same projected
//! coordinates (a GPU test checks it on the CPU's own projection).

use indicatif::ProgressBar;
use octex_kernels::cudarc::driver::CudaSlice;
use octex_kernels::{Gpu, GpuError, GpuRippleBuilder};
use octex_lattice::CopyMap;

use crate::ripples::{copy_rotation, FlatRipples};
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
        g.context().bind_to_thread().map_err(GpuError::from)?;
        let (free, _) =
            octex_kernels::cudarc::driver::result::mem_get_info().map_err(GpuError::from)?;
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

/// Whether the GPU ripple builder for `n` vectors fits in free device memory
/// (with a margin); if not, the build sorts the ripples on the CPU and says so.
pub fn fits(g: &Gpu, n: usize, list_len: usize, copy_dim: usize) -> Result<bool, BuildError> {
    g.context().bind_to_thread().map_err(GpuError::from)?;
    let (free, _) =
        octex_kernels::cudarc::driver::result::mem_get_info().map_err(GpuError::from)?;
    let need = GpuRippleBuilder::device_bytes(n, list_len) + 4 * n * copy_dim;
    let ok = n < GpuRippleBuilder::MAX_VECTORS
        && list_len <= GpuRippleBuilder::MAX_LIST_LEN
        && (need as f64) < 0.9 * free as f64;
    if !ok {
        tracing::warn!(
            need_gib = need as f64 / (1u64 << 30) as f64,
            free_gib = free as f64 / (1u64 << 30) as f64,
            n,
            "the GPU ripple builder does not fit (memory, 2^30 vectors or ripples over 1024 ids): ripples are built on the CPU"
        );
    }
    Ok(ok)
}

/// Ripples and key tables of every copy, fetched straight into their place in
/// the index's flat arrays.
pub fn build_all(
    g: &Gpu,
    map: &CopyMap,
    pcs: &DevicePrincipal,
    list_len: usize,
    pmin: usize,
    pb: &ProgressBar,
) -> Result<FlatRipples, BuildError> {
    let (n, m, cd) = (pcs.rows(), pcs.m, map.copy_dim());
    let mut builder = GpuRippleBuilder::new(g, n, list_len)?;
    let profiling = tracing::enabled!(tracing::Level::DEBUG);
    builder.set_profiling(profiling);
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
        let shift = g.upload(&map.shifts[c * cd..(c + 1) * cd])?;
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
        builder.build_copy_with(
            &z.slice(..),
            map.blocks,
            &shift,
            &map.spacings,
            pmin,
            &mut |sp, level| {
                let e = flat.append(c * nsp + sp, level.capacity, level.ripple_len(), list_len);
                let (so, cap) = (e.slot_offset as usize, level.capacity);
                let rb = e.ripple_base as usize * list_len;
                level.fetch_table(
                    &mut flat.table_keys[so..so + cap],
                    &mut flat.table_slots[so..so + cap],
                )?;
                level.fetch_ripples(&mut flat.ripples[rb..rb + level.ripple_len()])?;
                flat.fragments[sp] += level.stored;
                flat.short[sp] += level.short;
                flat.collisions += level.collisions;
                Ok(())
            },
        )?;
        pb.inc(1);
    }
    if profiling {
        tracing::debug!(projection_secs, steps = ?builder.profile(), "GPU ripples: seconds per step");
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
        octex_kernels::ripples::sketch_encode(g, &src, (c, m, w), &inv, &mut dev_out)?;
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
        let runs = builder.fragment_sizes(&zd.slice(..), map.blocks, &shift, f)?;
        Ok(Probe::from_runs(
            runs.into_iter().map(|r| r as usize).collect(),
            t.pmin,
        ))
    };
    spacing::choose_with(&mut probe, t)
}

#[cfg(test)]
mod tests {
    /// The GPU builder sizes its key tables with its own copy of the index's
    /// capacity rule (the kernels crate sits below the index crate).
    #[test]
    fn gpu_table_capacity_is_the_index_rule() {
        for f in (0..5_000).chain([65_535, 65_536, 65_537, 1 << 20, 3 << 20]) {
            assert_eq!(
                octex_kernels::ripples::table_capacity(f),
                octex_index::table::table_capacity(f),
                "{f} fragments"
            );
        }
    }
}
