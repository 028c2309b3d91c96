//! Loading a decoder's Hugging Face folder: its `config.json` read by its
//! family's row of the registry (`family.rs`), every size checked before
//! it is allocated (`model/hf_folder.rs`), the weights (or their shards)
//! matched against what the configuration implies, the tokenizer and its
//! BOS; and [`Decoder::open`], a folder or a GGUF file.

use super::hf_gpt::buffers;
use super::{config_json, family, names, Decoder};
use crate::error::Result;
use crate::model::hf_folder;
use serde_json::Value;
use std::path::Path;

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

impl Decoder {
    /// A decoder from `path`: a Hugging Face folder ([`Decoder::load_hf`])
    /// or a GGUF file ([`Decoder::load`]).
    pub fn open(path: &Path) -> Result<Decoder> {
        if path.is_dir() {
            Decoder::load_hf(path)
        } else {
            Decoder::load(path)
        }
    }

    /// Load a Hugging Face folder: `config.json` (model_type gemma3_text),
    /// `model.safetensors`, and `tokenizer.json` when present. Every size
    /// is checked before it is allocated ([`hf_folder`]): the configuration
    /// first; then the weights file's size against what the configuration
    /// implies and, with the f32 weights it becomes, against the memory
    /// available; then its table, tensor by tensor (none missing, none
    /// extra), before any tensor is read.
    pub fn load_hf(dir: &Path) -> Result<Decoder> {
        let at = |e: crate::error::Error| e.within(&dir.display().to_string());
        let c = hf_folder::read_config(dir)?;
        let ty = c.get("model_type").and_then(Value::as_str).unwrap_or("");
        // The family's configuration, its names, whether the head is tied
        // to the embeddings unless config.json says otherwise.
        let (cfg, names, tied) = match family::by_model_type(ty) {
            Some(f) => (f.read)(&c, ty).map(|cfg| (cfg, f.names, f.tied)),
            None => Err(family::refusal(ty).into()),
        }
        .and_then(|(cfg, names, tied)| cfg.check().map(|()| (cfg, names, tied)))
        .map_err(at)?;
        let tied = config_json::switch(&c, "tie_word_embeddings", tied).map_err(at)?;
        let eos = eos_id(&c, cfg.vocab).map_err(at)?;
        // The head comes last: absent when tied to the embeddings.
        let expect = |names: &names::TensorNames| {
            let mut required = names.shapes(&cfg);
            let optional = if tied {
                required.pop().into_iter().collect()
            } else {
                Vec::new()
            };
            hf_folder::Expected {
                required,
                optional,
                ignored: buffers(&cfg, names),
            }
        };
        let files = hf_folder::read_weights(dir, &expect(names))?;
        // A bare GPT2Model file (OpenAI's on the Hub) names its tensors
        // without `transformer.`.
        let bare = names.stripping("transformer.");
        let st = files.shards()?;
        let names = match cfg.family.as_str() {
            "gpt2" if st.part("transformer.wte.weight").is_none() => &bare,
            _ => names,
        };
        st.check(&expect(names))?;
        let tokenizer = hf_folder::read_tokenizer(dir)?;
        let bos = tokenizer.as_ref().map(bos_of).transpose()?.flatten();
        let mut m = Decoder::from_tensors(cfg, names, &st, tokenizer, eos).map_err(at)?;
        if let Some(b) = bos.filter(|&b| (b as usize) < m.cfg.vocab) {
            m.bos = Some(b);
        }
        Ok(m)
    }
}

/// The one token a tokenizer.json's post-processor puts before a text (its
/// BOS, as transformers adds it by default; Gemma's `<bos>`), if any:
/// [`Decoder::encode`] encodes without special tokens and adds this one.
fn bos_of(tok: &tokenizers::Tokenizer) -> Result<Option<u32>> {
    let enc = |special: bool| -> Result<Vec<u32>> {
        Ok(tok
            .encode("a", special)
            .map_err(|e| format!("tokenizer: {e}"))?
            .get_ids()
            .to_vec())
    };
    let (with, without) = (enc(true)?, enc(false)?);
    Ok(match with.strip_suffix(without.as_slice()) {
        Some([b]) => Some(*b),
        _ => None,
    })
}
