//! Low-precision storage, simulated: values rounded to f32, bf16 or f16
//! (the `half` crate: IEEE round-to-nearest-even, subnormals kept), and a
//! row-wise norm computed with every operation rounded by a given rule, so
//! that the upcast computation (f32 statistics, what PyTorch and normlab's
//! kernels do) and a naive one (every intermediate rounded to the storage
//! type) can be set beside an f64 reference. Used by `normlab calc --dtype`
//! and `exp precision`.

use crate::kernels::norm::NormKind;
use serde::Serialize;

/// A storage type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// IEEE single.
    #[default]
    F32,
    /// bfloat16: f32's exponent, 8 significant bits.
    Bf16,
    /// IEEE half: 5 exponent bits (max 65504), 11 significant bits.
    F16,
}

impl Dtype {
    /// Every type.
    pub const ALL: [Dtype; 3] = [Dtype::F32, Dtype::Bf16, Dtype::F16];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "f16",
        }
    }

    /// Names, for flags.
    pub fn names() -> Vec<&'static str> {
        Dtype::ALL.iter().map(|t| t.name()).collect()
    }

    /// Whether this is f32 (the default, left out of saved configs).
    pub fn is_f32(&self) -> bool {
        *self == Dtype::F32
    }

    /// Round every value of `v` to this type in place, as the 16-bit
    /// kernels store it (`simd::Elem::put`: nearest even; for bf16 an f32
    /// subnormal becomes a signed zero). f32: nothing. Elementwise, in
    /// fixed chunks over rayon's current pool.
    pub fn round_in_place(self, v: &mut [f32]) {
        use crate::kernels::half16::{bf16, f16};
        use rayon::prelude::*;
        let f: fn(&mut [f32]) = match self {
            Dtype::F32 => return,
            Dtype::Bf16 => round_as::<bf16>,
            Dtype::F16 => round_as::<f16>,
        };
        if v.len() <= 64 * 1024 {
            f(v)
        } else {
            v.par_chunks_mut(64 * 1024).for_each(f)
        }
    }

    /// `v` rounded to this type (to nearest even; inf beyond its range).
    pub fn round(self, v: f64) -> f64 {
        match self {
            Dtype::F32 => v as f32 as f64,
            Dtype::Bf16 => half::bf16::from_f64(v).to_f64(),
            Dtype::F16 => half::f16::from_f64(v).to_f64(),
        }
    }

    /// The largest finite value.
    pub fn max(self) -> f64 {
        match self {
            Dtype::F32 => f32::MAX as f64,
            Dtype::Bf16 => half::bf16::MAX.to_f64(),
            Dtype::F16 => half::f16::MAX.to_f64(),
        }
    }
}

/// How many of `v` f16 could not store: beyond its largest finite value
/// (65504) in size, or not finite.
pub fn beyond_f16(v: &[f32]) -> u64 {
    let max = half::f16::MAX.to_f32();
    v.iter().filter(|x| !x.is_finite() || x.abs() > max).count() as u64
}

impl std::str::FromStr for Dtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(Dtype::F32),
            "bf16" | "bfloat16" => Ok(Dtype::Bf16),
            "f16" | "fp16" | "float16" | "half" => Ok(Dtype::F16),
            _ => Err(format!("unknown dtype '{s}' (expected f32, bf16 or f16)")),
        }
    }
}

crate::kernels::multiversion! {
    /// Each value rounded to `T` and widened back.
    fn round_as<T: crate::kernels::simd::Elem>(v: &mut [f32]) {
        for x in v.iter_mut() {
            *x = T::put(*x).get();
        }
    }
}

/// A norm's computation, with the second moment it used.
#[derive(Clone, Debug, Serialize)]
pub struct Rounded {
    /// The output (gain and bias applied).
    pub output: Vec<f64>,
    /// The mean subtracted (0 for RMSNorm).
    pub mean: f64,
    /// The variance (LayerNorm) or mean square (RMSNorm) it computed.
    pub second_moment: f64,
    /// 1/sqrt(second moment + eps).
    pub rstd: f64,
}

/// Whether `kind` is one `norm` computes (layernorm, rmsnorm, zrmsnorm).
pub fn supported(kind: NormKind) -> bool {
    matches!(
        kind,
        NormKind::LayerNorm | NormKind::RmsNorm | NormKind::ZRmsNorm
    )
}

/// LayerNorm (centred) or RMSNorm of `x` with per-feature `gain` and
/// optional `bias`, every operation's result passed through `r` (the
/// identity for f64; `as f32` for f32 statistics; the storage type's
/// rounding for a naive half-precision norm): each centred value and
/// square, the running sum after every addition (left to right), the mean,
/// the second moment, eps itself, second moment + eps, its square root, the
/// reciprocal, and each output element.
pub fn norm(
    centred: bool,
    x: &[f64],
    gain: &[f64],
    bias: Option<&[f64]>,
    eps: f64,
    r: &dyn Fn(f64) -> f64,
) -> Rounded {
    let d = x.len() as f64;
    let mean = if centred {
        r(x.iter().fold(0.0, |s, &v| r(s + v)) / d)
    } else {
        0.0
    };
    let c: Vec<f64> = x.iter().map(|&v| r(v - mean)).collect();
    let m2 = r(c.iter().fold(0.0, |s, &v| r(s + r(v * v))) / d);
    let rstd = r(1.0 / r(r(m2 + r(eps)).sqrt()));
    let output = c
        .iter()
        .enumerate()
        .map(|(j, &v)| {
            let y = r(r(v * rstd) * gain[j]);
            bias.map_or(y, |b| r(y + b[j]))
        })
        .collect();
    Rounded {
        output,
        mean,
        second_moment: m2,
        rstd,
    }
}
