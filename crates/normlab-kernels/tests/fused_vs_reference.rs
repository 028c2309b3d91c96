//! Fused kernels against the f64 reference twins on random and adversarial
//! rows, at the sizes of the kernels issue (d = 1 .. 65536); plus
//! bit-identity across thread counts and instruction-set levels.

use normlab_kernels::norm::{self, BatchNorm, GainForm, NormKind, ParamRole};
use normlab_kernels::reference;
use normlab_kernels::rng::Rng;
use normlab_kernels::simd;

/// Every kind usable in a model (BatchNorm has its own tests below).
fn row_kinds() -> Vec<NormKind> {
    NormKind::row_wise().collect()
}

/// Parameters whose gain multiplies the normalised value by exactly 1 (and
/// biases 0): the reference forward then returns the normalised value.
fn unit_params(kind: NormKind, d: usize) -> Vec<f32> {
    let mut u = vec![0.0; kind.num_params(d)];
    for (p, r) in kind.param_ranges(d) {
        u[r].fill(match (p.role, kind.spec().gain) {
            (ParamRole::Gain, GainForm::PerFeature { offset }) => 1.0 - offset,
            (ParamRole::Gain, _) => 1.0,
            (ParamRole::Bias, _) => 0.0,
            // The point-wise kinds keep their own slope and shift.
            (ParamRole::Slope | ParamRole::Shift, _) => p.init_value(d),
        });
    }
    u
}

/// Rows of one shape: random, shifted, huge, tiny, constant, zero, offset.
fn adversarial_rows(d: usize, rng: &mut Rng) -> Vec<(&'static str, Vec<f32>)> {
    vec![
        ("normal", rng.normal_vec(d, 0.0, 1.0)),
        ("shifted", rng.normal_vec(d, 1.5, 3.0)),
        ("huge", rng.normal_vec(d, 0.0, 1e18)),
        ("tiny", rng.normal_vec(d, 0.0, 1e-20)),
        ("constant", vec![3.7; d]),
        ("zero", vec![0.0; d]),
        (
            "offset",
            (0..d).map(|_| 1.0e4 + rng.normal() as f32 * 0.5).collect(),
        ),
    ]
}

fn random_params(kind: NormKind, d: usize, rng: &mut Rng) -> Vec<f32> {
    let mut p = vec![0.0; kind.num_params(d)];
    kind.init_params(d, &mut p);
    for v in p.iter_mut() {
        *v += 0.3 * rng.normal() as f32;
    }
    p
}

fn run_fused(
    kind: NormKind,
    d: usize,
    eps: f32,
    x: &[f32],
    p: &[f32],
    dy: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let rows = x.len() / d;
    let mut y = vec![0.0; x.len()];
    let mut stats = vec![0.0; norm::stats_len(rows)];
    norm::forward(kind, d, eps, x, p, &mut y, &mut stats);
    let mut dx = vec![0.0; x.len()];
    let mut dp = vec![0.0; p.len()];
    let mut scratch = vec![0.0; norm::backward_scratch_len(kind, rows, d)];
    norm::backward(kind, d, x, dy, p, &stats, &mut dx, &mut dp, &mut scratch);
    (y, dx, dp)
}

fn close(a: f32, b: f64, scale: f64, tol: f64) -> bool {
    if b.is_nan() {
        return a.is_nan();
    }
    ((a as f64) - b).abs() <= tol * scale
}

