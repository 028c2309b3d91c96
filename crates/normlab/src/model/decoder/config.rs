//! A pretrained decoder's hyper-parameters in normlab's vocabulary
//! ([`DecoderConfig`]): sizes, where the norms sit and how a file stores
//! their gains, QK-Norm, the gated MLP's activation, each layer's window and
//! RoPE base, RoPE pairing, and the GPT-2 / GPT-NeoX operations
//! ([`GptStyle`]: biases, learned positions, partial rotary, a parallel
//! block, a plain MLP, fused q/k/v); its checks and its one-line
//! description.

use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::nn::Placement;

/// How a file stores a norm's gain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GainStore {
    /// The gain itself (Llama).
    Plain,
    /// w, with the gain 1 + w (Gemma's zero-centred gains, as Hugging Face
    /// files store them).
    OnePlus,
    /// 1 + w with the one already added (llama.cpp's Gemma GGUF files): the
    /// stored value is the gain, and w is the gain minus one.
    #[serde(rename = "oneplus-folded")]
    OnePlusFolded,
}

impl GainStore {
    /// Whether the model's gains are zero-centred (1 + w), however stored.
    pub fn zero_centred(self) -> bool {
        self != GainStore::Plain
    }
}

/// The MLP's activation: on the gate of a gated MLP, `down(act(gate(x)) *
/// up(x))`, or on the one hidden layer of a plain one, `down(act(up(x)))`
/// ([`GptStyle::plain_mlp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GatedAct {
    /// SiLU (SwiGLU, Llama).
    Silu,
    /// GELU, tanh form (GeGLU, Gemma; GPT-2's `gelu_new`).
    GeluTanh,
    /// GELU, exact (erf) form (GPT-NeoX's `gelu`).
    Gelu,
}

/// How a file stores the query, key and value projections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QkvStore {
    /// Three tensors (Llama, Gemma, ...).
    #[default]
    Separate,
    /// One tensor, the queries' rows, then the keys', then the values'
    /// (GPT-2's `c_attn`).
    Concat,
    /// One tensor, head by head: each head's query, key and value rows
    /// together (GPT-NeoX's `query_key_value`).
    #[serde(rename = "per-head")]
    PerHead,
}

/// The operations of the GPT-2 and GPT-NeoX families that the newer ones
/// dropped (all off for them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct GptStyle {
    /// The block and final norms have a bias (LayerNorm's beta).
    pub norm_bias: bool,
    /// Biases on the attention output and the MLP's projections.
    pub linear_bias: bool,
    /// Learned position embeddings `[context, d]` added to the token
    /// embeddings (GPT-2; no RoPE then).
    pub learned_positions: bool,
    /// RoPE rotates only the first this many dimensions of each head
    /// (GPT-NeoX's partial rotary; 0: no RoPE; None: all of head_dim).
    pub rotary_dims: Option<usize>,
    /// Attention and MLP both read the block's input and add to it
    /// together: `x + attn(n1(x)) + mlp(n2(x))` (GPT-NeoX).
    pub parallel: bool,
    /// The MLP is `down(act(up(x)))`, without a gate (GPT-2, GPT-NeoX).
    pub plain_mlp: bool,
    /// How the file stores q, k and v.
    pub qkv: QkvStore,
    /// The file stores each projection as `[in, out]` (GPT-2's Conv1D),
    /// transposed at load.
    pub conv1d: bool,
    /// The file stores the MLP's gate and up in one tensor, the gate's
    /// rows first (Phi-3's `gate_up_proj`), split at load.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fused_gate_up: bool,
}

pub use crate::nn::rope::{RopePairs, RopeScaling};

/// One layer's attention: its window and its RoPE base.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct LayerAttention {
    /// A position attends to at most this many positions, itself included
    /// (None: every earlier position).
    pub window: Option<usize>,
    /// RoPE base.
    pub rope_base: f64,
}

