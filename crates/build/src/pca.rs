//! Mean and principal basis of the data (faer), on a seeded sample.

use faer::{Mat, Side};
use octex_lattice::GaussianRng;
use rayon::prelude::*;

/// The principal axes of a data set.
pub struct Pca {
    pub mean: Vec<f32>,
    /// `D x m` row-major, orthonormal columns, by decreasing variance.
    pub basis: Vec<f64>,
    pub m: usize,
    /// Variances along the columns of `basis`.
    pub variances: Vec<f64>,
    /// All `D` variances, descending (the PCA spectrum).
    pub spectrum: Vec<f64>,
    /// The local spectrum: along each of the `D` principal directions (in the
    /// order of `spectrum`), the mean squared difference between a sample
    /// vector and its [`LOCAL_NEIGHBOURS`] nearest sample vectors; see
    /// [`Neighbourhoods::local_spectrum`].
    pub local: Vec<f64>,
    /// How well the first `w` principal coordinates rank a neighbourhood,
    /// `(w, recall)` for `w` in steps of 16 up to the widest automatic
    /// sketch ([`Neighbourhoods::prefix_recall`]); empty when not measured.
    pub prefix_recall: Vec<(usize, f64)>,
}

/// What [`fit`]'s caller chooses the basis size from.
pub struct Spectra<'a> {
    pub global: &'a [f64],
    pub local: &'a [f64],
    pub prefix_recall: &'a [(usize, f64)],
}

/// Rows used for PCA: all when `n <= sample`, else a seeded sample without
/// replacement (partial Fisher-Yates).
pub fn sample_rows(n: usize, sample: usize, seed: u64) -> Vec<usize> {
    if n <= sample {
        return (0..n).collect();
    }
    let mut rng = GaussianRng::new(seed, 0xBA5E);
    let mut idx: Vec<usize> = (0..n).collect();
    for i in 0..sample {
        let j = i + (rng.next_u64() % (n - i) as u64) as usize;
        idx.swap(i, j);
    }
    idx.truncate(sample);
    idx.sort_unstable();
    idx
}

/// Mean (over all rows) and the top `m` principal directions (over `rows`),
/// `m` chosen by `choose_m` from the spectrum (all `D` variances, descending).
pub fn fit(
    data: &[f32],
    dim: usize,
    rows: &[usize],
    choose_m: impl FnOnce(&Spectra) -> usize,
) -> Pca {
    let mean64 = octex_search::knn::column_mean(data, dim);
    let mean: Vec<f32> = mean64.iter().map(|&v| v as f32).collect();

    let s = rows.len();
    let mut centred = vec![0f32; s * dim];
    centred
        .par_chunks_mut(dim)
        .zip(rows.par_iter())
        .for_each(|(out, &r)| {
            let x = &data[r * dim..(r + 1) * dim];
            out.iter_mut()
                .zip(x.iter().zip(&mean))
                .for_each(|(o, (a, b))| *o = a - b);
        });
    let xm = faer::MatRef::from_row_major_slice(&centred, s, dim);
    let mut cov32 = Mat::<f32>::zeros(dim, dim);
    faer::linalg::matmul::matmul(
        cov32.as_mut(),
        faer::Accum::Replace,
        xm.transpose(),
        xm,
        1.0 / s.max(2) as f32,
        faer::Par::rayon(0),
    );
    let cov = Mat::<f64>::from_fn(dim, dim, |i, j| {
        0.5 * (cov32[(i, j)] as f64 + cov32[(j, i)] as f64)
    });
    let evd = cov.self_adjoint_eigen(Side::Lower);
    // Eigenvalues ascend.
    let spectrum: Vec<f64> = match &evd {
        Ok(evd) => (0..dim).rev().map(|c| evd.S()[c].max(0.0)).collect(),
        Err(_) => vec![1.0; dim],
    };
    let measured = match &evd {
        Ok(evd) => Neighbourhoods::find(&centred, dim).map(|hoods| {
            let u = evd.U();
            // Eigenvectors as rows, largest eigenvalue first.
            let dirs: Vec<f32> = (0..dim)
                .rev()
                .flat_map(|c| (0..dim).map(move |i| u[(i, c)] as f32))
                .collect();
            let widths: Vec<usize> = (16..=crate::sketch::auto_width_bound(dim))
                .step_by(16)
                .map(|w| w.min(dim))
                .collect();
            let recall = hoods.prefix_recall(&centred, dim, &dirs, &widths);
            (
                hoods.local_spectrum(&centred, dim, &dirs),
                widths.into_iter().zip(recall).collect(),
            )
        }),
        Err(_) => None,
    };
    let (local, prefix_recall) = match measured {
        Some((local, recall)) => (local.unwrap_or_else(|| spectrum.clone()), recall),
        None => (spectrum.clone(), Vec::new()),
    };
    let m = choose_m(&Spectra {
        global: &spectrum,
        local: &local,
        prefix_recall: &prefix_recall,
    })
    .clamp(1, dim);
    let (basis, variances) = match evd {
        Ok(evd) => {
            let u = evd.U();
            let sv = evd.S();
            // Eigenvalues ascend: take the last m, largest first.
            let mut basis = vec![0f64; dim * m];
            let mut vars = Vec::with_capacity(m);
            for (j, col) in (dim - m..dim).rev().enumerate() {
                vars.push(sv[col].max(0.0));
                for i in 0..dim {
                    basis[i * m + j] = u[(i, col)];
                }
            }
            (basis, vars)
        }
        // Degenerate input: fall back to the coordinate axes.
        Err(_) => {
            let mut basis = vec![0f64; dim * m];
            for j in 0..m {
                basis[j * m + j] = 1.0;
            }
            (basis, vec![1.0; m])
        }
    };
    Pca {
        mean,
        basis,
        m,
        variances,
        spectrum,
        local,
        prefix_recall,
    }
}

