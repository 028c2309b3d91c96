//! The one config struct that describes a model: architecture, norm kind,
//! placement and residual options. Validated before anything is built.

use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::nn::{Activation, AttnKind, OutputGate, Placement};
use crate::settings::Flag;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Which model family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// The toy deep net: causal-mean mixer, synthetic task.
    Toy,
    /// Causal decoder with attention, byte-level text.
    Gpt,
}

impl std::str::FromStr for ModelKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "toy" => Ok(ModelKind::Toy),
            "gpt" => Ok(ModelKind::Gpt),
            _ => Err(format!("unknown model '{s}' (expected toy or gpt)")),
        }
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ModelKind::Toy => "toy",
            ModelKind::Gpt => "gpt",
        })
    }
}

/// How the weights are initialised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InitScheme {
    /// GPT-2: weights and embeddings N(0, init_std^2), output projections
    /// N(0, out_proj_std^2), biases 0.
    #[default]
    Gpt2,
    /// PyTorch's defaults, as a plain `nn.Linear` / `nn.Embedding` model
    /// gets them: every Linear's weight and bias U(+-1/sqrt(fan_in)),
    /// embeddings N(0, 1). (The lesson's toy models use these.)
    Torch,
}

impl std::str::FromStr for InitScheme {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "gpt2" => Ok(InitScheme::Gpt2),
            "torch" => Ok(InitScheme::Torch),
            _ => Err(format!("unknown init '{s}' (expected gpt2 or torch)")),
        }
    }
}

impl InitScheme {
    /// The name in files and flags.
    pub fn name(self) -> &'static str {
        match self {
            InitScheme::Gpt2 => "gpt2",
            InitScheme::Torch => "torch",
        }
    }

    /// Every scheme's name.
    pub fn names() -> Vec<&'static str> {
        vec!["gpt2", "torch"]
    }

    fn is_default(&self) -> bool {
        *self == InitScheme::Gpt2
    }
}

/// Serde helpers for NormKind as its name.
pub mod norm_kind_serde {
    use crate::kernels::norm::NormKind;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Serialize as the kind's name.
    pub fn serialize<S: Serializer>(k: &NormKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(k.name())
    }