/// A decoder's hyper-parameters, in normlab's vocabulary.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DecoderConfig {
    /// The family it was read as ("llama", "gemma3").
    pub family: String,
    /// Vocabulary.
    pub vocab: usize,
    /// Width d of the residual stream.
    pub d: usize,
    /// Blocks.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention).
    pub kv_heads: usize,
    /// Per-head width (d / heads for Llama; its own for Gemma).
    pub head_dim: usize,
    /// Gated MLP hidden width.
    pub ffn: usize,
    /// Context length the model was trained for.
    pub context: usize,
    /// Where the norms sit: pre, sandwich (input and output norms), or
    /// olmo2 (output norms only).
    pub placement: Placement,
    /// The block norms' kind (RMSNorm for both families).
    #[serde(with = "crate::model::config::norm_kind_serde")]
    pub norm: NormKind,
    /// Norm eps.
    pub eps: f32,
    /// How the file stores the gains (folded into [`Decoder`]'s at load).
    pub gain: GainStore,
    /// QK-Norm before RoPE.
    pub qk_norm: bool,
    /// QK-Norm over the whole query and key (OLMo 2: gains of heads x
    /// head_dim and kv_heads x head_dim), not per head.
    #[serde(default)]
    pub qk_norm_whole: bool,
    /// Biases on the query, key and value projections (Qwen2).
    #[serde(default)]
    pub qkv_bias: bool,
    /// The gated MLP's activation.
    pub act: GatedAct,
    /// Multiplier on the token embeddings (1; sqrt(d) for Gemma).
    pub emb_scale: f32,
    /// Multiplier on the attention scores (1/sqrt(head_dim); Gemma:
    /// query_pre_attn_scalar^-1/2).
    pub attn_scale: f32,
    /// Per layer: window and RoPE base.
    pub attn: Vec<LayerAttention>,
    /// RoPE pairing.
    pub rope_pairs: RopePairs,
    /// RoPE's frequency scaling, if any (every layer).
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    /// tanh soft-capping of the final logits (Gemma 2; None elsewhere).
    pub final_softcap: Option<f32>,
    /// tanh soft-capping of the attention logits before the softmax,
    /// `cap tanh(s / cap)` (Gemma 2; None elsewhere).
    #[serde(default)]
    pub attn_softcap: Option<f32>,
    /// GPT-2 and GPT-NeoX's operations.
    #[serde(flatten)]
    pub gpt: GptStyle,
}

/// Widest stream, feed-forward, head or query width a file may declare
/// (the largest open models have d 16384 and feed-forward 53248).
pub const MAX_WIDTH: usize = 1 << 17;
/// Most attention heads a file may declare.
pub const MAX_HEADS: usize = 1 << 12;
/// Largest vocabulary a file may declare (Gemma 3's is 262144).
pub const MAX_VOCAB: usize = 1 << 22;
/// Longest context a file may declare.
pub const MAX_CONTEXT: usize = 1 << 24;

/// Most blocks a file may declare (SmolLM2-135M has 30; the largest Llama
/// models about 130): a metadata count beyond it is refused before anything
/// is allocated from it.
pub const MAX_BLOCKS: usize = 4096;

impl DecoderConfig {
    /// Whether the blocks have input norms and output norms: pre (input),
    /// sandwich (both), olmo2 (output).
    pub fn block_norms(&self) -> (bool, bool) {
        (
            self.placement != Placement::Olmo2,
            matches!(self.placement, Placement::Sandwich | Placement::Olmo2),
        )
    }

    /// The widths QK-Norm's gains span on queries and keys: head_dim, or
    /// the whole q and k ([`DecoderConfig::qk_norm_whole`]).
    pub fn qk_norm_widths(&self) -> (usize, usize) {
        if self.qk_norm_whole {
            (self.q_width(), self.kv_width())
        } else {
            (self.head_dim, self.head_dim)
        }
    }

    /// Width of the queries (heads x head_dim; [`DecoderConfig::check`]
    /// bounds it).
    pub fn q_width(&self) -> usize {
        self.heads * self.head_dim
    }

