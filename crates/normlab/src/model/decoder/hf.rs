//! Decoders from a Hugging Face folder (`config.json`, `model.safetensors`,
//! optionally `tokenizer.json`): Gemma 3's text model (`gemma3_text`) as a
//! configuration of the one decoder: sandwich RMSNorms whose file stores w
//! (the gain is 1 + w), QK-Norm before RoPE, GeGLU with tanh-GELU, the
//! sqrt(d) embedding scale, query_pre_attn_scalar^-1/2 as the attention
//! scale, sliding-window layers with the local RoPE base and full layers
//! with the global one, RoPE on (i, i + head_dim/2), a tied head. Tensor
//! names are [`names::HF`](super::names::HF). Every file's size, and every
//! tensor's type and shape, is checked against what config.json implies
//! before it is read (see [`Decoder::load_hf`]).

use super::{names, Decoder, DecoderConfig, GainStore, GatedAct, LayerAttention, RopePairs};
use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::nn::Placement;
use serde_json::Value;
use std::path::Path;

/// A number of `config.json`, or its default.
fn num(c: &Value, key: &str, default: Option<f64>) -> Result<f64> {
    match c.get(key) {
        Some(v) if !v.is_null() => v
            .as_f64()
            .ok_or_else(|| format!("config.json: '{key}' is not a number").into()),
        _ => default.ok_or_else(|| format!("config.json has no '{key}'").into()),
    }
}

/// A count of `config.json` (at most 2^31, so products of counts stay
/// far below usize's range before the tensors are compared with them).
fn count(c: &Value, key: &str, default: Option<usize>) -> Result<usize> {
    let v = num(c, key, default.map(|d| d as f64))?;
    if !(v >= 0.0 && v.fract() == 0.0 && v <= f64::from(1u32 << 31)) {
        return Err(format!("config.json: '{key}' is not a count (got {v})").into());
    }
    Ok(v as usize)
}

/// The decoder configuration of a Gemma 3 text `config.json`.
pub fn gemma3_config(c: &Value) -> Result<DecoderConfig> {
    let layers = count(c, "num_hidden_layers", None)?;
    if layers == 0 || layers > super::MAX_BLOCKS {
        return Err(format!("block_count {layers} is not in 1..={}", super::MAX_BLOCKS).into());
    }
    let act = c
        .get("hidden_activation")
        .and_then(Value::as_str)
        .unwrap_or("gelu_pytorch_tanh");
    if act != "gelu_pytorch_tanh" {
        return Err(format!("activation '{act}' is not supported (gelu_pytorch_tanh)").into());
    }
    for (key, what) in [
        ("attention_bias", "attention biases"),
        ("use_bidirectional_attention", "bidirectional attention"),
    ] {
        if c.get(key).and_then(Value::as_bool) == Some(true) {
            return Err(format!("{what} ({key}) are not supported").into());
        }
    }
    if c.get("attn_logit_softcapping")
        .is_some_and(|v| !v.is_null())
    {
        return Err("attention logit soft-capping is not supported".into());
    }
    // Per layer: sliding or full; then each kind's RoPE base.
    let types: Vec<String> = match c.get("layer_types").and_then(Value::as_array) {
        Some(a) => a
            .iter()
            .map(|v| v.as_str().unwrap_or("").to_string())
            .collect(),
        None => {
            let p = count(c, "sliding_window_pattern", Some(6))?.max(1);
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
    for kind in ["full_attention", "sliding_attention"] {
        let rope_type = c
            .get("rope_parameters")
            .and_then(|r| r.get(kind))
            .and_then(|r| r.get("rope_type"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        if rope_type != "default" {
            return Err(format!("RoPE type '{rope_type}' ({kind}) is not supported").into());
        }
    }
    let (global, local) = (
        theta("full_attention", "rope_theta", 1_000_000.0)?,
        theta("sliding_attention", "rope_local_base_freq", 10_000.0)?,
    );
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
        family: "gemma3".into(),
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
        qk_norm: true,
        act: GatedAct::GeluTanh,
        emb_scale: (d as f64).sqrt() as f32,
        attn_scale: num(c, "query_pre_attn_scalar", Some(256.0))?.powf(-0.5) as f32,
        attn,
        rope_pairs: RopePairs::Halves,
        final_softcap: match num(c, "final_logit_softcapping", Some(f64::NAN))? {
            v if v.is_nan() => None,
            v => Some(v as f32),
        },
    })
}

/// Largest `config.json` read (a real one is a few KiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Largest `tokenizer.json` read (Gemma 3's, of 262,144 tokens, is 33 MiB).
pub const MAX_TOKENIZER_BYTES: u64 = 256 << 20;
/// Largest safetensors header read (the table of names, dtypes, shapes and
/// offsets: Gemma 3 27B's is about 100 KiB).
pub const MAX_HEADER_BYTES: u64 = 16 << 20;

/// The EOS id of `config.json` (the first of a list), which must be a
/// token of the `vocab`-token vocabulary: never silently truncated.
fn eos_id(c: &Value, vocab: usize) -> Result<Option<u32>> {
    let v = match c.get("eos_token_id") {
        Some(Value::Array(a)) => a.first(),
        v => v,
    };
    match v.filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(id) if id < vocab as u64 => Ok(Some(id as u32)),
            _ => Err(format!(
                "config.json: eos_token_id {v} is not a token id of the {vocab}-token vocabulary"
            )
            .into()),
        },
    }
}

