//! The int8 sketch: the first `w` principal coordinates of every vector, one
//! scale per coordinate.
//!
//! Decision: a coordinate's scale is its 99.95th percentile of `|value|` on the
//! PCA sample divided by 127 (values beyond saturate), so a rare outlier does not
//! coarsen the grid of every other vector.

use rayon::prelude::*;

/// Scales for `coords` (`rows x w`).
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
