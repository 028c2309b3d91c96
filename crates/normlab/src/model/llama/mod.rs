//! Inference of a real pretrained Pre-RMSNorm decoder: Llama-architecture
//! models from GGUF files (tested with SmolLM2-135M-Instruct, Q4_1):
//! RMSNorm with the file's eps (normlab's fused kernel), rotary position
//! embeddings with the file's base, grouped-query attention, SwiGLU, a tied
//! (or separate) output head, and the byte-level BPE tokenizer built from
//! the file's vocabulary and merges (HF `tokenizers`).
//!
//! Weights are dequantised to f32 once at load. Q and K rows stay in
//! llama.cpp's order, which pairs dimensions (2i, 2i+1) of each head for
//! RoPE; Hugging Face pairs (i, i + hd/2) after un-permuting the same rows.
//! Both rotate the same pairs by the same angles, and attention scores sum
//! over all dimensions, so the outputs agree without un-permuting.
//!
//! Files: this one (configuration, weights, forward pass), `tokenizer.rs`
//! (the tokenizer from the GGUF metadata), `inspect.rs` (what `normlab
//! inspect` and `exp llm` report).
//!
//! A trace records what `normlab inspect` reports per layer: the residual
//! stream's RMS entering each block and after each sublayer, its largest
//! per-token value, each sublayer's write relative to the stream it read,
//! attention logit maxima and entropies.

use crate::error::Result;
use crate::gguf::Gguf;
use crate::kernels::matmul::{gemm, linear_forward, Mat};
use crate::kernels::norm::{self, NormKind};
use rayon::prelude::*;
use std::path::Path;

mod inspect;
mod tokenizer;

pub use inspect::{inspect, FinalNormEffect, LlamaLayerRow, ModelClaims};
use tokenizer::tokenizer_from_gguf;

/// The hyper-parameters read from the GGUF metadata (`llama.*`).
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Vocabulary.
    pub vocab: usize,
    /// Width d.
    pub d: usize,
    /// Blocks.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention).
    pub kv_heads: usize,
    /// SwiGLU hidden width.
    pub ffn: usize,
    /// RMSNorm eps.
    pub eps: f32,
    /// RoPE base.
    pub rope_base: f64,
    /// Context length the model was trained for.
    pub context: usize,
}

impl LlamaConfig {
    /// Per-head width.
    pub fn head_dim(&self) -> usize {
        self.d / self.heads
    }
}

/// One block's weights, `[out, in]` row-major (PyTorch's Linear layout).
pub struct LlamaLayer {
    /// Pre-attention RMSNorm gain.
    pub attn_norm: Vec<f32>,
    /// Query `[d, d]` (llama.cpp row order).
    pub wq: Vec<f32>,
    /// Key `[kv_heads * hd, d]`.
    pub wk: Vec<f32>,
    /// Value `[kv_heads * hd, d]`.
    pub wv: Vec<f32>,
    /// Attention output `[d, d]`.
    pub wo: Vec<f32>,
    /// Pre-MLP RMSNorm gain.
    pub ffn_norm: Vec<f32>,
    /// SwiGLU gate `[ffn, d]`.
    pub gate: Vec<f32>,
    /// SwiGLU up `[ffn, d]`.
    pub up: Vec<f32>,
    /// Down `[d, ffn]`.
    pub down: Vec<f32>,
}

/// A Llama-architecture model loaded from GGUF.
pub struct Llama {
    /// Hyper-parameters.
    pub cfg: LlamaConfig,
    /// Token embeddings `[vocab, d]`.
    pub emb: Vec<f32>,
    /// Blocks.
    pub layers: Vec<LlamaLayer>,
    /// Final RMSNorm gain.
    pub final_norm: Vec<f32>,
    /// Output head `[vocab, d]` when not tied to the embeddings.
    pub head: Option<Vec<f32>>,
    /// End-of-sequence token (`tokenizer.ggml.eos_token_id`).
    pub eos: Option<u32>,
    tokenizer: tokenizers::Tokenizer,
}

