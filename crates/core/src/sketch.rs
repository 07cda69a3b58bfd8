//! The sketch distance as both backends compute it: an integer dot product
//! of the query's int16 code with a vector's int8 sketch row.
//!
//! A sketch row holds `s_j` (int8) with one scale `sigma_j` per coordinate,
//! so the vector's sketch coordinates are `sigma_j s_j`. For query
//! coordinates `q_j`,
//!
//! `sum_j (q_j - sigma_j s_j)^2 = |q|^2 - 2 sum_j (q_j sigma_j) s_j + N`,
//!
//! where `N = sum_j (sigma_j s_j)^2` depends on the vector alone (computed
//! once per index, [`row_norm`]). The query's `a_j = q_j sigma_j` are coded
//! as int16 on one per-query step `beta` ([`QueryScale`]), so the middle sum
//! is `beta` times an exact integer dot product (DP2A on the GPU, `madd` on
//! the CPU). `|q|^2` is the same for every vector of one query and is left
//! out: the estimate ([`estimate`]) ranks exactly as the full distance would,
//! and may be negative.
//!
//! Decision (issue 14, measured in docs/RESULTS.md): the float form spent
//! four ALU operations and two shared-memory loads per byte of a row on the
//! GPU; the integer form spends half an operation. The query's int16 step
//! adds an error about 1/256 of the sketch's own int8 error; int8 query codes
//! (DP4A) would have made it as large as the sketch's on flat spectra.

/// Largest magnitude of a query code for sketch width `w`: 32767, or less
/// where `w` codes times 127 could overflow the `i32` dot product.
pub const fn query_code_limit(w: u32) -> f32 {
    let w = if w == 0 { 1 } else { w };
    let fit = i32::MAX as u32 / (127 * w);
    (if fit < 32767 { fit } else { 32767 }) as f32
}

/// One query's code step: codes are `round(a_j * inv_step)`; the estimate
/// multiplies the dot product by `two_step = 2 beta`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QueryScale {
    pub inv_step: f32,
    pub two_step: f32,
}

impl QueryScale {
    /// The step for a query whose largest `|a_j|` is `amax`, width `w`. A
    /// query with all `a_j = 0` (or not finite) gets zero codes and step.
    #[inline(always)]
    pub fn new(amax: f32, w: u32) -> Self {
        let limit = query_code_limit(w);
        if amax > 0.0 && amax < f32::INFINITY {
            Self {
                inv_step: limit / amax,
                two_step: 2.0 * amax / limit,
            }
        } else {
            Self::default()
        }
    }

    /// The code of `a = q_j sigma_j`: rounded to nearest, ties to even (for
    /// `|x| < 2^22` adding and subtracting `1.5 * 2^23` rounds so in `f32`),
    /// within the limit.
    #[inline(always)]
    pub fn code(self, a: f32, w: u32) -> i16 {
        const ROUND: f32 = 12_582_912.0;
        let limit = query_code_limit(w);
        let x = a * self.inv_step;
        let x = if x > limit {
            limit
        } else if x < -limit {
            -limit
        } else {
            x
        };
        ((x + ROUND) - ROUND) as i16
    }
}

/// The sketch distance estimate of a row whose [`row_norm`] is `norm` and
/// whose dot product with the query's codes is `dot`.
#[inline(always)]
pub fn estimate(norm: f32, scale: QueryScale, dot: i32) -> f32 {
    norm - scale.two_step * dot as f32
}

/// `N = sum_j (sigma_j s_j)^2` of one sketch row, summed in order.
#[inline]
pub fn row_norm(row: &[i8], scales: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (&s, &sigma) in row.iter().zip(scales) {
        let v = sigma * s as f32;
        acc += v * v;
    }
    acc
}

/// Residual sketch: where the build chose centres, a vector's sketch
/// coordinates are `c_j + gamma sigma_j s_j` (its centre `c`, the centre's
/// step `gamma`), so tight clusters far from the origin keep the int8 grid's
/// resolution. Then
///
/// `|q - x|^2 = |q|^2 + T - 2 gamma sum_j (q_j sigma_j) s_j + N'`,
///
/// with `T = sum_j c_j (c_j - 2 q_j)` per (query, centre) ([`centre_term`])
/// and `N' = sum_j e_j (e_j + 2 c_j)`, `e_j = gamma sigma_j s_j`, per vector
/// ([`residual_row_norm`]); the estimate is [`centre_estimate`]. One term
/// of [`centre_term`]'s sum, added in order `j = 0, 1, ..` by both backends.
#[inline(always)]
pub fn centre_term_step(acc: f32, c: f32, q: f32) -> f32 {
    acc + c * (c - 2.0 * q)
}

