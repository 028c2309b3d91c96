//! The norm calculator behind `normlab calc` and the web lab: normalise one
//! vector with any kind, report the output's mean, std and L2 norm, and
//! optionally normalise a transformed input (`a * x + c`) to show which
//! invariances hold (LayerNorm: scale and shift; RMSNorm: scale only).

use crate::error::Result;
use crate::kernels::norm::{self, BatchNorm, NormKind, ParamLen, ParamRole};
use crate::precision::Dtype;
use serde::Serialize;
use thiserror::Error;

/// Bad calculator input; each message is one line.
#[derive(Debug, Error, PartialEq)]
pub enum CalcError {
    /// Empty vector.
    #[error("the input vector is empty")]
    Empty,
    /// NaN or infinity in a vector.
    #[error("{what} contains a non-finite value ({value}) at position {index}")]
    NonFinite {
        /// Which input.
        what: &'static str,
        /// Position.
        index: usize,
        /// The value.
        value: f32,
    },
    /// eps < 0 or not finite.
    #[error("eps must be a finite number >= 0 (got {0})")]
    BadEps(f32),
    /// Gain/bias of the wrong length.
    #[error("{what} has {got} values; give 1 (broadcast) or d = {d}")]
    BadLength {
        /// Which parameter.
        what: &'static str,
        /// Values given.
        got: usize,
        /// Feature size.
        d: usize,
    },
    /// A parameter the kind does not have.
    #[error("{kind} has no {what}")]
    NoSuchParam {
        /// Kind.
        kind: NormKind,
        /// Parameter.
        what: &'static str,
    },
    /// Transform value not finite.
    #[error("--{what} must be finite (got {value})")]
    BadTransform {
        /// scale or shift.
        what: &'static str,
        /// The value.
        value: f32,
    },
    /// Too long (the web API bounds work per request).
    #[error("the input vector has {0} values; at most {1} are allowed")]
    TooLong(usize, usize),
    /// A storage type for a kind it is not simulated for.
    #[error("--dtype is simulated for layernorm, rmsnorm and zrmsnorm (not {0})")]
    DtypeKind(NormKind),
    /// --naive without --dtype.
    #[error("--naive needs --dtype bf16 or f16")]
    NaiveWithoutDtype,
}

/// What to compute.
#[derive(Clone, Debug)]
pub struct CalcRequest {
    /// Norm kind.
    pub kind: NormKind,
    /// The vector (one row, d = len).
    pub x: Vec<f32>,
    /// eps (default: the kind's).
    pub eps: Option<f32>,
    /// Gain per feature (1 value broadcasts); for zrmsnorm this is w (gain 1 + w);
    /// for scalenorm the scalar g.
    pub gamma: Option<Vec<f32>>,
    /// Bias per feature (layernorm, batchnorm).
    pub beta: Option<Vec<f32>>,
    /// Transform x -> scale * x + shift and normalise that too.
    pub scale: Option<f32>,
    /// See `scale`.
    pub shift: Option<f32>,
    /// Also compute the norm as with inputs, gain and bias stored in this
    /// type (layernorm, rmsnorm, zrmsnorm).
    pub dtype: Option<Dtype>,
    /// With `dtype`: round every intermediate to it (a naive half-precision
    /// norm) instead of computing the statistics in f32.
    pub naive: bool,
}

impl CalcRequest {
    /// Default request for a kind and vector.
    pub fn new(kind: NormKind, x: Vec<f32>) -> CalcRequest {
        CalcRequest {
            kind,
            x,
            eps: None,
            gamma: None,
            beta: None,
            scale: None,
            shift: None,
            dtype: None,
            naive: false,
        }
    }
}

/// Summary statistics of a vector.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VecStats {
    /// Mean.
    pub mean: f64,
    /// Biased standard deviation.
    pub std: f64,
    /// L2 norm.
    pub l2: f64,
}

/// Statistics of `v` (in f64).
pub fn vec_stats(v: &[f32]) -> VecStats {
    let n = v.len().max(1) as f64;
    let mean = v.iter().map(|&a| a as f64).sum::<f64>() / n;
    let var = v.iter().map(|&a| (a as f64 - mean).powi(2)).sum::<f64>() / n;
    let l2 = v.iter().map(|&a| (a as f64).powi(2)).sum::<f64>().sqrt();
    VecStats {
        mean,
        std: var.sqrt(),
        l2,
    }
}