/// What a forward pass records per layer (for `normlab inspect`).
#[derive(Clone, Debug, Default)]
pub struct LlamaTrace {
    /// RMS of the residual stream entering each block.
    pub rms_in: Vec<f64>,
    /// RMS after the attention sublayer's write.
    pub rms_attn: Vec<f64>,
    /// RMS after the MLP sublayer's write (the block's output).
    pub rms_out: Vec<f64>,
    /// Largest |value| of the stream after each block.
    pub max_abs: Vec<f64>,
    /// ||attention write|| / ||stream it read||, per block.
    pub attn_write: Vec<f64>,
    /// ||MLP write|| / ||stream it read||, per block.
    pub mlp_write: Vec<f64>,
    /// Largest pre-softmax attention logit, per block.
    pub attn_max_logit: Vec<f64>,
    /// Mean attention entropy (nats) over heads and positions, per block.
    pub attn_entropy: Vec<f64>,
    /// Smallest mean square of a row entering either of the block's norms.
    pub ms_min: Vec<f64>,
    /// Mean over rows of |the row mean of `x / rms(x)`| at the attention
    /// norm (RMSNorm does not centre: LayerNorm's would be 0).
    pub xhat_mean: Vec<f64>,
}

/// Per row of `[rows, d]`: the smallest mean square, and the mean over rows
/// of |the row mean of `x / rms(x)`|.
fn row_stats(x: &[f32], d: usize) -> (f64, f64) {
    let (mut min, mut mean, mut n) = (f64::INFINITY, 0f64, 0usize);
    for r in x.chunks_exact(d) {
        let ms = r.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / d as f64;
        min = min.min(ms);
        if ms > 0.0 {
            mean += (r.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64 / ms.sqrt()).abs();
        }
        n += 1;
    }
    (min, mean / n.max(1) as f64)
}

fn rms(v: &[f32]) -> f64 {
    (v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>() / v.len().max(1) as f64).sqrt()
}

impl Llama {
    /// Load a Llama-architecture GGUF file.
    pub fn load(path: &Path) -> Result<Llama> {
        let g = Gguf::open(path)?;
        let arch = g.get("general.architecture")?.as_str().unwrap_or("");
        if arch != "llama" {
            return Err(format!(
                "{}: architecture '{arch}' is not supported (llama only)",
                path.display()
            )
            .into());
        }
        let cfg = LlamaConfig {
            vocab: g
                .usize("llama.vocab_size")
                .or_else(|_| g.info("token_embd.weight").map(|t| t.dims[1]))?,
            d: g.usize("llama.embedding_length")?,
            layers: g.usize("llama.block_count")?,
            heads: g.usize("llama.attention.head_count")?,
            kv_heads: g.usize("llama.attention.head_count_kv")?,
            ffn: g.usize("llama.feed_forward_length")?,
            eps: g.f64("llama.attention.layer_norm_rms_epsilon")? as f32,
            rope_base: g.f64("llama.rope.freq_base").unwrap_or(10000.0),
            context: g.usize("llama.context_length")?,
        };
        if cfg.heads == 0
            || !cfg.d.is_multiple_of(cfg.heads)
            || cfg.kv_heads == 0
            || !cfg.heads.is_multiple_of(cfg.kv_heads)
        {
            return Err(format!("{}: inconsistent head counts", path.display()).into());
        }
        let (d, kvd) = (cfg.d, cfg.kv_heads * cfg.head_dim());
        let get = |name: &str, len: usize| -> Result<Vec<f32>> {
            let v = g.tensor(name)?;
            if v.len() != len {
                return Err(format!("{name} has {} values, expected {len}", v.len()).into());
            }
            Ok(v)
        };
        let mut layers = Vec::with_capacity(cfg.layers);
        for l in 0..cfg.layers {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            layers.push(LlamaLayer {
                attn_norm: get(&n("attn_norm"), d)?,
                wq: get(&n("attn_q"), d * d)?,
                wk: get(&n("attn_k"), kvd * d)?,
                wv: get(&n("attn_v"), kvd * d)?,
                wo: get(&n("attn_output"), d * d)?,
                ffn_norm: get(&n("ffn_norm"), d)?,
                gate: get(&n("ffn_gate"), cfg.ffn * d)?,
                up: get(&n("ffn_up"), cfg.ffn * d)?,
                down: get(&n("ffn_down"), d * cfg.ffn)?,
            });
        }
        let emb = get("token_embd.weight", cfg.vocab * d)?;
        let head = match g.info("output.weight") {
            Ok(_) => Some(get("output.weight", cfg.vocab * d)?),
            Err(_) => None,
        };
        let final_norm = get("output_norm.weight", d)?;
        let tokenizer = tokenizer_from_gguf(&g)?;
        let eos = g
            .get("tokenizer.ggml.eos_token_id")
            .ok()
            .and_then(|v| v.as_u64())
            .map(|v| v as u32);
        Ok(Llama {
            eos,
            cfg,
            emb,
            layers,
            final_norm,
            head,
            tokenizer,
        })
    }

