//! 16-bit storage types for the norm kernels: bf16 and f16 (the `half`
//! crate's types) and the conversion of slices to and from f32.
//!
//! - Widening (16 -> 32 bits) is exact for both.
//! - f16 narrowing rounds to nearest, ties to even, keeping f16's subnormals;
//!   it goes through `half`'s slice conversion, which uses the F16C
//!   instructions when the CPU has them and a software path otherwise (the
//!   two agree bit for bit: a test checks every f16 value and random f32s).
//! - bf16 narrowing rounds to nearest, ties to even, NaN stays a quiet NaN,
//!   and an f32 *subnormal* input (|x| < 2^-126) becomes a signed zero. That
//!   last rule is what AVX-512 BF16's `vcvtneps2bf16` does (it treats
//!   subnormal inputs as zero); the portable path here does the same, so the
//!   hardware and portable paths agree bit for bit (tested on every f32 bit
//!   pattern class and random values). It differs from `half::bf16::from_f32`
//!   and PyTorch's `.to(torch.bfloat16)` only on those subnormal inputs, which
//!   round to bf16 subnormals there; a norm's output or gradient is that small
//!   only when its inputs underflow anyway.

pub use half::{bf16, f16};

/// A 16-bit storage type: what the kernels read and write, while every
/// statistic is computed in f32 (sums in f64) from the widened values.
pub trait Half: Copy + Default + Send + Sync + 'static {
    /// `"bf16"` or `"f16"`.
    const NAME: &'static str;
    /// `dst[i] = src[i]` as f32 (exact), prefetching `ahead` (the part of
    /// the buffer [`AHEAD`] values past `src`'s start) as it goes.
    fn widen(src: &[Self], dst: &mut [f32], ahead: &[Self]);
    /// `dst[i] = src[i]` rounded to this type (see the module comment).
    fn narrow(src: &[f32], dst: &mut [Self]);
    /// One value, widened.
    fn to_f32(self) -> f32;
    /// One value, rounded as [`Half::narrow`] rounds it.
    fn from_f32(v: f32) -> Self;
}

/// How far ahead (in 16-bit values: 3 KiB) widening prefetches, as the f32
/// kernels do ([`crate::simd::PREFETCH_DIST`] f32 values, the same bytes).
pub const AHEAD: usize = 2 * crate::simd::PREFETCH_DIST;

/// Whether the AVX-512 conversions run: the CPU has AVX-512 F (and BF16 for
/// bf16 narrowing) and the kernels' level ([`crate::simd::level`]) is AVX-512.
fn avx512() -> bool {
    crate::simd::level() == crate::simd::Level::Avx512
}

/// Whether bf16 narrowing uses AVX-512 BF16's `vcvtneps2bf16`.
pub fn bf16_instructions() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx512() && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether f16 conversion uses AVX-512 F's `vcvtph2ps` / `vcvtps2ph`
/// (otherwise the `half` crate's, with F16C where the CPU has it).
pub fn f16_instructions() -> bool {
    cfg!(target_arch = "x86_64") && avx512()
}

