//! residual-routing (claims C25, C27): is the plain residual `x + F(x)` the
//! best way through depth? Pre-LN with one stream against
//! hyper-connections (4 streams, static and dynamic), mHC (4 streams,
//! Sinkhorn-projected mixing) and block Attention Residuals (about 8
//! blocks: S = 2L/8 sublayers each), on the toy net (30 blocks, 3 seeds)
//! and the GPT (12 blocks, 2 seeds) at lr 1e-3 and 1e-2. Per design:
//! parameters, the training step's time (interleaved, one thread, as the
//! runs train), held-out loss at equal steps and at equal wall time,
//! status, stream growth, the composite mixing's gain, and depth use (the
//! loss rise when a block is skipped; an AttnRes block skipped is no
//! source). C25's arithmetic (`stream_sum.rs`) runs beside it.

use super::args::{ExpArgs, ExpFlag};
use super::depth_use::{self, thirds};
use super::framework::{num, result, ExpResult, Experiment, Progress};
use super::runs::{self, final_params, full_gpt, grid_settings, lrs_json, tiny_gpt};
use super::stream_sum;
use crate::bench::compare;
use crate::present::{f, opt, Figure, Series, Table};
use crate::sweep::{mean_std, RunResult, RunSpec, SeedGroup};
use normlab::error::Result;
use normlab::model::{Model, ModelKind};
use normlab::train::{Status, TrainConfig};
use serde_json::json;

mod cells;
mod verdict;
pub(crate) use cells::Design;
use cells::{Cell, Settings, Use, DESIGNS, STREAMS};
use verdict::{check_c27, conclusion};

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "residual-routing",
    question: "Do wider or routed residual streams (hyper-connections, mHC, Attention Residuals) beat the plain Pre-LN residual?",
    flags: &[ExpFlag::Model, ExpFlag::Lrs, ExpFlag::Grid],
    run,
    grid: Some(grid),
    hidden_training: None,
    quick_decides: false,
};

fn settings(a: &ExpArgs) -> Settings {
    Settings {
        models: match a.model {
            Some(m) => vec![m],
            None => vec![ModelKind::Toy, ModelKind::Gpt],
        },
        lrs: a.lrs.clone().unwrap_or(vec![1e-3, 1e-2]),
    }
}

/// A model family's base config and seeds: the toy net at depth 30 (its
/// chapters' 3000 steps at a constant rate), the GPT at 12 blocks (its
/// chapters' 1000 steps, batch 16, 100 warm-up steps, cosine decay).
fn base(a: &ExpArgs, m: ModelKind) -> Result<(TrainConfig, Vec<u64>)> {
    let (mut c, seeds) = match (m, a.quick) {
        (ModelKind::Toy, true) => (
            runs::toy(|c| {
                c.model.layers = 4;
                c.steps = 60;
                c.eval_sequences = 64;
            })?,
            a.seeds_or(1, 3),
        ),
        (ModelKind::Toy, false) => (runs::toy(|c| c.model.layers = 30)?, a.seeds_or(1, 3)),
        (ModelKind::Gpt, true) => (tiny_gpt().with(|c| c.steps = 80)?, a.seeds_or(1, 2)),
        (ModelKind::Gpt, false) => (full_gpt().with(|c| c.model.layers = 12)?, a.seeds_or(1, 2)),
    };
    c.steps = a.steps.unwrap_or(c.steps);
    c.shards = 1;
    c.eval_every = (c.steps / 10).max(1);
    Ok((c, seeds))
}

/// Model x design x lr x seed.
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let s = settings(a);
    let mut cfgs = Vec::new();
    for &m in &s.models {
        let (b, seeds) = base(a, m)?;
        for d in DESIGNS {
            for &lr in &s.lrs {
                for &seed in &seeds {
                    cfgs.push(b.with(|c| {
                        d.apply(&mut c.model);
                        c.lr = lr;
                        c.seed = seed;
                    })?);
                }
            }
        }
    }
    Ok(runs::specs(cfgs))
}

