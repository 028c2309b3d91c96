//! 16-bit storage types for the norm kernels: bf16 and f16 (the `half`
//! crate's types) and their conversion to and from f32, of one kernel block
//! ([`Elem::load`], [`Elem::store`]) and of slices.
//!
//! - Widening (16 -> 32 bits) is exact for both.
//! - The conversions use the processor's instructions where the kernels'
//!   level has them (`vcvtph2ps` / `vcvtps2ph` with AVX-512 F,
//!   `vcvtneps2bf16` with AVX-512 BF16; a kernel asks once per sweep,
//!   [`Elem::hw`]) and branch-free portable code otherwise; the two agree
//!   bit for bit (tests check every f16 value and every f32 class).
//! - f16 narrowing rounds to nearest, ties to even, keeping f16's
//!   subnormals, as the half crate's software conversion does.
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

/// The kernels' storage-type trait under the name this module's users know.
pub use crate::simd::Elem as Half;
use crate::simd::{Conv, Elem, LANES};

/// Whether bf16 narrowing uses AVX-512 BF16's `vcvtneps2bf16`: the
/// kernels' level ([`crate::simd::level`]) is AVX-512 with BF16.
#[inline(always)]
pub fn bf16_instructions() -> bool {
    cfg!(target_arch = "x86_64") && crate::simd::level() == crate::simd::Level::Avx512Bf16
}

/// Whether f16 conversion uses AVX-512 F's `vcvtph2ps` / `vcvtps2ph`: the
/// kernels' level is AVX-512 (with or without BF16).
#[inline(always)]
pub fn f16_instructions() -> bool {
    cfg!(target_arch = "x86_64") && crate::simd::level() >= crate::simd::Level::Avx512
}

