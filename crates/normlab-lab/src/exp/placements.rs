//! placements (claims C19, C22): every placement preset side by side, on the
//! toy net (depth 30) and the GPT, at a low and a high learning rate: status,
//! final held-out loss, and the spread of per-block gradient norms at
//! initialisation and at the end.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{num, result, ExpResult, Experiment, Progress};
use super::runs::{self, full_gpt, grid_settings, tiny_gpt};
use crate::present::{f, grid as heat, opt, Figure, Table};
use crate::sweep::{RunResult, RunSpec, SeedGroup};
use normlab::error::Result;
use normlab::kernels::norm::NormKind;
use normlab::model::ModelKind;
use normlab::nn::Placement;
use normlab::train::Status;
use serde::Serialize;
use serde_json::json;

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "placements",
    question: "All placements side by side: which train, at which learning rates?",
    flags: &[
        ExpFlag::Placements,
        ExpFlag::Lrs,
        ExpFlag::Layers,
        ExpFlag::Grid,
        ExpFlag::Model,
    ],
    run,
    grid: Some(grid),
    hidden_training: None,
    quick_decides: false,
};

/// The grid's axes.
struct Settings {
    presets: Vec<Placement>,
    lrs: Vec<f32>,
    seeds: Vec<u64>,
    models: Vec<ModelKind>,
}

fn settings(a: &ExpArgs) -> Settings {
    Settings {
        presets: a.placements.clone().unwrap_or(Placement::ALL.to_vec()),
        lrs: a.lrs.clone().unwrap_or(vec![1e-3, 1e-2]),
        seeds: a.seeds_or(1, 2),
        models: match a.model {
            Some(m) => vec![m],
            None => vec![ModelKind::Toy, ModelKind::Gpt],
        },
    }
}

/// Model x preset x lr x seed (the `none` preset keeps the default norm
/// kind in its config, though it has no norms).
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let s = settings(a);
    let mut cfgs = Vec::new();
    for &m in &s.models {
        let (base, steps) = match (m, a.quick) {
            (ModelKind::Toy, true) => (
                runs::toy(|c| {
                    c.model.layers = 6;
                    c.eval_sequences = 64;
                })?,
                100,
            ),
            (ModelKind::Toy, false) => (runs::toy(|c| c.model.layers = 30)?, 3000),
            (ModelKind::Gpt, true) => (tiny_gpt(), 100),
            (ModelKind::Gpt, false) => (full_gpt(), 1000),
        };
        let steps = a.steps.unwrap_or(steps);
        for &p in &s.presets {
            for &lr in &s.lrs {
                for &seed in &s.seeds {
                    cfgs.push(base.with(|c| {
                        c.model.placement = p;
                        c.lr = lr;
                        c.steps = steps;
                        c.seed = seed;
                        c.shards = 1;
                        c.eval_every = (steps / 5).max(1);
                        if let Some(l) = a.first_layers() {
                            c.model.layers = l;
                        }
                        if p == Placement::None {
                            c.model.norm = NormKind::LayerNorm;
                        }
                    })?);
                }
            }
        }
    }
    Ok(runs::specs(cfgs))
}

/// max / min over blocks of the per-block gradient norm (NaN when a block's
/// norm is zero or not finite).
fn spread(v: &[f64]) -> f64 {
    let (mn, mx) = v
        .iter()
        .fold((f64::INFINITY, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
    if mn > 0.0 && v.iter().all(|x| x.is_finite()) {
        mx / mn
    } else {
        f64::NAN
    }
}

/// One (model, preset, lr) cell.
#[derive(Serialize)]
struct Cell {
    model: String,
    placement: &'static str,
    lr: serde_json::Value,
    status: &'static str,
    final_eval_loss: Option<f64>,
    final_eval_loss_std: Option<f64>,
    grad_spread_init: f64,
    grad_spread_end: f64,
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let s = settings(a);
    let rs = runs::run_grid(a, grid(a)?, false, progress)?;
    let mut table = Table::new(
        format!("Every placement preset, {} seed(s); grad-norm spread = max / min over blocks of the per-block gradient norm", s.seeds.len()),
        &["model", "placement", "lr", "status", "final eval loss", "spread at init", "spread at end"],
    );
    let mut cells = Vec::new();
    let mut heat_panels = Vec::new();
    for &m in &s.models {
        let mut grid_cells = Vec::new();
        for &p in &s.presets {
            let mut row = Vec::new();
            for &lr in &s.lrs {
                let g: Vec<&RunResult> = rs
                    .iter()
                    .filter(|r| {
                        r.cfg.model.kind == m && r.cfg.model.placement == p && r.cfg.lr == lr
                    })
                    .collect();
                let sg = SeedGroup::of_runs(g.iter().copied());
                let init = g
                    .iter()
                    .filter_map(|r| r.metrics.first().map(|x| spread(&x.grad_norm_per_block)))
                    .sum::<f64>()
                    / g.len() as f64;
                let end = g
                    .iter()
                    .filter_map(|r| {
                        r.metrics
                            .iter()
                            .rev()
                            .find(|x| !x.grad_norm_per_block.is_empty())
                            .map(|x| spread(&x.grad_norm_per_block))
                    })
                    .sum::<f64>()
                    / g.len() as f64;
                table.row(vec![
                    m.to_string(),
                    p.name().into(),
                    format!("{lr}"),
                    sg.label(),
                    opt(sg.mean, 3),
                    f(init, 2),
                    f(end, 2),
                ]);
                cells.push(Cell {
                    model: m.to_string(),
                    placement: p.name(),
                    lr: num(lr),
                    status: sg.status.name(),
                    final_eval_loss: sg.mean,
                    final_eval_loss_std: sg.std,
                    grad_spread_init: init,
                    grad_spread_end: end,
                });
                row.push(Some(sg));
            }
            grid_cells.push(row);
        }
        heat_panels.push(heat::heat_panel(
            format!("{m}"),
            ("learning rate", "placement"),
            s.lrs.iter().map(|v| format!("lr {v}")).collect(),
            s.presets.iter().map(|p| p.name().to_string()).collect(),
            &grid_cells,
        ));
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"models": s.models.iter().map(|m| m.to_string()).collect::<Vec<_>>(), "placements": s.presets.iter().map(|p| p.name()).collect::<Vec<_>>(), "lrs": s.lrs}),
        ),
        s.seeds.clone(),
    );
    out.conclusion = conclusion(&s, &cells);
    out.checks.push(check_c19(&cells));
    out.data.insert("configs".into(), json!(cells));
    out.data.insert("runs".into(), runs::records(&rs));
    out.figures
        .push(Figure::new("placements", heat_panels, s.models.len()));
    out.tables.push(table);
    Ok(out)
}

