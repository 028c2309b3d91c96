//! Normalization kinds and the fused row-wise kernels' common contract.
//!
//! Layout: `x`, `y`, `dy`, `dx` are row-major `[rows, d]`; statistics are
//! per row over the last dimension (one token's feature vector). Every
//! row-wise kind caches [`STATS`] floats per row in `stats` (interleaved:
//! `stats[r * STATS + k]`), so backward never recomputes a reduction over x
//! that forward already did:
//!
//! | kind | stats\[0] | stats\[1] | stats\[2] |
//! |---|---|---|---|
//! | layernorm | mean, high part (f32) | mean, low part (mean - high) | rstd = 1/sqrt(var + eps) |
//! | rmsnorm, zrmsnorm | 0 | 0 | rstd = 1/sqrt(mean(x^2) + eps) |
//! | scalenorm | 1 if the norm was clamped to eps, else 0 | 0 | 1/max(‖x‖, eps) |
//! | none | 0 | 0 | 1 |
//! | dyt, derf | 0 (`nn::Norm` writes the row's saturated share here on diagnosed passes) | 0 | 1 |
//!
//! Parameters of one norm live in one flat slice, in this order
//! (see [`NormKind::num_params`]): layernorm `[gamma(d), beta(d)]`, rmsnorm
//! `[gamma(d)]`, zrmsnorm `[w(d)]` (gain is `1 + w`), scalenorm `[g]`,
//! batchnorm `[gamma(d), beta(d)]`, none `[]`. Gradients use the same layout
//! and are **accumulated** (`+=`), input gradients are **written**.
//!
//! Work is split into chunks of whole rows whose size depends only on
//! `(rows, d)`, never on the thread count; parameter gradients are summed per
//! chunk into caller-provided scratch and the chunks are then added in
//! order. So results are bit-identical for any number of threads (`chunks.rs`).
//!
//! A row whose variance (or mean square) plus eps is exactly zero, which
//! only happens with `eps = 0` on a constant (or zero) row, gets `rstd = 0`:
//! its normalised value is defined as 0 and its input gradient as 0, a
//! finite, documented result instead of 0/0.

pub mod batchnorm;
mod chunks;
pub mod layernorm;
pub mod lowp;
pub mod pointwise;
pub mod rmsnorm;
pub mod scalenorm;
pub mod spec;
pub mod tanh;

use crate::simd::Elem;
use std::fmt;
use std::str::FromStr;

pub use batchnorm::BatchNorm;
pub use chunks::{backward_scratch_len, sequential, stats_len, Chunks};
use chunks::{check_shapes, for_chunks, for_chunks_backward};
pub use spec::{GainForm, KindSpec, ParamInit, ParamLen, ParamRole, ParamSpec, BETA, GAMMA};

/// Floats of per-row statistics cached by forward for backward.
pub const STATS: usize = 3;

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

/// Forward of a row-wise norm: writes `y` and the per-row `stats`. The
/// storage type `T` of `x` and `y` is f32, bf16 or f16 (see [`lowp`]);
/// parameters and statistics are f32 whatever it is.
///
/// Panics on mismatched lengths, and for [`NormKind::BatchNorm`], whose
/// statistics are per feature and which has its own state ([`BatchNorm`]).
pub fn forward<T: Elem>(
    kind: NormKind,
    d: usize,
    eps: f32,
    x: &[T],
    params: &[f32],
    y: &mut [T],
    stats: &mut [f32],
) {
    check_shapes(kind, d, x, params, y, stats);
    let stream = crate::simd::should_stream(y, d);
    with_forward_rows(kind, d, eps, params, stream, &mut |rows| {
        for_chunks(d, x, y, stats, rows)
    });
}

/// Hand `run` the kind's forward over one chunk of rows (the f32 kernel
/// every storage type goes through), with its parameters bound.
fn with_forward_rows<T: Elem>(
    kind: NormKind,
    d: usize,
    eps: f32,
    params: &[f32],
    stream: bool,
    run: &mut dyn FnMut(&ForwardRows<T>),
) {
    match kind {
        NormKind::LayerNorm => {
            let (gamma, beta) = params.split_at(d);
            run(&|x, y, s| layernorm::forward_rows(d, eps, stream, x, gamma, beta, y, s))
        }
        NormKind::RmsNorm | NormKind::ZRmsNorm => {
            let offset = zero_centred_offset(kind);
            run(&|x, y, s| rmsnorm::forward_rows(d, eps, offset, stream, x, params, y, s))
        }
        NormKind::ScaleNorm => {
            let g = params[0];
            run(&|x, y, s| {
                lowp::via_f32(d, x, y, s, &|x, y, s, _| {
                    scalenorm::forward_rows(d, eps, g, x, y, s)
                })
            })
        }
        NormKind::Dyt | NormKind::Derf => {
            let f = squash(kind);
            run(&|x, y, s| {
                lowp::via_f32(d, x, y, s, &|x, y, s, in_place| {
                    pointwise::forward_rows(d, f, stream && in_place, x, params, y, s)
                })
            })
        }
        NormKind::None => run(&|x, y, s| {
            y.copy_from_slice(x);
            for st in s.chunks_exact_mut(STATS) {
                st.copy_from_slice(&[0.0, 0.0, 1.0]);
            }
        }),
        NormKind::BatchNorm => panic!("batchnorm statistics are per feature: use norm::BatchNorm"),
    }
}

