//! Inference of a real pretrained Post-LN encoder: BERT-style models from
//! Hugging Face safetensors (tested with all-MiniLM-L6-v2): WordPiece
//! tokenisation from the model's `tokenizer.json` (HF `tokenizers`),
//! bidirectional multi-head attention, exact (erf) GELU, Post-LN with the
//! model's eps (1e-12), token-type embeddings, mean pooling and L2
//! normalisation (the sentence-transformers recipe).
//!
//! Every norm can be swapped (LayerNorm, or RMSNorm with optional bias) to
//! study conversion (`convert.rs`: RMS conversion and calibration), and a
//! trace records each norm's input and output, the residual stream and each
//! sublayer's write, which `inspect.rs` turns into `normlab inspect`'s rows.
//! This file: the configuration and loading (weight names) and tokenisation;
//! `forward.rs`: the encoder's forward pass.

mod convert;
mod forward;
mod inspect;

pub use convert::{calibrate_rms, cosine, rms_norms};
pub use inspect::{inspect, stats, InspectRow};

use crate::error::Result;
use crate::io::load_tensors;

use crate::kernels::norm::{self, NormKind, ParamRole};
use safetensors::SafeTensors;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The fields of a Hugging Face BERT `config.json` that inference needs.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct BertConfig {
    /// Vocabulary.
    pub vocab_size: usize,
    /// Width d.
    pub hidden_size: usize,
    /// Layers.
    pub num_hidden_layers: usize,
    /// Heads.
    pub num_attention_heads: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Positions.
    pub max_position_embeddings: usize,
    /// Token types.
    pub type_vocab_size: usize,
    /// LayerNorm eps.
    pub layer_norm_eps: f64,
    /// Activation (must be gelu).
    pub hidden_act: String,
}

/// One norm's parameters: LayerNorm, or RMSNorm with an optional bias.
#[derive(Clone, Debug)]
pub struct NormParams {
    /// layernorm or rmsnorm.
    pub kind: NormKind,
    /// Gain.
    pub gamma: Vec<f32>,
    /// Bias (added after the norm; zeros for none).
    pub beta: Vec<f32>,
    /// eps.
    pub eps: f32,
}

impl NormParams {
    /// Apply to `[rows, d]`: the kind's kernel with `gamma` as its gain and
    /// `beta` as its bias, or added after it when the kind has no bias.
    pub fn apply(&self, x: &[f32], y: &mut [f32]) {
        let d = self.gamma.len();
        let rows = x.len() / d;
        let kind = self.kind;
        let mut p = vec![0.0; kind.num_params(d)];
        kind.init_params(d, &mut p);
        if let Some(r) = kind.param_range(ParamRole::Gain, d) {
            p[r].copy_from_slice(&self.gamma[..d]);
        }
        let bias = kind.param_range(ParamRole::Bias, d);
        if let Some(r) = &bias {
            p[r.clone()].copy_from_slice(&self.beta);
        }
        let mut stats = vec![0.0; norm::stats_len(rows)];
        norm::forward(kind, d, self.eps, x, &p, y, &mut stats);
        if bias.is_none() {
            crate::kernels::matmul::add_bias_rows(y, &self.beta);
        }
    }
}

struct Layer {
    q: (Vec<f32>, Vec<f32>),
    k: (Vec<f32>, Vec<f32>),
    v: (Vec<f32>, Vec<f32>),
    o: (Vec<f32>, Vec<f32>),
    fc: (Vec<f32>, Vec<f32>),
    out: (Vec<f32>, Vec<f32>),
}

/// A loaded encoder.
pub struct Bert {
    /// Its config.
    pub cfg: BertConfig,
    word: Vec<f32>,
    pos: Vec<f32>,
    types: Vec<f32>,
    layers: Vec<Layer>,
    /// The original norms: 0 = embeddings, then per layer (attention output, MLP output).
    pub norms: Vec<NormParams>,
    /// Names of the norms.
    pub norm_names: Vec<String>,
    tokenizer: tokenizers::Tokenizer,
}

/// What a forward pass records.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Input of each norm `[T, d]`.
    pub norm_in: Vec<Vec<f32>>,
    /// Output of each norm.
    pub norm_out: Vec<Vec<f32>>,
    /// Each sublayer's write (attention / MLP output before the add).
    pub writes: Vec<Vec<f32>>,
    /// The stream each sublayer read.
    pub stream_in: Vec<Vec<f32>>,
    /// Per sublayer: the stream before, the change across the sublayer
    /// (Post-LN: the write is not added as is), the stream after.
    pub sublayers: Vec<crate::model::SublayerTrace>,
}

