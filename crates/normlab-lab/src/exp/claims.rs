//! The lesson's checkable claims (C1-C27), restated in normlab's words with
//! the lesson's own numbers and settings, and the experiments that check
//! each. The IDs are stable: experiments, reports and `docs/findings.md`
//! cite them. An experiment reports a [`ClaimCheck`] per claim it speaks
//! to, with a verdict computed from what it measured.

use serde::Serialize;

/// What an experiment concluded about a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// The measurement agrees with the claim.
    #[serde(rename = "holds")]
    Holds,
    /// Part of the claim holds (the rest does not, or not on this setting).
    #[serde(rename = "holds partly")]
    Partly,
    /// The measurement contradicts the claim.
    #[serde(rename = "does not hold")]
    DoesNotHold,
    /// Too little signal to decide (too short, within noise).
    #[serde(rename = "inconclusive")]
    Inconclusive,
}

impl Verdict {
    /// The verdict a label names.
    pub fn from_label(s: &str) -> Option<Verdict> {
        [
            Verdict::Holds,
            Verdict::Partly,
            Verdict::DoesNotHold,
            Verdict::Inconclusive,
        ]
        .into_iter()
        .find(|v| v.label() == s)
    }

    /// The verdict of a claim checked in `of` cases that held in `held`:
    /// inconclusive without cases, holds in all, holds partly in some.
    pub fn of_count(held: usize, of: usize) -> Verdict {
        if of == 0 {
            Verdict::Inconclusive
        } else if held == of {
            Verdict::Holds
        } else if held > 0 {
            Verdict::Partly
        } else {
            Verdict::DoesNotHold
        }
    }

    /// As written in tables.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Partly => "holds partly",
            Verdict::DoesNotHold => "does not hold",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

/// An experiment's verdict on one claim, with the numbers behind it.
#[derive(Clone, Debug, Serialize)]
pub struct ClaimCheck {
    /// Claim id (`C1`).
    pub claim: &'static str,
    /// Verdict.
    pub verdict: Verdict,
    /// The measured numbers beside the lesson's, in one or two sentences.
    pub evidence: String,
    /// Decided by an exact count, not by training or timing: a `--quick`
    /// run decides it as the full one does.
    #[serde(skip)]
    pub exact: bool,
}

impl ClaimCheck {
    /// A check of `claim`.
    pub fn new(claim: &'static str, verdict: Verdict, evidence: impl Into<String>) -> ClaimCheck {
        ClaimCheck {
            claim,
            verdict,
            evidence: evidence.into(),
            exact: false,
        }
    }

