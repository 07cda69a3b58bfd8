//! The build's exact squared L2 distance, one summation order for the CPU
//! and the GPU: ripple candidates ranked by it must come out in the same
//! order on both, to the last bit.

/// Squared L2 distance by direct differences, summed in eight lanes (lane
/// `j % 8` takes coordinate `j`, then the lanes in order, then the tail):
/// exact where the products' expansion loses digits, and a loop the CPU
/// vectorises.
#[inline(always)]
pub fn squared_l2(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            let d = x[l] - y[l];
            acc[l] += d * d;
        }
    }
    let mut tail = 0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += (x - y) * (x - y);
    }
    let mut sum = 0f32;
    for v in acc {
        sum += v;
    }
    sum + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equals_a_direct_sum_up_to_rounding() {
        let a: Vec<f32> = (0..21).map(|i| i as f32 * 0.37).collect();
        let b: Vec<f32> = (0..21).map(|i| (i as f32 * 1.3).sin()).collect();
        let direct: f64 = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
            .sum();
        assert!((squared_l2(&a, &b) as f64 - direct).abs() < 1e-4 * direct);
        assert_eq!(squared_l2(&a, &a), 0.0);
    }
}
