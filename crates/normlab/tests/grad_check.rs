//! Finite-difference checks of every module and of whole toy and gpt models,
//! for every norm kind x every placement preset (x QK-Norm on/off for gpt).

use normlab::gradcheck::check_model;
use normlab::kernels::norm::NormKind;
use normlab::kernels::rng::Rng;
use normlab::model::{Model, ModelConfig, ModelKind};
use normlab::nn::{Activation, AttnKind, OutputGate, Placement};

/// Every kind a model can use.
fn kinds() -> impl Iterator<Item = NormKind> {
    NormKind::row_wise()
}

fn tiny(kind: ModelKind) -> ModelConfig {
    let mut c = ModelConfig::defaults(kind);
    c.vocab = 11;
    c.seq = 6;
    c.d_model = 8;
    c.hidden = 12;
    c.layers = 2;
    c.heads = 2;
    c.init_std = 0.3;
    c.out_proj_std = Some(0.3);
    c
}

fn run_check(cfg: &ModelConfig, seed: u64) {
    let model = Model::new(cfg).unwrap();
    let mut params = model.init_params(seed);
    // Perturb gains/biases away from 1/0 so every term of every norm matters.
    let mut rng = Rng::new(seed ^ 99);
    for v in params.iter_mut() {
        *v += 0.05 * rng.normal() as f32;
    }
    let mut ws = model.workspace(2, cfg.seq);
    for (i, t) in ws.tokens.iter_mut().enumerate() {
        *t = ((i * 7 + 3) % cfg.vocab) as u32;
    }
    for (i, t) in ws.targets.iter_mut().enumerate() {
        *t = ((i * 5 + 1) % cfg.vocab) as u32;
    }
    let checks = check_model(&model, &params, &mut ws, seed, 1e-3);
    let bad: Vec<_> = checks.iter().filter(|c| c.rel_err > 2e-2).collect();
    assert!(
        bad.is_empty(),
        "{:?} {} {}: {bad:#?}",
        cfg.kind,
        cfg.norm,
        cfg.placement
    );
    assert_eq!(checks.len(), model.layout.tensors.len());
}

#[test]
fn toy_every_kind_and_placement() {
    for kind in kinds() {
        for placement in Placement::ALL {
            if placement == Placement::DeepNorm && kind == NormKind::None {
                continue; // rejected by validation: deepnorm needs a norm
            }
            let mut c = tiny(ModelKind::Toy);
            c.norm = kind;
            c.placement = placement;
            run_check(&c, 1);
        }
    }
}

#[test]
fn gpt_every_kind_placement_and_qk_norm() {
    for kind in kinds() {
        for placement in Placement::ALL {
            if placement == Placement::DeepNorm && kind == NormKind::None {
                continue;
            }
            for qk in [false, true] {
                let mut c = tiny(ModelKind::Gpt);
                c.norm = kind;
                c.placement = placement;
                c.qk_norm = qk;
                run_check(&c, 2);
            }
        }
    }
}

#[test]
fn options_swiglu_tied_no_residual_branch_scale_no_final_norm() {
    let mut c = tiny(ModelKind::Gpt);
    c.act = Activation::Swiglu;
    c.tie_head = true;
    run_check(&c, 3);
    // SwiGLU clamped low enough that many gate and up values are clamped
    // (the clamp's kink defeats finite differences for a value that the
    // step carries across the limit: at this seed and limit none is;
    // tests/swiglu_clamp.rs checks the clamped gradients against torch).
    c.swiglu_clamp = Some(0.45);
    run_check(&c, 3);
    // The attention output gate, both forms, with and without QK-Norm.
    for (i, gate) in OutputGate::ALL.into_iter().enumerate() {
        let mut c = tiny(ModelKind::Gpt);
        c.attn_gate = Some(gate);
        c.qk_norm = i == 1;
        run_check(&c, 7 + i as u64);
    }
    let mut c = tiny(ModelKind::Gpt);
    c.residual = false;
    run_check(&c, 4);
    // No Linear biases (nanoGPT's bias=False), gated, in both families.
    for kind in [ModelKind::Gpt, ModelKind::Toy] {
        let mut c = tiny(kind);
        c.no_bias = true;
        c.attn_gate = (kind == ModelKind::Gpt).then_some(OutputGate::Elementwise);
        let m = normlab::model::Model::new(&c).unwrap();
        assert!(
            m.layout
                .tensors
                .iter()
                .all(|t| t.kind != normlab::params::ParamKind::Bias),
            "a bias with no_bias"
        );
        run_check(&c, 9);
    }
    let mut c = tiny(ModelKind::Toy);
    c.branch_scale = 0.5;
    c.final_norm = Some(false);
    run_check(&c, 5);
    let mut c = tiny(ModelKind::Toy);
    c.placement = Placement::Post;
    c.final_norm = Some(true);
    run_check(&c, 6);
    // The tensors conversion adds: a head bias and biases after output norms.
    let mut c = tiny(ModelKind::Gpt);
    c.placement = Placement::Sandwich;
    c.norm = NormKind::RmsNorm;
    c.head_bias = true;
    c.out_norm_bias = true;
    run_check(&c, 8);
}