impl Elem for f16 {
    const NAME: &'static str = "f16";
    const F32_SUMS: bool = true;
    #[cfg(target_arch = "x86_64")]
    type Sums = std::arch::x86_64::__m512;
    #[inline(always)]
    fn get(self) -> f32 {
        f16_to_f32(self.to_bits())
    }
    #[inline(always)]
    fn put(v: f32) -> f16 {
        f16::from_bits(f32_to_f16(v))
    }
    #[inline(always)]
    fn hw() -> Conv {
        Conv::checked(f16_instructions())
    }
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    fn load(src: &[f16], hw: Conv) -> [f32; LANES] {
        #[cfg(target_arch = "x86_64")]
        if hw.hw() {
            // SAFETY: hw says the kernels' level has AVX-512 F;
            // inside a kernel compiled for it this inlines to one instruction.
            return unsafe { x86::load_f16(src) };
        }
        crate::simd::load_portable(src)
    }
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    fn store(dst: &mut [f16], b: &[f32; LANES], hw: Conv) {
        #[cfg(target_arch = "x86_64")]
        if hw.hw() {
            // SAFETY: hw says the kernels' level has AVX-512 F.
            return unsafe { x86::store_f16(dst, b) };
        }
        store_portable(dst, b)
    }
    fn as_f32(_: &[f16]) -> Option<&[f32]> {
        None
    }
    fn as_f32_mut(_: &mut [f16]) -> Option<&mut [f32]> {
        None
    }
    fn widen(src: &[f16], dst: &mut [f32], ahead: &[f16]) {
        assert_eq!(src.len(), dst.len(), "widen lengths");
        #[cfg(target_arch = "x86_64")]
        if f16_instructions() {
            // SAFETY: AVX-512 F is present (the level says so).
            return unsafe { x86::widen_f16(src, dst, ahead) };
        }
        widen_portable(src, dst, ahead)
    }
    fn narrow(src: &[f32], dst: &mut [f16]) {
        assert_eq!(src.len(), dst.len(), "narrow lengths");
        #[cfg(target_arch = "x86_64")]
        if f16_instructions() {
            // SAFETY: AVX-512 F is present (the level says so).
            return unsafe { x86::narrow_f16(src, dst) };
        }
        narrow_portable(src, dst)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(src: &[f16]) -> std::arch::x86_64::__m512 {
        // SAFETY: the caller runs at an AVX-512 level.
        unsafe { x86::load16_f16(src) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn store16(dst: &mut [f16], v: std::arch::x86_64::__m512, s: Option<bool>, _: Conv) {
        // SAFETY: as above.
        unsafe { x86::store16_f16(dst, v, s.is_some()) }
    }
}

impl Elem for bf16 {
    const NAME: &'static str = "bf16";
    const F32_SUMS: bool = true;
    #[cfg(target_arch = "x86_64")]
    type Sums = std::arch::x86_64::__m512;
    #[inline(always)]
    fn get(self) -> f32 {
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }
    #[inline(always)]
    fn put(v: f32) -> bf16 {
        bf16::from_bits(bf16_bits(v))
    }
    #[inline(always)]
    fn hw() -> Conv {
        Conv::checked(bf16_instructions())
    }
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    fn store(dst: &mut [bf16], b: &[f32; LANES], hw: Conv) {
        #[cfg(target_arch = "x86_64")]
        if hw.hw() {
            // SAFETY: hw says the kernels' level has AVX-512 F and BF16.
            return unsafe { x86::store_bf16(dst, b) };
        }
        store_portable(dst, b)
    }
    fn as_f32(_: &[bf16]) -> Option<&[f32]> {
        None
    }
    fn as_f32_mut(_: &mut [bf16]) -> Option<&mut [f32]> {
        None
    }
    fn widen(src: &[bf16], dst: &mut [f32], ahead: &[bf16]) {
        assert_eq!(src.len(), dst.len(), "widen lengths");
        widen_portable(src, dst, ahead)
    }
    fn narrow(src: &[f32], dst: &mut [bf16]) {
        assert_eq!(src.len(), dst.len(), "narrow lengths");
        #[cfg(target_arch = "x86_64")]
        if bf16_instructions() {
            // SAFETY: the CPU has AVX-512 F and BF16 (checked just above).
            return unsafe { x86::narrow_bf16(src, dst) };
        }
        narrow_portable(src, dst)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(src: &[bf16]) -> std::arch::x86_64::__m512 {
        // SAFETY: the caller runs at an AVX-512 level.
        unsafe { x86::load16_bf16(src) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn store16(dst: &mut [bf16], v: std::arch::x86_64::__m512, s: Option<bool>, hw: Conv) {
        // SAFETY: as above; with `hw` the level has AVX-512 BF16.
        unsafe {
            if hw.hw() {
                x86::store16_bf16_hw(dst, v, s.is_some())
            } else {
                x86::store16_bf16(dst, v, s.is_some())
            }
        }
    }
}

/// One block rounded through [`Elem::put`] (the portable [`Elem::store`]).
#[inline(always)]
fn store_portable<T: Elem>(dst: &mut [T], b: &[f32; LANES]) {
    let dst = &mut dst[..LANES];
    for i in 0..LANES {
        dst[i] = T::put(b[i]);
    }
}

/// f16 bits -> f32, exactly (subnormals through one exact multiply by
/// 2^112, infinities and NaNs by their exponent, NaNs quieted as
/// `vcvtph2ps` quiets them). Branch-free, so loops over it vectorise.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let em = h & 0x7fff;
    let scaled = (f32::from_bits(em << 13) * f32::from_bits(0x7780_0000)).to_bits();
    let special = (em << 13) | 0x7f80_0000 | if em > 0x7c00 { 0x0040_0000 } else { 0 };
    let v = if em >= 0x7c00 { special } else { scaled };
    f32::from_bits(v | ((h & 0x8000) << 16))
}

/// f32 -> f16 bits, round to nearest even, f16 subnormals kept, NaN quieted
/// with its payload's top bits (as `vcvtps2ph`): F. Giesen's branch-free
/// method (the subnormal case by one float addition that rounds).
#[inline(always)]
pub fn f32_to_f16(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = (x >> 16) & 0x8000;
    let a = x & 0x7fff_ffff;
    let nan_inf = if a > 0x7f80_0000 {
        0x7e00 | ((a >> 13) & 0x3ff)
    } else {
        0x7c00
    };
    // |v| < 2^-14: the f16 result is subnormal or zero; adding 0.5 leaves
    // the rounded f16 mantissa in the low bits.
    let sub = (f32::from_bits(a) + 0.5)
        .to_bits()
        .wrapping_sub(0x3f00_0000);
    let norm = a
        .wrapping_add(0xc800_0fff) // exponent -112 << 23, plus the rounding bias
        .wrapping_add((a >> 13) & 1)
        >> 13;
    let o = if a >= 0x4780_0000 {
        nan_inf
    } else if a < 0x3880_0000 {
        sub
    } else {
        norm
    };
    (o | sign) as u16
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

/// The portable slice conversions (`half16/portable.rs`).
mod portable;
pub use portable::narrow_portable;
use portable::widen_portable;

/// The AVX-512 conversions (`half16/x86.rs`).
#[cfg(target_arch = "x86_64")]
mod x86;

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
        narrow_portable(&x, &mut a);
        <bf16 as Half>::narrow(&x, &mut b);
        for ((xi, ai), bi) in x.iter().zip(&a).zip(&b) {
            assert_eq!(ai.to_bits(), bi.to_bits(), "{xi:e} ({:#x})", xi.to_bits());
        }
        eprintln!("AVX-512 BF16 used: {}", bf16_instructions());
    }

    /// The AVX-512 row sweeps' 16-lane loads and stores (`Elem::load16`,
    /// `Elem::store16`; bf16's rounding in integer instructions) against
    /// `get` and `put`, bit for bit, on every class (skipped without AVX-512).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn sixteen_lane_loads_and_stores_match_get_and_put() {
        if !crate::simd::detected_level().has_avx512() {
            eprintln!("no AVX-512: skipped");
            return;
        }
        #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
        unsafe fn check<T: Elem>(x: &[f32], hw: Conv) {
            for blk in x.chunks_exact(LANES) {
                let mut h = [T::default(); LANES];
                // SAFETY: AVX-512 is present; 16 values each.
                unsafe {
                    T::store16(
                        &mut h,
                        crate::simd::x86::vec(blk.try_into().unwrap()),
                        None,
                        hw,
                    )
                };
                for (hi, xi) in h.iter().zip(blk) {
                    let want = T::put(*xi);
                    let (a, b) = (hi.get(), want.get());
                    assert_eq!(a.to_bits(), b.to_bits(), "{} {xi:e}", T::NAME);
                }
                // SAFETY: as above.
                let back = crate::simd::x86::lanes(unsafe { T::load16(&h) });
                for (bi, hi) in back.iter().zip(&h) {
                    assert_eq!(bi.to_bits(), hi.get().to_bits(), "{}", T::NAME);
                }
            }
        }
        let x = specials();
        // SAFETY: AVX-512 is present (checked above).
        unsafe {
            check::<bf16>(&x, Conv::PORTABLE);
            check::<f16>(&x, Conv::PORTABLE);
        }
        // bf16's vcvtneps2bf16 stores, where the processor has them.
        #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,avx512bf16")]
        unsafe fn check_hw(x: &[f32]) {
            // SAFETY: the caller checked the features.
            unsafe { check::<bf16>(x, Conv::checked(true)) }
        }
        if crate::simd::detected_level() == crate::simd::Level::Avx512Bf16 {
            // SAFETY: AVX-512 BF16 is present (checked just above).
            unsafe { check_hw(&x) };
        } else {
            eprintln!("no AVX-512 BF16: the instruction path skipped");
        }
    }

    #[test]
    fn bf16_rounding_is_half_crates_except_subnormals() {
        for x in specials() {
            let ours = <bf16 as Elem>::put(x);
            let theirs = half::bf16::from_f32(x);
            if x.is_nan() {
                assert!(ours.is_nan());
            } else if x != 0.0 && x.abs() < f32::MIN_POSITIVE {
                assert_eq!(Elem::get(ours), 0.0 * x.signum(), "{x:e}");
                assert_eq!(Elem::get(ours).is_sign_negative(), x.is_sign_negative());
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{x:e}");
            }
            // Widening is exact: the rounded value is the nearest bf16.
            let w = Elem::get(ours);
            if x.is_finite() && x.abs() >= f32::MIN_POSITIVE && w.is_finite() {
                let ulp = f32::from_bits(w.abs().to_bits() & 0x7f80_0000) * 2f32.powi(-7);
                assert!((w - x).abs() <= ulp / 2.0, "{x:e} -> {w:e}");
            }
        }
    }

    #[test]
    fn f16_conversions_agree_with_half_and_between_paths() {
        // Widening every f16 value: as the half crate's software
        // conversion (NaNs: NaN, quieted).
        let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        for h in &all {
            let (ours, theirs) = (f16_to_f32(h.to_bits()), h.to_f32_const());
            if theirs.is_nan() {
                assert!(ours.is_nan() && ours.to_bits() & 0x0040_0000 != 0);
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{:#x}", h.to_bits());
            }
        }
        // Narrowing: as the half crate's software rounding on every class.
        let x = specials();
        for xi in &x {
            let (ours, theirs) = (f32_to_f16(*xi), half::f16::from_f32_const(*xi));
            if theirs.is_nan() {
                assert!(f16::from_bits(ours).is_nan());
            } else {
                assert_eq!(ours, theirs.to_bits(), "{xi:e}");
            }
        }
        // Slice paths (AVX-512 where present) against the portable ones, bit for bit.
        let mut a = vec![f16::ZERO; x.len()];
        let mut b = vec![f16::ZERO; x.len()];
        narrow_portable(&x, &mut a);
        <f16 as Elem>::narrow(&x, &mut b);
        assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()));
        let (mut wa, mut wb) = (vec![0f32; all.len()], vec![0f32; all.len()]);
        widen_portable(&all, &mut wa, &[]);
        <f16 as Elem>::widen(&all, &mut wb, &[]);
        assert!(wa.iter().zip(&wb).all(|(p, q)| p.to_bits() == q.to_bits()));
        eprintln!("AVX-512 f16 conversions used: {}", f16_instructions());
    }
}