/// Compare one row set of one kind: forward, dx and parameter gradients,
/// each against a tolerance scaled by the size of the terms it sums.
fn check(kind: NormKind, d: usize, eps: f32, name: &str, x: &[f32], rng: &mut Rng) {
    let p = random_params(kind, d, rng);
    let dy = rng.normal_vec(x.len(), 0.0, 1.0);
    let (y, dx, dp) = run_fused(kind, d, eps, x, &p, &dy);
    let yr = reference::forward(kind, d, eps, x, &p);
    let (dxr, dpr) = reference::backward(kind, d, eps, x, &dy, &p);
    let tol = 2e-5 * (1.0 + (d as f64).log2() / 4.0);
    let rows = x.len() / d;
    // Scale of y: |gain| * |xhat| + |bias| <= (|gain|+|bias|) * max|xhat|.
    let xhat = reference::forward(kind, d, eps, x, &unit_params(kind, d));
    let pmax = (0..d)
        .map(|j| kind.gain_multiplier(&p, d, j).abs())
        .chain(p.iter().map(|v| v.abs() as f64))
        .fold(1f64, f64::max);
    for r in 0..rows {
        let row = r * d..(r + 1) * d;
        let hmax = xhat[row.clone()].iter().fold(0f64, |m, v| m.max(v.abs()));
        let dxmax = dxr[row.clone()].iter().fold(0f64, |m, v| m.max(v.abs()));
        let rstd_scale = {
            // |dx| is bounded by rstd * |g| * (1 + ...); use the reference's own magnitudes.
            let gmax = dy[row.clone()]
                .iter()
                .fold(0f64, |m, v| m.max(v.abs() as f64))
                * pmax;
            // xhat = rstd * (x - centre) for every kind: rstd is the ratio of
            // the ranges (or of the largest magnitudes on a constant row).
            let range = |v: &mut dyn Iterator<Item = f64>| {
                v.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), t| {
                    (a.min(t), b.max(t))
                })
            };
            let (xlo, xhi) = range(&mut x[row.clone()].iter().map(|&v| v as f64));
            let (hlo, hhi) = range(&mut xhat[row.clone()].iter().copied());
            let r = if xhi > xlo {
                (hhi - hlo) / (xhi - xlo)
            } else {
                hmax / xlo.abs().max(f64::MIN_POSITIVE)
            };
            (r * gmax * 4.0).max(dxmax)
        };
        for j in row.clone() {
            assert!(
                close(y[j], yr[j], pmax * (1.0 + hmax), tol),
                "{kind} d={d} eps={eps} {name} y[{j}] {} vs {} x={} p0={}",
                y[j],
                yr[j],
                x[j],
                p[0]
            );
            assert!(
                close(dx[j], dxr[j], rstd_scale, tol * 5.0),
                "{kind} d={d} eps={eps} {name} dx[{j}] {} vs {} (scale {rstd_scale})",
                dx[j],
                dxr[j]
            );
        }
    }
    // Parameter gradients sum dy * xhat over rows.
    let dyabs: f64 = dy.iter().map(|v| v.abs() as f64).sum::<f64>() / d as f64;
    let hmax_all = xhat
        .iter()
        .fold(1f64, |m, v| if v.is_nan() { m } else { m.max(v.abs()) });
    for (j, (&a, &b)) in dp.iter().zip(&dpr).enumerate() {
        // A scalar gain sums over all d features of every row.
        let per = if kind.spec().gain == GainForm::ScalarOnL2 {
            d as f64
        } else {
            1.0
        };
        let scale = (dyabs * hmax_all * per).max(1.0);
        assert!(
            close(a, b, scale, tol * 5.0),
            "{kind} d={d} {name} dparam[{j}] {a} vs {b}"
        );
    }
}

#[test]
fn row_kinds_match_reference_on_adversarial_rows() {
    let mut rng = Rng::new(42);
    for &d in &[1usize, 2, 3, 7, 64, 4097, 65536] {
        for kind in row_kinds() {
            for (name, x) in adversarial_rows(d, &mut rng) {
                for eps in [kind.default_eps(), 0.0] {
                    check(kind, d, eps, name, &x, &mut rng);
                }
            }
        }
    }
}

#[test]
fn many_rows_across_chunks_match_reference() {
    // Enough rows for several chunks and the parallel path.
    let mut rng = Rng::new(5);
    for &(rows, d) in &[(600usize, 257usize), (3000, 64), (70, 4097)] {
        let x = rng.normal_vec(rows * d, 0.5, 2.0);
        for kind in row_kinds() {
            check(kind, d, kind.default_eps(), "many", &x, &mut rng);
        }
    }
}

#[test]
fn nan_poisons_only_its_row() {
    let d = 37;
    let mut rng = Rng::new(9);
    let mut x = rng.normal_vec(3 * d, 0.0, 1.0);
    x[d + 5] = f32::NAN;
    for kind in row_kinds() {
        if kind.spec().elementwise {
            continue;
        }
        let p = random_params(kind, d, &mut rng);
        let dy = rng.normal_vec(x.len(), 0.0, 1.0);
        let (y, dx, _) = run_fused(kind, d, kind.default_eps(), &x, &p, &dy);
        for r in 0..3 {
            let row = &y[r * d..(r + 1) * d];
            let drow = &dx[r * d..(r + 1) * d];
            if r == 1 {
                assert!(
                    row.iter().all(|v| v.is_nan()),
                    "{kind}: NaN row should be NaN"
                );
            } else {
                assert!(
                    row.iter().chain(drow).all(|v| v.is_finite()),
                    "{kind}: row {r} should be finite"
                );
            }
        }
    }
}

