//! The robustness families of `cargo xtask synth --family NAME`: deterministic
//! data sets of the kinds an index meets outside its tuning sets (variance in a
//! few directions, unscaled tabular features, uneven clusters, a manifold in
//! high dimension, duplicates, uniform data, queries from another
//! distribution). Each family draws its base and queries from one seed.

use octex_lattice::GaussianRng;
use rayon::prelude::*;

/// Rows drawn per parallel task (each task has its own random stream).
const CHUNK: usize = 4_096;

/// A data family: its name, what it is, and its default dimension.
pub struct Family {
    pub name: &'static str,
    pub about: &'static str,
    pub dim: usize,
}

pub const FAMILIES: &[Family] = &[
    Family {
        name: "mixture",
        about: "Gaussian mixture of 1,000 clusters, spectrum decaying as 1/(1+j/12)",
        dim: 128,
    },
    Family {
        name: "wide",
        about: "uniform in [0,1]^D, feature 0 widened 100x along the base's order; queries from the first tenth of that range",
        dim: 64,
    },
    Family {
        name: "wide3",
        about: "Gaussian, features 0-2 have 300x, 100x and 30x the spread of the rest",
        dim: 96,
    },
    Family {
        name: "powerlaw",
        about: "Gaussian with spread j^-1 along coordinate j (variance j^-2), randomly rotated",
        dim: 128,
    },
    Family {
        name: "tabular",
        about: "64 clusters of features whose scales run from 1e-2 to 1e3, a quarter of them integer-valued",
        dim: 24,
    },
    Family {
        name: "uneven",
        about: "clusters of Zipf sizes and spreads from 0.02 to 2",
        dim: 64,
    },
    Family {
        name: "manifold",
        about: "a smooth 6-dimensional manifold embedded in 128 dimensions, plus noise of 1% of its spread",
        dim: 128,
    },
    Family {
        name: "duplicates",
        about: "Gaussian mixture in which 40% of the base are exact copies of other base vectors",
        dim: 64,
    },
    Family {
        name: "uniform",
        about: "uniform in [0,1]^D (intrinsic dimension D)",
        dim: 64,
    },
    Family {
        name: "shifted",
        about: "Gaussian mixture base; queries from 3 of its 200 clusters, shifted by one cluster spread",
        dim: 96,
    },
];

/// The family called `name`.
pub fn family(name: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.name == name)
}

/// Draw `rows` vectors of `dim` coordinates in parallel, `each(rng, row_index, row)`
/// filling one row from its chunk's own random stream.
fn draw(
    rows: usize,
    dim: usize,
    seed: u64,
    stream0: u64,
    each: impl Fn(&mut GaussianRng, usize, &mut [f32]) + Sync,
) -> Vec<f32> {
    let mut out = vec![0f32; rows * dim];
    out.par_chunks_mut(CHUNK * dim)
        .enumerate()
        .for_each(|(ci, chunk)| {
            let mut rng = GaussianRng::new(seed, stream0 + 1 + ci as u64);
            for (r, row) in chunk.chunks_exact_mut(dim).enumerate() {
                each(&mut rng, ci * CHUNK + r, row);
            }
        });
    out
}

/// `k x dim` Gaussian centres with per-coordinate spread `scale[j]`.
fn centres(k: usize, dim: usize, seed: u64, scale: impl Fn(usize) -> f64) -> Vec<f64> {
    let mut rng = GaussianRng::new(seed, 0);
    (0..k * dim)
        .map(|i| rng.normal() * scale(i % dim))
        .collect()
}