/// The normalised transformed input and whether it equals the original output.
#[derive(Clone, Debug, Serialize)]
pub struct Transformed {
    /// a in a*x + c.
    pub scale: f32,
    /// c in a*x + c.
    pub shift: f32,
    /// a*x + c.
    pub input: Vec<f32>,
    /// Norm(a*x + c).
    pub output: Vec<f32>,
    /// max |Norm(a*x + c) - Norm(x)|.
    pub max_abs_diff: f64,
    /// max_abs_diff <= 1e-5 * max(1, max|Norm(x)|).
    pub unchanged: bool,
}

/// The calculator's answer.
#[derive(Clone, Debug, Serialize)]
pub struct CalcResult {
    /// Kind name.
    pub kind: String,
    /// Feature size.
    pub d: usize,
    /// eps used.
    pub eps: f32,
    /// The input.
    pub input: Vec<f32>,
    /// Norm(x).
    pub output: Vec<f32>,
    /// Mean of the output.
    pub mean: f64,
    /// Std (biased) of the output.
    pub std: f64,
    /// L2 norm of the output.
    pub l2: f64,
    /// sqrt(d), the L2 norm an RMSNorm output with unit gain has.
    pub sqrt_d: f64,
    /// Present with a scale or shift.
    pub transformed: Option<Transformed>,
    /// = transformed.output (flat key for scripts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transformed_output: Option<Vec<f32>>,
    /// = transformed.unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unchanged: Option<bool>,
    /// With a dtype: the same norm on the stored values.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub low_precision: Option<LowPrecision>,
}

/// The norm of the input as stored in a low-precision type.
#[derive(Clone, Debug, Serialize)]
pub struct LowPrecision {
    /// The storage type.
    pub dtype: Dtype,
    /// upcast (f32 statistics, output rounded) or naive (every
    /// intermediate rounded).
    pub mode: &'static str,
    /// The input as stored (inf where it overflowed).
    pub stored_input: Vec<f64>,
    /// The statistics and output (inf/NaN where they overflowed).
    #[serde(flatten)]
    pub result: crate::precision::Rounded,
    /// max |output - f32 output| (inf when not finite).
    pub max_abs_diff: f64,
}

/// The norm of `x` as if `x`, the gain and the bias were stored in `dtype`.
fn low_precision(
    req: &CalcRequest,
    dtype: Dtype,
    eps: f32,
    params: &[f32],
    y: &[f32],
) -> LowPrecision {
    let d = req.x.len();
    let ranges: Vec<_> = req.kind.param_ranges(d).collect();
    let tensor = |role: ParamRole| {
        ranges.iter().find(|(s, _)| s.role == role).map(|(_, r)| {
            params[r.clone()]
                .iter()
                .map(|&v| dtype.round(f64::from(v)))
                .collect::<Vec<_>>()
        })
    };
    let offset = if req.kind == NormKind::ZRmsNorm {
        1.0
    } else {
        0.0
    };
    let gain: Vec<f64> =
        tensor(ParamRole::Gain).map_or(vec![1.0; d], |g| g.iter().map(|v| v + offset).collect());
    let bias = tensor(ParamRole::Bias);
    let stored: Vec<f64> = req.x.iter().map(|&v| dtype.round(f64::from(v))).collect();
    let centred = req.kind == NormKind::LayerNorm;
    let naive = |v: f64| dtype.round(v);
    let upcast = |v: f64| v as f32 as f64;
    let round: &dyn Fn(f64) -> f64 = if req.naive { &naive } else { &upcast };
    let mut result = crate::precision::norm(
        centred,
        &stored,
        &gain,
        bias.as_deref(),
        f64::from(eps),
        round,
    );
    if !req.naive {
        result.output.iter_mut().for_each(|v| *v = dtype.round(*v));
    }
    let max_abs_diff = result
        .output
        .iter()
        .zip(y)
        .map(|(a, &b)| (a - f64::from(b)).abs())
        .fold(
            0f64,
            |m, v| if v.is_nan() { f64::INFINITY } else { m.max(v) },
        );
    LowPrecision {
        dtype,
        mode: if req.naive { "naive" } else { "upcast" },
        stored_input: stored,
        result,
        max_abs_diff,
    }
}