/// Sample vectors whose neighbourhoods measure the local spectrum and how
/// well a prefix of the principal coordinates ranks ([`Neighbourhoods`]).
pub const LOCAL_PROBES: usize = 512;
/// Neighbours of each probe that measure the local spectrum.
pub const LOCAL_NEIGHBOURS: usize = 10;
/// Nearest sample vectors of each probe that a prefix of the principal
/// coordinates ranks ([`Neighbourhoods::prefix_recall`]).
pub const RANK_POOL: usize = 100;
/// A prefix ranks well when the [`LOCAL_NEIGHBOURS`] nearest are among its
/// best `RANK_KEEP` of the pool.
pub const RANK_KEEP: usize = 20;

/// [`LOCAL_PROBES`] rows of the centred sample with their [`RANK_POOL`]
/// nearest other rows (exact, nearest first).
pub struct Neighbourhoods {
    probes: Vec<usize>,
    pools: Vec<Vec<u32>>,
}

impl Neighbourhoods {
    /// `None` when the rows are too few.
    pub fn find(rows: &[f32], dim: usize) -> Option<Self> {
        let s = rows.len() / dim.max(1);
        if s < 2 * (LOCAL_NEIGHBOURS + 1) {
            return None;
        }
        let pool = RANK_POOL.min(s - 1);
        // Probes spread evenly over the (already random) sample.
        let count = LOCAL_PROBES.min(s / 2);
        let probes: Vec<usize> = (0..count).map(|i| i * s / count).collect();
        let p = probes.len();
        let pm: Vec<f32> = probes
            .iter()
            .flat_map(|&r| rows[r * dim..(r + 1) * dim].iter().copied())
            .collect();
        let norms: Vec<f32> = rows
            .par_chunks_exact(dim)
            .map(|r| r.iter().map(|v| v * v).sum())
            .collect();
        const BLOCK: usize = 8_192;
        let mut best: Vec<Vec<(f32, u32)>> = vec![Vec::with_capacity(pool + 1); p];
        let pref = faer::MatRef::from_row_major_slice(&pm, p, dim);
        let mut dots = vec![0f32; p * BLOCK];
        for start in (0..s).step_by(BLOCK) {
            let b = BLOCK.min(s - start);
            let cand =
                faer::MatRef::from_row_major_slice(&rows[start * dim..(start + b) * dim], b, dim);
            let out = faer::MatMut::from_row_major_slice_mut(&mut dots[..p * b], p, b);
            faer::linalg::matmul::matmul(
                out,
                faer::Accum::Replace,
                pref,
                cand.transpose(),
                1.0f32,
                faer::Par::rayon(0),
            );
            best.par_iter_mut()
                .zip(dots[..p * b].par_chunks(b))
                .zip(probes.par_iter())
                .for_each(|((top, d), &me)| {
                    for (j, &dot) in d.iter().enumerate() {
                        let id = start + j;
                        let dist = norms[id] - 2.0 * dot;
                        if id != me && (top.len() < pool || dist < top[pool - 1].0) {
                            let at = top.partition_point(|e| e.0 <= dist);
                            top.insert(at, (dist, id as u32));
                            top.truncate(pool);
                        }
                    }
                });
        }
        let pools = best
            .into_iter()
            .map(|top| top.into_iter().map(|e| e.1).collect())
            .collect();
        Some(Self { probes, pools })
    }