/// Base (`n` rows) and queries (`q` rows) of family `name` in `dim` dimensions.
pub fn make(name: &str, n: usize, q: usize, dim: usize, seed: u64) -> Option<(Vec<f32>, Vec<f32>)> {
    const QS: u64 = 1 << 32;
    let out = match name {
        "mixture" => {
            let decay = move |j: usize| 1.0 / (1.0 + j as f64 / 12.0);
            let c = centres(1_000, dim, seed, move |j| 2.5 * decay(j));
            let f = move |rng: &mut GaussianRng, _: usize, row: &mut [f32]| {
                let k = (rng.next_u64() % 1_000) as usize;
                for (j, v) in row.iter_mut().enumerate() {
                    *v = (c[k * dim + j] + rng.normal() * decay(j)) as f32;
                }
            };
            (draw(n, dim, seed, 0, &f), draw(q, dim, seed, QS, &f))
        }
        "wide" => {
            let base = draw(n, dim, seed, 0, |rng, i, row| {
                row.iter_mut().for_each(|v| *v = rng.uniform() as f32);
                row[0] += (100.0 * i as f64 / n as f64) as f32;
            });
            let qs = draw(q, dim, seed, QS, |rng, _, row| {
                row.iter_mut().for_each(|v| *v = rng.uniform() as f32);
                row[0] += (10.0 * rng.uniform()) as f32;
            });
            (base, qs)
        }
        "wide3" => {
            let spread = |j: usize| match j {
                0 => 300.0,
                1 => 100.0,
                2 => 30.0,
                _ => 1.0,
            };
            let f = |rng: &mut GaussianRng, _: usize, row: &mut [f32]| {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = (rng.normal() * spread(j)) as f32;
                }
            };
            (draw(n, dim, seed, 0, f), draw(q, dim, seed, QS, f))
        }
        "powerlaw" => {
            // A random rotation so the spectrum is not axis-aligned.
            let mut rng = GaussianRng::new(seed, 0);
            let rot = octex_lattice::copymap::random_orthonormal(dim, dim, &mut rng);
            let f = |rng: &mut GaussianRng, _: usize, row: &mut [f32]| {
                let g: Vec<f64> = (0..dim).map(|j| rng.normal() / (j + 1) as f64).collect();
                for (i, v) in row.iter_mut().enumerate() {
                    *v = (0..dim).map(|j| rot[i * dim + j] * g[j]).sum::<f64>() as f32;
                }
            };
            (draw(n, dim, seed, 0, f), draw(q, dim, seed, QS, f))
        }
        "tabular" => {
            let mut srng = GaussianRng::new(seed, 7);
            let scale: Vec<f64> = (0..dim)
                .map(|_| 10f64.powf(-2.0 + 5.0 * srng.uniform()))
                .collect();
            let s2 = scale.clone();
            let c = centres(64, dim, seed, move |j| s2[j]);
            let f = |rng: &mut GaussianRng, _: usize, row: &mut [f32]| {
                let k = (rng.next_u64() % 64) as usize;
                for (j, v) in row.iter_mut().enumerate() {
                    let x = c[k * dim + j] + 0.3 * rng.normal() * scale[j];
                    *v = if j % 4 == 3 { x.round() } else { x } as f32;
                }
            };
            (draw(n, dim, seed, 0, f), draw(q, dim, seed, QS, f))
        }
        "uneven" => {
            let k = 300;
            let c = centres(k, dim, seed, |_| 4.0);
            // Zipf weights: cluster i drawn with probability ~ 1/(i+1).
            let cum: Vec<f64> = (0..k)
                .scan(0.0, |s, i| {
                    *s += 1.0 / (i + 1) as f64;
                    Some(*s)
                })
                .collect();
            let total = *cum.last().unwrap();
            let spread = |i: usize| 0.02 * 100f64.powf(((i * 7919) % k) as f64 / (k - 1) as f64);
            let f = |rng: &mut GaussianRng, _: usize, row: &mut [f32]| {
                let u = rng.uniform() * total;
                let i = cum.partition_point(|&x| x < u).min(k - 1);
                for (j, v) in row.iter_mut().enumerate() {
                    *v = (c[i * dim + j] + rng.normal() * spread(i)) as f32;
                }
            };
            (draw(n, dim, seed, 0, f), draw(q, dim, seed, QS, f))
        }
        "manifold" => {
            let latent = 6;
            let mut rng = GaussianRng::new(seed, 0);
            let freq: Vec<f64> = (0..dim * latent).map(|_| rng.normal()).collect();
            let phase: Vec<f64> = (0..dim)
                .map(|_| std::f64::consts::TAU * rng.uniform())
                .collect();
            let f = |rng: &mut GaussianRng, _: usize, row: &mut [f32]| {
                let t: Vec<f64> = (0..latent).map(|_| rng.uniform() * 2.0).collect();
                for (j, v) in row.iter_mut().enumerate() {
                    let a: f64 = (0..latent).map(|l| freq[j * latent + l] * t[l]).sum();
                    *v = ((a + phase[j]).sin() + 0.01 * rng.normal()) as f32;
                }
            };
            (draw(n, dim, seed, 0, f), draw(q, dim, seed, QS, f))
        }
        "duplicates" => {
            let c = centres(500, dim, seed, |_| 2.0);
            let f = |rng: &mut GaussianRng, _: usize, row: &mut [f32]| {
                let k = (rng.next_u64() % 500) as usize;
                for (j, v) in row.iter_mut().enumerate() {
                    *v = (c[k * dim + j] + rng.normal()) as f32;
                }
            };
            let mut base = draw(n, dim, seed, 0, f);
            // Rows from 60% on copy a random row before them.
            let mut rng = GaussianRng::new(seed, 9);
            let first = n * 3 / 5;
            for i in first..n {
                let src = (rng.next_u64() % first.max(1) as u64) as usize;
                base.copy_within(src * dim..(src + 1) * dim, i * dim);
            }
            (base, draw(q, dim, seed, QS, f))
        }
        "uniform" => {
            let f = |rng: &mut GaussianRng, _: usize, row: &mut [f32]| {
                row.iter_mut().for_each(|v| *v = rng.uniform() as f32);
            };
            (draw(n, dim, seed, 0, f), draw(q, dim, seed, QS, f))
        }
        "shifted" => {
            let k = 200;
            let c = centres(k, dim, seed, |_| 3.0);
            let base = draw(n, dim, seed, 0, |rng, _, row| {
                let i = (rng.next_u64() % k as u64) as usize;
                for (j, v) in row.iter_mut().enumerate() {
                    *v = (c[i * dim + j] + rng.normal()) as f32;
                }
            });
            let qs = draw(q, dim, seed, QS, |rng, _, row| {
                let i = (rng.next_u64() % 3) as usize;
                for (j, v) in row.iter_mut().enumerate() {
                    *v = (c[i * dim + j] + 1.0 + rng.normal()) as f32;
                }
            });
            (base, qs)
        }
        _ => return None,
    };
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_deterministic_and_finite() {
        for f in FAMILIES {
            let (b, q) = make(f.name, 300, 20, f.dim, 3).unwrap();
            assert_eq!(b.len(), 300 * f.dim, "{}", f.name);
            assert_eq!(q.len(), 20 * f.dim, "{}", f.name);
            assert!(b.iter().chain(&q).all(|v| v.is_finite()), "{}", f.name);
            let (b2, _) = make(f.name, 300, 20, f.dim, 3).unwrap();
            assert_eq!(b, b2, "{} is not deterministic", f.name);
            let (b3, _) = make(f.name, 300, 20, f.dim, 4).unwrap();
            assert_ne!(b, b3, "{} ignores its seed", f.name);
        }
        assert!(make("nope", 10, 1, 8, 0).is_none());
    }

    #[test]
    fn duplicates_hold_copies_and_wide_is_wide() {
        let dim = 64;
        let (b, _) = make("duplicates", 1_000, 1, dim, 1).unwrap();
        let rows: Vec<&[f32]> = b.chunks_exact(dim).collect();
        let copies = rows[600..]
            .iter()
            .filter(|r| rows[..600].contains(r))
            .count();
        assert_eq!(copies, 400);
        let (w, _) = make("wide", 1_000, 1, dim, 1).unwrap();
        let spread = |j: usize| {
            let col: Vec<f32> = w.chunks_exact(dim).map(|r| r[j]).collect();
            col.iter().cloned().fold(f32::MIN, f32::max)
                - col.iter().cloned().fold(f32::MAX, f32::min)
        };
        assert!(spread(0) > 50.0 * spread(1));
    }
}
