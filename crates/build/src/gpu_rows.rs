//! The build phases that run on the GPU when one is present (the row searches
//! of `search_rows` also use the GPU search then): the principal
//! coordinates (one cuBLAS product per chunk of rows) and exact neighbour rows
//! (cuBLAS products of query blocks with base tiles and a running top-k per
//! query, `octex_kernels::GpuBruteForce`, a self-join that skips each vector).
//! The rows' products run on TF32 tensor cores where the data allows it (the
//! build's precision check: f16 rounding, the same 10-bit mantissa, loses no
//! sample neighbours): rows agree with the CPU's exact rows except for
//! near-ties, and search recall is the same. Elsewhere (clusters tight
//! against their distance from the origin) they are exact f32 products. A base larger
//! than [`BASE_SHARE`] of free device memory goes over in chunks. Reverse
//! entries come from one radix sort of (target, distance) pairs.

use octex_index::PAD_ID;
use octex_kernels::layout::MAX_TOPK;
use octex_kernels::pinned::Fetcher;
use octex_kernels::sort::KeyWord;
use octex_kernels::{Gpu, GpuBruteForce, GpuError, GpuSort};
use octex_lattice::CopyMap;
use rayon::prelude::*;

use crate::progress::Stage;
use crate::rows::{self, ReverseLists};
use crate::BuildError;

/// Largest forward row length the GPU top-k takes.
pub const MAX_K: usize = MAX_TOPK as usize;

/// Rows per product of the principal-coordinate phase.
const PRINCIPAL_CHUNK: usize = 1 << 20;

/// Queries per top-k pass of the exact rows (one progress step).
const ROWS_CHUNK: usize = 1 << 16;

/// Principal coordinates (`n x m`) of `x` (`n x D`) on the GPU and, with
/// `f16`, `x` rounded to f16 (to nearest even, as `half::f16::from_f32`) from
/// the same upload.
pub fn principal(
    g: &Gpu,
    map: &CopyMap,
    x: &[f32],
    f16: bool,
) -> Result<(Vec<f32>, Option<Vec<half::f16>>), BuildError> {
    let (d, m) = (map.dim, map.basis_dim);
    let n = x.len() / d;
    let mut out = Vec::with_capacity(n * m);
    out.par_extend(rayon::iter::repeat_n(0f32, n * m));
    let mut halves = f16.then(|| {
        let mut v = Vec::with_capacity(n * d);
        v.par_extend(rayon::iter::repeat_n(half::f16::ZERO, n * d));
        v
    });
    let basis = g.upload(&map.basis)?;
    let bias = g.upload(&map.basis_bias)?;
    let rows = PRINCIPAL_CHUNK.min(n).max(1);
    let mut dx = g.zeros::<f32>(rows * d)?;
    let mut dp = g.zeros::<f32>(rows * m)?;
    let mut dh = match f16 {
        true => Some(g.zeros::<u16>(rows * d)?),
        false => None,
    };
    let mut fetcher = Fetcher::new(g)?;
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
        fetcher.fetch(
            &dp.slice(..c * m),
            &mut out[start * m..(start + c) * m],
            g.stream(),
        )?;
        if let (Some(dh), Some(h)) = (&mut dh, &mut halves) {
            octex_kernels::builder::to_f16(g, &dx.slice(..c * d), dh)?;
            let dst: &mut [u16] = bytemuck::cast_slice_mut(&mut h[start * d..(start + c) * d]);
            fetcher.fetch(&dh.slice(..c * d), dst, g.stream())?;
        }
    }
    Ok((out, halves))
}

/// Share of free device memory the base of the exact rows may take; a larger
/// base is processed in chunks (each query block meets every chunk, and the
/// per-chunk lists are merged on the host).
pub const BASE_SHARE: f64 = 0.4;

/// The `k` nearest other vectors of every vector of `x` (`n x d`): ids and
/// squared L2 distances, nearest first. The base goes to the device whole when
/// it fits in [`BASE_SHARE`] of free memory, else in chunks.
pub fn exact_knn(
    g: &Gpu,
    x: &[f32],
    d: usize,
    k: usize,
    tf32: bool,
    pb: &Stage,
) -> Result<(Vec<u32>, Vec<f32>), BuildError> {
    let (free, _) = g.memory_info()?;
    exact_knn_chunked(g, x, d, k, tf32, pb, (BASE_SHARE * free as f64) as usize)
}

