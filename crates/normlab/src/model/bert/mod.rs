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
use crate::model::decoder::TensorSource;
use crate::model::hf_folder::{self, Expected};

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
    /// A decoder (causal) BERT: refused (normlab reads the encoder).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_decoder: bool,
    /// How positions enter: only "absolute" (the learned table) is read;
    /// relative_key and relative_key_query are refused by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position_embedding_type: Option<String>,
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

/// A tensor as f32 (F32, BF16 or F16 in the file), every value finite.
fn tensor(st: &SafeTensors, name: &str) -> Result<Vec<f32>> {
    let v = st.read(name)?;
    if v.iter().any(|x| !x.is_finite()) {
        return Err(format!("tensor '{name}' holds a value that is not finite").into());
    }
    Ok(v)
}

/// The BERT tensors' names and shapes under `prefix` (some exports put
/// "bert." before every name): what `cfg` implies.
fn expected(cfg: &BertConfig, prefix: &str) -> Expected {
    let (d, f) = (cfg.hidden_size, cfg.intermediate_size);
    let mut required = Vec::new();
    let mut add = |n: String, s: &[usize]| required.push((format!("{prefix}{n}"), s.to_vec()));
    add(
        "embeddings.word_embeddings.weight".into(),
        &[cfg.vocab_size, d],
    );
    add(
        "embeddings.position_embeddings.weight".into(),
        &[cfg.max_position_embeddings, d],
    );
    add(
        "embeddings.token_type_embeddings.weight".into(),
        &[cfg.type_vocab_size, d],
    );
    let ln = |add: &mut dyn FnMut(String, &[usize]), n: &str| {
        add(format!("{n}.weight"), &[d]);
        add(format!("{n}.bias"), &[d]);
    };
    ln(&mut add, "embeddings.LayerNorm");
    for i in 0..cfg.num_hidden_layers {
        let b = format!("encoder.layer.{i}");
        for (n, o, i_) in [
            ("attention.self.query", d, d),
            ("attention.self.key", d, d),
            ("attention.self.value", d, d),
            ("attention.output.dense", d, d),
            ("intermediate.dense", f, d),
            ("output.dense", d, f),
        ] {
            add(format!("{b}.{n}.weight"), &[o, i_]);
            add(format!("{b}.{n}.bias"), &[o]);
        }
        ln(&mut add, &format!("{b}.attention.output.LayerNorm"));
        ln(&mut add, &format!("{b}.output.LayerNorm"));
    }
    let named = |n: &str, s: &[usize]| (format!("{prefix}{n}"), s.to_vec());
    Expected {
        required,
        optional: vec![
            named("pooler.dense.weight", &[d, d]),
            named("pooler.dense.bias", &[d]),
        ],
        ignored: vec![named(
            "embeddings.position_ids",
            &[1, cfg.max_position_embeddings],
        )],
    }
}

/// Sizes a BERT config may give (every one at least 1).
const LIMITS: [(&str, usize); 7] = [
    ("vocab_size", 1 << 24),
    ("hidden_size", 1 << 16),
    ("num_hidden_layers", crate::model::decoder::MAX_BLOCKS),
    ("num_attention_heads", 1 << 12),
    ("intermediate_size", 1 << 18),
    ("max_position_embeddings", 1 << 20),
    ("type_vocab_size", 1 << 10),
];

impl BertConfig {
    /// Refuse what inference cannot run: sizes outside [`LIMITS`], heads
    /// that do not divide the width, an eps that is not a small positive
    /// number, an activation other than gelu.
    fn check(&self) -> Result<()> {
        let values = [
            self.vocab_size,
            self.hidden_size,
            self.num_hidden_layers,
            self.num_attention_heads,
            self.intermediate_size,
            self.max_position_embeddings,
            self.type_vocab_size,
        ];
        for ((name, most), v) in LIMITS.iter().zip(values) {
            if v == 0 || v > *most {
                return Err(format!("{name} {v} is not in 1..={most}").into());
            }
        }
        if self.hidden_act != "gelu" {
            return Err(format!(
                "unsupported activation '{}' (normlab's BERT supports gelu)",
                self.hidden_act
            )
            .into());
        }
        if self.is_decoder {
            return Err(
                "is_decoder true (a causal BERT) is not supported: normlab reads BERT encoders"
                    .into(),
            );
        }
        if let Some(p) = self
            .position_embedding_type
            .as_deref()
            .filter(|p| *p != "absolute")
        {
            return Err(format!(
                "position_embedding_type '{p}' is not supported (normlab's BERT reads absolute positions)"
            )
            .into());
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err("num_attention_heads must divide hidden_size".into());
        }
        let eps = self.layer_norm_eps;
        if !(eps > 0.0 && eps <= 0.1 && (eps as f32) > 0.0) {
            return Err(
                format!("layer_norm_eps {eps:e} is not a LayerNorm eps in (0, 0.1]").into(),
            );
        }
        Ok(())
    }
}

impl Bert {
    /// Load `config.json`, `model.safetensors` and `tokenizer.json` from
    /// `dir`. Every size is checked before it is allocated, as every
    /// Hugging Face folder's ([`hf_folder`]): the configuration first
    /// ([`BertConfig::check`]), then the weights file's size and the
    /// memory, then its table (every tensor's type and shape, none
    /// missing, none extra); the tokenizer's ids are checked against the
    /// vocabulary when a text is encoded.
    pub fn load(dir: &Path) -> Result<Bert> {
        let at = |e: crate::error::Error| e.within(&dir.display().to_string());
        let cfg: BertConfig = serde_json::from_value(hf_folder::read_config(dir)?)
            .map_err(|e| format!("{}/config.json is not a BERT config: {e}", dir.display()))?;
        cfg.check().map_err(at)?;
        // The size bound is the same with either prefix.
        let plain = expected(&cfg, "");
        let files = hf_folder::read_weights(dir, &plain)?;
        // Some exports prefix every tensor with "bert.".
        let st = files.shards()?;
        let probe = st.part("bert.embeddings.word_embeddings.weight").is_some();
        let prefix = if probe { "bert." } else { "" };
        let want = if probe { expected(&cfg, prefix) } else { plain };
        st.check(&want)?;
        let t = |n: &str| -> Result<Vec<f32>> {
            let name = format!("{prefix}{n}");
            let part = st
                .part(&name)
                .ok_or_else(|| format!("model.safetensors has no tensor '{name}'"))?;
            tensor(part, &name).map_err(|e| e.within(&dir.display().to_string()))
        };
        let word = t("embeddings.word_embeddings.weight")?;
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
            for n in ["attention.output.LayerNorm", "output.LayerNorm"] {
                norms.push(ln(&format!("{b}.{n}"))?);
                norm_names.push(format!("{b}.{n}"));
            }
        }
        let mut tokenizer = hf_folder::read_tokenizer(dir)?
            .ok_or_else(|| format!("{} has no tokenizer.json", dir.display()))?;
        // One sentence at a time: no padding (the file may ask for 128); we truncate ourselves.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| format!("tokenizer: {e}"))?;
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
        if let Some(id) = ids.iter().find(|&&i| i as usize >= self.cfg.vocab_size) {
            return Err(format!(
                "tokenizer.json gives token id {id}, outside the model's {} embeddings (vocab_size)",
                self.cfg.vocab_size
            )
            .into());
        }
        Ok(ids)
    }
}
