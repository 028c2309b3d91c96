//! Decoders from a Hugging Face folder (`config.json`, `model.safetensors`,
//! optionally `tokenizer.json`), each family a configuration of the one
//! decoder and a name map. Llama, Mistral, Qwen2 and Qwen3
//! ([`llama_config`], [`names::HF_LLAMA`](super::names::HF_LLAMA)):
//! Pre-RMSNorm, SwiGLU, q/k/v biases for Qwen2, QK-Norm for Qwen3,
//! Mistral's window; OLMo 2 the same decoder with output norms and QK-Norm
//! over whole q and k ([`names::HF_OLMO2`](super::names::HF_OLMO2)). Gemma 2 and Gemma 3's text model (`gemma2`,
//! `gemma3_text`, [`gemma_config`]; Gemma 2 as below without QK-Norm, with
//! tanh-capped attention logits and one RoPE base): sandwich RMSNorms whose file stores w
//! (the gain is 1 + w), QK-Norm before RoPE, GeGLU with tanh-GELU, the
//! sqrt(d) embedding scale, query_pre_attn_scalar^-1/2 as the attention
//! scale, sliding-window layers with the local RoPE base and full layers
//! with the global one, RoPE on (i, i + head_dim/2), a tied head, names
//! [`names::HF`](super::names::HF). Every file's size, and every
//! tensor's type and shape, is checked against what config.json implies
//! before it is read (`folder.rs`). GPT-2 and GPT-NeoX: `hf_gpt.rs`;
//! Phi-3: `phi3.rs`; which reader a folder gets: the family registry
//! (`family.rs`).

use super::config_json::{blocks, count, list, num, refuse_flags, rope, text};
use super::{DecoderConfig, GainStore, GatedAct, LayerAttention, RopePairs};
use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::nn::Placement;
use serde_json::Value;

/// The RoPE base of a family that reads no scaling (Gemma 2): scaling is
/// refused by name.
fn rope_base(c: &Value, default: f64) -> Result<f64> {
    match rope(c, default)? {
        (base, None) => Ok(base),
        (_, Some(s)) => Err(format!("RoPE scaling {s:?} is not supported in this family").into()),
    }
}

