//! The experiments that train models: collapse, lr-sensitivity, warmup,
//! norm-kind, gain-decay, qk-norm, placements and residual-growth. Each
//! builds a grid of [`TrainConfig`]s, runs it through the sweep engine (in
//! parallel; with `--out`, resumable under `<out>/runs`) and tabulates what
//! the runs measured.

use super::basics::mean_row_norm;
use super::plot::{Figure, Heatmap, LineChart, Panel, Series};
use super::{f, num, result, ExpArgs, ExpResult, Progress, Table};
use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::model::{Model, ModelKind};
use crate::nn::NormRole;
use crate::nn::Placement;
use crate::params::ParamKind;
use crate::sweep::{self, RunResult, RunSpec, SweepOptions};
use crate::train::optim::{Adam, OptimizerKind};
use crate::train::run::Status;
use crate::train::trainer::load_data;
use crate::train::TrainConfig;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Build a config from defaults + overrides (panics only on a bug in an
/// experiment's own settings; user values are validated before).
pub(crate) fn cfg(v: Value) -> Result<TrainConfig> {
    TrainConfig::from_overrides(v.as_object().expect("object"))
}

/// A small GPT for quick runs.
fn tiny_gpt() -> Value {
    json!({"model": "gpt", "layers": 2, "d_model": 64, "heads": 2, "seq": 64, "hidden": 256, "batch": 8, "eval_sequences": 16, "eval_every": 25, "warmup": 10})
}

/// The GPT used by the full experiments (defaults of `normlab train --model gpt`).
fn full_gpt() -> Value {
    json!({"model": "gpt"})
}

fn merge(base: &Value, extra: Value) -> Value {
    let mut m = base.as_object().unwrap().clone();
    for (k, v) in extra.as_object().unwrap() {
        m.insert(k.clone(), v.clone());
    }
    Value::Object(m)
}

/// Run specs through the sweep engine with the experiment's options.
pub(crate) fn run_specs(
    a: &ExpArgs,
    specs: Vec<RunSpec>,
    keep_params: bool,
    progress: Progress,
) -> Result<Vec<RunResult>> {
    let opts = SweepOptions {
        out: a.out.clone(),
        jobs: a.jobs(),
        threads_per_run: 1,
        shard: None,
        keep_params,
    };
    let mut results = sweep::run_all(&specs, &opts, &|d, t, id| progress(d, t, id))?;
    // Back in the order the experiment built them.
    let order: BTreeMap<&str, usize> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    results.sort_by_key(|r| order[r.id.as_str()]);
    Ok(results)
}

fn specs(cfgs: Vec<TrainConfig>) -> Vec<RunSpec> {
    let mut seen = std::collections::HashSet::new();
    cfgs.into_iter()
        .map(|c| RunSpec {
            id: sweep::run_id(&c),
            cfg: c,
        })
        .filter(|s| seen.insert(s.id.clone()))
        .collect()
}

/// One JSON record per run.
fn record(r: &RunResult) -> Value {
    let c = &r.cfg;
    json!({
        "id": r.id, "model": c.model.kind.to_string(), "layers": c.model.layers, "d_model": c.model.d_model, "norm": c.model.norm.name(),
        "placement": c.model.placement.name(), "lr": num(c.lr), "warmup": c.warmup, "qk_norm": c.model.qk_norm, "seed": c.seed, "steps": c.steps,
        "status": r.summary.status.name(), "final_eval_loss": r.summary.final_eval_loss, "best_eval_loss": r.summary.best_eval_loss,
        "diverged_at_step": r.summary.diverged_at_step, "final_loss": r.summary.final_loss, "steps_per_sec": r.summary.steps_per_sec,
    })
}

/// Runs grouped by a key (everything but the seed), in first-seen order.
fn group(rs: &[RunResult], key: impl Fn(&TrainConfig) -> String) -> Vec<(String, Vec<&RunResult>)> {
    let mut out: Vec<(String, Vec<&RunResult>)> = Vec::new();
    for r in rs {
        let k = key(&r.cfg);
        match out.iter_mut().find(|(kk, _)| *kk == k) {
            Some((_, v)) => v.push(r),
            None => out.push((k, vec![r])),
        }
    }
    out
}

/// Seed statistics of a group: (status summary, mean and std of the final
/// eval loss over runs that did not diverge, earliest divergence step).
fn seed_stats(g: &[&RunResult]) -> (String, Option<f64>, Option<f64>, Option<usize>) {
    let mut counts = BTreeMap::new();
    for r in g {
        *counts.entry(r.summary.status.name()).or_insert(0) += 1;
    }
    let status = counts
        .iter()
        .map(|(k, v)| {
            if g.len() == 1 {
                k.to_string()
            } else {
                format!("{v} {k}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    let losses: Vec<f64> = g
        .iter()
        .filter_map(|r| r.summary.final_eval_loss)
        .filter(|v| v.is_finite())
        .collect();
    let (mean, std) = if losses.is_empty() {
        (None, None)
    } else {
        let m = losses.iter().sum::<f64>() / losses.len() as f64;
        let s = (losses.iter().map(|v| (v - m).powi(2)).sum::<f64>() / losses.len() as f64).sqrt();
        (Some(m), Some(s))
    };
    let div = g.iter().filter_map(|r| r.summary.diverged_at_step).min();
    (status, mean, std, div)
}

fn opt(v: Option<f64>, d: usize) -> String {
    v.map(|x| f(x, d)).unwrap_or_else(|| "-".into())
}

/// Eval-loss curve of a run: (step, eval loss) at evaluation steps.
fn eval_curve(r: &RunResult) -> Vec<(f64, f64)> {
    r.metrics
        .iter()
        .filter_map(|m| m.eval_loss.map(|e| (m.step as f64, e)))
        .collect()
}

fn train_curve(r: &RunResult) -> Vec<(f64, f64)> {
    r.metrics.iter().map(|m| (m.step as f64, m.loss)).collect()
}

/// Mean of curves over seeds (points present in all).
fn mean_curve(g: &[&RunResult], sel: &dyn Fn(&RunResult) -> Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let curves: Vec<Vec<(f64, f64)>> = g.iter().map(|r| sel(r)).collect();
    let n = curves.iter().map(Vec::len).min().unwrap_or(0);
    (0..n)
        .map(|i| {
            (
                curves[0][i].0,
                curves.iter().map(|c| c[i].1).sum::<f64>() / curves.len() as f64,
            )
        })
        .collect()
}

fn status_of(g: &[&RunResult]) -> Status {
    let n = |s: Status| g.iter().filter(|r| r.summary.status == s).count();
    if n(Status::Diverged) * 2 > g.len() {
        Status::Diverged
    } else if n(Status::Stalled) * 2 > g.len() {
        Status::Stalled
    } else {
        Status::Converged
    }
}

fn grid_settings(a: &ExpArgs, extra: Value) -> Value {
    merge(&json!({"quick": a.quick, "jobs": a.jobs()}), extra)
}

/// collapse: toy net, depth x norm (incl. none), pre placement (x lr when
/// several are given).
pub fn collapse(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let layers = a.layers.clone().unwrap_or(if a.quick {
        vec![4, 16]
    } else {
        vec![6, 12, 20]
    });
    let norms =
        a.norms
            .clone()
            .unwrap_or(vec![NormKind::None, NormKind::LayerNorm, NormKind::RmsNorm]);
    let lrs = a.lrs.clone().unwrap_or(vec![1e-3]);
    let steps = a.steps.unwrap_or(if a.quick { 400 } else { 3000 });
    let seeds = a.seed_list(if a.quick { 1 } else { 3 });
    let eval_seq = if a.quick { 64 } else { 512 };
    let mut cfgs = Vec::new();
    for &l in &layers {
        for &lr in &lrs {
            for &n in &norms {
                for &s in &seeds {
                    cfgs.push(cfg(json!({"model": "toy", "layers": l, "norm": n.name(), "placement": "pre", "lr": lr, "steps": steps, "seed": s, "shards": 1, "eval_sequences": eval_seq, "eval_every": (steps / 10).max(1)}))?);
                }
            }
        }
    }
    let rs = run_specs(a, specs(cfgs), false, progress)?;
    let mut table = Table::new(
        format!("Toy net, pre placement, Adam, {steps} steps, {} seed(s): held-out loss (mean ± std over seeds that did not diverge)", seeds.len()),
        &["layers", "lr", "norm", "status", "final eval loss", "best eval loss", "diverged at step"],
    );
    let mut panels = Vec::new();
    let groups = group(&rs, |c| {
        format!("{}|{}|{}", c.model.layers, c.lr, c.model.norm)
    });
    for &l in &layers {
        for &lr in &lrs {
            let mut series = Vec::new();
            for (k, g) in groups
                .iter()
                .filter(|(k, _)| k.starts_with(&format!("{l}|{lr}|")))
            {
                let (status, mean, std, div) = seed_stats(g);
                let best = g
                    .iter()
                    .filter_map(|r| r.summary.best_eval_loss)
                    .fold(f64::INFINITY, f64::min);
                let norm = k.split('|').nth(2).unwrap().to_string();
                table.row(vec![
                    l.to_string(),
                    format!("{lr}"),
                    norm.clone(),
                    status,
                    format!("{} ± {}", opt(mean, 3), opt(std, 3)),
                    if best.is_finite() {
                        f(best, 3)
                    } else {
                        "-".into()
                    },
                    div.map(|d| d.to_string()).unwrap_or_else(|| "-".into()),
                ]);
                let name = match div {
                    Some(d) if status_of(g) == Status::Diverged => {
                        format!("{norm} (diverged at step {d})")
                    }
                    _ => norm,
                };
                series.push(Series::new(name, mean_curve(g, &eval_curve)));
            }
            panels.push(Panel::Line(LineChart {
                title: format!("{l} layers, lr {lr}"),
                x_label: "step".into(),
                y_label: "held-out loss".into(),
                series,
                log_y: false,
                log_x: false,
            }));
        }
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "toy", "layers": layers, "norms": norms.iter().map(|n| n.name()).collect::<Vec<_>>(), "placement": "pre", "lrs": lrs.iter().map(|&v| num(v)).collect::<Vec<_>>(), "optimizer": "adam", "steps": steps}),
        ),
        seeds.clone(),
    );
    out.data.insert(
        "runs".into(),
        json!(rs.iter().map(record).collect::<Vec<_>>()),
    );
    out.figures.push(Figure {
        stem: "collapse".into(),
        panels,
        cols: (layers.len() * lrs.len()).min(3),
    });
    let mut parts = Vec::new();
    for (k, g) in &groups {
        let (_, mean, _, div) = seed_stats(g);
        let mut it = k.split('|');
        let (l, lr, n) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        let st = status_of(g);
        let lr_part = if lrs.len() > 1 {
            format!(", lr {lr}")
        } else {
            String::new()
        };
        parts.push(format!(
            "{n} at {l} layers{lr_part} {}{}",
            st.name(),
            match (st, mean, div) {
                (Status::Diverged, _, Some(d)) => format!(" (step {d})"),
                (_, Some(m), _) => format!(" ({})", f(m, 3)),
                _ => String::new(),
            }
        ));
    }
    out.conclusion = format!("Held-out loss after {steps} steps: {}.", parts.join("; "));
    out.tables.push(table);
    Ok(out)
}

/// lr-sensitivity: toy net, depth x placement x lr x warm-up.
pub fn lr_sensitivity(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let layers = a
        .layers
        .clone()
        .unwrap_or(if a.quick { vec![6] } else { vec![12, 30] });
    let placements = a
        .placements
        .clone()
        .unwrap_or(vec![Placement::Pre, Placement::Post]);
    let lrs = a.lrs.clone().unwrap_or(if a.quick {
        vec![1e-3, 1e-2]
    } else {
        vec![1e-4, 3e-4, 1e-3, 3e-3, 1e-2]
    });
    let warmups = a
        .warmups
        .clone()
        .unwrap_or(if a.quick { vec![0] } else { vec![0, 1000] });
    let steps = a.steps.unwrap_or(if a.quick { 300 } else { 3000 });
    let seeds = a.seed_list(if a.quick { 1 } else { 3 });
    let norm = a
        .norms
        .as_ref()
        .and_then(|n| n.first().copied())
        .unwrap_or(NormKind::LayerNorm);
    let eval_seq = if a.quick { 64 } else { 512 };
    let mut cfgs = Vec::new();
    for &l in &layers {
        for &p in &placements {
            for &w in &warmups {
                for &lr in &lrs {
                    for &s in &seeds {
                        cfgs.push(cfg(json!({"model": "toy", "layers": l, "norm": norm.name(), "placement": p.name(), "lr": lr, "warmup": w, "steps": steps, "seed": s, "shards": 1, "eval_sequences": eval_seq, "eval_every": (steps / 6).max(1)}))?);
                    }
                }
            }
        }
    }
    let rs = run_specs(a, specs(cfgs), false, progress)?;
    let mut table = Table::new(
        format!("Toy net ({norm}), {steps} steps, {} seed(s): final held-out loss (mean over seeds that did not diverge), D = diverged, S = stalled", seeds.len()),
        &["layers", "warm-up", "placement", "lr", "status", "final eval loss", "diverged at step"],
    );
    let mut panels = Vec::new();
    let mut best_per = Map::new();
    for &l in &layers {
        for &w in &warmups {
            let mut values = Vec::new();
            let mut marks = Vec::new();
            for &p in &placements {
                let (mut vrow, mut mrow) = (Vec::new(), Vec::new());
                let mut ok_lrs = Vec::new();
                for &lr in &lrs {
                    let g: Vec<&RunResult> = rs
                        .iter()
                        .filter(|r| {
                            r.cfg.model.layers == l
                                && r.cfg.warmup == w
                                && r.cfg.model.placement == p
                                && r.cfg.lr == lr
                        })
                        .collect();
                    let (status, mean, _, div) = seed_stats(&g);
                    let st = status_of(&g);
                    table.row(vec![
                        l.to_string(),
                        w.to_string(),
                        p.name().into(),
                        format!("{lr}"),
                        status,
                        opt(mean, 3),
                        div.map(|d| d.to_string()).unwrap_or_else(|| "-".into()),
                    ]);
                    vrow.push(if st == Status::Diverged { None } else { mean });
                    mrow.push(match st {
                        Status::Diverged => "D".into(),
                        Status::Stalled => "S".into(),
                        Status::Converged => String::new(),
                    });
                    if st == Status::Converged {
                        ok_lrs.push(lr);
                    }
                }
                best_per.insert(
                    format!("L{l} warmup {w} {}", p.name()),
                    json!(ok_lrs.iter().map(|&v| num(v)).collect::<Vec<_>>()),
                );
                values.push(vrow);
                marks.push(mrow);
            }
            panels.push(Panel::Heat(Heatmap {
                title: format!("{l} layers, warm-up {w}"),
                x_labels: lrs.iter().map(|v| format!("{v}")).collect(),
                y_labels: placements.iter().map(|p| p.name().to_string()).collect(),
                values,
                marks,
                value_label: "final eval loss".into(),
            }));
        }
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "toy", "layers": layers, "placements": placements.iter().map(|p| p.name()).collect::<Vec<_>>(), "lrs": lrs.iter().map(|&v| num(v)).collect::<Vec<_>>(), "warmups": warmups, "norm": norm.name(), "steps": steps, "optimizer": "adam"}),
        ),
        seeds.clone(),
    );
    out.data.insert(
        "runs".into(),
        json!(rs.iter().map(record).collect::<Vec<_>>()),
    );
    out.data
        .insert("converged_lrs".into(), Value::Object(best_per.clone()));
    out.figures.push(Figure {
        stem: "lr_sensitivity".into(),
        panels,
        cols: warmups.len(),
    });
    let parts: Vec<String> = best_per
        .iter()
        .map(|(k, v)| {
            let lrs: Vec<String> = v
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.to_string())
                .collect();
            format!(
                "{k}: {}",
                if lrs.is_empty() {
                    "no learning rate converged".into()
                } else {
                    format!("converged at lr {}", lrs.join(", "))
                }
            )
        })
        .collect();
    out.conclusion = format!("{}.", parts.join("; "));
    out.tables.push(table);
    Ok(out)
}

