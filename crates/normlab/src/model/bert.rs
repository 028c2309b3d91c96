//! Inference of a real pretrained Post-LN encoder: BERT-style models from
//! Hugging Face safetensors (tested with all-MiniLM-L6-v2): WordPiece
//! tokenisation from the model's `tokenizer.json` (HF `tokenizers`),
//! bidirectional multi-head attention, exact (erf) GELU, Post-LN with the
//! model's eps (1e-12), token-type embeddings, mean pooling and L2
//! normalisation (the sentence-transformers recipe).
//!
//! Every norm can be swapped (LayerNorm, or RMSNorm with optional bias) to
//! study conversion, and a trace records each norm's input and output, the
//! residual stream and each sublayer's write, for `normlab inspect`.

use crate::error::Result;
use crate::io::load_tensors;
use crate::kernels::act;
use crate::kernels::matmul::{gemm, linear_forward, Mat};
use crate::kernels::norm::{self, NormKind, ParamRole};
use safetensors::SafeTensors;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
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

/// Head `hh` of a `[t, heads * hd]` row-major matrix, as a `t x hd` view.
fn head(m: &[f32], hh: usize, t: usize, hd: usize) -> Mat<'_> {
    Mat {
        data: &m[hh * hd..],
        rows: t,
        cols: hd,
        rs: m.len() / t,
        cs: 1,
    }
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

    /// Last hidden state `[T, d]` of `ids`, using `norms` (the model's own,
    /// or converted ones); fills `trace` when given.
    pub fn forward(
        &self,
        ids: &[u32],
        norms: &[NormParams],
        mut trace: Option<&mut Trace>,
    ) -> Vec<f32> {
        let (d, t) = (self.cfg.hidden_size, ids.len());
        let h = self.cfg.num_attention_heads;
        let hd = d / h;
        let mut x = vec![0.0f32; t * d];
        for (i, &id) in ids.iter().enumerate() {
            let id = (id as usize).min(self.cfg.vocab_size - 1);
            for j in 0..d {
                x[i * d + j] = self.word[id * d + j] + self.pos[i * d + j] + self.types[j];
            }
        }
        let apply_norm = |k: usize, input: &[f32], tr: &mut Option<&mut Trace>| -> Vec<f32> {
            let mut y = vec![0.0; input.len()];
            norms[k].apply(input, &mut y);
            if let Some(tr) = tr.as_deref_mut() {
                tr.norm_in.push(input.to_vec());
                tr.norm_out.push(y.clone());
            }
            y
        };
        x = apply_norm(0, &x, &mut trace);
        let scale = 1.0 / (hd as f32).sqrt();
        for (li, l) in self.layers.iter().enumerate() {
            let lin = |w: &(Vec<f32>, Vec<f32>), inp: &[f32], din: usize, dout: usize| {
                let mut y = vec![0.0; t * dout];
                linear_forward(inp, &w.0, Some(&w.1), t, din, dout, &mut y);
                y
            };
            let (q, k, v) = (
                lin(&l.q, &x, d, d),
                lin(&l.k, &x, d, d),
                lin(&l.v, &x, d, d),
            );
            // Per head: scores = scale * Q_h K_h^T, softmax by row, ctx_h = P V_h
            // (strided views into q, k, v and ctx; no copies).
            let mut ctx = vec![0.0f32; t * d];
            let mut scores = vec![0.0f32; t * t];
            for hh in 0..h {
                gemm(
                    scale,
                    head(&q, hh, t, hd),
                    head(&k, hh, t, hd).t(),
                    0.0,
                    &mut scores,
                    t,
                );
                for row in scores.chunks_exact_mut(t) {
                    act::softmax_row(row);
                }
                gemm(
                    1.0,
                    Mat::rows(&scores, t, t),
                    head(&v, hh, t, hd),
                    0.0,
                    &mut ctx[hh * hd..],
                    d,
                );
            }
            let attn = lin(&l.o, &ctx, d, d);
            if let Some(tr) = trace.as_deref_mut() {
                tr.stream_in.push(x.clone());
                tr.writes.push(attn.clone());
            }
            let sum: Vec<f32> = x.iter().zip(&attn).map(|(a, b)| a + b).collect();
            x = apply_norm(1 + 2 * li, &sum, &mut trace);
            let pre = lin(&l.fc, &x, d, self.cfg.intermediate_size);
            let mut g = vec![0.0; pre.len()];
            act::gelu_erf_forward(&pre, &mut g);
            let out = lin(&l.out, &g, self.cfg.intermediate_size, d);
            if let Some(tr) = trace.as_deref_mut() {
                tr.stream_in.push(x.clone());
                tr.writes.push(out.clone());
            }
            let sum: Vec<f32> = x.iter().zip(&out).map(|(a, b)| a + b).collect();
            x = apply_norm(2 + 2 * li, &sum, &mut trace);
        }
        x
    }

    /// Sentence embedding: mean of the last hidden state over tokens, L2-normalised.
    pub fn embed_ids(&self, ids: &[u32], norms: &[NormParams]) -> Vec<f32> {
        let d = self.cfg.hidden_size;
        let hs = self.forward(ids, norms, None);
        let mut e = vec![0f64; d];
        for row in hs.chunks_exact(d) {
            for (a, &b) in e.iter_mut().zip(row) {
                *a += b as f64;
            }
        }
        let n = e.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
        e.iter().map(|v| (v / n) as f32).collect()
    }

    /// Sentence embedding of `text` with the model's own norms.
    pub fn embed(&self, text: &str) -> Result<Vec<f32>> {
        Ok(self.embed_ids(&self.encode(text)?, &self.norms))
    }
}

