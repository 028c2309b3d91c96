//! Decoders from llama.cpp GGUF files, as configurations of the one
//! decoder. Two architectures:
//!
//! - `llama` (SmolLM2): pre-RMSNorm with plain gains, SwiGLU, full
//!   attention with the file's RoPE base, RoPE on adjacent pairs (llama.cpp
//!   permutes Llama's Q/K rows at conversion; rotating (2i, 2i + 1) of the
//!   permuted rows is Hugging Face's (i, i + hd/2) of the original ones, and
//!   scores sum over all dimensions, so nothing is un-permuted), the
//!   byte-level BPE tokenizer.
//! - `gemma3`: sandwich RMSNorms whose file values are already 1 + w
//!   (llama.cpp adds the one at conversion, [`GainStore::OnePlusFolded`]),
//!   QK-Norm before RoPE, GeGLU with tanh-GELU, embeddings times sqrt(d)
//!   (the tied head uses the unscaled matrix), Q/K rows not permuted (RoPE
//!   on (i, i + hd/2)), the SentencePiece tokenizer with BOS.
//!
//! - `qwen2`, `qwen3`, `olmo2`, `gemma2`, `gpt2`: the Hugging Face
//!   families' configurations ([`family_config`]: the metadata read as the
//!   config.json llama.cpp's converter read), with what the converter
//!   changed: Gemma 2's gains stored as 1 + w, GPT-2's Conv1D weights
//!   transposed to `[out, in]`; none of them has its Q/K rows permuted
//!   (llama.cpp rotates them as NEOX pairs, (i, i + hd/2)).
//!
//! A file without a tokenizer (`tokenizer.ggml.model`) loads without one
//! (token ids only), as a folder without tokenizer.json does. Weights are
//! dequantised to f32 once at load, or kept as the file's blocks
//! ([`WeightStorage`]).

use super::hf::{gemma_config, llama_config as hf_llama_config};
use super::hf_gpt::gpt2_config;
use super::tokenizer::{sentencepiece_from_gguf, tokenizer_from_gguf};
use super::{
    names, Decoder, DecoderConfig, GainStore, GatedAct, LayerAttention, RopePairs, WeightStorage,
    MAX_BLOCKS,
};
use crate::error::Result;
use crate::gguf::Gguf;
use crate::kernels::norm::NormKind;
use crate::nn::Placement;
use std::path::Path;

/// Gemma 3's values the GGUF metadata does not carry, as transformers'
/// `Gemma3TextConfig` defaults them when it loads a GGUF file (the file
/// gives only the global RoPE base and the window).
mod gemma3_defaults {
    /// Every sixth layer (5, 11, 17, ...) attends globally
    /// (`sliding_window_pattern`).
    pub const GLOBAL_EVERY: usize = 6;
    /// RoPE base of the sliding-window layers (`rope_local_base_freq`).
    pub const LOCAL_ROPE_BASE: f64 = 10_000.0;
    /// Queries are scaled by `query_pre_attn_scalar^-1/2`.
    pub const QUERY_PRE_ATTN_SCALAR: f64 = 256.0;
}

/// The counts every architecture reads under its own prefix.
struct Counts {
    layers: usize,
    d: usize,
    heads: usize,
    kv_heads: usize,
    ffn: usize,
    context: usize,
    vocab: usize,
    eps: f32,
}

fn counts(g: &Gguf, arch: &str) -> Result<Counts> {
    let key = |k: &str| format!("{arch}.{k}");
    let layers = g.usize(&key("block_count"))?;
    if layers == 0 || layers > MAX_BLOCKS {
        return Err(format!("block_count {layers} is not in 1..={MAX_BLOCKS}").into());
    }
    let heads = g.usize(&key("attention.head_count"))?;
    Ok(Counts {
        layers,
        d: g.usize(&key("embedding_length"))?,
        heads,
        kv_heads: g.usize(&key("attention.head_count_kv")).unwrap_or(heads),
        ffn: g.usize(&key("feed_forward_length"))?,
        context: g.usize(&key("context_length"))?,
        vocab: g
            .usize(&key("vocab_size"))
            .or_else(|_| g.info("token_embd.weight").map(|t| t.dims[1]))?,
        eps: g.f64(&key("attention.layer_norm_rms_epsilon"))? as f32,
    })
}

