//! The AVX-512 conversions, 16 values per instruction: of one block (the
//! kernels' loads and stores; `#[inline]` so that a kernel compiled for the
//! same features inlines them) and of slices (tails through the portable
//! paths, the same rounding).

use super::portable::{narrow_portable, widen_portable};
use crate::simd::x86::{lanes, vec};
use crate::simd::LANES;
use half::{bf16, f16};
use std::arch::x86_64::*;

/// One block of f16 widened for [`Elem::load`](crate::simd::Elem::load):
/// [`load16_f16`] inside a function compiled for AVX-512 F.
#[target_feature(enable = "avx512f")]
#[inline]
pub unsafe fn load_f16(src: &[f16]) -> [f32; LANES] {
    // SAFETY: the feature is enabled here.
    lanes(unsafe { load16_f16(src) })
}

/// One block rounded to f16 for [`Elem::store`](crate::simd::Elem::store)
/// ([`store16_f16`]).
#[target_feature(enable = "avx512f")]
#[inline]
pub unsafe fn store_f16(dst: &mut [f16], b: &[f32; LANES]) {
    // SAFETY: the feature is enabled here.
    unsafe { store16_f16(dst, vec(b), false) }
}

/// One block rounded to bf16 for [`Elem::store`](crate::simd::Elem::store)
/// ([`store16_bf16_hw`]).
#[target_feature(enable = "avx512f,avx512bf16")]
#[inline]
pub unsafe fn store_bf16(dst: &mut [bf16], b: &[f32; LANES]) {
    // SAFETY: the features are enabled here.
    unsafe { store16_bf16_hw(dst, vec(b), false) }
}

/// 16 f16 values widened (`vcvtph2ps`).
#[inline(always)]
pub unsafe fn load16_f16(src: &[f16]) -> __m512 {
    let src = &src[..LANES];
    // SAFETY: src holds 16 values (32 bytes); unaligned load; the
    // caller runs at an AVX-512 level.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(src.as_ptr() as *const __m256i)) }
}

/// 16 floats rounded to f16 (`vcvtps2ph`, nearest even) and stored.
#[inline(always)]
pub unsafe fn store16_f16(dst: &mut [f16], v: __m512, stream: bool) {
    let dst = &mut dst[..LANES];
    // SAFETY: dst holds 16 values; unaligned store; AVX-512 level.
    unsafe {
        let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
        put32(dst.as_mut_ptr() as *mut __m256i, h, stream);
    }
}

/// Store 32 bytes at `p`, non-temporally when `stream`.
///
/// # Safety
/// `p` holds 32 bytes, 32-byte aligned when `stream`; AVX-512 level.
#[inline(always)]
unsafe fn put32(p: *mut __m256i, h: __m256i, stream: bool) {
    // SAFETY: as the caller promised.
    unsafe {
        if stream {
            _mm256_stream_si256(p, h)
        } else {
            _mm256_storeu_si256(p, h)
        }
    }
}

/// 16 bf16 values widened (each the top half of its f32).
#[inline(always)]
pub unsafe fn load16_bf16(src: &[bf16]) -> __m512 {
    let src = &src[..LANES];
    // SAFETY: src holds 16 values (32 bytes); unaligned load; AVX-512 level.
    unsafe {
        let h = _mm256_loadu_si256(src.as_ptr() as *const __m256i);
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }
}

