//! What the training experiments share: typed configs from a model
//! family's defaults, the small and full GPT settings, running a grid through the
//! sweep engine (parallel; with `--out`, resumable under `<out>/runs`), one
//! JSON record per run, loss curves, and a run's final parameters.

use super::args::ExpArgs;
use super::framework::{num, Progress};
use crate::present::{LineChart, Panel, Series};
use crate::sweep::{self, RunResult, RunSpec, SweepOptions};
use normlab::error::Result;
use normlab::model::ModelKind;
use normlab::nn::norm::mean_row_norm;
use normlab::train::{StepRecord, TrainConfig};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The toy net's defaults (`normlab train`), changed by `f` and checked.
pub fn toy(f: impl FnOnce(&mut TrainConfig)) -> Result<TrainConfig> {
    TrainConfig::defaults(ModelKind::Toy).with(f)
}

/// A small GPT for quick runs.
pub fn tiny_gpt() -> TrainConfig {
    let mut c = full_gpt();
    c.model.layers = 2;
    c.model.d_model = 64;
    c.model.heads = 2;
    c.model.seq = 64;
    c.model.hidden = 256;
    c.batch = 8;
    c.eval_sequences = 16;
    c.eval_every = 25;
    c.warmup = 10;
    c
}

/// The GPT of the full experiments (the defaults of `normlab train --model gpt`).
pub fn full_gpt() -> TrainConfig {
    TrainConfig::defaults(ModelKind::Gpt)
}

/// The GPT base of an experiment: tiny with `--quick`, else full; with
/// `--layers L`, L blocks.
pub fn gpt_base(a: &ExpArgs) -> TrainConfig {
    let mut base = if a.quick { tiny_gpt() } else { full_gpt() };
    if let Some(l) = a.first_layers() {
        base.model.layers = l;
    }
    base
}

/// Run specs of configs (duplicates removed, first kept).
pub fn specs(cfgs: Vec<TrainConfig>) -> Vec<RunSpec> {
    let mut seen = std::collections::HashSet::new();
    cfgs.into_iter()
        .map(|c| RunSpec {
            id: sweep::run_id(&c),
            cfg: c,
        })
        .filter(|s| seen.insert(s.id.clone()))
        .collect()
}

/// Run `specs` through the sweep engine with the experiment's options; the
/// results come back in the order of `specs`.
pub fn run_grid(
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
        wait_for_held: true,
        stop: a.stop.clone(),
    };
    let mut results = sweep::run_all(&specs, &opts, &|d, t, id| progress(d, t, id))?.complete()?;
    let order: BTreeMap<&str, usize> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    results.sort_by_key(|r| order[r.id.as_str()]);
    Ok(results)
}

/// One JSON record per run (for result.json).
pub fn record(r: &RunResult) -> Value {
    let c = &r.cfg;
    let m = &c.model;
    json!({
        "id": r.id, "model": m.kind.to_string(), "layers": m.layers, "d_model": m.d_model, "norm": m.norm.name(),
        "placement": m.placement.name(), "init": m.init.name(), "lr": num(c.lr), "warmup": c.warmup, "qk_norm": m.qk_norm, "seed": c.seed, "steps": c.steps,
        "status": r.summary.status.name(), "final_eval_loss": r.summary.final_eval_loss, "best_eval_loss": r.summary.best_eval_loss,
        "diverged_at_step": r.summary.diverged_at_step, "final_loss": r.summary.final_loss, "steps_per_sec": r.summary.steps_per_sec,
    })
}

/// Records of all runs.
pub fn records(rs: &[RunResult]) -> Value {
    json!(rs.iter().map(record).collect::<Vec<_>>())
}

/// A run's last logged record with the stream's RMS per block.
pub fn last_stream_record(r: &RunResult) -> Option<&StepRecord> {
    r.metrics.iter().rev().find(|x| !x.residual_rms.is_empty())
}

/// A run's stream growth at its last logged record: the stream's RMS after
/// the last block over after the first (None when not finite).
pub fn stream_growth(r: &RunResult) -> Option<f64> {
    let x = last_stream_record(r)?;
    Some(x.residual_rms.last()? / x.residual_rms.first()?).filter(|v| v.is_finite())
}