    /// Parse a kind's name.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<NormKind, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

crate::settings! {
    /// Everything that defines a model's shape and initialisation. Declared
    /// once: `normlab train`'s flags, TOML keys and sweep-grid keys are these
    /// fields (and the training ones of `TrainConfig`); the defaults of each
    /// model family are in [`ModelConfig::defaults`]. The field order is the
    /// order of `config.json` and of checkpoint metadata: append new fields
    /// at the end, with `#[serde(default)]`, so older run folders still read.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    pub struct ModelConfig {
        /// toy (synthetic task, causal-mean mixer) or gpt (attention, byte-level text).
        #[serde(rename = "model")]
        pub kind: ModelKind as "model" => Flag::Text,
        /// Blocks L (each: mixer/attention sublayer + MLP sublayer).
        pub layers: usize => Flag::Num,
        /// Width d.
        pub d_model: usize => Flag::Num,
        /// Attention heads (gpt).
        pub heads: usize => Flag::Num,
        /// Sequence length (context).
        pub seq: usize => Flag::Num,
        /// MLP hidden width.
        pub hidden: usize => Flag::Num,
        /// Vocabulary (toy 64; gpt 256 bytes).
        pub vocab: usize => Flag::Num,
        /// MLP nonlinearity: gelu (tanh form), gelu-erf (exact), swiglu or geglu (gated).
        pub act: Activation => Flag::Choice(|| Activation::ALL.iter().map(|a| a.name()).collect()),
        /// SwiGLU's clamp (DeepSeek V4's form, transformers'
        /// `DeepseekV4MLP`): the gate projection's output (SiLU's argument)
        /// clamped to at most LIMIT and the up projection's to [-LIMIT,
        /// LIMIT], with zero gradient where a value was clamped (e.g. 10;
        /// gpt-oss's variant with sigmoid(1.702 g) and up + 1 is not
        /// adopted). Needs --act swiglu.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub swiglu_clamp: Option<f32> => Flag::Num,
        /// Norm kind of every norm in the blocks and of the final norm.
        #[serde(with = "norm_kind_serde")]
        pub norm: NormKind => Flag::Choice(|| NormKind::row_wise().map(NormKind::name).collect()),
        /// Norm eps (default: the kind's).
        pub eps: Option<f32> => Flag::Num,
        /// Where the norms sit.
        pub placement: Placement => Flag::Choice(|| Placement::ALL.iter().map(|p| p.name()).collect()),
        /// Residual connections (without them x = S(...) replaces x).
        pub residual: bool => Flag::Off,
        /// Multiplier on each sublayer's output before the add: a number, or
        /// invsqrt for 1/sqrt(2L).
        pub branch_scale: f32 => Flag::NumOr("invsqrt"),
        /// Init std of the output projections (default 0.02/sqrt(2L), GPT-2).
        pub out_proj_std: Option<f32> => Flag::Num,
        /// Init std of the other weights and the embeddings.
        pub init_std: f32 => Flag::Num,
        /// QK-Norm in attention (gpt): an RMSNorm over head_dim on q and k.
        pub qk_norm: bool => Flag::On,
        /// Attention output gate (gpt; Qiu et al. 2025's G1, as Qwen3-Next):
        /// the merged heads times sigmoid(a W_g) before the output
        /// projection, a the attention's normalised input; elementwise (one
        /// gate per head dimension, W_g d x d) or headwise (one per head).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub attn_gate: Option<OutputGate> => Flag::Choice(|| OutputGate::ALL.iter().map(|g| g.name()).collect()),
        /// Final norm before the head (default: on for pre, sandwich, peri, olmo2).
        pub final_norm: Option<bool> => Flag::OnOff,
        /// Tie the head to the token embedding (gpt).
        pub tie_head: bool => Flag::On,
        /// A bias on the head (set by checkpoint conversion to fold the final
        /// norm's beta; off for trained models).
        #[serde(default)]
        pub head_bias: bool => Flag::Hidden,
        /// A bias added after each output norm (set by conversion: an exactly
        /// converted LayerNorm on a branch output keeps its beta here).
        #[serde(default)]
        pub out_norm_bias: bool => Flag::Hidden,
        /// Weight initialisation: gpt2 (N(0, init_std^2), scaled output
        /// projections, zero biases) or torch (PyTorch's defaults:
        /// U(+-1/sqrt(fan_in)) weights and biases, N(0,1) embeddings).
        #[serde(default, skip_serializing_if = "InitScheme::is_default")]
        pub init: InitScheme => Flag::Choice(InitScheme::names),
        /// Initial alpha of the point-wise norms (dyt: gamma * tanh(alpha x) + beta;
        /// derf), one learnable scalar per norm (default 0.5, the DyT paper's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub dyt_alpha: Option<f32> => Flag::Num,
        /// ReZero (Bachlechner et al. 2020): each sublayer's branch is
        /// multiplied by one learnable scalar, initialised to 0, so every
        /// block starts as the identity (usually with --placement none).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub rezero: bool => Flag::On,
        /// LayerScale (Touvron et al. 2021, CaiT): each sublayer's branch is
        /// multiplied channel-wise by a learnable vector initialised to this
        /// value (e.g. 1e-4).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub layerscale: Option<f32> => Flag::Num,
        /// LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in LLMs"):
        /// the output of each pre-norm of block l (l = 1..L) is multiplied by
        /// 1/sqrt(l), so deep blocks' branches stop growing with depth.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub lns: bool => Flag::On,
        /// Mix-LN (Li et al. 2025): with --placement mixln, the number K of
        /// first blocks that are Post-LN; the rest are Pre-LN (default: a
        /// quarter of the blocks, rounded down).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mixln_post_layers: Option<usize> => Flag::Num,
        /// Multiply the embeddings by one learnable scalar initialised to
        /// sqrt(d_model) (the DyT paper's LLaMA recipe: without a norm,
        /// nothing else lifts small-init embeddings to unit scale).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub emb_scale: bool => Flag::On,
        /// Initial alpha of the point-wise norms of the attention (mixing)
        /// sublayers, which the DyT paper's LLaMA recipe sets higher than
        /// the others (default: --dyt-alpha).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub dyt_alpha_attn: Option<f32> => Flag::Num,
        /// Every norm's beta (LayerNorm's, DyT's and Derf's bias) fixed at 0
        /// and not trained (the DyT paper's LLaMA recipe drops it; nanoGPT's
        /// bias=False).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub no_beta: bool => Flag::On,
        /// Hyper-connections (Zhu et al. 2024): the residual stream widened
        /// to this many parallel streams (e.g. 4; the embedding copied into
        /// each, their sum read by the final norm); each sublayer reads a
        /// learned mix of them, writes its output to each with a learned
        /// weight and mixes them by a learned n x n matrix (static: learned
        /// constants, starting as a plain residual).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub hc: Option<usize> => Flag::Num,
        /// With --hc: the dynamic form, whose read, write and mixing weights
        /// gain input-dependent terms, s tanh(norm(stream) W), W at 0 and s
        /// at 0.01 (the paper's).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub hc_dynamic: bool => Flag::On,
        /// mHC (DeepSeek 2025, transformers' DeepSeek V4 form): this many
        /// parallel streams whose read, write and mixing weights are
        /// computed per token from the streams (an RMS-normalised linear
        /// map), the mixing projected towards a doubly stochastic matrix by
        /// Sinkhorn iterations; a learned head collapses the streams.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mhc: Option<usize> => Flag::Num,
        /// With --mhc: the Sinkhorn iterations (default 20).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mhc_sinkhorn: Option<usize> => Flag::Num,
        /// Attention Residuals (Kimi team 2026): each sublayer reads a
        /// softmax mix over depth of the embedding and the sums of earlier
        /// blocks' outputs (its own block's partial sum included), with a
        /// learned pseudo-query starting at 0 (the plain average); this is
        /// the block size in sublayers (1: full AttnRes, every sublayer's
        /// output a source; the paper's runs use about 8 blocks).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub attnres: Option<usize> => Flag::Num,
        /// How attention turns scores into weights (gpt): softmax;
        /// sink-logit (the softmax with one learned logit per head in its
        /// denominator, gpt-oss's sinks, starting at 0: "softmax off by
        /// one"); sigmoid (elementwise, unnormalised; Gu et al. 2024); relu
        /// (ReLU of the scores over the number of keys, unnormalised; Guo
        /// et al. 2024). The last three are the attention sink's removers.
        #[serde(default, skip_serializing_if = "AttnKind::is_softmax")]
        pub attn_kind: AttnKind => Flag::Choice(AttnKind::names),
        /// No bias on any Linear layer (attention's q/k/v and output
        /// projections, the MLP's, the toy mixer's): nanoGPT's
        /// bias=False, as a model written with `nn.Linear(..., bias=False)`
        /// has them (norms keep their beta: see --no-beta).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub no_bias: bool => Flag::On,
        /// Grouped-query attention (gpt): this many key/value heads, each
        /// shared by heads / kv_heads query heads (default: one per head).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub kv_heads: Option<usize> => Flag::Num,
        /// Each attention head's width (gpt; default d_model / heads; the
        /// queries are then heads x head_dim wide, as Gemma's 256).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub head_dim: Option<usize> => Flag::Num,
        /// A bias on the q/k/v projection even with --no-bias (Qwen2).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub qkv_bias: bool => Flag::On,
        /// With --qk-norm: one RMSNorm over the whole q and k (OLMo 2)
        /// instead of one per head.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub qk_norm_whole: bool => Flag::On,
        /// RoPE on q and k with this base (gpt; e.g. 10000) instead of
        /// learned position embeddings.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub rope: Option<f64> => Flag::Num,
        /// With --rope: rotate only the first this many dimensions of each
        /// head (GPT-NeoX's and Phi-4-mini's partial rotary; even).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub rope_dims: Option<usize> => Flag::Num,
        /// The attention scores' scale (default 1 / sqrt(head_dim); Gemma:
        /// query_pre_attn_scalar^-1/2).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub attn_scale: Option<f32> => Flag::Num,
        /// Attention scores tanh-capped at this value (Gemma 2's 50).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub attn_softcap: Option<f32> => Flag::Num,
        /// Logits tanh-capped at this value (Gemma 2's 30).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub final_softcap: Option<f32> => Flag::Num,
        /// A sliding window: a query sees at most this many positions,
        /// itself included, in every block (softmax attention).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub window: Option<usize> => Flag::Num,
        /// Attention and MLP read the block's input and add to it together,
        /// x + attn(n1(x)) + mlp(n2(x)) (GPT-NeoX's parallel block; pre
        /// placement).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub parallel: bool => Flag::On,
        /// The embeddings multiplied by this constant (Gemma's sqrt(d)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub emb_mult: Option<f32> => Flag::Num,
        /// Per block, what a pretrained model sets layer by layer: its
        /// window and RoPE base (Gemma's local and global layers).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub layer_attn: Option<Vec<LayerAttn>> => Flag::Hidden,
        /// RoPE's scaling for a longer context (a pretrained model's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub rope_scaling: Option<crate::nn::rope::RopeScaling> => Flag::Hidden,
        /// RoPE's pairing: adjacent for llama.cpp's permuted Llama weights
        /// (default: halves, as trained).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub rope_pairs: Option<crate::nn::rope::RopePairs> => Flag::Hidden,
        /// QK-Norm's eps (a pretrained model's; default RMSNorm's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub qk_eps: Option<f32> => Flag::Hidden,
    }
}