/// [`exact_knn`] with at most `base_bytes` of base vectors on the device at a
/// time (rounded to whole multiples of 65,536 rows).
pub fn exact_knn_chunked(
    g: &Gpu,
    x: &[f32],
    d: usize,
    k: usize,
    tf32: bool,
    pb: &Stage,
    base_bytes: usize,
) -> Result<(Vec<u32>, Vec<f32>), BuildError> {
    let n = x.len() / d;
    if k > MAX_K {
        return Err(BuildError::GpuRowLength { max: MAX_K, k });
    }
    // Chunk starts are multiples of ROWS_CHUNK, so a query block's self offset
    // within a chunk never equals the "no skip" value u32::MAX.
    let chunk_rows = (base_bytes / (4 * d)) / ROWS_CHUNK * ROWS_CHUNK;
    let chunk_rows = chunk_rows.max(ROWS_CHUNK);
    let chunks = n.div_ceil(chunk_rows);
    if chunks > 1 {
        tracing::info!(
            chunks,
            chunk_rows,
            "exact rows: the base streams to the GPU in chunks"
        );
    }
    pb.restart((n * chunks) as u64, 0);
    let mut ids = vec![PAD_ID; n * k];
    let mut dists = vec![f32::INFINITY; n * k];
    for c0 in (0..n).step_by(chunk_rows) {
        let c1 = (c0 + chunk_rows).min(n);
        // TF32 products: rows are graph edges for the search, not answers, and
        // near-ties that swap do not change search recall (the GPU build parity
        // test checks it), at a fraction of the time of f32 products.
        let bf = GpuBruteForce::new(g, &x[c0 * d..c1 * d], d)?.with_tf32(tf32);
        if c0 == 0 {
            if let Ok(p) = bf.profile_tile(8_192, k.min(c1 - c0)) {
                tracing::info!(
                    product_ms = p.product_ms,
                    topk_empty_ms = p.topk_empty_ms,
                    topk_full_ms = p.topk_full_ms,
                    tiles = n.div_ceil(octex_kernels::brute::TILE) * n.div_ceil(8_192),
                    tile_vectors = octex_kernels::brute::TILE,
                    "one tile of the exact rows (8192 queries)"
                );
            }
        }
        let kk = k.min(c1 - c0);
        for start in (0..n).step_by(ROWS_CHUNK) {
            let c = ROWS_CHUNK.min(n - start);
            let rows = start * k..(start + c) * k;
            if chunks == 1 {
                let (ci, cd) = bf.search_own_rows(start..start + c, kk)?;
                ids[rows.clone()].copy_from_slice(&ci);
                dists[rows].copy_from_slice(&cd);
            } else {
                let self_base = (start as u32).wrapping_sub(c0 as u32);
                let (ci, cd) = bf.search(&x[start * d..(start + c) * d], kk, Some(self_base))?;
                merge_rows(
                    &mut ids[rows.clone()],
                    &mut dists[rows],
                    &ci,
                    &cd,
                    k,
                    kk,
                    c0 as u32,
                );
            }
            pb.inc(c as u64);
        }
    }
    Ok((ids, dists))
}

/// Merge per-chunk lists (`kk` per row, chunk-local ids offset by `base`) into
/// the running lists (`k` per row), keeping the `k` nearest of each row.
fn merge_rows(
    ids: &mut [u32],
    dists: &mut [f32],
    ci: &[u32],
    cd: &[f32],
    k: usize,
    kk: usize,
    base: u32,
) {
    ids.par_chunks_mut(k)
        .zip(dists.par_chunks_mut(k))
        .zip(ci.par_chunks(kk).zip(cd.par_chunks(kk)))
        .for_each(|((ri, rd), (ni, nd))| {
            let mut merged: Vec<(f32, u32)> = ri
                .iter()
                .zip(rd.iter())
                .filter(|(id, _)| **id != PAD_ID)
                .map(|(&id, &dd)| (dd, id))
                .collect();
            merged.extend(
                ni.iter()
                    .zip(nd)
                    .filter(|(id, _)| **id != PAD_ID)
                    .map(|(&id, &dd)| (dd, id + base)),
            );
            merged.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            for j in 0..k {
                (ri[j], rd[j]) = merged
                    .get(j)
                    .map_or((PAD_ID, f32::INFINITY), |m| (m.1, m.0));
            }
        });
}

/// [`ReverseLists`] on the GPU: one stable radix sort of the (target,
/// distance) pairs of every vector's first `ks` forward neighbours.
pub fn reverse_lists(
    g: &Gpu,
    fwd_ids: &[u32],
    fwd_dist: &[f32],
    k: usize,
    ks: usize,
) -> Result<ReverseLists, BuildError> {
    let n = fwd_ids.len() / k.max(1);
    let ks = ks.min(k).max(1);
    let pairs = n * ks;
    if pairs >= u32::MAX as usize {
        return Ok(rows::reverse_lists(fwd_ids, fwd_dist, k, ks));
    }
    let head = |v: usize| (v * k)..(v * k + ks);
    let targets: Vec<u32> = (0..n)
        .into_par_iter()
        .flat_map_iter(|v| fwd_ids[head(v)].iter().copied())
        .collect();
    let dist_bits: Vec<u32> = (0..n)
        .into_par_iter()
        .flat_map_iter(|v| fwd_dist[head(v)].iter().map(|f| f.to_bits()))
        .collect();
    let (dt, dd) = (g.upload(&targets)?, g.upload(&dist_bits)?);
    let mut sorter = GpuSort::new(g, pairs)?;
    let mut perm = g.zeros::<u32>(pairs)?;
    sorter.sort_ids(&mut perm, pairs, &[KeyWord::U32(&dd), KeyWord::U32(&dt)])?;
    let mut order = vec![0u32; pairs];
    g.download(&perm, &mut order)?;
    // Missing neighbours (PAD_ID targets) sort last.
    let valid = order.partition_point(|&p| targets[p as usize] != PAD_ID);
    let mut offsets = vec![0u32; n + 1];
    for &p in &order[..valid] {
        offsets[targets[p as usize] as usize + 1] += 1;
    }
    for u in 0..n {
        offsets[u + 1] += offsets[u];
    }
    let sources = order[..valid].par_iter().map(|&p| p / ks as u32).collect();
    Ok(ReverseLists { offsets, sources })
}
