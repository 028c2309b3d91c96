//! norm-kind (claims C10, C15): does the norm kind change quality? The GPT
//! on text with pre placement and each norm kind, several seeds: held-out
//! loss curves and final loss against the seed-to-seed spread, and the step
//! time of each.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{num, result, ExpResult, Experiment, Progress};
use super::runs::{self, eval_curve, gpt_base, grid_settings, group_series};
use crate::bench::compare;
use crate::present::{f, opt, Figure, LineChart, Table};
use crate::sweep::{group_by, RunSpec, SeedGroup};
use normlab::error::Result;
use normlab::kernels::norm::NormKind;
use normlab::nn::Placement;
use serde::Serialize;
use serde_json::{json, Map};

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "norm-kind",
    question: "Does the norm kind change quality?",
    flags: &[ExpFlag::Norms, ExpFlag::Grid, ExpFlag::Layers, ExpFlag::Lrs],
    run,
    grid: Some(grid),
    hidden_training: None,
    quick_decides: false,
};

/// The grid's axes.
struct Settings {
    norms: Vec<NormKind>,
    steps: usize,
    seeds: Vec<u64>,
    lr: f32,
}

fn settings(a: &ExpArgs) -> Settings {
    Settings {
        norms: a.norms.clone().unwrap_or(vec![
            NormKind::LayerNorm,
            NormKind::RmsNorm,
            NormKind::ZRmsNorm,
            NormKind::ScaleNorm,
        ]),
        steps: a.steps_or(150, 1000),
        seeds: a.seed_list(2),
        lr: a.lr_or(1e-3),
    }
}

/// GPT, pre placement: norm kind x seed.
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let s = settings(a);
    let base = gpt_base(a);
    let mut cfgs = Vec::new();
    for &n in &s.norms {
        for &seed in &s.seeds {
            cfgs.push(base.with(|c| {
                c.model.norm = n;
                c.model.placement = Placement::Pre;
                c.steps = s.steps;
                c.seed = seed;
                c.lr = s.lr;
                c.shards = 1;
            })?);
        }
    }
    Ok(runs::specs(cfgs))
}

