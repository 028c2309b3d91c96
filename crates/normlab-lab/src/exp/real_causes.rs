//! real-causes (claims C24, C26 on real models): do the lessons' causes act
//! in trained LLMs? Where `llm` only watches SmolLM2-135M and Gemma 3 270M,
//! this chapter changes them at the decoder's hook points
//! (`model/intervene.rs`) and measures what follows, by the rules fixed in
//! claims.rs before its runs:
//!
//! - **Massive activations** (Sun et al. 2024): the massive values at
//!   position 0 of the first block that holds them (Sun et al.'s rule,
//!   `field_metrics`) set to zero, and to their mean over 64 other
//!   held-out sequences, in that block's output; the held-out loss (two
//!   sequences of 256 tokens, each beginning with the model's BOS when it
//!   has one), the first-token share and Gu et al.'s Sink metric after
//!   each.
//! - **The sink** (Gu et al. 2024): every query's attention to position 0
//!   removed (the rest renormalised) in every block, and in each block
//!   alone.
//!
//! The output gate put into a pretrained model and fine-tuned needs the
//! decoder's backward (issue 71's last milestone) and is not measured yet:
//! the result says so.

use super::args::ExpArgs;
use super::claims::{ClaimCheck, Verdict};
use super::framework::{result, ExpResult, Experiment, Progress, Unavailable};
use super::llm_models::{find, MODELS};
use crate::present::{f, Figure, LineChart, Series, Table};
use normlab::error::Result;
use normlab::model::decoder::field::{bos_windows, sink_windows, FieldMetrics};
use normlab::model::decoder::{self, Decoder};
use normlab::model::hooks::{AttentionPattern, NoObserver, Observer, Pass};
use normlab::model::intervene::{Change, Edit, Interventions, Knockout, Point, Sel};
use serde::Serialize;
use serde_json::json;

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "real-causes",
    question: "Do the lessons' causes act in trained LLMs: what happens to SmolLM2-135M and Gemma 3 270M when their massive activations are zeroed or set to their mean, and when attention to the first token is removed?",
    flags: &[],
    run,
    grid: None,
    hidden_training: None,
    quick_decides: true,
};

/// The held-out sequences the losses read: this many tokens each (quick:
/// half), each beginning with the model's BOS when it has one, as a text
/// tokenised on its own does.
const SEQ: usize = 256;
/// The sequences evaluated.
const SEQS: usize = 2;
/// The mean ablation's means: over this many sequences of 64 tokens of
/// the held-out text after the evaluated part.
const MEAN_SEQS: usize = 64;

/// Position 0's mean attention over heads and the queries t >= 1 (the
/// first-token share), and Gu et al.'s Sink metric, over passes from 0.
#[derive(Default)]
struct Sinks {
    field: FieldMetrics,
    share: f64,
    n: usize,
}

impl Observer for Sinks {
    fn begin(&mut self, pass: Pass) {
        self.field.begin(pass);
    }
    fn attention(&mut self, p: &AttentionPattern) {
        self.field.attention(p);
        if p.past == 0 && p.queries > 1 {
            let s: f64 = (1..p.queries).map(|i| f64::from(p.probs[i * p.keys])).sum();
            self.share += s / (p.queries - 1) as f64;
            self.n += 1;
        }
    }
    fn sublayer_out(&mut self, block: usize, sub: usize, x: &[f32]) {
        self.field.sublayer_out(block, sub, x);
    }
}

/// One model under one change.
#[derive(Clone, Debug, Serialize)]
struct Outcome {
    change: String,
    loss: f64,
    /// Change in loss from the model's own.
    delta: f64,
    first_token_share: f64,
    sink_metric_percent: f64,
}

/// The mean held-out loss over `seqs` (each its own pass) under `iv`.
fn loss(m: &Decoder, iv: &Interventions, seqs: &[Vec<u32>]) -> Result<f64> {
    let (mut total, mut n) = (0f64, 0usize);
    for s in seqs.iter().filter(|s| s.len() > 1) {
        let h = m.hidden_with(&s[..s.len() - 1], iv, &mut NoObserver)?;
        m.add_nll(&m.logits_with(&h, iv), &s[1..], &mut total);
        n += s.len() - 1;
    }
    Ok(total / n.max(1) as f64)
}

/// A block and the (position, channel)s of its massive activations.
type MassiveAt = (Option<usize>, Vec<(usize, usize)>);

