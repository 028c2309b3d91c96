//! The 16-bit (bf16, f16) norm kernels, three ways:
//! - the f32 kernel on the widened inputs, rounded once, for every row-wise
//!   kind, sizes across sub-blocks and chunks: bit for bit for the kinds
//!   that go through widened sub-blocks; for layernorm, rmsnorm and
//!   zrmsnorm, whose fused kernels sum 16-bit rows in f32 partials, with
//!   statistics within 1e-5 and each output the rounded f32 one or its
//!   neighbour; so the f32 kernel's finite-difference checks
//!   (finite_diff.rs) cover them too: in 16 bits a finite difference would
//!   measure the rounding, not the derivative;
//! - the fall-back to f64 sums where f32 partials cannot hold them;
//! - within half an ulp of the type (plus the f32 kernel's own error) of the
//!   f64 reference twin on the rounded inputs, for layernorm, rmsnorm,
//!   zrmsnorm, including rows with |mean| >> std;
//! - against PyTorch's CPU F.layer_norm / F.rms_norm on bf16 and f16 inputs
//!   with f32 parameters (fixtures from scripts/gen_torch_lowp_fixtures.py);
//! - and bit-identical for 1 and 2 threads and across SIMD levels.

use normlab_kernels::half16::{bf16, f16, Half};
use normlab_kernels::norm::{self, NormKind};
use normlab_kernels::reference;
use normlab_kernels::rng::Rng;
use serde::Deserialize;

const KINDS: [NormKind; 3] = [NormKind::LayerNorm, NormKind::RmsNorm, NormKind::ZRmsNorm];

fn params(kind: NormKind, d: usize, rng: &mut Rng) -> Vec<f32> {
    let mut p = vec![0.0; kind.num_params(d)];
    kind.init_params(d, &mut p);
    for v in &mut p {
        *v += 0.3 * rng.normal() as f32;
    }
    p
}

fn round<T: Half>(v: &[f32]) -> Vec<T> {
    v.iter().map(|&x| T::put(x)).collect()
}

fn widen<T: Half>(v: &[T]) -> Vec<f32> {
    v.iter().map(|x| x.get()).collect()
}

/// Forward and backward in storage type `T`: (y, stats, dx, dparams).
fn run<T: Half>(
    kind: NormKind,
    d: usize,
    eps: f32,
    x: &[T],
    p: &[f32],
    dy: &[T],
) -> (Vec<T>, Vec<f32>, Vec<T>, Vec<f32>) {
    let rows = x.len() / d;
    let mut y = vec![T::default(); x.len()];
    let mut st = vec![0.0; norm::stats_len(rows)];
    norm::forward(kind, d, eps, x, p, &mut y, &mut st);
    let mut dx = vec![T::default(); x.len()];
    let mut dp = vec![0.0; p.len()];
    let mut scratch = vec![0.0; norm::backward_scratch_len(kind, rows, d)];
    norm::backward(kind, d, x, dy, p, &st, &mut dx, &mut dp, &mut scratch);
    (y, st, dx, dp)
}

fn bits<T: Half>(v: &[T]) -> Vec<u32> {
    v.iter().map(|x| x.get().to_bits()).collect()
}

