//! The residual sketch: centres in sketch coordinates, and every vector coded
//! relative to its centre on a grid scaled per centre
//! ([`octex_core::sketch::centre_term`] states the estimate).
//!
//! Decision: one grid for all data spends its 255 steps on the spread of the
//! whole set, so clusters far tighter than the set (spreads 100x apart) fall
//! into a few codes and the sketch ranks their members at random. The build
//! measures how well both sketches rank a sample's own neighbours
//! ([`ranking_recall`]) and keeps the residual one only where it ranks
//! better by [`MIN_GAIN`]; elsewhere the index keeps the plain sketch and the
//! search pays nothing for centres.

use rayon::prelude::*;

use crate::sketch;

/// Centres of a residual sketch (at most; fewer for small samples).
pub const CENTRES: usize = 256;
/// Sample rows per centre, at least.
const ROWS_PER_CENTRE: usize = 32;
/// Lloyd iterations after the k-means++ seeding.
const LLOYD_ITERATIONS: usize = 8;
/// Sample vectors whose neighbours are ranked ([`ranking_recall`]).
const PROBES: usize = 128;
/// Nearest neighbours a probe should find among the sketch's best
/// [`RANK_KEEP`].
const RANK_WANT: usize = 10;
const RANK_KEEP: usize = 32;
/// Sample rows the choice uses, at most (evenly spaced in the sample).
pub const CHOICE_ROWS: usize = 20_000;
/// Gain in [`ranking_recall`] the residual sketch must show to be kept.
pub const MIN_GAIN: f64 = 0.01;

/// A residual sketch's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Centres {
    /// `K x w` centres.
    pub centres: Vec<f32>,
    /// Per-coordinate scales of the residuals, `w`.
    pub scales: Vec<f32>,
    /// Each centre's multiplier of `scales`, `K`.
    pub centre_scales: Vec<f32>,
}

impl Centres {
    pub fn len(&self) -> usize {
        self.centre_scales.len()
    }
    pub fn is_empty(&self) -> bool {
        self.centre_scales.is_empty()
    }
}

/// Each row's nearest centre (`coords` is `rows x w`, `centres` `K x w`).
pub fn assign(coords: &[f32], w: usize, centres: &[f32]) -> Vec<u16> {
    // The inverted file's rule, on all cores in chunks of rows.
    const CHUNK: usize = 4096;
    let norms = crate::centre_knn::sq_norms(centres, w);
    let mut ids = vec![0u16; coords.len() / w];
    ids.par_chunks_mut(CHUNK)
        .zip(coords.par_chunks(CHUNK * w))
        .for_each(|(ids, rows)| {
            let nearest = crate::centre_knn::assign(rows, w, centres, &norms);
            ids.iter_mut()
                .zip(nearest)
                .for_each(|(id, c)| *id = c as u16);
        });
    ids
}

/// K-means of the sample's sketch coordinates (`rows x w`): k-means++
/// seeding from `seed`, then [`LLOYD_ITERATIONS`] rounds; [`CENTRES`] or
/// one per [`ROWS_PER_CENTRE`] rows, whichever is fewer.
pub fn fit_centres(sample: &[f32], w: usize, seed: u64) -> Vec<f32> {
    let rows = sample.len() / w;
    let k = CENTRES.min(rows / ROWS_PER_CENTRE).max(1);
    let row = |r: usize| &sample[r * w..(r + 1) * w];
    let dist = octex_search::knn::squared_l2;
    let mut rng = octex_lattice::GaussianRng::new(seed, 0x5ce7);
    let mut centres: Vec<f32> = row((rng.next_u64() % rows as u64) as usize).to_vec();
    let first = centres.clone();
    let mut nearest: Vec<f32> = (0..rows)
        .into_par_iter()
        .map(|r| dist(row(r), &first))
        .collect();
    while centres.len() / w < k {
        let total: f64 = nearest.iter().map(|&d| d as f64).sum();
        if total.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            break; // every row sits on a centre already
        }
        let mut u = rng.uniform() * total;
        let mut pick = rows - 1;
        for (r, &d) in nearest.iter().enumerate() {
            u -= d as f64;
            if u <= 0.0 && d > 0.0 {
                pick = r;
                break;
            }
        }
        let c = row(pick).to_vec();
        nearest
            .par_iter_mut()
            .enumerate()
            .for_each(|(r, d)| *d = d.min(dist(row(r), &c)));
        centres.extend_from_slice(&c);
    }
    crate::centre_knn::lloyd_rounds(sample, w, centres, LLOYD_ITERATIONS, |c, _| {
        Ok::<_, std::convert::Infallible>(assign(sample, w, c).into_iter().map(u32::from).collect())
    })
    .unwrap_or_else(|e| match e {})
}