/// warmup: GPT on text, post vs pre, peak lr x warm-up.
pub fn warmup(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let base = if a.quick { tiny_gpt() } else { full_gpt() };
    let placements = a
        .placements
        .clone()
        .unwrap_or(vec![Placement::Post, Placement::Pre]);
    let lrs = a.lrs.clone().unwrap_or(if a.quick {
        vec![1e-3, 1e-2]
    } else {
        vec![1e-3, 3e-3, 1e-2]
    });
    let warmups = a
        .warmups
        .clone()
        .unwrap_or(if a.quick { vec![0, 30] } else { vec![0, 100] });
    let steps = a.steps.unwrap_or(if a.quick { 150 } else { 1000 });
    let seeds = a.seed_list(if a.quick { 1 } else { 2 });
    let layers = a.layers.as_ref().and_then(|l| l.first().copied());
    let mut cfgs = Vec::new();
    for &p in &placements {
        for &lr in &lrs {
            for &w in &warmups {
                for &s in &seeds {
                    let mut v = merge(
                        &base,
                        json!({"placement": p.name(), "lr": lr, "warmup": w, "steps": steps, "seed": s, "log_every": 5, "schedule": "constant", "shards": 1}),
                    );
                    if let Some(l) = layers {
                        v = merge(&v, json!({"layers": l}));
                    }
                    cfgs.push(cfg(v)?);
                }
            }
        }
    }
    let rs = run_specs(a, specs(cfgs), false, progress)?;
    let mut table = Table::new(
        format!(
            "GPT on text, {steps} steps, constant lr after warm-up, {} seed(s)",
            seeds.len()
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
    let mut loss_panels = Vec::new();
    let mut gn_series = Vec::new();
    let mut records = Vec::new();
    for &lr in &lrs {
        let mut series = Vec::new();
        for &p in &placements {
            for &w in &warmups {
                let g: Vec<&RunResult> = rs
                    .iter()
                    .filter(|r| r.cfg.lr == lr && r.cfg.model.placement == p && r.cfg.warmup == w)
                    .collect();
                let (status, mean, _, div) = seed_stats(&g);
                let early = (steps / 10).max(1);
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
                    status,
                    opt(mean, 3),
                    f(gn1, 3),
                    f(gn_mean, 3),
                    div.map(|d| d.to_string()).unwrap_or_else(|| "-".into()),
                ]);
                records.push(json!({"placement": p.name(), "lr": num(lr), "warmup": w, "status": status_of(&g).name(), "final_eval_loss": mean, "grad_norm_step1": gn1, "grad_norm_early_mean": gn_mean, "diverged_at_step": div}));
                let name = format!("{} warm-up {w}", p.name());
                series.push(Series::new(name.clone(), mean_curve(&g, &train_curve)));
                if lr == lrs[lrs.len() - 1] {
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
        loss_panels.push(Panel::Line(LineChart {
            title: format!("peak lr {lr}"),
            x_label: "step".into(),
            y_label: "training loss".into(),
            series,
            log_y: false,
            log_x: false,
        }));
    }
    loss_panels.push(Panel::Line(LineChart {
        title: format!(
            "grad norm early in training, peak lr {}",
            lrs[lrs.len() - 1]
        ),
        x_label: "step".into(),
        y_label: "global grad norm".into(),
        series: gn_series,
        log_y: true,
        log_x: false,
    }));
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "gpt", "base": base, "placements": placements.iter().map(|p| p.name()).collect::<Vec<_>>(), "lrs": lrs.iter().map(|&v| num(v)).collect::<Vec<_>>(), "warmups": warmups, "steps": steps}),
        ),
        seeds.clone(),
    );
    out.data.insert("configs".into(), json!(records));
    out.data.insert(
        "runs".into(),
        json!(rs.iter().map(record).collect::<Vec<_>>()),
    );
    out.figures.push(Figure {
        stem: "warmup".into(),
        panels: loss_panels,
        cols: 2,
    });
    let parts: Vec<String> = records
        .iter()
        .map(|r| {
            format!(
                "{} lr {} warm-up {}: {}{}",
                r["placement"].as_str().unwrap(),
                r["lr"],
                r["warmup"],
                r["status"].as_str().unwrap(),
                r["final_eval_loss"]
                    .as_f64()
                    .map(|v| format!(" ({})", f(v, 3)))
                    .unwrap_or_default()
            )
        })
        .collect();
    out.conclusion = format!("{}.", parts.join("; "));
    out.tables.push(table);
    Ok(out)
}

