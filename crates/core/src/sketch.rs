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
}