/// Largest vector the calculator accepts.
pub const MAX_LEN: usize = 1 << 20;

fn check_finite(what: &'static str, v: &[f32]) -> Result<(), CalcError> {
    match v.iter().position(|a| !a.is_finite()) {
        Some(index) => Err(CalcError::NonFinite {
            what,
            index,
            value: v[index],
        }),
        None => Ok(()),
    }
}

fn expand(what: &'static str, v: &[f32], d: usize) -> Result<Vec<f32>, CalcError> {
    check_finite(what, v)?;
    match v.len() {
        1 => Ok(vec![v[0]; d]),
        n if n == d => Ok(v.to_vec()),
        got => Err(CalcError::BadLength { what, got, d }),
    }
}

/// Build the flat parameter vector for a request: the kind's initial
/// values, with its gain tensor replaced by `gamma` and its bias tensor by
/// `beta` (each one value, broadcast, or one per feature where the tensor
/// has one per feature).
fn params_for(req: &CalcRequest, d: usize) -> Result<Vec<f32>, CalcError> {
    let kind = req.kind;
    let mut p = vec![0.0; kind.num_params(d)];
    kind.init_params(d, &mut p);
    for (given, role, flag) in [
        (&req.gamma, ParamRole::Gain, "gain (--gamma)"),
        (&req.beta, ParamRole::Bias, "bias (--beta)"),
    ] {
        let Some(v) = given else { continue };
        let Some((spec, r)) = kind.param_ranges(d).find(|(s, _)| s.role == role) else {
            return Err(CalcError::NoSuchParam { kind, what: flag });
        };
        let what = if role == ParamRole::Gain {
            "gamma"
        } else {
            "beta"
        };
        match spec.len {
            ParamLen::PerFeature => p[r].copy_from_slice(&expand(what, v, d)?),
            ParamLen::Scalar => {
                check_finite(what, v)?;
                if v.len() != 1 {
                    return Err(CalcError::BadLength {
                        what: "gamma (this kind's gain is one scalar)",
                        got: v.len(),
                        d: 1,
                    });
                }
                p[r.start] = v[0];
            }
        }
    }
    Ok(p)
}

/// Normalise one row. BatchNorm treats the vector as a batch of `d` rows of
/// one feature (its statistics are over the batch), so on a single vector it
/// computes what LayerNorm computes, with its gamma/beta taken as scalars.
///
/// With eps = 0 every normalizing kind is invariant to x -> 2^k x, which
/// is exact in floating point; a row far from unit scale (subnormal values
/// such as 1e-40, whose 1/rms overflows f32, or values near f32's maximum)
/// is first brought near 1 that way, so the output is finite and correct.
fn normalise(kind: NormKind, eps: f32, x: &[f32], params: &[f32]) -> Vec<f32> {
    let d = x.len();
    let mut y = vec![0.0; d];
    let max = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let far = !(2f32.powi(-60)..=2f32.powi(60)).contains(&max);
    let rescaled: Vec<f32>;
    let x = if eps == 0.0 && !kind.spec().elementwise && max > 0.0 && far {
        // -floor(log2 max), exactly: the binary exponent of max (normal
        // in f64 even where it is subnormal in f32).
        let k = 1023 - ((max as f64).to_bits() >> 52) as i32;
        // Two steps: 2^k alone may not be representable in f32.
        let (a, b) = (2f32.powi(k / 2), 2f32.powi(k - k / 2));
        rescaled = x.iter().map(|v| v * a * b).collect();
        &rescaled[..]
    } else {
        x
    };
    if kind == NormKind::BatchNorm {
        let mut bn = BatchNorm::new(1, eps);
        bn.forward_train(x, &[params[0], params[d]], &mut y);
    } else {
        let mut st = vec![0.0; norm::stats_len(1)];
        norm::forward(kind, d, eps, x, params, &mut y, &mut st);
    }
    y
}

