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
//! Files: this one (configuration, weights, logits, generation, perplexity),
//! `forward.rs` (the blocks, with a key/value cache), `tokenizer.rs` (the
//! tokenizer from the GGUF metadata), `inspect.rs` (what `normlab inspect`
//! and `exp llm` report).
//!
//! A trace records what `normlab inspect` reports per layer: the residual
//! stream's RMS entering each block and after each sublayer, its largest
//! per-token value, each sublayer's write relative to the stream it read,
//! attention logit maxima and entropies.

use crate::error::Result;
use crate::gguf::Gguf;
use crate::kernels::norm::{self, NormKind};
use std::path::Path;

mod forward;
mod inspect;
mod tokenizer;

use forward::linear;
pub use forward::KvCache;

pub use inspect::{
    held_out_text, inspect, stream_growth, FinalNormEffect, LlamaLayerRow, MassiveActivation,
    ModelClaims,
};
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

/// Most blocks a file may declare (SmolLM2-135M has 30; the largest Llama
/// models about 130): a metadata count beyond it is refused before anything
/// is allocated from it.
pub const MAX_BLOCKS: usize = 4096;

impl LlamaConfig {
    /// Per-head width.
    pub fn head_dim(&self) -> usize {
        self.d / self.heads
    }

    /// Check the metadata against itself and against the tensors the file
    /// holds, before anything is sized from it: a corrupt or hostile count
    /// (a flipped bit of `block_count`) is a one-line error, not an
    /// allocation of terabytes; eps and the RoPE base must be positive.
    fn check(&self, g: &Gguf) -> Result<()> {
        if self.layers == 0 || self.layers > MAX_BLOCKS {
            return Err(format!("block_count {} is not in 1..={MAX_BLOCKS}", self.layers).into());
        }
        let last = format!("blk.{}.attn_norm.weight", self.layers - 1);
        if g.info(&last).is_err() {
            return Err(format!(
                "block_count says {} blocks but the file has no tensor {last}",
                self.layers
            )
            .into());
        }
        if self.d == 0 || self.vocab == 0 || self.ffn == 0 || self.context == 0 {
            return Err("embedding_length, vocab_size, feed_forward_length and context_length must be at least 1".into());
        }
        if self.heads == 0
            || !self.d.is_multiple_of(self.heads)
            || self.kv_heads == 0
            || !self.heads.is_multiple_of(self.kv_heads)
        {
            return Err("inconsistent head counts".into());
        }
        // Every size must be what the file's tensors hold (so no product
        // of counts can exceed what was read from disk).
        for (name, want) in [
            ("token_embd.weight", self.vocab.checked_mul(self.d)),
            ("blk.0.ffn_up.weight", self.ffn.checked_mul(self.d)),
            ("blk.0.attn_norm.weight", Some(self.d)),
        ] {
            if Some(g.info(name)?.numel()) != want {
                return Err(format!("{name} does not have the shape the metadata gives").into());
            }
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(format!(
                "the RMSNorm eps must be a positive number (got {})",
                self.eps
            )
            .into());
        }
        if !(self.rope_base.is_finite() && self.rope_base > 0.0) {
            return Err(format!(
                "the RoPE base must be a positive number (got {})",
                self.rope_base
            )
            .into());
        }
        Ok(())
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
    /// Where it is: (position, channel), per block.
    pub max_at: Vec<(usize, usize)>,
    /// The lesson's metric of the stream entering each block: the mean over
    /// tokens of each token's L2 norm (`x.norm(dim=-1).mean()`), which one
    /// token's massive activation cannot dominate as it does the RMS.
    pub row_norm_in: Vec<f64>,
    /// The same after each block.
    pub row_norm_out: Vec<f64>,
    /// The median over tokens of each token's L2 norm after each block (the
    /// typical token, whatever one token holds).
    pub row_norm_median_out: Vec<f64>,
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
        cfg.check(&g)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let (d, kvd) = (cfg.d, cfg.kv_heads * cfg.head_dim());
        let get = |name: &str, len: usize| -> Result<Vec<f32>> {
            let v = g.tensor(name)?;
            if v.len() != len {
                return Err(format!("{name} has {} values, expected {len}", v.len()).into());
            }
            if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                return Err(format!("{name} holds a non-finite value ({}) at {i}", v[i]).into());
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
            NormKind::RmsNorm => norm::forward(kind, d, self.cfg.eps, x, g, y, stats),
            other => panic!("a Llama norm runs as rmsnorm or layernorm, not {other}"),
        }
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

    /// [`Llama::hidden`] with every block norm applied as `kind`.
    pub fn hidden_kind(
        &self,
        ids: &[u32],
        kind: NormKind,
        trace: Option<&mut LlamaTrace>,
    ) -> Result<Vec<f32>> {
        self.forward(ids, kind, &mut KvCache::new(self), trace)
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
        let mut h = self.forward(ids, NormKind::RmsNorm, &mut cache, None)?;
        for i in 0..n {
            let l = self.logits_from(&h[h.len() - d..], true);
            let best = argmax(&l[..v]) as u32;
            out.push(best);
            each(best);
            if stop_at_eos && Some(best) == self.eos || i + 1 == n {
                break;
            }
            h = self.forward(&[best], NormKind::RmsNorm, &mut cache, None)?;
        }
        Ok(out)
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
        let (mut total, mut n) = (0f64, 0usize);
        self.for_windows(ids, window, kind, |h, targets| {
            self.add_nll(
                &self.logits_kind(h, final_norm.then_some(kind)),
                targets,
                &mut total,
            );
            n += targets.len();
        })?;
        Ok(total / n.max(1) as f64)
    }

    /// Run `ids` in windows of `window` predictions (each window sees only
    /// its own tokens), every norm as `kind`: `f(hidden states before the
    /// final norm, the tokens they predict)` per window.
    pub fn for_windows(
        &self,
        ids: &[u32],
        window: usize,
        kind: NormKind,
        mut f: impl FnMut(&[f32], &[u32]),
    ) -> Result<()> {
        let mut s = 0;
        while s + 1 < ids.len() {
            let e = (s + window + 1).min(ids.len());
            let w = &ids[s..e];
            f(&self.hidden_kind(&w[..w.len() - 1], kind, None)?, &w[1..]);
            s += window;
        }
        Ok(())
    }

    /// Add the negative log-likelihood of each of `targets` under `logits`
    /// (`[targets.len(), vocab]`) to `total`, one after another.
    pub fn add_nll(&self, logits: &[f32], targets: &[u32], total: &mut f64) {
        let v = self.cfg.vocab;
        for (row, &target) in logits.chunks_exact(v).zip(targets) {
            let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let lse = f64::from(m)
                + row
                    .iter()
                    .map(|&x| f64::from(x - m).exp())
                    .sum::<f64>()
                    .ln();
            *total += lse - f64::from(row[target as usize]);
        }
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