/// One block's attention, as a pretrained model sets it per layer.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerAttn {
    /// A query sees at most this many positions (None: every earlier one).
    pub window: Option<usize>,
    /// RoPE's base in this block.
    pub rope_base: f64,
}

impl ModelConfig {
    /// The defaults of a model family: the toy net of docs/toy-task.md (6
    /// blocks, d 64, pre-LN) or a small byte-level GPT (4 blocks, d 128, 4
    /// heads, seq 128, MLP 4d). Run ids hash the settings that differ from
    /// these, so changing a default changes ids.
    pub fn defaults(kind: ModelKind) -> ModelConfig {
        let toy = kind == ModelKind::Toy;
        ModelConfig {
            kind,
            layers: if toy { 6 } else { 4 },
            d_model: if toy { 64 } else { 128 },
            heads: if toy { 1 } else { 4 },
            seq: if toy { 16 } else { 128 },
            hidden: if toy { 128 } else { 512 },
            vocab: if toy { 64 } else { 256 },
            act: Activation::Gelu,
            swiglu_clamp: None,
            norm: NormKind::LayerNorm,
            eps: None,
            placement: Placement::Pre,
            residual: true,
            branch_scale: 1.0,
            out_proj_std: None,
            init_std: 0.02,
            qk_norm: false,
            attn_gate: None,
            final_norm: None,
            tie_head: false,
            head_bias: false,
            out_norm_bias: false,
            init: InitScheme::Gpt2,
            dyt_alpha: None,
            rezero: false,
            layerscale: None,
            lns: false,
            mixln_post_layers: None,
            emb_scale: false,
            dyt_alpha_attn: None,
            no_beta: false,
            hc: None,
            hc_dynamic: false,
            mhc: None,
            mhc_sinkhorn: None,
            attnres: None,
            attn_kind: AttnKind::Softmax,
            no_bias: false,
            kv_heads: None,
            head_dim: None,
            qkv_bias: false,
            qk_norm_whole: false,
            rope: None,
            rope_dims: None,
            attn_scale: None,
            attn_softcap: None,
            final_softcap: None,
            window: None,
            parallel: false,
            emb_mult: None,
            layer_attn: None,
            rope_scaling: None,
            rope_pairs: None,
            qk_eps: None,
        }
    }

