//! The int8 sketch: the first `w` principal coordinates of every vector, one
//! scale per coordinate.
//!
//! Decision: a coordinate's scale is its 99.95th percentile of `|value|` on the
//! PCA sample divided by 127 (values beyond saturate), so a rare outlier does not
//! coarsen the grid of every other vector. Inner product takes the largest
//! `|value|` of all vectors instead ([`max_scales`]): its answers are the
//! data's extremes, which a saturated grid cannot rank.

use rayon::prelude::*;

/// Share of the data's variance that a sketch chosen from the data holds
/// ([`width_for_spectra`]).
pub const AUTO_VARIANCE: f64 = 0.90;

/// Widest sketch chosen from the data (bytes per row). 256 left flat
/// spectra of 384-512 dimensions with a sketch holding 0.56-0.71 of the
/// variance, that reached recall 0.99 only at R = 1024 or not at all
/// (docs/RESULTS.md, "Decisions").
pub const AUTO_MAX_WIDTH: usize = 512;

/// Widest sketch chosen where that many coordinates already hold
/// [`AUTO_VARIANCE`] of the data's (global) variance: beyond it each byte
/// is read for every candidate and buys little ranking (docs/RESULTS.md,
/// "Decisions").
pub const NARROW_MAX_WIDTH: usize = 256;

/// The widest a sketch chosen from the data can be for stored dimension `dim`:
/// `dim` rounded up to 16, at most [`AUTO_MAX_WIDTH`].
pub fn auto_width_bound(dim: usize) -> usize {
    (dim.div_ceil(16) * 16).clamp(16, AUTO_MAX_WIDTH)
}

/// The sketch width for data whose principal directions carry the
/// variances `global` and the neighbour-difference variances `local`
/// (descending by `global`, all `D` of each): the fewest leading principal
/// coordinates, in steps of 16, that hold [`AUTO_VARIANCE`] of the local
/// total, within `16..=auto_width_bound(D)`, and at most
/// [`NARROW_MAX_WIDTH`] where that many hold [`AUTO_VARIANCE`] of the
/// global total.
///
/// Departure from the paper (64 to 128 bytes everywhere), measured: where the
/// spectrum is flat (sentence embeddings), 96 coordinates rank poorly; where
/// it falls fast the rule keeps the paper's widths (GloVe-50 48).
/// `docs/RESULTS.md`, "Decisions".
pub fn width_for_spectra(global: &[f64], local: &[f64]) -> usize {
    let w = width_holding(local, AUTO_VARIANCE);
    let total: f64 = global.iter().map(|v| v.max(0.0)).sum();
    let narrow: f64 = global
        .iter()
        .take(NARROW_MAX_WIDTH)
        .map(|v| v.max(0.0))
        .sum();
    match w > NARROW_MAX_WIDTH && narrow >= AUTO_VARIANCE * total {
        true => NARROW_MAX_WIDTH,
        false => w,
    }
}

/// The fewest leading coordinates of `spectrum`, in steps of 16, that hold
/// `share` of its total, within `16..=auto_width_bound(D)`.
pub fn width_holding(spectrum: &[f64], share: f64) -> usize {
    let bound = auto_width_bound(spectrum.len());
    let total: f64 = spectrum.iter().map(|v| v.max(0.0)).sum();
    let mut w = 16;
    while w < bound {
        let held: f64 = spectrum.iter().take(w).map(|v| v.max(0.0)).sum();
        if held >= share * total {
            break;
        }
        w += 16;
    }
    w.min(bound)
}

/// The sketch width for data whose prefixes rank as `prefix_recall` says
/// (`(w, recall)` ascending in `w`, from [`crate::pca::Pca::prefix_recall`]):
/// the narrowest whose recall reaches `target`, else the widest measured
/// (`16` when nothing was measured), rounded up to 16.
pub fn width_for_ranking(prefix_recall: &[(usize, f64)], target: f64) -> usize {
    let w = prefix_recall
        .iter()
        .find(|(_, r)| *r >= target)
        .or(prefix_recall.last())
        .map_or(16, |(w, _)| *w);
    w.div_ceil(16).max(1) * 16
}

