//! The sketch kernel: the integer dot product of a query's `i16` sketch code
//! with an `i8` sketch row ([`octex_core::sketch`] turns it into the
//! distance estimate, the same arithmetic as the GPU's `dp2a`s), and the
//! exact-distance kernels.
//!
//! Two paths each that are tested equal: AVX2 (x86-64, chosen at run time)
//! and a portable one. Sketch widths are multiples of 16.

/// A sketch kernel: `(query code, sketch row) -> integer dot product`.
pub type SketchFn = fn(&[i16], &[i8]) -> i32;

/// The portable kernel.
pub fn sketch_dot_portable(q: &[i16], row: &[i8]) -> i32 {
    let mut acc = [0i32; 8];
    for (qc, rc) in q.chunks_exact(8).zip(row.chunks_exact(8)) {
        for i in 0..8 {
            acc[i] += qc[i] as i32 * rc[i] as i32;
        }
    }
    acc.iter().sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Per 16 bytes: the row widened to `i16`, one `vpmaddwd` with the
    /// query's codes (pairs of products summed into `i32`), one add.
    ///
    /// # Safety
    /// The CPU must support AVX2; `q` and `row` must have the same length, a
    /// multiple of 16.
    #[target_feature(enable = "avx2")]
    pub unsafe fn sketch_dot_avx2(q: &[i16], row: &[i8]) -> i32 {
        let w = row.len();
        let mut acc0 = _mm256_setzero_si256();
        let mut acc1 = _mm256_setzero_si256();
        let mut j = 0;
        while j + 32 <= w {
            // SAFETY: j + 32 <= w and both slices hold w elements (caller).
            let r0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(row.as_ptr().add(j) as *const __m128i));
            let r1 =
                _mm256_cvtepi8_epi16(_mm_loadu_si128(row.as_ptr().add(j + 16) as *const __m128i));
            let q0 = _mm256_loadu_si256(q.as_ptr().add(j) as *const __m256i);
            let q1 = _mm256_loadu_si256(q.as_ptr().add(j + 16) as *const __m256i);
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(q0, r0));
            acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(q1, r1));
            j += 32;
        }
        if j < w {
            // SAFETY: j + 16 == w (w is a multiple of 16).
            let r0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(row.as_ptr().add(j) as *const __m128i));
            let q0 = _mm256_loadu_si256(q.as_ptr().add(j) as *const __m256i);
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(q0, r0));
        }
        let acc = _mm256_add_epi32(acc0, acc1);
        let h = _mm_add_epi32(
            _mm256_castsi256_si128(acc),
            _mm256_extracti128_si256(acc, 1),
        );
        let h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
        let h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
        _mm_cvtsi128_si32(h)
    }

    pub fn sketch_dot_avx2_checked(q: &[i16], row: &[i8]) -> i32 {
        assert!(q.len() == row.len() && row.len() % 16 == 0);
        // SAFETY: this function is only handed out by `best_kernel` after runtime
        // detection of AVX2; the lengths are checked just above.
        unsafe { sketch_dot_avx2(q, row) }
    }

    #[inline(always)]
    pub fn prefetch(ptr: *const i8) {
        // SAFETY: prefetch is a hint; it never faults, whatever the address.
        unsafe { _mm_prefetch(ptr, _MM_HINT_T0) }
    }
}

/// Hint the CPU to load every cache line `span` touches (no-op where
/// unsupported): a sketch row, or a rerank vector. Rows start at `id * w`, not on line boundaries, so a
/// 48-byte row can straddle two lines and a 208-byte one five; the first
/// version fetched the lines at bytes 0 and 64 only, and lost up to a third
/// of the QPS on sketches larger than the L3 cache.
#[inline(always)]
pub fn prefetch<T>(span: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = span.as_ptr() as *const i8;
        let bytes = std::mem::size_of_val(span) as isize;
        let mut offset = -(((p as usize) & 63) as isize);
        while offset < bytes {
            // The address may lie before the span (its first line's start):
            // wrapping arithmetic, and a prefetch never faults.
            x86::prefetch(p.wrapping_offset(offset));
            offset += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = span;
}

/// Hint the CPU to load the cache line holding `v`.
#[inline(always)]
pub fn prefetch_at<T>(v: &T) {
    #[cfg(target_arch = "x86_64")]
    x86::prefetch(v as *const T as *const i8);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

/// The fastest kernel this CPU runs, and its name.
pub fn best_kernel() -> (SketchFn, &'static str) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            return (x86::sketch_dot_avx2_checked, "avx2");
        }
    }
    (sketch_dot_portable, "portable")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn simd_and_portable_agree(
            blocks in 1usize..33,
            seed in any::<u64>(),
        ) {
            let w = blocks * 16;
            let mut s = seed;
            let mut next = || { s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); (s >> 33) as u32 };
            let limit = octex_core::sketch::query_code_limit(w as u32) as i32;
            let q: Vec<i16> = (0..w).map(|_| ((next() % (2 * limit as u32 + 1)) as i32 - limit) as i16).collect();
            let row: Vec<i8> = (0..w).map(|_| next() as i8).collect();
            let a = sketch_dot_portable(&q, &row);
            let (k, _) = best_kernel();
            prop_assert_eq!(a, k(&q, &row));
            // and both equal the definition in i64
            let exact: i64 = (0..w).map(|j| q[j] as i64 * row[j] as i64).sum();
            prop_assert_eq!(a as i64, exact);
        }
    }
}

