//! Nearest points of D8 and E8 (Conway & Sloane, "Fast quantizing and decoding
//! algorithms for lattice quantizers and codes", 1982).
//!
//! Results are returned as **doubled coordinates**: `2p` for the lattice point
//! `p`. Points of D8 have even doubled coordinates; points of the coset
//! `D8 + (1/2)^8` have odd ones. E8 is the union of the two, so an E8 point is a
//! vector of integers of one parity whose halves sum to an even number.
//!
//! **Tie rule** (fixed, shared with the GPU kernels): a coordinate rounds to
//! `floor(x + 1/2)` (halves go up). When D8 needs a coordinate re-rounded, the
//! coordinate with the largest rounding error is taken (the lowest index on
//! ties) and moved one step towards `x` (up when `x == round(x)`). When the D8
//! and coset candidates are equally near, the D8 candidate wins.

/// The float types the decoders work in.
pub trait LatticeFloat:
    Copy
    + PartialOrd
    + core::ops::Sub<Output = Self>
    + core::ops::Mul<Output = Self>
    + core::ops::Add<Output = Self>
{
    const HALF: Self;
    const ZERO: Self;
    fn floor(self) -> Self;
    fn abs(self) -> Self;
    fn is_nan(self) -> bool;
    /// Exact for the small integers lattice coordinates take.
    fn to_i32(self) -> i32;
    fn from_i32(v: i32) -> Self;
}