/// A kind's forward over one chunk of rows: `(x, y, stats)`.
pub(crate) type ForwardRows<'a, T> = dyn Fn(&[T], &mut [T], &mut [f32]) + Sync + 'a;

/// A kind's backward over one chunk of rows: `(x, dy, stats, dx, partial
/// parameter gradients)`.
pub(crate) type BackwardRows<'a, T> = dyn Fn(&[T], &[T], &[f32], &mut [T], &mut [f32]) + Sync + 'a;

/// The squashing function of a point-wise kind.
fn squash(kind: NormKind) -> pointwise::Squash {
    match kind {
        NormKind::Derf => pointwise::Squash::Erf,
        _ => pointwise::Squash::Tanh,
    }
}

/// The gain offset of the RMSNorm kernels: 1 for zero-centred (gain 1 + w).
fn zero_centred_offset(kind: NormKind) -> f32 {
    match kind.spec().gain {
        GainForm::PerFeature { offset } => offset,
        _ => 0.0,
    }
}

/// Backward of a row-wise norm: writes `dx`, accumulates `dparams` (x, dy
/// and dx in the storage type `T`, as for [`forward`]).
/// `stats` must be what [`forward`] wrote for the same `x`; `scratch` must
/// hold at least [`backward_scratch_len`] floats.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Elem>(
    kind: NormKind,
    d: usize,
    x: &[T],
    dy: &[T],
    params: &[f32],
    stats: &[f32],
    dx: &mut [T],
    dparams: &mut [f32],
    scratch: &mut [f32],
) {
    check_shapes(kind, d, x, params, dx, stats);
    let stream = crate::simd::should_stream(dx, d);
    assert_eq!(dy.len(), x.len(), "dy length");
    let np = kind.num_params(d);
    with_backward_rows(kind, d, params, stream, &mut |rows| {
        for_chunks_backward(d, np, x, dy, stats, dx, dparams, scratch, rows)
    });
}

/// Hand `run` the kind's backward over one chunk of rows (the f32 kernel
/// every storage type goes through), with its parameters bound.
fn with_backward_rows<T: Elem>(
    kind: NormKind,
    d: usize,
    params: &[f32],
    stream: bool,
    run: &mut dyn FnMut(&BackwardRows<T>),
) {
    match kind {
        NormKind::LayerNorm => {
            let gamma = &params[..d];
            run(&|x, dy, s, dx, p| {
                let (pg, pb) = p.split_at_mut(d);
                layernorm::backward_rows(d, stream, x, dy, gamma, s, dx, pg, pb)
            })
        }
        NormKind::RmsNorm | NormKind::ZRmsNorm => {
            let offset = zero_centred_offset(kind);
            run(&|x, dy, s, dx, p| {
                rmsnorm::backward_rows(d, offset, stream, x, dy, params, s, dx, p)
            })
        }
        NormKind::ScaleNorm => {
            let g = params[0];
            run(&|x, dy, s, dx, p| {
                lowp::via_f32_backward(d, x, dy, s, dx, p, &|x, dy, s, dx, p, _| {
                    scalenorm::backward_rows(d, g, x, dy, s, dx, p)
                })
            })
        }
        NormKind::Dyt | NormKind::Derf => {
            let f = squash(kind);
            run(&|x, dy, s, dx, p| {
                lowp::via_f32_backward(d, x, dy, s, dx, p, &|x, dy, _, dx, p, in_place| {
                    pointwise::backward_rows(d, f, stream && in_place, x, dy, params, dx, p)
                })
            })
        }
        NormKind::None => run(&|_, dy, _, dx, _| dx.copy_from_slice(dy)),
        NormKind::BatchNorm => panic!("batchnorm statistics are per feature: use norm::BatchNorm"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names_round_trip() {
        for k in NormKind::ALL {
            assert_eq!(k.name().parse::<NormKind>().unwrap(), k);
        }
        let e = "foo".parse::<NormKind>().unwrap_err().to_string();
        assert!(
            e.contains("unknown norm kind 'foo'") && e.contains("rmsnorm"),
            "{e}"
        );
    }

    #[test]
    fn all_lists_every_kind_once_with_a_distinct_name() {
        for (i, k) in NormKind::ALL.iter().enumerate() {
            assert_eq!(k.position(), i, "{k} is not at its position in ALL");
        }
        let names: std::collections::HashSet<&str> =
            NormKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), NormKind::ALL.len());
    }

    #[test]
    fn chunking_depends_on_shape_only() {
        let c = Chunks::new(8192, 1024);
        assert_eq!(c.rows_per_chunk, 64);
        assert_eq!(c.count, 128);
        let c = Chunks::new(3, 7);
        assert_eq!((c.rows_per_chunk, c.count), (3, 1));
        let c = Chunks::new(0, 7);
        assert_eq!(c.count, 0);
    }
}