/// `T = sum_j c_j (c_j - 2 q_j)` of a centre `c` and the query's first `w`
/// principal coordinates `q` (zero beyond `m`), summed in order.
#[inline]
pub fn centre_term(centre: &[f32], q: &[f32]) -> f32 {
    centre
        .iter()
        .zip(q)
        .fold(0.0f32, |acc, (&c, &qj)| centre_term_step(acc, c, qj))
}

/// `N' = sum_j e_j (e_j + 2 c_j)`, `e_j = gamma sigma_j s_j`, of one sketch
/// row with centre `centre` and step `gamma`, summed in order.
#[inline]
pub fn residual_row_norm(row: &[i8], scales: &[f32], centre: &[f32], gamma: f32) -> f32 {
    let mut acc = 0.0f32;
    for ((&s, &sigma), &c) in row.iter().zip(scales).zip(centre) {
        let e = gamma * (sigma * s as f32);
        acc += e * (e + 2.0 * c);
    }
    acc
}

/// The residual sketch's estimate (`|q|^2` left out, as in [`estimate`]):
/// `norm` is the row's [`residual_row_norm`], `term` its centre's
/// [`centre_term`], `step` the query's `two_step` times the centre's `gamma`.
#[inline(always)]
pub fn centre_estimate(norm: f32, term: f32, step: f32, dot: i32) -> f32 {
    (norm + term) - step * dot as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_keeps_the_dot_product_in_i32() {
        for w in [16u32, 96, 256, 512, 768, 4096] {
            let l = query_code_limit(w) as i64;
            assert!(l <= 32767 && l * 127 * w as i64 <= i32::MAX as i64, "w {w}");
        }
        assert_eq!(query_code_limit(256), 32767.0);
    }

    #[test]
    fn codes_round_to_nearest_within_the_limit() {
        let s = QueryScale::new(2.0, 96);
        assert_eq!(s.code(2.0, 96), 32767);
        assert_eq!(s.code(-2.0, 96), -32767);
        assert_eq!(s.code(1.0, 96), 16384); // 16383.5, tie to even
        assert_eq!(s.code(0.0, 96), 0);
        assert_eq!(QueryScale::new(0.0, 96), QueryScale::default());
        assert_eq!(QueryScale::new(f32::NAN, 96), QueryScale::default());
    }

    #[test]
    fn estimate_matches_the_float_distance() {
        let w = 32u32;
        let sig: [f32; 32] = core::array::from_fn(|j| 0.01 + 0.002 * j as f32);
        let row: [i8; 32] = core::array::from_fn(|j| (j as i32 * 37 % 255 - 127) as i8);
        let q: [f32; 32] = core::array::from_fn(|j| ((j * 13 % 7) as f32 - 3.0) * 0.3);
        let a: [f32; 32] = core::array::from_fn(|j| q[j] * sig[j]);
        let amax = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let s = QueryScale::new(amax, w);
        let dot: i32 = (0..32)
            .map(|j| s.code(a[j], w) as i32 * row[j] as i32)
            .sum();
        let q2: f32 = q.iter().map(|v| v * v).sum();
        let est = estimate(row_norm(&row, &sig), s, dot) + q2;
        let exact: f32 = (0..32)
            .map(|j| (q[j] - sig[j] * row[j] as f32).powi(2))
            .sum();
        assert!(
            (est - exact).abs() <= 1e-4 * exact.max(1.0),
            "{est} vs {exact}"
        );
    }

    #[test]
    fn centre_estimate_matches_the_float_distance() {
        let w = 16usize;
        let sig: Vec<f32> = (0..w).map(|j| 0.003 + 0.0005 * j as f32).collect();
        let centre: Vec<f32> = (0..w).map(|j| 4.0 - 0.3 * j as f32).collect();
        let gamma = 0.25f32;
        let row: Vec<i8> = (0..w).map(|j| (j as i32 * 53 % 255 - 127) as i8).collect();
        let q: Vec<f32> = (0..w)
            .map(|j| 3.9 - 0.31 * j as f32 + 0.01 * (j % 3) as f32)
            .collect();
        let a: Vec<f32> = (0..w).map(|j| q[j] * sig[j]).collect();
        let amax = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let s = QueryScale::new(amax, w as u32);
        let dot: i32 = (0..w)
            .map(|j| s.code(a[j], w as u32) as i32 * row[j] as i32)
            .sum();
        let q2: f32 = q.iter().map(|v| v * v).sum();
        let est = centre_estimate(
            residual_row_norm(&row, &sig, &centre, gamma),
            centre_term(&centre, &q),
            s.two_step * gamma,
            dot,
        ) + q2;
        let exact: f32 = (0..w)
            .map(|j| (q[j] - centre[j] - gamma * sig[j] * row[j] as f32).powi(2))
            .sum();
        assert!((est - exact).abs() <= 2e-3, "{est} vs {exact}");
    }
}
