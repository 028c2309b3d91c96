//! One decoder for every pretrained decoder-only model normlab reads,
//! configured in normlab's vocabulary rather than a family's: where the
//! norms sit (pre, or sandwich: an input and an output norm around each
//! sublayer), how the file stores a norm's gain (w, or 1 + w as Gemma does),
//! QK-Norm (an RMSNorm over head_dim on queries and keys, before RoPE), the
//! gated MLP's activation (SwiGLU, or GeGLU with tanh-GELU), an embedding
//! scale, each layer's attention window and RoPE base, how RoPE pairs
//! dimensions (adjacent pairs for llama.cpp's permuted Q/K rows; (i, i +
//! head_dim/2) for rows that are not permuted), grouped-query attention with
//! a head_dim of its own, the attention scale and a tied or separate head.
//! A family is a configuration plus a weight-name map ([`names`]): SmolLM2
//! (Llama, GGUF) and Gemma 3 (GGUF, or a Hugging Face folder; [`hf`]).
//!
//! It runs in inference mode only (no gradient buffers), over a key/value
//! cache (`forward.rs`). Its matrices are [`Matrix`] values, dense f32 or
//! the file's quantised blocks (`matrix.rs`).
//!
//! Files: this one (weights, logits, generation, loss), `config.rs` (the
//! configuration), `forward.rs` (the blocks over a key/value cache, calling
//! the hook points of `model/hooks.rs`), `heads.rs` (per-head views, RoPE,
//! the largest logit), `trace.rs` (what `inspect` records: an observer),
//! `matrix.rs` (weight matrices and their products), `compare.rs`
//! (how far two ways of holding the weights are apart), `names.rs`
//! (weight-name maps and tensor sources), `gguf.rs`
//! (GGUF files), `hf.rs` (Hugging Face folders), `tokenizer.rs` (a GGUF
//! file's tokenizers), `inspect.rs` (what `normlab inspect` and `exp llm`
//! report, measured on this decoder), `report.rs` (the report and how it
//! is put together from measurements, which Python's hooks also feed).

use crate::error::Result;
use crate::gguf::qdot::ActBits;
use crate::kernels::norm::{self, NormKind};
use crate::model::hooks::{NoObserver, Observer};
use crate::model::intervene::Interventions;

mod claims;
pub mod compare;
mod config;
mod config_json;
pub mod family;
pub mod field;
mod folder;
mod forward;
mod gguf;
mod heads;
pub mod hf;
mod hf_gpt;
mod inspect;
mod matrix;
mod means;
pub mod names;
mod phi3;
mod report;
mod row;
pub(crate) mod tokenizer;
mod trace;

pub use super::SublayerTrace;
pub use config::{
    DecoderConfig, GainStore, GatedAct, GptStyle, LayerAttention, QkvStore, RopePairs, RopeScaling,
    MAX_BLOCKS, MAX_CONTEXT, MAX_HEADS, MAX_VOCAB, MAX_WIDTH,
};
pub use forward::KvCache;
pub use inspect::{held_out_text, inspect, inspect_ids, report_head, FIELD_WINDOWS};
pub use matrix::Matrix;
pub use names::{Tensor, TensorNames, TensorSource, WeightStorage};
pub use report::{
    argmax, gain_stats, nll_sum, stream_growth, top_tokens, ChangedLosses, DecoderLayerRow,
    FinalNormEffect, FinalNormSum, GainRow, Inspection, LensRow, MassiveActivation, ModelClaims,
    TraceSum, LENS_TOKENS,
};
pub use trace::DecoderTrace;

/// One block's weights. Gains are the gains the model multiplies by (a
/// file's 1 + w already added).
pub struct DecoderLayer {
    /// Input norm of the attention sublayer (none in OLMo 2).
    pub attn_norm: Option<Vec<f32>>,
    /// Output norm of the attention sublayer (sandwich, OLMo 2).
    pub attn_out_norm: Option<Vec<f32>>,
    /// QK-Norm's gains on queries and keys (head_dim each; OLMo 2: the
    /// whole q and k).
    pub qk_norm: Option<(Vec<f32>, Vec<f32>)>,
    /// Biases of the query, key and value projections (Qwen2).
    pub qkv_bias: Option<(Vec<f32>, Vec<f32>, Vec<f32>)>,
    /// Query `[heads * hd, d]`.
    pub wq: Matrix,
    /// Key `[kv_heads * hd, d]`.
    pub wk: Matrix,
    /// Value `[kv_heads * hd, d]`.
    pub wv: Matrix,
    /// Attention output `[d, heads * hd]`.
    pub wo: Matrix,
    /// Input norm of the MLP sublayer (none in OLMo 2).
    pub ffn_norm: Option<Vec<f32>>,
    /// Output norm of the MLP sublayer (sandwich, OLMo 2).
    pub ffn_out_norm: Option<Vec<f32>>,
    /// Gate `[ffn, d]` (none in a plain MLP).
    pub gate: Option<Matrix>,
    /// Up `[ffn, d]`.
    pub up: Matrix,
    /// Down `[d, ffn]`.
    pub down: Matrix,
    /// The biases of GPT-2 and GPT-NeoX (all None elsewhere).
    pub bias: LayerBias,
}

