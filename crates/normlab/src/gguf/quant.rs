//! GGUF tensor types and their dequantisation to f32, block by block, as
//! ggml defines the layouts (checked against the `gguf` Python package on
//! real files in `tests/gguf_models.rs`).
//!
//! The details that break reimplementations:
//! - Q4_1 blocks of 32 values are `f16 d, f16 m, 16 bytes`; byte j holds
//!   value j in its low nibble and value j + 16 in its high nibble, and
//!   `x = d * q + m`; Q4_0 is `f16 d, 16 bytes` with `x = d * (q - 8)`;
//! - Q5_0 is `f16 d, u32 qh, 16 bytes`: the low nibbles as in Q4_0, and bit
//!   j of `qh` is value j's fifth bit; `x = d * (q - 16)`;
//! - Q8_0 is `f16 d, 32 x i8` with `x = d * q`;
//! - the k-quants pack 256 values in a super-block. Q4_K is `f16 d, f16
//!   dmin, 12 bytes of eight 6-bit (scale, min) pairs, 128 bytes`: each 64
//!   values are 32 bytes whose low nibbles are the first 32 values (pair
//!   2k) and high nibbles the next 32 (pair 2k + 1), and
//!   `x = d * sc * q - dmin * m`;
//! - Q6_K is `128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 x i8
//!   scales, f16 d`, in two halves of 128 values: value l (of 32) takes the
//!   low nibble of ql\[l\], ql\[l + 32\], then their high nibbles, with the
//!   high bits 0-1, 2-3, 4-5, 6-7 of qh\[l\]; `x = d * scale * (q - 32)`
//!   with one scale per 16 values.

use half::bf16;

/// The tensor types this reader dequantises (ggml type ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgmlType {
    /// 0.
    F32,
    /// 1.
    F16,
    /// 2: blocks of 32, f16 scale, 4-bit values minus 8.
    Q4_0,
    /// 3: blocks of 32, f16 scale and minimum, 4-bit values.
    Q4_1,
    /// 6: blocks of 32, f16 scale, 5-bit values minus 16.
    Q5_0,
    /// 8: blocks of 32, f16 scale, 8-bit values.
    Q8_0,
    /// 12: super-blocks of 256, 4-bit values, 6-bit scales and minima.
    Q4K,
    /// 14: super-blocks of 256, 6-bit values, 8-bit scales.
    Q6K,
    /// 30.
    Bf16,
}

/// Values per k-quant super-block.
const QK_K: usize = 256;

impl GgmlType {
    pub(super) fn from_id(id: u32) -> Option<GgmlType> {
        Some(match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            8 => GgmlType::Q8_0,
            12 => GgmlType::Q4K,
            14 => GgmlType::Q6K,
            30 => GgmlType::Bf16,
            _ => return None,
        })
    }
    /// (values per block, bytes per block).
    pub fn block(self) -> (usize, usize) {
        match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 | GgmlType::Bf16 => (1, 2),
            GgmlType::Q4_0 => (32, 18),
            GgmlType::Q4_1 => (32, 20),
            GgmlType::Q5_0 => (32, 22),
            GgmlType::Q8_0 => (32, 34),
            GgmlType::Q4K => (QK_K, 144),
            GgmlType::Q6K => (QK_K, 210),
        }
    }
    /// The name ggml gives the type.
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Bf16 => "BF16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q4K => "Q4_K",
            GgmlType::Q6K => "Q6_K",
        }
    }
}

/// The f16 at the start of `b`, as f32 (exact; see [`f16_bits_to_f32`]).
#[inline(always)]
pub(super) fn h(b: &[u8]) -> f32 {
    f16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]))
}

/// An f16's bits as f32, exactly, in a few integer operations: `half`'s
/// conversion checks the CPU on every call outside code compiled for F16C,
/// which made it most of the time a quantised dot product took.
#[inline(always)]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    match exp {
        // Zero and subnormals: man * 2^-24, exact in f32.
        0 => {
            let v = man as f32 * (1.0 / 16_777_216.0);
            f32::from_bits(v.to_bits() | sign)
        }
        31 => f32::from_bits(sign | 0x7f80_0000 | (man << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (man << 13)),
    }
}

/// Q4_K's 6-bit (scale, min) pair j of 8 from its 12 packed bytes.
fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    let (sc, m) = scale_min_k4_bits(j, q);
    (sc as f32, m as f32)
}