/// Exact squared L2 between a float query and a stored vector (f32 or f16).
pub type ExactF32Fn = fn(&[f32], &[f32]) -> f32;
pub type ExactF16Fn = fn(&[f32], &[half::f16]) -> f32;

/// Portable squared L2 (eight accumulators, so the compiler vectorises it).
pub fn l2_f32_portable(q: &[f32], v: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let n8 = q.len() / 8 * 8;
    for (qc, vc) in q[..n8].chunks_exact(8).zip(v[..n8].chunks_exact(8)) {
        for i in 0..8 {
            let d = qc[i] - vc[i];
            acc[i] += d * d;
        }
    }
    let tail: f32 = q[n8..]
        .iter()
        .zip(&v[n8..])
        .map(|(a, b)| (a - b) * (a - b))
        .sum();
    acc.iter().sum::<f32>() + tail
}

/// Portable squared L2 against an f16 vector.
pub fn l2_f16_portable(q: &[f32], v: &[half::f16]) -> f32 {
    let mut acc = [0f32; 8];
    let n8 = q.len() / 8 * 8;
    for (qc, vc) in q[..n8].chunks_exact(8).zip(v[..n8].chunks_exact(8)) {
        for i in 0..8 {
            let d = qc[i] - vc[i].to_f32();
            acc[i] += d * d;
        }
    }
    let tail: f32 = q[n8..]
        .iter()
        .zip(&v[n8..])
        .map(|(a, b)| (a - b.to_f32()) * (a - b.to_f32()))
        .sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(target_arch = "x86_64")]
mod x86_exact {
    use std::arch::x86_64::*;

    /// Horizontal sum of eight lanes.
    ///
    /// # Safety
    /// AVX must be present (called only from the `avx2,fma` kernels below).
    #[inline(always)]
    // SAFETY: register-only intrinsics; the callers' target features cover them.
    unsafe fn hsum(acc: __m256) -> f32 {
        let h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
        _mm_cvtss_f32(h)
    }

    /// # Safety
    /// AVX2 and FMA must be present; `v.len() >= q.len()`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn l2_f32(q: &[f32], v: &[f32]) -> f32 {
        let n8 = q.len() / 8 * 8;
        let mut acc = _mm256_setzero_ps();
        let mut j = 0;
        while j < n8 {
            // SAFETY: j + 8 <= n8 <= q.len() <= v.len().
            let d = _mm256_sub_ps(
                _mm256_loadu_ps(q.as_ptr().add(j)),
                _mm256_loadu_ps(v.as_ptr().add(j)),
            );
            acc = _mm256_fmadd_ps(d, d, acc);
            j += 8;
        }
        let mut s = hsum(acc);
        for i in n8..q.len() {
            let d = q[i] - v[i];
            s += d * d;
        }
        s
    }

    /// # Safety
    /// AVX2, FMA and F16C must be present; `v.len() >= q.len()`.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn l2_f16(q: &[f32], v: &[half::f16]) -> f32 {
        let n8 = q.len() / 8 * 8;
        let mut acc = _mm256_setzero_ps();
        let mut j = 0;
        while j < n8 {
            // SAFETY: j + 8 <= n8 <= q.len() <= v.len(); f16 is 2 bytes, so 8 of
            // them are one unaligned 128-bit load.
            let h = _mm_loadu_si128(v.as_ptr().add(j) as *const __m128i);
            let d = _mm256_sub_ps(_mm256_loadu_ps(q.as_ptr().add(j)), _mm256_cvtph_ps(h));
            acc = _mm256_fmadd_ps(d, d, acc);
            j += 8;
        }
        let mut s = hsum(acc);
        for i in n8..q.len() {
            let d = q[i] - v[i].to_f32();
            s += d * d;
        }
        s
    }

    pub fn l2_f32_checked(q: &[f32], v: &[f32]) -> f32 {
        assert!(v.len() >= q.len());
        // SAFETY: handed out only after runtime detection (see `exact_kernels`).
        unsafe { l2_f32(q, v) }
    }
    pub fn l2_f16_checked(q: &[f32], v: &[half::f16]) -> f32 {
        assert!(v.len() >= q.len());
        // SAFETY: handed out only after runtime detection (see `exact_kernels`).
        unsafe { l2_f16(q, v) }
    }
}

/// The fastest exact-distance kernels this CPU runs.
pub fn exact_kernels() -> (ExactF32Fn, ExactF16Fn) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
        {
            return (x86_exact::l2_f32_checked, x86_exact::l2_f16_checked);
        }
    }
    (l2_f32_portable, l2_f16_portable)
}

#[cfg(test)]
mod exact_tests {
    use super::*;

    #[test]
    fn exact_kernels_agree_with_portable() {
        let (f32k, f16k) = exact_kernels();
        for dim in [1usize, 7, 8, 50, 51, 784] {
            let q: Vec<f32> = (0..dim).map(|i| (i as f32 * 0.37).sin()).collect();
            let v: Vec<f32> = (0..dim).map(|i| (i as f32 * 0.11).cos()).collect();
            let h: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f32(x)).collect();
            let a = l2_f32_portable(&q, &v);
            assert!((a - f32k(&q, &v)).abs() <= 1e-4 * a.max(1.0));
            let b = l2_f16_portable(&q, &h);
            assert!((b - f16k(&q, &h)).abs() <= 1e-4 * b.max(1.0));
            assert!((a - b).abs() <= 1e-2 * a.max(1.0));
        }
    }
}