/// norm-kind: GPT pre placement, one run per kind and seed.
pub fn norm_kind(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let base = if a.quick { tiny_gpt() } else { full_gpt() };
    let norms = a.norms.clone().unwrap_or(vec![
        NormKind::LayerNorm,
        NormKind::RmsNorm,
        NormKind::ZRmsNorm,
        NormKind::ScaleNorm,
    ]);
    let steps = a.steps.unwrap_or(if a.quick { 150 } else { 1000 });
    let seeds = a.seed_list(2);
    let lr = a
        .lrs
        .as_ref()
        .and_then(|l| l.first().copied())
        .unwrap_or(1e-3);
    let layers = a.layers.as_ref().and_then(|l| l.first().copied());
    let mut cfgs = Vec::new();
    for &n in &norms {
        for &s in &seeds {
            let mut v = merge(
                &base,
                json!({"norm": n.name(), "placement": "pre", "steps": steps, "seed": s, "lr": lr, "shards": 1}),
            );
            if let Some(l) = layers {
                v = merge(&v, json!({"layers": l}));
            }
            cfgs.push(cfg(v)?);
        }
    }
    let rs = run_specs(a, specs(cfgs), false, progress)?;
    let mut table = Table::new(
        format!("GPT on text, pre placement, lr {lr}, {steps} steps, {} seeds; step time measured alone afterwards (1 thread, median of {} steps)", seeds.len(), if a.quick { 5 } else { 10 }),
        &["norm", "status", "final eval loss (mean ± std)", "best eval loss", "ms/step"],
    );
    let mut series = Vec::new();
    let mut summary = Map::new();
    for (k, g) in group(&rs, |c| c.model.norm.name().to_string()) {
        let (status, mean, std, _) = seed_stats(&g);
        let best = g
            .iter()
            .filter_map(|r| r.summary.best_eval_loss)
            .fold(f64::INFINITY, f64::min);
        // Timed alone: parallel runs in the grid share the machine.
        let ms =
            crate::bench::run_train_bench(&g[0].cfg, 1, if a.quick { 5 } else { 10 })?.ms_per_step;
        table.row(vec![
            k.clone(),
            status,
            format!("{} ± {}", opt(mean, 4), opt(std, 4)),
            f(best, 4),
            f(ms, 2),
        ]);
        summary.insert(k.clone(), json!({"final_eval_loss_mean": mean, "final_eval_loss_std": std, "best_eval_loss": best, "ms_per_step": ms}));
        series.push(Series::new(k, mean_curve(&g, &eval_curve)));
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "gpt", "base": base, "norms": norms.iter().map(|n| n.name()).collect::<Vec<_>>(), "placement": "pre", "lr": num(lr), "steps": steps}),
        ),
        seeds.clone(),
    );
    out.data
        .insert("by_norm".into(), Value::Object(summary.clone()));
    out.data.insert(
        "runs".into(),
        json!(rs.iter().map(record).collect::<Vec<_>>()),
    );
    out.figures.push(Figure {
        stem: "norm_kind".into(),
        panels: vec![Panel::Line(LineChart {
            title: "held-out loss (mean over seeds)".into(),
            x_label: "step".into(),
            y_label: "eval loss".into(),
            series,
            log_y: false,
            log_x: false,
        })],
        cols: 1,
    });
    let mut ranked: Vec<(String, f64, f64, f64)> = summary
        .iter()
        .filter_map(|(k, v)| {
            Some((
                k.clone(),
                v["final_eval_loss_mean"].as_f64()?,
                v["final_eval_loss_std"].as_f64().unwrap_or(0.0),
                v["ms_per_step"].as_f64().unwrap_or(0.0),
            ))
        })
        .collect();
    ranked.sort_by(|x, y| x.1.total_cmp(&y.1));
    let spread =
        ranked.last().map(|l| l.1).unwrap_or(0.0) - ranked.first().map(|l| l.1).unwrap_or(0.0);
    let max_std = ranked.iter().map(|r| r.2).fold(0.0, f64::max);
    out.conclusion = format!(
        "Final held-out loss, best first: {}. The spread between kinds is {} nats against a seed-to-seed std of up to {}{}.",
        ranked.iter().map(|r| format!("{} {} ({} ms/step)", r.0, f(r.1, 4), f(r.3, 2))).collect::<Vec<_>>().join(", "),
        f(spread, 4),
        f(max_std, 4),
        if spread <= 2.0 * max_std { ": within seed noise at this budget" } else { "" }
    );
    out.tables.push(table);
    Ok(out)
}