/// The evaluated held-out tokens and the sequences cut from them.
type Eval<'a> = (&'a [u32], &'a [Vec<u32>]);

/// The held-out loss, first-token share and Sink metric of `m` under `iv`.
fn measure(
    m: &Decoder,
    iv: &Interventions,
    (ids, seqs): Eval,
    change: &str,
    own: f64,
) -> Result<Outcome> {
    let loss = loss(m, iv, seqs)?;
    let mut s = Sinks::default();
    for w in sink_windows(ids, m.bos, decoder::FIELD_WINDOWS) {
        m.hidden_with(&w, iv, &mut s)?;
    }
    let r = s.field.report(|_, _| Ok(String::new()))?;
    Ok(Outcome {
        change: change.to_string(),
        loss,
        delta: loss - own,
        first_token_share: s.share / s.n.max(1) as f64,
        sink_metric_percent: r.sink_metric.percent,
    })
}

/// One model's measurements.
#[derive(Serialize)]
struct ModelCauses {
    model: &'static str,
    layers: usize,
    own: Outcome,
    /// The first block with massive activations, and their (position,
    /// channel)s there (None: the model has none).
    massive_block: Option<usize>,
    massive_at: Vec<(usize, usize)>,
    /// Zeroed, then set to their mean.
    massive: Vec<Outcome>,
    /// Attention to position 0 removed in every block.
    sink_all: Outcome,
    /// ... in each block alone (with --quick, every 4th block).
    sink_each: Vec<(usize, Outcome)>,
}

/// Knock out attention to position 0 in `blocks`.
fn knockout(blocks: Sel) -> Interventions {
    Interventions {
        knockouts: vec![Knockout {
            keys: Sel::Only(vec![0]),
            blocks,
        }],
        ..Interventions::none()
    }
}

/// The massive values of the first block holding them, set by `change`.
fn massive_edit(block: usize, at: &[(usize, usize)], change: Change) -> Interventions {
    Interventions {
        edits: at
            .iter()
            .map(|&(pos, ch)| Edit {
                point: Point::ResidPost,
                blocks: Sel::Only(vec![block]),
                positions: Sel::Only(vec![pos]),
                channels: Sel::Only(vec![ch]),
                change: change.clone(),
            })
            .collect(),
        ..Interventions::none()
    }
}

/// The position-0 massive activations of the first block that holds them
/// (Sun et al.'s rule, on `ids`' field windows): the block and the
/// (position, channel)s (Sun et al. also find them at delimiters, at no
/// fixed position).
fn massive_at(m: &Decoder, ids: &[u32]) -> Result<MassiveAt> {
    let mut f = FieldMetrics::default();
    for w in sink_windows(ids, m.bos, decoder::FIELD_WINDOWS) {
        m.observe(&w, &mut f)?;
    }
    let report = f.report(|_, _| Ok(String::new()))?;
    let ma = &report.massive_activations;
    let Some(b) = ma.first_block else {
        return Ok((None, Vec::new()));
    };
    let row = &ma.per_block[b];
    let mut at: Vec<(usize, usize)> = row
        .top
        .iter()
        .filter(|t| t.value > ma.min && t.value > ma.over_median * row.median)
        .filter(|t| t.position == 0)
        .map(|t| (t.position, t.channel))
        .collect();
    at.sort_unstable();
    at.dedup();
    Ok((Some(b), at))
}