/// Cosine similarity.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-30)
}

/// The model's LayerNorms as RMSNorms: gamma kept; beta kept or dropped.
pub fn rms_norms(bert: &Bert, keep_beta: bool) -> Vec<NormParams> {
    bert.norms
        .iter()
        .map(|n| NormParams {
            kind: NormKind::RmsNorm,
            gamma: n.gamma.clone(),
            beta: if keep_beta {
                n.beta.clone()
            } else {
                vec![0.0; n.beta.len()]
            },
            eps: n.eps,
        })
        .collect()
}

/// Calibrate RMSNorm replacements layer by layer: for each norm in forward
/// order, run the partly converted model on `sentences`, and fit per feature
/// the gain and bias that best map RMSNorm(input) to the original
/// LayerNorm's output at that place (least squares).
pub fn calibrate_rms(bert: &Bert, sentences: &[Vec<u32>]) -> Vec<NormParams> {
    let d = bert.cfg.hidden_size;
    let mut conv = rms_norms(bert, true);
    let originals: Vec<Trace> = sentences
        .iter()
        .map(|ids| {
            let mut tr = Trace::default();
            bert.forward(ids, &bert.norms, Some(&mut tr));
            tr
        })
        .collect();
    for k in 0..conv.len() {
        // Sums for y = a r + b per feature.
        let (mut sr, mut srr, mut sy, mut sry, mut n) = (
            vec![0f64; d],
            vec![0f64; d],
            vec![0f64; d],
            vec![0f64; d],
            0f64,
        );
        for (ids, orig) in sentences.iter().zip(&originals) {
            let mut tr = Trace::default();
            bert.forward(ids, &conv, Some(&mut tr));
            let (input, target) = (&tr.norm_in[k], &orig.norm_out[k]);
            for (row, yrow) in input.chunks_exact(d).zip(target.chunks_exact(d)) {
                let rms = (row.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / d as f64
                    + conv[k].eps as f64)
                    .sqrt();
                for j in 0..d {
                    let r = row[j] as f64 / rms;
                    let y = yrow[j] as f64;
                    sr[j] += r;
                    srr[j] += r * r;
                    sy[j] += y;
                    sry[j] += r * y;
                }
                n += 1.0;
            }
        }
        for j in 0..d {
            let var = srr[j] / n - (sr[j] / n).powi(2);
            let cov = sry[j] / n - (sr[j] / n) * (sy[j] / n);
            let a = if var > 1e-12 {
                cov / var
            } else {
                conv[k].gamma[j] as f64
            };
            let b = sy[j] / n - a * sr[j] / n;
            conv[k].gamma[j] = a as f32;
            conv[k].beta[j] = b as f32;
        }
    }
    conv
}

