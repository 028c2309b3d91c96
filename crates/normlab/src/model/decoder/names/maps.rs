//! Each family's names for the decoder's tensors ([`TensorNames`]):
//! llama.cpp's GGUF names and the Hugging Face families'.

use super::{Tensor, TensorNames};

/// llama.cpp's GGUF names (Llama and, with its extra norms, Gemma 2 and 3,
/// OLMo 2, Qwen2 and Qwen3; with positions, biases and a fused q/k/v,
/// GPT-2).
pub const GGUF: TensorNames = TensorNames::new(&[
    (Tensor::Embedding, "token_embd.weight"),
    (Tensor::Position, "position_embd.weight"),
    (Tensor::FinalNorm, "output_norm.weight"),
    (Tensor::FinalNormBias, "output_norm.bias"),
    (Tensor::Head, "output.weight"),
    (Tensor::AttnNorm, "blk.{i}.attn_norm.weight"),
    (Tensor::AttnNormBias, "blk.{i}.attn_norm.bias"),
    (Tensor::AttnOutNorm, "blk.{i}.post_attention_norm.weight"),
    (Tensor::QNorm, "blk.{i}.attn_q_norm.weight"),
    (Tensor::KNorm, "blk.{i}.attn_k_norm.weight"),
    (Tensor::Q, "blk.{i}.attn_q.weight"),
    (Tensor::K, "blk.{i}.attn_k.weight"),
    (Tensor::V, "blk.{i}.attn_v.weight"),
    (Tensor::QBias, "blk.{i}.attn_q.bias"),
    (Tensor::KBias, "blk.{i}.attn_k.bias"),
    (Tensor::VBias, "blk.{i}.attn_v.bias"),
    (Tensor::Qkv, "blk.{i}.attn_qkv.weight"),
    (Tensor::QkvBias, "blk.{i}.attn_qkv.bias"),
    (Tensor::O, "blk.{i}.attn_output.weight"),
    (Tensor::OBias, "blk.{i}.attn_output.bias"),
    (Tensor::FfnNorm, "blk.{i}.ffn_norm.weight"),
    (Tensor::FfnNormBias, "blk.{i}.ffn_norm.bias"),
    (Tensor::FfnOutNorm, "blk.{i}.post_ffw_norm.weight"),
    (Tensor::Gate, "blk.{i}.ffn_gate.weight"),
    (Tensor::Up, "blk.{i}.ffn_up.weight"),
    (Tensor::UpBias, "blk.{i}.ffn_up.bias"),
    (Tensor::Down, "blk.{i}.ffn_down.weight"),
    (Tensor::DownBias, "blk.{i}.ffn_down.bias"),
]);

/// Hugging Face's names for Gemma 3 (`Gemma3ForCausalLM`).
pub const HF: TensorNames = TensorNames::new(&[
    (Tensor::Embedding, "model.embed_tokens.weight"),
    (Tensor::FinalNorm, "model.norm.weight"),
    (Tensor::Head, "lm_head.weight"),
    (Tensor::AttnNorm, "model.layers.{i}.input_layernorm.weight"),
    (
        Tensor::AttnOutNorm,
        "model.layers.{i}.post_attention_layernorm.weight",
    ),
    (Tensor::QNorm, "model.layers.{i}.self_attn.q_norm.weight"),
    (Tensor::KNorm, "model.layers.{i}.self_attn.k_norm.weight"),
    (Tensor::Q, "model.layers.{i}.self_attn.q_proj.weight"),
    (Tensor::K, "model.layers.{i}.self_attn.k_proj.weight"),
    (Tensor::V, "model.layers.{i}.self_attn.v_proj.weight"),
    (Tensor::O, "model.layers.{i}.self_attn.o_proj.weight"),
    (
        Tensor::FfnNorm,
        "model.layers.{i}.pre_feedforward_layernorm.weight",
    ),
    (
        Tensor::FfnOutNorm,
        "model.layers.{i}.post_feedforward_layernorm.weight",
    ),
    (Tensor::Gate, "model.layers.{i}.mlp.gate_proj.weight"),
    (Tensor::Up, "model.layers.{i}.mlp.up_proj.weight"),
    (Tensor::Down, "model.layers.{i}.mlp.down_proj.weight"),
]);

/// Hugging Face's names for the Llama-style families (Llama, Mistral,
/// Qwen2, Qwen3): Pre-RMSNorm, where `post_attention_layernorm` is the MLP's
/// input norm (in Gemma 3 it is the attention output's norm).
pub const HF_LLAMA: TensorNames = TensorNames::new(&[
    (Tensor::Embedding, "model.embed_tokens.weight"),
    (Tensor::FinalNorm, "model.norm.weight"),
    (Tensor::Head, "lm_head.weight"),
    (Tensor::AttnNorm, "model.layers.{i}.input_layernorm.weight"),
    (Tensor::QNorm, "model.layers.{i}.self_attn.q_norm.weight"),
    (Tensor::KNorm, "model.layers.{i}.self_attn.k_norm.weight"),
    (Tensor::Q, "model.layers.{i}.self_attn.q_proj.weight"),
    (Tensor::K, "model.layers.{i}.self_attn.k_proj.weight"),
    (Tensor::V, "model.layers.{i}.self_attn.v_proj.weight"),
    (Tensor::QBias, "model.layers.{i}.self_attn.q_proj.bias"),
    (Tensor::KBias, "model.layers.{i}.self_attn.k_proj.bias"),
    (Tensor::VBias, "model.layers.{i}.self_attn.v_proj.bias"),
    (Tensor::O, "model.layers.{i}.self_attn.o_proj.weight"),
    (
        Tensor::FfnNorm,
        "model.layers.{i}.post_attention_layernorm.weight",
    ),
    (Tensor::Gate, "model.layers.{i}.mlp.gate_proj.weight"),
    (Tensor::Up, "model.layers.{i}.mlp.up_proj.weight"),
    (Tensor::Down, "model.layers.{i}.mlp.down_proj.weight"),
]);

