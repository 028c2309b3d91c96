//! The attention output gate (`--attn-gate`, nn/attention.rs) against
//! PyTorch (scripts/gen_attn_gate_fixtures.py, fixtures/attn_gate.json):
//! the elementwise form against Hugging Face transformers' own
//! `Qwen3NextAttention` (zero-centred QK-Norm on, RoPE neutralised with
//! cos = 1, sin = 0), the headwise form against a reference written from
//! the paper; the output and every gradient.

mod common;

use common::fixtures::{close, floats};
use normlab::nn::{Attention, AttnKind, AttnOptions, OutputGate};
use normlab::params::{Init, ParamLayout};
use serde_json::Value;

#[test]
fn output_gate_matches_pytorch() {
    let fx: Value = serde_json::from_str(include_str!("fixtures/attn_gate.json")).unwrap();
    for case in fx["cases"].as_array().unwrap() {
        let u = |k: &str| case[k].as_u64().unwrap() as usize;
        let (batch, t, d, heads) = (u("batch"), u("t"), u("d"), u("heads"));
        let form = match case["form"].as_str().unwrap() {
            "elementwise" => OutputGate::Elementwise,
            _ => OutputGate::Headwise,
        };
        let qk = case["qk_norm"].as_bool().unwrap();
        let mut layout = ParamLayout::new();
        let attn = Attention::new(
            &mut layout,
            "attn",
            d,
            heads,
            AttnOptions {
                qk_norm: qk,
                gate: Some(form),
                kind: AttnKind::Softmax,
                ..AttnOptions::default()
            },
            None,
            Init::Const(0.0),
            Init::Const(0.0),
        );
        let gate = &attn.gate.as_ref().unwrap().1;
        let mut params = layout.zeros();
        attn.qkv
            .w
            .get_mut(&mut params)
            .copy_from_slice(&floats(&case["w_qkv"]));
        attn.proj
            .w
            .get_mut(&mut params)
            .copy_from_slice(&floats(&case["w_proj"]));
        gate.w
            .get_mut(&mut params)
            .copy_from_slice(&floats(&case["w_gate"]));
        if let Some((qn, kn)) = &attn.qk_norm {
            qn.p.get_mut(&mut params)
                .copy_from_slice(&floats(&case["q_norm"]));
            kn.p.get_mut(&mut params)
                .copy_from_slice(&floats(&case["k_norm"]));
        }
        let (x, dy) = (floats(&case["x"]), floats(&case["dy"]));
        let mut c = attn.cache(batch, t);
        let mut out = vec![0.0; batch * t * d];
        attn.forward(&params, &x, &mut out, &mut c);
        let name = case["form"].as_str().unwrap();
        close(&format!("{name} out"), &out, &floats(&case["out"]), 1e-5);
        let mut grads = layout.zeros();
        let mut dx = vec![0.0; batch * t * d];
        attn.backward(&params, &mut grads, &x, &dy, &mut dx, &mut c);
        close(&format!("{name} dx"), &dx, &floats(&case["dx"]), 1e-4);
        for (got, key) in [
            (attn.qkv.w.get(&grads), "d_qkv"),
            (attn.proj.w.get(&grads), "d_proj"),
            (gate.w.get(&grads), "d_gate"),
        ] {
            close(&format!("{name} {key}"), got, &floats(&case[key]), 1e-4);
        }
        if let Some((qn, kn)) = &attn.qk_norm {
            // transformers' gain is 1 + w: the same gradient.
            close(
                "d_q_norm",
                qn.p.get(&grads),
                &floats(&case["d_q_norm"]),
                1e-4,
            );
            close(
                "d_k_norm",
                kn.p.get(&grads),
                &floats(&case["d_k_norm"]),
                1e-4,
            );
        }
    }
}
