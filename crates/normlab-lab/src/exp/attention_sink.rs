//! attention-sink (claim C26): does a sigmoid gate on the attention output
//! remove the attention sink? The GPT (12 blocks, d 128, 2 seeds) in nine
//! designs, each one change from a base (Pre-LN, every sequence starting
//! with a fixed BOS-like byte 0, no gate): the headwise and elementwise
//! output gates (Qiu et al. 2025, G1), QK-Norm with and without the gate,
//! sandwich placement with and without it, and windows that start mid-text
//! (no fixed first token) with and without it. Per design: position 0's
//! share of attention (over heads and the queries past it) by block at the
//! end of training and over training, beside what uniform attention would
//! give; the largest |x| in the stream and its ratio to the median; the
//! feed-forward's largest value; held-out loss. Beside them, the same
//! measures on SmolLM2 and Gemma 3 (when their files are present), whose
//! first token is the text's first word (SmolLM2 adds no BOS) or `<bos>`.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{result, ExpResult, Experiment, Progress};
use super::llm_models::{find, MODELS};
use super::runs::{self, block_curve, full_gpt, grid_settings, mean_curve, tiny_gpt};
use crate::present::{f, opt, Figure, LineChart, Series, Table};
use crate::sweep::{mean_std, RunResult, RunSpec, SeedGroup};
use normlab::error::Result;
use normlab::model::decoder::{Decoder, DecoderTrace};
use normlab::nn::{uniform_sink_share, OutputGate, Placement};
use normlab::train::TrainConfig;
use serde::Serialize;
use serde_json::json;

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "attention-sink",
    question: "Does a sigmoid gate on the attention output remove the attention sink?",
    flags: &[ExpFlag::Grid, ExpFlag::Layers],
    run,
    grid: Some(grid),
    hidden_training: None,
    quick_decides: false,
};

/// The fixed first byte (NUL: it never occurs in the bundled text, so it
/// is a token of its own, as a BOS is).
pub const BOS_BYTE: u32 = 0;

/// One design: a change from the base.
#[derive(Clone, Copy, Debug)]
struct Design {
    name: &'static str,
    gate: Option<OutputGate>,
    qk_norm: bool,
    placement: Placement,
    bos: bool,
}

const fn design(
    name: &'static str,
    gate: Option<OutputGate>,
    qk_norm: bool,
    placement: Placement,
    bos: bool,
) -> Design {
    Design {
        name,
        gate,
        qk_norm,
        placement,
        bos,
    }
}

const EW: Option<OutputGate> = Some(OutputGate::Elementwise);

/// The designs, in pairs without and with the elementwise gate (the
/// headwise gate beside the base).
const DESIGNS: [Design; 9] = [
    design("Pre-LN", None, false, Placement::Pre, true),
    design(
        "Pre-LN + headwise gate",
        Some(OutputGate::Headwise),
        false,
        Placement::Pre,
        true,
    ),
    design("Pre-LN + elementwise gate", EW, false, Placement::Pre, true),
    design("Pre-LN + QK-Norm", None, true, Placement::Pre, true),
    design(
        "Pre-LN + QK-Norm + elementwise gate",
        EW,
        true,
        Placement::Pre,
        true,
    ),
    design("sandwich", None, false, Placement::Sandwich, true),
    design(
        "sandwich + elementwise gate",
        EW,
        false,
        Placement::Sandwich,
        true,
    ),
    design(
        "Pre-LN, mid-text windows",
        None,
        false,
        Placement::Pre,
        false,
    ),
    design(
        "Pre-LN + elementwise gate, mid-text windows",
        EW,
        false,
        Placement::Pre,
        false,
    ),
];

/// Pairs (without, with the elementwise gate) by index into [`DESIGNS`].
const PAIRS: [(usize, usize); 4] = [(0, 2), (3, 4), (5, 6), (7, 8)];

fn base(a: &ExpArgs) -> Result<(TrainConfig, Vec<u64>)> {
    let (mut c, seeds) = if a.quick {
        (tiny_gpt().with(|c| c.steps = 80)?, a.seeds_or(1, 2))
    } else {
        (full_gpt().with(|c| c.model.layers = 12)?, a.seeds_or(1, 2))
    };
    if let Some(l) = a.first_layers() {
        c.model.layers = l;
    }
    c.steps = a.steps.unwrap_or(c.steps);
    c.shards = 1;
    c.log_every = (c.steps / 20).max(1);
    c.eval_every = (c.steps / 10).max(1);
    Ok((c, seeds))
}