/// Run the calculator.
pub fn calc(req: &CalcRequest) -> Result<CalcResult, CalcError> {
    let d = req.x.len();
    if d == 0 {
        return Err(CalcError::Empty);
    }
    if d > MAX_LEN {
        return Err(CalcError::TooLong(d, MAX_LEN));
    }
    check_finite("x", &req.x)?;
    let eps = req.eps.unwrap_or(req.kind.default_eps());
    if !(eps >= 0.0 && eps.is_finite()) {
        return Err(CalcError::BadEps(eps));
    }
    let params = params_for(req, d)?;
    match req.dtype {
        Some(_) if !crate::precision::supported(req.kind) => {
            return Err(CalcError::DtypeKind(req.kind))
        }
        None if req.naive => return Err(CalcError::NaiveWithoutDtype),
        _ => {}
    }
    let y = normalise(req.kind, eps, &req.x, &params);
    let st = vec_stats(&y);
    let transformed = if req.scale.is_some() || req.shift.is_some() {
        let (a, c) = (req.scale.unwrap_or(1.0), req.shift.unwrap_or(0.0));
        for (what, value) in [("scale", a), ("shift", c)] {
            if !value.is_finite() {
                return Err(CalcError::BadTransform { what, value });
            }
        }
        let tx: Vec<f32> = req.x.iter().map(|&v| a * v + c).collect();
        check_finite("scale * x + shift", &tx)?;
        let ty = normalise(req.kind, eps, &tx, &params);
        let max_abs_diff = y
            .iter()
            .zip(&ty)
            .fold(0f64, |m, (p, q)| m.max((p - q).abs() as f64));
        let ymax = y.iter().fold(1f64, |m, v| m.max(v.abs() as f64));
        Some(Transformed {
            scale: a,
            shift: c,
            input: tx,
            output: ty,
            max_abs_diff,
            unchanged: max_abs_diff <= 1e-5 * ymax,
        })
    } else {
        None
    };
    let low = req.dtype.map(|t| low_precision(req, t, eps, &params, &y));
    Ok(CalcResult {
        kind: req.kind.name().to_string(),
        d,
        eps,
        input: req.x.clone(),
        output: y,
        mean: st.mean,
        std: st.std,
        l2: st.l2,
        sqrt_d: (d as f64).sqrt(),
        transformed_output: transformed.as_ref().map(|t| t.output.clone()),
        unchanged: transformed.as_ref().map(|t| t.unchanged),
        transformed,
        low_precision: low,
    })
}

