//! Dot products computed on quantised GGUF rows, for generation's one-row
//! steps. llama.cpp does the same: the activation row is quantised to 8 bits
//! per block ([`QuantActs`]), and each weight block's integer dot product
//! with it is then scaled by the two blocks' scales. Every format takes
//! activation blocks of 32 (like ggml's `Q8_0`), each with its own scale
//! `max |x| / 127` and values `round(x / scale)`. llama.cpp gives Q4_K and
//! Q6_K super-blocks of 256 (`Q8_K`) instead. Here one outlier (Gemma 3's
//! massive activations) coarsens only 32 values: with 256, Gemma 3's
//! logits moved by 3.6% of their range, beyond issue 39's 2%.
//!
//! [`ActBits::Sixteen`] refines that rounding 254-fold: each activation
//! is `254 hi + lo` with two 8-bit limbs, each limb goes through the same
//! 8-bit integer dot products, and the two lane sums are combined exactly
//! in i32 (issue 39: logits within about 1.6e-4 of the f32 path's range
//! instead of 3%).
//!
//! One algorithm, the same bits at every SIMD level and thread count:
//! - a row is unpacked to 8-bit values ([`unpack`]: the 4-, 5- and 6-bit
//!   formats without their offsets, so that they are unsigned);
//! - [`lane_dots`] sums each 4 consecutive products in i32 (AVX-512 VNNI's
//!   `vpdpbusd` lanes; AVX2's `vpmaddubsw` + `vpmaddwd` and the portable
//!   loop give the same exact integers);
//! - [`row_dot`] applies the offsets and the sub-block scales in integers,
//!   then accumulates 8 f32 lanes (each lane one multiply and one add per
//!   block, never fused) and sums them in one fixed tree.
//!
//! For the formats with blocks of 32 (Q8_0, Q4_0, Q4_1, Q5_0), the x86
//! kernels do all of that in one pass over a row's blocks in registers
//! (`x86::block32_row`), in the same order, so with the same bits.
//!
//! Rows are independent, so splitting them over threads cannot change a
//! bit either.
//!
//! The f32-activation path ([`super::dequantize_into`] then an f32 dot
//! product) gives today's numbers exactly. This one differs by the
//! activations' rounding; `bench/gguf_generate.py` measures that on real
//! models.

use super::quant::{h, scale_min_k4_bits, GgmlType};

mod acts;
mod kernel;
pub use acts::{has_dot, ActBits, QuantActs, ACTS_BLOCK};
use acts::{offset, LIMB};
pub use kernel::LaneKernel;

crate::kernels::multiversion! {
    /// One row of `ty` blocks as 8-bit values in their natural order:
    /// unsigned and below 64 for the 4-, 5- and 6-bit formats (their
    /// offsets left to [`row_dot`]), the signed bytes of Q8_0.
    pub fn unpack(ty: GgmlType, w: &[u8], out: &mut [u8]) {
        let (per, bs) = ty.block();
        let blocks = w.chunks_exact(bs).zip(out.chunks_exact_mut(per));
        match ty {
            GgmlType::Q8_0 => {
                for (b, o) in blocks {
                    o.copy_from_slice(&b[2..34]);
                }
            }
            GgmlType::Q4_0 | GgmlType::Q4_1 => {
                let start = if ty == GgmlType::Q4_0 { 2 } else { 4 };
                for (b, o) in blocks {
                    let qs = &b[start..start + 16];
                    for j in 0..16 {
                        o[j] = qs[j] & 0x0f;
                        o[j + 16] = qs[j] >> 4;
                    }
                }
            }
            GgmlType::Q5_0 => {
                for (b, o) in blocks {
                    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                    let qs = &b[6..22];
                    for j in 0..16 {
                        o[j] = (qs[j] & 0x0f) | ((((qh >> j) & 1) << 4) as u8);
                        o[j + 16] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) << 4) as u8);
                    }
                }
            }
            GgmlType::Q4K => {
                for (b, o) in blocks {
                    for (q, o) in b[16..144].chunks_exact(32).zip(o.chunks_exact_mut(64)) {
                        for l in 0..32 {
                            o[l] = q[l] & 0x0f;
                            o[l + 32] = q[l] >> 4;
                        }
                    }
                }
            }
            GgmlType::Q6K => {
                for (b, o) in blocks {
                    for half in 0..2 {
                        let ql = &b[64 * half..64 * half + 64];
                        let qh = &b[128 + 32 * half..160 + 32 * half];
                        let o = &mut o[128 * half..128 * half + 128];
                        for l in 0..32 {
                            o[l] = (ql[l] & 0x0f) | ((qh[l] & 3) << 4);
                            o[l + 32] = (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4);
                            o[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                            o[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                        }
                    }
                }
            }
            GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16 => {
                unreachable!("unpack: {} has no 8-bit form", ty.name())
            }
        }
    }
}

