//! The build phases that run on the GPU when one is present (the row searches
//! of `search_rows` also use the GPU search then): the principal
//! coordinates (one cuBLAS product per chunk of rows) and exact neighbour rows
//! (cuBLAS products of query blocks with base tiles and a running top-k per
//! query, `octex_kernels::GpuBruteForce`, a self-join that skips each vector).
//! The rows' products run on TF32 tensor cores: rows agree with the CPU's exact
//! rows except for near-ties, and search recall is the same.

use indicatif::ProgressBar;
use octex_kernels::layout::MAX_TOPK;
use octex_kernels::{driver_available, Gpu, GpuBruteForce, GpuError};
use octex_lattice::CopyMap;

use crate::{BuildBackend, BuildError};

/// Largest forward row length the GPU top-k takes.
pub const MAX_K: usize = MAX_TOPK as usize;

/// Rows per product of the principal-coordinate phase.
const PRINCIPAL_CHUNK: usize = 1 << 20;

/// Queries per top-k pass of the exact rows (one progress step).
const ROWS_CHUNK: usize = 1 << 16;

/// The GPU the build uses, if any.
pub fn open_gpu(backend: BuildBackend) -> Result<Option<Gpu>, BuildError> {
    match backend {
        BuildBackend::Cpu => Ok(None),
        BuildBackend::Auto if !driver_available() => Ok(None),
        BuildBackend::Auto | BuildBackend::Gpu => Ok(Some(Gpu::open(0)?)),
    }
}

/// Principal coordinates (`n x m`) of `x` (`n x D`) on the GPU.
pub fn principal(g: &Gpu, map: &CopyMap, x: &[f32]) -> Result<Vec<f32>, BuildError> {
    let (d, m) = (map.dim, map.basis_dim);
    let n = x.len() / d;
    let mut out = vec![0f32; n * m];
    let basis = g.upload(&map.basis)?;
    let bias = g.upload(&map.basis_bias)?;
    let rows = PRINCIPAL_CHUNK.min(n).max(1);
    let mut dx = g.zeros::<f32>(rows * d)?;
    let mut dp = g.zeros::<f32>(rows * m)?;
    for start in (0..n).step_by(rows) {
        let c = rows.min(n - start);
        g.stream()
            .memcpy_htod(&x[start * d..(start + c) * d], &mut dx.slice_mut(..c * d))
            .map_err(GpuError::from)?;
        g.matmul(
            &dx.slice(..c * d),
            d,
            &basis.slice(..),
            m,
            &mut dp.slice_mut(..c * m),
            m,
            (c, d, m),
        )?;
        g.sub_bias(&mut dp.slice_mut(..c * m), c, &bias)?;
        g.download(&dp, &mut out[start * m..(start + c) * m])?;
    }
    Ok(out)
}

/// The `k` nearest other vectors of every vector of `x` (`n x d`): ids and
/// squared L2 distances, nearest first.
pub fn exact_knn(
    g: &Gpu,
    x: &[f32],
    d: usize,
    k: usize,
    pb: &ProgressBar,
) -> Result<(Vec<u32>, Vec<f32>), BuildError> {
    let n = x.len() / d;
    if k > MAX_K {
        return Err(BuildError::Param(format!(
            "GPU exact rows take a row length of at most {MAX_K}, got {k}"
        )));
    }
    // TF32 products: rows are graph edges for the search, not answers, and
    // near-ties that swap do not change search recall (the GPU build parity
    // test checks it), at a fraction of the time of f32 products.
    let bf = GpuBruteForce::new(g, x, d)?.with_tf32(true);
    if let Ok((gemm_ms, topk_ms)) = bf.profile_tile(8_192, k) {
        tracing::info!(
            gemm_ms,
            topk_ms,
            tiles = n.div_ceil(65_536) * n.div_ceil(8_192),
            "one tile of the exact rows (8192 queries x 65536 vectors)"
        );
    }
    let mut ids = Vec::with_capacity(n * k);
    let mut dists = Vec::with_capacity(n * k);
    for start in (0..n).step_by(ROWS_CHUNK) {
        let c = ROWS_CHUNK.min(n - start);
        let (i, dd) = bf.search(&x[start * d..(start + c) * d], k, Some(start as u32))?;
        ids.extend_from_slice(&i);
        dists.extend_from_slice(&dd);
        pb.inc(c as u64);
    }
    Ok((ids, dists))
}
