//! The clamped SwiGLU (`--swiglu-clamp`, nn/mlp.rs) against Hugging Face
//! transformers' own `DeepseekV4MLP` (scripts/gen_swiglu_clamp_fixtures.py,
//! fixtures/swiglu_clamp.json): the output and every gradient, with many
//! of the gate's and the up projection's values clamped, and a case where
//! none is. Then the kernel's edges: a limit above every value changes
//! nothing, and the gradient passes at the limit itself but not beyond.

mod common;

use common::fixtures::{close, floats};
use normlab::kernels::act;
use normlab::nn::{Activation, Mlp};
use normlab::params::{Init, ParamLayout};
use serde_json::Value;

#[test]
fn clamped_swiglu_matches_transformers_deepseek_v4_mlp() {
    let fx: Value = serde_json::from_str(include_str!("fixtures/swiglu_clamp.json")).unwrap();
    for case in fx["cases"].as_array().unwrap() {
        let u = |k: &str| case[k].as_u64().unwrap() as usize;
        let (rows, d, h) = (u("rows"), u("d"), u("hidden"));
        let mut layout = ParamLayout::new();
        let mlp = Mlp {
            clamp: Some(case["limit"].as_f64().unwrap() as f32),
            ..Mlp::new(
                &mut layout,
                "mlp",
                d,
                h,
                Activation::Swiglu,
                false,
                None,
                Init::Const(0.0),
                Init::Const(0.0),
            )
        };
        let mut params = layout.zeros();
        for (p, k) in [(&mlp.fc, "fc"), (&mlp.proj, "proj")] {
            p.w.get_mut(&mut params)
                .copy_from_slice(&floats(&case[format!("{k}_w")]));
            p.b.as_ref()
                .unwrap()
                .get_mut(&mut params)
                .copy_from_slice(&floats(&case[format!("{k}_b")]));
        }
        let (x, dy) = (floats(&case["x"]), floats(&case["dy"]));
        let (w0, w1, w2) = mlp.scratch_widths();
        let mut c = mlp.cache(rows);
        let mut tmp = vec![0.0; rows * w0];
        let mut y = vec![0.0; rows * d];
        mlp.forward(&params, &x, &mut y, &mut c, &mut tmp);
        close("y", &y, &floats(&case["y"]), 1e-5);
        let mut grads = layout.zeros();
        let mut dx = vec![0.0; rows * d];
        let (mut dpost, mut dpre) = (vec![0.0; rows * w1], vec![0.0; rows * w2]);
        mlp.backward(
            &params, &mut grads, &x, &dy, &mut dx, &c, &mut tmp, &mut dpost, &mut dpre,
        );
        close("dx", &dx, &floats(&case["dx"]), 1e-4);
        for (p, k) in [(&mlp.fc, "fc"), (&mlp.proj, "proj")] {
            close(
                &format!("d_{k}_w"),
                p.w.get(&grads),
                &floats(&case[format!("d_{k}_w")]),
                1e-4,
            );
            close(
                &format!("d_{k}_b"),
                p.b.as_ref().unwrap().get(&grads),
                &floats(&case[format!("d_{k}_b")]),
                1e-4,
            );
        }
    }
}

#[test]
fn the_clamp_is_the_identity_below_the_limit_and_blocks_the_gradient_beyond_it() {
    let h = 4;
    // Rows of [gate | up].
    let ab = [
        -3.0f32, 0.5, 2.0, 9.0, /* up */ 1.0, -2.0, 2.0, 0.25, //
        3.0, 2.0, -1.0, 0.0, /* up */ -5.0, 2.0, -2.0, 2.5,
    ];
    let dy = [1.0f32; 8];
    let (mut y0, mut y1) = ([0.0; 8], [0.0; 8]);
    act::swiglu_forward(&ab, h, &mut y0);
    act::swiglu_clamped_forward(&ab, h, 100.0, &mut y1);
    assert_eq!(y0, y1);
    let (mut g0, mut g1) = ([0.0; 16], [0.0; 16]);
    act::swiglu_backward(&ab, &dy, h, &mut g0);
    act::swiglu_clamped_backward(&ab, &dy, h, 100.0, &mut g1);
    assert_eq!(g0, g1);
    // Limit 2: gate 9 and 3 clamped (no gradient), gate 2 at the limit
    // passes; up -5 and 2.5 clamped, up 2 and -2 at the limit pass.
    let mut g = [0.0; 16];
    act::swiglu_clamped_backward(&ab, &dy, h, 2.0, &mut g);
    let (da0, db0, da1, db1) = (&g[0..4], &g[4..8], &g[8..12], &g[12..16]);
    assert_eq!(da0[3], 0.0);
    assert!(da0[2] != 0.0 && db0[1] != 0.0 && db0[2] != 0.0);
    assert_eq!(da1[0], 0.0);
    assert_eq!(db1[0], 0.0);
    assert_eq!(db1[3], 0.0);
    assert!(db1[1] != 0.0 && db1[2] != 0.0);
    let mut y = [0.0; 8];
    act::swiglu_clamped_forward(&ab, h, 2.0, &mut y);
    let silu = |v: f32| v / (1.0 + (-v).exp());
    assert!((y[3] - silu(2.0) * 0.25).abs() < 1e-6);
    assert!((y[4] - silu(2.0) * -2.0).abs() < 1e-6);
}
