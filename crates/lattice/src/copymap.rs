//! The copy map: how a vector becomes a fragment in each copy of the index.
//!
//! The data's top principal directions `P` (`D x m`, orthonormal columns) give
//! every vector its principal coordinates `pc(x) = P^T (x - mu)`. Copy `c` owns a
//! random `m_c x 8b` matrix `Q_c` with orthonormal columns drawn from the top
//! `m_c <= m` of them (QR of a Gaussian matrix by modified Gram-Schmidt in `f64`,
//! ChaCha8 on stream `c`), and its projected coordinates are
//! `z = Q_c^T (pc(x)[..m_c] / s)`, `s_t` the scale of principal direction `t`
//! (the builder's rule: `octex_build::pca::copy_scales`, from neighbour
//! differences, so that directions of wide but locally fine spread do not
//! swamp the rest). All copies at once are two matrix products:
//! `pc = x P - mu P` (`D x m`), then `z = pc[.., ..m_c] R` with
//! `R = diag(1/s) [Q_1 .. Q_C]` (`m_c x 32C`) — `D x m + m_c x 32C`
//! multiply-adds per vector instead of `D x 32C`. The principal coordinates
//! are also what the int8 sketch quantises.
//!
//! At spacing `f` the lattice coordinates are `y = z * (1/f) + t_c`, with the shift
//! `t_c` uniform in `[0, 2)^8b` (lattice units; `2Z^8` is a sublattice of E8, so
//! this is uniform modulo E8). Every block of 8 rounds to its nearest E8 point and
//! the `b` points name the fragment. Spacings are in the scales' units and sorted
//! ascending (finest first); the builder chooses them from the data.

use serde::{Deserialize, Serialize};

use crate::e8::decode_e8;
use crate::key::FragmentKey;
use crate::rng::GaussianRng;

/// Coordinates per lattice block.
pub const BLOCK_DIM: usize = 8;

/// How many copies, how many E8 blocks each, and the seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CopyMapParams {
    /// Number of copies `C`.
    pub copies: usize,
    /// E8 blocks per copy `b` (a fragment lives in `8b` dimensions).
    pub blocks: usize,
    /// Seed of every random draw of the map.
    pub seed: u64,
}

impl Default for CopyMapParams {
    fn default() -> Self {
        Self {
            copies: 32,
            blocks: 4,
            seed: 0x0c7e_5eed,
        }
    }
}

/// The principal basis, rotations, shifts and spacings of all copies (see the
/// module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct CopyMap {
    /// Input dimension `D`.
    pub dim: usize,
    pub copies: usize,
    pub blocks: usize,
    /// Principal directions `P`, `D x m` row-major.
    pub basis: Vec<f32>,
    /// `m`.
    pub basis_dim: usize,
    /// `mu^T P`, length `m`.
    pub basis_bias: Vec<f32>,
    /// `R`, `m_c x (C * 8b)` row-major, row `t` already divided by the scale
    /// of principal direction `t`.
    pub rotation: Vec<f32>,
    /// Shifts in lattice units, `C x 8b`.
    pub shifts: Vec<f32>,
    /// Spacings in units of sigma, ascending.
    pub spacings: Vec<f32>,
}

/// Random `m x k` matrix with orthonormal columns (row-major), by modified
/// Gram-Schmidt of a Gaussian matrix.
pub fn random_orthonormal(m: usize, k: usize, rng: &mut GaussianRng) -> Vec<f64> {
    assert!(
        k <= m,
        "cannot draw {k} orthonormal columns in {m} dimensions"
    );
    let mut cols: Vec<Vec<f64>> = Vec::with_capacity(k);
    while cols.len() < k {
        let mut v: Vec<f64> = (0..m).map(|_| rng.normal()).collect();
        for _ in 0..2 {
            for u in &cols {
                let dot: f64 = v.iter().zip(u).map(|(a, b)| a * b).sum();
                v.iter_mut().zip(u).for_each(|(a, b)| *a -= dot * b);
            }
        }
        let norm = v.iter().map(|a| a * a).sum::<f64>().sqrt();
        if norm > 1e-6 {
            v.iter_mut().for_each(|a| *a /= norm);
            cols.push(v);
        }
    }
    let mut out = vec![0.0; m * k];
    for (j, col) in cols.iter().enumerate() {
        for i in 0..m {
            out[i * k + j] = col[i];
        }
    }
    out
}