/// The attention-sink removers (`--attn-kind`): sink logits, sigmoid and
/// ReLU attention, one with QK-Norm, one with the gate, and each over a
/// sequence long enough to cross the causal blocks. (ReLU's kink defeats
/// finite differences only for a score that the step carries across 0:
/// at the seeds below none is.)
#[test]
fn attention_kinds_sink_logit_sigmoid_relu() {
    for (i, kind) in [AttnKind::SinkLogit, AttnKind::Sigmoid, AttnKind::Relu]
        .into_iter()
        .enumerate()
    {
        for seq in [6, 70] {
            let mut c = tiny(ModelKind::Gpt);
            c.attn_kind = kind;
            c.seq = seq;
            c.qk_norm = i == 0;
            c.attn_gate = (i == 1).then_some(OutputGate::Headwise);
            // ReLU: seeds whose finite-difference steps cross no kink
            // (about half of the seeds 0..30 do at d 8 over 70 positions;
            // tests/attn_kinds.rs checks every gradient against torch).
            let seed = match (kind, seq) {
                (AttnKind::Relu, 6) => 0,
                (AttnKind::Relu, _) => 5,
                _ => 11 + i as u64,
            };
            run_check(&c, seed);
        }
    }
}

#[test]
fn gpt_long_sequences_cross_causal_blocks() {
    // seq > 64 exercises the block-skipping causal attention.
    for qk in [false, true] {
        let mut c = tiny(ModelKind::Gpt);
        c.seq = 70;
        c.qk_norm = qk;
        run_check(&c, 7);
    }
}

#[test]
fn residual_options_rezero_layerscale_lns_mixln_emb_scale() {
    for kind in [ModelKind::Toy, ModelKind::Gpt] {
        let mut cases = Vec::new();
        for placement in [Placement::None, Placement::Pre, Placement::Sandwich] {
            let mut c = tiny(kind);
            c.placement = placement;
            c.rezero = true;
            cases.push(c.clone());
            c.rezero = false;
            c.layerscale = Some(0.1);
            cases.push(c);
        }
        for placement in [Placement::Pre, Placement::Peri] {
            let mut c = tiny(kind);
            c.placement = placement;
            c.lns = true;
            cases.push(c);
        }
        // Mix-LN: one Post-LN block then a Pre-LN one, alone and with every
        // option that composes with it.
        let mut c = tiny(kind);
        c.placement = Placement::MixLn;
        c.mixln_post_layers = Some(1);
        cases.push(c.clone());
        c.lns = true;
        c.layerscale = Some(0.3);
        c.norm = NormKind::Dyt;
        cases.push(c);
        // The DyT paper's LLaMA recipe: a learnable scale on the embeddings.
        let mut c = tiny(kind);
        c.norm = NormKind::Dyt;
        c.emb_scale = true;
        cases.push(c);
        for (i, c) in cases.iter().enumerate() {
            c.validate().unwrap();
            run_check(c, 20 + i as u64);
        }
    }
}

/// The n-stream and depth-attention designs' cases, toy and GPT: each
/// placement that keeps the stream free of norms with the settings
/// `per_placement` gives, every norm kind with `per_norm`, and `extra`;
/// checked with seeds from `seed`.
fn check_stream_design(
    seed: u64,
    per_placement: &[fn(&mut ModelConfig)],
    per_norm: fn(&mut ModelConfig),
    extra: &[fn(&mut ModelConfig)],
) {
    for kind in [ModelKind::Toy, ModelKind::Gpt] {
        let mut cases = Vec::new();
        let with = |f: &fn(&mut ModelConfig)| {
            let mut c = tiny(kind);
            f(&mut c);
            c
        };
        for placement in [
            Placement::Pre,
            Placement::Sandwich,
            Placement::Olmo2,
            Placement::None,
        ] {
            for f in per_placement {
                let mut c = with(f);
                c.placement = placement;
                cases.push(c);
            }
        }
        // Norms the design owns are the model's kind: every kind.
        for norm in kinds() {
            let mut c = with(&per_norm);
            c.norm = norm;
            cases.push(c);
        }
        cases.extend(extra.iter().map(with));
        for (i, c) in cases.iter().enumerate() {
            c.validate().unwrap();
            run_check(c, seed + i as u64);
        }
    }
}

#[test]
fn hyper_connections_static_and_dynamic() {
    check_stream_design(
        40,
        &[
            |c| c.hc = Some(2),
            |c| {
                c.hc = Some(3);
                c.hc_dynamic = true;
            },
        ],
        |c| {
            c.hc = Some(4);
            c.hc_dynamic = true;
        },
        // With the options that act on the branch.
        &[|c| {
            c.hc = Some(2);
            c.hc_dynamic = true;
            c.lns = true;
            c.layerscale = Some(0.3);
        }],
    );
}

