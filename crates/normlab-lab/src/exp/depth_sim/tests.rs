//! The depth simulator's tests: its backward against finite differences,
//! and the known directions at init (DyT, the branch gates).

use super::*;

/// The simulator's backward against central finite differences of
/// L = <r, x_N> along a random direction of x_0, for each pre-norm
/// setting (RMSNorm, DyT, each with LayerNorm Scaling) and none, and
/// with a branch gate.
#[test]
fn backward_matches_finite_differences() {
    for (pre_norm, dyt, lns, gate) in [
        (false, false, false, None),
        (true, false, false, None),
        (true, true, false, None),
        (true, false, true, None),
        (true, true, true, None),
        (false, false, false, Some(0.3)),
        (true, false, false, Some(0.3)),
    ] {
        let c = SimConfig {
            sublayers: 6,
            d: 8,
            rows: 3,
            gain: 0.9,
            pre_norm,
            dyt,
            ..SimConfig::default()
        };
        let c = if lns { c.with("lns", 1.0) } else { c };
        let c = match gate {
            Some(g) => c.with("layerscale", g),
            None => c,
        };
        let mut rng = Rng::derive(7, "fd");
        let x: Vec<f64> = (0..c.rows * c.d).map(|_| rng.normal()).collect();
        let r: Vec<f64> = (0..c.rows * c.d).map(|_| rng.normal()).collect();
        let e: Vec<f64> = (0..c.rows * c.d).map(|_| rng.normal()).collect();
        let layers = Rng::derive(8, "fd layers");
        let (_, _, g0) = simulate_from(&c, x.clone(), &r, layers.clone());
        let loss = |h: f64| {
            let xh: Vec<f64> = x.iter().zip(&e).map(|(a, b)| a + h * b).collect();
            let (_, xn, _) = simulate_from(&c, xh, &r, layers.clone());
            xn.iter().zip(&r).map(|(a, b)| a * b).sum::<f64>()
        };
        let h = 1e-5;
        let fd = (loss(h) - loss(-h)) / (2.0 * h);
        let an: f64 = g0.iter().zip(&e).map(|(a, b)| a * b).sum();
        assert!(
            (fd - an).abs() <= 1e-6 * an.abs().max(1.0),
            "pre_norm {pre_norm} dyt {dyt} lns {lns} gate {gate:?}: {fd} vs {an}"
        );
    }
}

/// DyT in the pre-norm's place: the known directions at init.
#[test]
fn dyt_bounds_the_branch_input_like_a_norm() {
    let base = SimConfig {
        sublayers: 32,
        ..SimConfig::default()
    };
    let rms = |c: SimConfig| simulate(&c).final_residual_rms.expect("finite");
    let plain = rms(base.clone());
    let pre_norm = rms(SimConfig {
        pre_norm: true,
        ..base.clone()
    });
    let pre_dyt = rms(SimConfig {
        pre_norm: true,
        dyt: true,
        ..base.clone()
    });
    // Without a norm the stream doubles in energy per sublayer (2^16 in
    // RMS at 32); tanh keeps every branch input within [-1, 1], so the
    // stream grows polynomially, and less than with RMSNorm's unit-RMS
    // inputs (tanh(0.5 x) has RMS below 0.5 x's and below 1).
    assert!(pre_dyt < 1e-2 * plain, "{pre_dyt} vs {plain}");
    assert!(pre_dyt < pre_norm, "{pre_dyt} vs {pre_norm}");
    assert!(pre_dyt > 1.0, "{pre_dyt}");
    // dyt without pre-norm changes nothing.
    assert_eq!(rms(SimConfig { dyt: true, ..base }), plain);
}

/// ReZero and LayerScale at init: the identity map (ReZero exactly),
/// or close to it, where the same net without a gate explodes.
#[test]
fn gates_start_deep_nets_as_the_identity() {
    let base = SimConfig {
        sublayers: 32,
        ..SimConfig::default()
    };
    let plain = simulate(&base);
    let rezero = simulate(&base.clone().with("rezero", 0.0));
    let ls = simulate(&base.with("layerscale", 1e-4));
    // x_N = x_0 and dL/dx_0 = dL/dx_N with a zero gate.
    assert_eq!(rezero.residual_rms[0], rezero.final_residual_rms);
    assert_eq!(rezero.grad_ratio_bottom_top, Some(1.0));
    let r0 = ls.residual_rms[0].unwrap();
    let (rn, gr) = (
        ls.final_residual_rms.unwrap(),
        ls.grad_ratio_bottom_top.unwrap(),
    );
    assert!(
        (rn / r0 - 1.0).abs() < 1e-3 && (gr - 1.0).abs() < 1e-3,
        "{rn} {r0} {gr}"
    );
    assert!(plain.final_residual_rms.unwrap() > 100.0 * rn);
}

/// Gains so small that every product is subnormal are refused (they took
/// 35x the time of gain 1 and show what gain 0 shows); 0 itself is fine.
#[test]
fn subnormal_gains_are_refused() {
    let c = |gain: f64, gate: Option<f64>| {
        let c = SimConfig {
            gain,
            ..SimConfig::default()
        };
        match gate {
            Some(g) => c.with("layerscale", g),
            None => c,
        }
    };
    assert!(validate(&c(0.0, None)).is_ok());
    assert!(validate(&c(1e-6, None)).is_ok());
    for (gain, gate) in [(1e-320, None), (1e-9, None), (1.0, Some(1e-300))] {
        let e = validate(&c(gain, gate)).err().unwrap().to_string();
        assert!(e.contains("at least 1e-6"), "{e}");
    }
    // Two gates at once are refused, naming both.
    let both = SimConfig::default()
        .with("rezero", 0.0)
        .with("layerscale", 0.1);
    let e = validate(&both).unwrap_err().to_string();
    assert!(e.contains("--rezero and --layerscale"), "{e}");
}