/// Statistics of the effective norm gains of a model's block and final
/// norms (QK-Norm excluded): gamma, 1 + w for zrmsnorm, ScaleNorm's g / sqrt(d).
fn gain_stats(cfg: &TrainConfig, params: &[f32]) -> Result<Value> {
    let model = Model::new(&cfg.model)?;
    let mut gains = Vec::new();
    for site in model.norms().filter(|s| s.role != NormRole::QkNorm) {
        let n = site.norm;
        let p = n.p.get(params);
        gains.extend((0..n.d).map(|j| n.kind.effective_gain(p, n.d, j)));
    }
    let n = gains.len().max(1) as f64;
    let mean = gains.iter().sum::<f64>() / n;
    let std = (gains.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n).sqrt();
    let (mn, mx) = gains
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &g| {
            (a.min(g), b.max(g))
        });
    Ok(json!({"mean": mean, "std": std, "min": mn, "max": mx, "count": gains.len()}))
}

fn final_params(a: &ExpArgs, r: &RunResult) -> Result<Vec<f32>> {
    if let Some(p) = &r.params {
        return Ok(p.clone());
    }
    let dir = a
        .out
        .as_ref()
        .map(|o| o.join("runs").join(&r.id))
        .ok_or("run parameters unavailable")?;
    Ok(crate::train::run::load_model(&dir)?.2)
}

/// gain-decay: AdamW's decay on a plain gain vs a zero-centred (1 + w) gain,
/// then gain statistics of rmsnorm vs zrmsnorm GPTs trained with decay on gains.
pub fn gain_decay(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let lr = a
        .lrs
        .as_ref()
        .and_then(|l| l.first().copied())
        .unwrap_or(3e-3);
    let wd = 0.1f32;
    let steps_sim = 5000;
    // Part 1: weight decay alone (zero gradient) on gains the model set to 1.5.
    let mut layout = crate::params::ParamLayout::new();
    let plain = layout.add(
        "plain.weight",
        &[1],
        ParamKind::NormGain,
        None,
        crate::params::Init::Const(1.5),
    );
    let zero_c = layout.add(
        "zero_centred.weight",
        &[1],
        ParamKind::NormGain,
        None,
        crate::params::Init::Const(0.5),
    );
    let mut p = layout.zeros();
    layout.init(&mut p, 0);
    let mut grads = layout.zeros();
    let mut opt_state = Adam::new(&layout, OptimizerKind::Adamw, 0.9, 0.999, 1e-8, wd, true);
    let (mut c_plain, mut c_zero) = (vec![(0.0, 1.5)], vec![(0.0, 1.5)]);
    for s in 1..=steps_sim {
        opt_state.step(&mut p, &mut grads, lr, 0, false);
        if s % 50 == 0 {
            c_plain.push((s as f64, p[plain.0.start] as f64));
            c_zero.push((s as f64, 1.0 + p[zero_c.0.start] as f64));
        }
    }
    let (end_plain, end_zero) = (c_plain.last().unwrap().1, c_zero.last().unwrap().1);
    // Part 2: real runs with weight decay on the gains.
    let base = if a.quick { tiny_gpt() } else { full_gpt() };
    let steps = a.steps.unwrap_or(if a.quick { 150 } else { 1000 });
    let seeds = a.seed_list(if a.quick { 1 } else { 2 });
    let mut cfgs = Vec::new();
    for n in [NormKind::RmsNorm, NormKind::ZRmsNorm] {
        for &s in &seeds {
            cfgs.push(cfg(merge(&base, json!({"norm": n.name(), "wd_norm_gains": true, "weight_decay": wd, "optimizer": "adamw", "steps": steps, "seed": s, "lr": lr, "shards": 1})))?);
        }
    }
    let rs = run_specs(a, specs(cfgs), true, progress)?;
    let mut t1 = Table::new(
        format!("Weight decay alone (AdamW, lr {lr}, wd {wd}, zero gradient) on a gain of 1.5"),
        &[
            "gain",
            "after 0",
            "after 1000",
            "after 5000",
            "decays toward",
        ],
    );
    let at =
        |c: &[(f64, f64)], s: f64| c.iter().find(|p| p.0 >= s).map(|p| p.1).unwrap_or(f64::NAN);
    t1.row(vec![
        "plain gamma (rmsnorm)".into(),
        "1.5".into(),
        f(at(&c_plain, 1000.0), 4),
        f(end_plain, 4),
        "0".into(),
    ]);
    t1.row(vec![
        "1 + w (zrmsnorm)".into(),
        "1.5".into(),
        f(at(&c_zero, 1000.0), 4),
        f(end_zero, 4),
        "1".into(),
    ]);
    let mut t2 = Table::new(format!("GPT trained with weight decay {wd} on the norm gains ({steps} steps): effective gains at the end"), &["norm", "seed", "eval loss", "gain mean", "gain std", "gain min", "gain max"]);
    let mut runs = Vec::new();
    for r in &rs {
        let st = gain_stats(&r.cfg, &final_params(a, r)?)?;
        t2.row(vec![
            r.cfg.model.norm.name().into(),
            r.cfg.seed.to_string(),
            opt(r.summary.final_eval_loss, 4),
            f(st["mean"].as_f64().unwrap(), 4),
            f(st["std"].as_f64().unwrap(), 4),
            f(st["min"].as_f64().unwrap(), 4),
            f(st["max"].as_f64().unwrap(), 4),
        ]);
        let mut rec = record(r);
        rec["gain_stats"] = st;
        runs.push(rec);
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"lr": num(lr), "weight_decay": num(wd), "simulation_steps": steps_sim, "gpt": base, "gpt_steps": steps}),
        ),
        seeds.clone(),
    );
    out.data.insert("decay_only".into(), json!({"plain_gain_end": end_plain, "zero_centred_gain_end": end_zero, "plain_curve": c_plain, "zero_centred_curve": c_zero}));
    out.data.insert("runs".into(), json!(runs));
    out.figures.push(Figure {
        stem: "gain_decay".into(),
        panels: vec![Panel::Line(LineChart {
            title: format!("AdamW decay alone (lr {lr}, wd {wd})"),
            x_label: "step".into(),
            y_label: "effective gain".into(),
            series: vec![
                Series::new("plain gamma", c_plain.clone()),
                Series::new("1 + w", c_zero.clone()),
            ],
            log_y: false,
            log_x: false,
        })],
        cols: 1,
    });
    let mean_of = |n: &str, key: &str| {
        let v: Vec<f64> = runs
            .iter()
            .filter(|r| r["norm"] == n)
            .filter_map(|r| r["gain_stats"][key].as_f64())
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    out.conclusion = format!(
        "With no gradient, AdamW's decay took a plain gain from 1.5 to {} after {steps_sim} steps (toward 0: it shrinks the norm's output) but a zero-centred gain only to {} (toward 1: the identity scaling). In the GPT runs with decay on gains, rmsnorm's gains ended at mean {} (min {}), zrmsnorm's at mean {} (min {}).",
        f(end_plain, 3),
        f(end_zero, 3),
        f(mean_of("rmsnorm", "mean"), 3),
        f(mean_of("rmsnorm", "min"), 3),
        f(mean_of("zrmsnorm", "mean"), 3),
        f(mean_of("zrmsnorm", "min"), 3)
    );
    out.tables.push(t1);
    out.tables.push(t2);
    Ok(out)
}

