//! The family registry: every pretrained decoder family normlab reads, one
//! row each: its normlab name and title, the `model_type`s of its Hugging
//! Face `config.json`, its GGUF architecture, the reader that turns a
//! `config.json` into a [`DecoderConfig`], its weight-name map, whether its
//! head is tied by default, where its norms sit in the lesson's terms,
//! what is refused, and what checks it. Loading (`hf.rs`, `gguf.rs`), the
//! one-line description, error messages, `--help` and the families table
//! of docs/own-model.md come from here (a test keeps the table equal).
//!
//! Adding a family is a row here and a file of its own (its configuration
//! reader and name map, as `phi3.rs`) plus its fixture.

use super::hf::{gemma_config, llama_config};
use super::hf_gpt::{gpt2_config, neox_config};
use super::names::{self, TensorNames};
use super::phi3::{phi3_config, HF_PHI3};
use super::{DecoderConfig, GatedAct, LayerAttention, RopeScaling};
use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::nn::Placement;
use serde_json::Value;

/// One family.
pub struct Family {
    /// normlab's name ([`DecoderConfig::family`]).
    pub name: &'static str,
    /// As people write it.
    pub title: &'static str,
    /// The `model_type`s of its `config.json` (empty: no folder reader).
    pub model_types: &'static [&'static str],
    /// Its GGUF `general.architecture` (None: not read from GGUF).
    pub gguf: Option<&'static str>,
    /// Its `config.json` reader (given the model_type read).
    pub read: fn(&Value, &str) -> Result<DecoderConfig>,
    /// Its folders' tensor names.
    pub names: &'static TensorNames,
    /// Whether the head is tied to the embeddings unless `config.json`
    /// says otherwise.
    pub tied: bool,
    /// Where its norms sit, in the lesson's terms.
    pub placement: &'static str,
    /// What its reader refuses by name (besides what every family refuses).
    pub refused: &'static str,
    /// The fixtures that check it against transformers.
    pub checked_by: &'static str,
}

/// Every family, in the order the docs list them.
pub static FAMILIES: &[Family] = &[
    Family {
        name: "llama",
        title: "Llama",
        model_types: &["llama"],
        gguf: Some("llama"),
        read: llama_config,
        names: &names::HF_LLAMA,
        tied: false,
        placement: "Pre-RMSNorm",
        refused: "RoPE scaling other than linear and llama3; attention or MLP biases",
        checked_by: "hf_tiny/llama (+ rope-linear, rope-llama3), gguf_tiny/llama.gguf, SmolLM2",
    },
    Family {
        name: "mistral",
        title: "Mistral",
        model_types: &["mistral"],
        gguf: None,
        read: llama_config,
        names: &names::HF_LLAMA,
        tied: false,
        placement: "Pre-RMSNorm, sliding window on every layer",
        refused: "as Llama",
        checked_by: "hf_tiny/mistral",
    },
    Family {
        name: "qwen2",
        title: "Qwen2",
        model_types: &["qwen2"],
        gguf: Some("qwen2"),
        read: llama_config,
        names: &names::HF_LLAMA,
        tied: false,
        placement: "Pre-RMSNorm, q/k/v biases",
        refused: "as Llama",
        checked_by: "hf_tiny/qwen2, gguf_tiny/qwen2.gguf",
    },
    Family {
        name: "qwen3",
        title: "Qwen3",
        model_types: &["qwen3"],
        gguf: Some("qwen3"),
        read: llama_config,
        names: &names::HF_LLAMA,
        tied: false,
        placement: "Pre-RMSNorm, QK-Norm per head",
        refused: "as Llama",
        checked_by: "hf_tiny/qwen3, gguf_tiny/qwen3.gguf",
    },
    Family {
        name: "phi3",
        title: "Phi-3",
        model_types: &["phi3"],
        gguf: None,
        read: phi3_config,
        names: &HF_PHI3,
        tied: false,
        placement: "Pre-RMSNorm, fused q/k/v and gate/up",
        refused: "longrope and every RoPE scaling but linear and llama3 (Phi-3 128k, Phi-3.5, Phi-4-mini)",
        checked_by: "hf_tiny/phi3",
    },
    Family {
        name: "olmo2",
        title: "OLMo 2",
        model_types: &["olmo2"],
        gguf: Some("olmo2"),
        read: llama_config,
        names: &names::HF_OLMO2,
        tied: false,
        placement: "Output-RMSNorm (after each sublayer), QK-Norm over whole q/k",
        refused: "as Llama",
        checked_by: "hf_tiny/olmo2, gguf_tiny/olmo2.gguf",
    },
    Family {
        name: "gemma2",
        title: "Gemma 2",
        model_types: &["gemma2"],
        gguf: Some("gemma2"),
        read: |c, _| gemma_config(c, "gemma2"),
        names: &names::HF,
        tied: true,
        placement: "Sandwich-RMSNorm (gains 1 + w), soft-capped logits",
        refused: "RoPE scaling",
        checked_by: "hf_tiny/gemma2, gguf_tiny/gemma2.gguf",
    },
    Family {
        name: "gemma3",
        title: "Gemma 3",
        model_types: &["gemma3_text"],
        gguf: Some("gemma3"),
        read: |c, _| gemma_config(c, "gemma3"),
        names: &names::HF,
        tied: true,
        placement: "Sandwich-RMSNorm (gains 1 + w), QK-Norm per head",
        refused: "RoPE scaling (Gemma 3 4B and larger scale their global layers'); attention soft-caps",
        checked_by: "gemma3_tiny, Gemma 3 270M",
    },
    Family {
        name: "gpt2",
        title: "GPT-2",
        model_types: &["gpt2"],
        gguf: Some("gpt2"),
        read: |c, _| gpt2_config(c),
        names: &names::HF_GPT2,
        tied: true,
        placement: "Pre-LayerNorm with bias, learned positions",
        refused: "scale_attn_by_inverse_layer_idx, cross-attention",
        checked_by: "hf_tiny/gpt2 (+ bare), gguf_tiny/gpt2.gguf",
    },
    Family {
        name: "gpt_neox",
        title: "GPT-NeoX",
        model_types: &["gpt_neox"],
        gguf: None,
        read: |c, _| neox_config(c),
        names: &names::HF_NEOX,
        tied: false,
        placement: "Pre-LayerNorm with bias, attention and MLP in parallel",
        refused: "attention without biases; a rotary share outside (0, 1]",
        checked_by: "hf_tiny/gpt_neox (+ sequential)",
    },
];