/// Residual scales from the sample (`rows x w`) and its centre ids: per
/// coordinate as [`sketch::fit_scales`] does on all residuals, then per
/// centre the same quantile over its members' residuals in those units.
pub fn fit(sample: &[f32], w: usize, centres: Vec<f32>, ids: &[u16]) -> Centres {
    let k = centres.len() / w;
    let residual = residuals(sample, w, &centres, ids);
    let scales = sketch::fit_scales(&residual, w);
    let mut members: Vec<Vec<f32>> = vec![Vec::new(); k];
    for (r, &c) in residual.chunks_exact(w).zip(ids) {
        members[c as usize].extend(r.iter().zip(&scales).map(|(v, s)| (v / s).abs()));
    }
    let centre_scales = members
        .into_par_iter()
        .map(|mut m| {
            if m.is_empty() {
                return 1.0;
            }
            let q = ((m.len() as f64 * 0.9995) as usize).min(m.len() - 1);
            let v = *m.select_nth_unstable_by(q, f32::total_cmp).1 / 127.0;
            if v > 0.0 && v.is_finite() {
                v
            } else {
                1.0
            }
        })
        .collect();
    Centres {
        centres,
        scales,
        centre_scales,
    }
}

fn residuals(coords: &[f32], w: usize, centres: &[f32], ids: &[u16]) -> Vec<f32> {
    let mut out = coords.to_vec();
    out.par_chunks_mut(w).zip(ids).for_each(|(r, &c)| {
        let c = &centres[c as usize * w..(c as usize + 1) * w];
        r.iter_mut().zip(c).for_each(|(v, cj)| *v -= cj);
    });
    out
}

/// Sketch rows of `coords` (`n x w`) coded relative to their centres.
pub fn encode(coords: &[f32], w: usize, c: &Centres, ids: &[u16]) -> Vec<i8> {
    let mut out = vec![0i8; coords.len()];
    out.par_chunks_mut(w)
        .zip(coords.par_chunks(w))
        .zip(ids)
        .for_each(|((o, x), &k)| {
            let centre = &c.centres[k as usize * w..(k as usize + 1) * w];
            let g = c.centre_scales[k as usize];
            for j in 0..w {
                let step = c.scales[j] * g;
                o[j] = ((x[j] - centre[j]) / step).round().clamp(-127.0, 127.0) as i8;
            }
        });
    out
}

/// The coordinates a sketch row stands for: `sigma_j s_j`, or with centres
/// `c_j + gamma (sigma_j s_j)`.
fn decoded(rows: &[i8], w: usize, scales: &[f32], centres: Option<(&Centres, &[u16])>) -> Vec<f32> {
    let mut out: Vec<f32> = rows
        .chunks_exact(w)
        .flat_map(|r| r.iter().zip(scales).map(|(&s, &sig)| sig * s as f32))
        .collect();
    if let Some((c, ids)) = centres {
        out.par_chunks_mut(w).zip(ids).for_each(|(r, &k)| {
            let g = c.centre_scales[k as usize];
            let centre = &c.centres[k as usize * w..(k as usize + 1) * w];
            r.iter_mut()
                .zip(centre)
                .for_each(|(v, cj)| *v = cj + g * *v);
        });
    }
    out
}

/// How well a sketch ranks the sample's own neighbours: for [`PROBES`]
/// sample rows, the share of their [`RANK_WANT`] nearest other rows (by the
/// exact sketch coordinates) among the [`RANK_KEEP`] nearest by the decoded
/// sketch. `coords` and `decoded` are `rows x w`.
pub fn ranking_recall(coords: &[f32], decoded: &[f32], w: usize) -> f64 {
    let rows = coords.len() / w;
    if rows <= RANK_KEEP {
        return 1.0;
    }
    let probes: Vec<usize> = (0..PROBES.min(rows))
        .map(|i| i * rows / PROBES.min(rows))
        .collect();
    let row = |a: &[f32], r: usize| a[r * w..(r + 1) * w].to_vec();
    let hits: usize = probes
        .par_iter()
        .map(|&p| {
            let q = row(coords, p);
            let d2 = |a: &[f32], r: usize| {
                a[r * w..(r + 1) * w]
                    .iter()
                    .zip(&q)
                    .map(|(x, y)| (x - y) * (x - y))
                    .sum::<f32>()
            };
            let nearest = |a: &[f32], keep: usize| {
                let mut d: Vec<(f32, usize)> = (0..rows)
                    .filter(|&r| r != p)
                    .map(|r| (d2(a, r), r))
                    .collect();
                d.select_nth_unstable_by(keep, |x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
                d.truncate(keep);
                d.into_iter().map(|e| e.1).collect::<Vec<usize>>()
            };
            let want = nearest(coords, RANK_WANT);
            let kept = nearest(decoded, RANK_KEEP);
            want.iter().filter(|r| kept.contains(r)).count()
        })
        .sum();
    hits as f64 / (probes.len() * RANK_WANT) as f64
}

/// What [`choose`] measured and decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// The residual sketch's parameters, when kept.
    pub centres: Option<Centres>,
    /// [`ranking_recall`] of the plain and of the residual sketch.
    pub plain_recall: f64,
    pub residual_recall: f64,
}

