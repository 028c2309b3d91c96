//! Rotary position embeddings (RoPE), once for every model: the angle
//! table of a base and its scaling for a longer context (linear, Llama
//! 3's), and the rotation of a head's first `rot` dimensions, in either
//! pairing, with its inverse (the rotation is orthogonal: its backward is
//! the rotation by the opposite angles). The pretrained decoder's forward
//! and the trainable attention (`nn/attention`) both call it.

use crate::error::Result;

/// Which dimensions of a head RoPE rotates together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RopePairs {
    /// (2i, 2i + 1): llama.cpp's permuted Llama Q/K rows.
    Adjacent,
    /// (i, i + head_dim/2): rows as trained (Hugging Face files).
    Halves,
}

/// How RoPE's frequencies are scaled for a longer context (transformers'
/// `rope_parameters.rope_type`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RopeScaling {
    /// Every inverse frequency divided by `factor`.
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// Llama 3's: wavelengths longer than `original_context /
    /// low_freq_factor` divided by `factor`, those shorter than
    /// `original_context / high_freq_factor` kept, and a smooth blend
    /// between.
    Llama3 {
        /// The divisor of the low frequencies.
        factor: f64,
        /// Where the low frequencies start.
        low_freq_factor: f64,
        /// Where the high frequencies start.
        high_freq_factor: f64,
        /// The context the model was first trained for.
        original_context: f64,
    },
}

impl RopeScaling {
    /// The scaled inverse frequency `inv`.
    pub fn apply(self, inv: f64) -> f64 {
        match self {
            RopeScaling::Linear { factor } => inv / factor,
            RopeScaling::Llama3 {
                factor,
                low_freq_factor: lo,
                high_freq_factor: hi,
                original_context: ctx,
            } => {
                let wavelen = 2.0 * std::f64::consts::PI / inv;
                if wavelen < ctx / hi {
                    inv
                } else if wavelen > ctx / lo {
                    inv / factor
                } else {
                    let s = (ctx / wavelen - lo) / (hi - lo);
                    (1.0 - s) * inv / factor + s * inv
                }
            }
        }
    }

    /// Refuse factors that are not finite and positive (and Llama 3's
    /// bands out of order).
    pub fn check(self) -> Result<()> {
        let ok = match self {
            RopeScaling::Linear { factor } => factor.is_finite() && factor > 0.0,
            RopeScaling::Llama3 {
                factor,
                low_freq_factor: lo,
                high_freq_factor: hi,
                original_context: ctx,
            } => {
                [factor, lo, hi, ctx]
                    .iter()
                    .all(|v| v.is_finite() && *v > 0.0)
                    && hi > lo
            }
        };
        if ok {
            Ok(())
        } else {
            Err(format!("RoPE scaling {self:?} has a factor that is not a positive number").into())
        }
    }
}

/// cos/sin of position p times frequency i for positions `start ..
/// start + t`, `[t, hd/2]`, computed in f64 (`hd`: the rotated width).
pub fn rope_table(
    start: usize,
    t: usize,
    hd: usize,
    base: f64,
    scaling: Option<RopeScaling>,
) -> (Vec<f32>, Vec<f32>) {
    let half = hd / 2;
    let mut cos = vec![0f32; t * half];
    let mut sin = vec![0f32; t * half];
    for r in 0..t {
        let p = start + r;
        for i in 0..half {
            // As Hugging Face computes it: the inverse frequency in f32.
            let inv = 1.0 / base.powf((2 * i) as f64 / hd as f64);
            let inv = scaling.map_or(inv, |s| s.apply(inv)) as f32;
            let ang = f64::from(p as f32 * inv);
            cos[r * half + i] = ang.cos() as f32;
            sin[r * half + i] = ang.sin() as f32;
        }
    }
    (cos, sin)
}

/// Rotate the first `rot` dimensions of each `hd`-wide head (all of them
/// but for GPT-NeoX's partial rotary; none: nothing to do) by their
/// angles: adjacent pairs (2i, 2i+1) (llama.cpp's row order) or halves
/// (i, i + rot/2) (rows as trained).
pub fn apply_rope(
    x: &mut [f32],
    t: usize,
    heads: usize,
    (hd, rot): (usize, usize),
    cos: &[f32],
    sin: &[f32],
    pairs: RopePairs,
) {
    let half = rot / 2;
    let (stride, offset) = match pairs {
        RopePairs::Adjacent => (2, 1),
        RopePairs::Halves => (1, half),
    };
    for p in 0..t {
        for h in 0..heads {
            let row = &mut x[(p * heads + h) * hd..(p * heads + h + 1) * hd];
            for i in 0..half {
                let (c, s) = (cos[p * half + i], sin[p * half + i]);
                let (ia, ib) = (stride * i, stride * i + offset);
                let (a, b) = (row[ia], row[ib]);
                row[ia] = a * c - b * s;
                row[ib] = a * s + b * c;
            }
        }
    }
}

/// The inverse of [`apply_rope`] (the rotation by the opposite angles):
/// the backward of a rotation, which maps dL/d(rotated) to dL/d(input).
pub fn apply_rope_inverse(
    x: &mut [f32],
    t: usize,
    heads: usize,
    (hd, rot): (usize, usize),
    cos: &[f32],
    sin: &[f32],
    pairs: RopePairs,
) {
    let neg: Vec<f32> = sin.iter().map(|s| -s).collect();
    apply_rope(x, t, heads, (hd, rot), cos, &neg, pairs);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inverse undoes the rotation, and the rotation keeps each pair's
    /// norm, in both pairings, on part of each head too.
    #[test]
    fn inverse_undoes_the_rotation() {
        let (t, heads, hd) = (5, 3, 8);
        let x0: Vec<f32> = (0..t * heads * hd)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) / 3.0)
            .collect();
        for pairs in [RopePairs::Adjacent, RopePairs::Halves] {
            for rot in [hd, 4] {
                let (cos, sin) = rope_table(
                    2,
                    t,
                    rot,
                    10_000.0,
                    Some(RopeScaling::Linear { factor: 2.0 }),
                );
                let mut x = x0.clone();
                apply_rope(&mut x, t, heads, (hd, rot), &cos, &sin, pairs);
                assert_ne!(x, x0);
                let norm = |v: &[f32]| v.iter().map(|a| f64::from(*a) * f64::from(*a)).sum::<f64>();
                assert!((norm(&x) - norm(&x0)).abs() < 1e-3 * norm(&x0));
                apply_rope_inverse(&mut x, t, heads, (hd, rot), &cos, &sin, pairs);
                for (a, b) in x.iter().zip(&x0) {
                    assert!((a - b).abs() < 1e-5, "{a} {b}");
                }
            }
        }
    }
}