/// The residual options reach the simulator from their declarations: each
/// one the simulator models is a flag of `normlab exp depth-sim`, has a
/// row in its comparison, and changes the stream.
#[test]
fn every_simulated_option_is_a_flag_and_a_variant() {
    let flags = ExpFlag::expand(EXPERIMENT.flags);
    for (o, k) in residual::simulated() {
        let flag = ExpFlag::find(o.name).expect("a flag");
        assert!(flags.contains(&flag), "{}", o.name);
        let mut a = ExpArgs::default();
        let text = if k.switch.is_some() {
            "true".to_string()
        } else {
            k.example.to_string()
        };
        flag.set(&mut a, &text).unwrap();
        let c = config(&a, 8).unwrap();
        assert_eq!(c.residual_options().len(), 1, "{}", o.name);
        let c = SimConfig {
            pre_norm: k.needs_pre_norm,
            ..c
        };
        let plain = SimConfig {
            options: Vec::new(),
            ..c.clone()
        };
        assert_ne!(
            simulate(&c).residual_rms,
            simulate(&plain).residual_rms,
            "{}",
            o.name
        );
        assert!(label(&c).contains(&(k.label)(k.example)), "{}", o.name);
    }
}

/// Hyper-connections at init route exactly as a plain residual does (the
/// streams stay equal); their backward, with constant weights, matches
/// finite differences; mHC reads about n/2 times the stream at init
/// (pre near 1/2 per stream), so without a pre-norm its stream grows
/// faster than a plain one, and with the pre-norm that read is normalised.
#[test]
fn streams_at_init() {
    for pre_norm in [false, true] {
        let plain = SimConfig {
            sublayers: 12,
            d: 16,
            rows: 8,
            pre_norm,
            ..SimConfig::default()
        };
        let (p, h) = (simulate(&plain), simulate(&plain.clone().with("hc", 4.0)));
        // The same streams (the RMS sums over 4 copies in another order).
        for (a, b) in p.residual_rms.iter().zip(&h.residual_rms) {
            let (a, b) = (a.unwrap(), b.unwrap());
            assert!(
                (a / b - 1.0).abs() < 1e-12,
                "pre_norm {pre_norm}: {a} vs {b}"
            );
        }
        let (a, b) = (
            p.grad_ratio_bottom_top.unwrap(),
            h.grad_ratio_bottom_top.unwrap(),
        );
        assert!((a / b - 1.0).abs() < 1e-9, "{a} vs {b}");
        let m = simulate(&plain.clone().with("mhc", 4.0));
        let (fp, fm) = (p.final_residual_rms.unwrap(), m.final_residual_rms.unwrap());
        if pre_norm {
            assert!((fm / fp - 1.0).abs() < 0.25, "{fm} vs {fp}");
        } else {
            assert!(fm > 2.0 * fp, "{fm} vs {fp}");
        }
        // Finite differences through the n streams (hyper-connections'
        // weights are constants, so the gradient is exact).
        let c = SimConfig {
            sublayers: 5,
            d: 6,
            rows: 2,
            gain: 0.9,
            pre_norm,
            ..SimConfig::default()
        }
        .with("hc", 3.0);
        let mut rng = Rng::derive(9, "fd");
        let n = c.rows * c.d;
        let (x, r, e): (Vec<f64>, Vec<f64>, Vec<f64>) = (
            (0..n).map(|_| rng.normal()).collect(),
            (0..n).map(|_| rng.normal()).collect(),
            (0..n).map(|_| rng.normal()).collect(),
        );
        let layers = Rng::derive(10, "fd layers");
        let (_, _, g0) = simulate_from(&c, x.clone(), &r, layers.clone());
        let loss = |h: f64| {
            let xh: Vec<f64> = x.iter().zip(&e).map(|(a, b)| a + h * b).collect();
            let (_, out, _) = simulate_from(&c, xh, &r, layers.clone());
            out.iter().zip(&r).map(|(a, b)| a * b).sum::<f64>()
        };
        let fd = (loss(1e-5) - loss(-1e-5)) / 2e-5;
        let an: f64 = g0.iter().zip(&e).map(|(a, b)| a * b).sum();
        assert!((fd - an).abs() <= 1e-6 * an.abs().max(1.0), "{fd} vs {an}");
    }
    // One stream design at a time, on the residual, with n in range.
    let c = SimConfig::default();
    assert!(validate(&c.clone().with("hc", 4.0).with("mhc", 4.0)).is_err());
    assert!(validate(
        &SimConfig {
            residual: false,
            ..c.clone()
        }
        .with("mhc", 4.0)
    )
    .is_err());
    assert!(validate(&c.clone().with("hc", 1.0)).is_err());
    assert!(validate(&c.clone().with("hc", 2.5)).is_err());
    assert!(validate(&c.with("mhc", 8.0)).is_ok());
}