/// The answer per model and lr: which presets train, the best one and its
/// lead over the runner-up beside the seed spread.
fn conclusion(s: &Settings, cells: &[Cell]) -> String {
    let converged = Status::Converged.name();
    let mut parts = Vec::new();
    for &m in &s.models {
        for &lr in &s.lrs {
            let here: Vec<&Cell> = cells
                .iter()
                .filter(|c| c.model == m.to_string() && c.lr == num(lr))
                .collect();
            let mut ok: Vec<&Cell> = here
                .iter()
                .copied()
                .filter(|c| c.status == converged && c.final_eval_loss.is_some())
                .collect();
            ok.sort_by(|a, b| {
                a.final_eval_loss
                    .unwrap()
                    .total_cmp(&b.final_eval_loss.unwrap())
            });
            let failed: Vec<String> = here
                .iter()
                .filter(|c| c.status != converged)
                .map(|c| format!("{} {}", c.placement, c.status))
                .collect();
            let mut part = format!(
                "{m} at lr {lr}: {} of {} presets train{}",
                ok.len(),
                here.len(),
                if failed.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", failed.join(", "))
                }
            );
            if let Some(best) = ok.first() {
                let sd = ok
                    .iter()
                    .filter_map(|c| c.final_eval_loss_std)
                    .fold(0f64, f64::max);
                part.push_str(&format!(
                    "; best {} ({})",
                    best.placement,
                    opt(best.final_eval_loss, 3)
                ));
                if let Some(next) = ok.get(1) {
                    let lead = next.final_eval_loss.unwrap() - best.final_eval_loss.unwrap();
                    part.push_str(&format!(
                        ", {} nats ahead of {} ({})",
                        f(lead, 3),
                        next.placement,
                        if s.seeds.len() < 2 {
                            "one seed: no spread measured".to_string()
                        } else if lead > 2.0 * sd {
                            format!("beyond the seed spread, std up to {}", f(sd, 3))
                        } else {
                            format!("within the seed spread, std up to {}", f(sd, 3))
                        }
                    ));
                }
            }
            parts.push(part);
        }
    }
    format!("{}.", parts.join(". "))
}

/// C19: where Post-LN fails, do DeepNorm and Sandwich train?
fn check_c19(cells: &[Cell]) -> ClaimCheck {
    let converged = Status::Converged.name();
    let mut rescued = 0;
    let mut failing = 0;
    let mut parts = Vec::new();
    for post in cells.iter().filter(|c| c.placement == "post") {
        let other = |p: &str| {
            cells
                .iter()
                .find(|c| c.model == post.model && c.lr == post.lr && c.placement == p)
        };
        let show = |c: Option<&Cell>| {
            c.map_or("-".to_string(), |c| {
                format!("{} {}", c.status, opt(c.final_eval_loss, 3))
            })
        };
        if post.status != converged {
            failing += 1;
            if other("deepnorm").is_some_and(|c| c.status == converged) {
                rescued += 1;
            }
        }
        parts.push(format!(
            "{} lr {}: post {}, deepnorm {}, sandwich {}, pre {}",
            post.model,
            post.lr,
            show(Some(post)),
            show(other("deepnorm")),
            show(other("sandwich")),
            show(other("pre"))
        ));
    }
    ClaimCheck::new(
        "C19",
        Verdict::of_count(rescued, failing),
        format!(
            "{}. Post-LN failed in {failing} cell(s), DeepNorm trained in {rescued} of them (lesson: DeepNorm makes even 1000-layer Post-LN trainable).",
            parts.join("; ")
        ),
    )
}
