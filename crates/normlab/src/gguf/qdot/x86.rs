//! The lane kernels of [`super`] in x86 intrinsics: AVX2's
//! `vpmaddubsw` + `vpmaddwd`, AVX-512 VNNI's `vpdpbusd`, and the f32 lane
//! accumulation on 256-bit registers.

use std::arch::x86_64::*;

/// `(|w|, sign(x, w))` for signed `w` (their products are `w x`, and
/// `|w|` is a valid unsigned operand), else `(w, x)`.
#[inline(always)]
unsafe fn operands(w: __m256i, x: __m256i, signed: bool) -> (__m256i, __m256i) {
    if signed {
        (_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
    } else {
        (w, x)
    }
}

/// [`super::lane_dots`] with AVX2: pairs in i16 (`vpmaddubsw`; no
/// saturation: 2 x 128 x 127 < 2^15), then pairs of those in i32.
#[target_feature(enable = "avx2")]
pub unsafe fn lane_dots_avx2(w: &[u8], x: &[i8], signed: bool, out: &mut [i32]) {
    let ones = _mm256_set1_epi16(1);
    for c in 0..w.len() / 32 {
        let wv = _mm256_loadu_si256(w.as_ptr().add(32 * c) as *const __m256i);
        let xv = _mm256_loadu_si256(x.as_ptr().add(32 * c) as *const __m256i);
        let (a, b) = operands(wv, xv, signed);
        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones);
        _mm256_storeu_si256(out.as_mut_ptr().add(8 * c) as *mut __m256i, p);
    }
}

/// [`super::scaled_lanes`] on 256-bit registers.
#[target_feature(enable = "avx2")]
pub unsafe fn scaled_lanes_avx2(lanes: &[i32], scales: &[f32]) -> [f32; 8] {
    let mut acc = [_mm256_setzero_ps(); 4];
    let term = |b: usize| {
        let p = _mm256_loadu_si256(lanes.as_ptr().add(8 * b) as *const __m256i);
        _mm256_mul_ps(_mm256_set1_ps(scales[b]), _mm256_cvtepi32_ps(p))
    };
    let full = scales.len() / 4 * 4;
    for b in (0..full).step_by(4) {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_add_ps(*acc, term(b + k));
        }
    }
    for b in full..scales.len() {
        acc[b % 4] = _mm256_add_ps(acc[b % 4], term(b));
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut out = [0f32; 8];
    _mm256_storeu_ps(out.as_mut_ptr(), sum);
    out
}

/// [`super::lane_dots`] with AVX-512 VNNI's `vpdpbusd`.
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
pub unsafe fn lane_dots_vnni(w: &[u8], x: &[i8], signed: bool, out: &mut [i32]) {
    for c in 0..w.len() / 32 {
        let wv = _mm256_loadu_si256(w.as_ptr().add(32 * c) as *const __m256i);
        let xv = _mm256_loadu_si256(x.as_ptr().add(32 * c) as *const __m256i);
        let (a, b) = operands(wv, xv, signed);
        let p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b);
        _mm256_storeu_si256(out.as_mut_ptr().add(8 * c) as *mut __m256i, p);
    }
}