/// Everything the chapter measures on one model; `seq` tokens per held-out
/// sequence.
fn causes(
    name: &'static str,
    mut m: Decoder,
    (seq, quick): (usize, bool),
    progress: &Progress,
) -> Result<ModelCauses> {
    let all = m.encode(decoder::held_out_text())?;
    let bos = m.bos.filter(|b| all.first() == Some(b));
    // The evaluated tokens (the BOS first when the model has one), then
    // the rest of the held-out text for the means.
    let with_bos = usize::from(bos.is_some());
    let used = (SEQS * (seq - with_bos) + with_bos).min(all.len());
    let ids = &all[..used];
    let seqs = bos_windows(ids, m.bos, seq, SEQS);
    let rest: Vec<u32> = bos.into_iter().chain(all[used..].iter().copied()).collect();
    let mean_seqs = bos_windows(&rest, m.bos, 64, MEAN_SEQS);
    let eval = (ids, &seqs[..]);
    let own_loss = loss(&m, &Interventions::none(), &seqs)?;
    let own = measure(&m, &Interventions::none(), eval, "none", own_loss)?;
    let (massive_block, massive_at) = massive_at(&m, ids)?;
    let mut massive = Vec::new();
    if let (Some(b), false) = (massive_block, massive_at.is_empty()) {
        let zero = massive_edit(b, &massive_at, Change::Zero);
        massive.push(measure(
            &m,
            &zero,
            eval,
            "massive activations set to 0",
            own_loss,
        )?);
        m.interventions = massive_edit(b, &massive_at, Change::Mean(None));
        m.resolve_means_over(&mean_seqs)?;
        let mean = std::mem::take(&mut m.interventions);
        massive.push(measure(
            &m,
            &mean,
            eval,
            "massive activations set to their mean",
            own_loss,
        )?);
    }
    progress(1, 2, name);
    let all_blocks = "attention to position 0 removed in every block";
    let sink_all = measure(&m, &knockout(Sel::All), eval, all_blocks, own_loss)?;
    // Each block alone: the loss only (the rule reads no more).
    let sink_each = (0..m.cfg.layers)
        .step_by(if quick { 4 } else { 1 })
        .map(|b| {
            let loss = loss(&m, &knockout(Sel::Only(vec![b])), &seqs)?;
            let o = Outcome {
                change: format!("attention to position 0 removed in block {b}"),
                loss,
                delta: loss - own_loss,
                first_token_share: f64::NAN,
                sink_metric_percent: f64::NAN,
            };
            Ok((b, o))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ModelCauses {
        model: name,
        layers: m.cfg.layers,
        own,
        massive_block,
        massive_at,
        massive,
        sink_all,
        sink_each,
    })
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let seq = if a.quick { SEQ / 2 } else { SEQ };
    let mut out = result(
        json!({"models": MODELS.iter().map(|m| m.file).collect::<Vec<_>>(), "sequences": SEQS, "sequence_tokens": seq, "mean_sequences": MEAN_SEQS, "mean_sequence_tokens": 64, "field_windows": decoder::FIELD_WINDOWS}),
        Vec::new(),
    );
    let mut measured = Vec::new();
    let mut absent = Vec::new();
    for rm in &MODELS {
        match find(rm.file) {
            Some(path) => measured.push(causes(
                rm.name,
                Decoder::load(&path)?,
                (seq, a.quick),
                &progress,
            )?),
            None => absent.push(format!(
                "{} ({} absent: run {})",
                rm.name, rm.file, rm.fetch
            )),
        }
    }
    if measured.is_empty() {
        let why = format!("no model file is here: {}", absent.join("; "));
        out.conclusion = format!("{why}: nothing measured.");
        out.unavailable = Some(Unavailable {
            needs: "model",
            why,
        });
        for c in ["C24", "C26"] {
            out.checks.push(ClaimCheck::new(
                c,
                Verdict::Inconclusive,
                "needs the model files (scripts/fetch_smollm2.sh, scripts/fetch_gemma3.sh)",
            ));
        }
        return Ok(out);
    }
    let missing = if absent.is_empty() {
        String::new()
    } else {
        format!(" Not measured: {}.", absent.join("; "))
    };
    let (c24, c24_said) = c24(&measured);
    let (c26, c26_said) = c26(&measured);
    out.checks
        .push(ClaimCheck::new("C24", c24, format!("{c24_said}{missing}")));
    out.checks.push(ClaimCheck::new("C26", c26, format!("{c26_said}{missing} The output gate added to a pretrained model and fine-tuned is not measured yet: it needs the decoder's backward.")));
    out.conclusion = format!("{c24_said} {c26_said}{missing}");
    out.tables.push(table(&measured));
    out.figures.push(figure(&measured));
    out.data.insert("models".into(), json!(measured));
    Ok(out)
}

/// C24 by its rule: zero raises the loss by at least 1 nat, the mean moves
/// it by at most 2% of the model's own.
fn c24(ms: &[ModelCauses]) -> (Verdict, String) {
    let with: Vec<&ModelCauses> = ms.iter().filter(|m| m.massive.len() == 2).collect();
    if with.is_empty() {
        return (
            Verdict::Inconclusive,
            "No model measured has massive activations (Sun et al.'s rule).".into(),
        );
    }
    let mut held = 0;
    let parts: Vec<String> = with
        .iter()
        .map(|m| {
            let (z, mean) = (&m.massive[0], &m.massive[1]);
            let ok = z.delta >= 1.0 && mean.delta.abs() <= 0.02 * m.own.loss;
            held += usize::from(ok);
            format!(
                "{}: the massive activations of block {} ({}) set to 0 take the held-out loss from {} to {} ({:+.3} nats); set to their mean, to {} ({:+.2}%): {}",
                m.model,
                m.massive_block.unwrap_or(0),
                m.massive_at.iter().map(|(p, c)| format!("channel {c} at position {p}")).collect::<Vec<_>>().join(", "),
                f(m.own.loss, 4),
                f(z.loss, 4),
                z.delta,
                f(mean.loss, 4),
                100.0 * mean.delta / m.own.loss,
                if ok { "functional, as Sun et al. found" } else { "not as Sun et al. found" }
            )
        })
        .collect();
    let v = match held {
        0 => Verdict::DoesNotHold,
        n if n == with.len() => Verdict::Holds,
        _ => Verdict::Partly,
    };
    (
        v,
        format!(
            "Sun et al.'s test of massive activations: {}.",
            parts.join("; ")
        ),
    )
}

/// C26 by its rule: removing position 0's attention everywhere raises the
/// loss by at least 10% of the model's own; blocks whose removal alone
/// raises it by at least 1% are named.
fn c26(ms: &[ModelCauses]) -> (Verdict, String) {
    let mut relies = 0;
    let parts: Vec<String> = ms
        .iter()
        .map(|m| {
            let ok = m.sink_all.delta >= 0.1 * m.own.loss;
            relies += usize::from(ok);
            let matter: Vec<String> = m
                .sink_each
                .iter()
                .filter(|(_, o)| o.delta >= 0.01 * m.own.loss)
                .map(|(b, o)| format!("{b} ({:+.3})", o.delta))
                .collect();
            format!(
                "{}: first-token share {} and Sink metric {}% in the model; attention to position 0 removed in every block takes the held-out loss from {} to {} ({:+.3} nats): {}; blocks whose removal alone raises it by 1% or more: {}",
                m.model,
                f(m.own.first_token_share, 3),
                f(m.own.sink_metric_percent, 1),
                f(m.own.loss, 4),
                f(m.sink_all.loss, 4),
                m.sink_all.delta,
                if ok { "the model relies on the sink" } else { "the model does not rely on it by the rule" },
                if matter.is_empty() { "none".to_string() } else { matter.join(", ") }
            )
        })
        .collect();
    let v = match relies {
        0 => Verdict::DoesNotHold,
        n if n == ms.len() => Verdict::Holds,
        _ => Verdict::Partly,
    };
    (
        v,
        format!(
            "Gu et al.'s causal reading of the sink: {}.",
            parts.join("; ")
        ),
    )
}

/// One row per model and change.
fn table(ms: &[ModelCauses]) -> Table {
    let mut t = Table::new(
        "held-out loss (nats/token), position 0's share of attention (heads and queries t >= 1) and Gu et al.'s Sink metric after each change",
        &["model", "change", "held-out loss", "change in loss", "first-token share", "Sink metric (%)"],
    );
    for m in ms {
        for o in std::iter::once(&m.own)
            .chain(&m.massive)
            .chain(std::iter::once(&m.sink_all))
        {
            t.row(vec![
                m.model.to_string(),
                o.change.clone(),
                f(o.loss, 4),
                format!("{:+.4}", o.delta),
                f(o.first_token_share, 3),
                f(o.sink_metric_percent, 1),
            ]);
        }
    }
    t
}

/// The loss change when attention to position 0 is removed in one block,
/// by relative depth, per model.
fn figure(ms: &[ModelCauses]) -> Figure {
    let series = ms
        .iter()
        .map(|m| {
            let n = (m.layers.max(2) - 1) as f64;
            Series::new(
                m.model,
                m.sink_each
                    .iter()
                    .map(|(b, o)| (*b as f64 / n, o.delta))
                    .collect(),
            )
        })
        .collect();
    Figure::new(
        "sink_by_block",
        vec![LineChart::new(
            "attention to position 0 removed in one block: change in held-out loss",
            "block (relative depth)",
            "change in loss (nats/token)",
            series,
        )
        .panel()],
        1,
    )
}