/// `model_type`s people meet that normlab's decoder does not read, with
/// what they are and where to go instead.
pub static NOT_READ: &[(&str, &str)] = &[
    (
        "gemma3",
        "the multimodal wrapper of gemma3_text (Gemma 3 4B and larger): its language model's weights sit under language_model.* beside a vision tower",
    ),
    ("mixtral", "a mixture of experts"),
    ("qwen3_moe", "a mixture of experts"),
    ("gpt_oss", "a mixture of experts with learned attention sinks"),
    ("phi", "Phi-1/2: a parallel block with partial RoPE and biases"),
    ("bert", "an encoder: `normlab inspect` reads it through the BERT encoder"),
];

/// The family of a `config.json` model_type.
pub fn by_model_type(ty: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.model_types.contains(&ty))
}

/// The family of normlab's name.
pub fn by_name(name: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.name == name)
}

/// The model_types the folder reader takes, comma-separated.
pub fn model_types() -> String {
    FAMILIES
        .iter()
        .flat_map(|f| f.model_types.iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The GGUF architectures read, comma-separated.
pub fn gguf_archs() -> String {
    FAMILIES
        .iter()
        .filter_map(|f| f.gguf)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The families' titles, comma-separated (`--help`).
pub fn titles() -> String {
    FAMILIES
        .iter()
        .map(|f| f.title)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The titles of the families read from GGUF files, comma-separated.
pub fn gguf_titles() -> String {
    FAMILIES
        .iter()
        .filter(|f| f.gguf.is_some())
        .map(|f| f.title)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The message for a model_type the decoder does not read.
pub fn refusal(ty: &str) -> String {
    let what = NOT_READ
        .iter()
        .find(|(t, _)| *t == ty)
        .map_or(String::new(), |(_, w)| format!(": {w}"));
    format!(
        "model_type '{ty}' is not read by normlab's decoder{what} (it reads {}); `normlab.diagnose` (Python) takes any transformers model",
        model_types()
    )
}

/// The families table of docs/own-model.md.
pub fn markdown_table() -> String {
    let mut s = String::from(
        "| family | `model_type` | GGUF | where the norms sit | refused by name | checked by |\n|---|---|---|---|---|---|\n",
    );
    for f in FAMILIES {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            f.title,
            f.model_types
                .iter()
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
                .join(", "),
            f.gguf.map_or("-".to_string(), |a| format!("`{a}`")),
            f.placement,
            f.refused,
            f.checked_by
        );
    }
    s
}

impl DecoderConfig {
    /// One line in normlab's vocabulary: the family, sizes, where the norms
    /// sit and how their gains are stored, QK-Norm, the MLP, the attention
    /// windows and RoPE bases.
    pub fn describe(&self) -> String {
        let family = by_name(&self.family).map_or(self.family.as_str(), |f| f.title);
        let mut s = format!(
            "{family}, {} layers, d {}, {} heads ({} key/value",
            self.layers, self.d, self.heads, self.kv_heads
        );
        if self.head_dim * self.heads != self.d {
            s += &format!(", head_dim {}", self.head_dim);
        }
        let norm = match self.norm {
            NormKind::RmsNorm => "RMSNorm",
            NormKind::LayerNorm => "LayerNorm",
            other => other.name(),
        };
        let placement = match self.placement {
            Placement::Pre => "Pre",
            Placement::Sandwich => "Sandwich",
            Placement::Olmo2 => "Output",
            _ => self.placement.name(),
        };
        s += &format!("), {placement}-{norm} (");
        if self.gain.zero_centred() {
            s += "zero-centred gains 1 + w; ";
        }
        if self.gpt.norm_bias {
            s += "with bias; ";
        }
        s += &format!("eps {:e})", self.eps);
        if self.gpt.parallel {
            s += ", attention and MLP in parallel";
        }
        if self.qk_norm {
            s += if self.qk_norm_whole {
                ", QK-Norm over whole q and k"
            } else {
                ", QK-Norm"
            };
        }
        if self.qkv_bias && !self.gpt.linear_bias {
            s += ", q/k/v biases";
        }
        match self.rope_scaling {
            Some(RopeScaling::Linear { factor }) => {
                s += &format!(", RoPE scaled linearly by {factor}")
            }
            Some(RopeScaling::Llama3 { factor, .. }) => {
                s += &format!(", RoPE with Llama 3 scaling (factor {factor})")
            }
            None => {}
        }
        if let Some(cap) = self.attn_softcap {
            s += &format!(", attention logits capped at {cap}");
        }
        s += match (self.gpt.plain_mlp, self.act) {
            (false, GatedAct::Silu) => "",
            (false, _) => ", GeGLU",
            (true, GatedAct::Gelu) => ", GELU MLP",
            (true, GatedAct::GeluTanh) => ", GELU (tanh) MLP",
            (true, GatedAct::Silu) => ", SiLU MLP",
        };
        if self.gpt.linear_bias {
            s += ", biases on every projection";
        }
        if self.gpt.learned_positions {
            s += ", learned positions";
            return s;
        }
        if let Some(r) = self.gpt.rotary_dims.filter(|&r| r < self.head_dim) {
            s += &format!(", RoPE on {r} of {} dims per head", self.head_dim);
        }
        let windowed: Vec<&LayerAttention> =
            self.attn.iter().filter(|a| a.window.is_some()).collect();
        match windowed.first() {
            None => s += &format!(", RoPE base {}", self.rope_base()),
            Some(w) => {
                s += &format!(
                    ", {} layers with a {}-token window (RoPE base {}), {} global (RoPE base {})",
                    windowed.len(),
                    w.window.unwrap_or(0),
                    w.rope_base,
                    self.layers - windowed.len(),
                    self.rope_base()
                )
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_types_and_archs_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for f in FAMILIES {
            assert!(seen.insert(f.name), "{}", f.name);
            for t in f.model_types {
                assert!(by_model_type(t).is_some_and(|g| g.name == f.name), "{t}");
                assert!(!NOT_READ.iter().any(|(n, _)| n == t), "{t}");
            }
        }
        assert!(refusal("gemma3").contains("multimodal wrapper of gemma3_text"));
        assert!(refusal("xyz").contains("normlab.diagnose"));
        assert_eq!(by_name("phi3").unwrap().title, "Phi-3");
    }

    /// docs/own-model.md shows the registry's table between its markers.
    #[test]
    fn docs_show_the_registry() {
        let docs = include_str!("../../../../../docs/own-model.md");
        let t = markdown_table();
        let want = format!("<!-- families:start -->\n{t}<!-- families:end -->");
        assert!(
            docs.contains(&want),
            "docs/own-model.md lacks the registry's table:\n{want}"
        );
    }
}
