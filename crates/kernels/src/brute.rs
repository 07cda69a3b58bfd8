//! Exact k nearest neighbours on the GPU: cuBLAS products of query blocks with
//! base tiles, and the `topk_tile` kernel keeping a running top-k per query.
//! The floor a GPU ANN index is measured against, and the builder's exact
//! neighbour rows (a self-join that skips each vector itself).

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
use rayon::prelude::*;

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
        let mut out = Answers::new(nq, k);
        let mut scratch = self.scratch(QUERY_BLOCK.min(nq), k)?;
        let mut dq = self.gpu.zeros::<f32>(QUERY_BLOCK.min(nq) * self.dim)?;
        for start in (0..nq).step_by(QUERY_BLOCK) {
            let m = QUERY_BLOCK.min(nq - start);
            let rows = &queries[start * self.dim..(start + m) * self.dim];
            self.gpu
                .stream()
                .memcpy_htod(rows, &mut dq.slice_mut(..rows.len()))?;
            let base = self_base.map(|b| b.wrapping_add(start as u32));
            let keys = self.block_topk(&dq.slice(..rows.len()), m, k, base, &mut scratch)?;
            let norm = |i: usize| {
                rows[i * self.dim..(i + 1) * self.dim]
                    .iter()
                    .map(|v| v * v)
                    .sum()
            };
            out.fill(start, keys, norm);
        }
        Ok((out.ids, out.dists))
    }

    /// The `k` nearest other base vectors of base vectors `rows` (a
    /// self-join: the queries are read in place on the device, each skips
    /// itself): ids and squared L2 distances, nearest first.
    pub fn search_own_rows(
        &self,
        rows: std::ops::Range<usize>,
        k: usize,
    ) -> Result<(Vec<u32>, Vec<f32>), GpuError> {
        if rows.end > self.n || rows.is_empty() {
            return Err(GpuError::Unsupported(format!(
                "rows {rows:?} of a base of {}",
                self.n
            )));
        }
        let nq = rows.len();
        let mut out = Answers::new(nq, k);
        let mut scratch = self.scratch(QUERY_BLOCK.min(nq), k)?;
        let mut norms = vec![0f32; self.n];
        self.gpu.download(&self.norms, &mut norms)?;
        for start in (0..nq).step_by(QUERY_BLOCK) {
            let m = QUERY_BLOCK.min(nq - start);
            let first = rows.start + start;
            let q = self.base.slice(first * self.dim..(first + m) * self.dim);
            let keys = self.block_topk(&q, m, k, Some(first as u32), &mut scratch)?;
            out.fill(start, keys, |i| norms[first + i]);
        }
        Ok((out.ids, out.dists))
    }

    /// Device buffers of [`GpuBruteForce::block_topk`] for blocks of up to
    /// `nq` queries.
    fn scratch(&self, nq: usize, k: usize) -> Result<Scratch, GpuError> {
        Ok(Scratch {
            dots: self.gpu.zeros::<f32>(nq * TILE.min(self.n))?,
            best: self.gpu.zeros::<u64>(nq * k)?,
            empty: self.gpu.upload(&vec![u64::MAX; nq * k])?,
            keys: vec![0u64; nq * k],
        })
    }

    /// The top-`k` keys of `nq` queries on the device over every tile,
    /// downloaded into `scratch.keys[..nq * k]`.
    fn block_topk<'s>(
        &self,
        queries: &CudaView<f32>,
        nq: usize,
        k: usize,
        self_base: Option<u32>,
        scratch: &'s mut Scratch,
    ) -> Result<&'s [u64], GpuError> {
        let Scratch {
            dots,
            best,
            empty,
            keys,
        } = scratch;
        self.gpu
            .stream()
            .memcpy_dtod(&empty.slice(..nq * k), &mut best.slice_mut(..nq * k))?;
        self.run_tiles(
            queries,
            nq,
            k,
            self_base,
            dots,
            &mut best.slice_mut(..nq * k),
        )?;
        self.gpu
            .stream()
            .memcpy_dtoh(&best.slice(..nq * k), &mut keys[..nq * k])?;
        Ok(&keys[..nq * k])
    }
    /// Device milliseconds of one product and of one top-k pass over the
    /// first tile for `nq` queries (the first base rows): into empty lists
    /// (every entry new, as a block's first tile) and into full ones (as
    /// the later tiles), to see which bounds a run.
    pub fn profile_tile(&self, nq: usize, k: usize) -> Result<TileProfile, GpuError> {
        use cudarc::driver::sys::CUevent_flags;
        let nq = nq.min(self.n);
        let nt = TILE.min(self.n);
        let ctx = self.gpu.context();
        let ev = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
        let (e0, e1, e2, e3) = (ev()?, ev()?, ev()?, ev()?);
        let mut dots = self.gpu.zeros::<f32>(nq * nt)?;
        let empty = self.gpu.upload(&vec![u64::MAX; nq * k])?;
        let mut best = self.gpu.zeros::<u64>(nq * k)?;
        self.gpu.set_tf32(self.tf32)?;
        let st = self.gpu.stream();
        let topk = |dots: &CudaSlice<f32>, best: &mut CudaSlice<u64>| {
            self.gpu.topk_tile(
                &dots.slice(..),
                (nq, nt),
                &self.norms.slice(..nt),
                0,
                0,
                k,
                &mut best.slice_mut(..),
            )
        };
        // The first pass warms up; the second is timed.
        for _ in 0..2 {
            st.memcpy_dtod(&empty, &mut best)?;
            e0.record(st)?;
            self.gpu.matmul_transposed(
                &self.base.slice(..nq * self.dim),
                &self.base.slice(..nt * self.dim),
                &mut dots.slice_mut(..),
                (nq, nt, self.dim),
            )?;
            e1.record(st)?;
            topk(&dots, &mut best)?;
            e2.record(st)?;
            topk(&dots, &mut best)?;
            e3.record(st)?;
        }
        self.gpu.set_tf32(false)?;
        Ok(TileProfile {
            product_ms: e0.elapsed_ms(&e1)? as f64,
            topk_empty_ms: e1.elapsed_ms(&e2)? as f64,
            topk_full_ms: e2.elapsed_ms(&e3)? as f64,
        })
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
        let mut dots = self.gpu.zeros::<f32>(nq * TILE.min(self.n))?;
        let mut best = self.gpu.upload(&vec![u64::MAX; nq * k])?;
        self.run_tiles(
            &queries.slice(..),
            nq,
            k,
            self_base,
            &mut dots,
            &mut best.slice_mut(..),
        )?;
        Ok(best)
    }

    /// The product of `nq` queries with every base tile and the running
    /// top-`k` of each into `best` (`nq x k`, initialised by the caller).
    fn run_tiles(
        &self,
        queries: &CudaView<f32>,
        nq: usize,
        k: usize,
        self_base: Option<u32>,
        dots: &mut CudaSlice<f32>,
        best: &mut CudaViewMut<u64>,
    ) -> Result<(), GpuError> {
        if k == 0 || k > MAX_TOPK as usize || k > self.n {
            return Err(GpuError::Unsupported(format!(
                "GPU brute force takes 1 <= k <= min({MAX_TOPK}, n = {}), got {k}",
                self.n
            )));
        }
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
                best,
            )?;
        }
        self.gpu.set_tf32(false)?;
        Ok(())
    }
}