/// Scales for `coords` (`rows x w`): each coordinate's 99.95th percentile of
/// `|value|` over 127.
pub fn fit_scales(coords: &[f32], w: usize) -> Vec<f32> {
    let rows = coords.len() / w;
    (0..w)
        .map(|j| {
            let mut col: Vec<f32> = (0..rows).map(|r| coords[r * w + j].abs()).collect();
            if col.is_empty() {
                return 1.0;
            }
            let q = ((col.len() as f64 * 0.9995) as usize).min(col.len() - 1);
            let v = *col.select_nth_unstable_by(q, f32::total_cmp).1;
            if v > 0.0 && v.is_finite() {
                v / 127.0
            } else {
                1.0
            }
        })
        .collect()
}

/// Scales that saturate no row: each coordinate's largest `|value|` over the
/// `rows` (each `w` coordinates, as `row(r)` yields them) over 127 (1 where
/// all are zero).
pub fn max_scales<I>(rows: usize, w: usize, row: impl Fn(usize) -> I + Sync) -> Vec<f32>
where
    I: Iterator<Item = f32>,
{
    let largest = (0..rows)
        .into_par_iter()
        .fold(
            || vec![0f32; w],
            |mut mx, r| {
                for (m, v) in mx.iter_mut().zip(row(r)) {
                    *m = m.max(v.abs());
                }
                mx
            },
        )
        .reduce(
            || vec![0f32; w],
            |a, b| a.iter().zip(&b).map(|(x, y)| x.max(*y)).collect(),
        );
    largest
        .into_iter()
        .map(|v| {
            if v > 0.0 && v.is_finite() {
                v / 127.0
            } else {
                1.0
            }
        })
        .collect()
}

/// Quantise principal coordinates (`n x w`) into sketch rows.
pub fn encode(coords: &[f32], scales: &[f32]) -> Vec<i8> {
    let w = scales.len();
    let inv: Vec<f32> = scales.iter().map(|s| 1.0 / s).collect();
    let mut out = vec![0i8; coords.len()];
    out.par_chunks_mut(w * 1024)
        .zip(coords.par_chunks(w * 1024))
        .for_each(|(o, c)| {
            for (row_o, row_c) in o.chunks_exact_mut(w).zip(c.chunks_exact(w)) {
                for j in 0..w {
                    row_o[j] = (row_c[j] * inv[j]).round().clamp(-127.0, 127.0) as i8;
                }
            }
        });
    out
}

#[cfg(test)]
mod width_tests {
    use super::*;

    #[test]
    fn width_follows_the_spectrum() {
        let w = |s: &[f64]| width_for_spectra(s, s);
        // Fast decay: 90% within the first 16.
        let fast: Vec<f64> = (0..384).map(|i| 0.5f64.powi(i)).collect();
        assert_eq!(w(&fast), 16);
        // Flat: 90% needs 90% of the coordinates, capped at the bound.
        let flat = vec![1.0; 1024];
        assert_eq!(w(&flat), AUTO_MAX_WIDTH);
        assert_eq!(w(&[1.0; 384]), 352);
        let flat100 = vec![1.0; 100];
        assert_eq!(w(&flat100), 96);
        assert_eq!(w(&[0.0; 50]), 16);
        assert_eq!(auto_width_bound(50), 64);
    }

    /// Past [`NARROW_MAX_WIDTH`] only where that many coordinates hold too
    /// little of the global variance, whatever the local spectrum asks.
    #[test]
    fn wide_sketches_only_where_the_narrow_one_holds_too_little() {
        let local = vec![1.0; 784];
        // 256 of 784 directions hold 0.98 of this spectrum (256 / 261.28).
        let steep: Vec<f64> = (0..784).map(|i| if i < 256 { 1.0 } else { 0.01 }).collect();
        assert_eq!(width_for_spectra(&steep, &local), NARROW_MAX_WIDTH);
        // A flat global spectrum: the local one decides.
        assert_eq!(width_for_spectra(&local, &local), AUTO_MAX_WIDTH);
        let mostly: Vec<f64> = (0..384).map(|i| if i < 300 { 1.0 } else { 0.1 }).collect();
        assert_eq!(width_for_spectra(&mostly, &[1.0; 384]), 352);
        // Under the narrow bound, the local spectrum alone.
        assert_eq!(width_for_spectra(&steep[..200], &[1.0; 200]), 192);
    }
}