fn f32_kernel_rounded_once<T: Half>() {
    let mut rng = Rng::new(5);
    let kinds = NormKind::row_wise().filter(|k| *k != NormKind::BatchNorm);
    for kind in kinds {
        // d 1 .. 5000: one row per sub-block and many; 300 x 900 spans
        // several chunks.
        for (rows, d) in [(3, 1), (7, 5), (40, 64), (9, 333), (2, 5000), (300, 900)] {
            let x = round::<T>(&rng.normal_vec(rows * d, 0.4, 2.0));
            let dy = round::<T>(&rng.normal_vec(rows * d, 0.0, 1.0));
            let p = params(kind, d, &mut rng);
            let eps = kind.default_eps();
            let (y, st, dx, dp) = run(kind, d, eps, &x, &p, &dy);
            let (y32, st32, dx32, dp32) = run::<f32>(kind, d, eps, &widen(&x), &p, &widen(&dy));
            let tag = format!("{} {kind} {rows}x{d}", T::NAME);
            if matches!(
                kind,
                NormKind::LayerNorm | NormKind::RmsNorm | NormKind::ZRmsNorm
            ) {
                // Their fused kernels sum 16-bit rows in f32 partials
                // (Elem::F32_SUMS): statistics within 1e-5 of the f32
                // kernel's f64 sums, so each output is the f32 kernel's
                // rounded once or its neighbour when that sat on a rounding
                // boundary; the gain gradients within the same 1e-5.
                let h = half_ulp::<T>();
                // Per row (mean hi, mean lo, rstd): the mean within 1e-5
                // of a standard deviation, rstd within 1e-5 relative.
                for (a, b) in st.chunks(3).zip(st32.chunks(3)) {
                    let (m, m32) = (a[0] as f64 + a[1] as f64, b[0] as f64 + b[1] as f64);
                    let ok = (m - m32).abs() <= 1e-5 / b[2] as f64 + 1e-7 * m32.abs()
                        && (a[2] - b[2]).abs() <= 1e-5 * b[2];
                    assert!(ok, "{tag}: stats {a:?} vs {b:?}");
                }
                for (name, out, out32) in [("y", &y, &y32), ("dx", &dx, &dx32)] {
                    // (plus 1e-5 of the largest output: the statistics' own
                    // difference, which values near zero feel in full)
                    let scale = out32.iter().fold(0f32, |m, v| m.max(v.abs()));
                    for (a, b) in out.iter().zip(out32.iter()) {
                        let (a, r) = (a.get(), T::put(*b).get());
                        assert!(
                            (a - r).abs() <= 2.0 * h as f32 * r.abs() + 1e-5 * scale,
                            "{tag}: {name} {a} vs {b} (rounded {r})"
                        );
                    }
                }
            } else {
                assert_eq!(bits(&y), bits(&round::<T>(&y32)), "{tag}: y");
                assert_eq!(st, st32, "{tag}: stats");
                assert_eq!(bits(&dx), bits(&round::<T>(&dx32)), "{tag}: dx");
            }
            let sp = dp32.iter().fold(1f32, |m, v| m.max(v.abs()));
            for (a, b) in dp.iter().zip(&dp32) {
                assert!((a - b).abs() <= 1e-5 * sp, "{tag}: dparams {a} vs {b}");
            }
        }
    }
}

