//! lr-sensitivity (claims C13, C14): how sensitive are Pre-LN and Post-LN to
//! the learning rate, with and without warm-up? The toy net at two depths,
//! a sweep of learning rates, several seeds: the final held-out loss per
//! cell, with diverged (D) and stalled (S) cells marked.

use super::runs::{self, cfg, grid_settings, lrs_json};
use super::{num, result, ExpArgs, ExpFlag, ExpResult, Experiment, Progress};
use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::nn::Placement;
use crate::present::{grid as heat, opt, opt_step, Figure, Table};
use crate::sweep::{RunSpec, SeedGroup};
use crate::train::Status;
use serde_json::{json, Map, Value};

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "lr-sensitivity",
    question: "Pre-LN vs Post-LN: how sensitive is each to the learning rate (and warm-up)?",
    flags: &[
        ExpFlag::Layers,
        ExpFlag::Placements,
        ExpFlag::Lrs,
        ExpFlag::Warmups,
        ExpFlag::Steps,
        ExpFlag::Seeds,
        ExpFlag::Seed,
        ExpFlag::Jobs,
        ExpFlag::Norms,
    ],
    run,
    grid: Some(grid),
};

/// The grid's axes.
struct Settings {
    layers: Vec<usize>,
    placements: Vec<Placement>,
    lrs: Vec<f32>,
    warmups: Vec<usize>,
    steps: usize,
    seeds: Vec<u64>,
    norm: NormKind,
    eval_sequences: usize,
}

fn settings(a: &ExpArgs) -> Settings {
    Settings {
        layers: a
            .layers
            .clone()
            .unwrap_or(if a.quick { vec![6] } else { vec![12, 30] }),
        placements: a
            .placements
            .clone()
            .unwrap_or(vec![Placement::Pre, Placement::Post]),
        lrs: a.lrs.clone().unwrap_or(if a.quick {
            vec![1e-3, 1e-2]
        } else {
            vec![1e-4, 3e-4, 1e-3, 3e-3, 1e-2]
        }),
        warmups: a
            .warmups
            .clone()
            .unwrap_or(if a.quick { vec![0] } else { vec![0, 1000] }),
        steps: a.steps_or(300, 3000),
        seeds: a.seeds_or(1, 3),
        norm: a
            .norms
            .as_ref()
            .and_then(|n| n.first().copied())
            .unwrap_or(NormKind::LayerNorm),
        eval_sequences: if a.quick { 64 } else { 512 },
    }
}

/// Toy net: depth x placement x warm-up x lr x seed.
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let s = settings(a);
    let mut cfgs = Vec::new();
    for &l in &s.layers {
        for &p in &s.placements {
            for &w in &s.warmups {
                for &lr in &s.lrs {
                    for &seed in &s.seeds {
                        cfgs.push(cfg(json!({"model": "toy", "layers": l, "norm": s.norm.name(), "placement": p.name(), "lr": lr, "warmup": w, "steps": s.steps, "seed": seed, "shards": 1, "eval_sequences": s.eval_sequences, "eval_every": (s.steps / 6).max(1)}))?);
                    }
                }
            }
        }
    }
    Ok(runs::specs(cfgs))
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let s = settings(a);
    let rs = runs::run_grid(a, grid(a)?, false, progress)?;
    let mut table = Table::new(
        format!("Toy net ({}), {} steps, {} seed(s): final held-out loss (mean over seeds that did not diverge), D = diverged, S = stalled", s.norm, s.steps, s.seeds.len()),
        &["layers", "warm-up", "placement", "lr", "status", "final eval loss", "diverged at step"],
    );
    let mut panels = Vec::new();
    let mut converged_lrs = Map::new();
    for &l in &s.layers {
        for &w in &s.warmups {
            let mut cells = Vec::new();
            for &p in &s.placements {
                let mut row = Vec::new();
                let mut ok_lrs = Vec::new();
                for &lr in &s.lrs {
                    let g = SeedGroup::of_runs(rs.iter().filter(|r| {
                        let c = &r.cfg;
                        c.model.layers == l && c.warmup == w && c.model.placement == p && c.lr == lr
                    }));
                    table.row(vec![
                        l.to_string(),
                        w.to_string(),
                        p.name().into(),
                        format!("{lr}"),
                        g.label(),
                        opt(g.mean, 3),
                        opt_step(g.diverged_at),
                    ]);
                    if g.status == Status::Converged {
                        ok_lrs.push(num(lr));
                    }
                    row.push(Some(g));
                }
                converged_lrs.insert(format!("L{l} warmup {w} {}", p.name()), Value::from(ok_lrs));
                cells.push(row);
            }
            panels.push(heat::heat_panel(
                format!("{l} layers, warm-up {w}"),
                s.lrs.iter().map(|v| format!("{v}")).collect(),
                s.placements.iter().map(|p| p.name().to_string()).collect(),
                &cells,
            ));
        }
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "toy", "layers": s.layers, "placements": s.placements.iter().map(|p| p.name()).collect::<Vec<_>>(), "lrs": lrs_json(&s.lrs), "warmups": s.warmups, "norm": s.norm.name(), "steps": s.steps, "optimizer": "adam"}),
        ),
        s.seeds.clone(),
    );
    out.data.insert("runs".into(), runs::records(&rs));
    let parts: Vec<String> = converged_lrs
        .iter()
        .map(|(k, v)| {
            let lrs: Vec<String> = v
                .as_array()
                .into_iter()
                .flatten()
                .map(|x| x.to_string())
                .collect();
            if lrs.is_empty() {
                format!("{k}: no learning rate converged")
            } else {
                format!("{k}: converged at lr {}", lrs.join(", "))
            }
        })
        .collect();
    out.data
        .insert("converged_lrs".into(), Value::Object(converged_lrs));
    out.figures
        .push(Figure::new("lr_sensitivity", panels, s.warmups.len()));
    out.conclusion = format!("{}.", parts.join("; "));
    out.tables.push(table);
    Ok(out)
}