impl CopyMap {
    /// Draw the copies. `basis` is `D x m` row-major with orthonormal columns,
    /// `mean` the data mean, `m_c` (`8b <= m_c <= m`) how many leading principal
    /// directions the copies draw from, `scales` (length `m_c`, each `> 0`) the
    /// unit of each of those principal coordinates before the rotation (one
    /// sigma for all, or one a direction; see [`Self::rotation`]).
    pub fn random(
        mean: &[f32],
        basis: &[f64],
        m: usize,
        m_c: usize,
        scales: &[f64],
        params: &CopyMapParams,
        spacings: Vec<f32>,
    ) -> Self {
        let dim = mean.len();
        let cd = BLOCK_DIM * params.blocks;
        assert_eq!(basis.len(), dim * m, "basis must be D x m");
        assert!(
            cd <= m_c && m_c <= m,
            "a copy needs {cd} <= m_c = {m_c} <= m = {m}"
        );
        assert_eq!(scales.len(), m_c, "one scale per principal direction");
        assert!(scales.iter().all(|s| *s > 0.0 && s.is_finite()));
        let width = params.copies * cd;
        let mut rotation = vec![0f32; m_c * width];
        let mut shifts = vec![0f32; width];
        for c in 0..params.copies {
            let mut rng = GaussianRng::new(params.seed, c as u64 + 1);
            let q = random_orthonormal(m_c, cd, &mut rng);
            for t in 0..m_c {
                for j in 0..cd {
                    rotation[t * width + c * cd + j] = (q[t * cd + j] / scales[t]) as f32;
                }
            }
            for j in 0..cd {
                shifts[c * cd + j] = (2.0 * rng.uniform()) as f32;
            }
        }
        let basis32: Vec<f32> = basis.iter().map(|&v| v as f32).collect();
        let basis_bias = (0..m)
            .map(|j| {
                (0..dim)
                    .map(|i| mean[i] as f64 * basis[i * m + j])
                    .sum::<f64>() as f32
            })
            .collect();
        Self {
            dim,
            copies: params.copies,
            blocks: params.blocks,
            basis: basis32,
            basis_dim: m,
            basis_bias,
            rotation,
            shifts,
            spacings,
        }
    }

    /// `m_c`, the principal directions the copies draw from.
    pub fn rotation_dim(&self) -> usize {
        self.rotation.len() / self.width().max(1)
    }

    /// Dimensions of one copy's projection, `8b`.
    pub fn copy_dim(&self) -> usize {
        BLOCK_DIM * self.blocks
    }

    /// Width of the projection of all copies, `C * 8b`.
    pub fn width(&self) -> usize {
        self.copies * self.copy_dim()
    }

    /// Principal coordinates (`n x m`) of `n` row-major vectors (`n x D`).
    pub fn principal(&self, xs: &[f32], pcs: &mut [f32], parallel: bool) {
        project_rows(xs, self.dim, &self.basis, &self.basis_bias, pcs, parallel);
    }

    /// Project into all copies: `z` (`n x width`) from principal coordinates
    /// (`n x m`, as [`CopyMap::principal`] gives them).
    pub fn rotate(&self, pcs: &[f32], z: &mut [f32], parallel: bool) {
        let m = self.basis_dim;
        let mc = self.rotation_dim();
        let n = pcs.len() / m.max(1);
        let width = self.width();
        assert_eq!(z.len(), n * width);
        if n == 0 {
            return;
        }
        let a = faer::MatRef::from_row_major_slice(pcs, n, m).subcols(0, mc);
        let b = faer::MatRef::from_row_major_slice(&self.rotation, mc, width);
        let c = faer::MatMut::from_row_major_slice_mut(z, n, width);
        faer::linalg::matmul::matmul(c, faer::Accum::Replace, a, b, 1.0f32, par(parallel));
    }

    /// `(mu^T P)_c R` (length `width`): the bias of the projections that the
    /// principal coordinates before their bias give (`x P_c R` less this is
    /// [`CopyMap::project_batch`]'s `z`).
    pub fn projection_bias(&self) -> Vec<f32> {
        self.times_rotation(&self.basis_bias)
    }

    /// The projections (length `width`) of `alpha x + beta e_coord` are
    /// `alpha` times those of `x` plus this vector, for every `x` (the
    /// principal coordinates are affine in `x` and the rotation linear):
    /// `((alpha - 1) mu^T P + beta P[coord]) R`.
    pub fn shell_offset(&self, coord: usize, alpha: f32, beta: f32) -> Vec<f32> {
        let m = self.basis_dim;
        let d: Vec<f32> = (0..m)
            .map(|t| {
                ((alpha as f64 - 1.0) * self.basis_bias[t] as f64
                    + beta as f64 * self.basis[coord * m + t] as f64) as f32
            })
            .collect();
        self.times_rotation(&d)
    }