/// Rows where f32 partial sums cannot stand, in bf16 (f32's exponent
/// range): squares that overflow f32 (|x| 1e20), squares that underflow it
/// (|x| 1e-25), gradients whose f32 partials overflow (dy 1e37), and a
/// LayerNorm row whose first value (the shift) lies far outside the rest.
/// Each falls back to f64 and stays within the type's rounding of the f64
/// reference, as the first and the last of three rows (the first row's
/// sums in a sweep of their own, the last's folded into the previous row's
/// sweeps).
#[test]
fn f32_partial_sums_fall_back_where_f32_cannot_hold_them() {
    let mut rng = Rng::new(21);
    let h = half_ulp::<bf16>();
    for kind in KINDS {
        for (case, scale, dscale) in [
            ("huge x", 1e20f32, 1.0f32),
            ("tiny x", 1e-25, 1.0),
            ("huge dy", 1.0, 1e37),
            ("outlier shift", 1.0, 1.0),
            ("outlier shift, 4 rows a chunk", 1.0, 1.0),
        ] {
            // (the shift's cancellation grows with d: a long row for it; at
            // 65536 each row is a chunk of its own, at 16384 the three rows
            // share one, so the last row's sums are folded)
            let d = match case {
                "outlier shift" => 65536,
                "outlier shift, 4 rows a chunk" => 16384,
                _ => 2048,
            };
            let mut raw = rng.normal_vec(d, 0.0, 1.0);
            if case.starts_with("outlier shift") {
                raw[0] = 3000.0;
            }
            let mut dyr = rng.normal_vec(d, 0.0, 1.0);
            if case == "huge dy" {
                // (one sign throughout, so that the f32 partials overflow)
                raw.iter_mut()
                    .chain(dyr.iter_mut())
                    .for_each(|v| *v = v.abs() + 0.5);
            }
            // The case row first (its sums in a sweep of their own), after
            // an ordinary row (its sums folded into that row's sweep) and
            // last.
            let mid = rng.normal_vec(d, 0.0, 1.0);
            let case_x = raw.iter().map(|v| v * scale);
            let case_dy = dyr.iter().map(|v| v * dscale);
            let xs = case_x.clone().chain(mid.iter().copied()).chain(case_x);
            let dys = case_dy.clone().chain(mid.iter().copied()).chain(case_dy);
            let x = round::<bf16>(&xs.collect::<Vec<_>>());
            let dy = round::<bf16>(&dys.collect::<Vec<_>>());
            let mut p = params(kind, d, &mut rng);
            if kind == NormKind::ZRmsNorm {
                p.iter_mut().for_each(|v| *v *= 0.1);
            }
            let eps = 0.0;
            let (y, _, dx, _) = run(kind, d, eps, &x, &p, &dy);
            let (xw, dyw) = (widen(&x), widen(&dy));
            let yr = reference::forward(kind, d, eps, &xw, &p);
            let (dxr, _) = reference::backward(kind, d, eps, &xw, &dyw, &p);
            let top = |v: &[f64]| v.iter().fold(0f64, |m, v| m.max(v.abs()));
            let (sys, sdxs): (Vec<f64>, Vec<f64>) = (0..3)
                .map(|r| (top(&yr[r * d..(r + 1) * d]), top(&dxr[r * d..(r + 1) * d])))
                .unzip();
            for j in 0..3 * d {
                let (sy, sdx) = (sys[j / d], sdxs[j / d]);
                let (a, b) = (f64::from(y[j].get()), yr[j]);
                assert!(
                    (a - b).abs() <= h * b.abs() + 2e-5 * sy,
                    "{kind} {case} y[{j}]: {a} vs {b}"
                );
                let (a, b) = (f64::from(dx[j].get()), dxr[j]);
                assert!(
                    (a - b).abs() <= h * b.abs() + 2e-5 * sdx,
                    "{kind} {case} dx[{j}]: {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn bf16_is_the_f32_kernel_rounded_once() {
    f32_kernel_rounded_once::<bf16>();
}

#[test]
fn f16_is_the_f32_kernel_rounded_once() {
    f32_kernel_rounded_once::<f16>();
}

/// Half an ulp of `T` at `v`, relative (2^-8 for bf16, 2^-11 for f16).
fn half_ulp<T: Half>() -> f64 {
    if T::NAME == "bf16" {
        2f64.powi(-8)
    } else {
        2f64.powi(-11)
    }
}

fn matches_f64_reference<T: Half>() {
    let mut rng = Rng::new(9);
    let h = half_ulp::<T>();
    for kind in KINDS {
        for (rows, d, offset) in [
            (4, 7, 0.0),
            (6, 256, 0.5),
            (3, 1024, 100.0),
            (2, 4099, -3.0),
        ] {
            let raw: Vec<f32> = rng
                .normal_vec(rows * d, 0.0, 1.5)
                .iter()
                .map(|v| v + offset)
                .collect();
            let x = round::<T>(&raw);
            let dy = round::<T>(&rng.normal_vec(rows * d, 0.0, 1.0));
            let p = params(kind, d, &mut rng);
            let eps = 1e-5;
            let (y, _, dx, dp) = run(kind, d, eps, &x, &p, &dy);
            let (xw, dyw) = (widen(&x), widen(&dy));
            let yr = reference::forward(kind, d, eps, &xw, &p);
            let (dxr, dpr) = reference::backward(kind, d, eps, &xw, &dyw, &p);
            let tag = format!("{} {kind} {rows}x{d} offset {offset}", T::NAME);
            for r in 0..rows {
                let row = r * d..(r + 1) * d;
                let sy = yr[row.clone()].iter().fold(0f64, |m, v| m.max(v.abs()));
                let sdx = dxr[row.clone()].iter().fold(0f64, |m, v| m.max(v.abs()));
                for j in row {
                    // Rounded once from an f32 result within ~1e-5 of the
                    // row's scale (offset rows) of the exact one.
                    let (a, b) = (f64::from(y[j].get()), yr[j]);
                    assert!(
                        (a - b).abs() <= h * b.abs() + 2e-5 * sy,
                        "{tag} y[{j}]: {a} vs {b}"
                    );
                    let (a, b) = (f64::from(dx[j].get()), dxr[j]);
                    assert!(
                        (a - b).abs() <= h * b.abs() + 2e-5 * sdx,
                        "{tag} dx[{j}]: {a} vs {b}"
                    );
                }
            }
            let sp = dpr.iter().fold(0f64, |m, v| m.max(v.abs()));
            for (a, b) in dp.iter().zip(&dpr) {
                assert!(
                    (f64::from(*a) - b).abs() <= 1e-5 * sp,
                    "{tag} dparams: {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn bf16_matches_the_f64_reference() {
    matches_f64_reference::<bf16>();
}

#[test]
fn f16_matches_the_f64_reference() {
    matches_f64_reference::<f16>();
}

#[derive(Deserialize)]
struct Fixtures {
    torch: String,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    op: String,
    dtype: String,
    d: usize,
    eps: f32,
    x: Vec<u16>,
    dy: Vec<u16>,
    weight: Vec<f32>,
    #[serde(default)]
    bias: Vec<f32>,
    y: Vec<u16>,
    dx: Vec<u16>,
    dweight: Vec<f32>,
    #[serde(default)]
    dbias: Vec<f32>,
}

/// Largest `|ours - torch| / allowed` over a row, where allowed is two
/// ulps of `T` at torch's value plus `slack` (the f32 computation's own
/// error, which neither side can avoid and which matters for values far
/// below the row's scale).
fn worst<T: Half>(ours: &[T], torch: &[u16], of: fn(u16) -> T, slack: f64) -> f64 {
    let mut worst = 0f64;
    for (a, &b) in ours.iter().zip(torch) {
        let (a, b) = (f64::from(a.get()), f64::from(of(b).get()));
        let allowed = 4.0 * half_ulp::<T>() * b.abs() + slack;
        worst = worst.max((a - b).abs() / allowed.max(1e-30));
    }
    worst
}

fn check_fixtures<T: Half>(name: &str, of: fn(u16) -> T) -> usize {
    let fx: Fixtures =
        serde_json::from_str(include_str!("fixtures/torch_lowp.json")).expect("fixtures parse");
    let mut n = 0;
    let (mut worst_y, mut worst_dx) = (0f64, 0f64);
    for c in fx.cases.iter().filter(|c| c.dtype == name) {
        let (kind, p) = match c.op.as_str() {
            "layer_norm" => (
                NormKind::LayerNorm,
                [c.weight.clone(), c.bias.clone()].concat(),
            ),
            "rms_norm" => (NormKind::RmsNorm, c.weight.clone()),
            "rms_norm_zero_centred" => (NormKind::ZRmsNorm, c.weight.clone()),
            other => panic!("unknown op {other}"),
        };
        let d = c.d;
        let x: Vec<T> = c.x.iter().map(|&b| of(b)).collect();
        let dy: Vec<T> = c.dy.iter().map(|&b| of(b)).collect();
        let (y, st, dx, dp) = run(kind, d, c.eps, &x, &p, &dy);
        let tag = format!(
            "{} {} d={} eps={} (torch {})",
            name, c.op, d, c.eps, fx.torch
        );
        let gain = |j: usize| {
            f64::from(if kind == NormKind::ZRmsNorm {
                1.0 + p[j]
            } else {
                p[j]
            })
        };
        for r in 0..x.len() / d {
            let row = r * d..(r + 1) * d;
            // Both compute in f32 and round once, summing in other orders;
            // PyTorch rounds the mean to f32 before centring (an error of
            // ulp(|mean|) * rstd in xhat when |mean| >> std) and its rms_norm
            // with f32 gains on 16-bit input rounds x * rstd before the gain.
            let e = 8.0 * f64::from(f32::EPSILON);
            let rstd = f64::from(st[r * norm::STATS + 2]);
            let mean = f64::from(st[r * norm::STATS]).abs();
            let gmax = (0..d).fold(0f64, |m, j| m.max(gain(j).abs()));
            let ymax = y[row.clone()]
                .iter()
                .fold(0f64, |m, v| m.max(f64::from(v.get()).abs()));
            let g = (0..d).fold(0f64, |m, j| {
                m.max((f64::from(dy[r * d + j].get()) * gain(j)).abs())
            });
            let slack_y = e * (ymax + mean * rstd * gmax);
            let slack_dx = e * rstd * g * (1.0 + mean * rstd);
            let wy = worst(&y[row.clone()], &c.y[row.clone()], of, slack_y);
            let wdx = worst(&dx[row.clone()], &c.dx[row.clone()], of, slack_dx);
            assert!(
                wy <= 1.0,
                "{tag} row {r}: y off by {wy} x the allowed difference"
            );
            assert!(
                wdx <= 1.0,
                "{tag} row {r}: dx off by {wdx} x the allowed difference"
            );
            worst_y = worst_y.max(wy);
            worst_dx = worst_dx.max(wdx);
        }
        let want = [c.dweight.clone(), c.dbias.clone()].concat();
        let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
        for (a, b) in dp.iter().zip(&want) {
            // PyTorch's gain gradient sums products of 16-bit-rounded terms
            // in its own order: agree to the type's precision.
            assert!(
                (a - b).abs() <= 4.0 * half_ulp::<T>() as f32 * scale,
                "{tag}: dparams {a} vs {b}"
            );
        }
        n += 1;
    }
    eprintln!("{name}: {n} cases; largest difference / allowed: y {worst_y:.3}, dx {worst_dx:.3}");
    n
}

#[test]
fn bf16_matches_pytorch() {
    assert!(check_fixtures::<bf16>("bf16", bf16::from_bits) >= 30);
}

#[test]
fn f16_matches_pytorch() {
    assert!(check_fixtures::<f16>("f16", f16::from_bits) >= 30);
}

fn all_bits<T: Half>(kind: NormKind, d: usize, x: &[T], p: &[f32], dy: &[T]) -> Vec<u32> {
    let (y, st, dx, dp) = run(kind, d, kind.default_eps(), x, p, dy);
    let mut b = bits(&y);
    b.extend(bits(&dx));
    b.extend(st.iter().chain(&dp).map(|v| v.to_bits()));
    b
}

fn identical_for_threads_and_levels<T: Half>() {
    let mut rng = Rng::new(13);
    // d spans two f32 partial-sum chunks and a tail block; 33 rows of 2048
    // make chunks of 32 rows and of 1.
    for (rows, d) in [(400, 1300), (33, 2048)] {
        identical_for_threads_and_levels_at::<T>(&mut rng, rows, d);
    }
}

fn identical_for_threads_and_levels_at<T: Half>(rng: &mut Rng, rows: usize, d: usize) {
    let x = round::<T>(&rng.normal_vec(rows * d, 0.2, 1.3));
    let dy = round::<T>(&rng.normal_vec(rows * d, 0.0, 1.0));
    assert!(norm::Chunks::new(rows, d).count >= 2);
    let pool = |n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    };
    for kind in KINDS {
        let p = params(kind, d, rng);
        let a = pool(1).install(|| all_bits(kind, d, &x, &p, &dy));
        let b = pool(2).install(|| all_bits(kind, d, &x, &p, &dy));
        assert!(a == b, "{} {kind}: 1 vs 2 threads differ", T::NAME);
        use normlab_kernels::simd::{level, set_level, Level};
        let best = level();
        for lvl in [
            Level::Generic,
            Level::Avx2,
            Level::Avx512,
            Level::Avx512Bf16,
        ] {
            set_level(lvl);
            let c = all_bits(kind, d, &x, &p, &dy);
            set_level(best);
            assert!(a == c, "{} {kind}: SIMD level {lvl:?} differs", T::NAME);
        }
    }
}

#[test]
fn bf16_bit_identical_for_threads_and_simd_levels() {
    identical_for_threads_and_levels::<bf16>();
}

#[test]
fn f16_bit_identical_for_threads_and_simd_levels() {
    identical_for_threads_and_levels::<f16>();
}

/// 16-bit outputs of 16 MiB or more, 64-byte aligned, are written with
/// streaming stores (at the AVX-512 levels): the same bits as a misaligned
/// copy of the same outputs, which takes the normal stores.
fn streaming_gives_the_same_bits<T: Half>() {
    let (rows, d) = (8192, 1024);
    let mut rng = Rng::new(22);
    let x = round::<T>(&rng.normal_vec(rows * d, 0.3, 1.5));
    let dy = round::<T>(&rng.normal_vec(rows * d, 0.0, 1.0));
    // An output buffer whose slice at `off` values is 64-byte aligned (or,
    // with `off + 1`, only 2-byte aligned).
    let aligned = |buf: &mut Vec<T>, shift: usize| -> std::ops::Range<usize> {
        let off = (0..32)
            .find(|o| (buf[*o..].as_ptr() as usize).is_multiple_of(64))
            .unwrap()
            + shift;
        off..off + rows * d
    };
    for kind in KINDS {
        let p = params(kind, d, &mut rng);
        let mut got = Vec::new();
        for shift in [0, 1] {
            let mut y = vec![T::default(); rows * d + 64];
            let mut dx = vec![T::default(); rows * d + 64];
            let (ry, rdx) = (aligned(&mut y, shift), aligned(&mut dx, shift));
            assert_eq!(
                normlab_kernels::simd::should_stream(&y[ry.clone()], d),
                shift == 0
            );
            let mut st = vec![0.0; norm::stats_len(rows)];
            let mut dp = vec![0.0; p.len()];
            let mut scratch = vec![0.0; norm::backward_scratch_len(kind, rows, d)];
            norm::forward(
                kind,
                d,
                kind.default_eps(),
                &x,
                &p,
                &mut y[ry.clone()],
                &mut st,
            );
            norm::backward(
                kind,
                d,
                &x,
                &dy,
                &p,
                &st,
                &mut dx[rdx.clone()],
                &mut dp,
                &mut scratch,
            );
            let mut b = bits(&y[ry]);
            b.extend(bits(&dx[rdx]));
            b.extend(dp.iter().map(|v| v.to_bits()));
            got.push(b);
        }
        assert!(
            got[0] == got[1],
            "{} {kind}: streaming changed the bits",
            T::NAME
        );
    }
}

#[test]
fn bf16_streaming_gives_the_same_bits() {
    streaming_gives_the_same_bits::<bf16>();
}

#[test]
fn f16_streaming_gives_the_same_bits() {
    streaming_gives_the_same_bits::<f16>();
}