/// Eval-loss curve of a run: (step, held-out loss) at evaluation steps.
pub fn eval_curve(r: &RunResult) -> Vec<(f64, f64)> {
    r.metrics
        .iter()
        .filter_map(|m| m.eval_loss.map(|e| (m.step as f64, e)))
        .collect()
}

/// A figure panel of held-out loss against step.
pub fn eval_panel(title: impl Into<String>, series: Vec<Series>) -> Panel {
    LineChart::new(title, "step", "held-out loss", series).panel()
}

/// Training-loss curve of a run (logged steps).
pub fn train_curve(r: &RunResult) -> Vec<(f64, f64)> {
    r.metrics.iter().map(|m| (m.step as f64, m.loss)).collect()
}

/// A seed group's mean curve as a series, marked diverged when most of its
/// seeds diverged (the group's status), so it never sets a chart's range.
pub fn group_series(
    name: impl Into<String>,
    g: &[&RunResult],
    sel: &dyn Fn(&RunResult) -> Vec<(f64, f64)>,
) -> Series {
    let diverged = crate::sweep::SeedGroup::of_runs(g.iter().copied()).status
        == normlab::train::Status::Diverged;
    Series::new(name, mean_curve(g, sel)).diverged(diverged)
}

/// The mean over runs of a curve (points present in all).
pub fn mean_curve(
    g: &[&RunResult],
    sel: &dyn Fn(&RunResult) -> Vec<(f64, f64)>,
) -> Vec<(f64, f64)> {
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

/// A run's final parameters: kept in memory, or read from its checkpoint.
pub fn final_params(a: &ExpArgs, r: &RunResult) -> Result<Vec<f32>> {
    if let Some(p) = &r.params {
        return Ok(p.clone());
    }
    let dir = a
        .out
        .as_ref()
        .map(|o| o.join("runs").join(&r.id))
        .ok_or_else(|| normlab::Error::Internal("run parameters unavailable".into()))?;
    Ok(normlab::train::run::load_model(&dir)?.2)
}

/// The settings block of a training experiment: `quick`, `jobs` and `extra`.
pub fn grid_settings(a: &ExpArgs, extra: Value) -> Value {
    let mut m = json!({"quick": a.quick, "jobs": a.jobs()});
    for (k, v) in extra.as_object().expect("settings are an object") {
        m[k] = v.clone();
    }
    m
}

/// Learning rates as JSON numbers in their shortest decimal form.
pub fn lrs_json(lrs: &[f32]) -> Value {
    json!(lrs.iter().map(|&v| num(v)).collect::<Vec<_>>())
}

/// Mean row norm of the residual stream after the embedding (index 0) and
/// after each block, on the first held-out batch (at most 16 sequences).
pub fn block_row_norms(cfg: &TrainConfig, params: &[f32]) -> Result<Vec<f64>> {
    let model = normlab::model::Model::new(&cfg.model)?;
    let data = normlab::train::trainer::load_data(cfg)?;
    let (batch, t, d) = (cfg.batch.min(16), cfg.model.seq, cfg.model.d_model);
    let mut ws = model.workspace(batch, t);
    for i in 0..batch {
        let r = i * t..(i + 1) * t;
        data.eval_sequence(i, t, &mut ws.tokens[r.clone()], &mut ws.targets[r]);
    }
    model.forward(params, &mut ws);
    // The embedding output is the first block's input: recompute it.
    let mut x0 = vec![0.0; batch * t * d];
    model.emb.forward(params, &ws.tokens, t, &mut x0);
    let mut out = vec![mean_row_norm(&x0, d)];
    out.extend(ws.blocks.iter().map(|b| mean_row_norm(b.output(), d)));
    Ok(out)
}

/// A per-block diagnostic over training: at each logged step that has it,
/// the per-block values `get` picks, reduced to one number by `reduce`
/// (e.g. their mean, or [`nan_max`](normlab::train::nan_max)).
pub fn block_curve(
    r: &RunResult,
    get: fn(&normlab::train::StepRecord) -> &Vec<f64>,
    reduce: fn(&[f64]) -> f64,
) -> Vec<(f64, f64)> {
    r.metrics
        .iter()
        .filter(|m| !get(m).is_empty())
        .map(|m| (m.step as f64, reduce(get(m))))
        .collect()
}
