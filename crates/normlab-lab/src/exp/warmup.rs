//! warmup (claims C14, C16): does warm-up rescue Post-LN? The GPT on text,
//! Post-LN and Pre-LN, several peak learning rates, with and without
//! warm-up (constant learning rate after it): loss curves, status, the
//! gradient norm at the start, each block's gradient at initialisation and
//! the bottom/top block gradient ratio at the end. Full setting: 8 blocks,
//! the depth where Post-LN trouble shows on the bundled text (at 4 blocks,
//! normlab's default GPT, Post-LN trains at every rate tried).

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{num, result, ExpResult, Experiment, Progress};
use super::runs::{self, gpt_base, grid_settings, group_series, lrs_json, mean_curve, train_curve};
use crate::present::{f, opt, opt_step, Figure, LineChart, Series, Table};
use crate::sweep::{RunResult, RunSpec, SeedGroup};
use normlab::error::Result;
use normlab::nn::Placement;
use normlab::train::optim::ScheduleKind;
use normlab::train::TrainConfig;
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
        ExpFlag::Grid,
        ExpFlag::Layers,
    ],
    run,
    grid: Some(grid),
    hidden_training: None,
    quick_decides: false,
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
        steps: a.steps_or(150, 500),
        seeds: a.seeds_or(1, 2),
    }
}

/// The GPT: tiny with --quick, else 8 blocks (or --layers).
fn base(a: &ExpArgs) -> TrainConfig {
    let mut b = gpt_base(a);
    if !(a.quick || a.layers.is_some()) {
        b.model.layers = 8;
    }
    b
}

/// GPT: placement x lr x warm-up x seed, constant lr after warm-up.
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let s = settings(a);
    let base = base(a);
    let mut cfgs = Vec::new();
    for &p in &s.placements {
        for &lr in &s.lrs {
            for &w in &s.warmups {
                for &seed in &s.seeds {
                    cfgs.push(base.with(|c| {
                        c.model.placement = p;
                        c.lr = lr;
                        c.warmup = w;
                        c.steps = s.steps;
                        c.seed = seed;
                        c.log_every = 5;
                        c.schedule = ScheduleKind::Constant;
                        c.shards = 1;
                    })?);
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
    final_eval_loss_std: Option<f64>,
    grad_norm_step1: f64,
    grad_norm_early_mean: f64,
    diverged_at_step: Option<usize>,
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let s = settings(a);
    let base = base(a);
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
                    final_eval_loss_std: sg.std,
                    grad_norm_step1: gn1,
                    grad_norm_early_mean: gn_mean,
                    diverged_at_step: sg.diverged_at,
                });
                let name = format!("{} warm-up {w}", p.name());
                series.push(group_series(name.clone(), &g, &train_curve));
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
            json!({"model": "gpt", "base": base.overrides(), "placements": s.placements.iter().map(|p| p.name()).collect::<Vec<_>>(), "lrs": lrs_json(&s.lrs), "warmups": s.warmups, "steps": steps}),
        ),
        s.seeds.clone(),
    );
    out.conclusion = conclusion(&s, &cells);
    out.data.insert("configs".into(), json!(cells));
    out.data.insert("runs".into(), runs::records(&rs));
    out.figures.push(Figure::new("warmup", loss_panels, 2));
    out.checks.extend(checks(&s, &rs));
    out.tables.push(table);
    Ok(out)
}

/// The answer: per placement and peak lr, what the longest warm-up changes
/// (final loss, status) against none, beside the seed spread.
fn conclusion(s: &Settings, cells: &[Cell]) -> String {
    let (Some(&w0), Some(&wl)) = (s.warmups.iter().min(), s.warmups.iter().max()) else {
        return String::new();
    };
    if w0 == wl {
        return format!("Only warm-up {w0} was run: nothing to compare.");
    }
    let cell = |p: &str, lr: f32, w: usize| {
        cells
            .iter()
            .find(|c| c.placement == p && c.lr == num(lr) && c.warmup == w)
    };
    let mut parts = Vec::new();
    let mut spread: f64 = 0.0;
    for &p in &s.placements {
        let each: Vec<String> = s
            .lrs
            .iter()
            .filter_map(|&lr| {
                let (a, b) = (cell(p.name(), lr, w0)?, cell(p.name(), lr, wl)?);
                spread = spread
                    .max(a.final_eval_loss_std.unwrap_or(0.0))
                    .max(b.final_eval_loss_std.unwrap_or(0.0));
                let change = match (a.final_eval_loss, b.final_eval_loss) {
                    (Some(x), Some(y)) => format!("{:+.3}", y - x),
                    _ => "-".into(),
                };
                let status = if a.status == b.status {
                    String::new()
                } else {
                    format!(", {} -> {}", a.status, b.status)
                };
                Some(format!("{change} at lr {lr}{status}"))
            })
            .collect();
        parts.push(format!("{}'s final loss by {}", p.name(), each.join(", ")));
    }
    format!(
        "{wl} warm-up steps (against none) change {} ({}).",
        parts.join("; "),
        if s.seeds.len() < 2 {
            "one seed: no spread measured".to_string()
        } else {
            format!("seed std up to {}", f(spread, 3))
        }
    )
}

/// Mean over blocks of the per-block gradient norm at the first logged
/// step, and the bottom/top ratio at the last.
fn block_grads(r: &RunResult) -> Option<(f64, f64)> {
    let first = r
        .metrics
        .first()
        .filter(|m| !m.grad_norm_per_block.is_empty())?;
    let last = r
        .metrics
        .iter()
        .rev()
        .find(|m| !m.grad_norm_per_block.is_empty())?;
    let g = &first.grad_norm_per_block;
    let e = &last.grad_norm_per_block;
    Some((
        g.iter().sum::<f64>() / g.len() as f64,
        e[0] / e[e.len() - 1],
    ))
}