macro_rules! impl_lattice_float {
    ($t:ty, $int:ty, $gpu_floor:ident, $ptx_reg:ident) => {
        impl LatticeFloat for $t {
            const HALF: Self = 0.5;
            const ZERO: Self = 0.0;
            /// Inline floor (the baseline x86-64 target lacks `roundps`, and a libm
            /// call per coordinate costs more than the decoder itself). Values
            /// beyond the mantissa's integer range are already integers. The
            /// GPU rounds down in one instruction (`cvt.rmi`), with the same
            /// result for every value but NaN's payload (NaN queries are
            /// refused before they reach a decoder): eight instructions fewer
            /// per coordinate, 16 coordinates per E8 point.
            #[inline(always)]
            fn floor(self) -> Self {
                #[cfg(target_arch = "nvptx64")]
                {
                    core::intrinsics::$gpu_floor(self)
                }
                #[cfg(not(target_arch = "nvptx64"))]
                {
                    const INT_LIMIT: $t = (1u64 << (<$t>::MANTISSA_DIGITS - 1)) as $t;
                    // f32: |x| < 2^23 fits the i32 conversion; f64: 2^52 fits i64.
                    if self.is_nan() || self.abs() >= INT_LIMIT {
                        return self;
                    }
                    // Branchless: subtract 1 where truncation went up (negatives).
                    let t = self as $int as $t;
                    t - ((t > self) as u8 as $t)
                }
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            /// Saturating, NaN to 0, as Rust's `as`. On the GPU that is what
            /// PTX's conversion does by itself (`cvt.rzi` clamps to the
            /// destination's range and takes NaN to 0), so there it needs no
            /// check around it: `as` compiled to the conversion plus a NaN test
            /// and a select per coordinate, 32 instructions per E8 point.
            #[inline(always)]
            fn to_i32(self) -> i32 {
                #[cfg(target_arch = "nvptx64")]
                {
                    let v: i32;
                    // SAFETY: a register-to-register conversion.
                    unsafe {
                        core::arch::asm!(concat!("cvt.rzi.s32.", stringify!($t), " {0}, {1};"), out(reg32) v, in($ptx_reg) self, options(pure, nomem, nostack));
                    }
                    v
                }
                #[cfg(not(target_arch = "nvptx64"))]
                {
                    self as i32
                }
            }
            #[inline(always)]
            fn from_i32(v: i32) -> Self {
                v as $t
            }
        }
    };
}
impl_lattice_float!(f32, i32, floorf32, reg32);
impl_lattice_float!(f64, i64, floorf64, reg64);

/// Nearest point of D8 (integer vectors with an even sum) to `x`, as plain
/// (not doubled) integer coordinates, with the squared distance to it.
#[inline(always)]
pub fn decode_d8_plain<T: LatticeFloat>(x: &[T; 8]) -> ([i32; 8], T) {
    let mut f = [0i32; 8];
    let mut sum = 0i32;
    let mut worst = 0usize;
    let mut worst_err = T::ZERO;
    for i in 0..8 {
        let r = (x[i] + T::HALF).floor();
        f[i] = r.to_i32();
        // Wrapping: coordinates past the i32 range (saturated by `to_i32`)
        // decode to a meaningless point but never overflow.
        sum = sum.wrapping_add(f[i]);
        let err = (x[i] - r).abs();
        // Selects, not branches: the data decide these about half the time.
        let better = err > worst_err;
        worst = if better { i } else { worst };
        worst_err = if better { err } else { worst_err };
    }
    // An odd sum moves the worst-rounded coordinate one step towards x. The
    // coordinate is picked by selects over constant indices, not `f[worst]`,
    // so that GPU code keeps `f` in registers.
    let (mut xw, mut fw) = (T::ZERO, 0i32);
    for i in 0..8 {
        let here = i == worst;
        xw = if here { x[i] } else { xw };
        fw = if here { f[i] } else { fw };
    }
    let step = if xw >= T::from_i32(fw) { 1 } else { -1 };
    let adjust = step * (sum & 1);
    for (i, fi) in f.iter_mut().enumerate() {
        *fi = fi.wrapping_add(if i == worst { adjust } else { 0 });
    }
    let mut d = T::ZERO;
    for i in 0..8 {
        let e = x[i] - T::from_i32(f[i]);
        d = d + e * e;
    }
    (f, d)
}

/// Nearest point of D8 to `x`, as doubled coordinates (all even), with the
/// squared distance.
#[inline]
pub fn decode_d8<T: LatticeFloat>(x: &[T; 8]) -> ([i32; 8], T) {
    let (f, d) = decode_d8_plain(x);
    (f.map(|v| v.wrapping_mul(2)), d)
}

/// Nearest point of E8 to `x`, as doubled coordinates (all even or all odd),
/// with the squared distance (never above the covering radius squared, 1).
#[inline(always)]
pub fn decode_e8<T: LatticeFloat>(x: &[T; 8]) -> ([i32; 8], T) {
    let (a, da) = decode_d8_plain(x);
    let shifted = x.map(|v| v - T::HALF);
    let (b, db) = decode_d8_plain(&shifted);
    let coset = (db < da) as i32;
    // Branchless select: 2a (even) or 2b + 1 (odd).
    let p: [i32; 8] = core::array::from_fn(|i| {
        let v = a[i].wrapping_add(coset.wrapping_mul(b[i].wrapping_sub(a[i])));
        v.wrapping_mul(2).wrapping_add(coset)
    });
    let d = if db < da { db } else { da };
    (p, d)
}

/// Whether doubled coordinates `p2` name a point of E8.
pub fn is_e8_point(p2: &[i32; 8]) -> bool {
    let parity = p2[0] & 1;
    if p2.iter().any(|&c| c & 1 != parity) {
        return false;
    }
    // sum of the halves p2/2 must be even: sum(p2) divisible by 4.
    p2.iter().sum::<i32>().rem_euclid(4) == 0
}

/// The 240 minimal vectors of E8 (norm 2), as doubled coordinates.
pub fn e8_minimal_vectors() -> [[i32; 8]; 240] {
    let mut out = [[0; 8]; 240];
    let mut len = 0;
    let mut push = |v: [i32; 8]| {
        out[len] = v;
        len += 1;
    };
    // (+-1, +-1, 0^6): 112 vectors, doubled (+-2, +-2, 0..).
    for i in 0..8 {
        for j in (i + 1)..8 {
            for si in [-2, 2] {
                for sj in [-2, 2] {
                    let mut v = [0; 8];
                    v[i] = si;
                    v[j] = sj;
                    push(v);
                }
            }
        }
    }
    // (+-1/2)^8 with an even number of minus signs: 128 vectors.
    for mask in 0u32..256 {
        if mask.count_ones() % 2 == 0 {
            let mut v = [1; 8];
            for (k, c) in v.iter_mut().enumerate() {
                if mask & (1 << k) != 0 {
                    *c = -1;
                }
            }
            push(v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sq_dist2(x: &[f64; 8], p2: &[i32; 8]) -> f64 {
        x.iter()
            .zip(p2)
            .map(|(a, &b)| (a - b as f64 / 2.0).powi(2))
            .sum()
    }

    #[test]
    fn minimal_vectors_are_240_e8_points_of_norm_2() {
        let mv = e8_minimal_vectors();
        assert_eq!(mv.len(), 240);
        for v in &mv {
            assert!(is_e8_point(v));
            let norm: i32 = v.iter().map(|c| c * c).sum();
            assert_eq!(norm, 8, "doubled norm of a minimal vector is 4*2");
        }
    }

    /// Splitmix-style generator so the sweep is reproducible without proptest.
    fn uniform(state: &mut u64) -> f64 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    #[test]
    fn e8_answer_is_a_lattice_point_and_locally_nearest_at_many_scales() {
        let mv = e8_minimal_vectors();
        let mut s = 7u64;
        for scale in [0.1, 0.7, 1.0, 3.0, 25.0, 1000.0] {
            for _ in 0..10_000 {
                let x: [f64; 8] = core::array::from_fn(|_| (uniform(&mut s) * 2.0 - 1.0) * scale);
                let (p, d) = decode_e8(&x);
                assert!(is_e8_point(&p), "{p:?} not in E8");
                assert!((d - sq_dist2(&x, &p)).abs() < 1e-9);
                assert!(d <= 1.0 + 1e-12, "squared error {d} above covering radius");
                for m in &mv {
                    let q: [i32; 8] = core::array::from_fn(|i| p[i] + m[i]);
                    assert!(
                        sq_dist2(&x, &q) >= d - 1e-9,
                        "neighbour {q:?} nearer than {p:?} to {x:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn e8_matches_exhaustive_search_in_a_small_box() {
        // All E8 points with doubled coordinates in [-3, 3]. For x in [-0.7, 0.7]^8 the
        // nearest point is within distance 1, so its halves lie in [-1.7, 1.7]: inside.
        let mut pts = Vec::new();
        let mut idx = [0i32; 8];
        loop {
            let p: [i32; 8] = core::array::from_fn(|i| idx[i] - 3);
            if is_e8_point(&p) {
                pts.push(p);
            }
            let mut k = 0;
            loop {
                if k == 8 {
                    break;
                }
                idx[k] += 1;
                if idx[k] <= 6 {
                    break;
                }
                idx[k] = 0;
                k += 1;
            }
            if k == 8 {
                break;
            }
        }
        let mut s = 11u64;
        for _ in 0..3_000 {
            let x: [f64; 8] = core::array::from_fn(|_| uniform(&mut s) * 1.4 - 0.7);
            let (_p, d) = decode_e8(&x);
            let best = pts
                .iter()
                .map(|q| sq_dist2(&x, q))
                .fold(f64::INFINITY, f64::min);
            assert!((d - best).abs() < 1e-9, "decoder {d} vs exhaustive {best}");
        }
    }

    #[test]
    fn f32_and_f64_agree_away_from_boundaries() {
        let mut s = 3u64;
        let mut agree = 0;
        let total = 20_000;
        for _ in 0..total {
            let x64: [f64; 8] = core::array::from_fn(|_| (uniform(&mut s) * 2.0 - 1.0) * 4.0);
            let x32 = x64.map(|v| v as f32);
            if decode_e8(&x64).0 == decode_e8(&x32).0 {
                agree += 1;
            }
        }
        assert!(agree >= total - 2, "only {agree}/{total} agree");
    }

    #[test]
    fn tie_rule_rounds_halves_up() {
        let x = [0.5f64, -0.5, 1.5, -1.5, 0.0, 0.0, 0.0, 0.0];
        let (p, _) = decode_d8_plain(&x);
        assert_eq!(&p[..4], &[1, 0, 2, -1]);
    }

    proptest! {
        #[test]
        fn d8_sums_are_even_and_error_bounded(x in proptest::array::uniform8(-50.0f64..50.0)) {
            let (p2, d) = decode_d8(&x);
            let halves: i32 = p2.iter().map(|c| c / 2).sum();
            prop_assert_eq!(halves % 2, 0);
            prop_assert!(p2.iter().all(|c| c % 2 == 0));
            // covering radius of D8 is sqrt(2)
            prop_assert!(d <= 2.0 + 1e-9);
        }

        #[test]
        fn e8_error_within_covering_radius(x in proptest::array::uniform8(-1e3f32..1e3)) {
            let (p2, d) = decode_e8(&x);
            prop_assert!(is_e8_point(&p2));
            prop_assert!(d <= 1.0 + 1e-3);
        }
    }
}