/// One norm kind's result.
#[derive(Serialize)]
struct ByNorm {
    final_eval_loss_mean: Option<f64>,
    final_eval_loss_std: Option<f64>,
    best_eval_loss: Option<f64>,
    ms_per_step: f64,
    speed_vs_layernorm: Option<crate::bench::compare::Ratio>,
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let s = settings(a);
    let base = gpt_base(a);
    let rs = runs::run_grid(a, grid(a)?, false, progress)?;
    let (steps, lr) = (s.steps, s.lr);
    let groups = group_by(&rs, |r| r.cfg.model.norm);
    // Step times of every kind, interleaved step by step, after the grid
    // (its parallel runs share the machine), 1 thread.
    let rounds = if a.quick { 6 } else { 30 };
    let timed: Vec<(&str, normlab::train::TrainConfig)> = groups
        .iter()
        .map(|(n, g)| (n.name(), g[0].cfg.clone()))
        .collect();
    let times = compare::train_steps(&timed, 1, rounds)?;
    let mut table = Table::new(
        format!("GPT on text, pre placement, lr {lr}, {steps} steps, {} seeds; step time: {rounds} interleaved steps of each kind after the runs (1 thread), speed against layernorm as the median and quartiles of the per-round ratio", s.seeds.len()),
        &["norm", "status", "final eval loss (mean ± std)", "best eval loss", "ms/step", "speed vs layernorm"],
    );
    let ln_index = groups.iter().position(|(n, _)| *n == NormKind::LayerNorm);
    let mut series = Vec::new();
    let mut by_norm: Vec<(NormKind, ByNorm)> = Vec::new();
    for (i, (norm, g)) in groups.iter().enumerate() {
        let sg = SeedGroup::of_runs(g.iter().copied());
        let ms = times.median(i) * 1e3;
        let vs = ln_index.filter(|&j| j != i).map(|j| times.ratio(j, i));
        table.row(vec![
            norm.name().into(),
            sg.label(),
            format!("{} ± {}", opt(sg.mean, 4), opt(sg.std, 4)),
            opt(sg.best, 4),
            f(ms, 2),
            vs.as_ref().map_or("-".into(), |r| {
                format!("{:.2}x ({:.2}-{:.2})", r.median, r.q1, r.q3)
            }),
        ]);
        series.push(group_series(norm.name(), g, &eval_curve));
        by_norm.push((
            *norm,
            ByNorm {
                final_eval_loss_mean: sg.mean,
                final_eval_loss_std: sg.std,
                best_eval_loss: sg.best,
                ms_per_step: ms,
                speed_vs_layernorm: vs,
            },
        ));
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "gpt", "base": base.overrides(), "norms": s.norms.iter().map(|n| n.name()).collect::<Vec<_>>(), "placement": "pre", "lr": num(lr), "steps": steps, "timing_rounds": rounds}),
        ),
        s.seeds.clone(),
    );
    let mut summary = Map::new();
    for (n, b) in &by_norm {
        summary.insert(n.name().into(), json!(b));
    }
    out.data
        .insert("by_norm".into(), serde_json::Value::Object(summary));
    out.data.insert("runs".into(), runs::records(&rs));
    out.figures.push(Figure::new(
        "norm_kind",
        vec![LineChart::new(
            "held-out loss (mean over seeds)",
            "step",
            "eval loss",
            series,
        )
        .panel()],
        1,
    ));
    let mut ranked: Vec<(&str, f64, f64)> = by_norm
        .iter()
        .filter_map(|(n, b)| {
            Some((
                n.name(),
                b.final_eval_loss_mean?,
                b.final_eval_loss_std.unwrap_or(0.0),
            ))
        })
        .collect();
    ranked.sort_by(|x, y| x.1.total_cmp(&y.1));
    let spread =
        ranked.last().map(|l| l.1).unwrap_or(0.0) - ranked.first().map(|l| l.1).unwrap_or(0.0);
    let max_std = ranked.iter().map(|r| r.2).fold(0.0, f64::max);
    let speeds: Vec<String> = by_norm
        .iter()
        .filter_map(|(_, b)| b.speed_vs_layernorm.as_ref().map(|r| r.describe()))
        .collect();
    out.conclusion = format!(
        "Final held-out loss, best first: {}. The spread between kinds is {} nats against a seed-to-seed std of up to {}{}. Step time: {}.",
        ranked.iter().map(|r| format!("{} {}", r.0, f(r.1, 4))).collect::<Vec<_>>().join(", "),
        f(spread, 4),
        f(max_std, 4),
        if spread <= 2.0 * max_std { ": within seed noise at this budget" } else { "" },
        if speeds.is_empty() { "-".into() } else { speeds.join("; ") }
    );
    // C15: LayerNorm vs RMSNorm quality.
    let get = |k: NormKind| by_norm.iter().find(|(n, _)| *n == k).map(|(_, b)| b);
    if let (Some(ln), Some(rms)) = (get(NormKind::LayerNorm), get(NormKind::RmsNorm)) {
        if let (Some(a1), Some(b1)) = (ln.final_eval_loss_mean, rms.final_eval_loss_mean) {
            let sd = ln
                .final_eval_loss_std
                .unwrap_or(0.0)
                .max(rms.final_eval_loss_std.unwrap_or(0.0));
            let same = (a1 - b1).abs() <= (2.0 * sd).max(0.005);
            out.checks.push(ClaimCheck::new(
                "C15",
                if same { Verdict::Holds } else { Verdict::DoesNotHold },
                format!(
                    "GPT, {} seeds: LayerNorm {} vs RMSNorm {} held-out (difference {}, seed std up to {}; lesson 4.6266 vs 4.6263); {}.",
                    s.seeds.len(),
                    f(a1, 4),
                    f(b1, 4),
                    f((a1 - b1).abs(), 4),
                    f(sd, 4),
                    if same { "no difference beyond noise" } else { "a difference beyond the seed spread" }
                ),
            ));
        }
    }
    out.tables.push(table);
    Ok(out)
}