/// 16 floats rounded to bf16 exactly as [`super::bf16_bits`] (the same
/// integer steps, lane by lane, with AVX-512 F and BW alone: no BF16
/// instruction needed) and stored. Each lane's bf16 is the top half of
/// its adjusted f32 bits, gathered with one `vpermw` (a memory-destination
/// `vpmovdw` of the shifted lanes made bf16 forwards 1.5x slower).
#[inline(always)]
pub unsafe fn store16_bf16(dst: &mut [bf16], v: __m512, stream: bool) {
    let dst = &mut dst[..LANES];
    // SAFETY: dst holds 16 values; unaligned store; AVX-512 level.
    unsafe {
        let b = _mm512_castps_si512(v);
        let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(1));
        let r = _mm512_add_epi32(_mm512_add_epi32(b, lsb), _mm512_set1_epi32(0x7fff));
        // NaN (|b| > inf): quieted, not rounded; f32 subnormal or zero: the sign.
        let nan = _mm512_cmpgt_epu32_mask(
            _mm512_slli_epi32::<1>(b),
            _mm512_set1_epi32(0xff00_0000u32 as i32),
        );
        let tiny = _mm512_testn_epi32_mask(b, _mm512_set1_epi32(0x7f80_0000));
        let r = _mm512_mask_or_epi32(r, nan, b, _mm512_set1_epi32(0x0040_0000));
        let r = _mm512_mask_and_epi32(r, tiny, b, _mm512_set1_epi32(0x8000_0000u32 as i32));
        let odd = _mm512_set_epi16(
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 31, 29, 27, 25, 23, 21, 19, 17, 15, 13,
            11, 9, 7, 5, 3, 1,
        );
        let h = _mm512_castsi512_si256(_mm512_permutexvar_epi16(odd, r));
        put32(dst.as_mut_ptr() as *mut __m256i, h, stream);
    }
}

/// 16 floats rounded to bf16 by `vcvtneps2bf16` (the same bits as
/// [`store16_bf16`]) and stored.
#[target_feature(enable = "avx512f,avx512bf16")]
#[inline]
pub unsafe fn store16_bf16_hw(dst: &mut [bf16], v: __m512, stream: bool) {
    let dst = &mut dst[..LANES];
    // SAFETY: dst holds 16 values; unaligned store.
    unsafe {
        let h = std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh(v));
        put32(dst.as_mut_ptr() as *mut __m256i, h, stream);
    }
}

/// A slice rounded to bf16 with `vcvtneps2bf16` ([`store16_bf16_hw`]),
/// the tail through the portable path (the same rounding).
#[target_feature(enable = "avx512f,avx512bf16")]
pub unsafe fn narrow_bf16(src: &[f32], dst: &mut [bf16]) {
    // SAFETY: the blocks lie in `dst`; this function's features cover the store.
    narrow(src, dst, |d, v| unsafe { store16_bf16_hw(d, v, false) });
}

/// A slice of f16 widened ([`load16_f16`]), prefetching `ahead` every 64
/// bytes; the tail through the portable path.
#[target_feature(enable = "avx512f")]
pub unsafe fn widen_f16(src: &[f16], dst: &mut [f32], ahead: &[f16]) {
    let n = src.len().min(dst.len());
    let full = n - n % LANES;
    for i in (0..full).step_by(LANES) {
        if i % 32 == 0 {
            crate::simd::prefetch_block(ahead, i);
        }
        // SAFETY: i + 16 <= n for both slices; unaligned store.
        unsafe { _mm512_storeu_ps(dst.as_mut_ptr().add(i), load16_f16(&src[i..])) };
    }
    widen_portable(&src[full..n], &mut dst[full..n], &[]);
}

/// A slice rounded to f16 ([`store16_f16`]), the tail through the portable
/// path.
#[target_feature(enable = "avx512f")]
pub unsafe fn narrow_f16(src: &[f32], dst: &mut [f16]) {
    // SAFETY: as in [`narrow_bf16`].
    narrow(src, dst, |d, v| unsafe { store16_f16(d, v, false) });
}

/// `dst[i] = src[i]` rounded by `store` 16 values at a time (inlined into
/// the callers above, which carry the target features), the tail through
/// the portable path.
#[inline(always)]
fn narrow<T: crate::simd::Elem>(src: &[f32], dst: &mut [T], store: impl Fn(&mut [T], __m512)) {
    let n = src.len().min(dst.len());
    let full = n - n % LANES;
    for i in (0..full).step_by(LANES) {
        // SAFETY: i + 16 <= n <= src.len(); unaligned load (AVX-512 F: the
        // callers' level).
        store(&mut dst[i..], unsafe {
            _mm512_loadu_ps(src.as_ptr().add(i))
        });
    }
    narrow_portable(&src[full..n], &mut dst[full..n]);
}
