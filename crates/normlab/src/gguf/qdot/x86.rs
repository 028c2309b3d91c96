//! The lane kernels of [`super`] in x86 intrinsics: AVX2's
//! `vpmaddubsw` + `vpmaddwd`, AVX-512 VNNI's `vpdpbusd`, and the f32 lane
//! accumulation on 256-bit registers.

use super::super::quant::GgmlType;
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

/// Formats with blocks of 32 and one f16 scale that [`block32_row`]
/// computes in one pass (`T` of [`block32_row`]).
pub const Q8_0: u8 = 0;
/// Q4_0 (`T`).
pub const Q4_0: u8 = 1;
/// Q4_1 (`T`).
pub const Q4_1: u8 = 2;
/// Q5_0 (`T`).
pub const Q5_0: u8 = 3;

/// The format of each `T` (indexed by it).
const BLOCK32: [GgmlType; 4] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
];

/// The `T` of a 32-block format, or None.
pub fn block32(ty: GgmlType) -> Option<u8> {
    BLOCK32.iter().position(|&t| t == ty).map(|t| t as u8)
}

/// One row's dot product with `a` in one pass over its blocks, for
/// [`super::row_dot`] on the formats of [`block32`]: each block's values
/// (unpacked in registers), its lane sums (both limbs combined as
/// `254 hi + lo`), the offset (Q4_0, Q5_0), then its scale (the weight's
/// f16 times the activations') times the lanes into accumulator
/// `block % 4`, and Q4_1's minimum terms into four accumulators of their
/// own: the operations of the unpack-then-combine path in its order, so
/// the same bits. Returns the 8 lanes and the minima's sum.
pub fn block32_row<const T: u8>(
    kernel: super::kernel::LaneKernel,
    w: &[u8],
    a: &super::acts::QuantActs,
) -> ([f32; 8], f32) {
    let bs = BLOCK32[T as usize].block().1;
    let blocks = w.len() / bs;
    assert!(w.len() == bs * blocks && a.d.len() == blocks && a.q.len() == 32 * blocks);
    assert!(a.lo.is_empty() || a.lo.len() == a.q.len());
    assert!(std::arch::is_x86_feature_detected!("avx2"));
    // SAFETY: the lengths and AVX2 are checked above, VNNI below.
    unsafe {
        match kernel {
            super::kernel::LaneKernel::Vnni => {
                assert!(
                    std::arch::is_x86_feature_detected!("avx512vnni")
                        && std::arch::is_x86_feature_detected!("avx512vl")
                );
                block32_row_vnni::<T>(w, a)
            }
            _ => block32_row_avx2::<T>(w, a),
        }
    }
}

/// 16 bytes of nibbles as 32 values: the low nibbles, then the high ones.
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> __m256i {
    let q = _mm_loadu_si128(p as *const __m128i);
    let m = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(q, m);
    let hi = _mm_and_si128(_mm_srli_epi16(q, 4), m);
    _mm256_set_m128i(hi, lo)
}

/// Bit `i` of `bits` as 0x10 or 0 in byte `i`.
#[inline(always)]
unsafe fn high_bits(bits: u32) -> __m256i {
    let v = _mm256_set1_epi32(bits as i32);
    // Bytes 0-7 take byte 0 of `bits`, 8-15 byte 1, 16-23 byte 2, 24-31
    // byte 3 (each 128-bit half holds all four).
    let pick = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, pick), bit), bit);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// The body of [`block32_row`] with one lane-sum instruction sequence
/// (`|unsigned, signed| i32 lanes`, inlined: no closure, which would not
/// inherit the function's target features).
macro_rules! block32_row_body {
    ($t:ident, $w:ident, $a:ident, |$u:ident, $s:ident| $lanes:expr) => {{
        let ty = BLOCK32[$t as usize];
        let (bs, off) = (ty.block().1, super::acts::offset(ty));
        let two = !$a.lo.is_empty();
        let limb = _mm256_set1_epi32(super::acts::LIMB);
        let offv = _mm256_set1_epi32(off);
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut mins = [0f32; 4];
        let f16 =
            |p: *const u8| crate::gguf::quant::f16_bits_to_f32(u16::from_le_bytes([*p, *p.add(1)]));
        for b in 0..$a.d.len() {
            let blk = $w.as_ptr().add(bs * b);
            let wv = match $t {
                Q8_0 => _mm256_loadu_si256(blk.add(2) as *const __m256i),
                Q4_0 => nibbles(blk.add(2)),
                Q4_1 => nibbles(blk.add(4)),
                _ => {
                    let qh =
                        u32::from_le_bytes([*blk.add(2), *blk.add(3), *blk.add(4), *blk.add(5)]);
                    _mm256_or_si256(nibbles(blk.add(6)), high_bits(qh))
                }
            };
            let hi = _mm256_loadu_si256($a.q.as_ptr().add(32 * b) as *const __m256i);
            let (u, sh) = operands(wv, hi, $t == Q8_0);
            let mut l = {
                let ($u, $s) = (u, sh);
                $lanes
            };
            if two {
                let lo = _mm256_loadu_si256($a.lo.as_ptr().add(32 * b) as *const __m256i);
                let (_, sl) = operands(wv, lo, $t == Q8_0);
                let l2 = {
                    let ($u, $s) = (u, sl);
                    $lanes
                };
                l = _mm256_add_epi32(_mm256_mullo_epi32(l, limb), l2);
            }
            if off != 0 {
                let xs = _mm256_loadu_si256($a.xs4.as_ptr().add(8 * b) as *const __m256i);
                l = _mm256_sub_epi32(l, _mm256_mullo_epi32(offv, xs));
            }
            let scale = _mm256_set1_ps(f16(blk) * $a.d[b]);
            let t = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(l));
            acc[b % 4] = _mm256_add_ps(acc[b % 4], t);
            if $t == Q4_1 {
                mins[b % 4] += f16(blk.add(2)) * $a.ds[b];
            }
        }
        let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut out = [0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), sum);
        (out, (mins[0] + mins[1]) + (mins[2] + mins[3]))
    }};
}

#[target_feature(enable = "avx2")]
unsafe fn block32_row_avx2<const T: u8>(w: &[u8], a: &super::acts::QuantActs) -> ([f32; 8], f32) {
    let ones = _mm256_set1_epi16(1);
    block32_row_body!(T, w, a, |u, s| _mm256_madd_epi16(
        _mm256_maddubs_epi16(u, s),
        ones
    ))
}

#[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
unsafe fn block32_row_vnni<const T: u8>(w: &[u8], a: &super::acts::QuantActs) -> ([f32; 8], f32) {
    block32_row_body!(T, w, a, |u, s| _mm256_dpbusd_epi32(
        _mm256_setzero_si256(),
        u,
        s
    ))
}
