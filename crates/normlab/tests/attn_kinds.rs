//! The attention kinds (`--attn-kind`, nn/attn_fn.rs) against PyTorch
//! (scripts/gen_attn_kinds_fixtures.py, fixtures/attn_kinds.json): the
//! sink logits against Hugging Face transformers' own `GptOssAttention`
//! (RoPE neutralised with cos = 1, sin = 0), sigmoid and ReLU attention
//! against a reference written from the papers; the output and every
//! gradient.

mod common;

use common::fixtures::{close, floats};
use normlab::nn::{Attention, AttnKind, AttnOptions};
use normlab::params::{Init, ParamLayout, ParamRef};
use serde_json::Value;

#[test]
fn attention_kinds_match_pytorch() {
    let fx: Value = serde_json::from_str(include_str!("fixtures/attn_kinds.json")).unwrap();
    let mut seen = Vec::new();
    for case in fx["cases"].as_array().unwrap() {
        let u = |k: &str| case[k].as_u64().unwrap() as usize;
        let (batch, t, d, heads) = (u("batch"), u("t"), u("d"), u("heads"));
        let name = case["kind"].as_str().unwrap();
        let kind: AttnKind = name.parse().unwrap();
        seen.push(kind);
        let mut layout = ParamLayout::new();
        let attn = Attention::new(
            &mut layout,
            "attn",
            d,
            heads,
            AttnOptions {
                kind,
                ..AttnOptions::default()
            },
            None,
            Init::Const(0.0),
            Init::Const(0.0),
        );
        let mut tensors: Vec<(&ParamRef, &str)> = vec![
            (&attn.qkv.w, "w_qkv"),
            (attn.qkv.b.as_ref().unwrap(), "b_qkv"),
            (&attn.proj.w, "w_proj"),
            (attn.proj.b.as_ref().unwrap(), "b_proj"),
        ];
        if let Some(s) = &attn.sinks {
            tensors.push((s, "sinks"));
        }
        assert_eq!(attn.sinks.is_some(), kind == AttnKind::SinkLogit);
        let mut params = layout.zeros();
        for (r, key) in &tensors {
            r.get_mut(&mut params).copy_from_slice(&floats(&case[*key]));
        }
        let (x, dy) = (floats(&case["x"]), floats(&case["dy"]));
        let mut c = attn.cache(batch, t);
        let mut out = vec![0.0; batch * t * d];
        attn.forward(&params, &x, &mut out, &mut c);
        close(&format!("{name} out"), &out, &floats(&case["out"]), 1e-5);
        let mut grads = layout.zeros();
        let mut dx = vec![0.0; batch * t * d];
        attn.backward(&params, &mut grads, &x, &dy, &mut dx, &mut c);
        close(&format!("{name} dx"), &dx, &floats(&case["dx"]), 1e-4);
        for (r, key) in &tensors {
            close(
                &format!("{name} d_{key}"),
                r.get(&grads),
                &floats(&case[format!("d_{key}").as_str()]),
                1e-4,
            );
        }
    }
    for k in [AttnKind::SinkLogit, AttnKind::Sigmoid, AttnKind::Relu] {
        assert!(seen.contains(&k), "no fixture for {k}");
    }
}