/// A block's biases besides q/k/v's: its norms' (LayerNorm's beta) and
/// its projections'.
#[derive(Clone, Debug, Default)]
pub struct LayerBias {
    /// Of the attention's input norm.
    pub attn_norm: Option<Vec<f32>>,
    /// Of the MLP's input norm.
    pub ffn_norm: Option<Vec<f32>>,
    /// Of the attention output projection.
    pub o: Option<Vec<f32>>,
    /// Of the MLP's up projection.
    pub up: Option<Vec<f32>>,
    /// Of the MLP's down projection.
    pub down: Option<Vec<f32>>,
}

/// A pretrained decoder: configuration, weights and (when the file has
/// one) its tokenizer.
pub struct Decoder {
    /// Hyper-parameters.
    pub cfg: DecoderConfig,
    /// Token embeddings `[vocab, d]`.
    pub emb: Matrix,
    /// Blocks.
    pub layers: Vec<DecoderLayer>,
    /// Final norm gain.
    pub final_norm: Vec<f32>,
    /// Final norm bias (LayerNorm's beta; GPT-2, GPT-NeoX).
    pub final_norm_bias: Option<Vec<f32>>,
    /// Learned position embeddings `[context, d]` (GPT-2).
    pub pos: Option<Matrix>,
    /// Output head `[vocab, d]` when not tied to the embeddings.
    pub head: Option<Matrix>,
    /// End-of-sequence token.
    pub eos: Option<u32>,
    /// Beginning-of-sequence token that [`Decoder::encode`] prepends (None:
    /// the file adds none, as SmolLM2's).
    pub bos: Option<u32>,
    /// What every pass of this model changes at its hook points
    /// (`model/intervene.rs`; none by default): `normlab inspect
    /// --intervene`, `--knockout`, `--ffn-clamp` set them, and every
    /// measurement of the model (its rows, losses, lens) then runs the
    /// changed model.
    pub interventions: Interventions,
    /// One-row steps (generation) of quantised matrices quantise their
    /// activations to these bits per block and use integer dot products
    /// (llama.cpp's way: fast, and slightly different from the f32
    /// numbers). None: f32 activations, the same bits as a dense load.
    pub quantised_activations: Option<ActBits>,
    pub(crate) tokenizer: Option<tokenizers::Tokenizer>,
}

impl Decoder {
    /// `y = x W^T` for `n` rows of `x`: with quantised activations for one
    /// row when [`Decoder::quantised_activations`] is set, else f32.
    pub(crate) fn apply(&self, w: &Matrix, x: &[f32], n: usize, y: &mut [f32]) {
        if let (1, Some(bits)) = (n, self.quantised_activations) {
            w.apply_quantised(x, bits, y)
        } else {
            w.apply(x, n, y)
        }
    }