    /// Differences between each probe and its first `take` pool members,
    /// along the first `along` of `dirs` (orthonormal rows of `D`):
    /// `probes x take x along`.
    fn differences(
        &self,
        rows: &[f32],
        dim: usize,
        dirs: &[f32],
        take: usize,
        along: usize,
    ) -> Vec<f32> {
        let diffs: Vec<f32> = self
            .probes
            .iter()
            .zip(&self.pools)
            .flat_map(|(&me, pool)| {
                pool.iter().take(take).flat_map(move |&id| {
                    (0..dim).map(move |i| rows[id as usize * dim + i] - rows[me * dim + i])
                })
            })
            .collect();
        let t = diffs.len() / dim;
        let mut out = vec![0f32; t * along];
        faer::linalg::matmul::matmul(
            faer::MatMut::from_row_major_slice_mut(&mut out, t, along),
            faer::Accum::Replace,
            faer::MatRef::from_row_major_slice(&diffs, t, dim),
            faer::MatRef::from_row_major_slice(&dirs[..along * dim], along, dim).transpose(),
            1.0f32,
            faer::Par::rayon(0),
        );
        out
    }

    /// The mean squared difference along each of `dirs` (`D` orthonormal
    /// rows of `D`) between the probes and their [`LOCAL_NEIGHBOURS`]
    /// nearest: where neighbours differ, which the global spectrum does not
    /// tell when a few directions hold the variance but not the
    /// neighbourhoods. `None` when the neighbours coincide (all duplicates).
    pub fn local_spectrum(&self, rows: &[f32], dim: usize, dirs: &[f32]) -> Option<Vec<f64>> {
        let along = self.differences(rows, dim, dirs, LOCAL_NEIGHBOURS, dim);
        let t = along.len() / dim;
        let mut local = vec![0f64; dim];
        for row in along.chunks_exact(dim) {
            local
                .iter_mut()
                .zip(row)
                .for_each(|(l, &v)| *l += (v as f64).powi(2));
        }
        local.iter_mut().for_each(|l| *l /= t.max(1) as f64);
        let total: f64 = local.iter().sum();
        (total > 0.0 && total.is_finite()).then_some(local)
    }

    /// For each width in `widths` (ascending, at most `D`): the share of the
    /// probes' [`LOCAL_NEIGHBOURS`] nearest that are among the [`RANK_KEEP`]
    /// pool members nearest on the first `width` of `dirs` alone (ties
    /// broken by the exact order) -- how well a sketch of that width ranks
    /// a neighbourhood, before quantisation.
    pub fn prefix_recall(
        &self,
        rows: &[f32],
        dim: usize,
        dirs: &[f32],
        widths: &[usize],
    ) -> Vec<f64> {
        let Some(&widest) = widths.last() else {
            return Vec::new();
        };
        let pool = self.pools.iter().map(Vec::len).min().unwrap_or(0);
        let along = self.differences(rows, dim, dirs, pool, widest);
        let (want, keep) = (LOCAL_NEIGHBOURS.min(pool), RANK_KEEP.min(pool));
        widths
            .iter()
            .map(|&w| {
                let hits: usize = along
                    .par_chunks_exact(pool * widest)
                    .map(|probe| {
                        let mut d: Vec<(f32, usize)> = probe
                            .chunks_exact(widest)
                            .enumerate()
                            .map(|(j, c)| (c[..w].iter().map(|v| v * v).sum(), j))
                            .collect();
                        d.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                        d[..keep].iter().filter(|e| e.1 < want).count()
                    })
                    .sum();
                hits as f64 / (self.probes.len() * want).max(1) as f64
            })
            .collect()
    }
}

/// The unit of each principal coordinate the copies draw from (`variances`
/// and `local`, the global and local spectra of those directions): every
/// direction is measured in units of how much neighbours differ along it
/// (`sqrt(local_j)`), so a lattice cell is as wide, in neighbour distances,
/// along a direction that holds most of the variance as along the rest; all
/// scaled by one factor that gives the projected coordinates unit variance.
/// Local variances below [`LOCAL_FLOOR`] of their mean count as that floor.
pub fn copy_scales(variances: &[f64], local: &[f64]) -> Vec<f64> {
    let mean_local = local.iter().sum::<f64>() / local.len().max(1) as f64;
    if !(mean_local > 0.0 && mean_local.is_finite()) {
        let sigma = (variances.iter().sum::<f64>() / variances.len().max(1) as f64).sqrt();
        return vec![sigma.max(1e-12); variances.len()];
    }
    let unit: Vec<f64> = local
        .iter()
        .map(|&l| l.max(LOCAL_FLOOR * mean_local).sqrt())
        .collect();
    let spread = (variances
        .iter()
        .zip(&unit)
        .map(|(v, u)| v / (u * u))
        .sum::<f64>()
        / variances.len().max(1) as f64)
        .sqrt();
    let spread = if spread > 0.0 && spread.is_finite() {
        spread
    } else {
        1.0
    };
    unit.iter().map(|u| (u * spread).max(1e-12)).collect()
}