/// Fit a residual sketch on the sample (`rows x w` sketch coordinates) and
/// keep it where it ranks the sample's neighbours better than the plain
/// sketch with `plain_scales` by [`MIN_GAIN`]; `force` (a number of
/// centres asked for: 0 never, else always) overrides the measurement.
pub fn choose(
    sample: &[f32],
    w: usize,
    plain_scales: &[f32],
    seed: u64,
    force: Option<usize>,
) -> Choice {
    let rows = sample.len() / w;
    let thinned: Vec<f32>;
    let sample = if rows > CHOICE_ROWS {
        thinned = (0..CHOICE_ROWS)
            .flat_map(|i| {
                let r = i * rows / CHOICE_ROWS;
                sample[r * w..(r + 1) * w].iter().copied()
            })
            .collect();
        &thinned[..]
    } else {
        sample
    };
    let plain = decoded(&sketch::encode(sample, plain_scales), w, plain_scales, None);
    let plain_recall = ranking_recall(sample, &plain, w);
    // Where one grid already ranks within MIN_GAIN of perfectly, centres
    // cannot win by it: no k-means.
    let cannot_gain = force.is_none() && plain_recall > 1.0 - MIN_GAIN;
    if force == Some(0) || cannot_gain || sample.len() / w < 2 * ROWS_PER_CENTRE {
        return Choice {
            centres: None,
            plain_recall,
            residual_recall: plain_recall,
        };
    }
    let centres = fit_centres(sample, w, seed);
    let ids = assign(sample, w, &centres);
    let c = fit(sample, w, centres, &ids);
    let resid = decoded(&encode(sample, w, &c, &ids), w, &c.scales, Some((&c, &ids)));
    let residual_recall = ranking_recall(sample, &resid, w);
    // Centres from data near f32's range can overflow: one grid then.
    let finite = c
        .centres
        .iter()
        .chain(&c.scales)
        .chain(&c.centre_scales)
        .all(|v| v.is_finite());
    let keep = finite && (force.is_some() || residual_recall >= plain_recall + MIN_GAIN);
    Choice {
        centres: keep.then_some(c),
        plain_recall,
        residual_recall,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two clusters 100x apart in spread, far from the origin: the plain
    /// grid cannot tell the tight cluster's members apart, the residual one can.
    #[test]
    fn residual_sketch_ranks_a_tight_cluster() {
        let w = 16;
        let mut rng = octex_lattice::GaussianRng::new(7, 0);
        let mut normal = || rng.normal() as f32;
        let mut sample = Vec::new();
        for r in 0..4000 {
            let (centre, spread) = if r % 2 == 0 {
                (10.0, 0.01)
            } else {
                (-10.0, 1.0)
            };
            for _ in 0..w {
                sample.push(centre + spread * normal());
            }
        }
        let scales = sketch::fit_scales(&sample, w);
        let choice = choose(&sample, w, &scales, 1, None);
        assert!(choice.plain_recall < 0.8, "{choice:?}");
        assert!(
            choice.residual_recall > 0.95,
            "{:?}",
            choice.residual_recall
        );
        let c = choice.centres.expect("kept");
        assert!(c.len() >= 2 && c.centre_scales.iter().all(|&g| g > 0.0));
        // Uniform data ranks as well either way: the plain sketch stays.
        let uniform: Vec<f32> = (0..4000 * w).map(|_| normal()).collect();
        let scales = sketch::fit_scales(&uniform, w);
        let choice = choose(&uniform, w, &scales, 1, None);
        assert!(
            choice.centres.is_none(),
            "{:?}",
            (choice.plain_recall, choice.residual_recall)
        );
    }
}
