//! x86-64 vector helpers for the kernels' explicit AVX-512 / AVX2 paths:
//! blocks of [`LANES`] floats as vectors and back, streaming stores, the
//! [`VecAcc`] lanes the row sums accumulate in, [`avx512_fn!`] and the row
//! sweeps ([`sweep`](mod@sweep): [`map_row`] and its kin).
//!
//! Explicit vectors are used where LLVM compiled a sweep's `[f32; 16]`
//! blocks into 128-bit instructions (the row norms' sweeps, for every
//! storage type); each one runs the same operations per element as the
//! portable code, so every SIMD level gives the same bits.

use super::level::LANES;
use std::arch::x86_64::*;

pub(crate) mod row_acc;
mod sweep;
pub(crate) use sweep::{
    dx_row, fold_backward, fold_row, for_row_out, map_row, map_row_summing, row_sums, RowFold,
};

/// A vector's lanes as the array [`tree_sum`](super::tree_sum) reduces.
#[inline(always)]
pub(crate) fn lanes(v: __m512) -> [f32; LANES] {
    // SAFETY: __m512 and [f32; 16] have the same size and any bits are valid.
    unsafe { std::mem::transmute::<__m512, [f32; LANES]>(v) }
}

/// A block as a vector.
#[inline(always)]
pub(crate) fn vec(b: &[f32; LANES]) -> __m512 {
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[f32; LANES], __m512>(*b) }
}

/// A block as two 8-lane halves (lanes 0..8, 8..16).
#[inline(always)]
pub(crate) fn halves(b: &[f32; LANES]) -> (__m256, __m256) {
    // SAFETY: [f32; 16] is two [f32; 8], __m256 the size of one; any bits are valid.
    unsafe {
        let h = std::mem::transmute::<[f32; LANES], [[f32; 8]; 2]>(*b);
        (
            std::mem::transmute::<[f32; 8], __m256>(h[0]),
            std::mem::transmute::<[f32; 8], __m256>(h[1]),
        )
    }
}

/// Two halves back as the 16 lanes [`tree_sum`](super::tree_sum) reduces.
#[inline(always)]
pub(crate) fn join(lo: __m256, hi: __m256) -> [f32; LANES] {
    // SAFETY: as above.
    unsafe {
        std::mem::transmute::<[[f32; 8]; 2], [f32; LANES]>([
            std::mem::transmute::<__m256, [f32; 8]>(lo),
            std::mem::transmute::<__m256, [f32; 8]>(hi),
        ])
    }
}

/// Store a 16-lane vector at `p` with non-temporal stores: one 512-bit
/// store when `wide` (see [`wide_streams`]), else four 128-bit ones.
///
/// # Safety
/// AVX-512 F must be present; `p` holds 16 floats and is 16-byte aligned,
/// 64-byte aligned when `wide`.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn stream16(p: *mut f32, v: __m512, wide: bool) {
    if wide {
        _mm512_stream_ps(p, v);
    } else {
        _mm_stream_ps(p, _mm512_castps512_ps128(v));
        _mm_stream_ps(p.add(4), _mm512_extractf32x4_ps::<1>(v));
        _mm_stream_ps(p.add(8), _mm512_extractf32x4_ps::<2>(v));
        _mm_stream_ps(p.add(12), _mm512_extractf32x4_ps::<3>(v));
    }
}