/// The configuration of a `llama` GGUF file.
fn llama_config(g: &Gguf) -> Result<DecoderConfig> {
    let c = counts(g, "llama")?;
    if c.heads == 0 || !c.d.is_multiple_of(c.heads) {
        return Err("inconsistent head counts".into());
    }
    let hd = c.d / c.heads;
    let rope_base = g.f64("llama.rope.freq_base").unwrap_or(10000.0);
    Ok(DecoderConfig {
        family: "llama".into(),
        vocab: c.vocab,
        d: c.d,
        layers: c.layers,
        heads: c.heads,
        kv_heads: c.kv_heads,
        head_dim: hd,
        ffn: c.ffn,
        context: c.context,
        placement: Placement::Pre,
        norm: NormKind::RmsNorm,
        eps: c.eps,
        gain: GainStore::Plain,
        qk_norm: false,
        qkv_bias: false,
        qk_norm_whole: false,
        rope_scaling: None,
        attn_softcap: None,
        act: GatedAct::Silu,
        emb_scale: 1.0,
        attn_scale: 1.0 / (hd as f32).sqrt(),
        attn: vec![
            LayerAttention {
                window: None,
                rope_base,
            };
            c.layers
        ],
        rope_pairs: RopePairs::Adjacent,
        final_softcap: None,
        gpt: Default::default(),
    })
}

/// The configuration of a `gemma3` GGUF file. From the file: the counts,
/// eps, head_dim (`attention.key_length`), the global RoPE base and the
/// window; from transformers' defaults ([`gemma3_defaults`]): which layers
/// are global, the local RoPE base and the query scale.
fn gemma3_config(g: &Gguf) -> Result<DecoderConfig> {
    use gemma3_defaults::*;
    let c = counts(g, "gemma3")?;
    let head_dim = g.usize("gemma3.attention.key_length")?;
    let value_dim = g.usize("gemma3.attention.value_length").unwrap_or(head_dim);
    if value_dim != head_dim {
        return Err(format!("key_length {head_dim} and value_length {value_dim} differ").into());
    }
    let global = g.f64("gemma3.rope.freq_base").unwrap_or(1_000_000.0);
    let window = g.usize("gemma3.attention.sliding_window")?;
    if g.get("gemma3.attn_logit_softcapping").is_ok() {
        return Err("attention logit soft-capping is not supported".into());
    }
    let attn = (0..c.layers)
        .map(|i| {
            if (i + 1) % GLOBAL_EVERY == 0 {
                LayerAttention {
                    window: None,
                    rope_base: global,
                }
            } else {
                LayerAttention {
                    window: Some(window),
                    rope_base: LOCAL_ROPE_BASE,
                }
            }
        })
        .collect();
    Ok(DecoderConfig {
        family: "gemma3".into(),
        vocab: c.vocab,
        d: c.d,
        layers: c.layers,
        heads: c.heads,
        kv_heads: c.kv_heads,
        head_dim,
        ffn: c.ffn,
        context: c.context,
        placement: Placement::Sandwich,
        norm: NormKind::RmsNorm,
        eps: c.eps,
        gain: GainStore::OnePlusFolded,
        qk_norm: true,
        qkv_bias: false,
        qk_norm_whole: false,
        rope_scaling: None,
        attn_softcap: None,
        act: GatedAct::GeluTanh,
        emb_scale: (c.d as f64).sqrt() as f32,
        attn_scale: QUERY_PRE_ATTN_SCALAR.powf(-0.5) as f32,
        attn,
        rope_pairs: RopePairs::Halves,
        final_softcap: g
            .f64("gemma3.final_logit_softcapping")
            .ok()
            .map(|v| v as f32),
        gpt: Default::default(),
    })
}

