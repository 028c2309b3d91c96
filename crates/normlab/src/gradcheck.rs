//! Finite-difference gradient checks of whole models: for every parameter
//! tensor, the analytic directional derivative `g . u` (u a random
//! direction on that tensor) against the central difference
//! `(L(p + h u) - L(p - h u)) / 2h` of the mean loss. A directional check per
//! tensor sums many coordinates, so it stays far above f32 rounding noise
//! while still pinning every tensor's gradient.

use crate::kernels::rng::Rng;
use crate::model::{Model, Workspace};
use crate::params::sum_squares;

/// One tensor's check.
#[derive(Clone, Debug)]
pub struct TensorCheck {
    /// Tensor name.
    pub name: String,
    /// g . u from backward.
    pub analytic: f64,
    /// Central difference.
    pub numeric: f64,
    /// |analytic - numeric| / max(|analytic|, |numeric|, floor).
    pub rel_err: f64,
}

/// Mean loss of a forward pass.
pub fn mean_loss(model: &Model, params: &[f32], ws: &mut Workspace) -> f64 {
    model.forward(params, ws) / ws.rows() as f64
}

/// Check every tensor of `model` at `params` on the batch in `ws`.
/// `floor` is the smallest derivative magnitude treated as non-zero.
pub fn check_model(
    model: &Model,
    params: &[f32],
    ws: &mut Workspace,
    seed: u64,
    floor: f64,
) -> Vec<TensorCheck> {
    let rows = ws.rows();
    model.forward(params, ws);
    model.backward(params, ws, 1.0 / rows as f32);
    let grads = ws.grads.clone();
    let mut p = params.to_vec();
    let mut out = Vec::new();
    for t in &model.layout.tensors {
        let r = t.range.clone();
        // Direction: N(0,1) scaled to the tensor's typical magnitude.
        let scale = ((sum_squares(&params[r.clone()]) / r.len() as f64).sqrt()).max(0.02) as f32;
        let mut u = vec![0f32; r.len()];
        Rng::derive(seed, &t.name).fill_normal(&mut u, 0.0, scale);
        let analytic: f64 = grads[r.clone()]
            .iter()
            .zip(&u)
            .map(|(&g, &v)| g as f64 * v as f64)
            .sum();
        // The 4-point stencil's truncation error is O(h^4); the step moves
        // each coordinate by 0.5%..2% of its scale: small where the
        // derivative is large (curvature dominates), larger where it is
        // small (f32 rounding noise in the loss dominates).
        let h = (1e-4 / analytic.abs().max(1e-12)).clamp(5e-3, 2e-2) as f32;
        let mut eval = |sign: f32| {
            for (dst, (&base, &dir)) in p[r.clone()]
                .iter_mut()
                .zip(params[r.clone()].iter().zip(&u))
            {
                *dst = base + sign * h * dir;
            }
            let l = mean_loss(model, &p, ws);
            p[r.clone()].copy_from_slice(&params[r.clone()]);
            l
        };
        let d1 = eval(1.0) - eval(-1.0);
        let d2 = eval(2.0) - eval(-2.0);
        let numeric = (8.0 * d1 - d2) / (12.0 * h as f64);
        let denom = analytic.abs().max(numeric.abs()).max(floor);
        out.push(TensorCheck {
            name: t.name.clone(),
            analytic,
            numeric,
            rel_err: (analytic - numeric).abs() / denom,
        });
    }
    out
}
