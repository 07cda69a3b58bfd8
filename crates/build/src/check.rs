//! The build's checks on a sample of its vectors: how many of each sampled
//! vector's exact nearest neighbours its neighbour row holds, and how many
//! the rerank would still find with vectors rounded to f16.

use rayon::prelude::*;

use octex_index::PAD_ID;
use octex_search::knn::{exact_knn, squared_l2, KnnMetric};

/// Vectors sampled by the row check.
pub const ROW_CHECK_SAMPLE: usize = 500;
/// Exact neighbours a sampled row is checked for.
pub const ROW_CHECK_K: usize = 10;

/// Least share of a sample's exact nearest neighbours that an exact search
/// over f16 vectors must find for the default rerank precision to be f16;
/// below it the vectors are stored as f32. Strict, because queries lose
/// more than the sample does (docs/RESULTS.md, "Decisions").
pub const F16_MIN_RECALL: f64 = 0.9998;

/// Least share of a sample's exact nearest neighbours that f16 rounding (the
/// mantissa of TF32) may keep for the GPU's exact rows to take TF32 products:
/// their candidates are re-scored exactly after, so rounding only moves the
/// few at the end of a row's candidates.
pub const TF32_ROWS_MIN_RECALL: f64 = 0.99;

/// The exact `count` nearest other vectors of each vector in `sample`, as
/// `(id, squared L2)` nearest first (the vector itself left out).
fn nearest_others(x: &[f32], dim: usize, sample: &[usize], count: usize) -> Vec<Vec<(u32, f32)>> {
    let n = x.len() / dim;
    // One more: the vector itself (or a copy of it) comes first.
    let wide = (count + 1).min(n);
    let q: Vec<f32> = sample
        .iter()
        .flat_map(|&u| x[u * dim..(u + 1) * dim].iter().copied())
        .collect();
    let (ids, dists) = exact_knn(x, &q, dim, wide, KnnMetric::L2, false, &|_| {});
    sample
        .par_iter()
        .enumerate()
        .map(|(i, &u)| {
            let range = i * wide..(i + 1) * wide;
            ids[range.clone()]
                .iter()
                .zip(&dists[range])
                .filter(|(&id, _)| id != PAD_ID && id as usize != u)
                .map(|(&id, &d)| (id, d))
                .take(count)
                .collect()
        })
        .collect()
}

/// Share of the [`ROW_CHECK_K`] exact nearest neighbours (squared L2, ties
/// counted) of the vectors `sample` that an exact search finds when the base
/// vectors are rounded to f16 and the queries are not, as the rerank does.
/// Candidates are the `4 k` nearest in f32: rounding moves a neighbour by far
/// less than that.
pub fn f16_recall(x: &[f32], dim: usize, sample: &[usize]) -> f64 {
    let n = x.len() / dim;
    let k = ROW_CHECK_K.min(n.saturating_sub(1));
    if k == 0 || sample.is_empty() {
        return 1.0;
    }
    let found: usize = nearest_others(x, dim, sample, 4 * k)
        .par_iter()
        .zip(sample)
        .map(|(others, &u)| {
            let k = k.min(others.len());
            let bound = others[k - 1].1;
            let xu = &x[u * dim..(u + 1) * dim];
            let mut rounded: Vec<(f32, f32)> = others
                .iter()
                .map(|&(v, d)| {
                    let xv = &x[v as usize * dim..(v as usize + 1) * dim];
                    let v16: Vec<f32> = xv
                        .iter()
                        .map(|&b| half::f16::from_f32(b).to_f32())
                        .collect();
                    (squared_l2(xu, &v16), d)
                })
                .collect();
            rounded.sort_by(|a, b| a.0.total_cmp(&b.0));
            rounded[..k]
                .iter()
                .filter(|(_, d)| *d <= bound * (1.0 + 1e-6) + 1e-12)
                .count()
        })
        .sum();
    found as f64 / (sample.len() * k) as f64
}

/// The exact [`ROW_CHECK_K`]-th nearest other vector's distance for each
/// vector of a sample: one exact search against which several versions of
/// the sample's lists are measured.
pub struct RowTruth {
    sample: Vec<usize>,
    /// Per sample vector; empty when there is nothing to check (`n < 2`).
    bounds: Vec<f32>,
}

impl RowTruth {
    /// The truth for the vectors `sample` of the stored vectors `x`
    /// (`n x dim`; squared L2).
    pub fn new(x: &[f32], dim: usize, sample: &[usize]) -> Self {
        let n = x.len() / dim;
        let k = ROW_CHECK_K.min(n.saturating_sub(1));
        let bounds = match k == 0 || sample.is_empty() {
            true => Vec::new(),
            false => nearest_others(x, dim, sample, k)
                .iter()
                .map(|others| others[k.min(others.len()) - 1].1)
                .collect(),
        };
        Self {
            sample: sample.to_vec(),
            bounds,
        }
    }

