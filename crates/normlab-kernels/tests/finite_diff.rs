//! Finite-difference gradient checks, for every kind, of dx and of every
//! parameter gradient: (a) the f64 reference backward against central
//! differences of the f64 reference forward (tight), and (b) the fused f32
//! backward against central differences of the fused f32 forward (loose,
//! because the forward itself is only f32-accurate).
//!
//! The loss is L = sum(dy * y) for a fixed random dy, so dL/dy = dy.

use normlab_kernels::norm::{self, BatchNorm, NormKind};
use normlab_kernels::reference;
use normlab_kernels::rng::Rng;

fn loss_ref(kind: NormKind, d: usize, eps: f32, x: &[f32], p: &[f32], dy: &[f32]) -> f64 {
    let y = if kind == NormKind::BatchNorm {
        reference::batchnorm_forward_train(d, eps, x, p)
    } else {
        reference::forward(kind, d, eps, x, p)
    };
    y.iter().zip(dy).map(|(a, &b)| a * b as f64).sum()
}

fn loss_fused(kind: NormKind, d: usize, eps: f32, x: &[f32], p: &[f32], dy: &[f32]) -> f64 {
    let mut y = vec![0.0; x.len()];
    if kind == NormKind::BatchNorm {
        BatchNorm::new(d, eps).forward_train(x, p, &mut y);
    } else {
        let mut st = vec![0.0; norm::stats_len(x.len() / d)];
        norm::forward(kind, d, eps, x, p, &mut y, &mut st);
    }
    y.iter().zip(dy).map(|(&a, &b)| a as f64 * b as f64).sum()
}

fn grads_fused(
    kind: NormKind,
    d: usize,
    eps: f32,
    x: &[f32],
    p: &[f32],
    dy: &[f32],
) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; x.len()];
    let mut dx = vec![0.0; x.len()];
    let mut dp = vec![0.0; p.len()];
    if kind == NormKind::BatchNorm {
        let mut bn = BatchNorm::new(d, eps);
        bn.forward_train(x, p, &mut y);
        bn.backward(x, dy, p, &mut dx, &mut dp);
    } else {
        let rows = x.len() / d;
        let mut st = vec![0.0; norm::stats_len(rows)];
        norm::forward(kind, d, eps, x, p, &mut y, &mut st);
        let mut scratch = vec![0.0; norm::backward_scratch_len(kind, rows, d)];
        norm::backward(kind, d, x, dy, p, &st, &mut dx, &mut dp, &mut scratch);
    }
    (
        dx.iter().map(|&v| v as f64).collect(),
        dp.iter().map(|&v| v as f64).collect(),
    )
}

/// Central difference of `f` along coordinate `i` of `v` (x or params),
/// dividing by the step actually taken after rounding to f32.
fn central<F: Fn(&[f32]) -> f64>(v: &[f32], i: usize, h: f32, f: F) -> f64 {
    let mut a = v.to_vec();
    let mut b = v.to_vec();
    a[i] += h;
    b[i] -= h;
    (f(&a) - f(&b)) / (a[i] as f64 - b[i] as f64)
}

fn check_kind(kind: NormKind, d: usize, rows: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let x = rng.normal_vec(rows * d, 0.3, 1.0);
    let dy = rng.normal_vec(rows * d, 0.0, 1.0);
    let mut p = vec![0.0; kind.num_params(d)];
    kind.init_params(d, &mut p);
    for v in p.iter_mut() {
        *v += 0.2 * rng.normal() as f32;
    }
    let eps = kind.default_eps();
    let (dx_ref, dp_ref) = if kind == NormKind::BatchNorm {
        reference::batchnorm_backward(d, eps, &x, &dy, &p)
    } else {
        reference::backward(kind, d, eps, &x, &dy, &p)
    };
    let (dx_fused, dp_fused) = grads_fused(kind, d, eps, &x, &p, &dy);
    let scale = dx_ref
        .iter()
        .chain(&dp_ref)
        .fold(1f64, |m, v| m.max(v.abs()));
    for i in 0..x.len() {
        let fd_ref = central(&x, i, 1e-3, |xx| loss_ref(kind, d, eps, xx, &p, &dy));
        assert!(
            (fd_ref - dx_ref[i]).abs() <= 2e-4 * scale,
            "{kind} d={d}: reference dx[{i}] {} vs fd {fd_ref}",
            dx_ref[i]
        );
        let fd = central(&x, i, 1e-2, |xx| loss_fused(kind, d, eps, xx, &p, &dy));
        assert!(
            (fd - dx_fused[i]).abs() <= 5e-3 * scale,
            "{kind} d={d}: fused dx[{i}] {} vs fd {fd}",
            dx_fused[i]
        );
    }
    for i in 0..p.len() {
        let fd_ref = central(&p, i, 1e-3, |pp| loss_ref(kind, d, eps, &x, pp, &dy));
        assert!(
            (fd_ref - dp_ref[i]).abs() <= 2e-4 * scale,
            "{kind} d={d}: reference dparam[{i}] {} vs fd {fd_ref}",
            dp_ref[i]
        );
        let fd = central(&p, i, 1e-2, |pp| loss_fused(kind, d, eps, &x, pp, &dy));
        assert!(
            (fd - dp_fused[i]).abs() <= 5e-3 * scale,
            "{kind} d={d}: fused dparam[{i}] {} vs fd {fd}",
            dp_fused[i]
        );
    }
}

#[test]
fn every_kind_passes_finite_differences() {
    for kind in NormKind::ALL {
        for (i, &d) in [1usize, 2, 5, 16].iter().enumerate() {
            // d = 1 included: LayerNorm's output is then beta whatever x is.
            let rows = if kind == NormKind::BatchNorm { 6 } else { 3 };
            check_kind(kind, d, rows, 100 + i as u64);
        }
    }
}

#[test]
fn scalenorm_clamped_branch_passes_finite_differences() {
    // Rows whose norm is below eps take the clamped branch (norm := eps).
    let kind = NormKind::ScaleNorm;
    let (d, eps) = (4, 1.0f32);
    let x = [0.1f32, -0.2, 0.05, 0.3];
    let dy = [0.7f32, -0.1, 0.4, 0.2];
    let p = [2.0f32];
    let (dx_ref, dp_ref) = reference::backward(kind, d, eps, &x, &dy, &p);
    let (dx, dp) = grads_fused(kind, d, eps, &x, &p, &dy);
    for i in 0..d {
        let fd = central(&x, i, 1e-3, |xx| loss_ref(kind, d, eps, xx, &p, &dy));
        assert!((fd - dx_ref[i]).abs() < 1e-5 && (dx[i] - dx_ref[i]).abs() < 1e-6);
    }
    let fd = central(&p, 0, 1e-3, |pp| loss_ref(kind, d, eps, &x, pp, &dy));
    assert!((fd - dp_ref[0]).abs() < 1e-5 && (dp[0] - dp_ref[0]).abs() < 1e-6);
}
