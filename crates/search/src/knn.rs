//! Exact k nearest neighbours and recall@k: the one home of evaluation, read
//! by the builder (exact rows, its checks), the tuner (`recall=`), `xtask`
//! (ground truth, benchmarks) and the tests.
//!
//! Exact k-NN runs blocked f64 matrix products (faer) on all cores. Queries
//! are cut into blocks of [`QUERY_BLOCK`] rows, the base into blocks of
//! [`BASE_BLOCK`]; each pair of blocks is one GEMM, after which every row keeps its
//! `k` best (a candidate costs one comparison unless it enters); where the
//! query blocks are fewer than the cores, the base is split into ranges whose
//! bests are merged. Neighbour
//! rows of a whole base ([`neighbour_rows`]) take f32 products for
//! candidates and re-score them exactly, where a sample shows that loses none.

use octex_index::{Metric, VectorProblem};
use rayon::prelude::*;

/// How exact search scores a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KnnMetric {
    /// Squared Euclidean distance.
    L2,
    /// Negative inner product (the largest inner product is nearest).
    NegDot,
}

pub const QUERY_BLOCK: usize = 256;
pub const BASE_BLOCK: usize = 4096;

/// The `k` best `(distance, id)` of one query. Candidates below the current
/// bound are appended unsorted and cut back to the `k` best (a linear
/// selection) when `2k` are held, so an offer costs O(1) amortised even when
/// every candidate enters (base rows sorted by distance to the query).
#[derive(Clone, Debug)]
pub struct TopK {
    k: usize,
    held: Vec<(f32, u32)>,
    /// Candidates at or above it cannot enter: the `k`-th best once `k` have
    /// been cut to, else infinity.
    bound: f32,
    ids: Vec<u32>,
    dist: Vec<f32>,
}

/// Distance, then the smaller id first.
fn order(a: &(f32, u32), b: &(f32, u32)) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

impl TopK {
    pub fn new(k: usize) -> Self {
        Self {
            k,
            held: Vec::with_capacity(2 * k),
            bound: f32::INFINITY,
            ids: Vec::new(),
            dist: Vec::new(),
        }
    }
    /// Offers below this may enter.
    #[inline]
    pub fn worst(&self) -> f32 {
        self.bound
    }
    /// Offer a candidate; ties keep the smaller id first.
    #[inline]
    pub fn push(&mut self, d: f32, id: u32) {
        if d >= self.bound || self.k == 0 {
            return;
        }
        self.held.push((d, id));
        if self.held.len() >= 2 * self.k {
            self.cut();
        }
    }
    /// Keep the `k` best held and bound offers by the worst of them.
    fn cut(&mut self) {
        if self.held.len() >= self.k {
            self.held.select_nth_unstable_by(self.k - 1, order);
            self.held.truncate(self.k);
            self.bound = self.held[self.k - 1].0;
        }
    }
    /// Candidates held, at most `k` counted.
    pub fn len(&self) -> usize {
        self.held.len().min(self.k)
    }
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
    /// The best `min(k, offered)` as `(ids, distances)`, nearest first.
    pub fn sorted(&mut self) -> (&[u32], &[f32]) {
        self.cut();
        self.held.sort_unstable_by(order);
        self.ids.clear();
        self.dist.clear();
        for &(d, id) in &self.held {
            self.dist.push(d);
            self.ids.push(id);
        }
        (&self.ids, &self.dist)
    }
}

pub use octex_core::distance::squared_l2;

/// Base rows a query may not have as neighbours.
#[derive(Clone, Copy, Debug)]
pub enum Exclude<'a> {
    Nothing,
    /// Query `i` is base row `i` (neighbour rows of the base itself).
    SameRow,
    /// Query `i` is base row `ids[i]`.
    Rows(&'a [usize]),
}

impl Exclude<'_> {
    fn row_of(&self, query: usize) -> usize {
        match self {
            Exclude::Nothing => usize::MAX,
            Exclude::SameRow => query,
            Exclude::Rows(ids) => ids[query],
        }
    }
}