/// The configuration of a GGUF file of a Hugging Face family (`qwen2`,
/// `qwen3`, `olmo2`, `gemma2`, `gpt2`): its metadata put back under the
/// config.json keys llama.cpp's converter read them from, then the
/// family's own reader (the one a folder goes through), then what the
/// converter changed in the weights.
fn family_config(g: &Gguf, arch: &str) -> Result<DecoderConfig> {
    let key = |k: &str| format!("{arch}.{k}");
    let mut c = serde_json::Map::new();
    let vocab = g
        .usize(&key("vocab_size"))
        .or_else(|_| g.info("token_embd.weight").map(|t| t.dims[1]))?;
    c.insert("vocab_size".into(), vocab.into());
    let gpt2 = arch == "gpt2";
    // (config.json key, GGUF key, required)
    let keys: &[(&str, &str, bool)] = if gpt2 {
        &[
            ("n_layer", "block_count", true),
            ("n_embd", "embedding_length", true),
            ("n_head", "attention.head_count", true),
            ("n_positions", "context_length", true),
            ("n_inner", "feed_forward_length", true),
            ("layer_norm_epsilon", "attention.layer_norm_epsilon", true),
        ]
    } else {
        &[
            ("num_hidden_layers", "block_count", true),
            ("hidden_size", "embedding_length", true),
            ("num_attention_heads", "attention.head_count", true),
            ("num_key_value_heads", "attention.head_count_kv", false),
            ("max_position_embeddings", "context_length", true),
            ("intermediate_size", "feed_forward_length", true),
            ("rms_norm_eps", "attention.layer_norm_rms_epsilon", true),
            ("rope_theta", "rope.freq_base", false),
            ("head_dim", "attention.key_length", false),
            ("sliding_window", "attention.sliding_window", false),
            ("attn_logit_softcapping", "attn_logit_softcapping", false),
            ("final_logit_softcapping", "final_logit_softcapping", false),
        ]
    };
    for &(name, k, required) in keys {
        match g.get(&key(k)) {
            Ok(v) => {
                let v: serde_json::Value = match (v.as_u64(), v.as_f64()) {
                    (Some(u), _) => u.into(),
                    (None, Some(f)) => f.into(),
                    _ => return Err(format!("{}: not a number", key(k)).into()),
                };
                c.insert(name.into(), v);
            }
            Err(e) if required => return Err(e),
            Err(_) => {}
        }
    }
    if arch == "gemma2" {
        // llama.cpp scales Gemma 2's queries by head_dim^-1/2 (27B, of 46
        // blocks: by (d / heads)^-1/2), not by query_pre_attn_scalar; a
        // file may state its scale (`gemma2.attention.scale`).
        let head_dim = g.f64(&key("attention.key_length"))?;
        let (d, heads) = (
            g.f64(&key("embedding_length"))?,
            g.f64(&key("attention.head_count"))?,
        );
        let scalar = match g.f64(&key("attention.scale")) {
            Ok(s) if s > 0.0 => s.powi(-2),
            _ if g.usize(&key("block_count"))? == 46 => d / heads,
            _ => head_dim,
        };
        c.insert("query_pre_attn_scalar".into(), scalar.into());
    }
    let c = serde_json::Value::Object(c);
    let mut cfg = match arch {
        "gpt2" => gpt2_config(&c)?,
        "gemma2" => gemma_config(&c, "gemma2")?,
        _ => hf_llama_config(&c, arch)?,
    };
    match arch {
        "gemma2" => cfg.gain = GainStore::OnePlusFolded,
        "gpt2" => cfg.gpt.conv1d = false,
        _ => {}
    }
    Ok(cfg)
}

impl Decoder {
    /// Load a GGUF file (architecture `llama`, `gemma3`, `qwen2`, `qwen3`,
    /// `olmo2`, `gemma2` or `gpt2`), its weights
    /// dequantised to f32.
    pub fn load(path: &Path) -> Result<Decoder> {
        Decoder::load_as(path, WeightStorage::F32)
    }

