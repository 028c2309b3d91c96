//! The two older families of Hugging Face folders, as configurations of the
//! one decoder: GPT-2 ([`gpt2_config`]: Pre-LayerNorm with bias, learned
//! positions, q/k/v in one Conv1D stored `[in, out]`, a plain GELU (tanh)
//! MLP, biases on every projection, a tied head) and GPT-NeoX
//! ([`neox_config`], Pythia: Pre-LayerNorm with bias, attention and MLP in
//! parallel, RoPE on the first quarter of each head, q/k/v stored head by
//! head, a plain GELU MLP, a separate head); and the buffers their older
//! files carry besides the weights ([`buffers`]).

use super::config_json::{blocks, count, num, refuse_flags, rope, rotary_share, switch, text};
use super::{DecoderConfig, GainStore, GatedAct, GptStyle, LayerAttention, QkvStore, RopePairs};
use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::nn::Placement;
use serde_json::Value;

/// The MLP activation `key` of `c` names (`default` when absent): the
/// GELUs of these families, any other refused by name.
fn gelu(c: &Value, key: &str, default: &str) -> Result<GatedAct> {
    match text(c, key, default)? {
        "gelu" => Ok(GatedAct::Gelu),
        "gelu_new" | "gelu_pytorch_tanh" => Ok(GatedAct::GeluTanh),
        other => Err(format!(
            "activation '{other}' is not supported (gelu, gelu_new, gelu_pytorch_tanh)"
        )
        .into()),
    }
}

/// The decoder configuration of a GPT-2 `config.json` (`n_embd`,
/// `n_layer`, `n_head`, `n_positions`, `n_inner`).
pub fn gpt2_config(c: &Value) -> Result<DecoderConfig> {
    let layers = blocks(c, "n_layer")?;
    refuse_flags(
        c,
        &[
            (
                "scale_attn_by_inverse_layer_idx",
                "attention scores scaled by the layer index",
            ),
            ("add_cross_attention", "cross-attention layers"),
        ],
    )?;
    let (d, heads) = (count(c, "n_embd", None)?, count(c, "n_head", None)?);
    if heads == 0 || !d.is_multiple_of(heads) {
        return Err(format!("config.json: n_embd {d} is not a multiple of n_head {heads}").into());
    }
    let head_dim = d / heads;
    let scaled = switch(c, "scale_attn_weights", true)?;
    Ok(DecoderConfig {
        family: "gpt2".into(),
        vocab: count(c, "vocab_size", None)?,
        d,
        layers,
        heads,
        kv_heads: heads,
        head_dim,
        ffn: count(c, "n_inner", Some(4 * d))?,
        context: count(c, "n_positions", Some(1024))?,
        placement: Placement::Pre,
        norm: NormKind::LayerNorm,
        eps: num(c, "layer_norm_epsilon", Some(1e-5))? as f32,
        gain: GainStore::Plain,
        qk_norm: false,
        qk_norm_whole: false,
        qkv_bias: true,
        act: gelu(c, "activation_function", "gelu_new")?,
        emb_scale: 1.0,
        attn_scale: if scaled {
            (head_dim as f64).powf(-0.5) as f32
        } else {
            1.0
        },
        attn: vec![
            LayerAttention {
                window: None,
                rope_base: 10_000.0,
            };
            layers
        ],
        rope_pairs: RopePairs::Halves,
        rope_scaling: None,
        final_softcap: None,
        attn_softcap: None,
        gpt: GptStyle {
            norm_bias: true,
            linear_bias: true,
            learned_positions: true,
            rotary_dims: Some(0),
            parallel: false,
            plain_mlp: true,
            qkv: QkvStore::Concat,
            conv1d: true,
            fused_gate_up: false,
        },
    })
}

/// The decoder configuration of a GPT-NeoX `config.json`: the rotated
/// share of each head from `rope_parameters.partial_rotary_factor`
/// (transformers 5) or the older `rotary_pct`, its base from `rope_theta`
/// or the older `rotary_emb_base`; `use_parallel_residual` (default true)
/// chooses the parallel block.
pub fn neox_config(c: &Value) -> Result<DecoderConfig> {
    let layers = blocks(c, "num_hidden_layers")?;
    if !switch(c, "attention_bias", true)? {
        return Err(
            "GPT-NeoX without attention biases (attention_bias false) is not supported".into(),
        );
    }
    let (d, heads) = (
        count(c, "hidden_size", None)?,
        count(c, "num_attention_heads", None)?,
    );
    if heads == 0 || !d.is_multiple_of(heads) {
        return Err(format!(
            "config.json: hidden_size {d} is not a multiple of num_attention_heads {heads}"
        )
        .into());
    }
    let head_dim = d / heads;
    let (base, rope_scaling) = rope(c, num(c, "rotary_emb_base", Some(10_000.0))?)?;
    let share = rotary_share(c, "rotary_pct", 0.25)?;
    // As transformers: int(head_size * share).
    let rotary_dims = (head_dim as f64 * share) as usize;
    let parallel = switch(c, "use_parallel_residual", true)?;
    Ok(DecoderConfig {
        family: "gpt_neox".into(),
        vocab: count(c, "vocab_size", None)?,
        d,
        layers,
        heads,
        kv_heads: heads,
        head_dim,
        ffn: count(c, "intermediate_size", None)?,
        context: count(c, "max_position_embeddings", Some(2048))?,
        placement: Placement::Pre,
        norm: NormKind::LayerNorm,
        eps: num(c, "layer_norm_eps", Some(1e-5))? as f32,
        gain: GainStore::Plain,
        qk_norm: false,
        qk_norm_whole: false,
        qkv_bias: true,
        act: gelu(c, "hidden_act", "gelu")?,
        emb_scale: 1.0,
        attn_scale: (head_dim as f64).powf(-0.5) as f32,
        attn: vec![
            LayerAttention {
                window: None,
                rope_base: base,
            };
            layers
        ],
        rope_pairs: RopePairs::Halves,
        rope_scaling,
        final_softcap: None,
        attn_softcap: None,
        gpt: GptStyle {
            norm_bias: true,
            linear_bias: true,
            learned_positions: false,
            rotary_dims: Some(rotary_dims),
            parallel,
            plain_mlp: true,
            qkv: QkvStore::PerHead,
            conv1d: false,
            fused_gate_up: false,
        },
    })
}

/// The buffers older GPT-2 and GPT-NeoX files hold besides the weights
/// (the causal mask, the masked score, RoPE's inverse frequencies), by
/// name (`{i}`: the block; `names` spells them) and shape: never read.
pub fn buffers(cfg: &DecoderConfig, names: &super::TensorNames) -> Vec<(String, Vec<usize>)> {
    let mask = vec![1, 1, cfg.context, cfg.context];
    let each: Vec<(&str, Vec<usize>)> = match cfg.family.as_str() {
        "gpt2" => vec![
            ("transformer.h.{i}.attn.bias", mask),
            ("transformer.h.{i}.attn.masked_bias", vec![]),
        ],
        "gpt_neox" => vec![
            ("gpt_neox.layers.{i}.attention.bias", mask),
            ("gpt_neox.layers.{i}.attention.masked_bias", vec![]),
            (
                "gpt_neox.layers.{i}.attention.rotary_emb.inv_freq",
                vec![cfg.rotary_dims() / 2],
            ),
        ],
        _ => Vec::new(),
    };
    (0..cfg.layers)
        .flat_map(|i| {
            each.iter()
                .map(move |(n, shape)| (names.spell(n, i), shape.clone()))
        })
        .collect()
}