    /// `v_c R` (length `width`) for `v` of at least `m_c` values, summed in
    /// `f64`.
    fn times_rotation(&self, v: &[f32]) -> Vec<f32> {
        let (mc, w) = (self.rotation_dim(), self.width());
        (0..w)
            .map(|j| {
                (0..mc)
                    .map(|t| v[t] as f64 * self.rotation[t * w + j] as f64)
                    .sum::<f64>() as f32
            })
            .collect()
    }

    /// The two projections as one product, for a single matrix multiply per
    /// batch (the GPU search): the `D x (pc_cols + width)` row-major matrix
    /// `[P | 0 | P_c R]` (`P_c`: the first `m_c` principal directions; `0`:
    /// `pc_cols - m` zero columns, so that a consumer's projections start
    /// where it needs them aligned). A row `x` times it, less `[mu^T P | 0 |
    /// projection_bias]`, gives the principal coordinates and the
    /// projections of [`CopyMap::project_batch`] (up to rounding: the
    /// product `P_c R` is formed in `f64` once).
    ///
    /// # Panics
    /// If `pc_cols < basis_dim`.
    pub fn fused_projection(&self, pc_cols: usize) -> Vec<f32> {
        let (d, m, w) = (self.dim, self.basis_dim, self.width());
        assert!(
            pc_cols >= m,
            "{pc_cols} columns cannot hold {m} principal coordinates"
        );
        let cols = pc_cols + w;
        let mut fused = vec![0f32; d * cols];
        for (i, out) in fused.chunks_exact_mut(cols).enumerate() {
            let row = &self.basis[i * m..(i + 1) * m];
            out[..m].copy_from_slice(row);
            out[pc_cols..].copy_from_slice(&self.times_rotation(row));
        }
        fused
    }

    /// Project `n` row-major vectors (`n x D`) into all copies: `z` is `n x width`;
    /// `pcs` receives the principal coordinates (`n x m`, resized).
    pub fn project_batch(&self, xs: &[f32], pcs: &mut Vec<f32>, z: &mut [f32], parallel: bool) {
        let n = xs.len() / self.dim.max(1);
        pcs.resize(n * self.basis_dim, 0.0);
        self.principal(xs, pcs, parallel);
        self.rotate(pcs, z, parallel);
    }

    /// Lattice coordinates of one copy's projected vector `z` at spacing index `s`,
    /// decoded: doubled E8 coordinates into `coords` (`8b`), returns the squared
    /// distance to the fragment centre in lattice units.
    #[inline]
    pub fn decode(&self, z: &[f32], copy: usize, s: usize, coords: &mut [i32]) -> f32 {
        let cd = self.copy_dim();
        debug_assert_eq!(z.len(), cd);
        let inv = 1.0f32 / self.spacings[s];
        let shift = &self.shifts[copy * cd..(copy + 1) * cd];
        let mut total = 0.0f32;
        for blk in 0..self.blocks {
            let o = blk * BLOCK_DIM;
            let y: [f32; 8] = core::array::from_fn(|i| z[o + i] * inv + shift[o + i]);
            let (p, d) = decode_e8(&y);
            coords[o..o + BLOCK_DIM].copy_from_slice(&p);
            total += d;
        }
        total
    }

    /// The fragment of projected vector `z` (one copy) at spacing index `s`, and
    /// the squared distance to its centre in lattice units.
    #[inline]
    pub fn fragment(&self, z: &[f32], copy: usize, s: usize) -> (FragmentKey, f32) {
        let mut coords = [0i32; 64];
        let cd = self.copy_dim();
        let d = crate::decoder::best_decode()(self, z, copy, s, &mut coords[..cd]);
        (FragmentKey::from_doubled(&coords[..cd]), d)
    }

    /// The centre of a fragment (doubled coordinates) in the copy's projected space.
    pub fn centre(&self, coords: &[i32], copy: usize, s: usize, out: &mut [f32]) {
        let cd = self.copy_dim();
        let f = self.spacings[s];
        for i in 0..cd {
            out[i] = (coords[i] as f32 * 0.5 - self.shifts[copy * cd + i]) * f;
        }
    }
}