fn config(b: &TrainConfig, d: &Design, seed: u64) -> Result<TrainConfig> {
    b.with(|c| {
        c.model.attn_gate = d.gate;
        c.model.qk_norm = d.qk_norm;
        c.model.placement = d.placement;
        c.bos_byte = d.bos.then_some(BOS_BYTE);
        c.seed = seed;
    })
}

/// Design x seed.
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let (b, seeds) = base(a)?;
    let mut cfgs = Vec::new();
    for d in &DESIGNS {
        for &s in &seeds {
            cfgs.push(config(&b, d, s)?);
        }
    }
    Ok(runs::specs(cfgs))
}

/// The last logged per-block values of a metric.
fn last(r: &RunResult, get: fn(&normlab::train::StepRecord) -> &Vec<f64>) -> Vec<f64> {
    r.metrics
        .iter()
        .rev()
        .map(get)
        .find(|v| !v.is_empty())
        .cloned()
        .unwrap_or_default()
}

fn top(v: &[f64]) -> f64 {
    normlab::train::nan_max(v.iter().copied())
}

/// One design's measures (means over seeds; std of the sink share).
#[derive(Serialize)]
struct Cell {
    design: &'static str,
    gate: Option<&'static str>,
    qk_norm: bool,
    placement: String,
    bos: bool,
    /// Position 0's share at the end, mean over blocks: mean and std over seeds.
    sink: Option<f64>,
    sink_std: Option<f64>,
    /// The largest block's share at the end (mean over seeds).
    sink_max_block: f64,
    /// Per block at the end (mean over seeds).
    sink_by_block: Vec<f64>,
    /// The largest |x| in the stream at the end (largest block; mean over seeds).
    stream_max: f64,
    /// Its ratio to the median |x| (largest block; mean over seeds).
    max_over_median: f64,
    /// The feed-forward's largest value at the end (mean over seeds).
    ffn_max: f64,
    final_eval_loss: Option<f64>,
    eval_std: Option<f64>,
    status: &'static str,
}

