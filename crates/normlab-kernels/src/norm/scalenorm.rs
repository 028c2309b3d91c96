//! ScaleNorm (Nguyen & Salazar 2019): `y = g * x / max(‖x‖, eps)` with one
//! learnable scalar g per norm (init sqrt(d)).
//!
//! Backward, with r = 1/max(‖x‖, eps):
//!
//! ```text
//! not clamped: dx = g * r * (dy - x * r^2 * (dy . x))
//! clamped:     dx = g * r * dy          (the norm is the constant eps)
//! dg += r * (dy . x)
//! ```

use crate::norm::STATS;
use crate::norm::{GainForm, KindSpec, ParamInit, ParamLen, ParamRole, ParamSpec};
use crate::simd::{ahead, dot, sum_squares};

/// ScaleNorm's description: one scalar g (init sqrt(d)), eps 1e-5.
pub const SPEC: KindSpec = KindSpec {
    name: "scalenorm",
    aliases: &["scale_norm"],
    formula: "y = g * x / max(|x|, eps)",
    default_eps: 1e-5,
    params: &[ParamSpec {
        suffix: "weight",
        role: ParamRole::Gain,
        len: ParamLen::Scalar,
        init: ParamInit::SqrtD,
    }],
    gain: GainForm::ScalarOnL2,
    row_wise: true,
    elementwise: false,
};

crate::multiversion! {
    /// Forward over whole rows.
    pub fn forward_rows(d: usize, eps: f32, g: f32, x: &[f32], y: &mut [f32], stats: &mut [f32]) {
        for (r, ((xr, yr), st)) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).zip(stats.chunks_exact_mut(STATS)).enumerate() {
            let norm = sum_squares(xr, ahead(x, r * d)).sqrt();
            let clamped = norm <= eps as f64;
            let denom = if clamped { eps as f64 } else { norm };
            let inv = if denom > 0.0 { (1.0 / denom) as f32 } else if denom == 0.0 { 0.0 } else { f32::NAN };
            st[0] = if clamped { 1.0 } else { 0.0 };
            st[1] = 0.0;
            st[2] = inv;
            let s = g * inv;
            for (yv, &xv) in yr.iter_mut().zip(xr) {
                *yv = xv * s;
            }
        }
    }
}

crate::multiversion! {
    /// Backward over whole rows; `pg` is the chunk's 1-element partial dg.
    pub fn backward_rows(d: usize, g: f32, x: &[f32], dy: &[f32], stats: &[f32], dx: &mut [f32], pg: &mut [f32]) {
        let mut acc = 0f64;
        for (r, (((xr, dyr), st), dxr)) in x.chunks_exact(d).zip(dy.chunks_exact(d)).zip(stats.chunks_exact(STATS)).zip(dx.chunks_exact_mut(d)).enumerate() {
            let (clamped, inv) = (st[0] != 0.0, st[2]);
            let dyx = dot(dyr, xr, ahead(dy, r * d), ahead(x, r * d));
            acc += inv as f64 * dyx;
            let a = g * inv;
            let b = if clamped { 0.0 } else { (dyx * (inv as f64) * (inv as f64)) as f32 };
            for ((dxv, &xv), &dyv) in dxr.iter_mut().zip(xr).zip(dyr) {
                *dxv = a * (dyv - xv * b);
            }
        }
        pg[0] += acc as f32;
    }
}