    /// The vectors it checks.
    pub fn sample(&self) -> &[usize] {
        &self.sample
    }

    /// Share of the [`ROW_CHECK_K`] exact nearest neighbours that `lists`
    /// (`row_len` ids per sample vector, in the sample's order) hold, ties
    /// counted: an entry at most as far as the `ROW_CHECK_K`-th exact
    /// neighbour counts as one.
    pub fn lists_recall(&self, x: &[f32], dim: usize, lists: &[u32], row_len: usize) -> f64 {
        if self.bounds.is_empty() {
            return 1.0;
        }
        let n = x.len() / dim;
        let k = ROW_CHECK_K.min(n.saturating_sub(1));
        let hits: usize = self
            .sample
            .par_iter()
            .zip(&self.bounds)
            .enumerate()
            .map(|(i, (&u, &bound))| {
                let xu = &x[u * dim..(u + 1) * dim];
                let mut row: Vec<u32> = lists[i * row_len..(i + 1) * row_len]
                    .iter()
                    .copied()
                    .filter(|&v| v != PAD_ID && v as usize != u)
                    .collect();
                row.sort_unstable();
                row.dedup();
                let near = row
                    .iter()
                    .filter(|&&v| {
                        let xv = &x[v as usize * dim..(v as usize + 1) * dim];
                        squared_l2(xu, xv) <= bound * (1.0 + 1e-5) + 1e-12
                    })
                    .count();
                near.min(k)
            })
            .sum();
        hits as f64 / (self.sample.len() * k) as f64
    }

    /// [`Self::lists_recall`] of the sample's rows among all rows (`n x
    /// row_len`).
    pub fn row_recall(&self, x: &[f32], dim: usize, rows: &[u32], row_len: usize) -> f64 {
        let lists: Vec<u32> = self
            .sample
            .iter()
            .flat_map(|&u| rows[u * row_len..(u + 1) * row_len].iter().copied())
            .collect();
        self.lists_recall(x, dim, &lists, row_len)
    }
}

/// Share of the [`ROW_CHECK_K`] exact nearest neighbours of the vectors
/// `sample` (stored vectors `x`, `n x dim`; squared L2) that their rows
/// (`n x row_len`) hold ([`RowTruth::lists_recall`]).
pub fn row_recall(x: &[f32], dim: usize, rows: &[u32], row_len: usize, sample: &[usize]) -> f64 {
    RowTruth::new(x, dim, sample).row_recall(x, dim, rows, row_len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use octex_lattice::GaussianRng;

    #[test]
    fn f16_rounding_is_harmless_near_the_origin_and_not_far_from_it() {
        let (n, dim) = (3_000, 16);
        let mut rng = GaussianRng::new(2, 0);
        let x: Vec<f32> = (0..n * dim).map(|_| rng.normal() as f32).collect();
        let sample: Vec<usize> = (0..n).step_by(11).collect();
        assert!(f16_recall(&x, dim, &sample) >= F16_MIN_RECALL);
        // The same spread around 1,000: f16 steps there are 0.5.
        let far: Vec<f32> = x.iter().map(|v| 1_000.0 + v).collect();
        assert!(f16_recall(&far, dim, &sample) < 0.9);
    }

    #[test]
    fn exact_rows_score_one_and_random_rows_score_low() {
        let (n, dim, lt) = (2_000, 8, 16);
        let mut rng = GaussianRng::new(1, 0);
        let x: Vec<f32> = (0..n * dim).map(|_| rng.normal() as f32).collect();
        let (exact, _) = exact_knn(&x, &x, dim, lt, KnnMetric::L2, true, &|_| {});
        let sample: Vec<usize> = (0..n).step_by(7).collect();
        assert_eq!(row_recall(&x, dim, &exact, lt, &sample), 1.0);
        let random: Vec<u32> = (0..n * lt)
            .map(|_| (rng.next_u64() % n as u64) as u32)
            .collect();
        assert!(row_recall(&x, dim, &random, lt, &sample) < 0.05);
        // A row missing its nearest half scores about a half.
        let mut half = exact.clone();
        for u in 0..n {
            for j in 0..5 {
                half[u * lt + j] = PAD_ID;
            }
        }
        let r = row_recall(&x, dim, &half, lt, &sample);
        assert!((r - 0.5).abs() < 0.01, "{r}");
    }
}