/// Device milliseconds of one tile of [`GpuBruteForce::profile_tile`].
#[derive(Clone, Copy, Debug)]
pub struct TileProfile {
    pub product_ms: f64,
    /// The top-k into empty lists (a block's first tile).
    pub topk_empty_ms: f64,
    /// The top-k into full lists (the later tiles).
    pub topk_full_ms: f64,
}

/// Reused device buffers of a run of query blocks, and the host copy of the
/// last block's keys.
struct Scratch {
    dots: CudaSlice<f32>,
    best: CudaSlice<u64>,
    /// `u64::MAX` everywhere: the empty running lists.
    empty: CudaSlice<u64>,
    keys: Vec<u64>,
}

/// Ids and distances of `nq` queries' `k` nearest, filled block by block.
struct Answers {
    ids: Vec<u32>,
    dists: Vec<f32>,
    k: usize,
}

impl Answers {
    fn new(nq: usize, k: usize) -> Self {
        Answers {
            ids: vec![u32::MAX; nq * k],
            dists: vec![f32::INFINITY; nq * k],
            k,
        }
    }

    /// Queries `start..` from their top-k `keys` (`|x|^2 - 2 <q, x>` order
    /// keys, id low) and squared norms `norm(i)` (`i` within the block).
    fn fill(&mut self, start: usize, keys: &[u64], norm: impl Fn(usize) -> f32 + Sync) {
        let k = self.k;
        let rows = start * k..start * k + keys.len();
        self.ids[rows.clone()]
            .par_chunks_mut(k)
            .zip(self.dists[rows].par_chunks_mut(k))
            .zip(keys.par_chunks(k))
            .enumerate()
            .for_each(|(i, ((ids, dists), row))| {
                let qn = norm(i);
                for ((id, dist), &key) in ids.iter_mut().zip(dists.iter_mut()).zip(row) {
                    if key != u64::MAX {
                        *id = key as u32;
                        *dist = (f32_from_order_key((key >> 32) as u32) + qn).max(0.0);
                    }
                }
            });
    }
}