/// Floor of a direction's local variance, as a share of the mean over the
/// copies' directions ([`copy_scales`]).
pub const LOCAL_FLOOR: f64 = 1e-3;

#[cfg(test)]
mod tests {
    use super::*;

    /// Uniform data with one feature 100x wider: that feature holds almost
    /// all the variance but a small share of the neighbour differences, so
    /// in its local unit it spans far more lattice cells than the rest.
    #[test]
    fn local_spectrum_sees_past_a_wide_feature() {
        let (n, dim) = (4_000, 16);
        let mut rng = GaussianRng::new(7, 0);
        let x: Vec<f32> = (0..n * dim)
            .map(|i| {
                let u = rng.uniform() as f32;
                if i % dim == 0 {
                    u + 100.0 * (i / dim) as f32 / n as f32
                } else {
                    u
                }
            })
            .collect();
        let rows = sample_rows(n, n, 1);
        let pca = fit(&x, dim, &rows, |_| dim);
        let share = |v: &[f64]| v[0] / v.iter().sum::<f64>();
        assert!(share(&pca.spectrum) > 0.9, "{}", share(&pca.spectrum));
        assert!(share(&pca.local) < 0.2, "{}", share(&pca.local));
        let scales = copy_scales(&pca.variances, &pca.local);
        let cells: Vec<f64> = pca
            .variances
            .iter()
            .zip(&scales)
            .map(|(v, s)| v / (s * s))
            .collect();
        assert!(
            cells[1..].iter().all(|&c| c * 100.0 < cells[0]),
            "{cells:?}"
        );
        // Each direction in its own local unit: neighbours differ alike.
        let unit: Vec<f64> = pca
            .local
            .iter()
            .zip(&scales)
            .map(|(l, s)| l / (s * s))
            .collect();
        let (lo, hi) = unit
            .iter()
            .fold((f64::MAX, 0.0f64), |(a, b), &u| (a.min(u), b.max(u)));
        assert!(hi / lo < 1.0 + 1e-9, "{unit:?}");
    }

    /// Isotropic data: local and global spectra agree in shape, and the copy
    /// scales are one value, the old scalar sigma.
    #[test]
    fn isotropic_data_keeps_one_scale() {
        let (n, dim) = (3_000, 12);
        let mut rng = GaussianRng::new(8, 0);
        let x: Vec<f32> = (0..n * dim).map(|_| rng.normal() as f32).collect();
        let pca = fit(&x, dim, &sample_rows(n, n, 1), |_| dim);
        let scales = copy_scales(&pca.variances, &pca.local);
        let mean = scales.iter().sum::<f64>() / dim as f64;
        assert!(
            scales.iter().all(|s| (s / mean - 1.0).abs() < 0.35),
            "{scales:?}"
        );
        let sigma = (pca.variances.iter().sum::<f64>() / dim as f64).sqrt();
        // The projected coordinates keep unit variance on average.
        let var: f64 = pca
            .variances
            .iter()
            .zip(&scales)
            .map(|(v, s)| v / (s * s))
            .sum::<f64>()
            / dim as f64;
        assert!((var - 1.0).abs() < 1e-9 && sigma > 0.0);
    }

    #[test]
    fn duplicates_only_fall_back_to_the_global_spectrum() {
        let dim = 8;
        let row: Vec<f32> = (0..dim).map(|i| i as f32).collect();
        let x: Vec<f32> = (0..100).flat_map(|_| row.clone()).collect();
        let hoods = Neighbourhoods::find(&x, dim).unwrap();
        let mut dirs = vec![0f32; dim * dim];
        (0..dim).for_each(|i| dirs[i * dim + i] = 1.0);
        assert!(hoods.local_spectrum(&x, dim, &dirs).is_none());
        assert!(copy_scales(&[1.0, 2.0], &[0.0, 0.0])
            .iter()
            .all(|s| s.is_finite() && *s > 0.0));
    }
}
