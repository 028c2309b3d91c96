//! Activations quantised for the integer dot products ([`QuantActs`]:
//! per block of [`ACTS_BLOCK`] values, at [`ActBits`]), and what each
//! weight format subtracts from its unpacked values.

use crate::gguf::quant::GgmlType;

/// How finely the activations are quantised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActBits {
    /// 8 bits per value, one scale per block of 32: llama.cpp's `Q8_0`.
    Eight,
    /// About 16 bits: each value `254 hi + lo` with `hi` and `lo` 8-bit
    /// (|hi| <= 127, -127 <= lo <= 126), one scale per block. Each
    /// product is then two 8-bit integer dot products, combined exactly
    /// in i32 (`254 x hi's + lo's`), so the same lane kernels serve, at
    /// twice their work, for a 254-fold finer rounding.
    Sixteen,
}

/// The weight of the high limb of [`ActBits::Sixteen`].
pub(super) const LIMB: i32 = 254;

impl ActBits {
    /// The largest |value| a block's scale maps its largest |x| to.
    fn levels(self) -> f32 {
        match self {
            ActBits::Eight => 127.0,
            ActBits::Sixteen => (LIMB * 127) as f32,
        }
    }
}

/// An activation row quantised for one weight type's dot products.
#[derive(Clone, Debug)]
pub struct QuantActs {
    /// One scale per block.
    pub(super) d: Vec<f32>,
    /// The 8-bit values ([`ActBits::Eight`]), or the high limbs.
    pub(super) q: Vec<i8>,
    /// The low limbs ([`ActBits::Sixteen`]; empty for 8 bits).
    pub(super) lo: Vec<i8>,
    /// The sum of each 4 consecutive values (limbs combined; for the
    /// offsets).
    pub(super) xs4: Vec<i32>,
    /// Per block: its scale times the sum of its values (for the minima
    /// of Q4_1 and Q4_K).
    pub(super) ds: Vec<f32>,
}

/// Activation values per scale, for every format.
pub const ACTS_BLOCK: usize = 32;

/// Whether `ty` has a quantised dot product (F32, F16 and BF16 have none).
pub fn has_dot(ty: GgmlType) -> bool {
    !matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16)
}

impl QuantActs {
    /// Quantise `x` to `bits` for dot products with rows of type `ty`
    /// (None: `ty` has none, or `x` is not whole blocks). A non-finite
    /// value makes its block's scale non-finite, so the products come out
    /// NaN, as the f32 path's would.
    pub fn new(ty: GgmlType, x: &[f32], bits: ActBits) -> Option<QuantActs> {
        let block = ACTS_BLOCK;
        if !has_dot(ty) || !x.len().is_multiple_of(block) {
            return None;
        }
        let mut v = vec![0i32; x.len()];
        let mut d = vec![0f32; x.len() / block];
        for ((xs, vs), d) in x
            .chunks_exact(block)
            .zip(v.chunks_exact_mut(block))
            .zip(&mut d)
        {
            *d = quantize_block(xs, bits.levels(), vs);
        }
        let (q, lo) = match bits {
            ActBits::Eight => (v.iter().map(|&v| v as i8).collect(), Vec::new()),
            ActBits::Sixteen => v
                .iter()
                .map(|&v| {
                    let hi = (v + 127).div_euclid(LIMB);
                    (hi as i8, (v - LIMB * hi) as i8)
                })
                .unzip(),
        };
        let xs4: Vec<i32> = v.chunks_exact(4).map(|c| c.iter().sum()).collect();
        let ds = xs4
            .chunks_exact(8)
            .zip(&d)
            .map(|(s, &d)| d * s.iter().sum::<i32>() as f32)
            .collect();
        Some(QuantActs { d, q, lo, xs4, ds })
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

crate::kernels::multiversion! {
    /// `q = round(x / s)` with `s = max |x| / levels`; returns `s`.
    fn quantize_block(x: &[f32], levels: f32, q: &mut [i32]) -> f32 {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        // NaN: max ignores it; make the scale NaN so that it propagates.
        let amax = if x.iter().any(|v| v.is_nan()) { f32::NAN } else { amax };
        let d = amax / levels;
        let id = if d > 0.0 && d.is_finite() { 1.0 / d } else { 0.0 };
        for (q, &v) in q.iter_mut().zip(x) {
            *q = (v * id).round().clamp(-levels, levels) as i32;
        }
        d
    }
}

/// What each format subtracts from its unpacked value (Q4_0: q - 8, Q5_0:
/// q - 16, Q6_K: q - 32); Q4_1 and Q4_K subtract a scaled minimum instead.
pub(super) fn offset(ty: GgmlType) -> i32 {
    match ty {
        GgmlType::Q4_0 => 8,
        GgmlType::Q5_0 => 16,
        GgmlType::Q6K => 32,
        _ => 0,
    }
}
