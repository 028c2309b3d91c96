//! Plain, obviously-correct reference twins of every norm kernel, in f64
//! with two passes (mean, then centred variance). Slow and allocating on
//! purpose: tests compare the fused kernels against these, and nothing on a
//! hot path calls them.

use crate::norm::NormKind;

fn rstd_of(denom: f64) -> f64 {
    if denom > 0.0 {
        1.0 / denom.sqrt()
    } else if denom == 0.0 {
        0.0
    } else {
        f64::NAN
    }
}

fn gain(kind: NormKind, params: &[f32], d: usize, j: usize) -> f64 {
    kind.gain_multiplier(params, d, j)
}

/// A squashing function: u -> (f(u), f'(u)).
type Squash = fn(f64) -> (f64, f64);

/// A point-wise kind's `(alpha, s)` and its function with derivative.
fn pointwise(kind: NormKind, params: &[f32]) -> Option<(f64, f64, Squash)> {
    let tanh: Squash = |u| {
        let t = u.tanh();
        (t, 1.0 - t * t)
    };
    let erf: Squash = |u| {
        (
            libm::erf(u),
            2.0 / std::f64::consts::PI.sqrt() * (-u * u).exp(),
        )
    };
    match kind {
        NormKind::Dyt => Some((params[0] as f64, 0.0, tanh)),
        NormKind::Derf => Some((params[0] as f64, params[1] as f64, erf)),
        _ => None,
    }
}

/// Per-row normalised values `xhat` (before gain and bias) and the row's
/// `rstd` (for scalenorm: 1/max(‖x‖, eps), and whether it was clamped; for
/// the point-wise kinds xhat is f(alpha x + s)).
fn row_xhat(kind: NormKind, eps: f32, xr: &[f32], params: &[f32]) -> (Vec<f64>, f64, bool) {
    let n = xr.len() as f64;
    let x: Vec<f64> = xr.iter().map(|&v| v as f64).collect();
    match kind {
        NormKind::LayerNorm => {
            let mean = x.iter().sum::<f64>() / n;
            let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
            let r = rstd_of(var + eps as f64);
            (
                x.iter()
                    .map(|v| if r == 0.0 { 0.0 } else { (v - mean) * r })
                    .collect(),
                r,
                false,
            )
        }
        NormKind::RmsNorm | NormKind::ZRmsNorm => {
            let ms = x.iter().map(|v| v * v).sum::<f64>() / n;
            let r = rstd_of(ms + eps as f64);
            (
                x.iter()
                    .map(|v| if r == 0.0 { 0.0 } else { v * r })
                    .collect(),
                r,
                false,
            )
        }
        NormKind::ScaleNorm => {
            let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
            let clamped = norm <= eps as f64;
            let denom = if clamped { eps as f64 } else { norm };
            // 1/denom, with the same eps = 0 convention as rstd_of.
            let r = rstd_of(denom * denom);
            (
                x.iter()
                    .map(|v| if r == 0.0 { 0.0 } else { v * r })
                    .collect(),
                r,
                clamped,
            )
        }
        NormKind::None => (x, 1.0, false),
        NormKind::Dyt | NormKind::Derf => {
            let (alpha, s, f) = pointwise(kind, params).expect("a point-wise kind");
            (x.iter().map(|v| f(alpha * v + s).0).collect(), 1.0, false)
        }
        NormKind::BatchNorm => panic!("batchnorm is not row-wise: use batchnorm_forward_train"),
    }
}

/// Reference forward of a row-wise kind.
pub fn forward(kind: NormKind, d: usize, eps: f32, x: &[f32], params: &[f32]) -> Vec<f64> {
    let mut y = Vec::with_capacity(x.len());
    let bias = kind.param_range(crate::norm::ParamRole::Bias, d);
    for xr in x.chunks_exact(d) {
        let (xhat, _, _) = row_xhat(kind, eps, xr, params);
        for (j, h) in xhat.iter().enumerate() {
            let b = bias.as_ref().map_or(0.0, |r| params[r.start + j] as f64);
            y.push(h * gain(kind, params, d, j) + b);
        }
    }
    y
}