/// The decoder configuration of a Llama-style `config.json` (`family`:
/// llama, mistral, qwen2, qwen3 or olmo2): Pre-RMSNorm with plain gains,
/// SwiGLU, RoPE on (i, i + head_dim/2); Qwen2 adds biases on q, k and v
/// (always: its attention has them), Qwen3 QK-Norm per head before RoPE;
/// OLMo 2 puts the norms after each sublayer's output instead of before
/// its input, and QK-Norm over the whole q and k; Mistral's
/// `sliding_window` applies to every layer, Qwen3's to the layers its
/// `layer_types` mark sliding.
pub fn llama_config(c: &Value, family: &str) -> Result<DecoderConfig> {
    let layers = blocks(c, "num_hidden_layers")?;
    let olmo2 = family == "olmo2";
    let act = text(c, "hidden_act", "silu")?;
    if act != "silu" {
        return Err(format!("activation '{act}' is not supported (silu)").into());
    }
    refuse_flags(
        c,
        &[
            ("attention_bias", "attention biases"),
            ("mlp_bias", "MLP biases"),
        ],
    )?;
    let (d, heads) = (
        count(c, "hidden_size", None)?,
        count(c, "num_attention_heads", None)?,
    );
    let head_dim = count(c, "head_dim", Some(d / heads.max(1)))?;
    let (base, rope_scaling) = rope(c, 10_000.0)?;
    let window = match c.get("sliding_window") {
        None | Some(Value::Null) => None,
        Some(_) => Some(count(c, "sliding_window", None)?),
    };
    let types: Option<Vec<&str>> =
        list(c, "layer_types")?.map(|a| a.iter().map(|v| v.as_str().unwrap_or("")).collect());
    if types.as_ref().is_some_and(|t| t.len() != layers) {
        return Err(format!("config.json: layer_types does not have {layers} entries").into());
    }
    let attn = (0..layers)
        .map(|i| {
            let w =
                match (family, types.as_ref().map(|t| t[i])) {
                    ("mistral", _) => window,
                    (_, None | Some("full_attention")) => None,
                    (_, Some("sliding_attention")) => Some(window.ok_or(
                        "config.json: a sliding layer without a sliding_window".to_string(),
                    )?),
                    (_, Some(other)) => {
                        return Err(format!("layer type '{other}' is not supported").into())
                    }
                };
            Ok(LayerAttention {
                window: w,
                rope_base: base,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(DecoderConfig {
        family: family.into(),
        vocab: count(c, "vocab_size", None)?,
        d,
        layers,
        heads,
        kv_heads: count(c, "num_key_value_heads", Some(heads))?,
        head_dim,
        ffn: count(c, "intermediate_size", None)?,
        context: count(c, "max_position_embeddings", Some(2048))?,
        placement: if olmo2 {
            Placement::Olmo2
        } else {
            Placement::Pre
        },
        norm: NormKind::RmsNorm,
        eps: num(c, "rms_norm_eps", Some(1e-6))? as f32,
        gain: GainStore::Plain,
        qk_norm: family == "qwen3" || olmo2,
        qkv_bias: family == "qwen2",
        qk_norm_whole: olmo2,
        rope_scaling,
        attn_softcap: None,
        act: GatedAct::Silu,
        emb_scale: 1.0,
        attn_scale: (head_dim as f64).powf(-0.5) as f32,
        attn,
        rope_pairs: RopePairs::Halves,
        final_softcap: None,
        gpt: Default::default(),
    })
}

/// The decoder configuration of a Gemma 2 or Gemma 3 text `config.json`
/// (`family` "gemma2" or "gemma3"): both sandwich RMSNorms with 1 + w
/// gains, GeGLU, the sqrt(d) embedding scale, sliding and full layers;
/// Gemma 2 tanh-caps the attention logits (`attn_logit_softcapping`) and
/// has one RoPE base, Gemma 3 QK-Norm and a base per layer kind.
pub fn gemma_config(c: &Value, family: &str) -> Result<DecoderConfig> {
    let gemma2 = family == "gemma2";
    let layers = blocks(c, "num_hidden_layers")?;
    let act = text(c, "hidden_activation", "gelu_pytorch_tanh")?;
    if act != "gelu_pytorch_tanh" {
        return Err(format!("activation '{act}' is not supported (gelu_pytorch_tanh)").into());
    }
    refuse_flags(
        c,
        &[
            ("attention_bias", "attention biases"),
            ("use_bidirectional_attention", "bidirectional attention"),
        ],
    )?;
    let softcap = |key: &str| -> Result<Option<f32>> {
        match num(c, key, Some(f64::NAN))? {
            v if v.is_nan() => Ok(None),
            v if v > 0.0 && v.is_finite() => Ok(Some(v as f32)),
            v => Err(format!("config.json: {key} {v} is not a positive cap").into()),
        }
    };
    let attn_softcap = softcap("attn_logit_softcapping")?;
    if attn_softcap.is_some() && !gemma2 {
        return Err("attention logit soft-capping is not supported in gemma3_text".into());
    }
    // Per layer: sliding or full; then each kind's RoPE base.
    let types: Vec<String> = match list(c, "layer_types")? {
        Some(a) => a
            .iter()
            .map(|v| v.as_str().unwrap_or("").to_string())
            .collect(),
        None => {
            let p = count(
                c,
                "sliding_window_pattern",
                Some(if gemma2 { 2 } else { 6 }),
            )?
            .max(1);
            (0..layers)
                .map(|i| {
                    if (i + 1) % p != 0 {
                        "sliding_attention".into()
                    } else {
                        "full_attention".into()
                    }
                })
                .collect()
        }
    };
    if types.len() != layers {
        return Err(format!(
            "config.json: layer_types has {} entries for {layers} layers",
            types.len()
        )
        .into());
    }
    let theta = |kind: &str, old_key: &str, default: f64| -> Result<f64> {
        match c
            .get("rope_parameters")
            .and_then(|r| r.get(kind))
            .and_then(|r| r.get("rope_theta"))
        {
            Some(v) => v
                .as_f64()
                .ok_or_else(|| format!("config.json: {kind}'s rope_theta is not a number").into()),
            None => num(c, old_key, Some(default)),
        }
    };
    for kind in ["full_attention", "sliding_attention"]
        .into_iter()
        .filter(|_| !gemma2)
    {
        let rope_type = match c.get("rope_parameters").and_then(|r| r.get(kind)) {
            Some(r) => text(r, "rope_type", "default")?,
            None => "default",
        };
        if rope_type != "default" {
            return Err(format!("RoPE type '{rope_type}' ({kind}) is not supported").into());
        }
    }
    // transformers 4.x's form: one rope_scaling, applied to the global
    // layers only (Gemma 3 4B and larger, linear x8): not read yet, so
    // refused rather than run as plain RoPE.
    if let Some(r) = c.get("rope_scaling").filter(|r| !r.is_null()) {
        if !r.is_object() {
            return Err("config.json: 'rope_scaling' is not an object".into());
        }
        let kind = text(r, "rope_type", "")?;
        let kind = if kind.is_empty() {
            text(r, "type", "default")?
        } else {
            kind
        };
        if kind != "default" {
            return Err(format!(
                "RoPE scaling '{kind}' (rope_scaling, on Gemma's global layers) is not supported"
            )
            .into());
        }
    }
    let (global, local) = if gemma2 {
        let b = rope_base(c, 10_000.0)?;
        (b, b)
    } else {
        (
            theta("full_attention", "rope_theta", 1_000_000.0)?,
            theta("sliding_attention", "rope_local_base_freq", 10_000.0)?,
        )
    };
    let window = count(c, "sliding_window", Some(4096))?;
    let attn = types
        .iter()
        .map(|t| match t.as_str() {
            "sliding_attention" => Ok(LayerAttention {
                window: Some(window),
                rope_base: local,
            }),
            "full_attention" => Ok(LayerAttention {
                window: None,
                rope_base: global,
            }),
            other => Err(format!("layer type '{other}' is not supported").into()),
        })
        .collect::<Result<Vec<_>>>()?;
    let d = count(c, "hidden_size", None)?;
    let head_dim = count(c, "head_dim", Some(256))?;
    Ok(DecoderConfig {
        family: family.into(),
        vocab: count(c, "vocab_size", None)?,
        d,
        layers,
        heads: count(c, "num_attention_heads", None)?,
        kv_heads: count(c, "num_key_value_heads", None)?,
        head_dim,
        ffn: count(c, "intermediate_size", None)?,
        context: count(c, "max_position_embeddings", Some(131_072))?,
        placement: Placement::Sandwich,
        norm: NormKind::RmsNorm,
        eps: num(c, "rms_norm_eps", Some(1e-6))? as f32,
        gain: GainStore::OnePlus,
        qk_norm: !gemma2,
        qkv_bias: false,
        qk_norm_whole: false,
        rope_scaling: None,
        attn_softcap,
        act: GatedAct::GeluTanh,
        emb_scale: (d as f64).sqrt() as f32,
        attn_scale: num(c, "query_pre_attn_scalar", Some(256.0))?.powf(-0.5) as f32,
        attn,
        rope_pairs: RopePairs::Halves,
        final_softcap: softcap("final_logit_softcapping")?,
        gpt: Default::default(),
    })
}