    /// Token ids of `text` (no BOS: SmolLM2's file sets add_bos_token false).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| format!("tokenizer: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text of `ids`.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer
            .decode(ids, false)
            .map_err(|e| format!("tokenizer: {e}").into())
    }

    /// The final hidden states `[T, d]` before the final norm; fills `trace`.
    pub fn hidden(&self, ids: &[u32], trace: Option<&mut LlamaTrace>) -> Result<Vec<f32>> {
        self.hidden_kind(ids, NormKind::RmsNorm, trace)
    }

    /// Apply one of the model's norms (its gain `g`) as `kind`: its own
    /// RMSNorm, or a LayerNorm keeping the gain (bias 0), to see what the
    /// replacement does.
    fn apply_norm(&self, kind: NormKind, x: &[f32], g: &[f32], y: &mut [f32], stats: &mut [f32]) {
        let d = self.cfg.d;
        match kind {
            NormKind::LayerNorm => {
                let mut p = g.to_vec();
                p.resize(2 * d, 0.0);
                norm::forward(kind, d, self.cfg.eps, x, &p, y, stats)
            }
            _ => norm::forward(NormKind::RmsNorm, d, self.cfg.eps, x, g, y, stats),
        }
    }

    /// [`Llama::hidden`] with every block norm applied as `kind`.
    pub fn hidden_kind(
        &self,
        ids: &[u32],
        kind: NormKind,
        mut trace: Option<&mut LlamaTrace>,
    ) -> Result<Vec<f32>> {
        let c = &self.cfg;
        let (d, t, hd) = (c.d, ids.len(), c.head_dim());
        let kvd = c.kv_heads * hd;
        if t == 0 {
            return Err("no tokens".to_string().into());
        }
        if t > c.context {
            return Err(format!("{t} tokens exceed the context of {}", c.context).into());
        }
        let mut h = vec![0f32; t * d];
        for (r, &id) in ids.iter().enumerate() {
            let id = id as usize;
            if id >= c.vocab {
                return Err(
                    format!("token id {id} is outside the vocabulary ({})", c.vocab).into(),
                );
            }
            h[r * d..(r + 1) * d].copy_from_slice(&self.emb[id * d..(id + 1) * d]);
        }
        let (cos, sin) = rope_table(t, hd, c.rope_base);
        let mut a = vec![0f32; t * d];
        let mut stats = vec![0f32; norm::stats_len(t)];
        let (mut q, mut k, mut v) = (vec![0f32; t * d], vec![0f32; t * kvd], vec![0f32; t * kvd]);
        let mut att = vec![0f32; t * d];
        let mut o = vec![0f32; t * d];
        let (mut gb, mut ub) = (vec![0f32; t * c.ffn], vec![0f32; t * c.ffn]);
        let scale = 1.0 / (hd as f32).sqrt();
        let group = c.heads / c.kv_heads;
        // The trace's statistics cost passes over the stream: only when tracing.
        let tracing = trace.is_some();
        let probe = |x: &[f32]| -> (f64, f64, f64) {
            if !tracing {
                return (0.0, 0.0, 0.0);
            }
            let (ms_min, xhat_mean) = row_stats(x, d);
            (rms(x), ms_min, xhat_mean)
        };
        let write = |o: &[f32], read: f64| {
            if tracing {
                rms(o) / read.max(1e-30)
            } else {
                0.0
            }
        };
        for layer in &self.layers {
            let (rms_in, ms_min_attn, xhat_mean) = probe(&h);
            self.apply_norm(kind, &h, &layer.attn_norm, &mut a, &mut stats);
            linear(&a, &layer.wq, t, d, d, &mut q);
            linear(&a, &layer.wk, t, d, kvd, &mut k);
            linear(&a, &layer.wv, t, d, kvd, &mut v);
            apply_rope(&mut q, t, c.heads, hd, &cos, &sin);
            apply_rope(&mut k, t, c.kv_heads, hd, &cos, &sin);
            // Each head on its own (in parallel): its output [t, hd], its
            // largest logit and its summed entropy; then scattered into att.
            let heads: Vec<(Vec<f32>, f64, f64)> = (0..c.heads)
                .into_par_iter()
                .map(|head| {
                    let kh = head / group;
                    // Scores Q_h K_h^T (all t x t; the causal half is masked
                    // below), then P V_h, both through the matmul kernel.
                    let view = |buf, off, rs| head_view(buf, off, t, hd, rs);
                    let mut p = vec![0f32; t * t];
                    gemm(
                        scale,
                        view(&q, head * hd, d),
                        view(&k, kh * hd, kvd).t(),
                        0.0,
                        &mut p,
                        t,
                    );
                    let (mut max_logit, mut entropy) = (f64::NEG_INFINITY, 0f64);
                    for i in 0..t {
                        let row = &mut p[i * t..(i + 1) * t];
                        let m = row[..=i].iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                        max_logit = max_logit.max(f64::from(m));
                        let mut z = 0f32;
                        for pj in &mut row[..=i] {
                            *pj = (*pj - m).exp();
                            z += *pj;
                        }
                        for pj in &mut row[..=i] {
                            *pj /= z;
                            if *pj > 0.0 {
                                entropy -= f64::from(*pj) * f64::from(*pj).ln();
                            }
                        }
                        row[i + 1..].fill(0.0);
                    }
                    let mut out = vec![0f32; t * hd];
                    gemm(
                        1.0,
                        Mat::rows(&p, t, t),
                        view(&v, kh * hd, kvd),
                        0.0,
                        &mut out,
                        hd,
                    );
                    (out, max_logit, entropy)
                })
                .collect();
            let (mut max_logit, mut entropy) = (f64::NEG_INFINITY, 0f64);
            for (head, (out, m, e)) in heads.iter().enumerate() {
                for i in 0..t {
                    att[i * d + head * hd..i * d + (head + 1) * hd]
                        .copy_from_slice(&out[i * hd..(i + 1) * hd]);
                }
                max_logit = max_logit.max(*m);
                entropy += e;
            }
            linear(&att, &layer.wo, t, d, d, &mut o);
            let attn_write = write(&o, rms_in);
            for (hh, oo) in h.iter_mut().zip(&o) {
                *hh += oo;
            }
            let (rms_attn, ms_min_mlp, _) = probe(&h);
            self.apply_norm(kind, &h, &layer.ffn_norm, &mut a, &mut stats);
            linear(&a, &layer.gate, t, d, c.ffn, &mut gb);
            linear(&a, &layer.up, t, d, c.ffn, &mut ub);
            for (g, u) in gb.iter_mut().zip(&ub) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
            linear(&gb, &layer.down, t, c.ffn, d, &mut o);
            let mlp_write = write(&o, rms_attn);
            for (hh, oo) in h.iter_mut().zip(&o) {
                *hh += oo;
            }
            if let Some(tr) = trace.as_deref_mut() {
                tr.rms_in.push(rms_in);
                tr.rms_attn.push(rms_attn);
                tr.rms_out.push(rms(&h));
                tr.max_abs
                    .push(h.iter().fold(0f64, |m, &x| m.max(f64::from(x.abs()))));
                tr.attn_write.push(attn_write);
                tr.mlp_write.push(mlp_write);
                tr.attn_max_logit.push(max_logit);
                tr.attn_entropy.push(entropy / (c.heads * t) as f64);
                tr.ms_min.push(ms_min_attn.min(ms_min_mlp));
                tr.xhat_mean.push(xhat_mean);
            }
        }
        Ok(h)
    }

    /// Logits `[T, vocab]` from hidden states, with the final norm (or
    /// without it, to measure what it does).
    pub fn logits_from(&self, h: &[f32], final_norm: bool) -> Vec<f32> {
        self.logits_kind(h, final_norm.then_some(NormKind::RmsNorm))
    }

    /// Logits with the final norm applied as `kind` (None: left out).
    pub fn logits_kind(&self, h: &[f32], final_norm: Option<NormKind>) -> Vec<f32> {
        let (d, v) = (self.cfg.d, self.cfg.vocab);
        let t = h.len() / d;
        let mut x = h.to_vec();
        if let Some(kind) = final_norm {
            let mut stats = vec![0f32; norm::stats_len(t)];
            self.apply_norm(kind, h, &self.final_norm, &mut x, &mut stats);
        }
        let mut logits = vec![0f32; t * v];
        let w = self.head.as_deref().unwrap_or(&self.emb);
        linear(&x, w, t, d, v, &mut logits);
        logits
    }

    /// Logits `[T, vocab]` of `ids`.
    pub fn logits(&self, ids: &[u32]) -> Result<Vec<f32>> {
        Ok(self.logits_from(&self.hidden(ids, None)?, true))
    }

    /// Up to `n` greedy tokens after `ids`, ending early with the
    /// end-of-sequence token (as transformers' `generate` does); each step
    /// recomputes the whole sequence: simple, and fast enough for short
    /// continuations.
    pub fn greedy(&self, ids: &[u32], n: usize) -> Result<Vec<u32>> {
        let mut seq = ids.to_vec();
        let v = self.cfg.vocab;
        for _ in 0..n {
            let h = self.hidden(&seq, None)?;
            let last = &h[h.len() - self.cfg.d..];
            let l = self.logits_from(last, true);
            let best = argmax(&l[..v]) as u32;
            seq.push(best);
            if Some(best) == self.eos {
                break;
            }
        }
        Ok(seq[ids.len()..].to_vec())
    }

    /// Mean negative log-likelihood (nats per token) of `ids`, in windows
    /// of `window` predictions (each window sees only its own tokens).
    pub fn nll(&self, ids: &[u32], window: usize, final_norm: bool) -> Result<f64> {
        self.nll_kind(ids, window, NormKind::RmsNorm, final_norm)
    }

    /// [`Llama::nll`] with every norm applied as `kind`.
    pub fn nll_kind(
        &self,
        ids: &[u32],
        window: usize,
        kind: NormKind,
        final_norm: bool,
    ) -> Result<f64> {
        let v = self.cfg.vocab;
        let (mut total, mut n) = (0f64, 0usize);
        let mut s = 0;
        while s + 1 < ids.len() {
            let e = (s + window + 1).min(ids.len());
            let w = &ids[s..e];
            let h = self.hidden_kind(&w[..w.len() - 1], kind, None)?;
            let l = self.logits_kind(&h, final_norm.then_some(kind));
            for (r, &target) in w[1..].iter().enumerate() {
                let row = &l[r * v..(r + 1) * v];
                let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                let lse = f64::from(m)
                    + row
                        .iter()
                        .map(|&x| f64::from(x - m).exp())
                        .sum::<f64>()
                        .ln();
                total += lse - f64::from(row[target as usize]);
                n += 1;
            }
            s += window;
        }
        Ok(total / n.max(1) as f64)
    }
}