/// Reference backward of a row-wise kind: `(dx, dparams)` for upstream `dy`
/// (dparams in the layout of [`NormKind::num_params`]).
pub fn backward(
    kind: NormKind,
    d: usize,
    eps: f32,
    x: &[f32],
    dy: &[f32],
    params: &[f32],
) -> (Vec<f64>, Vec<f64>) {
    let mut dx = Vec::with_capacity(x.len());
    let mut dp = vec![0f64; kind.num_params(d)];
    let n = d as f64;
    for (xr, dyr) in x.chunks_exact(d).zip(dy.chunks_exact(d)) {
        let (xhat, r, clamped) = row_xhat(kind, eps, xr, params);
        let dyv: Vec<f64> = dyr.iter().map(|&v| v as f64).collect();
        let g: Vec<f64> = (0..d).map(|j| dyv[j] * gain(kind, params, d, j)).collect();
        match kind {
            NormKind::LayerNorm => {
                let mg = g.iter().sum::<f64>() / n;
                let mgx = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / n;
                for j in 0..d {
                    dx.push(r * (g[j] - mg - xhat[j] * mgx));
                    dp[j] += dyv[j] * xhat[j];
                    dp[d + j] += dyv[j];
                }
            }
            NormKind::RmsNorm | NormKind::ZRmsNorm => {
                let mgx = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / n;
                for j in 0..d {
                    dx.push(r * (g[j] - xhat[j] * mgx));
                    dp[j] += dyv[j] * xhat[j];
                }
            }
            NormKind::ScaleNorm => {
                let gs = params[0] as f64;
                let dyx: f64 = dyv.iter().zip(xr).map(|(a, &b)| a * b as f64).sum();
                for j in 0..d {
                    let corr = if clamped {
                        0.0
                    } else {
                        xr[j] as f64 * r * r * dyx
                    };
                    dx.push(gs * r * (dyv[j] - corr));
                }
                dp[0] += r * dyx;
            }
            NormKind::None => dx.extend_from_slice(&dyv),
            NormKind::Dyt | NormKind::Derf => {
                let (alpha, s, f) = pointwise(kind, params).expect("a point-wise kind");
                let ig = kind
                    .param_range(crate::norm::ParamRole::Gain, d)
                    .expect("gamma")
                    .start;
                for j in 0..d {
                    let xv = xr[j] as f64;
                    let gf = g[j] * f(alpha * xv + s).1;
                    dx.push(alpha * gf);
                    dp[0] += gf * xv;
                    if kind == NormKind::Derf {
                        dp[1] += gf;
                    }
                    dp[ig + j] += dyv[j] * xhat[j];
                    dp[ig + d + j] += dyv[j];
                }
            }
            NormKind::BatchNorm => unreachable!(),
        }
    }
    (dx, dp)
}

/// Per-feature batch mean and rstd over rows.
fn batch_stats(d: usize, eps: f32, x: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let n = (x.len() / d) as f64;
    let mut mean = vec![0f64; d];
    for xr in x.chunks_exact(d) {
        for j in 0..d {
            mean[j] += xr[j] as f64 / n;
        }
    }
    let mut var = vec![0f64; d];
    for xr in x.chunks_exact(d) {
        for j in 0..d {
            let c = xr[j] as f64 - mean[j];
            var[j] += c * c / n;
        }
    }
    (mean, var.iter().map(|v| rstd_of(v + eps as f64)).collect())
}

/// Reference training-mode BatchNorm forward.
pub fn batchnorm_forward_train(d: usize, eps: f32, x: &[f32], params: &[f32]) -> Vec<f64> {
    let (mean, rstd) = batch_stats(d, eps, x);
    let mut y = Vec::with_capacity(x.len());
    for xr in x.chunks_exact(d) {
        for j in 0..d {
            y.push((xr[j] as f64 - mean[j]) * rstd[j] * params[j] as f64 + params[d + j] as f64);
        }
    }
    y
}

/// Reference training-mode BatchNorm backward: `(dx, [dgamma, dbeta])`.
pub fn batchnorm_backward(
    d: usize,
    eps: f32,
    x: &[f32],
    dy: &[f32],
    params: &[f32],
) -> (Vec<f64>, Vec<f64>) {
    let rows = x.len() / d;
    let n = rows as f64;
    let (mean, rstd) = batch_stats(d, eps, x);
    let xhat = |i: usize, j: usize| (x[i * d + j] as f64 - mean[j]) * rstd[j];
    let mut dp = vec![0f64; 2 * d];
    let mut mg = vec![0f64; d];
    let mut mgx = vec![0f64; d];
    for i in 0..rows {
        for j in 0..d {
            let g = dy[i * d + j] as f64 * params[j] as f64;
            mg[j] += g / n;
            mgx[j] += g * xhat(i, j) / n;
            dp[j] += dy[i * d + j] as f64 * xhat(i, j);
            dp[d + j] += dy[i * d + j] as f64;
        }
    }
    let mut dx = Vec::with_capacity(x.len());
    for i in 0..rows {
        for j in 0..d {
            let g = dy[i * d + j] as f64 * params[j] as f64;
            dx.push(rstd[j] * (g - mg[j] - xhat(i, j) * mgx[j]));
        }
    }
    (dx, dp)
}