/// Sentences for calibration and held-out checks: lines of the bundled
/// Shakespeare with 6 to 40 words (`skip` lines first, every `step`-th).
pub fn sample_sentences(count: usize, skip: usize, step: usize) -> Vec<String> {
    let text = String::from_utf8_lossy(crate::io::BUNDLED_TEXT);
    text.lines()
        .map(str::trim)
        .filter(|l| {
            let w = l.split_whitespace().count();
            (6..=40).contains(&w) && !l.chars().all(|c| c.is_uppercase() || !c.is_alphabetic())
        })
        .skip(skip)
        .step_by(step.max(1))
        .take(count)
        .map(String::from)
        .collect()
}

/// Statistics of a vector (mean, std, min, max).
pub fn stats(v: &[f32]) -> HashMap<&'static str, f64> {
    let n = v.len().max(1) as f64;
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    let std = (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
    let (mn, mx) = v
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x as f64), b.max(x as f64))
        });
    HashMap::from([("mean", mean), ("std", std), ("min", mn), ("max", mx)])
}

/// One row of `normlab inspect`: a norm of the model and what flows through it.
#[derive(Clone, Debug, Serialize)]
pub struct InspectRow {
    /// Norm name.
    pub norm: String,
    /// RMS of the norm's input (the residual stream before the norm).
    pub stream_rms_before: f64,
    /// RMS of the norm's output (the stream after it).
    pub stream_rms_after: f64,
    /// For the norms after a sublayer: mean over tokens of |write| / |stream it read|.
    pub write_over_stream: Option<f64>,
    /// Gain statistics.
    pub gamma_mean: f64,
    /// Gain std.
    pub gamma_std: f64,
    /// Smallest gain.
    pub gamma_min: f64,
    /// Largest gain.
    pub gamma_max: f64,
    /// Mean |beta|.
    pub beta_abs_mean: f64,
}

/// The residual-growth and identity-path views of a real model on `texts`.
pub fn inspect(bert: &Bert, texts: &[String]) -> Result<Vec<InspectRow>> {
    let d = bert.cfg.hidden_size;
    let k = bert.norms.len();
    let (mut rb, mut ra, mut nrow) = (vec![0f64; k], vec![0f64; k], 0f64);
    let mut wr = vec![0f64; k];
    for text in texts {
        let ids = bert.encode(text)?;
        let mut tr = Trace::default();
        bert.forward(&ids, &bert.norms, Some(&mut tr));
        let rms = |v: &[f32]| {
            (v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
        };
        for i in 0..k {
            for (a, b) in tr.norm_in[i]
                .chunks_exact(d)
                .zip(tr.norm_out[i].chunks_exact(d))
            {
                rb[i] += rms(a);
                ra[i] += rms(b);
            }
            if i > 0 {
                for (w, s) in tr.writes[i - 1]
                    .chunks_exact(d)
                    .zip(tr.stream_in[i - 1].chunks_exact(d))
                {
                    wr[i] += rms(w) / rms(s).max(1e-30);
                }
            }
        }
        nrow += ids.len() as f64;
    }
    Ok((0..k)
        .map(|i| {
            let g = stats(&bert.norms[i].gamma);
            InspectRow {
                norm: bert.norm_names[i].clone(),
                stream_rms_before: rb[i] / nrow,
                stream_rms_after: ra[i] / nrow,
                write_over_stream: (i > 0).then(|| wr[i] / nrow),
                gamma_mean: g["mean"],
                gamma_std: g["std"],
                gamma_min: g["min"],
                gamma_max: g["max"],
                beta_abs_mean: bert.norms[i]
                    .beta
                    .iter()
                    .map(|b| b.abs() as f64)
                    .sum::<f64>()
                    / d as f64,
            }
        })
        .collect())
}
