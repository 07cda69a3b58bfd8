//! The lattice decode on the CPU: the E8 points of one copy's projected
//! vector at one spacing, [`CopyMap::decode`]'s arithmetic, tie rule and
//! squared distance, eight coordinates (one E8 block) per AVX2 register where
//! the CPU has it. Tested equal to [`CopyMap::decode`], which the GPU kernels
//! follow; the search's first round and the builder's fragments both call
//! [`best_decode`].

use crate::CopyMap;

/// A copy decoder: `(map, projected vector of one copy, copy, spacing index,
/// doubled E8 coordinates out) -> squared distance to the point in lattice
/// units`, as [`CopyMap::decode`].
pub type DecodeFn = fn(&CopyMap, &[f32], usize, usize, &mut [i32]) -> f32;

/// The portable decoder: [`CopyMap::decode`] itself.
pub fn decode_portable(map: &CopyMap, z: &[f32], copy: usize, s: usize, coords: &mut [i32]) -> f32 {
    map.decode(z, copy, s, coords)
}

/// The fastest decoder this CPU runs.
pub fn best_decode() -> DecodeFn {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            return x86::decode_avx2_checked;
        }
    }
    decode_portable
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::{decode_e8, CopyMap, BLOCK_DIM};

    /// Blocks with a coordinate at or beyond this magnitude (lattice units),
    /// or NaN, take the portable decoder: below it every step is exact in
    /// f32 and `cvttps2dq` agrees with Rust's saturating `as i32`.
    const EXACT_LIMIT: f32 = (1u32 << 24) as f32;

    pub fn decode_avx2_checked(
        map: &CopyMap,
        z: &[f32],
        copy: usize,
        s: usize,
        coords: &mut [i32],
    ) -> f32 {
        let cd = map.copy_dim();
        assert!(z.len() == cd && coords.len() >= cd && map.shifts.len() >= (copy + 1) * cd);
        // SAFETY: handed out by `best_decode` only after run-time detection of
        // AVX2; the lengths are checked just above.
        unsafe { decode_avx2(map, z, copy, s, coords) }
    }

    /// # Safety
    /// AVX2; `z` holds `cd` values, `coords` at least `cd`, `map.shifts` the
    /// copy's `cd`.
    #[target_feature(enable = "avx2")]
    unsafe fn decode_avx2(
        map: &CopyMap,
        z: &[f32],
        copy: usize,
        s: usize,
        coords: &mut [i32],
    ) -> f32 {
        let cd = map.copy_dim();
        let mut total = 0.0f32;
        // The same two roundings as `CopyMap::decode`: z * (1 / spacing),
        // then + shift.
        let inv = _mm256_set1_ps(1.0f32 / map.spacings[s]);
        let shift = &map.shifts[copy * cd..(copy + 1) * cd];
        for o in (0..cd).step_by(BLOCK_DIM) {
            // SAFETY: o + 8 <= cd for every slice read or written (caller).
            let y = _mm256_add_ps(
                _mm256_mul_ps(_mm256_loadu_ps(z.as_ptr().add(o)), inv),
                _mm256_loadu_ps(shift.as_ptr().add(o)),
            );
            let magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0), y);
            let wild = _mm256_cmp_ps::<_CMP_NLT_UQ>(magnitude, _mm256_set1_ps(EXACT_LIMIT));
            if _mm256_movemask_ps(wild) != 0 {
                let mut ya = [0f32; 8];
                _mm256_storeu_ps(ya.as_mut_ptr(), y);
                let (p, d) = decode_e8(&ya);
                coords[o..o + BLOCK_DIM].copy_from_slice(&p);
                total += d;
                continue;
            }
            let (p, d) = e8(y);
            _mm256_storeu_si256(coords.as_mut_ptr().add(o) as *mut __m256i, p);
            total += d;
        }
        total
    }

    /// `decode_e8`'s doubled coordinates and squared distance: the nearer of
    /// the D8 point and the coset point (D8 on ties).
    #[inline(always)]
    unsafe fn e8(x: __m256) -> (__m256i, f32) {
        let (a, da) = d8(x);
        let (b, db) = d8(_mm256_sub_ps(x, _mm256_set1_ps(0.5)));
        if db < da {
            (
                _mm256_add_epi32(_mm256_slli_epi32::<1>(b), _mm256_set1_epi32(1)),
                db,
            )
        } else {
            (_mm256_slli_epi32::<1>(a), da)
        }
    }

    /// `decode_d8_plain`: round every coordinate (halves up); on an odd sum
    /// move the first coordinate of largest rounding error one step towards
    /// `x`; the squared distance summed in coordinate order.
    #[inline(always)]
    unsafe fn d8(x: __m256) -> (__m256i, f32) {
        let r = _mm256_floor_ps(_mm256_add_ps(x, _mm256_set1_ps(0.5)));
        let mut f = _mm256_cvttps_epi32(r);
        let mut lanes = [0i32; 8];
        _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, f);
        let sum = lanes.iter().fold(0i32, |a, &v| a.wrapping_add(v));
        if sum & 1 != 0 {
            let err = _mm256_andnot_ps(_mm256_set1_ps(-0.0), _mm256_sub_ps(x, r));
            // The first lane of the largest error (lane 0 when all are 0).
            let m = _mm256_max_ps(err, _mm256_permute2f128_ps::<1>(err, err));
            let m = _mm256_max_ps(m, _mm256_shuffle_ps::<0b01_00_11_10>(m, m));
            let m = _mm256_max_ps(m, _mm256_shuffle_ps::<0b10_11_00_01>(m, m));
            let worst = (_mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(err, m)) as u32)
                .trailing_zeros() as usize;
            let mut xs = [0f32; 8];
            _mm256_storeu_ps(xs.as_mut_ptr(), x);
            let step = if xs[worst] >= lanes[worst] as f32 {
                1
            } else {
                -1
            };
            let lane = _mm256_cmpeq_epi32(
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                _mm256_set1_epi32(worst as i32),
            );
            f = _mm256_add_epi32(f, _mm256_and_si256(lane, _mm256_set1_epi32(step)));
        }
        let t = _mm256_sub_ps(x, _mm256_cvtepi32_ps(f));
        let mut sq = [0f32; 8];
        _mm256_storeu_ps(sq.as_mut_ptr(), _mm256_mul_ps(t, t));
        let d = sq.iter().fold(0f32, |d, &v| d + v);
        (f, d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GaussianRng;
    use proptest::prelude::*;

    /// A map with `blocks` blocks per copy, random shifts, and the spacing
    /// `spacing` (only what decoding reads).
    fn map(copies: usize, blocks: usize, spacing: f32, seed: u64) -> CopyMap {
        let mut rng = GaussianRng::new(seed, 0);
        CopyMap {
            dim: 8,
            copies,
            blocks,
            basis: Vec::new(),
            basis_dim: 0,
            basis_bias: Vec::new(),
            rotation: Vec::new(),
            shifts: (0..copies * blocks * 8)
                .map(|_| rng.uniform() as f32)
                .collect(),
            spacings: vec![spacing, spacing * 1.5],
        }
    }

    fn agree(m: &CopyMap, z: &[f32], copy: usize, s: usize) {
        let cd = m.copy_dim();
        let mut want = vec![0i32; cd];
        let mut got = vec![0i32; cd];
        let want_d = m.decode(z, copy, s, &mut want);
        let got_d = best_decode()(m, z, copy, s, &mut got);
        assert_eq!(got, want, "z {z:?} copy {copy} spacing {s}");
        assert_eq!(
            got_d.to_bits(),
            want_d.to_bits(),
            "distance: z {z:?} copy {copy} spacing {s}"
        );
    }

    proptest! {
        #[test]
        fn the_best_decoder_matches_the_copy_map(
            blocks in 1usize..5,
            seed in any::<u64>(),
            scale in prop_oneof![Just(0.3f32), Just(3.0), Just(1e3), Just(1e8)],
            spacing in prop_oneof![Just(0.5f32), Just(1.0), Just(0.37)],
        ) {
            let m = map(3, blocks, spacing, seed);
            let mut rng = GaussianRng::new(seed ^ 0x5EED, 1);
            let cd = m.copy_dim();
            for copy in 0..3 {
                let z: Vec<f32> = (0..cd).map(|_| rng.normal() as f32 * scale).collect();
                agree(&m, &z, copy, copy % 2);
            }
        }
    }

    /// Ties: coordinates on half-integers and integers of the lattice, where
    /// the rounding and the D8/coset choice hit their tie rules.
    #[test]
    fn ties_decode_as_the_copy_map_does() {
        let mut m = map(1, 2, 1.0, 4);
        m.shifts.iter_mut().for_each(|s| *s = 0.0);
        let mut rng = GaussianRng::new(11, 0);
        for _ in 0..2000 {
            let z: Vec<f32> = (0..16)
                .map(|_| (rng.uniform() * 8.0 - 4.0).round() as f32 * 0.25)
                .collect();
            agree(&m, &z, 0, 0);
        }
        agree(&m, &[f32::MAX; 16], 0, 0);
        agree(&m, &[-3e9; 16], 0, 0);
    }
}