/// qk-norm: GPT at a high learning rate with and without QK-Norm.
pub fn qk_norm(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let base = if a.quick { tiny_gpt() } else { full_gpt() };
    let lrs = a.lrs.clone().unwrap_or(if a.quick {
        vec![1e-2]
    } else {
        vec![3e-3, 1e-2]
    });
    let steps = a.steps.unwrap_or(if a.quick { 150 } else { 1000 });
    let seeds = a.seed_list(if a.quick { 1 } else { 2 });
    let layers = a.layers.as_ref().and_then(|l| l.first().copied());
    let mut cfgs = Vec::new();
    for &lr in &lrs {
        for qk in [false, true] {
            for &s in &seeds {
                let mut v = merge(
                    &base,
                    json!({"qk_norm": qk, "lr": lr, "steps": steps, "seed": s, "log_every": 5, "shards": 1}),
                );
                if let Some(l) = layers {
                    v = merge(&v, json!({"layers": l}));
                }
                cfgs.push(cfg(v)?);
            }
        }
    }
    let rs = run_specs(a, specs(cfgs), false, progress)?;
    let mut table = Table::new(
        format!("GPT on text, {steps} steps, {} seed(s): attention logits and entropy (mean over layers), loss spikes (logged steps whose loss exceeds the best so far by > 0.5 nats)", seeds.len()),
        &["lr", "QK-Norm", "status", "final eval loss", "max attn logit (peak over training)", "max attn logit (end)", "attn entropy (end)", "loss spikes"],
    );
    let mut logit_series = Vec::new();
    let mut ent_series = Vec::new();
    let mut records = Vec::new();
    for (k, g) in group(&rs, |c| format!("{}|{}", c.lr, c.model.qk_norm)) {
        let (status, mean, _, _) = seed_stats(&g);
        let per_step_max = |r: &RunResult| -> Vec<(f64, f64)> {
            r.metrics
                .iter()
                .filter(|m| !m.attn_max_logit.is_empty())
                .map(|m| {
                    (
                        m.step as f64,
                        m.attn_max_logit
                            .iter()
                            .cloned()
                            .fold(f64::NEG_INFINITY, f64::max),
                    )
                })
                .collect()
        };
        let per_step_ent = |r: &RunResult| -> Vec<(f64, f64)> {
            r.metrics
                .iter()
                .filter(|m| !m.attn_entropy.is_empty())
                .map(|m| {
                    (
                        m.step as f64,
                        m.attn_entropy.iter().sum::<f64>() / m.attn_entropy.len() as f64,
                    )
                })
                .collect()
        };
        let peak = g
            .iter()
            .flat_map(|r| per_step_max(r))
            .map(|p| p.1)
            .fold(f64::NEG_INFINITY, f64::max);
        let end_logit = g
            .iter()
            .filter_map(|r| per_step_max(r).last().map(|p| p.1))
            .sum::<f64>()
            / g.len() as f64;
        let end_ent = g
            .iter()
            .filter_map(|r| per_step_ent(r).last().map(|p| p.1))
            .sum::<f64>()
            / g.len() as f64;
        let spikes: usize = g
            .iter()
            .map(|r| {
                let mut best = f64::INFINITY;
                let mut n = 0;
                for m in &r.metrics {
                    if m.loss > best + 0.5 {
                        n += 1;
                    }
                    best = best.min(m.loss);
                }
                n
            })
            .sum();
        let (lr, qk) = k.split_once('|').unwrap();
        table.row(vec![
            lr.into(),
            qk.into(),
            status,
            opt(mean, 4),
            f(peak, 2),
            f(end_logit, 2),
            f(end_ent, 3),
            spikes.to_string(),
        ]);
        records.push(json!({"lr": num(lr.parse::<f32>().unwrap()), "qk_norm": qk == "true", "final_eval_loss": mean, "max_logit_peak": peak, "max_logit_end": end_logit, "entropy_end": end_ent, "loss_spikes": spikes, "status": status_of(&g).name()}));
        let name = format!("lr {lr}{}", if qk == "true" { " + QK-Norm" } else { "" });
        logit_series.push(Series::new(name.clone(), mean_curve(&g, &per_step_max)));
        ent_series.push(Series::new(name, mean_curve(&g, &per_step_ent)));
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "gpt", "base": base, "lrs": lrs.iter().map(|&v| num(v)).collect::<Vec<_>>(), "steps": steps}),
        ),
        seeds.clone(),
    );
    out.data.insert("configs".into(), json!(records));
    out.data.insert(
        "runs".into(),
        json!(rs.iter().map(record).collect::<Vec<_>>()),
    );
    out.data.insert(
        "per_layer".into(),
        json!(rs.iter().map(|r| json!({"id": r.id, "qk_norm": r.cfg.model.qk_norm, "lr": r.cfg.lr, "steps": r.metrics.iter().filter(|m| !m.attn_max_logit.is_empty()).map(|m| json!({"step": m.step, "max_logit": m.attn_max_logit, "entropy": m.attn_entropy})).collect::<Vec<_>>()})).collect::<Vec<_>>()),
    );
    out.figures.push(Figure {
        stem: "qk_norm".into(),
        panels: vec![
            Panel::Line(LineChart {
                title: "largest attention logit".into(),
                x_label: "step".into(),
                y_label: "max logit".into(),
                series: logit_series,
                log_y: true,
                log_x: false,
            }),
            Panel::Line(LineChart {
                title: "mean attention entropy".into(),
                x_label: "step".into(),
                y_label: "nats".into(),
                series: ent_series,
                log_y: false,
                log_x: false,
            }),
        ],
        cols: 2,
    });
    let parts: Vec<String> = records
        .iter()
        .map(|r| {
            format!(
                "lr {} {}: peak logit {}, end entropy {}, {} spikes, eval {}",
                r["lr"],
                if r["qk_norm"] == true {
                    "with QK-Norm"
                } else {
                    "without"
                },
                f(r["max_logit_peak"].as_f64().unwrap(), 1),
                f(r["entropy_end"].as_f64().unwrap(), 2),
                r["loss_spikes"],
                opt(r["final_eval_loss"].as_f64(), 3)
            )
        })
        .collect();
    out.conclusion = format!("{}.", parts.join("; "));
    out.tables.push(table);
    Ok(out)
}