fn tensor(st: &SafeTensors, name: &str) -> Result<Vec<f32>> {
    let v = st
        .tensor(name)
        .map_err(|_| format!("model.safetensors has no tensor '{name}'"))?;
    if v.dtype() != safetensors::Dtype::F32 {
        return Err(format!("tensor '{name}' is {:?}, expected F32", v.dtype()).into());
    }
    Ok(v.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect())
}

impl Bert {
    /// Load `config.json`, `model.safetensors` and `tokenizer.json` from `dir`.
    pub fn load(dir: &Path) -> Result<Bert> {
        let read = |f: &str| crate::io::read(&dir.join(f));
        let cfg: BertConfig = serde_json::from_slice(&read("config.json")?)
            .map_err(|e| format!("{}/config.json is not a BERT config: {e}", dir.display()))?;
        if cfg.hidden_act != "gelu" {
            return Err(format!(
                "unsupported activation '{}' (normlab's BERT supports gelu)",
                cfg.hidden_act
            )
            .into());
        }
        if cfg.num_attention_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads)
        {
            return Err("num_attention_heads must divide hidden_size".into());
        }
        let bytes = read("model.safetensors")?;
        let st = SafeTensors::deserialize(&bytes)
            .map_err(|e| format!("model.safetensors is not valid: {e}"))?;
        // Some exports prefix every tensor with "bert.".
        let prefix = if st.tensor("bert.embeddings.word_embeddings.weight").is_ok() {
            "bert."
        } else {
            ""
        };
        let t = |n: &str| tensor(&st, &format!("{prefix}{n}"));
        let d = cfg.hidden_size;
        let check = |name: &str, v: &Vec<f32>, n: usize| {
            if v.len() == n {
                Ok(())
            } else {
                Err(format!(
                    "tensor {name} has {} values, expected {n}",
                    v.len()
                ))
            }
        };
        let word = t("embeddings.word_embeddings.weight")?;
        check("word_embeddings", &word, cfg.vocab_size * d)?;
        let pos = t("embeddings.position_embeddings.weight")?;
        let types = t("embeddings.token_type_embeddings.weight")?;
        let eps = cfg.layer_norm_eps as f32;
        let ln = |n: &str| -> Result<NormParams> {
            Ok(NormParams {
                kind: NormKind::LayerNorm,
                gamma: t(&format!("{n}.weight"))?,
                beta: t(&format!("{n}.bias"))?,
                eps,
            })
        };
        let mut norms = vec![ln("embeddings.LayerNorm")?];
        let mut norm_names = vec!["embeddings.LayerNorm".to_string()];
        let mut layers = Vec::new();
        for i in 0..cfg.num_hidden_layers {
            let b = format!("encoder.layer.{i}");
            let lin = |n: &str| -> Result<(Vec<f32>, Vec<f32>)> {
                Ok((t(&format!("{b}.{n}.weight"))?, t(&format!("{b}.{n}.bias"))?))
            };
            layers.push(Layer {
                q: lin("attention.self.query")?,
                k: lin("attention.self.key")?,
                v: lin("attention.self.value")?,
                o: lin("attention.output.dense")?,
                fc: lin("intermediate.dense")?,
                out: lin("output.dense")?,
            });
            check(
                &format!("{b}.intermediate.dense.weight"),
                &layers[i].fc.0,
                cfg.intermediate_size * d,
            )?;
            norms.push(ln(&format!("{b}.attention.output.LayerNorm"))?);
            norm_names.push(format!("{b}.attention.output.LayerNorm"));
            norms.push(ln(&format!("{b}.output.LayerNorm"))?);
            norm_names.push(format!("{b}.output.LayerNorm"));
        }
        let mut tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| format!("cannot load {}/tokenizer.json: {e}", dir.display()))?;
        // One sentence at a time: no padding (the file may ask for 128); we truncate ourselves.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| format!("tokenizer: {e}"))?;
        let _ = load_tensors; // (the run-folder loader is for normlab checkpoints)
        Ok(Bert {
            cfg,
            word,
            pos,
            types,
            layers,
            norms,
            norm_names,
            tokenizer,
        })
    }

    /// WordPiece ids of `text` with [CLS] ... [SEP], truncated to the model's positions.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| format!("tokenizer: {e}"))?;
        let mut ids = enc.get_ids().to_vec();
        ids.truncate(self.cfg.max_position_embeddings.min(512));
        Ok(ids)
    }
}
