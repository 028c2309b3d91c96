//! Property tests of the norms' invariances: LayerNorm under a*x + c
//! (a > 0), RMSNorm under a*x, an RMSNorm output's norm sqrt(d).

use normlab_kernels::norm::{self, NormKind};
use proptest::prelude::*;

fn run(kind: NormKind, eps: f32, x: &[f32]) -> Vec<f32> {
    let d = x.len();
    let mut p = vec![0.0; kind.num_params(d)];
    kind.init_params(d, &mut p);
    let mut y = vec![0.0; d];
    let mut st = vec![0.0; norm::stats_len(1)];
    norm::forward(kind, d, eps, x, &p, &mut y, &mut st);
    y
}

fn std_of(x: &[f32]) -> f64 {
    let n = x.len() as f64;
    let m = x.iter().map(|&v| v as f64).sum::<f64>() / n;
    (x.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / n).sqrt()
}

/// Rows of 2..200 values in [-10, 10] that are not (nearly) constant.
fn row() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-10.0f32..10.0, 2..200).prop_filter("not constant", |x| std_of(x) > 0.1)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0.0, |m, (x, y)| m.max((x - y).abs()))
}

proptest! {
    #[test]
    fn layernorm_invariant_to_affine_maps(x in row(), a in 0.1f32..10.0, c in -100.0f32..100.0) {
        let t: Vec<f32> = x.iter().map(|&v| a * v + c).collect();
        let y = run(NormKind::LayerNorm, 0.0, &x);
        let yt = run(NormKind::LayerNorm, 0.0, &t);
        // a*x + c rounds to f32: relative error ~ ulp(|c| + 10a) / (a * std).
        let tol = 1e-4 + 2e-7 * (c.abs() + 10.0 * a) as f64 / (a as f64 * std_of(&x));
        prop_assert!((max_diff(&y, &yt) as f64) < tol * 4.0, "diff {}", max_diff(&y, &yt));
    }

    #[test]
    fn rmsnorm_invariant_to_scaling_not_to_shift(x in row(), a in 0.1f32..10.0, c in 1.0f32..50.0) {
        let y = run(NormKind::RmsNorm, 0.0, &x);
        let scaled: Vec<f32> = x.iter().map(|&v| a * v).collect();
        prop_assert!(max_diff(&y, &run(NormKind::RmsNorm, 0.0, &scaled)) < 1e-5);
        let shifted: Vec<f32> = x.iter().map(|&v| v + c).collect();
        prop_assert!(max_diff(&y, &run(NormKind::RmsNorm, 0.0, &shifted)) > 1e-3);
    }

    #[test]
    fn rmsnorm_unit_gain_output_has_norm_sqrt_d(x in row()) {
        for kind in [NormKind::RmsNorm, NormKind::ZRmsNorm] {
            let y = run(kind, kind.default_eps(), &x);
            let l2 = y.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
            let want = (x.len() as f64).sqrt();
            prop_assert!((l2 - want).abs() < 1e-4 * want, "{kind}: {l2} vs {want}");
        }
    }

    #[test]
    fn layernorm_output_has_mean_0_std_1(x in row()) {
        let y = run(NormKind::LayerNorm, 0.0, &x);
        let n = y.len() as f64;
        let mean = y.iter().map(|&v| v as f64).sum::<f64>() / n;
        prop_assert!(mean.abs() < 1e-5, "mean {mean}");
        prop_assert!((std_of(&y) - 1.0).abs() < 1e-5, "std {}", std_of(&y));
    }
}