    /// [`Decoder::load`] keeping the weights as `storage` says.
    pub fn load_as(path: &Path, storage: WeightStorage) -> Result<Decoder> {
        let g = Gguf::open(path)?;
        let at = |e: crate::error::Error| -> crate::error::Error {
            format!("{}: {e}", path.display()).into()
        };
        let arch = g.get("general.architecture")?.as_str().unwrap_or("");
        // RoPE scaling, as llama.cpp's converter writes it (a type, or
        // Llama 3's frequency factors as a tensor): refused by name, never
        // run without it.
        match g
            .get(&format!("{arch}.rope.scaling.type"))
            .map(|v| v.as_str())
        {
            Ok(Some("none")) | Err(_) => {}
            Ok(t) => {
                return Err(at(format!(
                    "RoPE scaling '{}' ({arch}.rope.scaling.type) is not supported in GGUF files",
                    t.unwrap_or("?")
                )
                .into()))
            }
        }
        if g.info("rope_freqs.weight").is_ok() {
            return Err(at(
                "RoPE frequency factors (rope_freqs.weight, Llama 3's scaling) are not supported in GGUF files"
                    .to_string()
                    .into(),
            ));
        }
        let cfg = match arch {
            "llama" => llama_config(&g).map_err(at)?,
            "gemma3" => gemma3_config(&g).map_err(at)?,
            "qwen2" | "qwen3" | "olmo2" | "gemma2" | "gpt2" => {
                family_config(&g, arch).map_err(at)?
            }
            other => {
                return Err(format!(
                    "{}: architecture '{other}' is not supported ({})",
                    path.display(),
                    super::family::gguf_archs()
                )
                .into())
            }
        };
        // The configuration's own sizes first (a head count that would
        // wrap, say), before anything is sized from them.
        cfg.check().map_err(at)?;
        // Every tensor of the file is one the metadata describes: a
        // block_count one short would otherwise drop a block unseen.
        let described: std::collections::HashSet<String> = names::GGUF
            .shapes(&cfg)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        if let Some(t) = g.tensors.iter().find(|t| !described.contains(&t.name)) {
            return Err(at(format!(
                "holds a tensor '{}' that the metadata does not describe (a different model, or a block_count that does not match)",
                t.name
            )
            .into()));
        }
        // A special token's id must be a token of the vocabulary (checked
        // against the embedding's rows below), never silently truncated.
        let token = |key: &str| -> Result<Option<u32>> {
            match g.get(key).ok().map(|v| v.as_u64()) {
                None => Ok(None),
                Some(Some(v)) if v < cfg.vocab as u64 => Ok(Some(v as u32)),
                Some(v) => Err(at(format!(
                    "{key} {} is not a token id of the {}-token vocabulary",
                    v.map_or("(not an integer)".to_string(), |v| v.to_string()),
                    cfg.vocab
                )
                .into())),
            }
        };
        let eos = token("tokenizer.ggml.eos_token_id")?;
        // SentencePiece files add BOS unless they say otherwise (llama.cpp
        // and transformers agree); byte-level BPE files only when they say
        // so.
        let add_bos = match g.get("tokenizer.ggml.add_bos_token") {
            Ok(crate::gguf::Value::Bool(b)) => *b,
            _ => arch == "gemma3",
        };
        let bos = if add_bos {
            token("tokenizer.ggml.bos_token_id")?
        } else {
            None
        };
        // The memory the weights take beside the file, before any is read:
        // dequantised to f32, or kept as the file stores them.
        if storage == WeightStorage::F32 {
            // (Counted in f64: a hostile file's sizes must not wrap.)
            let values: f64 = names::GGUF
                .shapes(&cfg)
                .iter()
                .map(|(_, s)| s.iter().map(|&n| n as f64).product::<f64>())
                .sum();
            let file = std::fs::metadata(path).map_or(0, |m| m.len());
            crate::limits::check_memory(
                file as f64 + crate::limits::f32_bytes(values),
                &format!("loading {} ({values} weights at f32)", path.display()),
            )?;
        }
        // The weights first: a file that lies about its sizes is refused
        // before its vocabulary is read.
        let mut m =
            Decoder::from_tensors_as(cfg, &names::GGUF, &g, None, eos, storage).map_err(at)?;
        if g.get("tokenizer.ggml.model").is_err() {
            // Token ids only.
            return Ok(m);
        }
        let tok = match arch {
            "gemma3" => sentencepiece_from_gguf(&g),
            _ => tokenizer_from_gguf(&g),
        }
        .map_err(at)?;
        // Every id the tokenizer can give must have an embedding row.
        let n = tok.get_vocab_size(true);
        if n > m.cfg.vocab {
            return Err(at(format!(
                "the tokenizer has {n} tokens but the embedding only {} rows",
                m.cfg.vocab
            )
            .into()));
        }
        m.tokenizer = Some(tok);
        m.bos = bos;
        Ok(m)
    }
}