/// placements: every preset at a low and a high learning rate, toy (depth
/// 30) and GPT.
pub fn placements(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let presets = a.placements.clone().unwrap_or(Placement::ALL.to_vec());
    let lrs = a.lrs.clone().unwrap_or(vec![1e-3, 1e-2]);
    let seeds = a.seed_list(if a.quick { 1 } else { 2 });
    let models: Vec<ModelKind> = match a.model {
        Some(m) => vec![m],
        None => vec![ModelKind::Toy, ModelKind::Gpt],
    };
    let mut cfgs = Vec::new();
    for &m in &models {
        let (base, steps) = match (m, a.quick) {
            (ModelKind::Toy, true) => (
                json!({"model": "toy", "layers": 6, "eval_sequences": 64}),
                200,
            ),
            (ModelKind::Toy, false) => (json!({"model": "toy", "layers": 30}), 3000),
            (ModelKind::Gpt, true) => (tiny_gpt(), 100),
            (ModelKind::Gpt, false) => (full_gpt(), 1000),
        };
        let steps = a.steps.unwrap_or(steps);
        for &p in &presets {
            for &lr in &lrs {
                for &s in &seeds {
                    let mut v = merge(
                        &base,
                        json!({"placement": p.name(), "lr": lr, "steps": steps, "seed": s, "shards": 1, "eval_every": (steps / 5).max(1)}),
                    );
                    if let Some(l) = a.layers.as_ref().and_then(|l| l.first().copied()) {
                        v = merge(&v, json!({"layers": l}));
                    }
                    if p == Placement::None {
                        v = merge(&v, json!({"norm": "layernorm"}));
                    }
                    cfgs.push(cfg(v)?);
                }
            }
        }
    }
    let rs = run_specs(a, specs(cfgs), false, progress)?;
    let spread = |v: &[f64]| {
        let (mn, mx) = v
            .iter()
            .fold((f64::INFINITY, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
        if mn > 0.0 && v.iter().all(|x| x.is_finite()) {
            mx / mn
        } else {
            f64::NAN
        }
    };
    let mut table = Table::new(
        format!("Every placement preset, {} seed(s); grad-norm spread = max / min over blocks of the per-block gradient norm", seeds.len()),
        &["model", "placement", "lr", "status", "final eval loss", "spread at init", "spread at end"],
    );
    let mut records = Vec::new();
    let mut heat = Vec::new();
    for &m in &models {
        let (mut values, mut marks) = (Vec::new(), Vec::new());
        for &p in &presets {
            let (mut vr, mut mr) = (Vec::new(), Vec::new());
            for &lr in &lrs {
                let g: Vec<&RunResult> = rs
                    .iter()
                    .filter(|r| {
                        r.cfg.model.kind == m && r.cfg.model.placement == p && r.cfg.lr == lr
                    })
                    .collect();
                let (status, mean, _, _) = seed_stats(&g);
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
                let st = status_of(&g);
                table.row(vec![
                    m.to_string(),
                    p.name().into(),
                    format!("{lr}"),
                    status,
                    opt(mean, 3),
                    f(init, 2),
                    f(end, 2),
                ]);
                records.push(json!({"model": m.to_string(), "placement": p.name(), "lr": num(lr), "status": st.name(), "final_eval_loss": mean, "grad_spread_init": init, "grad_spread_end": end}));
                vr.push(if st == Status::Diverged { None } else { mean });
                mr.push(match st {
                    Status::Diverged => "D".into(),
                    Status::Stalled => "S".into(),
                    _ => String::new(),
                });
            }
            values.push(vr);
            marks.push(mr);
        }
        heat.push(Panel::Heat(Heatmap {
            title: format!("{m}"),
            x_labels: lrs.iter().map(|v| format!("lr {v}")).collect(),
            y_labels: presets.iter().map(|p| p.name().to_string()).collect(),
            values,
            marks,
            value_label: "final eval loss".into(),
        }));
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"models": models.iter().map(|m| m.to_string()).collect::<Vec<_>>(), "placements": presets.iter().map(|p| p.name()).collect::<Vec<_>>(), "lrs": lrs}),
        ),
        seeds.clone(),
    );
    out.data.insert("configs".into(), json!(records));
    out.data.insert(
        "runs".into(),
        json!(rs.iter().map(record).collect::<Vec<_>>()),
    );
    out.figures.push(Figure {
        stem: "placements".into(),
        panels: heat,
        cols: models.len(),
    });
    let trained: Vec<String> = records
        .iter()
        .filter(|r| r["status"] == "converged")
        .map(|r| {
            format!(
                "{} {} lr {}",
                r["model"].as_str().unwrap(),
                r["placement"].as_str().unwrap(),
                r["lr"]
            )
        })
        .collect();
    let failed: Vec<String> = records
        .iter()
        .filter(|r| r["status"] != "converged")
        .map(|r| {
            format!(
                "{} {} lr {} ({})",
                r["model"].as_str().unwrap(),
                r["placement"].as_str().unwrap(),
                r["lr"],
                r["status"].as_str().unwrap()
            )
        })
        .collect();
    out.conclusion = format!(
        "Converged: {}. Did not: {}.",
        if trained.is_empty() {
            "none".into()
        } else {
            trained.join(", ")
        },
        if failed.is_empty() {
            "none".into()
        } else {
            failed.join(", ")
        }
    );
    out.tables.push(table);
    Ok(out)
}

/// Mean row norm of the stream after the embedding and after each block,
/// on the first held-out batch.
pub fn block_row_norms(cfg: &TrainConfig, params: &[f32]) -> Result<Vec<f64>> {
    let model = Model::new(&cfg.model)?;
    let data = load_data(cfg)?;
    let batch = cfg.batch.min(16);
    let mut ws = model.workspace(batch, cfg.model.seq);
    for i in 0..batch {
        let r = i * cfg.model.seq..(i + 1) * cfg.model.seq;
        data.eval_sequence(
            i,
            cfg.model.seq,
            &mut ws.tokens[r.clone()],
            &mut ws.targets[r],
        );
    }
    model.forward(params, &mut ws);
    let d = cfg.model.d_model;
    let mut out = Vec::with_capacity(cfg.model.layers + 1);
    // The embedding output is the input of sublayer 0: recompute it.
    let mut x0 = vec![0.0; batch * cfg.model.seq * d];
    model
        .emb
        .forward(params, &ws.tokens, cfg.model.seq, &mut x0);
    out.push(mean_row_norm(&x0, d));
    for b in 0..cfg.model.layers {
        out.push(mean_row_norm(ws.blocks[b].output(), d));
    }
    Ok(out)
}

