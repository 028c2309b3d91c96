//! warmup (claims C14, C16): does warm-up rescue Post-LN? The GPT on text,
//! Post-LN and Pre-LN, several peak learning rates, with and without
//! warm-up (constant learning rate after it): loss curves, status, and the
//! gradient norm at the start of training.

use super::runs::{self, cfg, gpt_base, grid_settings, lrs_json, mean_curve, merge, train_curve};
use super::{num, result, ExpArgs, ExpFlag, ExpResult, Experiment, Progress};
use crate::error::Result;
use crate::nn::Placement;
use crate::present::{f, opt, opt_step, Figure, LineChart, Series, Table};
use crate::sweep::{RunResult, RunSpec, SeedGroup};
use serde::Serialize;
use serde_json::json;

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "warmup",
    question: "Does warm-up rescue Post-LN?",
    flags: &[
        ExpFlag::Placements,
        ExpFlag::Lrs,
        ExpFlag::Warmups,
        ExpFlag::Steps,
        ExpFlag::Seeds,
        ExpFlag::Seed,
        ExpFlag::Jobs,
        ExpFlag::Layers,
    ],
    run,
    grid: Some(grid),
};

/// The grid's axes.
struct Settings {
    placements: Vec<Placement>,
    lrs: Vec<f32>,
    warmups: Vec<usize>,
    steps: usize,
    seeds: Vec<u64>,
}

fn settings(a: &ExpArgs) -> Settings {
    Settings {
        placements: a
            .placements
            .clone()
            .unwrap_or(vec![Placement::Post, Placement::Pre]),
        lrs: a.lrs.clone().unwrap_or(if a.quick {
            vec![1e-3, 1e-2]
        } else {
            vec![1e-3, 3e-3, 1e-2]
        }),
        warmups: a
            .warmups
            .clone()
            .unwrap_or(if a.quick { vec![0, 30] } else { vec![0, 100] }),
        steps: a.steps_or(150, 1000),
        seeds: a.seeds_or(1, 2),
    }
}

/// GPT: placement x lr x warm-up x seed, constant lr after warm-up.
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let s = settings(a);
    let base = gpt_base(a);
    let mut cfgs = Vec::new();
    for &p in &s.placements {
        for &lr in &s.lrs {
            for &w in &s.warmups {
                for &seed in &s.seeds {
                    cfgs.push(cfg(merge(
                        &base,
                        json!({"placement": p.name(), "lr": lr, "warmup": w, "steps": s.steps, "seed": seed, "log_every": 5, "schedule": "constant", "shards": 1}),
                    ))?);
                }
            }
        }
    }
    Ok(runs::specs(cfgs))
}

/// One (placement, lr, warm-up) cell.
#[derive(Serialize)]
struct Cell {
    placement: &'static str,
    lr: serde_json::Value,
    warmup: usize,
    status: &'static str,
    final_eval_loss: Option<f64>,
    grad_norm_step1: f64,
    grad_norm_early_mean: f64,
    diverged_at_step: Option<usize>,
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let s = settings(a);
    let base = gpt_base(a);
    let rs = runs::run_grid(a, grid(a)?, false, progress)?;
    let steps = s.steps;
    let mut table = Table::new(
        format!(
            "GPT on text, {steps} steps, constant lr after warm-up, {} seed(s)",
            s.seeds.len()
        ),
        &[
            "placement",
            "peak lr",
            "warm-up",
            "status",
            "final eval loss",
            "grad norm at step 1",
            "mean grad norm, first 10%",
            "diverged at step",
        ],
    );
    let early = (steps / 10).max(1);
    let last_lr = s.lrs[s.lrs.len() - 1];
    let mut loss_panels = Vec::new();
    let mut gn_series = Vec::new();
    let mut cells = Vec::new();
    for &lr in &s.lrs {
        let mut series = Vec::new();
        for &p in &s.placements {
            for &w in &s.warmups {
                let g: Vec<&RunResult> = rs
                    .iter()
                    .filter(|r| r.cfg.lr == lr && r.cfg.model.placement == p && r.cfg.warmup == w)
                    .collect();
                let sg = SeedGroup::of_runs(g.iter().copied());
                let gn1 = g
                    .iter()
                    .filter_map(|r| r.metrics.first().map(|m| m.grad_norm))
                    .sum::<f64>()
                    / g.len() as f64;
                let gn_early: Vec<f64> = g
                    .iter()
                    .flat_map(|r| {
                        r.metrics
                            .iter()
                            .filter(|m| m.step <= early)
                            .map(|m| m.grad_norm)
                    })
                    .collect();
                let gn_mean = gn_early.iter().sum::<f64>() / gn_early.len().max(1) as f64;
                table.row(vec![
                    p.name().into(),
                    format!("{lr}"),
                    w.to_string(),
                    sg.label(),
                    opt(sg.mean, 3),
                    f(gn1, 3),
                    f(gn_mean, 3),
                    opt_step(sg.diverged_at),
                ]);
                cells.push(Cell {
                    placement: p.name(),
                    lr: num(lr),
                    warmup: w,
                    status: sg.status.name(),
                    final_eval_loss: sg.mean,
                    grad_norm_step1: gn1,
                    grad_norm_early_mean: gn_mean,
                    diverged_at_step: sg.diverged_at,
                });
                let name = format!("{} warm-up {w}", p.name());
                series.push(Series::new(name.clone(), mean_curve(&g, &train_curve)));
                if lr == last_lr {
                    gn_series.push(Series::new(
                        name,
                        mean_curve(&g, &|r: &RunResult| {
                            r.metrics
                                .iter()
                                .filter(|m| m.step <= early * 3)
                                .map(|m| (m.step as f64, m.grad_norm))
                                .collect()
                        }),
                    ));
                }
            }
        }
        loss_panels
            .push(LineChart::new(format!("peak lr {lr}"), "step", "training loss", series).panel());
    }
    loss_panels.push(
        LineChart::new(
            format!("grad norm early in training, peak lr {last_lr}"),
            "step",
            "global grad norm",
            gn_series,
        )
        .log_y()
        .panel(),
    );
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "gpt", "base": base, "placements": s.placements.iter().map(|p| p.name()).collect::<Vec<_>>(), "lrs": lrs_json(&s.lrs), "warmups": s.warmups, "steps": steps}),
        ),
        s.seeds.clone(),
    );
    let parts: Vec<String> = cells
        .iter()
        .map(|c| {
            format!(
                "{} lr {} warm-up {}: {}{}",
                c.placement,
                c.lr,
                c.warmup,
                c.status,
                c.final_eval_loss
                    .map(|v| format!(" ({})", f(v, 3)))
                    .unwrap_or_default()
            )
        })
        .collect();
    out.data.insert("configs".into(), json!(cells));
    out.data.insert("runs".into(), runs::records(&rs));
    out.figures.push(Figure::new("warmup", loss_panels, 2));
    out.conclusion = format!("{}.", parts.join("; "));
    out.tables.push(table);
    Ok(out)
}