/// Exact `k` nearest base rows of every query. Returns `(ids, distances)`, both
/// `nq x k` row-major, nearest first; missing entries (k > n) are `u32::MAX` and
/// infinity. With `exclude_self`, query `i` is base row `i` and never its own
/// neighbour (for neighbour rows). `on_block` is called once per finished query
/// block with its row count (progress).
pub fn exact_knn(
    base: &[f32],
    queries: &[f32],
    dim: usize,
    k: usize,
    metric: KnnMetric,
    exclude_self: bool,
    on_block: &(dyn Fn(usize) + Sync),
) -> (Vec<u32>, Vec<f32>) {
    assert!(dim > 0 && base.len() % dim == 0);
    let exclude = if exclude_self {
        Exclude::SameRow
    } else {
        Exclude::Nothing
    };
    let rows = |id: usize, out: &mut [f32]| out.copy_from_slice(&base[id * dim..(id + 1) * dim]);
    // The mean as the PCA takes it: the same bits as before the row form.
    let mean = match metric {
        KnnMetric::L2 => column_mean(base, dim),
        KnnMetric::NegDot => vec![0.0; dim],
    };
    let n = base.len() / dim;
    exact_knn_about(n, &rows, mean, queries, dim, k, metric, exclude, on_block)
}

/// [`exact_knn`] over `n` base rows that `row(id, out)` writes (`dim`
/// values), for bases not held as one f32 array (an index's f16 vectors).
///
/// Products in f64 of vectors less the base's mean (L2): the expansion
/// `|q|^2 + |b|^2 - 2 q.b` in f32 misordered 1.8% of the true neighbours of
/// a synthetic set of tight clusters far from the origin.
#[allow(clippy::too_many_arguments)]
pub fn exact_knn_of_rows(
    n: usize,
    row: &(dyn Fn(usize, &mut [f32]) + Sync),
    queries: &[f32],
    dim: usize,
    k: usize,
    metric: KnnMetric,
    exclude: Exclude,
    on_block: &(dyn Fn(usize) + Sync),
) -> (Vec<u32>, Vec<f32>) {
    assert!(dim > 0 && queries.len() % dim == 0);
    let blocks: Vec<usize> = (0..n).step_by(BASE_BLOCK).collect();
    let mean = match metric {
        KnnMetric::L2 => {
            let sums: Vec<Vec<f64>> = blocks
                .par_iter()
                .map(|&b0| {
                    let mut acc = vec![0f64; dim];
                    let mut r = vec![0f32; dim];
                    for id in b0..(b0 + BASE_BLOCK).min(n) {
                        row(id, &mut r);
                        acc.iter_mut().zip(&r).for_each(|(a, &v)| *a += v as f64);
                    }
                    acc
                })
                .collect();
            let mut mean = vec![0f64; dim];
            for s in &sums {
                mean.iter_mut().zip(s).for_each(|(m, x)| *m += x);
            }
            mean.iter_mut().for_each(|m| *m /= n.max(1) as f64);
            mean
        }
        KnnMetric::NegDot => vec![0.0; dim],
    };
    exact_knn_about(n, row, mean, queries, dim, k, metric, exclude, on_block)
}

