//! The norm kinds ([`NormKind`]: their names, their parameters' description
//! through [`spec`](super::spec), their default eps).

use super::spec::{GainForm, KindSpec, ParamRole, ParamSpec};
use super::{batchnorm, layernorm, pointwise, rmsnorm, scalenorm};
use std::fmt;
use std::str::FromStr;

/// Every normalization kind normlab knows. A kind describes itself in a
/// [`KindSpec`] (in its own file): name, default eps, its parameter tensors
/// and how they form the gain. Modules, the calculator, checkpoint names and
/// gain statistics derive from that description; the kernels dispatch on
/// the kind in [`forward`] / [`backward`], and [`crate::reference`] holds
/// its f64 twin. Adding a kind: its file with its `SPEC` and row kernels, a
/// variant here, its entry in [`NormKind::ALL`] and [`NormKind::spec`], and
/// the match arms the compiler then asks for (kernels and reference twin).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormKind {
    /// (x - mean) / sqrt(var + eps) * gamma + beta.
    LayerNorm,
    /// x / sqrt(mean(x^2) + eps) * gamma.
    RmsNorm,
    /// Zero-centred RMSNorm: x / rms * (1 + w), w initialised to 0.
    ZRmsNorm,
    /// g * x / max(‖x‖, eps) with one scalar g (init sqrt(d)).
    ScaleNorm,
    /// Statistics per feature over all rows of the batch (comparison only).
    BatchNorm,
    /// Identity.
    None,
    /// Dynamic Tanh: gamma * tanh(alpha x) + beta, no statistics.
    Dyt,
    /// Dynamic erf: gamma * erf(alpha x + s) + beta, no statistics.
    Derf,
}

/// The identity's description: no parameters.
const NONE_SPEC: KindSpec = KindSpec {
    name: "none",
    aliases: &["identity"],
    formula: "y = x",
    default_eps: 0.0,
    params: &[],
    gain: GainForm::Unit,
    row_wise: true,
    elementwise: true,
};

impl NormKind {
    /// All kinds, in a stable order.
    pub const ALL: [NormKind; 8] = [
        NormKind::LayerNorm,
        NormKind::RmsNorm,
        NormKind::ZRmsNorm,
        NormKind::ScaleNorm,
        NormKind::BatchNorm,
        NormKind::None,
        NormKind::Dyt,
        NormKind::Derf,
    ];

    /// The kind's position in [`NormKind::ALL`] (an exhaustive match, so a
    /// new variant must be placed; a test checks ALL against it).
    pub fn position(self) -> usize {
        match self {
            NormKind::LayerNorm => 0,
            NormKind::RmsNorm => 1,
            NormKind::ZRmsNorm => 2,
            NormKind::ScaleNorm => 3,
            NormKind::BatchNorm => 4,
            NormKind::None => 5,
            NormKind::Dyt => 6,
            NormKind::Derf => 7,
        }
    }

    /// The kinds usable inside a model (statistics per row).
    pub fn row_wise() -> impl Iterator<Item = NormKind> {
        NormKind::ALL.into_iter().filter(|k| k.is_row_wise())
    }

    /// The kind's description.
    pub fn spec(self) -> &'static KindSpec {
        match self {
            NormKind::LayerNorm => &layernorm::SPEC,
            NormKind::RmsNorm => &rmsnorm::SPEC,
            NormKind::ZRmsNorm => &rmsnorm::ZERO_CENTRED_SPEC,
            NormKind::ScaleNorm => &scalenorm::SPEC,
            NormKind::BatchNorm => &batchnorm::SPEC,
            NormKind::None => &NONE_SPEC,
            NormKind::Dyt => &pointwise::DYT_SPEC,
            NormKind::Derf => &pointwise::DERF_SPEC,
        }
    }

    /// The name used on the command line and in files.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// The kind's default eps.
    pub fn default_eps(self) -> f32 {
        self.spec().default_eps
    }

    /// Number of learnable parameters for feature size `d`.
    pub fn num_params(self, d: usize) -> usize {
        self.spec().params.iter().map(|p| p.len(d)).sum()
    }

    /// Offset and length of each parameter tensor in the flat slice.
    pub fn param_ranges(
        self,
        d: usize,
    ) -> impl Iterator<Item = (ParamSpec, std::ops::Range<usize>)> {
        let mut start = 0;
        self.spec().params.iter().map(move |p| {
            let r = start..start + p.len(d);
            start = r.end;
            (*p, r)
        })
    }

    /// Where the tensor of `role` sits in the flat slice, if the kind has one.
    pub fn param_range(self, role: ParamRole, d: usize) -> Option<std::ops::Range<usize>> {
        self.param_ranges(d)
            .find(|(p, _)| p.role == role)
            .map(|(_, r)| r)
    }

    /// Write the initial parameters (gamma 1, beta 0, w 0, g sqrt(d)).
    pub fn init_params(self, d: usize, params: &mut [f32]) {
        assert_eq!(
            params.len(),
            self.num_params(d),
            "{} params length",
            self.name()
        );
        for (p, r) in self.param_ranges(d) {
            params[r].fill(p.init_value(d));
        }
    }

    /// The multiplier of feature `j`'s normalised value as the kernels
    /// define it (`gamma[j]`, `1 + w[j]`, ScaleNorm's `g` on `x / ‖x‖`, 1).
    /// Computed in f64 (no rounding of `1 + w`).
    pub fn gain_multiplier(self, params: &[f32], d: usize, j: usize) -> f64 {
        let g = self.param_range(ParamRole::Gain, d);
        match (self.spec().gain, g) {
            (GainForm::PerFeature { offset }, Some(r)) => {
                offset as f64 + params[r.start + j] as f64
            }
            (GainForm::ScalarOnL2, Some(r)) => params[r.start] as f64,
            _ => 1.0,
        }
    }

    /// Feature `j`'s gain relative to a unit-RMS normalised value (what
    /// weight decay acts on, comparable across kinds: ScaleNorm's g is
    /// divided by sqrt(d)).
    pub fn effective_gain(self, params: &[f32], d: usize, j: usize) -> f64 {
        let m = self.gain_multiplier(params, d, j);
        match self.spec().gain {
            GainForm::ScalarOnL2 => m / (d as f64).sqrt(),
            _ => m,
        }
    }

    /// Whether the statistics are per row (everything except BatchNorm).
    pub fn is_row_wise(self) -> bool {
        self.spec().row_wise
    }

    /// One line per kind, `name (eps E): formula`, for help texts.
    pub fn describe_all() -> String {
        NormKind::ALL
            .iter()
            .map(|k| {
                let s = k.spec();
                let eps = if s.default_eps > 0.0 {
                    format!(" (eps {:e})", s.default_eps)
                } else {
                    String::new()
                };
                format!("{}{eps}: {}", s.name, s.formula)
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Whether the kind has a bias tensor.
    pub fn has_bias(self) -> bool {
        self.param_range(ParamRole::Bias, 1).is_some()
    }
}

impl fmt::Display for NormKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for an unknown norm kind name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownNormKind(pub String);

impl fmt::Display for UnknownNormKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = NormKind::ALL.iter().map(|k| k.name()).collect();
        write!(
            f,
            "unknown norm kind '{}' (expected one of: {})",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownNormKind {}

impl FromStr for NormKind {
    type Err = UnknownNormKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        NormKind::ALL
            .into_iter()
            .find(|k| k.name() == lower || k.spec().aliases.contains(&lower.as_str()))
            .ok_or_else(|| UnknownNormKind(s.to_string()))
    }
}