impl Half for f16 {
    const NAME: &'static str = "f16";
    fn widen(src: &[f16], dst: &mut [f32], ahead: &[f16]) {
        assert_eq!(src.len(), dst.len(), "widen lengths");
        #[cfg(target_arch = "x86_64")]
        if f16_instructions() {
            // SAFETY: AVX-512 F is present (the level says so).
            return unsafe { x86::widen_f16(src, dst, ahead) };
        }
        let _ = ahead;
        use half::slice::HalfFloatSliceExt;
        src.convert_to_f32_slice(dst);
    }
    fn narrow(src: &[f32], dst: &mut [f16]) {
        assert_eq!(src.len(), dst.len(), "narrow lengths");
        #[cfg(target_arch = "x86_64")]
        if f16_instructions() {
            // SAFETY: AVX-512 F is present (the level says so).
            return unsafe { x86::narrow_f16(src, dst) };
        }
        use half::slice::HalfFloatSliceExt;
        dst.convert_from_f32_slice(src);
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(v: f32) -> f16 {
        f16::from_f32(v)
    }
}

impl Half for bf16 {
    const NAME: &'static str = "bf16";
    fn widen(src: &[bf16], dst: &mut [f32], ahead: &[bf16]) {
        assert_eq!(src.len(), dst.len(), "widen lengths");
        widen_bf16(src, dst, ahead)
    }
    fn narrow(src: &[f32], dst: &mut [bf16]) {
        assert_eq!(src.len(), dst.len(), "narrow lengths");
        #[cfg(target_arch = "x86_64")]
        if bf16_instructions() {
            // SAFETY: the CPU has AVX-512 F and BF16 (checked just above).
            return unsafe { x86::narrow_bf16(src, dst) };
        }
        narrow_bf16_portable(src, dst)
    }
    fn to_f32(self) -> f32 {
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }
    fn from_f32(v: f32) -> bf16 {
        bf16::from_bits(bf16_bits(v))
    }
}

/// The bf16 bits of `x`: round to nearest even, NaN quieted, subnormal
/// inputs to a signed zero (as `vcvtneps2bf16` does).
#[inline(always)]
pub fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if b & 0x7fff_ffff > 0x7f80_0000 {
        return ((b >> 16) | 0x40) as u16;
    }
    if b & 0x7f80_0000 == 0 {
        return ((b >> 16) & 0x8000) as u16;
    }
    (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// Prefetch the cache line of `ahead` at value `j` (every 32 values: 64 bytes).
#[inline(always)]
fn prefetch16<T>(ahead: &[T], j: usize) {
    if j < ahead.len() && j.is_multiple_of(32) {
        crate::simd::prefetch(ahead[j..].as_ptr() as *const f32);
    }
}

crate::multiversion! {
    /// bf16 -> f32: the 16 bits become the top half of the f32.
    fn widen_bf16(src: &[bf16], dst: &mut [f32], ahead: &[bf16]) {
        for (k, (d, s)) in dst.chunks_mut(32).zip(src.chunks(32)).enumerate() {
            prefetch16(ahead, 32 * k);
            for (d, s) in d.iter_mut().zip(s) {
                *d = f32::from_bits(u32::from(s.to_bits()) << 16);
            }
        }
    }
}

crate::multiversion! {
    /// f32 -> bf16 with [`bf16_bits`], element by element (LLVM vectorises it).
    pub fn narrow_bf16_portable(src: &[f32], dst: &mut [bf16]) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = bf16::from_bits(bf16_bits(s));
        }
    }
}

