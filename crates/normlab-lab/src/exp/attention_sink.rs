//! attention-sink (claim C26): does a sigmoid gate on the attention output
//! remove the attention sink? First a setting where sinks form: GPTs
//! trained on Bigram-Backcopy (docs/bigram-backcopy.md; 1 layer with 1
//! head and 2 layers with 2 heads, 3 seeds), whose ungated softmax model
//! parks attention on the BOS; the formation is shown over training. Then
//! every sink remover against it at equal steps: the headwise and
//! elementwise output gates (Qiu et al. 2025, G1), a learned sink logit per
//! head (gpt-oss), sigmoid attention (Gu et al. 2024) and ReLU attention
//! over the number of keys (Guo et al. 2024), with the held-out loss on copy
//! and bigram targets, the sink measures (model/sinks.rs), the massive
//! activation at position 0 and the value drain. Then the byte-level GPT
//! with a fixed first byte, with and without the gate (one seed, wall time
//! stated; the verdict does not rest on it), and the pretrained models'
//! measures (SmolLM2 and Gemma 3, when their files are present). The
//! verdict follows C26's decision rule in claims.rs, fixed before the runs.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{result, ExpResult, Experiment, Progress};
use super::llm_models::{find, MODELS};
use super::runs::{self, full_gpt, grid_settings, tiny_gpt};
use crate::present::{f, opt, Figure, LineChart, Series, Table};
use crate::sweep::{mean_std, RunResult, RunSpec, SeedGroup};
use normlab::error::Result;
use normlab::model::decoder::{Decoder, DecoderTrace};
use normlab::model::sinks::{SinkStats, SINK_EPS};
use normlab::nn::{uniform_sink_share, AttnKind, OutputGate};
use normlab::train::config::BACKCOPY;
use normlab::train::{Status, TrainConfig};
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

/// The fixed first byte of the byte-level GPT (NUL: it never occurs in
/// the bundled text, so it is a token of its own, as a BOS is).
pub const BOS_BYTE: u32 = 0;

/// A Bigram-Backcopy setting: the GPT's depth and heads.
#[derive(Clone, Copy, Debug)]
struct Setting {
    name: &'static str,
    layers: usize,
    heads: usize,
}

/// The settings (quick: the first only).
const SETTINGS: [Setting; 2] = [
    Setting {
        name: "1 layer, 1 head",
        layers: 1,
        heads: 1,
    },
    Setting {
        name: "2 layers, 2 heads",
        layers: 2,
        heads: 2,
    },
];

/// One design: the plain softmax, or one sink remover.
#[derive(Clone, Copy, Debug)]
struct Design {
    name: &'static str,
    gate: Option<OutputGate>,
    kind: AttnKind,
}

const fn design(name: &'static str, gate: Option<OutputGate>, kind: AttnKind) -> Design {
    Design { name, gate, kind }
}

/// The designs: the ungated softmax first, the lesson's gate second.
const DESIGNS: [Design; 6] = [
    design("softmax (no gate)", None, AttnKind::Softmax),
    design(
        "elementwise output gate",
        Some(OutputGate::Elementwise),
        AttnKind::Softmax,
    ),
    design(
        "headwise output gate",
        Some(OutputGate::Headwise),
        AttnKind::Softmax,
    ),
    design("sink logit", None, AttnKind::SinkLogit),
    design("sigmoid attention", None, AttnKind::Sigmoid),
    design("ReLU attention", None, AttnKind::Relu),
];

/// Bigram-Backcopy's training (Guo et al.'s AdamW with weight decay 1e-4,
/// no warm-up, schedule or clipping; a CPU-sized model and batch).
fn backcopy_base(a: &ExpArgs) -> Result<TrainConfig> {
    let mut c = full_gpt().with(|c| {
        c.data = Some(BACKCOPY.into());
        c.model.d_model = 64;
        c.model.hidden = 256;
        c.model.seq = 64;
        c.batch = 32;
        c.lr = 1e-3;
        c.weight_decay = 1e-4;
        c.warmup = 0;
        c.schedule = normlab::train::optim::ScheduleKind::Constant;
        c.clip = 0.0;
        c.steps = if a.quick { 1000 } else { 3000 };
    })?;
    c.steps = a.steps.unwrap_or(c.steps);
    c.shards = 1;
    c.log_every = (c.steps / 30).max(1);
    c.eval_every = (c.steps / 6).max(1);
    Ok(c)
}