/// The held-out loss of a run at step `s` (linear between evaluations;
/// the first evaluation's before it, the last one's after it).
fn loss_at(r: &RunResult, s: f64) -> Option<f64> {
    let c = runs::eval_curve(r);
    let (first, last) = (c.first()?, c.last()?);
    if !c.iter().all(|p| p.1.is_finite()) {
        return None;
    }
    if s <= first.0 {
        return Some(first.1);
    }
    if s >= last.0 {
        return Some(last.1);
    }
    c.windows(2).find(|w| w[1].0 >= s).map(|w| {
        let t = (s - w[0].0) / (w[1].0 - w[0].0);
        w[0].1 + t * (w[1].1 - w[0].1)
    })
}

/// Held-out sequences the depth-use measures run on.
fn use_sequences(m: ModelKind, quick: bool) -> usize {
    match (m, quick) {
        (ModelKind::Toy, _) => 128,
        (_, true) => 16,
        _ => 32,
    }
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let s = settings(a);
    let rs = runs::run_grid(a, grid(a)?, true, progress)?;
    let mut cells = Vec::new();
    let mut uses = Vec::new();
    let mut seeds_of = Vec::new();
    let mut panels = Vec::new();
    for &m in &s.models {
        let (b, seeds) = base(a, m)?;
        seeds_of.push(json!({"model": m.to_string(), "seeds": seeds, "layers": b.model.layers, "steps": b.steps}));
        // The step's time, designs interleaved (one thread, as the runs).
        let timed: Vec<(&str, TrainConfig)> = DESIGNS
            .iter()
            .map(|d| Ok((d.name(), b.with(|c| d.apply(&mut c.model))?)))
            .collect::<Result<_>>()?;
        let rounds = compare::train_steps(&timed, 1, if a.quick { 2 } else { 10 })?;
        for (i, d) in DESIGNS.iter().enumerate() {
            let params = Model::new(&timed[i].1.model)?.num_params();
            let ratio = rounds.ratio(i, 0);
            let mut series = Vec::new();
            for &lr in &s.lrs {
                let g: Vec<&RunResult> = rs
                    .iter()
                    .filter(|r| {
                        r.cfg.model.kind == m && Design::of(&r.cfg.model) == *d && r.cfg.lr == lr
                    })
                    .collect();
                let sg = SeedGroup::of_runs(g.iter().copied());
                // Plain's steps in the same wall time, at this design's pace.
                let eq = b.steps as f64 / ratio.median.max(1e-9);
                let at_eq: Vec<f64> = g
                    .iter()
                    .filter(|r| r.summary.status != Status::Diverged)
                    .filter_map(|r| loss_at(r, eq))
                    .collect();
                let ends: Vec<_> = g
                    .iter()
                    .filter_map(|r| runs::last_stream_record(r))
                    .collect();
                let growth: Vec<f64> = g.iter().filter_map(|r| runs::stream_growth(r)).collect();
                // Only designs that mix streams have a composite mixing
                // (AttnRes's is the identity: its gain 1 by definition).
                let gain: Vec<f64> = ends
                    .iter()
                    .filter_map(|x| x.streams.as_ref())
                    .filter(|st| st.mix.iter().any(|m| !m.is_empty()))
                    .map(|st| st.gain_fwd_max)
                    .collect();
                let (eqm, eqs) = mean_std(&at_eq);
                cells.push(Cell {
                    model: m.to_string(),
                    design: d.name(),
                    lr: num(lr),
                    params,
                    step_seconds: rounds.median(i),
                    step_ratio: ratio.median,
                    step_ratio_q1_q3: (ratio.q1, ratio.q3),
                    status: sg.status.name(),
                    loss: sg.mean,
                    loss_std: sg.std,
                    equal_time_step: eq.min(b.steps as f64),
                    loss_equal_time: eqm,
                    loss_equal_time_std: eqs,
                    stream_growth: mean_std(&growth).0,
                    mixing_gain: mean_std(&gain).0,
                });
                if lr == s.lrs[0] {
                    series.push(runs::group_series(
                        format!("{} {}", d.name(), m),
                        &g,
                        &runs::eval_curve,
                    ));
                    let mut per = Vec::new();
                    for r in g.iter().filter(|r| r.summary.status != Status::Diverged) {
                        let n = use_sequences(m, a.quick);
                        per.push(depth_use::measure_on(&r.cfg, &final_params(a, r)?, n)?);
                    }
                    if !per.is_empty() {
                        let skip = depth_use::mean_of(
                            &per.iter().map(|u| &u.skip_rise).collect::<Vec<_>>(),
                        );
                        let (s1, s3) = thirds(&skip);
                        uses.push(Use {
                            model: m.to_string(),
                            design: d.name(),
                            skip_first: s1,
                            skip_last: s3,
                            idle: skip.iter().filter(|&&x| x < 0.01).count(),
                            blocks: skip.len(),
                            skip_loss_rise: skip,
                        });
                    }
                }
            }
            panels.extend(series);
        }
    }
    let sum = stream_sum::measure(a, &rs)?;
    let mut out = result(
        grid_settings(
            a,
            json!({"models": seeds_of, "designs": DESIGNS.iter().map(|d| d.name()).collect::<Vec<_>>(), "streams": STREAMS, "attnres_block": "round(2L / 8) sublayers", "lrs": lrs_json(&s.lrs)}),
        ),
        a.seeds_or(1, 3),
    );
    out.tables.push(cell_table(&cells));
    out.tables.push(use_table(&uses, s.lrs[0]));
    out.tables.extend(sum.tables());
    let mut figs = Vec::new();
    for m in &s.models {
        let series: Vec<Series> = panels
            .iter()
            .filter(|p| p.name.ends_with(&format!(" {m}")))
            .cloned()
            .collect();
        figs.push(runs::eval_panel(format!("{m}, lr {}", s.lrs[0]), series));
    }
    figs.push(sum.panel());
    let n = figs.len();
    out.figures
        .push(Figure::new("residual_routing", figs, n.min(3)));
    out.conclusion = conclusion(&cells, &uses, &s);
    out.checks.push(sum.check());
    out.checks.push(check_c27(&cells, &uses, &s));
    out.data.insert("configs".into(), json!(cells));
    out.data.insert("depth_use".into(), json!(uses));
    out.data.insert("stream_sum".into(), json!(sum));
    out.data.insert("runs".into(), runs::records(&rs));
    Ok(out)
}

