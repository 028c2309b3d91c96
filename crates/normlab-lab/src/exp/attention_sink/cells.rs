//! attention-sink's per-design measures: a run's last sink measures, one
//! (setting, design)'s numbers over its seeds ([`Cell`]) and the byte-level
//! GPT's ([`TextCell`]).

use super::designs::{Design, Setting, DESIGNS};
use crate::sweep::{mean_std, RunResult, SeedGroup};
use normlab::model::sinks::SinkStats;
use normlab::nn::uniform_sink_share;
use serde::Serialize;

/// The last logged sink measures of a run.
pub(super) fn last_sinks(r: &RunResult) -> Option<&SinkStats> {
    r.metrics.iter().rev().find_map(|m| m.sinks.as_ref())
}

/// The largest first-token share over (layer, head) pairs.
pub(super) fn top_share(s: &SinkStats) -> f64 {
    normlab::train::nan_max(s.top_share())
}

/// The sink measures of the head with the largest share: (block, head).
pub(super) fn top_head(s: &SinkStats) -> Option<(usize, usize)> {
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

pub(super) fn top(v: &[f64]) -> f64 {
    normlab::train::nan_max(v.iter().copied())
}

pub(super) fn mean(v: impl IntoIterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.into_iter().collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// One (setting, design)'s measures over its seeds.
#[derive(Serialize)]
pub(super) struct Cell {
    pub(super) setting: &'static str,
    pub(super) layers: usize,
    pub(super) heads: usize,
    pub(super) design: &'static str,
    pub(super) gate: Option<&'static str>,
    pub(super) attn_kind: &'static str,
    pub(super) seeds: usize,
    /// The largest first-token share over (layer, head) at the end, per
    /// seed; its mean and std.
    pub(super) share_by_seed: Vec<f64>,
    pub(super) share: Option<f64>,
    pub(super) share_std: Option<f64>,
    /// The same at the first logged step (the initial model).
    pub(super) share_start: f64,
    /// Gu et al.'s Sink metric at the end (mean over seeds).
    pub(super) sink_rate: f64,
    /// Massive activation at position 0 (largest block; mean over seeds).
    pub(super) massive0: f64,
    /// The value drain of the head with the largest share (mean over seeds).
    pub(super) value_drain: f64,
    /// Held-out loss: mean and std; on copy and bigram targets (means).
    pub(super) eval_loss: Option<f64>,
    pub(super) eval_std: Option<f64>,
    pub(super) eval_copy: Option<f64>,
    pub(super) eval_bigram: Option<f64>,
    pub(super) status: &'static str,
}

pub(super) fn cell(s: &Setting, d: &Design, g: &[&RunResult]) -> Cell {
    cell_read(s, d, g, &top_share)
}

/// As [`cell`], the first-token share read from each run's sink measures
/// by `read`.
pub(super) fn cell_read(
    s: &Setting,
    d: &Design,
    g: &[&RunResult],
    read: &dyn Fn(&SinkStats) -> f64,
) -> Cell {
    let sg = SeedGroup::of_runs(g.iter().copied());
    let ends: Vec<&SinkStats> = g.iter().filter_map(|r| last_sinks(r)).collect();
    let share_by_seed: Vec<f64> = ends.iter().map(|s| read(s)).collect();
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
        .map(read);
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
pub(super) struct TextCell {
    pub(super) design: &'static str,
    pub(super) layers: usize,
    pub(super) d_model: usize,
    pub(super) steps: usize,
    /// Largest first-token share over (block, head) at the end.
    pub(super) share: f64,
    pub(super) uniform: f64,
    pub(super) massive0: f64,
    pub(super) eval_loss: Option<f64>,
    pub(super) wall_seconds: f64,
    pub(super) status: &'static str,
}

/// The byte-level GPT's runs (those with a fixed first byte).
pub(super) fn text_cells(rs: &[RunResult]) -> Vec<TextCell> {
    rs.iter()
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
        .collect()
}