/// [`exact_knn_of_rows`] with the base's mean given (zeros for
/// [`KnnMetric::NegDot`]): products of vectors less it.
#[allow(clippy::too_many_arguments)]
fn exact_knn_about(
    n: usize,
    row: &(dyn Fn(usize, &mut [f32]) + Sync),
    mean: Vec<f64>,
    queries: &[f32],
    dim: usize,
    k: usize,
    metric: KnnMetric,
    exclude: Exclude,
    on_block: &(dyn Fn(usize) + Sync),
) -> (Vec<u32>, Vec<f32>) {
    let nq = queries.len() / dim;
    let block_of = |b0: usize, bn: usize| {
        let mut out = vec![0f32; bn * dim];
        out.chunks_exact_mut(dim)
            .enumerate()
            .for_each(|(j, o)| row(b0 + j, o));
        out
    };
    let blocks: Vec<usize> = (0..n).step_by(BASE_BLOCK).collect();
    let less_mean = |r: &[f32], out: &mut Vec<f64>| {
        out.clear();
        out.extend(
            r.chunks(dim)
                .flat_map(|v| v.iter().zip(&mean).map(|(&x, &m)| x as f64 - m)),
        );
    };
    let base_norms: Vec<f64> = blocks
        .par_iter()
        .flat_map_iter(|&b0| {
            let block = block_of(b0, (n - b0).min(BASE_BLOCK));
            block
                .chunks_exact(dim)
                .map(|r| {
                    r.iter()
                        .zip(&mean)
                        .map(|(&x, &m)| (x as f64 - m).powi(2))
                        .sum::<f64>()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    // Few query blocks (a sample checked against a large base) would leave
    // cores idle: the base is then cut into as many ranges as keep every
    // core busy, each range's bests merged after.
    let query_blocks = nq.div_ceil(QUERY_BLOCK).max(1);
    let ranges = (2 * rayon::current_num_threads())
        .div_ceil(query_blocks)
        .clamp(1, blocks.len().max(1));
    let per_range = blocks.len().div_ceil(ranges).max(1);
    // The `k` best of query block `b` among the base blocks of range `r`.
    let scan = |b: usize, r: usize| -> Vec<TopK> {
        let q0 = b * QUERY_BLOCK;
        let qn = nq.saturating_sub(q0).min(QUERY_BLOCK);
        let q_raw = &queries[q0 * dim..(q0 + qn) * dim];
        let (mut q, mut block) = (Vec::new(), Vec::new());
        less_mean(q_raw, &mut q);
        let qnorm: Vec<f64> = q
            .chunks(dim)
            .map(|r| r.iter().map(|x| x * x).sum())
            .collect();
        let mut tops: Vec<TopK> = (0..qn).map(|_| TopK::new(k)).collect();
        let mut dots = vec![0f64; qn * BASE_BLOCK];
        let qm = faer::MatRef::from_row_major_slice(&q, qn, dim);
        let mine = blocks.chunks(per_range).nth(r).unwrap_or(&[]);
        for &b0 in mine {
            let bn = (n - b0).min(BASE_BLOCK);
            less_mean(&block_of(b0, bn), &mut block);
            let bm = faer::MatRef::from_row_major_slice(&block, bn, dim);
            let out = faer::MatMut::from_row_major_slice_mut(&mut dots[..qn * bn], qn, bn);
            faer::linalg::matmul::matmul(
                out,
                faer::Accum::Replace,
                qm,
                bm.transpose(),
                1.0f64,
                faer::Par::Seq,
            );
            for (r, top) in tops.iter_mut().enumerate() {
                let row = &dots[r * bn..(r + 1) * bn];
                let self_id = exclude.row_of(q0 + r);
                match metric {
                    KnnMetric::L2 => {
                        let qn2 = qnorm[r];
                        let bnorm = &base_norms[b0..b0 + bn];
                        for (j, (&dot, &bn2)) in row.iter().zip(bnorm).enumerate() {
                            let d = (qn2 + bn2 - 2.0 * dot).max(0.0) as f32;
                            if d < top.worst() && b0 + j != self_id {
                                top.push(d, (b0 + j) as u32);
                            }
                        }
                    }
                    KnnMetric::NegDot => {
                        for (j, &dot) in row.iter().enumerate() {
                            let d = -dot as f32;
                            if d < top.worst() && b0 + j != self_id {
                                top.push(d, (b0 + j) as u32);
                            }
                        }
                    }
                }
            }
        }
        tops
    };
    let mut ids = vec![u32::MAX; nq * k];
    let mut dists = vec![f32::INFINITY; nq * k];
    ids.par_chunks_mut(QUERY_BLOCK * k)
        .zip(dists.par_chunks_mut(QUERY_BLOCK * k))
        .enumerate()
        .for_each(|(b, (ids_out, d_out))| {
            let mut parts: Vec<Vec<TopK>> =
                (0..ranges).into_par_iter().map(|r| scan(b, r)).collect();
            // Each range holds its own `k` best (distance, then id), so the
            // `k` best of their union are the whole base's, whatever the ranges.
            let mut merged: Vec<(f32, u32)> = Vec::new();
            let qn = parts.first().map_or(0, Vec::len);
            for r in 0..qn {
                merged.clear();
                for part in &mut parts {
                    let (top_ids, top_dists) = part[r].sorted();
                    merged.extend(top_dists.iter().copied().zip(top_ids.iter().copied()));
                }
                if ranges > 1 {
                    merged.sort_unstable_by(order);
                }
                for (j, &(d, id)) in merged.iter().take(k).enumerate() {
                    ids_out[r * k + j] = id;
                    d_out[r * k + j] = d;
                }
            }
            on_block(qn);
        });
    (ids, dists)
}

/// Candidates past `k` that [`neighbour_rows`] keeps from its f32 products
/// before re-scoring them exactly: a true neighbour is lost only where the
/// products' rounding moves it past `k + margin`.
pub fn rows_margin(k: usize) -> usize {
    (k / 2).max(8)
}

/// Base rows per product block of [`neighbour_rows`] (the products of a
/// query block with it stay in the core's cache while they are scanned).
const ROWS_BASE_BLOCK: usize = 1024;

/// Rows [`neighbour_rows`] checks its f32 products on.
const ROWS_CHECK_SAMPLE: usize = 256;

/// The `k` nearest other rows of every row of `x` (`n x dim`; a vector's
/// neighbour rows): ids and squared L2 distances, nearest first, padded with
/// `u32::MAX` and infinity where `n <= k`. By [`neighbour_rows_f32`] where a
/// sample of rows finds every exact neighbour that way (ties counted), else
/// by [`exact_knn`]'s f64 products (tight clusters far from the mean, where
/// f32 rounding swamps the distances).
pub fn neighbour_rows(
    x: &[f32],
    dim: usize,
    k: usize,
    on_block: &(dyn Fn(usize) + Sync),
) -> (Vec<u32>, Vec<f32>) {
    assert!(dim > 0 && x.len() % dim == 0);
    let n = x.len() / dim;
    let sample: Vec<usize> = (0..ROWS_CHECK_SAMPLE.min(n))
        .map(|i| i * n / ROWS_CHECK_SAMPLE.min(n))
        .collect();
    let centred = Centred::of(x, dim);
    let (_, found) = f32_rows_of(x, &centred, dim, k, &sample, &|_| {});
    let (_, truth) = exact_knn_of_picks(x, dim, k, &sample);
    let lost = found.chunks(k).zip(truth.chunks(k)).any(|(f, t)| {
        f.iter()
            .any(|&d| d > t[k - 1] * (1.0 + 1e-5) + f32::MIN_POSITIVE)
    });
    if lost {
        tracing::info!("f32 products lose exact neighbours of this data: neighbour rows in f64");
        return exact_knn(x, x, dim, k, KnnMetric::L2, true, on_block);
    }
    let all: Vec<usize> = (0..n).collect();
    f32_rows_of(x, &centred, dim, k, &all, on_block)
}

/// The exact `k` nearest other rows of `x` (`n x dim`, squared L2) of its
/// rows `picks`, one list each in their order, as [`exact_knn_of_rows`].
pub fn exact_knn_of_picks(
    x: &[f32],
    dim: usize,
    k: usize,
    picks: &[usize],
) -> (Vec<u32>, Vec<f32>) {
    let queries: Vec<f32> = picks
        .iter()
        .flat_map(|&u| x[u * dim..(u + 1) * dim].iter().copied())
        .collect();
    let row = |id: usize, out: &mut [f32]| out.copy_from_slice(&x[id * dim..(id + 1) * dim]);
    let n = x.len() / dim;
    let exclude = Exclude::Rows(picks);
    exact_knn_of_rows(n, &row, &queries, dim, k, KnnMetric::L2, exclude, &|_| {})
}

/// [`neighbour_rows`] by f32 products alone: candidates from products of the
/// mean-centred vectors (`|q|^2 + |b|^2 - 2 q.b`, half the cost of
/// [`exact_knn`]'s f64), `k + `[`rows_margin`] of them per row, re-scored by
/// direct differences ([`squared_l2`]) before the cut. `on_block` as in
/// [`exact_knn`].
pub fn neighbour_rows_f32(
    x: &[f32],
    dim: usize,
    k: usize,
    on_block: &(dyn Fn(usize) + Sync),
) -> (Vec<u32>, Vec<f32>) {
    let all: Vec<usize> = (0..x.len() / dim).collect();
    f32_rows_of(x, &Centred::of(x, dim), dim, k, &all, on_block)
}

/// `x` less its mean, in f32, and the squared norms of its rows.
struct Centred {
    centred: Vec<f32>,
    norms: Vec<f32>,
}

impl Centred {
    fn of(x: &[f32], dim: usize) -> Self {
        let mean = column_mean(x, dim);
        let mut centred = vec![0f32; x.len()];
        centred
            .par_chunks_mut(dim)
            .zip(x.par_chunks(dim))
            .for_each(|(c, r)| {
                c.iter_mut()
                    .zip(r.iter().zip(&mean))
                    .for_each(|(c, (&v, &m))| *c = (v as f64 - m) as f32)
            });
        let norms = centred
            .par_chunks(dim)
            .map(|r| r.iter().map(|v| v * v).sum())
            .collect();
        Self { centred, norms }
    }
}

/// [`neighbour_rows_f32`] of the rows `of` alone (`of.len() x k`, in its
/// order), `c` being `x` centred.
fn f32_rows_of(
    x: &[f32],
    c: &Centred,
    dim: usize,
    k: usize,
    of: &[usize],
    on_block: &(dyn Fn(usize) + Sync),
) -> (Vec<u32>, Vec<f32>) {
    let n = x.len() / dim;
    let wide = (k + rows_margin(k)).min(n.saturating_sub(1));
    let Centred { centred, norms } = c;
    let nq = of.len();
    let mut ids = vec![u32::MAX; nq * k];
    let mut dists = vec![f32::INFINITY; nq * k];
    ids.par_chunks_mut(QUERY_BLOCK * k)
        .zip(dists.par_chunks_mut(QUERY_BLOCK * k))
        .zip(of.par_chunks(QUERY_BLOCK))
        .for_each(|((ids_out, d_out), rows)| {
            let qn = rows.len();
            let q: Vec<f32> = rows
                .iter()
                .flat_map(|&u| centred[u * dim..(u + 1) * dim].iter().copied())
                .collect();
            let qm = faer::MatRef::from_row_major_slice(&q, qn, dim);
            let mut tops: Vec<TopK> = (0..qn).map(|_| TopK::new(wide)).collect();
            let mut dots = vec![0f32; qn * ROWS_BASE_BLOCK];
            let mut row_d = [0f32; ROWS_BASE_BLOCK];
            for b0 in (0..n).step_by(ROWS_BASE_BLOCK) {
                let bn = (n - b0).min(ROWS_BASE_BLOCK);
                let bm = faer::MatRef::from_row_major_slice(
                    &centred[b0 * dim..(b0 + bn) * dim],
                    bn,
                    dim,
                );
                let out = faer::MatMut::from_row_major_slice_mut(&mut dots[..qn * bn], qn, bn);
                faer::linalg::matmul::matmul(
                    out,
                    faer::Accum::Replace,
                    qm,
                    bm.transpose(),
                    -2.0f32,
                    faer::Par::Seq,
                );
                let bnorm = &norms[b0..b0 + bn];
                for ((top, &self_id), dot_row) in tops.iter_mut().zip(rows).zip(dots.chunks(bn)) {
                    let qn2 = norms[self_id];
                    // Distances first (a loop the compiler vectorises), then
                    // the rare ones under the bound enter.
                    for ((d, &dot), &bn2) in row_d.iter_mut().zip(dot_row).zip(bnorm) {
                        *d = qn2 + bn2 + dot;
                    }
                    for (j16, chunk) in row_d[..bn].chunks(16).enumerate() {
                        let bound = top.worst();
                        if !chunk.iter().fold(false, |a, &d| a | (d < bound)) {
                            continue;
                        }
                        for (t, &d) in chunk.iter().enumerate() {
                            let id = b0 + j16 * 16 + t;
                            if d < top.worst() && id != self_id {
                                top.push(d.max(0.0), id as u32);
                            }
                        }
                    }
                }
            }
            let mut exact: Vec<(f32, u32)> = Vec::with_capacity(wide);
            for (r, (top, &u)) in tops.iter_mut().zip(rows).enumerate() {
                let q = &x[u * dim..(u + 1) * dim];
                let (cand, _) = top.sorted();
                exact.clear();
                exact.extend(cand.iter().map(|&id| {
                    let b = &x[id as usize * dim..(id as usize + 1) * dim];
                    (squared_l2(q, b), id)
                }));
                exact.sort_unstable_by(order);
                for (j, &(d, id)) in exact.iter().take(k).enumerate() {
                    ids_out[r * k + j] = id;
                    d_out[r * k + j] = d;
                }
            }
            on_block(qn);
        });
    (ids, dists)
}

/// Exact top-`k` ids of every query (`nq x k`, nearest first) in the user's
/// `metric`: L2; cosine as L2 of the vectors normalised as the index stores
/// them ([`Metric::prepare_query`]); inner product as the largest dot
/// product. Refuses what the index would refuse (a zero cosine vector).
pub fn ground_truth(
    base: &[f32],
    queries: &[f32],
    dim: usize,
    k: usize,
    metric: Metric,
    on_block: &(dyn Fn(usize) + Sync),
) -> Result<Vec<u32>, VectorProblem> {
    let normalised = |v: &[f32]| cosine_normalised(v, dim);
    let (ids, _) = match metric {
        Metric::L2 => exact_knn(base, queries, dim, k, KnnMetric::L2, false, on_block),
        Metric::Cosine => exact_knn(
            &normalised(base)?,
            &normalised(queries)?,
            dim,
            k,
            KnnMetric::L2,
            false,
            on_block,
        ),
        Metric::InnerProduct => {
            exact_knn(base, queries, dim, k, KnnMetric::NegDot, false, on_block)
        }
    };
    Ok(ids)
}

/// Rows of `v` (`dim` values each) normalised as a cosine index stores them
/// ([`Metric::prepare_query`]); a zero row is refused.
pub fn cosine_normalised(v: &[f32], dim: usize) -> Result<Vec<f32>, VectorProblem> {
    let mut out = vec![0f32; v.len()];
    for (o, x) in out.chunks_exact_mut(dim).zip(v.chunks_exact(dim)) {
        Metric::Cosine.prepare_query(x, Metric::squared_norm(x), 1.0, o)?;
    }
    Ok(out)
}

/// The mean of the rows of `data` (`dim` columns), summed in f64; zeros
/// for no rows.
pub fn column_mean(data: &[f32], dim: usize) -> Vec<f64> {
    let n = data.len() / dim;
    if n == 0 {
        return vec![0.0; dim];
    }
    let sum = data
        .par_chunks(dim * 4096)
        .map(|chunk| {
            let mut acc = vec![0f64; dim];
            for r in chunk.chunks_exact(dim) {
                acc.iter_mut().zip(r).for_each(|(a, &v)| *a += v as f64);
            }
            acc
        })
        .reduce(
            || vec![0f64; dim],
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                a
            },
        );
    sum.into_iter().map(|s| s / n as f64).collect()
}

/// How many of `found`'s first `k` ids are among `truth`'s first `k`
/// (`u32::MAX`, a missing result, never counts).
pub fn hits_at_k(found: &[u32], truth: &[u32], k: usize) -> usize {
    let truth = &truth[..k.min(truth.len())];
    found[..k.min(found.len())]
        .iter()
        .filter(|&&id| id != u32::MAX && truth.contains(&id))
        .count()
}

/// Why recall@k cannot be computed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecallError {
    #[error("recall@{k} needs at least {k} results and {k} true neighbours per query (have {found} and {truth})")]
    TooFewColumns {
        k: usize,
        found: usize,
        truth: usize,
    },
    #[error("{found} result rows against {truth} ground-truth rows")]
    RowCounts { found: usize, truth: usize },
}

/// recall@k of `found` (rows of `found_width` ids) against `truth` (rows of
/// `truth_width`), both nearest first: the fraction of the true `k` nearest
/// among the first `k` found.
pub fn recall_at_k(
    found: &[u32],
    found_width: usize,
    truth: &[u32],
    truth_width: usize,
    k: usize,
) -> Result<f64, RecallError> {
    if found_width < k || truth_width < k || k == 0 {
        return Err(RecallError::TooFewColumns {
            k,
            found: found_width,
            truth: truth_width,
        });
    }
    let nq = found.len() / found_width;
    if truth.len() / truth_width != nq {
        return Err(RecallError::RowCounts {
            found: nq,
            truth: truth.len() / truth_width,
        });
    }
    let hits: usize = found
        .chunks_exact(found_width)
        .zip(truth.chunks_exact(truth_width))
        .map(|(f, t)| hits_at_k(f, t, k))
        .sum();
    Ok(hits as f64 / (nq * k).max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_keeps_the_k_best_of_any_offer_order() {
        let mut s = 7u64;
        let mut next = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            (s >> 40) as u32 % 500
        };
        for k in [1, 5, 64] {
            // Random with ties, then every offer entering (descending).
            let random: Vec<(f32, u32)> = (0..3000).map(|i| (next() as f32, i)).collect();
            let descending: Vec<(f32, u32)> = (0..3000).map(|i| (3000.0 - i as f32, i)).collect();
            for offers in [random, descending] {
                let mut top = TopK::new(k);
                offers.iter().for_each(|&(d, id)| top.push(d, id));
                let mut want = offers.clone();
                want.sort_by(order);
                let (ids, dists) = top.sorted();
                assert_eq!(dists, want[..k].iter().map(|w| w.0).collect::<Vec<_>>());
                // Equal distances may resolve to other ids only at the bound.
                for (j, &id) in ids.iter().enumerate() {
                    assert!(id == want[j].1 || dists[j] == dists[k - 1], "k {k} pos {j}");
                }
            }
        }
    }

    #[test]
    fn matches_brute_force_and_excludes_self() {
        let dim = 7;
        let n = 700;
        let mut s = 1u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        let base: Vec<f32> = (0..n * dim).map(|_| next()).collect();
        let k = 5;
        let (ids, d) = exact_knn(&base, &base, dim, k, KnnMetric::L2, true, &|_| {});
        for i in 0..n {
            let mut all: Vec<(f32, u32)> = (0..n)
                .filter(|&j| j != i)
                .map(|j| {
                    (
                        (0..dim)
                            .map(|t| (base[i * dim + t] - base[j * dim + t]).powi(2))
                            .sum(),
                        j as u32,
                    )
                })
                .collect();
            all.sort_by(|a, b| a.partial_cmp(b).unwrap());
            for t in 0..k {
                assert!((all[t].0 - d[i * k + t]).abs() < 1e-4);
                // ids agree up to distance ties
                assert!(ids[i * k + t] == all[t].1 || (all[t].0 - d[i * k + t]).abs() < 1e-6);
            }
            assert!(!ids[i * k..(i + 1) * k].contains(&(i as u32)));
        }
        let (ids, _) = exact_knn(
            &base[..3 * dim],
            &base[..dim],
            dim,
            5,
            KnnMetric::NegDot,
            false,
            &|_| {},
        );
        assert_eq!(ids[3..], [u32::MAX, u32::MAX]);
    }

    /// A few queries over a base of several blocks (the base then split in
    /// ranges across cores), small integers so that distances tie often and
    /// exactly: ids equal brute force's, ties to the smaller id, and the
    /// distances theirs up to the f64 expansion's rounding.
    #[test]
    fn few_queries_over_a_split_base_match_brute_force_ties_included() {
        let (dim, n, k) = (6usize, 3 * BASE_BLOCK + 100, 9usize);
        let mut s = 5u64;
        let base: Vec<f32> = (0..n * dim)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
                ((s >> 40) % 4) as f32
            })
            .collect();
        let picks: Vec<usize> = (0..20).map(|i| i * 631).collect();
        let queries: Vec<f32> = picks
            .iter()
            .flat_map(|&p| base[p * dim..(p + 1) * dim].iter().copied())
            .collect();
        let row = |id: usize, out: &mut [f32]| out.copy_from_slice(&base[id * dim..(id + 1) * dim]);
        let (ids, dists) = exact_knn_of_rows(
            n,
            &row,
            &queries,
            dim,
            k,
            KnnMetric::L2,
            Exclude::Rows(&picks),
            &|_| {},
        );
        for (i, &p) in picks.iter().enumerate() {
            let mut all: Vec<(f32, u32)> = (0..n)
                .filter(|&j| j != p)
                .map(|j| {
                    (
                        squared_l2(
                            &queries[i * dim..(i + 1) * dim],
                            &base[j * dim..(j + 1) * dim],
                        ),
                        j as u32,
                    )
                })
                .collect();
            all.sort_by(order);
            let want: Vec<u32> = all[..k].iter().map(|a| a.1).collect();
            assert_eq!(ids[i * k..(i + 1) * k], want[..], "query {i}");
            for (got, want) in dists[i * k..(i + 1) * k].iter().zip(&all[..k]) {
                assert!(
                    (got - want.0).abs() < 1e-5,
                    "query {i}: {got} against {}",
                    want.0
                );
            }
        }
    }

    /// Tight clusters far from the origin, where the products' expansion
    /// alone misorders neighbours: the result is the exact order, checked
    /// in f64.
    #[test]
    fn tight_clusters_far_from_the_origin_get_exact_neighbours() {
        let (dim, per, k) = (16usize, 300usize, 10usize);
        let mut rng = octex_lattice::GaussianRng::new(11, 0);
        let mut base = Vec::new();
        for c in 0..4 {
            let centre: Vec<f64> = (0..dim)
                .map(|_| 100.0 * rng.normal() + 30.0 * c as f64)
                .collect();
            for _ in 0..per {
                base.extend(centre.iter().map(|&m| (m + 0.001 * rng.normal()) as f32));
            }
        }
        let (exact, _) = exact_knn(&base, &base, dim, k, KnnMetric::L2, true, &|_| {});
        // f32 products alone lose them here; neighbour rows notice and take f64.
        let (rows, _) = neighbour_rows(&base, dim, k, &|_| {});
        for ids in [exact, rows] {
            assert_exact(&base, dim, k, &ids);
        }
    }

    /// Every 7th row's `k` found ids are within its exact `k` nearest (ties counted).
    fn assert_exact(base: &[f32], dim: usize, k: usize, ids: &[u32]) {
        let n = base.len() / dim;
        let mut exact_hits = 0;
        for i in (0..n).step_by(7) {
            let row = |j: usize| &base[j * dim..(j + 1) * dim];
            let d64 = |j: usize| -> f64 {
                row(i)
                    .iter()
                    .zip(row(j))
                    .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
                    .sum()
            };
            let mut all: Vec<(f64, usize)> =
                (0..n).filter(|&j| j != i).map(|j| (d64(j), j)).collect();
            all.sort_by(|a, b| a.0.total_cmp(&b.0));
            let bound = all[k - 1].0;
            exact_hits += ids[i * k..(i + 1) * k]
                .iter()
                .filter(|&&id| d64(id as usize) <= bound * (1.0 + 1e-6))
                .count();
        }
        let checked = n.div_ceil(7) * k;
        assert_eq!(
            exact_hits, checked,
            "{exact_hits} of {checked} neighbours exact"
        );
    }

    #[test]
    fn neighbour_rows_by_f32_products_match_f64_and_pad_small_sets() {
        let (dim, n, k) = (24, 1500, 12);
        let mut rng = octex_lattice::GaussianRng::new(21, 0);
        let base: Vec<f32> = (0..n * dim).map(|_| (5.0 + rng.normal()) as f32).collect();
        let (ids, d) = neighbour_rows_f32(&base, dim, k, &|_| {});
        assert_exact(&base, dim, k, &ids);
        for u in 0..n {
            let row = &ids[u * k..(u + 1) * k];
            assert!(!row.contains(&(u as u32)), "row {u} holds itself");
            for (j, &id) in row.iter().enumerate() {
                let direct = squared_l2(
                    &base[u * dim..(u + 1) * dim],
                    &base[id as usize * dim..(id as usize + 1) * dim],
                );
                assert_eq!(d[u * k + j], direct, "distances are re-scored directly");
            }
        }
        let (few_ids, few_d) = neighbour_rows(&base[..5 * dim], dim, 8, &|_| {});
        for u in 0..5 {
            assert_eq!(few_ids[u * 8 + 4..(u + 1) * 8], [u32::MAX; 4]);
            assert!(few_d[u * 8 + 4..(u + 1) * 8]
                .iter()
                .all(|d| d.is_infinite()));
        }
    }

    #[test]
    fn recall_counts_true_ids_among_the_first_k_and_never_a_missing_one() {
        let truth = [1, 2, 3, 9, 9, 4, 5, 6, 9, 9];
        let found = [3, 2, 7, u32::MAX, 5, 6, 4];
        // Rows of 5 true and 4 found ids; k = 3.
        assert_eq!(recall_at_k(&found[..6], 3, &truth, 5, 3), Ok(4.0 / 6.0));
        assert_eq!(
            recall_at_k(&found[..6], 3, &truth, 5, 4),
            Err(RecallError::TooFewColumns {
                k: 4,
                found: 3,
                truth: 5
            })
        );
        assert_eq!(
            recall_at_k(&found[..3], 3, &truth, 5, 3),
            Err(RecallError::RowCounts { found: 1, truth: 2 })
        );
        assert_eq!(hits_at_k(&[u32::MAX, 1], &[u32::MAX, 1], 2), 1);
    }

    #[test]
    fn rows_from_a_function_and_excluded_ids_match_the_slice_form() {
        let (dim, n) = (12, 900);
        let mut rng = octex_lattice::GaussianRng::new(5, 0);
        let base: Vec<f32> = (0..n * dim).map(|_| rng.normal() as f32).collect();
        let picks: Vec<usize> = (0..n).step_by(9).collect();
        let queries: Vec<f32> = picks
            .iter()
            .flat_map(|&i| base[i * dim..(i + 1) * dim].iter().copied())
            .collect();
        let row = |id: usize, out: &mut [f32]| out.copy_from_slice(&base[id * dim..(id + 1) * dim]);
        let (ids, d) = exact_knn_of_rows(
            n,
            &row,
            &queries,
            dim,
            4,
            KnnMetric::L2,
            Exclude::Rows(&picks),
            &|_| {},
        );
        let (all_ids, all_d) = exact_knn(&base, &base, dim, 4, KnnMetric::L2, true, &|_| {});
        for (qi, &i) in picks.iter().enumerate() {
            assert_eq!(ids[qi * 4..(qi + 1) * 4], all_ids[i * 4..(i + 1) * 4]);
            assert_eq!(d[qi * 4..(qi + 1) * 4], all_d[i * 4..(i + 1) * 4]);
        }
    }

    #[test]
    fn cosine_ground_truth_is_l2_of_normalised_vectors_and_refuses_zero() {
        let dim = 6;
        let mut rng = octex_lattice::GaussianRng::new(9, 0);
        let base: Vec<f32> = (0..300 * dim)
            .map(|_| (3.0 * rng.normal()) as f32)
            .collect();
        let queries = &base[..20 * dim];
        let cos = ground_truth(&base, queries, dim, 5, Metric::Cosine, &|_| {}).unwrap();
        let (b, q) = (
            cosine_normalised(&base, dim).unwrap(),
            cosine_normalised(queries, dim).unwrap(),
        );
        let (l2, _) = exact_knn(&b, &q, dim, 5, KnnMetric::L2, false, &|_| {});
        assert_eq!(cos, l2);
        let mut zero = base.clone();
        zero[dim..2 * dim].fill(0.0);
        assert!(ground_truth(&zero, queries, dim, 5, Metric::Cosine, &|_| {}).is_err());
    }
}