fn cell_table(cells: &[Cell]) -> Table {
    let mut t = Table::new(
        "Every design at each learning rate: loss = final held-out loss (mean ± std over seeds); equal time = at the wall time plain Pre-LN needs for all its steps (the design's curve at the step it reaches then; the GPT's cosine schedule has not decayed there, which favours Pre-LN); step = median seconds per training step on one thread, interleaved, against Pre-LN's with the per-round quartiles; growth = stream RMS after the last block over after the first; gain = the composite mixing's largest forward gain over tokens (HC and mHC; AttnRes does not mix streams)",
        &["model", "design", "lr", "params", "step", "status", "loss", "loss at equal time (step)", "growth", "gain"],
    );
    for c in cells {
        t.row(vec![
            c.model.clone(),
            c.design.into(),
            c.lr.to_string(),
            c.params.to_string(),
            format!(
                "{} ms ({}x, {}-{})",
                f(c.step_seconds * 1e3, 1),
                f(c.step_ratio, 2),
                f(c.step_ratio_q1_q3.0, 2),
                f(c.step_ratio_q1_q3.1, 2)
            ),
            c.status.into(),
            pm(c.loss, c.loss_std),
            format!(
                "{} ({})",
                pm(c.loss_equal_time, c.loss_equal_time_std),
                c.equal_time_step.round()
            ),
            opt(c.stream_growth, 2),
            opt(c.mixing_gain, 3),
        ]);
    }
    t
}

fn use_table(uses: &[Use], lr: f32) -> Table {
    let mut t = Table::new(
        format!("Depth use after training at lr {lr} (C22's measure; mean over seeds that did not diverge): the held-out loss rise when one block is skipped, first and last third of the blocks after the first; idle = blocks whose skip costs < 0.01 nats"),
        &["model", "design", "skip cost first / last third", "idle blocks"],
    );
    for u in uses {
        t.row(vec![
            u.model.clone(),
            u.design.into(),
            format!("{} / {}", f(u.skip_first, 3), f(u.skip_last, 3)),
            format!("{} of {}", u.idle, u.blocks),
        ]);
    }
    t
}

/// `mean ± std`.
fn pm(m: Option<f64>, s: Option<f64>) -> String {
    match (m, s) {
        (Some(m), Some(s)) => format!("{} ± {}", f(m, 3), f(s, 3)),
        _ => opt(m, 3),
    }
}