#[test]
fn mhc_through_the_sinkhorn_iterations_and_the_head() {
    check_stream_design(
        70,
        &[
            |c| {
                c.mhc = Some(2);
                c.mhc_sinkhorn = Some(3);
            },
            |c| c.mhc = Some(4),
        ],
        |c| c.mhc = Some(3),
        &[],
    );
}

#[test]
fn attention_residuals_block_and_full() {
    // Full AttnRes, blocks of 2 (boundaries before the attention
    // sublayers) and of 3 (inside blocks); with a gate on the branch.
    check_stream_design(
        100,
        &[
            |c| c.attnres = Some(1),
            |c| c.attnres = Some(2),
            |c| c.attnres = Some(3),
        ],
        |c| c.attnres = Some(2),
        &[|c| {
            c.attnres = Some(1);
            c.layerscale = Some(0.3);
        }],
    );
}

/// The pretrained families' options, each family's combination as the
/// family registry lowers it: RoPE (halves, adjacent with a scaling,
/// partial), grouped-query attention with a head width of its own, q/k/v
/// biases alone, QK-Norm per head and over the whole q and k, the output
/// placement, sandwich with zero-centred gains, GeGLU, the embedding
/// multiplier, a scale of its own, per-layer windows and bases, both
/// soft-caps, the parallel block with exact GELU, a window on every layer.
#[test]
fn pretrained_families_options() {
    use normlab::model::config::LayerAttn;
    use normlab::nn::rope::{RopePairs, RopeScaling};
    let base = || {
        let mut c = tiny(ModelKind::Gpt);
        c.heads = 2;
        c.rope = Some(10_000.0);
        c.no_bias = true;
        c.norm = NormKind::RmsNorm;
        c.act = Activation::Swiglu;
        c
    };
    let mut cases: Vec<(&str, ModelConfig)> = Vec::new();
    let mut c = base();
    c.kv_heads = Some(1);
    c.tie_head = true;
    cases.push(("llama", c));
    let mut c = base();
    c.kv_heads = Some(1);
    c.rope_pairs = Some(RopePairs::Adjacent);
    c.rope_scaling = Some(RopeScaling::Linear { factor: 4.0 });
    cases.push(("llama gguf, scaled", c));
    let mut c = base();
    c.qkv_bias = true;
    cases.push(("qwen2", c));
    let mut c = base();
    c.qk_norm = true;
    c.head_dim = Some(6);
    c.kv_heads = Some(1);
    cases.push(("qwen3", c));
    let mut c = base();
    c.placement = Placement::Olmo2;
    c.qk_norm = true;
    c.qk_norm_whole = true;
    cases.push(("olmo2", c));
    let mut c = base();
    c.placement = Placement::Peri;
    c.norm = NormKind::ZRmsNorm;
    c.act = Activation::Geglu;
    c.qk_norm = true;
    c.head_dim = Some(6);
    c.kv_heads = Some(1);
    c.emb_mult = Some(2.5);
    c.attn_scale = Some(0.3);
    c.rope = None;
    c.layer_attn = Some(vec![
        LayerAttn {
            window: Some(2),
            rope_base: 10_000.0,
        },
        LayerAttn {
            window: None,
            rope_base: 1e6,
        },
    ]);
    c.attn_softcap = Some(1.5);
    c.final_softcap = Some(2.0);
    c.tie_head = true;
    cases.push(("gemma", c));
    let mut c = base();
    c.norm = NormKind::LayerNorm;
    c.no_bias = false;
    c.parallel = true;
    c.rope_dims = Some(2);
    c.act = Activation::GeluErf;
    cases.push(("gpt_neox", c));
    let mut c = base();
    c.window = Some(3);
    c.rope_dims = Some(2);
    cases.push(("phi3", c));
    // What a fine-tune inserts into a windowed family (gpt-oss's form):
    // sink logits and the elementwise gate, with windows per layer.
    let mut c = base();
    c.rope = None;
    c.layer_attn = Some(vec![
        LayerAttn {
            window: Some(2),
            rope_base: 1e4,
        },
        LayerAttn {
            window: None,
            rope_base: 1e6,
        },
    ]);
    c.attn_kind = AttnKind::SinkLogit;
    c.attn_gate = Some(OutputGate::Elementwise);
    cases.push(("windowed, sinks and gate inserted", c));
    for (i, (name, c)) in cases.iter().enumerate() {
        c.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        let m = normlab::model::Model::new(c).unwrap();
        assert!(m.emb.wpe.is_none(), "{name}: RoPE, no position table");
        eprintln!("{name}");
        run_check(c, 20 + i as u64);
    }
}
