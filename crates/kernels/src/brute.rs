//! Exact k nearest neighbours on the GPU: cuBLAS products of query blocks with
//! base tiles, and the `topk_tile` kernel keeping a running top-k per query.
//! The floor a GPU ANN index is measured against, and the builder's exact
//! neighbour rows (a self-join that skips each vector itself).

use cudarc::driver::CudaSlice;

use crate::layout::{f32_from_order_key, MAX_TOPK};
use crate::{Gpu, GpuError};

/// Base vectors held on the device, with their squared norms.
pub struct GpuBruteForce<'g> {
    gpu: &'g Gpu,
    base: CudaSlice<f32>,
    norms: CudaSlice<f32>,
    n: usize,
    dim: usize,
    tf32: bool,
}

/// Base vectors per tile (the product of a query block with one tile is
/// `queries x TILE` floats).
pub const TILE: usize = 16_384;
/// Queries per block.
const QUERY_BLOCK: usize = 8_192;

impl<'g> GpuBruteForce<'g> {
    /// Copy `base` (`n x dim`, row-major) to the device.
    pub fn new(gpu: &'g Gpu, base: &[f32], dim: usize) -> Result<Self, GpuError> {
        if dim == 0 || base.is_empty() || base.len() % dim != 0 {
            return Err(GpuError::Unsupported(format!(
                "brute force needs a non-empty n x {dim} base, got {} values",
                base.len()
            )));
        }
        let n = base.len() / dim;
        if n >= u32::MAX as usize {
            return Err(GpuError::Unsupported(format!(
                "{n} base vectors exceed u32 ids"
            )));
        }
        let d_base = gpu.upload(base)?;
        let mut norms = gpu.zeros::<f32>(n)?;
        gpu.row_sq_norms(&d_base.slice(..), n, dim, &mut norms.slice_mut(..))?;
        Ok(Self {
            gpu,
            base: d_base,
            norms,
            n,
            dim,
            tf32: false,
        })
    }

    /// Products on TF32 tensor cores (several times faster; distances carry a
    /// relative error of about 1e-3, so near-ties may swap). Off by default:
    /// exact brute force stays exact; the builder's neighbour rows use it.
    pub fn with_tf32(mut self, on: bool) -> Self {
        self.tf32 = on;
        self
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The base on the device (the builder reuses it as queries).
    pub fn base(&self) -> &CudaSlice<f32> {
        &self.base
    }

    /// The `k` nearest base vectors of each query (`nq x dim`, row-major, on the
    /// host): ids and squared L2 distances, nearest first. `self_base`: the
    /// queries are base vectors `self_base..` (wrapping: a base that is a
    /// slice of a larger set may start after the queries), each skips itself;
    /// it must not be `u32::MAX`.
    pub fn search(
        &self,
        queries: &[f32],
        k: usize,
        self_base: Option<u32>,
    ) -> Result<(Vec<u32>, Vec<f32>), GpuError> {
        if queries.len() % self.dim != 0 {
            return Err(GpuError::Unsupported(format!(
                "{} query values are not rows of {}",
                queries.len(),
                self.dim
            )));
        }
        let nq = queries.len() / self.dim;
        let mut ids = vec![u32::MAX; nq * k];
        let mut dists = vec![f32::INFINITY; nq * k];
        let mut dq = self.gpu.zeros::<f32>(QUERY_BLOCK.min(nq) * self.dim)?;
        for start in (0..nq).step_by(QUERY_BLOCK) {
            let m = QUERY_BLOCK.min(nq - start);
            let rows = &queries[start * self.dim..(start + m) * self.dim];
            self.gpu
                .stream()
                .memcpy_htod(rows, &mut dq.slice_mut(..rows.len()))?;
            let best =
                self.search_device(&dq, m, k, self_base.map(|b| b.wrapping_add(start as u32)))?;
            let mut keys = vec![0u64; m * k];
            self.gpu.download(&best, &mut keys)?;
            for (i, row) in keys.chunks_exact(k).enumerate() {
                let qn: f32 = rows[i * self.dim..(i + 1) * self.dim]
                    .iter()
                    .map(|v| v * v)
                    .sum();
                for (j, &key) in row.iter().enumerate() {
                    if key != u64::MAX {
                        let o = (start + i) * k + j;
                        ids[o] = key as u32;
                        dists[o] = (f32_from_order_key((key >> 32) as u32) + qn).max(0.0);
                    }
                }
            }
        }
        Ok((ids, dists))
    }

    /// Device milliseconds of one product and one top-k pass over the first
    /// tile for `nq` queries (the first base rows), to see which bounds a run.
    pub fn profile_tile(&self, nq: usize, k: usize) -> Result<(f64, f64), GpuError> {
        use cudarc::driver::sys::CUevent_flags;
        let nq = nq.min(self.n);
        let nt = TILE.min(self.n);
        let ctx = self.gpu.context();
        let ev = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
        let (e0, e1, e2) = (ev()?, ev()?, ev()?);
        let mut dots = self.gpu.zeros::<f32>(nq * nt)?;
        let mut best = self.gpu.upload(&vec![u64::MAX; nq * k])?;
        self.gpu.set_tf32(self.tf32)?;
        let st = self.gpu.stream();
        for pass in 0..2 {
            e0.record(st)?;
            self.gpu.matmul_transposed(
                &self.base.slice(..nq * self.dim),
                &self.base.slice(..nt * self.dim),
                &mut dots.slice_mut(..),
                (nq, nt, self.dim),
            )?;
            e1.record(st)?;
            self.gpu.topk_tile(
                &dots.slice(..),
                (nq, nt),
                &self.norms.slice(..nt),
                0,
                0,
                k,
                &mut best.slice_mut(..),
            )?;
            e2.record(st)?;
            if pass == 1 {
                break;
            }
        }
        self.gpu.set_tf32(false)?;
        Ok((e0.elapsed_ms(&e1)? as f64, e1.elapsed_ms(&e2)? as f64))
    }

    /// The running top-`k` lists (`nq x k` candidates: order key of
    /// `|x|^2 - 2 <q, x>` high, id low) of `nq` queries already on the device.
    pub fn search_device(
        &self,
        queries: &CudaSlice<f32>,
        nq: usize,
        k: usize,
        self_base: Option<u32>,
    ) -> Result<CudaSlice<u64>, GpuError> {
        if k == 0 || k > MAX_TOPK as usize || k > self.n {
            return Err(GpuError::Unsupported(format!(
                "GPU brute force takes 1 <= k <= min({MAX_TOPK}, n = {}), got {k}",
                self.n
            )));
        }
        let tile = TILE.min(self.n);
        let mut dots = self.gpu.zeros::<f32>(nq * tile)?;
        let mut best = self.gpu.upload(&vec![u64::MAX; nq * k])?;
        self.gpu.set_tf32(self.tf32)?;
        for t0 in (0..self.n).step_by(TILE) {
            let nt = TILE.min(self.n - t0);
            self.gpu.matmul_transposed(
                &queries.slice(..nq * self.dim),
                &self.base.slice(t0 * self.dim..(t0 + nt) * self.dim),
                &mut dots.slice_mut(..nq * nt),
                (nq, nt, self.dim),
            )?;
            self.gpu.topk_tile(
                &dots.slice(..nq * nt),
                (nq, nt),
                &self.norms.slice(t0..t0 + nt),
                t0 as u32,
                self_base.unwrap_or(u32::MAX),
                k,
                &mut best.slice_mut(..),
            )?;
        }
        self.gpu.set_tf32(false)?;
        Ok(best)
    }
}