/// The settings this run covers.
fn settings(a: &ExpArgs) -> Vec<Setting> {
    let n = if a.quick { 1 } else { SETTINGS.len() };
    SETTINGS[..n]
        .iter()
        .map(|s| Setting {
            layers: a.first_layers().unwrap_or(s.layers),
            ..*s
        })
        .collect()
}

/// Seeds per design: every seed for the ungated model and the lesson's
/// gate; quick runs the other removers on the first seed only.
fn design_seeds(a: &ExpArgs, i: usize) -> Vec<u64> {
    let seeds = a.seeds_or(3, 3);
    if a.quick && i >= 2 {
        seeds[..1].to_vec()
    } else {
        seeds
    }
}

fn backcopy_config(b: &TrainConfig, s: &Setting, d: &Design, seed: u64) -> Result<TrainConfig> {
    b.with(|c| {
        c.model.layers = s.layers;
        c.model.heads = s.heads;
        c.model.attn_gate = d.gate;
        c.model.attn_kind = d.kind;
        c.seed = seed;
    })
}

/// The byte-level GPT with a fixed first byte: full (or tiny with --quick)
/// with and without the elementwise gate, one seed.
fn text_configs(a: &ExpArgs) -> Result<Vec<TrainConfig>> {
    let mut b = if a.quick {
        tiny_gpt().with(|c| c.steps = 80)?
    } else {
        full_gpt()
    };
    if let Some(l) = a.first_layers() {
        b.model.layers = l;
    }
    b.bos_byte = Some(BOS_BYTE);
    b.shards = 1;
    b.seed = a.seeds_or(1, 1)[0];
    b.log_every = (b.steps / 20).max(1);
    b.eval_every = (b.steps / 10).max(1);
    [None, Some(OutputGate::Elementwise)]
        .into_iter()
        .map(|g| b.with(|c| c.model.attn_gate = g))
        .collect()
}

/// The first setting's run (1 layer, 1 head) with `gate` and `seed`, as
/// this chapter trains it (the cross-check chapter's C26 comparison).
pub(super) fn sink_config(a: &ExpArgs, gate: Option<OutputGate>, seed: u64) -> Result<TrainConfig> {
    let d = Design { gate, ..DESIGNS[0] };
    backcopy_config(&backcopy_base(a)?, &settings(a)[0], &d, seed)
}

/// A run's largest first-token share over (layer, head) at its last
/// logged step (NaN without sink measures).
pub(super) fn final_share(r: &RunResult) -> f64 {
    last_sinks(r).map_or(f64::NAN, top_share)
}

/// Setting x design x seed, then the byte-level GPT.
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let b = backcopy_base(a)?;
    let mut cfgs = Vec::new();
    for s in &settings(a) {
        for (i, d) in DESIGNS.iter().enumerate() {
            for seed in design_seeds(a, i) {
                cfgs.push(backcopy_config(&b, s, d, seed)?);
            }
        }
    }
    cfgs.extend(text_configs(a)?);
    Ok(runs::specs(cfgs))
}

/// The last logged sink measures of a run.
fn last_sinks(r: &RunResult) -> Option<&SinkStats> {
    r.metrics.iter().rev().find_map(|m| m.sinks.as_ref())
}

/// The largest first-token share over (layer, head) pairs.
fn top_share(s: &SinkStats) -> f64 {
    normlab::train::nan_max(s.top_share())
}

/// The sink measures of the head with the largest share: (block, head).
fn top_head(s: &SinkStats) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize, f64)> = None;
    for (b, heads) in s.head_share.iter().enumerate() {
        for (h, &v) in heads.iter().enumerate() {
            if best.is_none_or(|(_, _, m)| v > m) {
                best = Some((b, h, v));
            }
        }
    }
    best.map(|(b, h, _)| (b, h))
}

fn top(v: &[f64]) -> f64 {
    normlab::train::nan_max(v.iter().copied())
}

