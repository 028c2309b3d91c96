//! SmolLM2 and other Llama-architecture models from GGUF files (tested
//! with SmolLM2-135M-Instruct, Q4_1) as a configuration of the one
//! [`Decoder`]: pre-RMSNorm with the file's eps and plain gains, SwiGLU,
//! grouped-query attention, full attention with the file's RoPE base, a tied
//! (or separate) head, and the byte-level BPE tokenizer built from the
//! file's vocabulary and merges (HF `tokenizers`).
//!
//! Weights are dequantised to f32 once at load. Q and K rows stay in
//! llama.cpp's order, which pairs dimensions (2i, 2i+1) of each head for
//! RoPE ([`RopePairs::Adjacent`]); Hugging Face pairs (i, i + hd/2) after
//! un-permuting the same rows. Both rotate the same pairs by the same
//! angles, and attention scores sum over all dimensions, so the outputs
//! agree without un-permuting.

use super::decoder::tokenizer::tokenizer_from_gguf;
use super::decoder::{names, GainStore, GatedAct, LayerAttention, RopePairs};
use crate::error::Result;
use crate::gguf::Gguf;
use crate::kernels::norm::NormKind;
use crate::nn::Placement;
use std::path::Path;

pub use super::decoder::{
    argmax, held_out_text, inspect, stream_growth, Decoder, DecoderConfig, FinalNormEffect,
    KvCache, LlamaLayerRow, LlamaTrace, MassiveActivation, ModelClaims, MAX_BLOCKS,
};

/// A Llama-architecture model: a [`Decoder`] read from GGUF.
pub type Llama = Decoder;

/// Its hyper-parameters.
pub type LlamaConfig = DecoderConfig;

impl Decoder {
    /// Load a Llama-architecture GGUF file.
    pub fn load(path: &Path) -> Result<Decoder> {
        let g = Gguf::open(path)?;
        let arch = g.get("general.architecture")?.as_str().unwrap_or("");
        if arch != "llama" {
            return Err(format!(
                "{}: architecture '{arch}' is not supported (llama only)",
                path.display()
            )
            .into());
        }
        let layers = g.usize("llama.block_count")?;
        let (d, heads) = (
            g.usize("llama.embedding_length")?,
            g.usize("llama.attention.head_count")?,
        );
        let rope_base = g.f64("llama.rope.freq_base").unwrap_or(10000.0);
        if layers == 0 || layers > MAX_BLOCKS {
            return Err(format!(
                "{}: block_count {layers} is not in 1..={MAX_BLOCKS}",
                path.display()
            )
            .into());
        }
        if heads == 0 || !d.is_multiple_of(heads) {
            return Err(format!("{}: inconsistent head counts", path.display()).into());
        }
        let hd = d / heads;
        let cfg = DecoderConfig {
            family: "llama".into(),
            vocab: g
                .usize("llama.vocab_size")
                .or_else(|_| g.info("token_embd.weight").map(|t| t.dims[1]))?,
            d,
            layers,
            heads,
            kv_heads: g.usize("llama.attention.head_count_kv")?,
            head_dim: hd,
            ffn: g.usize("llama.feed_forward_length")?,
            context: g.usize("llama.context_length")?,
            placement: Placement::Pre,
            norm: NormKind::RmsNorm,
            eps: g.f64("llama.attention.layer_norm_rms_epsilon")? as f32,
            gain: GainStore::Plain,
            qk_norm: false,
            act: GatedAct::Silu,
            emb_scale: 1.0,
            attn_scale: 1.0 / (hd as f32).sqrt(),
            attn: vec![
                LayerAttention {
                    window: None,
                    rope_base,
                };
                layers
            ],
            rope_pairs: RopePairs::Adjacent,
            final_softcap: None,
        };
        let eos = g
            .get("tokenizer.ggml.eos_token_id")
            .ok()
            .and_then(|v| v.as_u64())
            .map(|v| v as u32);
        let mut m = Decoder::from_tensors(cfg, &names::GGUF, &g, None, eos)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        m.tokenizer = Some(tokenizer_from_gguf(&g)?);
        Ok(m)
    }
}