/// residual-growth: per-layer mean row norm of the residual stream at init
/// and after training, for pre-LN with and without the final norm and for
/// post-LN.
pub fn residual_growth(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let d = a.d_model.unwrap_or(if a.quick { 64 } else { 128 });
    let layers = a
        .layers
        .as_ref()
        .and_then(|l| l.first().copied())
        .unwrap_or(if a.quick { 4 } else { 12 });
    let steps = a.steps.unwrap_or(if a.quick { 100 } else { 1000 });
    let seeds = a.seed_list(1);
    let lr = a
        .lrs
        .as_ref()
        .and_then(|l| l.first().copied())
        .unwrap_or(1e-3);
    let base = if a.quick { tiny_gpt() } else { full_gpt() };
    let variants = [
        ("pre, final norm", "pre", Some(true)),
        ("pre, no final norm", "pre", Some(false)),
        ("post", "post", None),
    ];
    let mut cfgs = Vec::new();
    for (_, p, fin) in variants {
        for &s in &seeds {
            let mut v = merge(
                &base,
                json!({"d_model": d, "heads": 4.min(d / 16).max(1), "hidden": 4 * d, "layers": layers, "placement": p, "steps": steps, "seed": s, "lr": lr, "shards": 1}),
            );
            if let Some(fnorm) = fin {
                v = merge(&v, json!({"final_norm": fnorm}));
            }
            cfgs.push(cfg(v)?);
        }
    }
    let rs = run_specs(a, specs(cfgs), true, progress)?;
    let mut table = Table::new(
        format!("Mean row norm of the residual stream, GPT d {d}, {layers} blocks (sqrt(d) = {:.2}), seed {}", (d as f64).sqrt(), seeds[0]),
        &["variant", "when", "after embedding", "after block 1", "middle block", "last block", "last / first block"],
    );
    let mut panels = Vec::new();
    let mut data = Map::new();
    for ((name, _, _), r) in variants.iter().zip(rs.iter()) {
        let model = Model::new(&r.cfg.model)?;
        let init = block_row_norms(&r.cfg, &model.init_params(r.cfg.seed))?;
        let trained = block_row_norms(&r.cfg, &final_params(a, r)?)?;
        for (when, v) in [("init", &init), ("trained", &trained)] {
            table.row(vec![
                name.to_string(),
                when.into(),
                f(v[0], 3),
                f(v[1], 3),
                f(v[layers / 2], 3),
                f(v[layers], 3),
                f(v[layers] / v[1], 3),
            ]);
        }
        data.insert(name.to_string(), json!({"init": init, "trained": trained, "status": r.summary.status.name(), "final_eval_loss": r.summary.final_eval_loss}));
        panels.push(Panel::Line(LineChart {
            title: name.to_string(),
            x_label: "block (0 = embedding)".into(),
            y_label: "mean row norm".into(),
            series: vec![
                Series::indexed("init", &init),
                Series::indexed(format!("after {steps} steps"), &trained),
                Series::indexed("sqrt(d)", &vec![(d as f64).sqrt(); layers + 1]),
            ],
            log_y: true,
            log_x: false,
        }));
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "gpt", "d_model": d, "layers": layers, "steps": steps, "lr": num(lr)}),
        ),
        seeds.clone(),
    );
    out.data.insert(
        "per_layer_mean_row_norm".into(),
        Value::Object(data.clone()),
    );
    out.figures.push(Figure {
        stem: "residual_growth".into(),
        panels,
        cols: 3,
    });
    let g = |k: &str, w: &str| -> Vec<f64> { serde_json::from_value(data[k][w].clone()).unwrap() };
    let pre = g("pre, final norm", "trained");
    let post = g("post", "trained");
    out.conclusion = format!(
        "After training, the pre-LN stream's mean row norm grows from {} after block 1 to {} after block {layers} ({}x); with the final norm removed it ends at {}. Post-LN keeps every block's output at {} (sqrt(d) = {:.2}), since each block ends in a norm.",
        f(pre[1], 2),
        f(pre[layers], 2),
        f(pre[layers] / pre[1], 2),
        f(g("pre, no final norm", "trained")[layers], 2),
        f(post[1..].iter().sum::<f64>() / layers as f64, 2),
        (d as f64).sqrt()
    );
    out.tables.push(table);
    Ok(out)
}

/// The run grid of an experiment, for `normlab sweep <id>`.
pub fn experiment_specs(id: &str) -> Result<Vec<RunSpec>> {
    let a = ExpArgs::default();
    let mut cfgs = Vec::new();
    match id {
        "collapse" => {
            for l in [6, 12, 20] {
                for n in ["none", "layernorm", "rmsnorm"] {
                    for s in 0..3 {
                        cfgs.push(cfg(json!({"model": "toy", "layers": l, "norm": n, "placement": "pre", "lr": 1e-3, "steps": 3000, "seed": s, "shards": 1, "eval_every": 300})));
                    }
                }
            }
        }
        "lr-sensitivity" => {
            for l in [12, 30] {
                for p in ["pre", "post"] {
                    for w in [0, 1000] {
                        for lr in [1e-4, 3e-4, 1e-3, 3e-3, 1e-2] {
                            for s in 0..3 {
                                cfgs.push(cfg(json!({"model": "toy", "layers": l, "placement": p, "lr": lr, "warmup": w, "steps": 3000, "seed": s, "shards": 1, "eval_every": 500})));
                            }
                        }
                    }
                }
            }
        }
        _ => {
            return Err(format!(
            "experiment {id} has no sweep grid (use collapse or lr-sensitivity, or a grid file)"
        )
            .into())
        }
    }
    let _ = a;
    Ok(specs(cfgs.into_iter().collect::<Result<Vec<_>, _>>()?))
}