fn mean(v: impl IntoIterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.into_iter().collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// One (setting, design)'s measures over its seeds.
#[derive(Serialize)]
struct Cell {
    setting: &'static str,
    layers: usize,
    heads: usize,
    design: &'static str,
    gate: Option<&'static str>,
    attn_kind: &'static str,
    seeds: usize,
    /// The largest first-token share over (layer, head) at the end, per
    /// seed; its mean and std.
    share_by_seed: Vec<f64>,
    share: Option<f64>,
    share_std: Option<f64>,
    /// The same at the first logged step (the initial model).
    share_start: f64,
    /// Gu et al.'s Sink metric at the end (mean over seeds).
    sink_rate: f64,
    /// Massive activation at position 0 (largest block; mean over seeds).
    massive0: f64,
    /// The value drain of the head with the largest share (mean over seeds).
    value_drain: f64,
    /// Held-out loss: mean and std; on copy and bigram targets (means).
    eval_loss: Option<f64>,
    eval_std: Option<f64>,
    eval_copy: Option<f64>,
    eval_bigram: Option<f64>,
    status: &'static str,
}

fn cell(s: &Setting, d: &Design, g: &[&RunResult]) -> Cell {
    let sg = SeedGroup::of_runs(g.iter().copied());
    let ends: Vec<&SinkStats> = g.iter().filter_map(|r| last_sinks(r)).collect();
    let share_by_seed: Vec<f64> = ends.iter().map(|s| top_share(s)).collect();
    let (share, share_std) = mean_std(
        &share_by_seed
            .iter()
            .copied()
            .filter(|v| v.is_finite())
            .collect::<Vec<_>>(),
    );
    let start = g
        .iter()
        .filter_map(|r| r.metrics.iter().find_map(|m| m.sinks.as_ref()))
        .map(top_share);
    let drain = ends.iter().filter_map(|s| {
        let (b, h) = top_head(s)?;
        s.value_drain.get(b)?.get(h).copied()
    });
    let parts: Vec<[f64; 2]> = g.iter().filter_map(|r| r.summary.eval_loss_parts).collect();
    let part = |i: usize| (!parts.is_empty()).then(|| mean(parts.iter().map(|p| p[i])));
    Cell {
        setting: s.name,
        layers: s.layers,
        heads: s.heads,
        design: d.name,
        gate: d.gate.map(|x| x.name()),
        attn_kind: d.kind.name(),
        seeds: g.len(),
        share_by_seed,
        share,
        share_std,
        share_start: normlab::train::nan_max(start),
        sink_rate: mean(ends.iter().map(|s| s.sink_rate)),
        massive0: mean(
            ends.iter()
                .map(|s| normlab::train::nan_max(s.massive0.iter().copied())),
        ),
        value_drain: mean(drain),
        eval_loss: sg.mean,
        eval_std: sg.std,
        eval_copy: part(0),
        eval_bigram: part(1),
        status: sg.status.name(),
    }
}

/// The byte-level GPT's measures (one seed).
#[derive(Serialize)]
struct TextCell {
    design: &'static str,
    layers: usize,
    d_model: usize,
    steps: usize,
    /// Largest first-token share over (block, head) at the end.
    share: f64,
    uniform: f64,
    massive0: f64,
    eval_loss: Option<f64>,
    wall_seconds: f64,
    status: &'static str,
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

/// What one design did to a setting's sink (C26's decision rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effect {
    /// At most twice the uniform share, below the ungated share by more
    /// than the seed spread.
    Removed,
    /// Only below by more than the seed spread.
    Lowered,
    /// Neither.
    Kept,
    /// Diverged or no finite share.
    Unusable,
}

fn effect(base: &Cell, c: &Cell, uniform: f64) -> Effect {
    let (Some(s0), Some(s1)) = (base.share, c.share) else {
        return Effect::Unusable;
    };
    if c.status == Status::Diverged.name() || !s1.is_finite() {
        return Effect::Unusable;
    }
    let spread = 2.0
        * base
            .share_std
            .unwrap_or(0.0)
            .max(c.share_std.unwrap_or(0.0));
    match (s0 - s1 > spread, s1 <= 2.0 * uniform) {
        (true, true) => Effect::Removed,
        (true, false) => Effect::Lowered,
        _ => Effect::Kept,
    }
}

/// Whether the ungated model of a setting has a sink: a first-token share
/// of at least 0.3 in some (layer, head) at the end, on every seed.
fn has_sink(base: &Cell) -> bool {
    base.status != Status::Diverged.name()
        && !base.share_by_seed.is_empty()
        && base.share_by_seed.len() == base.seeds
        && base.share_by_seed.iter().all(|&v| v >= SINK_EPS)
}

/// C26 by its decision rule (claims.rs), with the evidence.
fn c26(cells: &[Cell], uniform: f64) -> (Verdict, String) {
    let mut parts = Vec::new();
    let (mut n, mut removed, mut moved, mut seeds) = (0, 0, 0, usize::MAX);
    let mut best: Vec<(&str, f64, &str)> = Vec::new();
    for s in SETTINGS {
        let of: Vec<&Cell> = cells.iter().filter(|c| c.setting == s.name).collect();
        let Some(base) = of.iter().find(|c| c.design == DESIGNS[0].name) else {
            continue;
        };
        let shares = base
            .share_by_seed
            .iter()
            .map(|v| f(*v, 3))
            .collect::<Vec<_>>()
            .join(", ");
        if !has_sink(base) {
            parts.push(format!(
                "{}: no sink on every seed (ungated largest first-token share by seed {shares}; uniform {})",
                s.name,
                f(uniform, 3)
            ));
            continue;
        }
        n += 1;
        seeds = seeds.min(base.seeds);
        // Designs by effect, then the lesson's gate against the ungated model.
        let mut by: [Vec<String>; 4] = Default::default();
        for c in of.iter().filter(|c| c.design != DESIGNS[0].name) {
            let e = effect(base, c, uniform);
            if c.design == DESIGNS[1].name {
                seeds = seeds.min(c.seeds);
                removed += usize::from(e == Effect::Removed);
                moved += usize::from(matches!(e, Effect::Removed | Effect::Lowered));
            }
            if let (Effect::Removed, Some(v)) = (e, c.share) {
                best.push((c.design, v, s.name));
            }
            let slot = match e {
                Effect::Removed => 0,
                Effect::Lowered => 1,
                Effect::Kept => 2,
                Effect::Unusable => 3,
            };
            by[slot].push(format!("{} {}", c.design, opt(c.share, 3)));
        }
        let mut said = format!(
            "{}: a sink on every seed ({} ± {}; by seed {shares}; uniform {})",
            s.name,
            opt(base.share, 3),
            opt(base.share_std, 3),
            f(uniform, 3)
        );
        for (list, what) in by.iter().zip([
            "removed by",
            "lowered, not removed, by",
            "not lowered beyond the seed spread by",
            "no usable share from",
        ]) {
            if !list.is_empty() {
                said.push_str(&format!("; {what} {}", list.join(", ")));
            }
        }
        if let Some(g) = of.iter().find(|c| c.design == DESIGNS[1].name) {
            said.push_str(&format!(
                "; with the elementwise gate the held-out loss is {} against {} (copy targets {} against {}), the massive activation at position 0 {}x against {}x the median, the sink head's value drain {} against {}",
                opt(g.eval_loss, 4),
                opt(base.eval_loss, 4),
                opt(g.eval_copy, 4),
                opt(base.eval_copy, 4),
                f(g.massive0, 1),
                f(base.massive0, 1),
                f(g.value_drain, 2),
                f(base.value_drain, 2)
            ));
        }
        parts.push(said);
    }
    let v = if n == 0 {
        Verdict::Inconclusive
    } else if removed == n && seeds >= 2 {
        Verdict::Holds
    } else if moved > 0 {
        Verdict::Partly
    } else {
        Verdict::DoesNotHold
    };
    best.sort_by(|a, b| a.1.total_cmp(&b.1));
    let best = best
        .first()
        .map(|(d, v, s)| format!(" The lowest share a remover left: {d}, {} ({s}).", f(*v, 3)))
        .unwrap_or_default();
    (
        v,
        format!(
            "The largest first-token share over (layer, head) at the end of training on Bigram-Backcopy, mean over seeds. {}.{best}",
            parts.join(". ")
        ),
    )
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let b = backcopy_base(a)?;
    let rs = runs::run_grid(a, grid(a)?, false, progress)?;
    let uniform = uniform_sink_share(b.model.seq);
    let mut cells = Vec::new();
    let mut panels = Vec::new();
    for s in &settings(a) {
        let mut series = vec![Series::new(
            "uniform attention",
            vec![(1.0, uniform), (b.steps as f64, uniform)],
        )];
        for d in &DESIGNS {
            let g: Vec<&RunResult> = rs
                .iter()
                .filter(|r| {
                    let m = &r.cfg.model;
                    r.cfg.backcopy()
                        && m.layers == s.layers
                        && m.heads == s.heads
                        && m.attn_gate == d.gate
                        && m.attn_kind == d.kind
                })
                .collect();
            if g.is_empty() {
                continue;
            }
            series.push(runs::group_series(d.name, &g, &|r| {
                r.metrics
                    .iter()
                    .filter_map(|m| Some((m.step as f64, top_share(m.sinks.as_ref()?))))
                    .collect()
            }));
            cells.push(cell(s, d, &g));
        }
        panels.push(
            LineChart::new(
                format!("Bigram-Backcopy, {}: largest first-token share", s.name),
                "step",
                "share",
                series,
            )
            .panel(),
        );
    }
    let texts: Vec<TextCell> = rs
        .iter()
        .filter(|r| r.cfg.bos_byte.is_some())
        .map(|r| {
            let s = last_sinks(r);
            TextCell {
                design: if r.cfg.model.attn_gate.is_some() {
                    DESIGNS[1].name
                } else {
                    DESIGNS[0].name
                },
                layers: r.cfg.model.layers,
                d_model: r.cfg.model.d_model,
                steps: r.summary.steps,
                share: s.map_or(f64::NAN, top_share),
                uniform: uniform_sink_share(r.cfg.model.seq),
                massive0: s.map_or(f64::NAN, |s| {
                    normlab::train::nan_max(s.massive0.iter().copied())
                }),
                eval_loss: r.summary.final_eval_loss,
                wall_seconds: r.summary.wall_seconds,
                status: r.summary.status.name(),
            }
        })
        .collect();
    let reals = real_models(a.quick)?;
    let mut table = Table::new(
        format!(
            "Bigram-Backcopy GPTs (d {}, seq {}, {} steps, batch {}, AdamW lr {}): largest first-token share over (layer, head) at the end (± std over seeds; uniform attention gives {})",
            b.model.d_model, b.model.seq, b.steps, b.batch, b.lr, f(uniform, 3)
        ),
        &["setting", "design", "seeds", "status", "share", "at step 1", "sink rate", "massive act. at pos. 0", "value drain", "held-out loss", "copy targets", "bigram targets"],
    );
    for c in &cells {
        table.row(vec![
            c.setting.to_string(),
            c.design.to_string(),
            c.seeds.to_string(),
            c.status.to_string(),
            format!("{} ± {}", opt(c.share, 3), opt(c.share_std, 3)),
            f(c.share_start, 3),
            f(c.sink_rate, 2),
            f(c.massive0, 1),
            f(c.value_drain, 2),
            format!("{} ± {}", opt(c.eval_loss, 4), opt(c.eval_std, 4)),
            opt(c.eval_copy, 4),
            opt(c.eval_bigram, 4),
        ]);
    }
    let mut text_table = Table::new(
        "byte-level GPT on the bundled text, every sequence starting with byte 0 (one seed; the verdict does not rest on it)",
        &["design", "blocks", "d", "steps", "status", "largest first-token share", "uniform", "massive act. at pos. 0", "held-out loss", "wall time (s)"],
    );
    for t in &texts {
        text_table.row(vec![
            t.design.to_string(),
            t.layers.to_string(),
            t.d_model.to_string(),
            t.steps.to_string(),
            t.status.to_string(),
            f(t.share, 3),
            f(t.uniform, 3),
            f(t.massive0, 1),
            opt(t.eval_loss, 4),
            f(t.wall_seconds, 0),
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
            json!({
                "model": "gpt",
                "data": BACKCOPY,
                "base": b.overrides(),
                "steps": b.steps,
                "settings": settings(a).iter().map(|s| json!({"name": s.name, "layers": s.layers, "heads": s.heads})).collect::<Vec<_>>(),
                "designs": DESIGNS.iter().map(|d| d.name).collect::<Vec<_>>(),
                "text_bos_byte": BOS_BYTE,
            }),
        ),
        a.seeds_or(3, 3),
    );
    out.figures.push(Figure::new("attention_sink", panels, 1));
    let (verdict, mut detail) = c26(&cells, uniform);
    let text = texts
        .iter()
        .map(|t| {
            format!(
                "{} {} after {} steps ({} s)",
                t.design,
                f(t.share, 3),
                t.steps,
                f(t.wall_seconds, 0)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    if !text.is_empty() {
        detail.push_str(&format!(
            " Byte-level GPT with a fixed first byte (largest first-token share; uniform {}): {text}.",
            f(texts[0].uniform, 3)
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
    if !real.is_empty() {
        detail.push_str(&format!(" Pretrained models: {real}."));
    }
    out.checks
        .push(ClaimCheck::new("C26", verdict, detail.clone()));
    out.conclusion = detail;
    out.data.insert("uniform".into(), json!(uniform));
    out.data.insert("sink_eps".into(), json!(SINK_EPS));
    out.data.insert("configs".into(), json!(cells));
    out.data.insert("text_gpt".into(), json!(texts));
    out.data.insert("real_models".into(), json!(reals));
    out.data.insert("runs".into(), runs::records(&rs));
    out.tables.push(table);
    out.tables.push(text_table);
    if !reals.is_empty() {
        out.tables.push(real_table);
    }
    Ok(out)
}