fn par(parallel: bool) -> faer::Par {
    if parallel {
        faer::Par::rayon(0)
    } else {
        faer::Par::Seq
    }
}

/// `out (n x k) = xs (n x d) * w (d x k) - bias`, row-major, through faer.
pub fn project_rows(
    xs: &[f32],
    d: usize,
    w: &[f32],
    bias: &[f32],
    out: &mut [f32],
    parallel: bool,
) {
    let k = bias.len();
    assert_eq!(w.len(), d * k);
    assert_eq!(xs.len() % d.max(1), 0);
    let n = xs.len() / d.max(1);
    assert_eq!(out.len(), n * k);
    if n == 0 {
        return;
    }
    let a = faer::MatRef::from_row_major_slice(xs, n, d);
    let b = faer::MatRef::from_row_major_slice(w, d, k);
    let c = faer::MatMut::from_row_major_slice_mut(out, n, k);
    faer::linalg::matmul::matmul(c, faer::Accum::Replace, a, b, 1.0f32, par(parallel));
    for row in out.chunks_exact_mut(k) {
        row.iter_mut().zip(bias).for_each(|(v, b)| *v -= b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity_basis(d: usize, m: usize) -> Vec<f64> {
        let mut b = vec![0.0; d * m];
        for i in 0..m {
            b[i * m + i] = 1.0;
        }
        b
    }

    /// The effective `D x width` projection `P R`.
    fn effective(map: &CopyMap) -> Vec<f64> {
        let (d, m, mc, w) = (map.dim, map.basis_dim, map.rotation_dim(), map.width());
        let mut out = vec![0.0; d * w];
        for i in 0..d {
            for j in 0..w {
                out[i * w + j] = (0..mc)
                    .map(|t| map.basis[i * m + t] as f64 * map.rotation[t * w + j] as f64)
                    .sum();
            }
        }
        out
    }

    #[test]
    fn shell_offset_moves_projections_as_the_vector_moves() {
        let d = 20;
        let mean: Vec<f32> = (0..d).map(|i| 1.0 + i as f32 * 0.25).collect();
        let basis = random_orthonormal(d, 12, &mut GaussianRng::new(4, 0));
        let p = CopyMapParams {
            copies: 2,
            blocks: 1,
            seed: 8,
        };
        let map = CopyMap::random(&mean, &basis, 12, 10, &[0.7; 10], &p, vec![1.0]);
        let mut rng = GaussianRng::new(5, 0);
        let x: Vec<f32> = (0..d).map(|_| rng.normal() as f32).collect();
        let (alpha, beta, coord) = (0.6f32, 2.5f32, d - 1);
        let mut moved: Vec<f32> = x.iter().map(|v| alpha * v).collect();
        moved[coord] += beta;
        let w = map.width();
        let (mut pcs, mut z, mut zm) = (Vec::new(), vec![0f32; w], vec![0f32; w]);
        map.project_batch(&x, &mut pcs, &mut z, false);
        map.project_batch(&moved, &mut pcs, &mut zm, false);
        let offset = map.shell_offset(coord, alpha, beta);
        for j in 0..w {
            let want = alpha * z[j] + offset[j];
            assert!((zm[j] - want).abs() < 1e-4, "{j}: {} against {want}", zm[j]);
        }
    }

    #[test]
    fn fused_projection_matches_the_two_products() {
        let d = 20;
        let mean: Vec<f32> = (0..d).map(|i| 3.0 + i as f32 * 0.5).collect();
        let basis = random_orthonormal(d, 12, &mut GaussianRng::new(3, 0));
        let p = CopyMapParams {
            copies: 3,
            blocks: 1,
            seed: 7,
        };
        let map = CopyMap::random(&mean, &basis, 12, 10, &[0.8; 10], &p, vec![1.0, 2.0]);
        let mut rng = GaussianRng::new(9, 0);
        let n = 5;
        let xs: Vec<f32> = (0..n * d)
            .map(|i| mean[i % d] + rng.normal() as f32)
            .collect();
        let (mut pcs, mut z) = (Vec::new(), vec![0f32; n * map.width()]);
        map.project_batch(&xs, &mut pcs, &mut z, false);
        let bias = map.projection_bias();
        let (m, w) = (map.basis_dim, map.width());
        // Unpadded, and with the principal block padded to 16 columns.
        for pc_cols in [m, 16] {
            let fused = map.fused_projection(pc_cols);
            let cols = pc_cols + w;
            assert_eq!(fused.len(), d * cols);
            for (r, x) in xs.chunks_exact(d).enumerate() {
                for j in 0..cols {
                    let raw: f64 = (0..d)
                        .map(|i| x[i] as f64 * fused[i * cols + j] as f64)
                        .sum();
                    let (got, want) = if j < m {
                        (raw - map.basis_bias[j] as f64, pcs[r * m + j])
                    } else if j < pc_cols {
                        (raw, 0.0)
                    } else {
                        (raw - bias[j - pc_cols] as f64, z[r * w + j - pc_cols])
                    };
                    assert!(
                        (got - want as f64).abs() < 1e-3,
                        "{pc_cols} principal columns, row {r} column {j}: {got} against {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn projection_columns_are_orthonormal_per_copy() {
        let d = 70;
        let map = CopyMap::random(
            &vec![0.0; d],
            &identity_basis(d, 64),
            64,
            64,
            &[1.0; 64],
            &CopyMapParams {
                copies: 5,
                blocks: 4,
                seed: 9,
            },
            vec![1.0],
        );
        let w = map.width();
        let u = effective(&map);
        for c in 0..map.copies {
            for a in 0..32 {
                for b in 0..32 {
                    let dot: f64 = (0..d)
                        .map(|i| u[i * w + c * 32 + a] * u[i * w + c * 32 + b])
                        .sum();
                    let want = if a == b { 1.0 } else { 0.0 };
                    assert!((dot - want).abs() < 1e-5, "copy {c} cols {a},{b}: {dot}");
                }
            }
        }
        assert!(map.shifts.iter().all(|&s| (0.0..2.0).contains(&s)));
    }

    #[test]
    fn same_seed_same_map_other_seed_other_map() {
        let d = 40;
        let basis = identity_basis(d, 32);
        let p = CopyMapParams {
            copies: 3,
            blocks: 4,
            seed: 1,
        };
        let a = CopyMap::random(
            &vec![0.5; d],
            &basis,
            32,
            32,
            &[2.0; 32],
            &p,
            vec![1.0, 2.0],
        );
        let b = CopyMap::random(
            &vec![0.5; d],
            &basis,
            32,
            32,
            &[2.0; 32],
            &p,
            vec![1.0, 2.0],
        );
        assert_eq!(a, b);
        let c = CopyMap::random(
            &vec![0.5; d],
            &basis,
            32,
            32,
            &[2.0; 32],
            &CopyMapParams { seed: 2, ..p },
            vec![1.0, 2.0],
        );
        assert_ne!(a.rotation, c.rotation);
    }

    #[test]
    fn batch_projection_matches_definition_and_fragment_centre_is_near() {
        let d = 33;
        let basis = identity_basis(d, 32);
        let mean: Vec<f32> = (0..d).map(|i| i as f32 * 0.01).collect();
        let map = CopyMap::random(
            &mean,
            &basis,
            32,
            32,
            &[0.5; 32],
            &CopyMapParams {
                copies: 2,
                blocks: 4,
                seed: 4,
            },
            vec![0.7, 1.5],
        );
        let mut rng = GaussianRng::new(5, 0);
        let n = 17;
        let xs: Vec<f32> = (0..n * d).map(|_| rng.normal() as f32).collect();
        let mut out = vec![0f32; n * map.width()];
        let mut pcs = Vec::new();
        map.project_batch(&xs, &mut pcs, &mut out, false);
        let w = map.width();
        let u = effective(&map);
        for r in 0..n {
            for j in 0..w {
                let want: f64 = (0..d)
                    .map(|i| (xs[r * d + i] - mean[i]) as f64 * u[i * w + j])
                    .sum();
                assert!((want - out[r * w + j] as f64).abs() < 1e-4);
            }
            for c in 0..2 {
                for s in 0..2 {
                    let z = &out[r * w + c * 32..r * w + c * 32 + 32];
                    let mut coords = [0i32; 32];
                    let dl = map.decode(z, c, s, &mut coords);
                    let mut centre = [0f32; 32];
                    map.centre(&coords, c, s, &mut centre);
                    let dz: f32 = z.iter().zip(&centre).map(|(a, b)| (a - b) * (a - b)).sum();
                    let f = map.spacings[s];
                    assert!(
                        (dz - dl * f * f).abs() < 1e-3 * (1.0 + dz),
                        "{dz} vs {}",
                        dl * f * f
                    );
                    assert!(dl <= 4.0 + 1e-4, "b blocks: squared error at most b");
                }
            }
        }
    }
}
