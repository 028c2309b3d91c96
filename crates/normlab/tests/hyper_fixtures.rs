//! Hyper-connections (nn/hyper.rs) against PyTorch: the read, the write
//! and every gradient of a reference written from the paper
//! (scripts/gen_hyper_fixtures.py, fixtures/hyper.json), static and
//! dynamic, with a stand-in branch o = tanh(h W); and mHC (nn/mhc.rs)
//! against transformers' DeepSeek V4 modules themselves; and Attention
//! Residuals (nn/attnres.rs) against a reference written from its paper.

mod common;

use common::fixtures::{close, floats};
use normlab::kernels::norm::NormKind;
use normlab::nn::{Coefficients, DepthAttn, DepthHead, DepthSlots, Hyper, StreamHead};
use normlab::params::ParamLayout;
use normlab::precision::Dtype;
use serde_json::Value;

#[test]
fn hyper_connections_match_pytorch() {
    let fx: Value = serde_json::from_str(include_str!("fixtures/hyper.json")).unwrap();
    for case in fx["cases"].as_array().unwrap() {
        let u = |k: &str| case[k].as_u64().unwrap() as usize;
        let (n, d, l) = (u("n"), u("d"), u("layer_id"));
        let dynamic = case["dynamic"].as_bool().unwrap();
        let mut layout = ParamLayout::new();
        let hc = Hyper::new(
            &mut layout,
            "hc",
            n,
            d,
            l,
            dynamic.then_some((NormKind::LayerNorm, 1e-5)),
            None,
        );
        // The paper's initialisation, before the fixture's values replace it.
        let mut init = layout.zeros();
        layout.init(&mut init, 0);
        let Coefficients::Learned(learned) = &hc.coef else {
            panic!("hyper-connections' weights are learned constants")
        };
        let a0 = learned.static_alpha.get(&init);
        for k in 0..n {
            for m in 0..=n {
                let want = if m == 0 {
                    (k == l % n) as u8
                } else {
                    (m == k + 1) as u8
                };
                assert_eq!(a0[k * (n + 1) + m], f32::from(want), "static alpha init");
            }
        }
        check_case(&hc, &layout, case);
    }
}

/// Sets the case's parameters, runs read, the stand-in branch and write,
/// then their backward, and compares every output and gradient.
fn check_case(hc: &Hyper, layout: &ParamLayout, case: &Value) {
    let u = |k: &str| case[k].as_u64().unwrap() as usize;
    let (rows, n, d) = (u("rows"), u("n"), u("d"));
    let params = set_params(layout, "hc", &case["params"]);
    let (x, w, dy) = (floats(&case["x"]), floats(&case["w"]), floats(&case["dy"]));
    let mut c = hc.cache(rows);
    let mut h = vec![0f32; rows * d];
    hc.read(&params, &x, &mut h, &mut c);
    close("h", &h, &floats(&case["h"]), 1e-5);
    let o = branch(&h, &w, d);
    hc.write(&x, &o, &mut c, Dtype::F32, false);
    close("y", c.output(), &floats(&case["y"]), 1e-5);
    let mut grads = layout.zeros();
    let mut dout = vec![0f32; rows * d];
    let mut dx = vec![0f32; rows * n * d];
    hc.write_backward(&x, &dy, &mut dout, &mut dx, &mut c);
    let dh = branch_backward(&dout, &o, &w, d);
    hc.read_backward(&params, &mut grads, &x, &dh, &mut dx, &mut c, Dtype::F32);
    close("dx", &dx, &floats(&case["dx"]), 1e-4);
    for (name, v) in case["grads"].as_object().unwrap() {
        let t = layout.find(&format!("hc.{name}")).unwrap();
        close(name, &grads[t.range.clone()], &floats(v), 1e-4);
    }
}

/// The stand-in branch: o = tanh(h W), W [d, d] (h as a row vector).
fn branch(h: &[f32], w: &[f32], d: usize) -> Vec<f32> {
    let mut o = vec![0f32; h.len()];
    for (hr, or) in h.chunks_exact(d).zip(o.chunks_exact_mut(d)) {
        for j in 0..d {
            let s: f32 = (0..d).map(|i| hr[i] * w[i * d + j]).sum();
            or[j] = s.tanh();
        }
    }
    o
}

/// The stand-in branch's backward: dL/dh from dL/do.
fn branch_backward(dout: &[f32], o: &[f32], w: &[f32], d: usize) -> Vec<f32> {
    let mut dh = vec![0f32; dout.len()];
    for ((gr, or), hr) in dout
        .chunks_exact(d)
        .zip(o.chunks_exact(d))
        .zip(dh.chunks_exact_mut(d))
    {
        for i in 0..d {
            hr[i] = (0..d)
                .map(|j| gr[j] * (1.0 - or[j] * or[j]) * w[i * d + j])
                .sum();
        }
    }
    dh
}