/// convert: train (or take) LayerNorm GPTs of several placements, convert
/// each to RMSNorm (exactly where possible), then calibrate the inexact ones.
pub fn convert_exp(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    use crate::convert;
    let calib_steps = a.calibrate.unwrap_or(if a.quick { 100 } else { 300 });
    let steps = a.steps.unwrap_or(if a.quick { 150 } else { 1000 });
    let seed = a.seed.unwrap_or(0);
    // Models: given run folders, or trained here.
    let mut models: Vec<(String, TrainConfig, Model, Vec<f32>)> = Vec::new();
    match &a.runs {
        Some(dirs) => {
            for d in dirs {
                let (tc, m, p) = crate::train::run::load_model(d)?;
                models.push((d.display().to_string(), tc, m, p));
            }
        }
        None => {
            let placements = a.placements.clone().unwrap_or(vec![
                Placement::Pre,
                Placement::Post,
                Placement::Sandwich,
            ]);
            let base = if a.quick { tiny_gpt() } else { full_gpt() };
            let mut cfgs = Vec::new();
            for p in &placements {
                let mut v = merge(
                    &base,
                    json!({"placement": p.name(), "norm": "layernorm", "steps": steps, "seed": seed, "shards": 1}),
                );
                if let Some(l) = a.layers.as_ref().and_then(|l| l.first().copied()) {
                    v = merge(&v, json!({"layers": l}));
                }
                cfgs.push(cfg(v)?);
            }
            for r in run_specs(a, specs(cfgs), true, progress)? {
                let p = final_params(a, &r)?;
                let m = Model::new(&r.cfg.model)?;
                models.push((
                    format!("{} (trained {} steps)", r.cfg.model.placement, r.cfg.steps),
                    r.cfg.clone(),
                    m,
                    p,
                ));
            }
        }
    }
    let n_check = if a.quick { 32 } else { 128 };
    let mut table = Table::new(
        format!("LayerNorm -> RMSNorm on {n_check} held-out sequences; calibration: {calib_steps} distillation steps (Adam 1e-3)"),
        &["model", "exact norms", "conversion", "max |logit diff|", "mean |logit diff|", "eval loss original", "eval loss converted", "after calibration: mean |diff|", "eval loss"],
    );
    let mut records = Vec::new();
    let mut panels = Vec::new();
    for (name, tc, model, params) in &models {
        let data = load_data(tc)?;
        let c = convert::to_rmsnorm(&model.cfg, params, true)?;
        let new = Model::new(&c.cfg)?;
        let before = convert::compare((model, params), (&new, &c.params), &data, n_check);
        let exact_norms = c.norms.iter().filter(|n| n.exact).count();
        let mut curve = vec![(0.0, before.mean_abs_logit_diff)];
        let after = if c.exact {
            None
        } else {
            let every = (calib_steps / 10).max(1);
            let cal = convert::calibrate_with(
                (model, params),
                (&new, &c.params),
                &data,
                tc.seed,
                calib_steps,
                1e-3,
                tc.batch.min(16),
                &mut |s, p| {
                    if s % every == 0 {
                        curve.push((
                            s as f64,
                            convert::compare((model, params), (&new, p), &data, 16)
                                .mean_abs_logit_diff,
                        ));
                    }
                },
            );
            Some(convert::compare(
                (model, params),
                (&new, &cal),
                &data,
                n_check,
            ))
        };
        table.row(vec![
            name.clone(),
            format!("{exact_norms} of {}", c.norms.len()),
            if c.exact {
                "exact".into()
            } else {
                "approximate".into()
            },
            f(before.max_abs_logit_diff, 3),
            f(before.mean_abs_logit_diff, 3),
            f(before.eval_loss_a, 4),
            f(before.eval_loss_b, 4),
            after
                .as_ref()
                .map(|x| f(x.mean_abs_logit_diff, 3))
                .unwrap_or_else(|| "-".into()),
            after
                .as_ref()
                .map(|x| f(x.eval_loss_b, 4))
                .unwrap_or_else(|| "-".into()),
        ]);
        records.push(json!({
            "model": name, "placement": model.cfg.placement.name(), "exact": c.exact, "exact_norms": exact_norms, "norms": c.norms.len(),
            "max_abs_logit_diff": before.max_abs_logit_diff, "mean_abs_logit_diff": before.mean_abs_logit_diff, "max_abs_logit": before.max_abs_logit,
            "eval_loss_original": before.eval_loss_a, "eval_loss_converted": before.eval_loss_b,
            "calibrated": after.as_ref().map(|x| json!({"steps": calib_steps, "max_abs_logit_diff": x.max_abs_logit_diff, "mean_abs_logit_diff": x.mean_abs_logit_diff, "eval_loss": x.eval_loss_b})),
        }));
        if !c.exact {
            panels.push(Series::new(model.cfg.placement.name(), curve));
        }
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "gpt", "steps": steps, "calibration_steps": calib_steps, "check_sequences": n_check}),
        ),
        vec![seed],
    );
    out.data.insert("models".into(), json!(records));
    out.figures.push(Figure {
        stem: "convert".into(),
        panels: vec![Panel::Line(LineChart {
            title: "approximate conversions during calibration".into(),
            x_label: "calibration step".into(),
            y_label: "mean |logit diff| (16 sequences)".into(),
            series: panels,
            log_y: true,
            log_x: false,
        })],
        cols: 1,
    });
    let parts: Vec<String> = records
        .iter()
        .map(|r| {
            let base = format!(
                "{}: {} ({} of {} norms exact), mean |logit diff| {}, eval loss {} -> {}",
                r["placement"].as_str().unwrap(),
                if r["exact"] == true {
                    "exact"
                } else {
                    "approximate"
                },
                r["exact_norms"],
                r["norms"],
                f(r["mean_abs_logit_diff"].as_f64().unwrap(), 3),
                f(r["eval_loss_original"].as_f64().unwrap(), 4),
                f(r["eval_loss_converted"].as_f64().unwrap(), 4)
            );
            match r["calibrated"].as_object() {
                Some(c) => format!(
                    "{base}, after calibration {} (eval {})",
                    f(c["mean_abs_logit_diff"].as_f64().unwrap(), 3),
                    f(c["eval_loss"].as_f64().unwrap(), 4)
                ),
                None => base,
            }
        })
        .collect();
    out.conclusion = format!("{}.", parts.join("; "));
    out.tables.push(table);
    // A real pretrained Post-LN model, when available.
    let bert_dir = a.bert.clone().or_else(|| {
        Some(std::path::PathBuf::from("models/all-MiniLM-L6-v2"))
            .filter(|p| p.join("model.safetensors").exists())
    });
    if let Some(dir) = bert_dir {
        use crate::bert;
        let b = bert::Bert::load(&dir)?;
        let (nc, nh) = if a.quick { (16, 12) } else { (64, 48) };
        let enc = |v: Vec<String>| v.iter().map(|s| b.encode(s)).collect::<Result<Vec<_>, _>>();
        let calib = enc(bert::sample_sentences(nc, 0, 37))?;
        let held = enc(bert::sample_sentences(nh, 5, 41))?;
        let originals: Vec<Vec<f32>> = held.iter().map(|ids| b.embed_ids(ids, &b.norms)).collect();
        let cos = |norms: &[bert::NormParams]| -> (f64, f64) {
            let v: Vec<f64> = held
                .iter()
                .zip(&originals)
                .map(|(ids, orig)| bert::cosine(orig, &b.embed_ids(ids, norms)))
                .collect();
            (
                v.iter().sum::<f64>() / v.len() as f64,
                v.iter().cloned().fold(f64::INFINITY, f64::min),
            )
        };
        let variants = [
            (
                "RMSNorm, gamma kept, beta dropped (--approximate)",
                bert::rms_norms(&b, false),
            ),
            (
                "RMSNorm + bias (gamma and beta kept)",
                bert::rms_norms(&b, true),
            ),
            (
                "calibrated: per-feature gain and bias fitted layer by layer",
                bert::calibrate_rms(&b, &calib),
            ),
        ];
        let mut t2 = Table::new(
            format!("{} (Post-LN, {} norms): sentence-embedding cosine to the original on {nh} held-out sentences (calibration on {nc} others)", dir.display(), b.norms.len()),
            &["converted norms", "mean cosine", "min cosine"],
        );
        let mut recs = Vec::new();
        for (name, norms) in &variants {
            let (m, mn) = cos(norms);
            t2.row(vec![name.to_string(), f(m, 4), f(mn, 4)]);
            recs.push(json!({"variant": name, "mean_cosine": m, "min_cosine": mn}));
        }
        out.conclusion.push_str(&format!(
            " On the pretrained Post-LN encoder ({}), RMSNorm with gamma only gives embeddings with mean cosine {} to the original; calibration brings it to {}.",
            dir.display(),
            f(recs[0]["mean_cosine"].as_f64().unwrap(), 4),
            f(recs[2]["mean_cosine"].as_f64().unwrap(), 4)
        ));
        out.data.insert("bert".into(), json!({"model": dir.display().to_string(), "calibration_sentences": nc, "held_out_sentences": nh, "variants": recs}));
        out.tables.push(t2);
    }
    Ok(out)
}