/// Hugging Face's names for OLMo 2: its `post_attention_layernorm` and
/// `post_feedforward_layernorm` are the sublayers' output norms (there is
/// no input norm), and q_norm / k_norm span the whole q and k.
pub const HF_OLMO2: TensorNames = TensorNames::new(&[
    (Tensor::Embedding, "model.embed_tokens.weight"),
    (Tensor::FinalNorm, "model.norm.weight"),
    (Tensor::Head, "lm_head.weight"),
    (
        Tensor::AttnOutNorm,
        "model.layers.{i}.post_attention_layernorm.weight",
    ),
    (Tensor::QNorm, "model.layers.{i}.self_attn.q_norm.weight"),
    (Tensor::KNorm, "model.layers.{i}.self_attn.k_norm.weight"),
    (Tensor::Q, "model.layers.{i}.self_attn.q_proj.weight"),
    (Tensor::K, "model.layers.{i}.self_attn.k_proj.weight"),
    (Tensor::V, "model.layers.{i}.self_attn.v_proj.weight"),
    (Tensor::O, "model.layers.{i}.self_attn.o_proj.weight"),
    (
        Tensor::FfnOutNorm,
        "model.layers.{i}.post_feedforward_layernorm.weight",
    ),
    (Tensor::Gate, "model.layers.{i}.mlp.gate_proj.weight"),
    (Tensor::Up, "model.layers.{i}.mlp.up_proj.weight"),
    (Tensor::Down, "model.layers.{i}.mlp.down_proj.weight"),
]);

/// Hugging Face's names for GPT-2 (`GPT2LMHeadModel`; a bare `GPT2Model`
/// file, as OpenAI's checkpoints on the Hub, without `transformer.`): one
/// `c_attn` for q, k and v, and Conv1D projections stored `[in, out]`.
pub const HF_GPT2: TensorNames = TensorNames::new(&[
    (Tensor::Embedding, "transformer.wte.weight"),
    (Tensor::Position, "transformer.wpe.weight"),
    (Tensor::FinalNorm, "transformer.ln_f.weight"),
    (Tensor::FinalNormBias, "transformer.ln_f.bias"),
    (Tensor::Head, "lm_head.weight"),
    (Tensor::AttnNorm, "transformer.h.{i}.ln_1.weight"),
    (Tensor::AttnNormBias, "transformer.h.{i}.ln_1.bias"),
    (Tensor::Qkv, "transformer.h.{i}.attn.c_attn.weight"),
    (Tensor::QkvBias, "transformer.h.{i}.attn.c_attn.bias"),
    (Tensor::O, "transformer.h.{i}.attn.c_proj.weight"),
    (Tensor::OBias, "transformer.h.{i}.attn.c_proj.bias"),
    (Tensor::FfnNorm, "transformer.h.{i}.ln_2.weight"),
    (Tensor::FfnNormBias, "transformer.h.{i}.ln_2.bias"),
    (Tensor::Up, "transformer.h.{i}.mlp.c_fc.weight"),
    (Tensor::UpBias, "transformer.h.{i}.mlp.c_fc.bias"),
    (Tensor::Down, "transformer.h.{i}.mlp.c_proj.weight"),
    (Tensor::DownBias, "transformer.h.{i}.mlp.c_proj.bias"),
]);

/// Hugging Face's names for GPT-NeoX (`GPTNeoXForCausalLM`, Pythia): one
/// `query_key_value` holding each head's q, k and v rows together.
pub const HF_NEOX: TensorNames = TensorNames::new(&[
    (Tensor::Embedding, "gpt_neox.embed_in.weight"),
    (Tensor::FinalNorm, "gpt_neox.final_layer_norm.weight"),
    (Tensor::FinalNormBias, "gpt_neox.final_layer_norm.bias"),
    (Tensor::Head, "embed_out.weight"),
    (
        Tensor::AttnNorm,
        "gpt_neox.layers.{i}.input_layernorm.weight",
    ),
    (
        Tensor::AttnNormBias,
        "gpt_neox.layers.{i}.input_layernorm.bias",
    ),
    (
        Tensor::Qkv,
        "gpt_neox.layers.{i}.attention.query_key_value.weight",
    ),
    (
        Tensor::QkvBias,
        "gpt_neox.layers.{i}.attention.query_key_value.bias",
    ),
    (Tensor::O, "gpt_neox.layers.{i}.attention.dense.weight"),
    (Tensor::OBias, "gpt_neox.layers.{i}.attention.dense.bias"),
    (
        Tensor::FfnNorm,
        "gpt_neox.layers.{i}.post_attention_layernorm.weight",
    ),
    (
        Tensor::FfnNormBias,
        "gpt_neox.layers.{i}.post_attention_layernorm.bias",
    ),
    (Tensor::Up, "gpt_neox.layers.{i}.mlp.dense_h_to_4h.weight"),
    (Tensor::UpBias, "gpt_neox.layers.{i}.mlp.dense_h_to_4h.bias"),
    (Tensor::Down, "gpt_neox.layers.{i}.mlp.dense_4h_to_h.weight"),
    (
        Tensor::DownBias,
        "gpt_neox.layers.{i}.mlp.dense_4h_to_h.bias",
    ),
]);