    /// This check, decided by an exact count (a parameter count, say)
    /// that no longer run would change.
    pub fn exact(self) -> ClaimCheck {
        ClaimCheck {
            exact: true,
            ..self
        }
    }
}

/// How a claim is checked.
#[derive(Clone, Copy, Debug)]
pub enum Coverage {
    /// By these registered experiments.
    Experiments(&'static [&'static str]),
    /// By none: the reason.
    Uncheckable(&'static str),
}

/// One claim of the lesson.
#[derive(Clone, Copy, Debug)]
pub struct Claim {
    /// Stable id (`C1` .. `C27`).
    pub id: &'static str,
    /// Short name.
    pub title: &'static str,
    /// The claim in normlab's words, with the lesson's numbers and setting.
    pub statement: &'static str,
    /// What checks it.
    pub coverage: Coverage,
}

/// Every claim, in order.
pub static CLAIMS: &[Claim] = &[
    Claim {
        id: "C1",
        title: "signal drift through plain layers",
        statement: "Through 20 random linear layers (d 64, x of shape (4, 16, 64), no norm, no residual) the mean row norm starts at 8 and vanishes within a few layers (x0.3 per layer: 8.0, 2.45, 0.77, 0.25, ...); with weights '1.2x' it explodes to ~1e4 within 4 layers; a LayerNorm after every layer holds it at sqrt(d) = 8. The lesson's code (W = randn * 0.3) and its printed numbers (W ~ N(0, 0.3^2/d)) disagree; both readings are checked.",
        coverage: Coverage::Experiments(&["drift"]),
    },
    Claim {
        id: "C2",
        title: "the identity path carries the gradient",
        statement: "In one block y = F(x) + x (F = Linear(64,64)-GELU-Linear(64,64), PyTorch default init, x ~ N(0,1) of shape (1, 64), loss sum(y^2), seed 3) the input gradient is 13.79 with an identity term of 12.15 (ratio 0.881); without the residual it is 6.19. Without residuals the gradient shrinks exponentially with depth; with them the identity term keeps it.",
        coverage: Coverage::Experiments(&["identity-path"]),
    },
    Claim {
        id: "C3",
        title: "the Pre-LN residual stream grows",
        statement: "At initialisation 12 Pre-LN blocks of one sublayer and no attention (x + Linear(4d, d)(GELU(Linear(d, 4d)(LayerNorm(x)))), d 128, PyTorch default init, x ~ N(0,1) of shape (2, 16, 128), seed 11) grow the mean over tokens of each token's norm steadily from 11.25 to 13.66 (x1.21, 1.6% per layer); the final LayerNorm brings it back to sqrt(128) = 11.31. The growth amplifies during training; a Post-LN stream stays at sqrt(d).",
        coverage: Coverage::Experiments(&["residual-growth", "llm"]),
    },
    Claim {
        id: "C4",
        title: "depth simulator",
        statement: "With N = 32 sublayers and gain 1: residuals alone give a bottom/top gradient ratio of 20.4 and a final residual RMS of 6.3; adding pre-norm gives 3.5 and 4.3; adding 1/sqrt(N) write-back scaling gives 0.97 and 1.1. (The widget's sublayer model is not given: only the directions are comparable.)",
        coverage: Coverage::Experiments(&["depth-sim"]),
    },
    Claim {
        id: "C5",
        title: "invariances",
        statement: "LayerNorm's output is unchanged by x -> a x + c (a > 0); RMSNorm's by x -> a x but not by x -> x + c; an RMSNorm output with unit gain has L2 norm sqrt(d).",
        coverage: Coverage::Experiments(&["norm-stats"]),
    },
    Claim {
        id: "C6",
        title: "RMSNorm output statistics",
        statement: "On inputs ~ N(1.5, 3^2) RMSNorm's output rows have mean ~0.4475 and std ~0.8944 (not 0 and 1, as LayerNorm's): RMSNorm is not a drop-in replacement for LayerNorm.",
        coverage: Coverage::Experiments(&["norm-stats", "llm"]),
    },
    Claim {
        id: "C7",
        title: "BatchNorm fails in language models",
        statement: "BatchNorm fails three ways: a token's output depends on the other sequences of the batch and on padding; a batch of one generated token has no batch statistics; training and inference behave differently.",
        coverage: Coverage::Experiments(&["batch-dependence"]),
    },
    Claim {
        id: "C8",
        title: "eps and low precision",
        statement: "In fp16/bf16 a row's variance (mean square) can underflow, so eps must be chosen per precision (RMSNorm 1e-6, LayerNorm 1e-5 commonly); eps matters only when the mean square is comparable to it; in fp16 RMSNorm's output range is wider than LayerNorm's; SwiGLU's output is unbounded (SiLU(10) * 10 = 99.995) and overflows low precision.",
        coverage: Coverage::Experiments(&["precision", "llm"]),
    },
    Claim {
        id: "C9",
        title: "norm parameter counts",
        statement: "At d 4096 with 32 layers and 2 norms per layer (no final norm counted) LayerNorm holds 8192 * 2 * 32 = 524,288 parameters and RMSNorm half (262,144); the course's reference model holds 660,480 norm parameters = 0.0024% of all (which implies ~2.75e10 parameters: not the course's small GPT).",
        coverage: Coverage::Experiments(&["speed"]),
    },
    Claim {
        id: "C10",
        title: "RMSNorm is somewhat faster",
        statement: "RMSNorm's paper: equal quality, whole-model run time -7% to -64%, Transformers gaining least (7-9%: 248 -> ~230 s per 1000 steps). At operator level (CPU, 1 thread, median of 2000 calls) RMSNorm is ~14-15% faster than LayerNorm, steady across shapes; the model-level gain is the operator gain scaled by the norms' share of the step.",
        coverage: Coverage::Experiments(&["speed", "norm-kind"]),
    },
    Claim {
        id: "C11",
        title: "RMSNorm is not always faster",
        statement: "'RMSNorm is always faster' is false: on the course's Apple GPU (32x256x256, fwd+bwd, median of 200) PyTorch's fused LayerNorm took 0.667 ms against 0.792 ms (PyTorch RMSNorm) and 0.799 ms (hand-written): speed depends on whether a fused kernel exists.",
        coverage: Coverage::Experiments(&["speed"]),
    },
    Claim {
        id: "C12",
        title: "deep nets collapse without normalization",
        statement: "Toy net, 20 layers, Pre, Adam lr 1e-3, 3000 steps: without normalization the loss hits NaN around step 300 and never recovers (some layer's input norm jumps to ~1e3, GELU saturates, gradients amplify); lr 1e-4 only delays it (~step 900). At 6 layers no-norm converges but clearly worse (3.1 vs ~2.4 normalised); it degrades clearly at 12 layers and cannot train at 20; LayerNorm and RMSNorm end within 0.03 of each other; the normalised loss falls slightly with depth (2.28 at 20 layers).",
        coverage: Coverage::Experiments(&["collapse", "no-norm"]),
    },
    Claim {
        id: "C13",
        title: "Pre-LN tolerates larger learning rates than Post-LN",
        statement: "Toy net, 12 and 30 layers, lr 1e-4 .. 1e-2, 3000 steps: Post-LN at 12 layers diverges at lr >= 1e-3 (safe window 1e-4..3e-4); Pre-LN converges over the whole range, best near 3e-3, an order of magnitude above Post-LN's best; at 30 layers Post-LN already degrades at 3e-4 (3.87 vs 3.41 at 1e-4) while Pre-LN improves.",
        coverage: Coverage::Experiments(&["lr-sensitivity"]),
    },
    Claim {
        id: "C14",
        title: "warm-up rescues Post-LN",
        statement: "Post-LN without warm-up diverges to NaN (12 layers); with 1000 warm-up steps Post-LN at 12 layers and lr 1e-3 reaches 2.44, close to Pre-LN's 2.38: warm-up rescues Post-LN at the cost of one more sensitive hyper-parameter; Pre-LN descends smoothly from step 1.",
        coverage: Coverage::Experiments(&["lr-sensitivity", "warmup"]),
    },
    Claim {
        id: "C15",
        title: "the norm kind does not change quality",
        statement: "On the course's small GPT LayerNorm and RMSNorm end at 4.6266 vs 4.6263: no difference beyond noise.",
        coverage: Coverage::Experiments(&["norm-kind"]),
    },
    Claim {
        id: "C16",
        title: "Post-LN stalls at the unigram entropy",
        statement: "On the course's GPT at lr 3e-3 with warm-up, Post-LN reaches its best (6.612) at step 40 and stays at 6.627, the unigram entropy (it learns only token frequencies); at initialisation each Post-LN block's gradient is ~0.017, ~1% of Pre-LN's (~1.6); at the end the bottom block's gradient is 6e-9 of the top's. Without warm-up at lr 1e-2: Pre-LN 5.680, Post-LN 6.626 (stalled). At lr 1e-3 without warm-up Post-LN still sticks at 6.63; 100 warm-up steps take it to 4.87: the stall is the start at peak learning rate.",
        coverage: Coverage::Experiments(&["warmup"]),
    },
    Claim {
        id: "C17",
        title: "(1 + w) gains under weight decay",
        statement: "Weight decay pulls a plain gain toward 0 (shrinking the norm's output) but a zero-centred (1 + w) gain toward 1.",
        coverage: Coverage::Experiments(&["gain-decay", "llm"]),
    },
    Claim {
        id: "C18",
        title: "QK-Norm bounds attention logits",
        statement: "An RMSNorm on q and k per head (over d_k) bounds the attention logits, keeps attention entropy from collapsing and reduces late loss spikes in deep models, for ~2 d_k parameters per layer.",
        coverage: Coverage::Experiments(&["qk-norm", "llm"]),
    },
    Claim {
        id: "C19",
        title: "DeepNorm and Sandwich stabilise deep Post-LN",
        statement: "DeepNorm, x = LN(alpha x + G(x)) with alpha = (2N)^(1/4) and init scaled by beta = (8N)^(-1/4), makes deep Post-LN trainable (1000 layers); Sandwich normalises the branch output too.",
        coverage: Coverage::Experiments(&["placements", "llm"]),
    },
    Claim {
        id: "C20",
        title: "Pre-LN needs its final norm",
        statement: "A Pre-LN model needs a final norm before the head (GPT-2 ln_f, LLaMA norm); leaving it out is a common bug.",
        coverage: Coverage::Experiments(&["residual-growth", "llm"]),
    },
    Claim {
        id: "C21",
        title: "checkpoint conversion is approximate",
        statement: "LayerNorm weights cannot be loaded into an RMSNorm model as they are; the lesson treats conversion as approximate (drop beta, keep gamma, then fine-tune).",
        coverage: Coverage::Experiments(&["convert", "llm"]),
    },
    Claim {
        id: "C22",
        title: "stability vs quality",
        statement: "A well-tuned Post-LN can match (sometimes slightly beat) Pre-LN at the end; Pre-LN's growing stream makes later layers' relative contribution shrink; stability pays early in training, quality differences show late.",
        coverage: Coverage::Experiments(&["placements", "lr-sensitivity", "depth-use"]),
    },
    Claim {
        id: "C23",
        title: "normalization is not a cure-all",
        statement: "Noise, bad labels, a bad schedule or too little capacity are not fixed by a norm: diagnose first.",
        coverage: Coverage::Experiments(&["cure-all"]),
    },
    Claim {
        id: "C24",
        title: "unbounded SwiGLU and clamping",
        statement: "SwiGLU's output has no upper bound (SiLU(10) x 10 = 99.995) and can overflow in low precision; recent models clamp it (gpt-oss at 7, DeepSeek V4 at 10). How large do SwiGLU activations get in trained models, and what does clamping cost?",
        coverage: Coverage::Experiments(&["swiglu-clamp", "real-causes"]),
    },
    Claim {
        id: "C25",
        title: "one stream, many writes",
        statement: "The stream is the sum of all writes, x_L = x_0 + sum F_l: 128 writes of unit variance give std sqrt(129) = 11.36 if independent; one d-dimensional stream carrying every layer's reads and writes becomes a bottleneck as depth grows.",
        coverage: Coverage::Experiments(&["residual-routing"]),
    },
    Claim {
        id: "C26",
        title: "attention sinks and the output gate",
        statement: "Softmax must hand out all of a query's attention, so models park it on the first token (46.7% on average in Qwen's 15B MoE experiment); a sigmoid gate on the attention output drops that share to 4.8%.",
        coverage: Coverage::Experiments(&["attention-sink", "real-causes"]),
    },
    Claim {
        id: "C27",
        title: "wider or routed residual streams",
        statement: "Widening the residual to 4 streams with learned mixing (hyper-connections; mHC keeps the mixing doubly stochastic) or letting each layer attend over all earlier layers' outputs (AttnRes) are the current answers to C25's bottleneck: do they beat a plain Pre-Norm residual at equal parameters and compute, and do their deep layers stay in use?",
        coverage: Coverage::Experiments(&["residual-routing"]),
    },
];

/// Decision rules fixed before a chapter's runs (claim id, rule), so that
/// the setting and the threshold cannot be picked to suit the result; the
/// experiment implements its claim's rule and findings.md prints it.
pub static DECISION_RULES: &[(&str, &[&str])] = &[
    (
        "C24",
        &[
            "real-causes (fixed before its runs, 2026-12-06): Sun et al. 2024's test of what massive activations do, on each pretrained model that has them by Sun et al.'s rule (above 100 and 1000x the median |x| of a block's output, measured by field_metrics on 64-token windows of the held-out text): the massive values at position 0 of the first block that holds them (their channels at the first position, where every sequence holds them; Sun et al. also find them at delimiter tokens, at no fixed position) are set to zero, and separately to their mean over 64 sequences of 64 tokens of the held-out text beyond the evaluated part, in that block's output stream (resid_post).",
            "The held-out loss (two sequences of 256 tokens of the bundled held-out text, each beginning with the model's BOS when it has one, as a text tokenised on its own does) is measured after each.",
            "On a model, the massive activations are functional as Sun et al. found when zeroing them raises the held-out loss by at least 1 nat and setting them to their mean moves it by at most 2% of the model's own loss.",
            "real-causes' C24 check holds when that is so on every model with massive activations, holds partly when on some, does not hold when on none; it is inconclusive without such a model. (It reads the mechanism behind C24's question: a clamp that cuts these values off would cost what zeroing costs.)",
        ],
    ),
    (
    "C26",
    &[
        "Settings: exp attention-sink's Bigram-Backcopy GPTs (SPEC 2c: BOS at position 0, triggers the 3 most frequent characters), 3 seeds each, every design trained for the same steps.",
        "A setting has a sink when its ungated softmax model's largest first-token share over (layer, head) pairs at the end of training is at least 0.3 on every seed.",
        "On a setting with a sink, a design removes the sink when its largest first-token share (mean over seeds) is at most twice the uniform share and below the ungated model's by more than the seed spread (twice the larger of the two standard deviations over seeds); it lowers the sink when only the gap holds.",
        "C26 holds when the elementwise output gate (the lesson's q_proj widened to 2x) removes the sink on every setting with a sink; it holds partly when the gate removes it on some but not all of them, or only lowers it; it does not hold when it does neither on any; it is inconclusive when no setting has a sink.",
        "Recipe sensitivity (full setting; fixed before its runs, 2026-12-06): the ungated softmax model and the elementwise gate are retrained on every setting over 5 seeds under the chapter's recipe and under one change at a time: PyTorch's default initialisation (nn.Linear's U(+-1/sqrt(fan_in)) for every weight and bias, the gate's included, nn.Embedding's N(0, 1)), no biases on the Linear layers, Adam beta2 0.999, AdamW weight decay 0.01 with the norm gains decayed too (PyTorch's default), half and twice the steps, batch 64. Each run's share is read two ways: the largest over (layer, head), and the largest over blocks of the mean over a block's heads.",
        "Under each recipe and reading the gate's effect on a setting is classified by the rule above over those 5 seeds (a setting whose ungated model does not reach 0.3 on every seed there has no sink under that recipe and reading); the gate's effect depends on a change when its classification differs from the chapter's recipe's at the same reading, and the verdict names each such change.",
        "C26 holds only if, besides the rule above, the gate removes the sink under every recipe and reading where a sink forms; a gate that holds on the chapter's recipe but not under some change holds partly.",
        "Reported beside the verdict, without deciding it: the held-out loss on copy and bigram targets, the massive activation at position 0, the value drain, the other removers (headwise gate, sink logit, sigmoid, ReLU attention), the byte-level GPT with a fixed first byte and the pretrained models.",
        "real-causes (fixed before its runs, 2026-12-06): on each pretrained model, every query's attention to position 0 is removed (the rest of its row renormalised) in every block, and in each block alone; the held-out loss, the first-token share and Gu et al.'s Sink metric are measured after each. The first token is a sink the model relies on (parked attention that cannot simply go elsewhere, as StreamingLLM and Gu et al. found) when removing it in every block raises the held-out loss by at least 10% of the model's own loss; the blocks whose removal alone raises it by at least 1% are named.",
        "real-causes' C26 check holds when the model relies on the sink in every model measured, holds partly when in some, does not hold when in none; inconclusive without a model.",
    ],
)];

/// A claim's decision rule (its clauses), if one was fixed before its runs.
pub fn decision_rule(id: &str) -> Option<&'static [&'static str]> {
    DECISION_RULES
        .iter()
        .find(|(c, _)| *c == id)
        .map(|(_, r)| *r)
}