/// The AVX-512 conversions, 16 values per instruction; tails through the
/// portable paths (the same rounding).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{bf16, f16, narrow_bf16_portable, prefetch16};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn narrow_bf16(src: &[f32], dst: &mut [bf16]) {
        let n = src.len().min(dst.len());
        let full = n - n % 16;
        for i in (0..full).step_by(16) {
            // SAFETY: i + 16 <= n for both slices; unaligned loads and stores.
            unsafe {
                let h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src.as_ptr().add(i)));
                _mm256_storeu_si256(
                    dst.as_mut_ptr().add(i) as *mut __m256i,
                    std::mem::transmute::<__m256bh, __m256i>(h),
                );
            }
        }
        narrow_bf16_portable(&src[full..n], &mut dst[full..n]);
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn widen_f16(src: &[f16], dst: &mut [f32], ahead: &[f16]) {
        let n = src.len().min(dst.len());
        let full = n - n % 16;
        for i in (0..full).step_by(16) {
            prefetch16(ahead, i);
            // SAFETY: i + 16 <= n for both slices; unaligned loads and stores.
            unsafe {
                let h = _mm256_loadu_si256(src.as_ptr().add(i) as *const __m256i);
                _mm512_storeu_ps(dst.as_mut_ptr().add(i), _mm512_cvtph_ps(h));
            }
        }
        for i in full..n {
            dst[i] = src[i].to_f32();
        }
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn narrow_f16(src: &[f32], dst: &mut [f16]) {
        let n = src.len().min(dst.len());
        let full = n - n % 16;
        for i in (0..full).step_by(16) {
            // SAFETY: i + 16 <= n for both slices; unaligned loads and stores.
            unsafe {
                let v = _mm512_loadu_ps(src.as_ptr().add(i));
                let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
                _mm256_storeu_si256(dst.as_mut_ptr().add(i) as *mut __m256i, h);
            }
        }
        for i in full..n {
            dst[i] = f16::from_f32(src[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// f32 values of every class: zeros, subnormals, the smallest and
    /// largest normals, values that round up into the next binade or to
    /// infinity, ties, infinities, NaNs, and random values of every scale.
    fn specials() -> Vec<f32> {
        let mut v = vec![
            0.0,
            -0.0,
            f32::from_bits(1),
            -f32::from_bits(1),
            f32::from_bits(0x007f_ffff),
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            f32::MAX,
            -f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0xffc1_2345),
            f32::from_bits(0x3f80_8000), // tie, even below
            f32::from_bits(0x3f81_8000), // tie, odd below
            f32::from_bits(0x3f80_8001),
            f32::from_bits(0x3fff_ffff),
            f32::from_bits(0x7f7f_ffff),
            65504.0,
            65520.0,
            6.0e-8,
            1.0e-8,
        ];
        let mut rng = Rng::new(7);
        for _ in 0..20000 {
            v.push(f32::from_bits(rng.next_u64() as u32));
        }
        v
    }

    #[test]
    fn bf16_hardware_and_portable_paths_agree_bit_for_bit() {
        let x = specials();
        let mut a = vec![bf16::ZERO; x.len()];
        let mut b = vec![bf16::ZERO; x.len()];
        narrow_bf16_portable(&x, &mut a);
        <bf16 as Half>::narrow(&x, &mut b);
        for ((xi, ai), bi) in x.iter().zip(&a).zip(&b) {
            assert_eq!(ai.to_bits(), bi.to_bits(), "{xi:e} ({:#x})", xi.to_bits());
        }
        eprintln!("AVX-512 BF16 used: {}", bf16_instructions());
    }

    #[test]
    fn bf16_rounding_is_half_crates_except_subnormals() {
        for x in specials() {
            let ours = <bf16 as Half>::from_f32(x);
            let theirs = half::bf16::from_f32(x);
            if x.is_nan() {
                assert!(ours.is_nan());
            } else if x != 0.0 && x.abs() < f32::MIN_POSITIVE {
                assert_eq!(Half::to_f32(ours), 0.0 * x.signum(), "{x:e}");
                assert_eq!(Half::to_f32(ours).is_sign_negative(), x.is_sign_negative());
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{x:e}");
            }
            // Widening is exact: the rounded value is the nearest bf16.
            let w = Half::to_f32(ours);
            if x.is_finite() && x.abs() >= f32::MIN_POSITIVE && w.is_finite() {
                let ulp = f32::from_bits(w.abs().to_bits() & 0x7f80_0000) * 2f32.powi(-7);
                assert!((w - x).abs() <= ulp / 2.0, "{x:e} -> {w:e}");
            }
        }
    }

    #[test]
    fn f16_round_trip_of_every_value_and_agreement_with_software() {
        let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut w = vec![0f32; all.len()];
        f16::widen(&all, &mut w, &[]);
        let mut back = vec![f16::ZERO; all.len()];
        f16::narrow(&w, &mut back);
        for (a, b) in all.iter().zip(&back) {
            if a.is_nan() {
                assert!(b.is_nan());
            } else {
                assert_eq!(a.to_bits(), b.to_bits());
            }
        }
        let x = specials();
        let mut y = vec![f16::ZERO; x.len()];
        f16::narrow(&x, &mut y);
        for (xi, yi) in x.iter().zip(&y) {
            let s = half::f16::from_f32_const(*xi);
            assert!(
                s.to_bits() == yi.to_bits() || (s.is_nan() && yi.is_nan()),
                "{xi:e}"
            );
        }
    }
}
