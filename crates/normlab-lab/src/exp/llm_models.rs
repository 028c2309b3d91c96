//! The real models the llm chapter reads, and how each claim's measures on
//! one model become a verdict: SmolLM2-135M-Instruct (Llama: Pre-RMSNorm,
//! plain gains, no QK-Norm; `scripts/fetch_smollm2.sh`) and Gemma 3 270M
//! (sandwich RMSNorm with zero-centred gains and QK-Norm;
//! `scripts/fetch_gemma3.sh`), both GGUF files under `models/`.

use super::claims::Verdict;
use normlab::model::decoder::{DecoderConfig, Inspection};
use std::path::PathBuf;

/// A model the chapter reads.
pub(super) struct RealModel {
    /// Its name in tables.
    pub name: &'static str,
    /// Where it is, relative to a checkout.
    pub file: &'static str,
    /// The script that fetches it.
    pub fetch: &'static str,
}

/// SmolLM2 first (the cross-check chapter compares it with transformers),
/// then Gemma 3.
pub(super) const MODELS: [RealModel; 2] = [
    RealModel {
        name: "SmolLM2-135M",
        file: "models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf",
        fetch: "scripts/fetch_smollm2.sh",
    },
    RealModel {
        name: "Gemma 3 270M",
        file: "models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf",
        fetch: "scripts/fetch_gemma3.sh",
    },
];

/// `file` in the current folder or any folder above it (a checkout's
/// models/ from inside the checkout).
pub(super) fn find(file: &str) -> Option<PathBuf> {
    let mut dir = std::env::current_dir().ok()?;
    loop {
        let p = dir.join(file);
        if p.exists() {
            return Some(p);
        }
        if !dir.pop() {
            return None;
        }
    }
}

/// One model measured.
pub(super) struct Measured {
    /// Its name.
    pub name: &'static str,
    /// Its configuration.
    pub cfg: DecoderConfig,
    /// What the inspector measured.
    pub insp: Inspection,
}

impl Measured {
    /// Blocks from block 1 to the last (the span C3's growth is read over).
    pub fn span(&self) -> usize {
        self.cfg.layers - 1
    }

    /// C3 on the lesson's metric: the stream grows (x1.5 or more) and
    /// steadily (most blocks grow it, none doubles it).
    pub fn c3(&self) -> (Verdict, bool) {
        let cl = &self.insp.claims;
        let steady = 2 * cl.blocks_growing >= self.span() && cl.largest_jump.0 < 2.0;
        let v = match (cl.growth_total > 1.5, steady) {
            (true, true) => Verdict::Holds,
            (true, false) => Verdict::Partly,
            _ => Verdict::DoesNotHold,
        };
        (v, steady)
    }

    /// C6: RMSNorm's output is not zero-mean when its rows are not centred.
    /// Real rows nearly centred do not set up the claim's condition, so they
    /// can neither confirm nor refute it.
    pub fn c6(&self) -> Verdict {
        if self.insp.claims.xhat_mean_max_abs > 0.1 {
            Verdict::Holds
        } else {
            Verdict::Inconclusive
        }
    }

    /// The held-out loss change when eps is taken out of every norm.
    pub fn eps_effect(&self) -> f64 {
        self.insp.claims.loss_without_eps - self.insp.final_norm.loss_with
    }

    /// C8: eps matters only when a row's mean square comes near it. With
    /// every row far above eps (100x), taking eps out must leave the loss
    /// within 1e-3 nats; with a row near it, eps may matter.
    pub fn c8(&self) -> Verdict {
        let moved = self.eps_effect().abs() >= 1e-3;
        match (self.insp.claims.ms_min_over_eps > 100.0, moved) {
            (true, false) | (false, true) => Verdict::Holds,
            (true, true) => Verdict::DoesNotHold,
            (false, false) => Verdict::Partly,
        }
    }

    /// C18, on the same inputs: QK-Norm lowers the block's largest logit
    /// in at least two thirds of the blocks (None: the model has none).
    pub fn c18(&self) -> Option<(Verdict, usize)> {
        if !self.cfg.qk_norm {
            return None;
        }
        let (_, _, lower) = self.insp.qk_norm_effect();
        let v = if 3 * lower >= 2 * self.cfg.layers {
            Verdict::Holds
        } else if lower > 0 {
            Verdict::Partly
        } else {
            Verdict::DoesNotHold
        };
        Some((v, lower))
    }

    /// C20: leaving the final norm out costs more than 0.1 nats/token.
    pub fn c20(&self) -> Verdict {
        let f = &self.insp.final_norm;
        if f.loss_without > f.loss_with + 0.1 {
            Verdict::Holds
        } else {
            Verdict::DoesNotHold
        }
    }

    /// C21 reversed: LayerNorm in place of every RMSNorm changes the loss.
    pub fn c21(&self) -> Verdict {
        if (self.insp.claims.loss_layernorm - self.insp.final_norm.loss_with).abs() > 1e-3 {
            Verdict::Holds
        } else {
            Verdict::DoesNotHold
        }
    }

    /// The median over blocks of each sublayer's write over the stream it
    /// read (attention, MLP).
    pub fn median_writes(&self) -> (f64, f64) {
        let med = |f: &dyn Fn(&normlab::model::decoder::DecoderLayerRow) -> f64| {
            let mut v: Vec<f64> = self.insp.blocks.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        (med(&|r| r.attn_write), med(&|r| r.mlp_write))
    }
}

/// One verdict from the models' verdicts: holds (or does not) when every
/// model agrees, partly otherwise.
pub(super) fn combine(vs: &[Verdict]) -> Verdict {
    match vs {
        [] => Verdict::Inconclusive,
        [first, rest @ ..] if rest.iter().all(|v| v == first) => *first,
        _ => Verdict::Partly,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_agreeing_keep_their_verdict_and_disagreeing_ones_give_partly() {
        assert_eq!(combine(&[Verdict::Holds, Verdict::Holds]), Verdict::Holds);
        assert_eq!(
            combine(&[Verdict::DoesNotHold, Verdict::DoesNotHold]),
            Verdict::DoesNotHold
        );
        assert_eq!(
            combine(&[Verdict::Holds, Verdict::DoesNotHold]),
            Verdict::Partly
        );
        assert_eq!(combine(&[]), Verdict::Inconclusive);
    }
}