/// C14 on the GPT (warm-up rescues Post-LN; Pre-LN needs none) and C16
/// (Post-LN stalls at the unigram entropy; its blocks' gradients at init;
/// the bottom/top ratio at the end).
fn checks(s: &Settings, rs: &[RunResult]) -> Vec<ClaimCheck> {
    use normlab::train::Status;
    let cell = |p: Placement, lr: f32, w: usize| {
        let g: Vec<&RunResult> = rs
            .iter()
            .filter(|r| r.cfg.model.placement == p && r.cfg.lr == lr && r.cfg.warmup == w)
            .collect();
        (!g.is_empty()).then(|| (SeedGroup::of_runs(g.iter().copied()), g))
    };
    let longest = s.warmups.iter().copied().max().unwrap_or(0);
    let name = |g: &SeedGroup| format!("{} {}", g.status.name(), opt(g.mean, 3));
    // C14.
    let mut rescued = 0;
    let mut failing = 0;
    let mut parts = Vec::new();
    for &lr in &s.lrs {
        if let (Some((w0, _)), Some((wl, _)), Some((pre0, _))) = (
            cell(Placement::Post, lr, 0),
            cell(Placement::Post, lr, longest),
            cell(Placement::Pre, lr, 0),
        ) {
            if w0.status != Status::Converged {
                failing += 1;
                if wl.status == Status::Converged {
                    rescued += 1;
                }
            }
            parts.push(format!(
                "lr {lr}: Post-LN {} without and {} with {longest} warm-up steps, Pre-LN {} without",
                name(&w0),
                name(&wl),
                name(&pre0)
            ));
        }
    }
    let pre_smooth = s
        .lrs
        .iter()
        .filter_map(|&lr| cell(Placement::Pre, lr, 0))
        .all(|(g, _)| g.status == Status::Converged);
    let c14 = ClaimCheck::new(
        "C14",
        // The claim is the rescue: Pre-LN training without warm-up (C13's
        // subject) can qualify a rescue, never stand in for one.
        if rescued == 0 {
            Verdict::DoesNotHold
        } else if rescued == failing && pre_smooth {
            Verdict::Holds
        } else {
            Verdict::Partly
        },
        format!(
            "GPT: {}. Post-LN failed without warm-up at {failing} learning rate(s) and warm-up rescued {rescued} of them{}; Pre-LN {} without warm-up.",
            parts.join("; "),
            if failing == 0 {
                " (the failure warm-up is said to cure does not occur at these rates)"
            } else {
                ""
            },
            if pre_smooth { "trained at every rate" } else { "failed somewhere" }
        ),
    );
    // C16.
    let unigram = rs.first().map_or(f64::NAN, |r| r.summary.unigram_entropy);
    let stalled: Vec<String> = s
        .lrs
        .iter()
        .flat_map(|&lr| s.warmups.iter().map(move |&w| (lr, w)))
        .filter_map(|(lr, w)| {
            let (g, _) = cell(Placement::Post, lr, w)?;
            (g.status == Status::Stalled)
                .then(|| format!("lr {lr} warm-up {w} ({})", opt(g.mean, 3)))
        })
        .collect();
    let init_grad = |p: Placement| -> Option<f64> {
        let v: Vec<f64> = rs
            .iter()
            .filter(|r| r.cfg.model.placement == p)
            .filter_map(|r| block_grads(r).map(|b| b.0))
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let end_ratio: Vec<f64> = rs
        .iter()
        .filter(|r| r.cfg.model.placement == Placement::Post && r.summary.status == Status::Stalled)
        .filter_map(|r| block_grads(r).map(|b| b.1))
        .collect();
    let (gpost, gpre) = (init_grad(Placement::Post), init_grad(Placement::Pre));
    let small_init = gpost.zip(gpre).is_some_and(|(a, b)| a < 0.2 * b);
    // The lesson's headline cell: lr 3e-3 with warm-up.
    let headline =
        cell(Placement::Post, 3e-3, longest).is_some_and(|(g, _)| g.status == Status::Stalled);
    let c16 = ClaimCheck::new(
        "C16",
        if headline && small_init {
            Verdict::Holds
        } else if !stalled.is_empty() || small_init {
            Verdict::Partly
        } else {
            Verdict::DoesNotHold
        },
        format!(
            "Post-LN stalled at the unigram entropy ({}) in {} (lesson: at lr 3e-3 with warm-up, and at 1e-2 and 1e-3 without); at initialisation a Post-LN block's gradient averages {} against Pre-LN's {} ({} of it; lesson ~0.017 vs ~1.6, 1%); at the end of the stalled runs the bottom block's gradient is {} of the top's (lesson 6e-9).",
            f(unigram, 3),
            if stalled.is_empty() { "no cell".to_string() } else { stalled.join(", ") },
            gpost.map_or("-".into(), |v| f(v, 3)),
            gpre.map_or("-".into(), |v| f(v, 3)),
            gpost.zip(gpre).map_or("-".into(), |(a, b)| format!("{:.1}%", 100.0 * a / b)),
            if end_ratio.is_empty() {
                "-".to_string()
            } else {
                end_ratio.iter().map(|v| f(*v, 2)).collect::<Vec<_>>().join(", ")
            }
        ),
    );
    vec![c14, c16]
}