#[test]
fn zero_row_with_zero_eps_is_finite_and_documented() {
    let d = 8;
    let x = vec![0.0f32; d];
    for kind in row_kinds() {
        let mut p = vec![0.0; kind.num_params(d)];
        kind.init_params(d, &mut p);
        let dy = vec![1.0f32; d];
        let (y, dx, dp) = run_fused(kind, d, 0.0, &x, &p, &dy);
        assert!(
            y.iter().chain(&dx).chain(&dp).all(|v| v.is_finite()),
            "{kind}"
        );
        if !kind.spec().elementwise {
            assert!(y.iter().all(|&v| v == 0.0), "{kind}: zero row gives zeros");
        }
    }
}

#[test]
fn worked_example_from_spec() {
    let x = [1.0f32, 2.0, 3.0, 6.0];
    let ln = [-1.069f32, -0.535, 0.0, 1.604];
    let rms = [0.283f32, 0.566, 0.849, 1.697];
    for (kind, want) in [(NormKind::LayerNorm, ln), (NormKind::RmsNorm, rms)] {
        let mut p = vec![0.0; kind.num_params(4)];
        kind.init_params(4, &mut p);
        let (y, _, _) = run_fused(kind, 4, kind.default_eps(), &x, &p, &[0.0; 4]);
        for (a, b) in y.iter().zip(want) {
            assert!((a - b).abs() < 6e-4, "{kind}: {y:?}");
        }
    }
}

fn run_bits(kind: NormKind, d: usize, x: &[f32], p: &[f32], dy: &[f32]) -> Vec<u32> {
    let (y, dx, dp) = run_fused(kind, d, kind.default_eps(), x, p, dy);
    y.iter()
        .chain(&dx)
        .chain(&dp)
        .map(|v| v.to_bits())
        .collect()
}

#[test]
fn bit_identical_for_1_and_2_threads() {
    let mut rng = Rng::new(11);
    let (rows, d) = (1500, 300);
    let x = rng.normal_vec(rows * d, 0.2, 1.3);
    let dy = rng.normal_vec(rows * d, 0.0, 1.0);
    assert!(norm::Chunks::new(rows, d).count > 2);
    for kind in row_kinds() {
        let p = random_params(kind, d, &mut rng);
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let two = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let a = one.install(|| run_bits(kind, d, &x, &p, &dy));
        let b = two.install(|| run_bits(kind, d, &x, &p, &dy));
        assert!(a == b, "{kind}: results differ between 1 and 2 threads");
    }
}

#[test]
fn sequential_chunks_give_the_same_bits() {
    let mut rng = Rng::new(12);
    let (rows, d) = (1000, 200);
    let x = rng.normal_vec(rows * d, -0.3, 1.1);
    let dy = rng.normal_vec(rows * d, 0.0, 1.0);
    assert!(norm::Chunks::new(rows, d).count > 2);
    let two = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    for kind in row_kinds() {
        let p = random_params(kind, d, &mut rng);
        let par = two.install(|| run_bits(kind, d, &x, &p, &dy));
        let seq = two.install(|| norm::sequential(|| run_bits(kind, d, &x, &p, &dy)));
        assert!(par == seq, "{kind}: sequential chunks differ");
    }
}

#[test]
fn bit_identical_across_simd_levels() {
    let mut rng = Rng::new(12);
    // (33 rows of 2048: chunks of 32 rows and of 1, whose row is the
    // chunk's first and last.)
    for (rows, d) in [(40, 1031), (33, 2048)] {
        bit_identical_across_simd_levels_at(&mut rng, rows, d);
    }
}

fn bit_identical_across_simd_levels_at(rng: &mut Rng, rows: usize, d: usize) {
    let x = rng.normal_vec(rows * d, -0.4, 2.0);
    let dy = rng.normal_vec(rows * d, 0.0, 1.0);
    let best = simd::detected_level();
    for kind in row_kinds() {
        let p = random_params(kind, d, rng);
        let mut results = Vec::new();
        for lvl in [
            simd::Level::Generic,
            simd::Level::Avx2,
            simd::Level::Avx512,
            simd::Level::Avx512Bf16,
        ] {
            if lvl <= best {
                simd::set_level(lvl);
                results.push((lvl, run_bits(kind, d, &x, &p, &dy)));
            }
        }
        simd::set_level(best);
        for (lvl, r) in &results[1..] {
            assert!(
                r == &results[0].1,
                "{kind}: {} differs from generic",
                lvl.name()
            );
        }
    }
}

