//! collapse (claim C12): does a deep net train without normalization? The
//! toy net at several depths with no norm, LayerNorm and RMSNorm (pre
//! placement, Adam), several seeds: held-out loss and divergence.

use super::runs::{self, cfg, eval_curve, grid_settings, lrs_json, mean_curve};
use super::{result, ExpArgs, ExpFlag, ExpResult, Experiment, Progress};
use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::present::{f, opt, opt_step, Figure, LineChart, Series, Table};
use crate::sweep::{group_by, RunSpec, SeedGroup};
use crate::train::Status;
use serde_json::json;

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "collapse",
    question: "Does a deep net train without normalization?",
    flags: &[
        ExpFlag::Layers,
        ExpFlag::Norms,
        ExpFlag::Lrs,
        ExpFlag::Steps,
        ExpFlag::Seeds,
        ExpFlag::Seed,
        ExpFlag::Jobs,
    ],
    run,
    grid: Some(grid),
};

/// The grid's axes.
struct Settings {
    layers: Vec<usize>,
    norms: Vec<NormKind>,
    lrs: Vec<f32>,
    steps: usize,
    seeds: Vec<u64>,
    eval_sequences: usize,
}

fn settings(a: &ExpArgs) -> Settings {
    Settings {
        layers: a.layers.clone().unwrap_or(if a.quick {
            vec![4, 16]
        } else {
            vec![6, 12, 20]
        }),
        norms: a.norms.clone().unwrap_or(vec![
            NormKind::None,
            NormKind::LayerNorm,
            NormKind::RmsNorm,
        ]),
        lrs: a.lrs.clone().unwrap_or(vec![1e-3]),
        steps: a.steps_or(400, 3000),
        seeds: a.seeds_or(1, 3),
        eval_sequences: if a.quick { 64 } else { 512 },
    }
}

/// Toy net, depth x lr x norm x seed, pre placement.
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let s = settings(a);
    let mut cfgs = Vec::new();
    for &l in &s.layers {
        for &lr in &s.lrs {
            for &n in &s.norms {
                for &seed in &s.seeds {
                    cfgs.push(cfg(json!({"model": "toy", "layers": l, "norm": n.name(), "placement": "pre", "lr": lr, "steps": s.steps, "seed": seed, "shards": 1, "eval_sequences": s.eval_sequences, "eval_every": (s.steps / 10).max(1)}))?);
                }
            }
        }
    }
    Ok(runs::specs(cfgs))
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let s = settings(a);
    let rs = runs::run_grid(a, grid(a)?, false, progress)?;
    let steps = s.steps;
    let mut table = Table::new(
        format!("Toy net, pre placement, Adam, {steps} steps, {} seed(s): held-out loss (mean ± std over seeds that did not diverge)", s.seeds.len()),
        &["layers", "lr", "norm", "status", "final eval loss", "best eval loss", "diverged at step"],
    );
    let groups = group_by(&rs, |r| (r.cfg.model.layers, r.cfg.lr, r.cfg.model.norm));
    let mut panels = Vec::new();
    let mut parts = Vec::new();
    for &l in &s.layers {
        for &lr in &s.lrs {
            let mut series = Vec::new();
            for ((_, _, norm), g) in groups
                .iter()
                .filter(|((gl, glr, _), _)| *gl == l && *glr == lr)
            {
                let sg = SeedGroup::of_runs(g.iter().copied());
                table.row(vec![
                    l.to_string(),
                    format!("{lr}"),
                    norm.name().into(),
                    sg.label(),
                    format!("{} ± {}", opt(sg.mean, 3), opt(sg.std, 3)),
                    opt(sg.best, 3),
                    opt_step(sg.diverged_at),
                ]);
                let name = match sg.diverged_at {
                    Some(d) if sg.status == Status::Diverged => {
                        format!("{norm} (diverged at step {d})")
                    }
                    _ => norm.name().to_string(),
                };
                series.push(Series::new(name, mean_curve(g, &eval_curve)));
            }
            panels.push(
                LineChart::new(
                    format!("{l} layers, lr {lr}"),
                    "step",
                    "held-out loss",
                    series,
                )
                .panel(),
            );
        }
    }
    for ((l, lr, n), g) in &groups {
        let sg = SeedGroup::of_runs(g.iter().copied());
        let lr_part = if s.lrs.len() > 1 {
            format!(", lr {lr}")
        } else {
            String::new()
        };
        parts.push(format!(
            "{n} at {l} layers{lr_part} {}{}",
            sg.status.name(),
            match (sg.status, sg.mean, sg.diverged_at) {
                (Status::Diverged, _, Some(d)) => format!(" (step {d})"),
                (_, Some(m), _) => format!(" ({})", f(m, 3)),
                _ => String::new(),
            }
        ));
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "toy", "layers": s.layers, "norms": s.norms.iter().map(|n| n.name()).collect::<Vec<_>>(), "placement": "pre", "lrs": lrs_json(&s.lrs), "optimizer": "adam", "steps": steps}),
        ),
        s.seeds.clone(),
    );
    out.data.insert("runs".into(), runs::records(&rs));
    out.figures.push(Figure::new(
        "collapse",
        panels,
        (s.layers.len() * s.lrs.len()).min(3),
    ));
    out.conclusion = format!("Held-out loss after {steps} steps: {}.", parts.join("; "));
    out.tables.push(table);
    Ok(out)
}