/// `out[m] = sum over k < 4 of w[4m + k] x[4m + k]`, exact in i32. `w` is
/// unsigned below 128 (`signed == false`), or signed bytes (`signed ==
/// true`: Q8_0). Lengths: `w` and `x` equal and whole 32s, `out` a quarter.
pub fn lane_dots(kernel: LaneKernel, w: &[u8], x: &[i8], signed: bool, out: &mut [i32]) {
    assert!(w.len() == x.len() && w.len().is_multiple_of(32) && out.len() * 4 == w.len());
    match kernel {
        #[cfg(target_arch = "x86_64")]
        LaneKernel::Avx2 | LaneKernel::Vnni => {
            assert!(
                std::arch::is_x86_feature_detected!("avx2")
                    && (kernel == LaneKernel::Avx2
                        || (std::arch::is_x86_feature_detected!("avx512vnni")
                            && std::arch::is_x86_feature_detected!("avx512vl"))),
                "lane_dots: the CPU lacks {kernel:?}"
            );
            // SAFETY: the features were just checked, the lengths above.
            unsafe {
                if kernel == LaneKernel::Vnni {
                    x86::lane_dots_vnni(w, x, signed, out)
                } else {
                    x86::lane_dots_avx2(w, x, signed, out)
                }
            }
        }
        _ => {
            for ((o, w), x) in out.iter_mut().zip(w.chunks_exact(4)).zip(x.chunks_exact(4)) {
                *o = (0..4)
                    .map(|k| {
                        let w = if signed {
                            i32::from(w[k] as i8)
                        } else {
                            i32::from(w[k])
                        };
                        w * i32::from(x[k])
                    })
                    .sum();
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86;

/// Scratch for [`row_dot`]: one row's unpacked values, lane sums, block
/// scales and minima's terms.
#[derive(Clone, Debug, Default)]
pub struct RowScratch {
    vals: Vec<u8>,
    lanes: Vec<i32>,
    lo: Vec<i32>,
    scales: Vec<f32>,
    mins: Vec<f32>,
    halfs: Vec<half::f16>,
    wide: Vec<f32>,
}

/// The lanes' sum in a fixed tree (halves, then quarters, then the pair).
#[inline(always)]
fn tree(a: &[f32; 8]) -> f32 {
    let t = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (t[0] + t[2]) + (t[1] + t[3])
}

/// The dot product of one row of `ty` blocks (`w`, whole blocks) with the
/// quantised activations `a` (as many values, quantised for `ty`), with
/// the lane kernel `kernel` (every kernel gives the same bits).
pub fn row_dot(
    kernel: LaneKernel,
    ty: GgmlType,
    w: &[u8],
    a: &QuantActs,
    s: &mut RowScratch,
) -> f32 {
    let n = a.len();
    let (per, bs) = ty.block();
    assert_eq!(
        w.len() / bs * per,
        n,
        "row_dot: row and activations differ in length"
    );
    #[cfg(target_arch = "x86_64")]
    if let (Some(t), false) = (x86::block32(ty), kernel == LaneKernel::Portable) {
        // One pass over the blocks, the arithmetic below in its order.
        let (lanes, mins) = match t {
            x86::Q8_0 => x86::block32_row::<{ x86::Q8_0 }>(kernel, w, a),
            x86::Q4_0 => x86::block32_row::<{ x86::Q4_0 }>(kernel, w, a),
            x86::Q4_1 => x86::block32_row::<{ x86::Q4_1 }>(kernel, w, a),
            _ => x86::block32_row::<{ x86::Q5_0 }>(kernel, w, a),
        };
        let dot = tree(&lanes);
        return if ty == GgmlType::Q4_1 {
            dot + mins
        } else {
            dot
        };
    }
    s.vals.resize(n, 0);
    s.lanes.resize(n / 4, 0);
    s.scales.resize(n / 32, 0.0);
    unpack(ty, w, &mut s.vals);
    let signed = ty == GgmlType::Q8_0;
    lane_dots(kernel, &s.vals, &a.q, signed, &mut s.lanes);
    if !a.lo.is_empty() {
        s.lo.resize(n / 4, 0);
        lane_dots(kernel, &s.vals, &a.lo, signed, &mut s.lo);
        for (l, lo) in s.lanes.iter_mut().zip(&s.lo) {
            *l = LIMB * *l + lo;
        }
    }
    s.mins.resize(n / 32, 0.0);
    s.halfs.resize(2 * n / per, half::f16::ZERO);
    s.wide.resize(2 * n / per, 0.0);
    combine(
        kernel,
        ty,
        w,
        a,
        &mut s.lanes,
        &mut s.scales,
        &mut s.mins,
        &mut s.halfs,
        &mut s.wide,
    )
}

crate::kernels::multiversion! {
    /// [`row_dot`] after the lane sums. In integers: the offsets, and
    /// Q6_K's sub-block scales (two per 32 values) folded into the lanes.
    /// Then in f32: each block of 32's scale (weight's times activations')
    /// times its 8 lanes, added to 8 lanes of accumulators (a product, then
    /// a sum: never fused, so every compilation rounds alike), and the
    /// minima's terms summed apart.
    fn combine(
        kernel: LaneKernel,
        ty: GgmlType,
        w: &[u8],
        a: &QuantActs,
        lanes: &mut [i32],
        scales: &mut [f32],
        mins: &mut [f32],
        halfs: &mut [half::f16],
        wide: &mut [f32],
    ) -> f32 {
        let (_, bs) = ty.block();
        let off = offset(ty);
        if off != 0 {
            for (l, x) in lanes.iter_mut().zip(&a.xs4) {
                *l -= off * x;
            }
        }
        let blocks = w.chunks_exact(bs);
        // The minima's terms, one per block (summed below).
        let mins = &mut mins[..scales.len()];
        // 8 lanes per scale block, in `lanes[..8 * blocks]`.
        match ty {
            GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q4_1 => {
                // The blocks' f16 scale (and minimum) gathered, then
                // converted together (F16C where the CPU has it; exact
                // either way).
                let one = ty == GgmlType::Q4_1;
                let per = if one { 2 } else { 1 };
                let halfs = &mut halfs[..per * scales.len()];
                for (hs, blk) in halfs.chunks_exact_mut(per).zip(blocks) {
                    hs[0] = half::f16::from_bits(u16::from_le_bytes([blk[0], blk[1]]));
                    if one {
                        hs[1] = half::f16::from_bits(u16::from_le_bytes([blk[2], blk[3]]));
                    }
                }
                let wide = &mut wide[..halfs.len()];
                half::slice::HalfFloatSliceExt::convert_to_f32_slice(&*halfs, wide);
                for ((s, w), d) in scales.iter_mut().zip(wide.chunks_exact(per)).zip(&a.d) {
                    *s = w[0] * d;
                }
                if one {
                    for ((m, w), ds) in mins.iter_mut().zip(wide.chunks_exact(2)).zip(&a.ds) {
                        *m = w[1] * ds;
                    }
                }
            }
            GgmlType::Q4K => {
                // Sub-block j of super-block b is activation block 8b + j:
                // scale d sc_j dx, minimum dmin m_j dx sum.
                for (b, blk) in blocks.enumerate() {
                    let (d, dmin) = (h(blk), h(&blk[2..4]));
                    for j in 0..8 {
                        let c = 8 * b + j;
                        let (sc, m) = scale_min_k4_bits(j, &blk[4..16]);
                        scales[c] = d * f32::from(sc) * a.d[c];
                        mins[c] = -(dmin * f32::from(m) * a.ds[c]);
                    }
                }
            }
            GgmlType::Q6K => {
                // A block of 32 is two sub-blocks of 16 (lanes 0-3, 4-7):
                // their integer scales go into the lanes.
                for (b, blk) in blocks.enumerate() {
                    let d = h(&blk[208..210]);
                    let sc = &blk[192..208];
                    for c in 0..8 {
                        let l = &mut lanes[64 * b + 8 * c..64 * b + 8 * c + 8];
                        for (i, l) in l.iter_mut().enumerate() {
                            *l *= i32::from(sc[2 * c + i / 4] as i8);
                        }
                        scales[8 * b + c] = d * a.d[8 * b + c];
                    }
                }
            }
            GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16 => {
                unreachable!("row_dot: {} has no 8-bit form", ty.name())
            }
        }
        let acc = scaled_lanes(kernel, &lanes[..8 * scales.len()], scales);
        let dot = tree(&acc);
        if !matches!(ty, GgmlType::Q4_1 | GgmlType::Q4K) {
            return dot;
        }
        // Block b's term into accumulator b % 4.
        let mut m = [0f32; 4];
        let mut chunks = mins.chunks_exact(4);
        for c in &mut chunks {
            for i in 0..4 {
                m[i] += c[i];
            }
        }
        for (m, t) in m.iter_mut().zip(chunks.remainder()) {
            *m += t;
        }
        dot + ((m[0] + m[1]) + (m[2] + m[3]))
    }
}

/// `acc[i] = sum over blocks b of scales[b] * lanes[8 b + i]`: i32 to
/// f32, a product, then a sum into accumulator `b % 4`; the four are then
/// summed as `(a0 + a1) + (a2 + a3)`. Every lane rounds as the scalar loop
/// does.
fn scaled_lanes(kernel: LaneKernel, lanes: &[i32], scales: &[f32]) -> [f32; 8] {
    assert_eq!(lanes.len(), 8 * scales.len());
    #[cfg(target_arch = "x86_64")]
    if kernel != LaneKernel::Portable {
        assert!(std::arch::is_x86_feature_detected!("avx2"));
        // SAFETY: AVX2 just checked; lengths above.
        return unsafe { x86::scaled_lanes_avx2(lanes, scales) };
    }
    let _ = kernel;
    let mut acc = [[0f32; 8]; 4];
    for (b, (p, &s)) in lanes.chunks_exact(8).zip(scales).enumerate() {
        for i in 0..8 {
            acc[b % 4][i] += s * p[i] as f32;
        }
    }
    std::array::from_fn(|i| (acc[0][i] + acc[1][i]) + (acc[2][i] + acc[3][i]))
}

#[cfg(test)]
mod tests;