/// Whether a row starting at `p` streams its blocks with one 512-bit store
/// each: where `p` is 64-byte aligned and the processor is not AMD's. On
/// the AMD EPYC machine one 512-bit streaming store made the LayerNorm
/// sweeps 10-40% slower than four 128-bit ones; on the Intel Xeon
/// (Sapphire Rapids class) machine it made the RMSNorm forward 12-16%
/// faster (8192x1024, 1 thread, 2026-12-01), the 128-bit stores' three
/// extractions competing with the arithmetic for the shuffle port.
/// Only speed depends on it: the stored bits are the same.
#[inline]
pub(crate) fn wide_streams(p: *const f32) -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    static WIDE: AtomicU8 = AtomicU8::new(0);
    let wide = match WIDE.load(Ordering::Relaxed) {
        0 => {
            let id = __cpuid(0);
            let amd = (id.ebx, id.edx, id.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
            WIDE.store(if amd { 1 } else { 2 }, Ordering::Relaxed);
            !amd
        }
        w => w == 2,
    };
    wide && (p as usize).is_multiple_of(64)
}

/// Define an AVX-512 row kernel generic over the storage type `T` (and
/// optionally one more type, such as a [`VecAcc`]), compiled
/// twice: with AVX-512 BF16 (run where the kernels' level has it, so that a
/// bf16 row's stores inline `vcvtneps2bf16`) and without (bf16 rounding in
/// integer instructions, [`Elem::store16`](super::Elem::store16)). Both copies carry the body
/// itself, so the closures it hands to the row sweeps inherit the features
/// and inline. The two round bf16 the same way, bit for bit.
///
/// Calling the function is unsafe: AVX-512 F must be present.
macro_rules! avx512_fn {
    ($(#[$meta:meta])* $vis:vis unsafe fn $name:ident<T: Elem $(, $g:ident: $gb:path)?>($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        #[allow(clippy::too_many_arguments)]
        #[inline]
        $vis unsafe fn $name<T: Elem $(, $g: $gb)?>($($arg: $ty),*) $(-> $ret)? {
            #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,avx512bf16")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn with_bf16<T: Elem $(, $g: $gb)?>($($arg: $ty),*) $(-> $ret)? $body
            #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn plain<T: Elem $(, $g: $gb)?>($($arg: $ty),*) $(-> $ret)? $body
            if $crate::simd::level() == $crate::simd::Level::Avx512Bf16 {
                with_bf16::<T $(, $g)?>($($arg),*)
            } else {
                plain::<T $(, $g)?>($($arg),*)
            }
        }
    };
}
pub(crate) use avx512_fn;

/// [`super::stream_copy`] in 512-bit registers.
///
/// # Safety
/// AVX-512 F must be present; `dst` must start 16-byte aligned.
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
pub(crate) unsafe fn stream_copy(dst: &mut [f32], src: &[f32]) {
    assert!(
        (dst.as_ptr() as usize).is_multiple_of(16),
        "stream_copy needs 16-byte alignment"
    );
    map_row([src], [], dst, true, |[v], []| v);
}

/// A sweep's 16-lane accumulator in registers (the [`super::Acc`] lanes): f32
/// lanes in one `__m512`, or f64 lanes in two `__m512d` (each f32 term
/// widened exactly, lanes 0..8 in the first); the same per-lane additions
/// as the portable `[A; 16]` accumulators.
pub(crate) trait VecAcc: Copy {
    /// All lanes zero.
    ///
    /// # Safety
    /// AVX-512 F must be present.
    unsafe fn zero() -> Self;
    /// Add the 16 f32 terms of `v`, lane by lane.
    ///
    /// # Safety
    /// As [`VecAcc::zero`].
    #[inline(always)]
    unsafe fn add(&mut self, v: __m512) {
        *self = self.plus(Self::of(v));
    }
    /// Columns per partial of a row's sums in these lanes: f32 lanes join
    /// the f64 total every [`F32_CHUNK`](super::F32_CHUNK) columns, f64
    /// lanes hold the whole row.
    const CHUNK: usize;
    /// The 16 f32 values of `v` in these lanes (f64: widened exactly).
    ///
    /// # Safety
    /// As [`VecAcc::zero`].
    unsafe fn of(v: __m512) -> Self;
    /// `k` in every lane.
    ///
    /// # Safety
    /// As [`VecAcc::zero`].
    unsafe fn splat(k: f32) -> Self;
    /// Lane by lane `self - b`, `self + b`, `self * b`.
    ///
    /// # Safety
    /// As [`VecAcc::zero`].
    unsafe fn sub(self, b: Self) -> Self;
    /// See [`VecAcc::sub`].
    ///
    /// # Safety
    /// As [`VecAcc::zero`].
    unsafe fn plus(self, b: Self) -> Self;
    /// See [`VecAcc::sub`].
    ///
    /// # Safety
    /// As [`VecAcc::zero`].
    unsafe fn mul(self, b: Self) -> Self;
    /// The lanes' [`tree_sum`](super::tree_sum) in f64: the same pairwise
    /// tree (lane i plus lane i + 8, then i + 4, i + 2, i + 1) as vector
    /// additions of the register's halves, so the same bits.
    ///
    /// # Safety
    /// As [`VecAcc::zero`].
    unsafe fn total(self) -> f64;
}

impl VecAcc for __m512 {
    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    const CHUNK: usize = super::columns::F32_CHUNK;
    #[inline(always)]
    unsafe fn of(v: __m512) -> __m512 {
        v
    }
    #[inline(always)]
    unsafe fn splat(k: f32) -> __m512 {
        _mm512_set1_ps(k)
    }
    #[inline(always)]
    unsafe fn sub(self, b: __m512) -> __m512 {
        _mm512_sub_ps(self, b)
    }
    #[inline(always)]
    unsafe fn plus(self, b: __m512) -> __m512 {
        _mm512_add_ps(self, b)
    }
    #[inline(always)]
    unsafe fn mul(self, b: __m512) -> __m512 {
        _mm512_mul_ps(self, b)
    }
    #[inline(always)]
    unsafe fn total(self) -> f64 {
        let v = _mm256_add_ps(
            _mm512_castps512_ps256(self),
            _mm512_extractf32x8_ps::<1>(self),
        );
        let v = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
        let v = _mm_add_ss(v, _mm_movehdup_ps(v));
        _mm_cvtss_f32(v) as f64
    }
}

impl VecAcc for [__m512d; 2] {
    #[inline(always)]
    unsafe fn zero() -> [__m512d; 2] {
        [_mm512_setzero_pd(); 2]
    }
    const CHUNK: usize = usize::MAX;
    #[inline(always)]
    unsafe fn of(v: __m512) -> [__m512d; 2] {
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
        [
            _mm512_cvtps_pd(_mm512_castps512_ps256(v)),
            _mm512_cvtps_pd(hi),
        ]
    }
    #[inline(always)]
    unsafe fn splat(k: f32) -> [__m512d; 2] {
        [_mm512_set1_pd(k as f64); 2]
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        [_mm512_sub_pd(self[0], b[0]), _mm512_sub_pd(self[1], b[1])]
    }
    #[inline(always)]
    unsafe fn plus(self, b: Self) -> Self {
        [_mm512_add_pd(self[0], b[0]), _mm512_add_pd(self[1], b[1])]
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        [_mm512_mul_pd(self[0], b[0]), _mm512_mul_pd(self[1], b[1])]
    }
    #[inline(always)]
    unsafe fn total(self) -> f64 {
        let v = _mm512_add_pd(self[0], self[1]);
        let v = _mm256_add_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd::<1>(v));
        let v = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd::<1>(v));
        let v = _mm_add_sd(v, _mm_unpackhi_pd(v, v));
        _mm_cvtsd_f64(v)
    }
}

/// An f64 accumulator's 16 lanes as the array [`tree_sum`](super::tree_sum) reduces.
#[inline(always)]
#[cfg(test)]
pub(crate) fn wide_lanes(acc: [__m512d; 2]) -> [f64; LANES] {
    // SAFETY: two __m512d are 16 f64 lanes; any bits are valid.
    unsafe { std::mem::transmute::<[__m512d; 2], [f64; LANES]>(acc) }
}