/// Rows per parallel task of [`linear`]: fixed, so results do not depend on
/// the thread count.
const ROWS_PER_TASK: usize = 128;

/// `y = x W^T` in row blocks over rayon's current pool.
fn linear(x: &[f32], w: &[f32], rows: usize, d_in: usize, d_out: usize, y: &mut [f32]) {
    debug_assert_eq!(x.len(), rows * d_in);
    y.par_chunks_mut(ROWS_PER_TASK * d_out)
        .zip(x.par_chunks(ROWS_PER_TASK * d_in))
        .for_each(|(yc, xc)| linear_forward(xc, w, None, xc.len() / d_in, d_in, d_out, yc));
}

/// The `rows x cols` view starting at `off` with row stride `rs` (one
/// head's slice of a `[t, heads * hd]` activation).
fn head_view(buf: &[f32], off: usize, rows: usize, cols: usize, rs: usize) -> Mat<'_> {
    Mat {
        data: &buf[off..],
        rows,
        cols,
        rs,
        cs: 1,
    }
}

/// Index of the largest value (the first on ties).
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// cos/sin of position p times frequency i, `[t, hd/2]`, computed in f64.
fn rope_table(t: usize, hd: usize, base: f64) -> (Vec<f32>, Vec<f32>) {
    let half = hd / 2;
    let mut cos = vec![0f32; t * half];
    let mut sin = vec![0f32; t * half];
    for p in 0..t {
        for i in 0..half {
            // As Hugging Face computes it: the inverse frequency in f32.
            let inv = (1.0 / base.powf((2 * i) as f64 / hd as f64)) as f32;
            let ang = f64::from(p as f32 * inv);
            cos[p * half + i] = ang.cos() as f32;
            sin[p * half + i] = ang.sin() as f32;
        }
    }
    (cos, sin)
}

/// Rotate adjacent pairs (2i, 2i+1) of each head (llama.cpp's row order).
fn apply_rope(x: &mut [f32], t: usize, heads: usize, hd: usize, cos: &[f32], sin: &[f32]) {
    let half = hd / 2;
    for p in 0..t {
        for h in 0..heads {
            let row = &mut x[(p * heads + h) * hd..(p * heads + h + 1) * hd];
            for i in 0..half {
                let (c, s) = (cos[p * half + i], sin[p * half + i]);
                let (a, b) = (row[2 * i], row[2 * i + 1]);
                row[2 * i] = a * c - b * s;
                row[2 * i + 1] = a * s + b * c;
            }
        }
    }
}