    /// Bytes the weights take in memory (matrices, embeddings, gains).
    pub fn weight_bytes(&self) -> usize {
        let gains = |v: &[f32]| v.len() * 4;
        let opt = |v: &Option<Vec<f32>>| v.as_deref().map_or(0, gains);
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                [&l.wq, &l.wk, &l.wv, &l.wo, &l.up, &l.down]
                    .into_iter()
                    .chain(&l.gate)
                    .map(Matrix::resident_bytes)
                    .sum::<usize>()
                    + [
                        &l.bias.attn_norm,
                        &l.bias.ffn_norm,
                        &l.bias.o,
                        &l.bias.up,
                        &l.bias.down,
                    ]
                    .into_iter()
                    .map(opt)
                    .sum::<usize>()
                    + opt(&l.attn_norm)
                    + opt(&l.ffn_norm)
                    + opt(&l.attn_out_norm)
                    + opt(&l.ffn_out_norm)
                    + l.qk_norm.as_ref().map_or(0, |(q, k)| gains(q) + gains(k))
            })
            .sum();
        layers
            + self.emb.resident_bytes()
            + self.head.as_ref().map_or(0, Matrix::resident_bytes)
            + self.pos.as_ref().map_or(0, Matrix::resident_bytes)
            + gains(&self.final_norm)
            + opt(&self.final_norm_bias)
    }

    /// Token ids of `text`, after [`Decoder::bos`] when the file adds one
    /// (Gemma's does; SmolLM2's sets add_bos_token false).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .tokenizer()?
            .encode(text, false)
            .map_err(|e| format!("tokenizer: {e}"))?;
        Ok(self
            .bos
            .into_iter()
            .chain(enc.get_ids().iter().copied())
            .collect())
    }

    /// Text of `ids`.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer()?
            .decode(ids, false)
            .map_err(|e| format!("tokenizer: {e}").into())
    }

    fn tokenizer(&self) -> Result<&tokenizers::Tokenizer> {
        self.tokenizer.as_ref().ok_or_else(|| {
            "this model has no tokenizer (a Hugging Face folder needs its tokenizer.json; or give token ids)"
                .to_string()
                .into()
        })
    }

    /// The final hidden states `[T, d]` before the final norm.
    pub fn hidden(&self, ids: &[u32]) -> Result<Vec<f32>> {
        self.hidden_with(ids, &self.interventions, &mut NoObserver)
    }

    /// [`Decoder::hidden`], handing the pass's tensors to `obs` at its
    /// hook points (e.g. a [`DecoderTrace`]).
    pub fn observe<O: Observer + ?Sized>(&self, ids: &[u32], obs: &mut O) -> Result<Vec<f32>> {
        self.hidden_with(ids, &self.interventions, obs)
    }

    /// [`Decoder::observe`] with the interventions `iv` (instead of the
    /// model's own).
    pub fn hidden_with<O: Observer + ?Sized>(
        &self,
        ids: &[u32],
        iv: &Interventions,
        obs: &mut O,
    ) -> Result<Vec<f32>> {
        self.forward(ids, iv, &mut KvCache::new(self), obs)
    }

    /// The kind and eps every norm but QK-Norm runs as under `iv`.
    fn norm_as(&self, iv: &Interventions) -> (NormKind, f32) {
        (
            iv.norm_kind.unwrap_or(self.cfg.norm),
            iv.eps.unwrap_or(self.cfg.eps),
        )
    }

    /// Apply one of the model's norms (its gain `g` and bias `b`, over
    /// `g.len()` features) as `kind` with `eps`: its own, or the other of
    /// RMSNorm and LayerNorm keeping gain and bias (a missing bias is 0),
    /// to see what the replacement does.
    fn apply_norm(
        &self,
        kind: NormKind,
        eps: f32,
        x: &[f32],
        (g, b): (&[f32], Option<&[f32]>),
        y: &mut [f32],
        stats: &mut [f32],
    ) {
        let d = g.len();
        let rows = x.len() / d;
        let stats = &mut stats[..norm::stats_len(rows)];
        match kind {
            NormKind::LayerNorm => {
                let mut p = g.to_vec();
                match b {
                    Some(b) => p.extend_from_slice(b),
                    None => p.resize(2 * d, 0.0),
                }
                norm::forward(kind, d, eps, x, &p, y, stats)
            }
            NormKind::RmsNorm => {
                norm::forward(kind, d, eps, x, g, y, stats);
                if let Some(b) = b {
                    crate::kernels::matmul::add_bias_rows(y, b);
                }
            }
            other => panic!("a decoder norm runs as rmsnorm or layernorm, not {other}"),
        }
    }

    /// Logits `[T, vocab]` from hidden states, with the final norm (or
    /// without it, to measure what it does), under the model's
    /// interventions.
    pub fn logits_from(&self, h: &[f32], final_norm: bool) -> Vec<f32> {
        if final_norm {
            self.logits_with(h, &self.interventions)
        } else {
            let iv = Interventions {
                no_final_norm: true,
                ..self.interventions.clone()
            };
            self.logits_with(h, &iv)
        }
    }

    /// The final norm of hidden states `h` (`[T, d]`), as the model's
    /// interventions run it.
    pub fn final_normed(&self, h: &[f32]) -> Vec<f32> {
        self.final_normed_with(h, &self.interventions)
    }

    fn final_normed_with(&self, h: &[f32], iv: &Interventions) -> Vec<f32> {
        let mut x = vec![0f32; h.len()];
        let mut stats = vec![0f32; norm::stats_len(h.len() / self.cfg.d)];
        let b = self.final_norm_bias.as_deref();
        let (kind, eps) = self.norm_as(iv);
        self.apply_norm(kind, eps, h, (&self.final_norm, b), &mut x, &mut stats);
        x
    }

    /// Logits with the final norm as `iv` runs it (or left out).
    pub fn logits_with(&self, h: &[f32], iv: &Interventions) -> Vec<f32> {
        let (d, v) = (self.cfg.d, self.cfg.vocab);
        let t = h.len() / d;
        let x = if iv.no_final_norm {
            h.to_vec()
        } else {
            self.final_normed_with(h, iv)
        };
        let mut logits = vec![0f32; t * v];
        self.apply(self.head.as_ref().unwrap_or(&self.emb), &x, t, &mut logits);
        if let Some(cap) = self.cfg.final_softcap {
            logits.iter_mut().for_each(|l| *l = (*l / cap).tanh() * cap);
        }
        logits
    }

    /// Logits `[T, vocab]` of `ids`.
    pub fn logits(&self, ids: &[u32]) -> Result<Vec<f32>> {
        Ok(self.logits_from(&self.hidden(ids)?, true))
    }

    /// Up to `n` greedy tokens after `ids`, ending early with the
    /// end-of-sequence token (as transformers' `generate` does): the prompt
    /// in one pass, then one token per pass over the key/value cache.
    pub fn greedy(&self, ids: &[u32], n: usize) -> Result<Vec<u32>> {
        self.generate(ids, n, true, |_| {})
    }

    /// Up to `n` greedy tokens after `ids` (stopping at the end-of-sequence
    /// token when `stop_at_eos`), handing each to `each` as it is chosen.
    pub fn generate(
        &self,
        ids: &[u32],
        n: usize,
        stop_at_eos: bool,
        mut each: impl FnMut(u32),
    ) -> Result<Vec<u32>> {
        let (d, v) = (self.cfg.d, self.cfg.vocab);
        let mut cache = KvCache::new(self);
        let mut out = Vec::with_capacity(n.min(self.cfg.context));
        let iv = &self.interventions;
        let mut h = self.forward(ids, iv, &mut cache, &mut NoObserver)?;
        for i in 0..n {
            let l = self.logits_from(&h[h.len() - d..], true);
            let best = argmax(&l[..v]) as u32;
            out.push(best);
            each(best);
            if stop_at_eos && Some(best) == self.eos || i + 1 == n {
                break;
            }
            h = self.forward(&[best], iv, &mut cache, &mut NoObserver)?;
        }
        Ok(out)
    }

    /// Mean negative log-likelihood (nats per token) of `ids`, in windows
    /// of `window` predictions (each window sees only its own tokens),
    /// under the model's interventions (the final norm left out unless
    /// `final_norm`).
    pub fn nll(&self, ids: &[u32], window: usize, final_norm: bool) -> Result<f64> {
        let iv = Interventions {
            no_final_norm: !final_norm || self.interventions.no_final_norm,
            ..self.interventions.clone()
        };
        self.nll_with(ids, window, &iv)
    }

    /// [`Decoder::nll`] under the interventions `iv`.
    pub fn nll_with(&self, ids: &[u32], window: usize, iv: &Interventions) -> Result<f64> {
        let (mut total, mut n) = (0f64, 0usize);
        self.for_windows_with(ids, window, iv, |h, targets| {
            self.add_nll(&self.logits_with(h, iv), targets, &mut total);
            n += targets.len();
        })?;
        Ok(total / n.max(1) as f64)
    }

    /// Run `ids` in windows of `window` predictions (each window sees only
    /// its own tokens) under the interventions `iv`: `f(hidden states
    /// before the final norm, the tokens they predict)` per window.
    pub fn for_windows_with(
        &self,
        ids: &[u32],
        window: usize,
        iv: &Interventions,
        mut f: impl FnMut(&[f32], &[u32]),
    ) -> Result<()> {
        let mut s = 0;
        while s + 1 < ids.len() {
            let e = (s + window + 1).min(ids.len());
            let w = &ids[s..e];
            f(
                &self.hidden_with(&w[..w.len() - 1], iv, &mut NoObserver)?,
                &w[1..],
            );
            s += window;
        }
        Ok(())
    }

    /// Add the negative log-likelihood of each of `targets` under `logits`
    /// (`[targets.len(), vocab]`) to `total`, one after another.
    pub fn add_nll(&self, logits: &[f32], targets: &[u32], total: &mut f64) {
        report::add_nll(logits, self.cfg.vocab, targets, total);
    }
}