#[test]
fn batchnorm_matches_reference_and_updates_running_stats() {
    let mut rng = Rng::new(3);
    for &(rows, d) in &[(1usize, 5usize), (2, 1), (64, 33), (300, 7)] {
        let x = rng.normal_vec(rows * d, 2.0, 3.0);
        let dy = rng.normal_vec(rows * d, 0.0, 1.0);
        let p = random_params(NormKind::BatchNorm, d, &mut rng);
        let mut bn = BatchNorm::new(d, 1e-5);
        let mut y = vec![0.0; x.len()];
        bn.forward_train(&x, &p, &mut y);
        let yr = reference::batchnorm_forward_train(d, 1e-5, &x, &p);
        for (a, b) in y.iter().zip(&yr) {
            assert!(close(*a, *b, 1.0 + b.abs(), 1e-5), "bn y {a} vs {b}");
        }
        let mut dx = vec![0.0; x.len()];
        let mut dp = vec![0.0; p.len()];
        bn.backward(&x, &dy, &p, &mut dx, &mut dp);
        let (dxr, dpr) = reference::batchnorm_backward(d, 1e-5, &x, &dy, &p);
        for (a, b) in dx.iter().zip(&dxr) {
            assert!(close(*a, *b, 1.0, 1e-4), "bn dx {a} vs {b}");
        }
        for (a, b) in dp.iter().zip(&dpr) {
            assert!(close(*a, *b, rows as f64, 1e-5), "bn dp {a} vs {b}");
        }
        // Running mean moved 10% of the way toward the batch mean (init 0).
        let mean0: f64 = (0..rows).map(|r| x[r * d] as f64).sum::<f64>() / rows as f64;
        assert!((bn.running_mean[0] as f64 - 0.1 * mean0).abs() < 1e-4);
    }
}

#[test]
fn batchnorm_eval_uses_running_stats_and_rows_are_independent() {
    let d = 4;
    let mut bn = BatchNorm::new(d, 1e-5);
    let p = {
        let mut p = vec![0.0; 2 * d];
        NormKind::BatchNorm.init_params(d, &mut p);
        p
    };
    let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
    let mut y = vec![0.0; 8];
    bn.forward_eval(&x, &p, &mut y);
    // Fresh running stats (mean 0, var 1): eval is (nearly) the identity.
    for (a, b) in y.iter().zip(&x) {
        assert!((a - b).abs() < 1e-4);
    }
    let mut y1 = vec![0.0; 4];
    bn.forward_eval(&x[..4], &p, &mut y1);
    assert_eq!(&y[..4], &y1[..]);
}

#[test]
fn streaming_stores_give_the_same_bits() {
    use normlab_kernels::buf::AlignedBuf;
    // 16 MiB outputs, 64-byte aligned: the streaming-store path; a Vec copy
    // offset by one float is never aligned: the normal path.
    let (rows, d) = (4096, 1024);
    let mut rng = Rng::new(21);
    let x = AlignedBuf::from_slice(&rng.normal_vec(rows * d, 0.3, 1.5));
    let dy = AlignedBuf::from_slice(&rng.normal_vec(rows * d, 0.0, 1.0));
    assert!(simd::should_stream(&x, d));
    for kind in row_kinds() {
        let p = random_params(kind, d, &mut rng);
        let mut y = AlignedBuf::zeros(rows * d);
        let mut dx = AlignedBuf::zeros(rows * d);
        let mut st = vec![0.0; norm::stats_len(rows)];
        let mut dp = vec![0.0; p.len()];
        let mut scratch = vec![0.0; norm::backward_scratch_len(kind, rows, d)];
        norm::forward(kind, d, kind.default_eps(), &x, &p, &mut y, &mut st);
        norm::backward(kind, d, &x, &dy, &p, &st, &mut dx, &mut dp, &mut scratch);
        let mut y2 = vec![0.0f32; rows * d + 1];
        let mut dx2 = vec![0.0f32; rows * d + 1];
        let (y2, dx2) = (&mut y2[1..], &mut dx2[1..]);
        assert!(
            !simd::should_stream(y2, d)
                || !simd::should_stream(dx2, d)
                || (y2.as_ptr() as usize).is_multiple_of(64)
        );
        let mut dp2 = vec![0.0; p.len()];
        norm::forward(kind, d, kind.default_eps(), &x, &p, y2, &mut st);
        norm::backward(kind, d, &x, &dy, &p, &st, dx2, &mut dp2, &mut scratch);
        assert!(
            y.iter()
                .zip(y2.iter())
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{kind}: y differs"
        );
        assert!(
            dx.iter()
                .zip(dx2.iter())
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{kind}: dx differs"
        );
        assert_eq!(dp, dp2);
    }
}