fn mean(v: impl IntoIterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.into_iter().collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn cell(d: &Design, g: &[&RunResult]) -> Cell {
    let sg = SeedGroup::of_runs(g.iter().copied());
    let ends: Vec<Vec<f64>> = g.iter().map(|r| last(r, |m| &m.attn_sink)).collect();
    let (sink, sink_std) = mean_std(
        &ends
            .iter()
            .filter(|v| !v.is_empty())
            .map(|v| mean(v.iter().copied()))
            .collect::<Vec<_>>(),
    );
    let blocks = ends.iter().map(Vec::len).max().unwrap_or(0);
    let sink_by_block: Vec<f64> = (0..blocks)
        .map(|b| mean(ends.iter().filter_map(|v| v.get(b).copied())))
        .collect();
    Cell {
        design: d.name,
        gate: d.gate.map(|x| x.name()),
        qk_norm: d.qk_norm,
        placement: d.placement.to_string(),
        bos: d.bos,
        sink,
        sink_std,
        sink_max_block: top(&sink_by_block),
        sink_by_block,
        stream_max: mean(g.iter().map(|r| top(&last(r, |m| &m.stream_max)))),
        max_over_median: mean(g.iter().map(|r| top(&last(r, |m| &m.stream_max_ratio)))),
        ffn_max: mean(g.iter().map(|r| top(&last(r, |m| &m.ffn_max)))),
        final_eval_loss: sg.mean,
        eval_std: sg.std,
        status: sg.status.name(),
    }
}

/// A real model's sink and outliers over a few texts.
#[derive(Serialize)]
struct RealSink {
    model: &'static str,
    /// Position 0's share, mean over blocks (and texts).
    sink: f64,
    /// The largest block's.
    sink_max_block: f64,
    /// Uniform attention's share over the same queries.
    uniform: f64,
    /// Largest |x| over the median |x| (largest block and text).
    max_over_median: f64,
    /// The feed-forward's largest value.
    ffn_max: f64,
    /// The tokens at position 0.
    position0: Vec<String>,
}

/// Lines of the bundled text the pretrained models read.
fn real_texts(quick: bool) -> usize {
    if quick {
        2
    } else {
        8
    }
}

fn real_models(quick: bool) -> Result<Vec<RealSink>> {
    let texts = normlab::io::sample_sentences(real_texts(quick), 0, 53);
    let mut out = Vec::new();
    for rm in &MODELS {
        let Some(path) = find(rm.file) else { continue };
        let m = Decoder::load(&path)?;
        let l = m.cfg.layers;
        let (mut sink, mut uni) = (vec![0f64; l], vec![0f64; l]);
        let (mut ratio, mut ffn, mut n) = (0f64, 0f64, 0usize);
        let mut position0 = Vec::new();
        for t in &texts {
            let ids = m.encode(t)?;
            if ids.len() < 2 {
                continue;
            }
            let mut tr = DecoderTrace::default();
            m.observe(&ids, &mut tr)?;
            for b in 0..l {
                sink[b] += tr.attn_sink[b];
                uni[b] += tr.attn_sink_uniform[b];
                ratio = ratio.max(tr.max_abs[b] / tr.median_abs[b]);
            }
            ffn = normlab::train::nan_max([ffn, top(&tr.ffn_max)]);
            position0.push(m.decode(&ids[..1])?);
            n += 1;
        }
        if n == 0 {
            continue;
        }
        sink.iter_mut().for_each(|v| *v /= n as f64);
        position0.dedup();
        out.push(RealSink {
            model: rm.name,
            sink: mean(sink.iter().copied()),
            sink_max_block: top(&sink),
            uniform: mean(uni.iter().map(|v| v / n as f64)),
            max_over_median: ratio,
            ffn_max: ffn,
            position0,
        });
    }
    Ok(out)
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let (b, seeds) = base(a)?;
    let rs = runs::run_grid(a, grid(a)?, false, progress)?;
    let uniform = uniform_sink_share(b.model.seq);
    let mut cells = Vec::new();
    let mut series = Vec::new();
    for d in &DESIGNS {
        let g: Vec<&RunResult> = rs
            .iter()
            .filter(|r| {
                let m = &r.cfg.model;
                m.attn_gate == d.gate
                    && m.qk_norm == d.qk_norm
                    && m.placement == d.placement
                    && r.cfg.bos_byte.is_some() == d.bos
            })
            .collect();
        if g.is_empty() {
            continue;
        }
        series.push(Series::new(
            d.name,
            mean_curve(&g, &|r| {
                block_curve(r, |m| &m.attn_sink, |v| mean(v.iter().copied()))
            }),
        ));
        cells.push(cell(d, &g));
    }
    let reals = real_models(a.quick)?;
    let mut table = Table::new(
        format!(
            "GPT {} blocks, d {}, {} steps, lr {}, {} seed(s): position 0's share of attention at the end (mean over blocks, ± std over seeds; uniform attention gives {})",
            b.model.layers, b.model.d_model, b.steps, b.lr, seeds.len(), f(uniform, 4)
        ),
        &["design", "status", "sink share", "largest block's", "max |x|", "max / median |x|", "ffn max", "held-out loss"],
    );
    for c in &cells {
        table.row(vec![
            c.design.to_string(),
            c.status.to_string(),
            format!("{} ± {}", opt(c.sink, 4), opt(c.sink_std, 4)),
            f(c.sink_max_block, 4),
            f(c.stream_max, 1),
            f(c.max_over_median, 0),
            f(c.ffn_max, 1),
            format!("{} ± {}", opt(c.final_eval_loss, 4), opt(c.eval_std, 4)),
        ]);
    }
    let mut real_table = Table::new(
        format!("pretrained models ({} lines of the bundled text): position 0's share of attention over heads and the queries past it", real_texts(a.quick)),
        &["model", "position 0 holds", "sink share (mean over blocks)", "largest block's", "uniform", "max / median |x|", "ffn max"],
    );
    for r in &reals {
        real_table.row(vec![
            r.model.to_string(),
            r.position0
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            f(r.sink, 3),
            f(r.sink_max_block, 3),
            f(r.uniform, 3),
            f(r.max_over_median, 0),
            f(r.ffn_max, 1),
        ]);
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "gpt", "base": b.overrides(), "steps": b.steps, "bos_byte": BOS_BYTE, "designs": DESIGNS.iter().map(|d| d.name).collect::<Vec<_>>()}),
        ),
        seeds.clone(),
    );
    out.figures.push(Figure::new(
        "attention_sink",
        vec![LineChart::new(
            "position 0's share of attention (mean over blocks)",
            "step",
            "share",
            series,
        )
        .panel()],
        1,
    ));
    let (verdict, detail) = c26(&cells, &reals, uniform, seeds.len());
    out.checks
        .push(ClaimCheck::new("C26", verdict, detail.clone()));
    out.conclusion = detail;
    out.data.insert("uniform".into(), json!(uniform));
    out.data.insert("configs".into(), json!(cells));
    out.data.insert("real_models".into(), json!(reals));
    out.data.insert("runs".into(), runs::records(&rs));
    out.tables.push(table);
    if !reals.is_empty() {
        out.tables.push(real_table);
    }
    Ok(out)
}