    /// How many dimensions of each head RoPE rotates (0: no RoPE).
    pub fn rotary_dims(&self) -> usize {
        if self.gpt.learned_positions {
            0
        } else {
            self.gpt.rotary_dims.unwrap_or(self.head_dim)
        }
    }

    /// Width of the keys and values.
    pub fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// The RoPE base of the full-attention layers (the first layer's when
    /// every layer has a window).
    pub fn rope_base(&self) -> f64 {
        self.attn
            .iter()
            .find(|a| a.window.is_none())
            .or(self.attn.first())
            .map_or(10000.0, |a| a.rope_base)
    }

    /// Check the sizes against each other before anything is sized from
    /// them: a corrupt or hostile count is a one-line error.
    pub fn check(&self) -> Result<()> {
        if self.layers == 0 || self.layers > MAX_BLOCKS {
            return Err(format!("block_count {} is not in 1..={MAX_BLOCKS}", self.layers).into());
        }
        if self.attn.len() != self.layers {
            return Err("one attention setting per layer is needed".into());
        }
        if self.d == 0 || self.vocab == 0 || self.ffn == 0 || self.context == 0 {
            return Err("embedding_length, vocab_size, feed_forward_length and context_length must be at least 1".into());
        }
        if let Some(s) = self.rope_scaling {
            s.check()?;
        }
        if self.heads == 0
            || self.kv_heads == 0
            || !self.heads.is_multiple_of(self.kv_heads)
            || self.head_dim == 0
            || !self.head_dim.is_multiple_of(2)
        {
            return Err("inconsistent head counts".into());
        }
        // Every size bounded, so that no product of them overflows or
        // asks for more than the machine could hold.
        for (what, n, max) in [
            ("embedding_length", self.d, MAX_WIDTH),
            ("feed_forward_length", self.ffn, MAX_WIDTH),
            ("head_count", self.heads, MAX_HEADS),
            ("head_count_kv", self.kv_heads, MAX_HEADS),
            ("head_dim", self.head_dim, MAX_WIDTH),
            ("vocab_size", self.vocab, MAX_VOCAB),
            ("context_length", self.context, MAX_CONTEXT),
        ] {
            if n > max {
                return Err(
                    format!("{what} {n} is larger than normlab reads (at most {max})").into(),
                );
            }
        }
        if self.heads * self.head_dim > MAX_WIDTH {
            return Err(format!(
                "head_count {} x head_dim {} is wider than normlab reads (at most {MAX_WIDTH})",
                self.heads, self.head_dim
            )
            .into());
        }
        if let Some(cap) = self.final_softcap {
            if !(cap.is_finite() && cap > 0.0) {
                return Err(format!(
                    "final_logit_softcapping must be a positive number (got {cap})"
                )
                .into());
            }
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(format!(
                "the RMSNorm eps must be a positive number (got {})",
                self.eps
            )
            .into());
        }
        for a in &self.attn {
            if !(a.rope_base.is_finite() && a.rope_base > 0.0) {
                return Err(format!(
                    "the RoPE base must be a positive number (got {})",
                    a.rope_base
                )
                .into());
            }
            if a.window == Some(0) {
                return Err("an attention window must be at least 1".into());
            }
        }
        if !matches!(
            self.placement,
            Placement::Pre | Placement::Sandwich | Placement::Olmo2
        ) {
            return Err(format!(
                "the decoder supports pre, sandwich and olmo2 placements, not {}",
                self.placement
            )
            .into());
        }
        let rot = self.rotary_dims();
        if rot > self.head_dim || !rot.is_multiple_of(2) {
            return Err(format!(
                "RoPE on {rot} dimensions of a {}-dimension head: it must be an even number at most head_dim",
                self.head_dim
            )
            .into());
        }
        if self.gpt.qkv == QkvStore::PerHead && self.kv_heads != self.heads {
            return Err(
                "q/k/v stored head by head need as many key/value heads as query heads".into(),
            );
        }
        if !(self.emb_scale.is_finite() && self.attn_scale.is_finite() && self.attn_scale > 0.0) {
            return Err("the embedding and attention scales must be finite".into());
        }
        Ok(())
    }
}