/// [`scale_min_k4`]'s integers.
pub(super) fn scale_min_k4_bits(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Dequantise `bytes` of type `ty` to f32 (whole blocks; a trailing partial
/// block is ignored, as the reader refuses tensors that are not whole
/// blocks).
pub fn dequantize(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
    let (per, bs) = ty.block();
    let mut out = vec![0f32; bytes.len() / bs * per];
    dequantize_into(ty, bytes, &mut out);
    out
}

crate::kernels::multiversion! {
/// [`dequantize`] into `out` (`bytes.len() / block bytes * block values`
/// long): one row of a quantised matrix at a time, without allocating.
/// Compiled for each SIMD level (the f32 values are exact conversions and
/// products of two f32s, the same at every level).
pub fn dequantize_into(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    let (per, bs) = ty.block();
    assert_eq!(
        out.len(),
        bytes.len() / bs * per,
        "dequantize_into: output length"
    );
    let blocks = bytes.chunks_exact(bs).zip(out.chunks_exact_mut(per));
    match ty {
        GgmlType::F32 => {
            for (b, o) in blocks {
                o[0] = f32::from_le_bytes(b.try_into().unwrap());
            }
        }
        GgmlType::F16 => {
            for (b, o) in blocks {
                o[0] = h(b);
            }
        }
        GgmlType::Bf16 => {
            for (b, o) in blocks {
                o[0] = bf16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        GgmlType::Q8_0 => {
            for (b, o) in blocks {
                let d = h(&b[..2]);
                for (o, &q) in o.iter_mut().zip(&b[2..]) {
                    *o = d * (q as i8) as f32;
                }
            }
        }
        GgmlType::Q4_0 | GgmlType::Q4_1 => {
            let one = ty == GgmlType::Q4_1;
            for (b, o) in blocks {
                let d = h(&b[..2]);
                let (m, qs) = if one {
                    (h(&b[2..4]), &b[4..20])
                } else {
                    (-8.0 * d, &b[2..18])
                };
                for j in 0..16 {
                    o[j] = d * (qs[j] & 0x0f) as f32 + m;
                    o[j + 16] = d * (qs[j] >> 4) as f32 + m;
                }
            }
        }
        GgmlType::Q5_0 => {
            for (b, o) in blocks {
                let d = h(&b[..2]);
                let qh = u32::from_le_bytes(b[2..6].try_into().unwrap());
                let qs = &b[6..22];
                for j in 0..16 {
                    let hi0 = ((qh >> j) & 1) << 4;
                    let hi1 = ((qh >> (j + 16)) & 1) << 4;
                    o[j] = d * (((qs[j] & 0x0f) as u32 | hi0) as i32 - 16) as f32;
                    o[j + 16] = d * (((qs[j] >> 4) as u32 | hi1) as i32 - 16) as f32;
                }
            }
        }
        GgmlType::Q4K => {
            for (b, o) in blocks {
                let (d, dmin) = (h(&b[..2]), h(&b[2..4]));
                let (scales, qs) = (&b[4..16], &b[16..144]);
                for (k, (q, o)) in qs.chunks_exact(32).zip(o.chunks_exact_mut(64)).enumerate() {
                    let (sc0, m0) = scale_min_k4(2 * k, scales);
                    let (sc1, m1) = scale_min_k4(2 * k + 1, scales);
                    let (d0, d1) = (d * sc0, d * sc1);
                    let (m0, m1) = (dmin * m0, dmin * m1);
                    for l in 0..32 {
                        o[l] = d0 * (q[l] & 0x0f) as f32 - m0;
                        o[l + 32] = d1 * (q[l] >> 4) as f32 - m1;
                    }
                }
            }
        }
        GgmlType::Q6K => {
            for (b, o) in blocks {
                let d = h(&b[208..210]);
                for half in 0..2 {
                    let ql = &b[64 * half..64 * half + 64];
                    let qh = &b[128 + 32 * half..128 + 32 * half + 32];
                    let sc = &b[192 + 8 * half..192 + 8 * half + 8];
                    let o = &mut o[128 * half..128 * half + 128];
                    for l in 0..32 {
                        let s = l / 16;
                        let q = [
                            (ql[l] & 0x0f) | ((qh[l] & 3) << 4),
                            (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4),
                            (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                            (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
                        ];
                        for (r, &q) in q.iter().enumerate() {
                            let scale = d * (sc[s + 2 * r] as i8) as f32;
                            o[l + 32 * r] = scale * (q as i32 - 32) as f32;
                        }
                    }
                }
            }
        }
    }
}
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    /// The fast conversion is `half`'s, bit for bit, on every f16.
    #[test]
    fn f16_conversion_is_exact() {
        for b in 0..=u16::MAX {
            let (a, w) = (f16_bits_to_f32(b), f16::from_bits(b).to_f32());
            assert!(
                a.to_bits() == w.to_bits() || (a.is_nan() && w.is_nan()),
                "{b:#x}"
            );
        }
    }

    #[test]
    fn q8_0_is_scale_times_signed_byte() {
        let mut b = f16::from_f32(0.25).to_le_bytes().to_vec();
        b.extend((0..32).map(|i| (i as i8 - 16) as u8));
        let v = dequantize(GgmlType::Q8_0, &b);
        assert_eq!(v[0], -4.0);
        assert_eq!(v[31], 0.25 * 15.0);
    }

    /// Q5_0: value j's fifth bit is bit j of qh (j < 16: low nibble of byte
    /// j; j >= 16: high nibble of byte j - 16).
    #[test]
    fn q5_0_takes_the_fifth_bit_from_qh() {
        let mut b = f16::from_f32(0.5).to_le_bytes().to_vec();
        // Fifth bit set on values 1 and 17 only.
        b.extend(((1u32 << 1) | (1u32 << 17)).to_le_bytes());
        // Low nibbles 3, high nibbles 5.
        b.extend(std::iter::repeat_n(0x53u8, 16));
        let v = dequantize(GgmlType::Q5_0, &b);
        assert_eq!(v.len(), 32);
        assert_eq!(v[0], 0.5 * (3 - 16) as f32);
        assert_eq!(v[1], 0.5 * (3 + 16 - 16) as f32);
        assert_eq!(v[16], 0.5 * (5 - 16) as f32);
        assert_eq!(v[17], 0.5 * (5 + 16 - 16) as f32);
    }

    /// Q4_K: pairs 0-3 of (scale, min) sit in the low 6 bits of bytes 0-3
    /// and 4-7; pairs 4-7 take their low nibbles from bytes 8-11 and their
    /// top two bits from the top of bytes 0-3 (scales) and 4-7 (minima).
    #[test]
    fn q4_k_unpacks_six_bit_scales_and_minima() {
        let mut b = f16::from_f32(1.0).to_le_bytes().to_vec();
        b.extend(f16::from_f32(0.5).to_le_bytes());
        // Scales s_j = j + 1 (j < 4) or 17 + j (j >= 4: 21..24, 6 bits),
        // minima m_j = 2j.
        let mut sc = [0u8; 12];
        for j in 0..4 {
            let (s_hi, m_hi) = (17 + 4 + j as u8, 2 * (4 + j as u8));
            sc[j] = (j as u8 + 1) | ((s_hi >> 4) << 6);
            sc[j + 4] = (2 * j as u8) | ((m_hi >> 4) << 6);
            sc[j + 8] = (s_hi & 0x0f) | ((m_hi & 0x0f) << 4);
        }
        b.extend(sc);
        // Every low nibble 7, every high nibble 2.
        b.extend(std::iter::repeat_n(0x27u8, 128));
        let v = dequantize(GgmlType::Q4K, &b);
        assert_eq!(v.len(), 256);
        for j in 0..8 {
            let (s, m) = if j < 4 {
                (j as f32 + 1.0, 2.0 * j as f32)
            } else {
                (17.0 + j as f32, 2.0 * j as f32)
            };
            let q = if j % 2 == 0 { 7.0 } else { 2.0 };
            for l in 0..32 {
                assert_eq!(v[32 * j + l], s * q - 0.5 * m, "group {j}");
            }
        }
    }

    /// Q6_K: value 32r + l of each half (r = 0..4) takes ql[l] / ql[l+32]'s
    /// low then high nibbles and bits 2r..2r+2 of qh[l]; scale index
    /// l / 16 + 2r.
    #[test]
    fn q6_k_places_each_quarter_with_its_scale() {
        let mut b = vec![0u8; 210];
        for l in 0..64 {
            b[l] = 0x21; // half 0: low nibble 1, high nibble 2
            b[64 + l] = 0x43; // half 1: 3 and 4
        }
        for l in 0..32 {
            b[128 + l] = 0b11_10_01_00; // half 0: high bits 0, 1, 2, 3
        }
        for (s, v) in b[192..208].iter_mut().enumerate() {
            *v = (s as i8 - 8) as u8;
        }
        b[208..210].copy_from_slice(&f16::from_f32(0.25).to_le_bytes());
        let v = dequantize(GgmlType::Q6K, &b);
        assert_eq!(v.len(), 256);
        for half in 0..2 {
            for r in 0..4 {
                for l in 0..32 {
                    let low = match (half, r) {
                        (0, 0 | 1) => 1,
                        (0, _) => 2,
                        (_, 0 | 1) => 3,
                        _ => 4,
                    };
                    let high = if half == 0 { r as i32 } else { 0 };
                    let scale = (8 * half + l / 16 + 2 * r) as i32 - 8;
                    let want = 0.25 * scale as f32 * ((low | (high << 4)) - 32) as f32;
                    assert_eq!(v[128 * half + 32 * r + l], want, "half {half} r {r} l {l}");
                }
            }
        }
    }
}
