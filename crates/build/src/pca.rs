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
    choose_m: impl FnOnce(&[f64]) -> usize,
) -> Pca {
    let n = data.len() / dim;
    let mut mean64 = data
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
    mean64.iter_mut().for_each(|v| *v /= n as f64);
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
    let m = choose_m(&spectrum).clamp(1, dim);
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
    }
}