/// Check `st`'s table against the tensors `cfg` implies, before any is
/// read: each one there (the head may be absent: tied), nothing else, each
/// of the implied shape and of a type normlab reads.
fn check_table(st: &safetensors::SafeTensors, want: &[(String, Vec<usize>)]) -> Result<()> {
    use safetensors::Dtype;
    let shapes: std::collections::HashMap<&str, &[usize]> = want
        .iter()
        .map(|(n, s)| (n.as_str(), s.as_slice()))
        .collect();
    let mut names = st.names();
    names.sort();
    for name in names {
        let Some(shape) = shapes.get(name) else {
            return Err(format!(
                "holds a tensor '{name}' that config.json does not describe (a different model, or a layer count that does not match)"
            )
            .into());
        };
        let t = st
            .tensor(name)
            .map_err(|e| format!("tensor '{name}': {e}"))?;
        if !matches!(t.dtype(), Dtype::F32 | Dtype::BF16 | Dtype::F16) {
            return Err(format!(
                "tensor '{name}' is {:?}; normlab reads F32, BF16 and F16",
                t.dtype()
            )
            .into());
        }
        if t.shape() != *shape {
            return Err(format!(
                "tensor '{name}' has shape {:?}, config.json implies {shape:?}",
                t.shape()
            )
            .into());
        }
    }
    // The head comes last and may be absent (tied to the embeddings).
    if let Some((name, _)) = want[..want.len().saturating_sub(1)]
        .iter()
        .find(|(n, _)| st.tensor(n).is_err())
    {
        return Err(format!("has no tensor '{name}' (config.json implies it)").into());
    }
    Ok(())
}

impl Decoder {
    /// Load a Hugging Face folder: `config.json` (model_type gemma3_text),
    /// `model.safetensors`, and `tokenizer.json` when present. Every size
    /// is checked before it is allocated: the configuration first; then
    /// the weights file's size against what the configuration implies (4
    /// bytes a value and a header of at most [`MAX_HEADER_BYTES`]) and,
    /// with the f32 weights it becomes, against the memory available
    /// ([`limits::check_memory`](crate::limits::check_memory)); then its
    /// table, tensor by tensor (none missing, none extra), before any
    /// tensor is read. `config.json` and `tokenizer.json` are read up to
    /// [`MAX_CONFIG_BYTES`] and [`MAX_TOKENIZER_BYTES`].
    pub fn load_hf(dir: &Path) -> Result<Decoder> {
        let at = |e: crate::error::Error| e.within(&dir.display().to_string());
        let c: Value = serde_json::from_slice(&crate::io::read_at_most(
            &dir.join("config.json"),
            MAX_CONFIG_BYTES,
        )?)
        .map_err(|e| format!("{}/config.json is not JSON: {e}", dir.display()))?;
        let ty = c.get("model_type").and_then(Value::as_str).unwrap_or("");
        let cfg = match ty {
            "gemma3_text" => gemma3_config(&c),
            other => Err(format!(
                "model_type '{other}' is not supported (gemma3_text; Llama models load from GGUF)"
            )
            .into()),
        }
        .and_then(|cfg| cfg.check().map(|()| cfg))
        .map_err(at)?;
        let eos = eos_id(&c, cfg.vocab).map_err(at)?;
        // The weights file: its size against the configuration's tensors
        // and the memory, before it is read.
        let path = dir.join("model.safetensors");
        if !path.exists() && dir.join("model.safetensors.index.json").exists() {
            return Err(format!(
                "{}: sharded weights (model.safetensors.index.json) are not supported: normlab reads one model.safetensors",
                dir.display()
            )
            .into());
        }
        let want = names::HF.shapes(&cfg);
        let values: u64 = want
            .iter()
            .map(|(_, s)| s.iter().map(|&n| n as u64).product::<u64>())
            .sum();
        let len = std::fs::metadata(&path)
            .map_err(|e| crate::error::Error::read(&path, e))?
            .len();
        let most = 8 + MAX_HEADER_BYTES + 4 * values;
        if len > most {
            return Err(format!(
                "{} is {len} bytes, more than the {most} its config.json implies ({values} values at 4 bytes, a header of at most {})",
                path.display(),
                crate::limits::human_bytes(MAX_HEADER_BYTES as f64)
            )
            .into());
        }
        crate::limits::check_memory(
            len as f64 + crate::limits::f32_bytes(values as f64),
            &format!("loading {} ({values} weights)", dir.display()),
        )?;
        let bytes = crate::io::read(&path)?;
        let bad = |e: &dyn std::fmt::Display| -> crate::error::Error {
            format!("{} is not valid: {e}", path.display()).into()
        };
        let header = bytes
            .get(..8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        if header > MAX_HEADER_BYTES {
            return Err(bad(&format!(
                "its header of {header} bytes is more than the {} read",
                crate::limits::human_bytes(MAX_HEADER_BYTES as f64)
            )));
        }
        let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(&e))?;
        check_table(&st, &want).map_err(|e| e.within(&path.display().to_string()))?;
        let tok_path = dir.join("tokenizer.json");
        let tokenizer = if tok_path.exists() {
            let b = crate::io::read_at_most(&tok_path, MAX_TOKENIZER_BYTES)?;
            Some(
                tokenizers::Tokenizer::from_bytes(b)
                    .map_err(|e| format!("cannot load {}: {e}", tok_path.display()))?,
            )
        } else {
            None
        };
        Decoder::from_tensors(cfg, &names::HF, &st, tokenizer, eos).map_err(at)
    }
}