fn set_params(layout: &ParamLayout, prefix: &str, v: &Value) -> Vec<f32> {
    let mut params = layout.zeros().to_vec();
    for (name, v) in v.as_object().unwrap() {
        let t = layout
            .find(&format!("{prefix}.{name}"))
            .unwrap_or_else(|| panic!("no tensor {prefix}.{name}"));
        params[t.range.clone()].copy_from_slice(&floats(v));
    }
    params
}

/// mHC against transformers' own DeepseekV4HyperConnection and
/// DeepseekV4HyperHead (scripts/gen_mhc_fixtures.py, fixtures/mhc.json).
#[test]
fn mhc_matches_transformers_deepseek_v4_modules() {
    let fx: Value = serde_json::from_str(include_str!("fixtures/mhc.json")).unwrap();
    for case in fx["cases"].as_array().unwrap() {
        let u = |k: &str| case[k].as_u64().unwrap() as usize;
        let (rows, n, d, iters) = (u("rows"), u("n"), u("d"), u("iters"));
        let mut layout = ParamLayout::new();
        let hc = Hyper::manifold(&mut layout, "hc", n, d, iters, 0.02, None);
        check_case(&hc, &layout, case);
        // The head: the learned collapse before the final norm.
        let mut layout = ParamLayout::new();
        let head = StreamHead::learned(&mut layout, "head", n, d, 0.02);
        let hf = &case["head"];
        let params = set_params(&layout, "head", &hf["params"]);
        let x = floats(&case["x"]);
        let mut c = head.cache(rows);
        let out = head.forward(&params, &x, &mut c).to_vec();
        close("head out", &out, &floats(&hf["out"]), 1e-5);
        let mut grads = layout.zeros();
        let mut dx = vec![0f32; rows * n * d];
        head.backward(&params, &mut grads, &x, &floats(&hf["dh"]), &mut dx, &mut c);
        close("head dx", &dx, &floats(&hf["dx"]), 1e-4);
        for (name, v) in hf["grads"].as_object().unwrap() {
            let t = layout.find(&format!("head.{name}")).unwrap();
            close(name, &grads[t.range.clone()], &floats(v), 1e-4);
        }
    }
}

/// Attention Residuals against a reference written from the paper
/// (scripts/gen_attnres_fixtures.py, fixtures/attnres.json): the depth mix
/// a sublayer reads, the write into its slot, every gradient; and the
/// head's mix of every slot.
#[test]
fn attention_residuals_match_pytorch() {
    let fx: Value = serde_json::from_str(include_str!("fixtures/attnres.json")).unwrap();
    for case in fx["cases"].as_array().unwrap() {
        let u = |k: &str| case[k].as_u64().unwrap() as usize;
        let (rows, d) = (u("rows"), u("d"));
        let at = DepthSlots {
            slots: u("slots"),
            own: u("own"),
            reads: u("reads"),
            absent: 0,
        };
        let mut layout = ParamLayout::new();
        let ar = DepthAttn::new(&mut layout, "ar", at, d, None);
        let mut params = layout.zeros();
        ar.query
            .get_mut(&mut params)
            .copy_from_slice(&floats(&case["query"]));
        let (x, w, dy) = (floats(&case["x"]), floats(&case["w"]), floats(&case["dy"]));
        let mut c = ar.cache(rows);
        let mut h = vec![0f32; rows * d];
        ar.read(&params, &x, &mut h, &mut c);
        close("h", &h, &floats(&case["h"]), 1e-5);
        let o = branch(&h, &w, d);
        ar.write(&x, &o, &mut c, Dtype::F32, false);
        close("y", c.output(), &floats(&case["y"]), 1e-5);
        let mut grads = layout.zeros();
        let mut dout = vec![0f32; rows * d];
        let mut dx = vec![0f32; x.len()];
        ar.write_backward(&dy, &mut dout, &mut dx);
        let dh = branch_backward(&dout, &o, &w, d);
        ar.read_backward(&params, &mut grads, &x, &dh, &mut dx, &mut c, Dtype::F32);
        close("dx", &dx, &floats(&case["dx"]), 1e-4);
        close(
            "dquery",
            ar.query.get(&grads),
            &floats(&case["dquery"]),
            1e-4,
        );
        // The head: every slot mixed.
        let hf = &case["head"];
        let mut layout = ParamLayout::new();
        let head = DepthHead::new(&mut layout, "head", at.slots, d);
        let mut params = layout.zeros();
        head.query
            .get_mut(&mut params)
            .copy_from_slice(&floats(&hf["query"]));
        let x = floats(&hf["x"]);
        let mut c = head.cache(rows);
        let mut out = vec![0f32; rows * d];
        head.forward(&params, &x, &mut out, &mut c);
        close("head out", &out, &floats(&hf["out"]), 1e-5);
        let mut grads = layout.zeros();
        let mut dx = vec![0f32; x.len()];
        head.backward(&params, &mut grads, &x, &floats(&hf["dh"]), &mut dx, &c);
        close("head dx", &dx, &floats(&hf["dx"]), 1e-4);
        close(
            "head dquery",
            head.query.get(&grads),
            &floats(&hf["dquery"]),
            1e-4,
        );
    }
}