/// C26 from the cells, per pair (without, with the elementwise gate): a
/// sink must first exist (the ungated share above twice the uniform one,
/// neither design diverged, both shares finite). The gate "removes" it when the gated
/// share falls to at most twice the uniform one by a gap beyond the seed
/// spread (twice the larger std), and "lowers" it when only the gap holds.
/// Holds: removed in every pair with a sink (with at least two seeds: one
/// seed has no spread and gives at most "partly"); partly: lowered or
/// removed in some; does not hold: in none; inconclusive: no pair had a
/// sink.
fn c26(cells: &[Cell], reals: &[RealSink], uniform: f64, seeds: usize) -> (Verdict, String) {
    let by = |name: &str| cells.iter().find(|c| c.design == name);
    let (mut removed, mut lowered, mut n, mut parts) = (0, 0, 0, Vec::new());
    for (i, j) in PAIRS {
        let (Some(off), Some(on)) = (by(DESIGNS[i].name), by(DESIGNS[j].name)) else {
            continue;
        };
        let (Some(s0), Some(s1)) = (
            off.sink.filter(|v| v.is_finite()),
            on.sink.filter(|v| v.is_finite()),
        ) else {
            parts.push(format!(
                "{}: no finite share (runs {} / {})",
                off.design, off.status, on.status
            ));
            continue;
        };
        if off.status == "diverged" || on.status == "diverged" {
            parts.push(format!(
                "{}: left out (runs {} / {})",
                off.design, off.status, on.status
            ));
            continue;
        }
        if s0 <= 2.0 * uniform {
            parts.push(format!(
                "{}: no sink to remove ({} against uniform {})",
                off.design,
                f(s0, 4),
                f(uniform, 4)
            ));
            continue;
        }
        n += 1;
        let spread = 2.0 * off.sink_std.unwrap_or(0.0).max(on.sink_std.unwrap_or(0.0));
        let beyond = s0 - s1 > spread;
        let gone = beyond && s1 <= 2.0 * uniform;
        removed += usize::from(gone);
        lowered += usize::from(beyond);
        parts.push(format!(
            "{}: {} -> {} with the gate ({}; max/median |x| {} -> {})",
            off.design,
            f(s0, 4),
            f(s1, 4),
            if gone {
                "removed: within twice the uniform share, beyond the seed spread"
            } else if beyond {
                "lowered beyond the seed spread, not removed"
            } else {
                "within the seed spread or up"
            },
            f(off.max_over_median, 0),
            f(on.max_over_median, 0)
        ));
    }
    let real = reals
        .iter()
        .map(|r| {
            format!(
                "{}: {} on position 0 (uniform {})",
                r.model,
                f(r.sink, 3),
                f(r.uniform, 3)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let v = if n == 0 {
        Verdict::Inconclusive
    } else if removed == n && seeds >= 2 {
        Verdict::Holds
    } else if lowered > 0 {
        Verdict::Partly
    } else {
        Verdict::DoesNotHold
    };
    (
        v,
        format!(
            "Position 0's share of attention at the end of training, mean over blocks, without -> with the elementwise output gate: {}.{}",
            parts.join("; "),
            if real.is_empty() { String::new() } else { format!(" Pretrained models: {real}.") }
        ),
    )
}
