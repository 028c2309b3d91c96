//! Phi-3 (`model_type` phi3; Phi-3-mini-4k, Phi-3-medium): Llama's block
//! (Pre-RMSNorm, SwiGLU, RoPE on (i, i + rotated/2)) with q, k and v in one
//! projection (`qkv_proj`: the queries' rows, then the keys', then the
//! values') and the MLP's gate and up in one (`gate_up_proj`: the gate's
//! rows first), a sliding window on every layer when `sliding_window` is
//! set, and RoPE on the first `partial_rotary_factor` of each head. Its
//! long-context variants scale RoPE by `longrope` (Phi-3 128k, Phi-3.5,
//! Phi-4-mini): refused by name (`config_json::rope`). A row of the family
//! registry (`family.rs`).

use super::config_json::{count, rotary_share};
use super::hf::llama_config;
use super::names::{Tensor, TensorNames};
use super::{DecoderConfig, QkvStore};
use crate::error::Result;
use serde_json::Value;

/// Hugging Face's names for Phi-3 (`Phi3ForCausalLM`).
pub const HF_PHI3: TensorNames = TensorNames::new(&[
    (Tensor::Embedding, "model.embed_tokens.weight"),
    (Tensor::FinalNorm, "model.norm.weight"),
    (Tensor::Head, "lm_head.weight"),
    (Tensor::AttnNorm, "model.layers.{i}.input_layernorm.weight"),
    (Tensor::Qkv, "model.layers.{i}.self_attn.qkv_proj.weight"),
    (Tensor::O, "model.layers.{i}.self_attn.o_proj.weight"),
    (
        Tensor::FfnNorm,
        "model.layers.{i}.post_attention_layernorm.weight",
    ),
    (Tensor::GateUp, "model.layers.{i}.mlp.gate_up_proj.weight"),
    (Tensor::Down, "model.layers.{i}.mlp.down_proj.weight"),
]);

/// The decoder configuration of a Phi-3 `config.json`.
pub fn phi3_config(c: &Value, _ty: &str) -> Result<DecoderConfig> {
    let mut cfg = llama_config(c, "phi3")?;
    if let Some(w) = match c.get("sliding_window") {
        None | Some(Value::Null) => None,
        Some(_) => Some(count(c, "sliding_window", None)?),
    } {
        cfg.attn.iter_mut().for_each(|a| a.window = Some(w));
    }
    let share = rotary_share(c, "partial_rotary_factor", 1.0)?;
    if share < 1.0 {
        // As transformers: int(head_dim * partial_rotary_factor).
        cfg.gpt.rotary_dims = Some((cfg.head_dim as f64 * share) as usize);
    }
    cfg.gpt.qkv = QkvStore::Concat;
    cfg.gpt.fused_gate_up = true;
    Ok(cfg)
}