/// Look a claim up.
pub fn claim(id: &str) -> Option<&'static Claim> {
    CLAIMS.iter().find(|c| c.id == id)
}

/// A claim's one verdict over the chapters that checked it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Overall {
    /// The verdict.
    pub verdict: Verdict,
    /// The chapter it comes from.
    pub decided_by: String,
    /// Chapters whose own verdict differs (evidence that qualifies it).
    pub qualified_by: Vec<(String, Verdict)>,
}

impl Overall {
    /// As written in the claims table: `holds partly`, or `holds (qualified
    /// by llm: holds partly)`.
    pub fn label(&self) -> String {
        if self.qualified_by.is_empty() {
            return self.verdict.label().to_string();
        }
        let q: Vec<String> = self
            .qualified_by
            .iter()
            .map(|(e, v)| format!("{e}: {}", v.label()))
            .collect();
        format!("{} (qualified by {})", self.verdict.label(), q.join(", "))
    }
}

impl Claim {
    /// One verdict from the chapters' (`(experiment, verdict)`): the first
    /// chapter in the claim's coverage order (the one on the lesson's own
    /// setting comes first) whose verdict is not inconclusive decides, then
    /// chapters outside that list in the order given; every other decided
    /// verdict that differs only qualifies it. Inconclusive when no chapter
    /// decided; None when none checked the claim.
    pub fn overall(&self, checks: &[(&str, Verdict)]) -> Option<Overall> {
        if checks.is_empty() {
            return None;
        }
        let order: &[&str] = match self.coverage {
            Coverage::Experiments(ids) => ids,
            Coverage::Uncheckable(_) => &[],
        };
        let rank = |e: &str| order.iter().position(|x| *x == e).unwrap_or(order.len());
        let mut ranked: Vec<(usize, usize, &str, Verdict)> = checks
            .iter()
            .enumerate()
            .map(|(i, (e, v))| (rank(e), i, *e, *v))
            .collect();
        ranked.sort_by_key(|x| (x.0, x.1));
        let &(_, _, by, verdict) = ranked
            .iter()
            .find(|x| x.3 != Verdict::Inconclusive)
            .or(ranked.first())?;
        let qualified_by = ranked
            .iter()
            .filter(|x| x.2 != by && x.3 != Verdict::Inconclusive && x.3 != verdict)
            .map(|x| (x.2.to_string(), x.3))
            .collect();
        Some(Overall {
            verdict,
            decided_by: by.to_string(),
            qualified_by,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lesson_setting_chapter_decides_and_the_others_qualify() {
        let c3 = claim("C3").unwrap();
        // Listed first in coverage, residual-growth decides whatever order
        // the checks come in; llm's differing verdict qualifies it.
        let o = c3
            .overall(&[
                ("llm", Verdict::Partly),
                ("residual-growth", Verdict::Holds),
            ])
            .unwrap();
        assert_eq!(
            (o.verdict, o.decided_by.as_str()),
            (Verdict::Holds, "residual-growth")
        );
        assert_eq!(o.label(), "holds (qualified by llm: holds partly)");
        // An inconclusive first chapter hands the decision on.
        let o = c3
            .overall(&[
                ("residual-growth", Verdict::Inconclusive),
                ("llm", Verdict::DoesNotHold),
            ])
            .unwrap();
        assert_eq!(
            (o.verdict, o.decided_by.as_str()),
            (Verdict::DoesNotHold, "llm")
        );
        assert!(o.qualified_by.is_empty());
        // Agreement needs no qualification; nothing checked, no verdict.
        let o = c3
            .overall(&[
                ("residual-growth", Verdict::Partly),
                ("llm", Verdict::Partly),
            ])
            .unwrap();
        assert_eq!(o.label(), "holds partly");
        assert!(c3.overall(&[]).is_none());
        let o = c3.overall(&[("llm", Verdict::Inconclusive)]).unwrap();
        assert_eq!(o.verdict, Verdict::Inconclusive);
    }
}
