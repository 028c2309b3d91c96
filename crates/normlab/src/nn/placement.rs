//! Where the norms sit in a block: the placement presets (none, post, pre,
//! sandwich, peri, olmo2, deepnorm, mixln), their names, and which norms
//! each one has (see [`Sublayer`](super::Sublayer) for the equation).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Where the norms sit in a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// x = x + S(x): no norm.
    None,
    /// x = Norm(x + S(x)) (2017 original).
    Post,
    /// x = x + S(Norm(x)) (GPT-2 onwards).
    Pre,
    /// x = x + Norm_out(S(Norm_in(x))) (x-transformers' sandwich norm).
    Sandwich,
    /// Peri-LN (2025): the same structure as sandwich.
    Peri,
    /// x = x + Norm(S(x)) (OLMo 2: output norm only).
    Olmo2,
    /// x = LayerNorm(alpha x + S(x)) with beta-scaled init (Wang et al. 2022).
    DeepNorm,
    /// Mix-LN (Li et al. 2025): Post-LN in the first K blocks, Pre-LN in
    /// the rest (`ModelConfig::block_placement`).
    MixLn,
}

impl Placement {
    /// All presets.
    pub const ALL: [Placement; 8] = [
        Placement::None,
        Placement::Post,
        Placement::Pre,
        Placement::Sandwich,
        Placement::Peri,
        Placement::Olmo2,
        Placement::DeepNorm,
        Placement::MixLn,
    ];

    /// Command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Placement::None => "none",
            Placement::Post => "post",
            Placement::Pre => "pre",
            Placement::Sandwich => "sandwich",
            Placement::Peri => "peri",
            Placement::Olmo2 => "olmo2",
            Placement::DeepNorm => "deepnorm",
            Placement::MixLn => "mixln",
        }
    }

    /// Norm before the sublayer (in some block, for Mix-LN).
    pub fn has_in_norm(self) -> bool {
        matches!(
            self,
            Placement::Pre | Placement::Sandwich | Placement::Peri | Placement::MixLn
        )
    }

    /// Norm on the sublayer's output, before the residual add.
    pub fn has_out_norm(self) -> bool {
        matches!(
            self,
            Placement::Sandwich | Placement::Peri | Placement::Olmo2
        )
    }

    /// Norm on the residual stream after the add (in some block, for Mix-LN).
    pub fn has_post_norm(self) -> bool {
        matches!(
            self,
            Placement::Post | Placement::DeepNorm | Placement::MixLn
        )
    }

    /// Whether a final norm before the head is on by default.
    pub fn default_final_norm(self) -> bool {
        matches!(
            self,
            Placement::Pre
                | Placement::Sandwich
                | Placement::Peri
                | Placement::Olmo2
                | Placement::MixLn
        )
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let l = s.trim().to_ascii_lowercase();
        Placement::ALL
            .into_iter()
            .find(|p| {
                p.name() == l
                    || (l == "peri-ln" && *p == Placement::Peri)
                    || (l == "mix-ln" && *p == Placement::MixLn)
            })
            .ok_or_else(|| {
                let names: Vec<&str> = Placement::ALL.iter().map(|p| p.name()).collect();
                format!(
                    "unknown placement '{s}' (expected one of: {})",
                    names.join(", ")
                )
            })
    }
}

/// Where a norm sits (see [`Block::norms`](super::Block::norms) and `Model::norms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormRole {
    /// Before a sublayer: reads the residual stream (pre-norm).
    In,
    /// On a sublayer's output, before the residual add (sandwich, OLMo 2).
    Out,
    /// On the stream after the residual add (post-norm, DeepNorm).
    Post,
    /// The final norm before the head: reads the stream.
    Final,
    /// QK-Norm on attention queries or keys (inside a sublayer).
    QkNorm,
    /// On each of n residual streams, for the read/write weights they
    /// set (dynamic hyper-connections).
    Stream,
    /// On the summed token, position and type embeddings, before the first
    /// block (BERT's embedding LayerNorm).
    Embedding,
}