    /// The toy net (docs/toy-task.md) with `layers` blocks, pre-LN.
    pub fn toy(layers: usize) -> ModelConfig {
        ModelConfig {
            layers,
            ..ModelConfig::defaults(ModelKind::Toy)
        }
    }

    /// The default GPT.
    pub fn gpt() -> ModelConfig {
        ModelConfig::defaults(ModelKind::Gpt)
    }

    /// eps actually used.
    pub fn eps(&self) -> f32 {
        self.eps.unwrap_or(self.norm.default_eps())
    }

    /// Whether the final norm is present.
    pub fn has_final_norm(&self) -> bool {
        self.final_norm
            .unwrap_or(self.placement.default_final_norm())
    }

    /// Mix-LN's K: the number of Post-LN blocks.
    pub fn mixln_k(&self) -> usize {
        self.mixln_post_layers.unwrap_or(self.layers / 4)
    }

    /// The attention's options (gpt) in block `l`.
    pub fn attn_options(&self, l: usize) -> crate::nn::AttnOptions {
        let layer = self.layer_attn.as_ref().and_then(|v| v.get(l));
        let base = layer.map(|a| a.rope_base).or(self.rope);
        crate::nn::AttnOptions {
            qk_norm: self.qk_norm,
            gate: self.attn_gate,
            kind: self.attn_kind,
            no_bias: self.no_bias,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            qkv_bias: self.qkv_bias,
            qk_norm_whole: self.qk_norm_whole,
            qk_eps: self.qk_eps,
            scale: self.attn_scale,
            softcap: self.attn_softcap,
            window: layer.map_or(self.window, |a| a.window),
            rope: base.map(|base| crate::nn::RopeSpec {
                base,
                scaling: self.rope_scaling,
                rot: self.rope_dims,
                pairs: self
                    .rope_pairs
                    .unwrap_or(crate::nn::rope::RopePairs::Halves),
            }),
        }
    }