/// Parse a comma- (or space-) separated list of numbers; `what` names it in
/// errors.
pub fn parse_vector(what: &str, s: &str) -> std::result::Result<Vec<f32>, String> {
    // Commas separate values (spaces around them are fine); without
    // commas, whitespace does. An empty field (`1,,2`) is an error, not a
    // value silently dropped.
    let parts: Vec<&str> = if s.contains(',') {
        s.split(',').map(str::trim).collect()
    } else {
        s.split_whitespace().collect()
    };
    if parts.is_empty() || parts.iter().all(|p| p.is_empty()) {
        return Err(format!("{what} is empty"));
    }
    if let Some(i) = parts.iter().position(|p| p.is_empty()) {
        return Err(format!(
            "{what}: value {} of {} is empty (two commas in a row?)",
            i + 1,
            parts.len()
        ));
    }
    parts
        .iter()
        .map(|p| {
            p.parse::<f32>()
                .map_err(|_| format!("{what}: '{p}' is not a number"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(kind: NormKind, x: &[f32]) -> CalcResult {
        calc(&CalcRequest::new(kind, x.to_vec())).unwrap()
    }

    #[test]
    fn invariances_show_up_in_unchanged() {
        let x = [1.0, 2.0, 3.0, 6.0];
        for (kind, scale_ok, shift_ok) in [
            (NormKind::LayerNorm, true, true),
            (NormKind::RmsNorm, true, false),
            (NormKind::ZRmsNorm, true, false),
        ] {
            let mut r = CalcRequest::new(kind, x.to_vec());
            r.scale = Some(3.0);
            assert_eq!(calc(&r).unwrap().unchanged, Some(scale_ok), "{kind} x3");
            r.scale = None;
            r.shift = Some(2.0);
            assert_eq!(calc(&r).unwrap().unchanged, Some(shift_ok), "{kind} +2");
        }
    }

    #[test]
    fn output_statistics() {
        let r = run(NormKind::RmsNorm, &[1.0, 2.0, 3.0, 6.0]);
        assert!((r.l2 - 2.0).abs() < 1e-5, "rms output has norm sqrt(d)");
        let r = run(NormKind::LayerNorm, &[1.0, 2.0, 3.0, 6.0]);
        assert!(r.mean.abs() < 1e-6 && (r.std - 1.0).abs() < 1e-5);
        let r = run(NormKind::BatchNorm, &[1.0, 2.0, 3.0, 6.0]);
        assert!((r.output[0] + 1.069).abs() < 1e-3);
    }

    #[test]
    fn subnormal_and_huge_rows_with_eps_0_are_finite_and_right() {
        for kind in NormKind::ALL.into_iter().filter(|k| !k.spec().elementwise) {
            for (x, scale) in [
                (vec![1e-40f32, 3e-40], 1e40f64),
                (vec![1e-44f32, -3e-44, 2e-44], 1e44),
                (vec![3e38f32, -1e38, 2e38], 1e-38),
            ] {
                let mut r = CalcRequest::new(kind, x.clone());
                r.eps = Some(0.0);
                let got = calc(&r).unwrap().output;
                let unit: Vec<f32> = x.iter().map(|&v| (v as f64 * scale) as f32).collect();
                let mut r1 = CalcRequest::new(kind, unit);
                r1.eps = Some(0.0);
                let want = calc(&r1).unwrap().output;
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        g.is_finite() && (g - w).abs() <= 1e-3 * (1.0 + w.abs()),
                        "{kind}: {got:?} vs {want:?}"
                    );
                }
            }
        }
        // RMSNorm of [1e-40, 3e-40]: ~[0.447, 1.342].
        let mut r = CalcRequest::new(NormKind::RmsNorm, vec![1e-40, 3e-40]);
        r.eps = Some(0.0);
        let y = calc(&r).unwrap().output;
        assert!(
            (y[0] - 0.4472).abs() < 1e-3 && (y[1] - 1.3416).abs() < 1e-3,
            "{y:?}"
        );
    }

    #[test]
    fn bad_input_is_rejected() {
        assert_eq!(
            calc(&CalcRequest::new(NormKind::LayerNorm, vec![])).unwrap_err(),
            CalcError::Empty
        );
        assert!(matches!(
            calc(&CalcRequest::new(NormKind::LayerNorm, vec![1.0, f32::NAN])),
            Err(CalcError::NonFinite { index: 1, .. })
        ));
        let mut r = CalcRequest::new(NormKind::LayerNorm, vec![1.0, 2.0]);
        r.eps = Some(-1.0);
        assert_eq!(calc(&r).unwrap_err(), CalcError::BadEps(-1.0));
        let mut r = CalcRequest::new(NormKind::RmsNorm, vec![1.0, 2.0]);
        r.beta = Some(vec![1.0]);
        assert!(calc(&r)
            .unwrap_err()
            .to_string()
            .contains("rmsnorm has no bias"));
        let mut r = CalcRequest::new(NormKind::LayerNorm, vec![1.0, 2.0, 3.0]);
        r.gamma = Some(vec![1.0, 2.0]);
        assert!(matches!(
            calc(&r),
            Err(CalcError::BadLength { got: 2, d: 3, .. })
        ));
        assert!(parse_vector("--x", "1,2,,3")
            .unwrap_err()
            .contains("value 3 of 4 is empty"));
        assert!(parse_vector("--x", "1, 2,3").unwrap() == vec![1.0, 2.0, 3.0]);
        assert!(parse_vector("--x", "1 2 3").unwrap() == vec![1.0, 2.0, 3.0]);
        assert!(parse_vector("--x", "1,a").is_err());
        assert!(parse_vector("--x", " ").is_err());
    }
}