    /// Whether the token embedding has learned positions beside it (not
    /// with RoPE).
    pub fn learned_positions(&self) -> bool {
        self.rope.is_none() && self.layer_attn.is_none()
    }

    /// Number of sublayers (2 per block).
    pub fn sublayers(&self) -> usize {
        2 * self.layers
    }

    /// DeepNorm's (alpha, beta) for a decoder-only stack of `layers` blocks:
    /// alpha = (2N)^(1/4), beta = (8N)^(-1/4).
    pub fn deepnorm_alpha_beta(&self) -> (f32, f32) {
        let n = self.layers as f32;
        ((2.0 * n).powf(0.25), (8.0 * n).powf(-0.25))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_messages() {
        let mut c = ModelConfig::gpt();
        assert!(c.validate().is_ok());
        c.heads = 3;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("must divide"));
        let mut c = ModelConfig::toy(4);
        c.norm = NormKind::BatchNorm;
        assert!(c.validate().unwrap_err().to_string().contains("batchnorm"));
        let (a, b) = ModelConfig::toy(6).deepnorm_alpha_beta();
        assert!((a - 12f32.powf(0.25)).abs() < 1e-6 && (b - 48f32.powf(-0.25)).abs() < 1e-6);
        let mut c = ModelConfig::toy(4);
        c.dyt_alpha = Some(0.3);
        assert!(c.validate().unwrap_err().to_string().contains("has none"));
        c.norm = NormKind::Dyt;
        assert!(c.validate().is_ok());
        c.dyt_alpha = Some(f32::NAN);
        assert!(c.validate().unwrap_err().to_string().contains("finite"));
    }

    #[test]
    fn dyt_alpha_sets_every_slope() {
        let mut c = ModelConfig::toy(3);
        c.norm = NormKind::Dyt;
        c.dyt_alpha = Some(0.25);
        let m = crate::model::Model::new(&c).unwrap();
        let w = m.init_params(0);
        let slopes: Vec<_> = m
            .norms()
            .filter_map(|s| s.norm.param(crate::kernels::norm::ParamRole::Slope))
            .collect();
        assert!(!slopes.is_empty());
        for r in &slopes {
            assert!(r.get(&w).iter().all(|&v| v == 0.25));
        }
        // The DyT LLaMA recipe: another alpha for the attention sublayers.
        let mut c = ModelConfig::gpt();
        c.norm = NormKind::Dyt;
        c.dyt_alpha = Some(0.2);
        c.dyt_alpha_attn = Some(0.8);
        let m = crate::model::Model::new(&c).unwrap();
        let w = m.init_params(0);
        let mut seen = (0, 0);
        for site in m.norms() {
            let a = site
                .norm
                .param(crate::kernels::norm::ParamRole::Slope)
                .unwrap()
                .get(&w)[0];
            if site.sub == Some(0) {
                assert_eq!(a, 0.8);
                seen.0 += 1;
            } else {
                assert_eq!(a, 0.2);
                seen.1 += 1;
            }
        }
        // Per block one attention pre-norm and one MLP pre-norm; the final norm.
        assert_eq!(seen, (c.layers, c.layers + 1));
    }

    #[test]
    fn toml_round_trip() {
        let c = ModelConfig::gpt();
        let text = serde_json::to_string(&c).unwrap();
        assert!(text.contains("\"norm\":\"layernorm\"") && text.contains("\"placement\":\"pre\""));
        let back: ModelConfig = serde_json::from_str(&text).unwrap();
        assert_eq!(back, c);
    }
}
