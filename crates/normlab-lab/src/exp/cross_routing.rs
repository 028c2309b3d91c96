//! The cross-check's C27 comparison: residual routing trained on both
//! sides. C12's toy net (LayerNorm, Pre-LN, PyTorch's default init, Adam
//! lr 1e-3, batch 32) as plain Pre-LN, static hyper-connections and mHC
//! with 4 streams, and block Attention Residuals (round(2L / 8) sublayers
//! per block), the same configurations residual-routing trains at a
//! smaller depth and fewer steps (PyTorch on one thread is the slow side).
//! The PyTorch side (`cross_check.py`) builds mHC from transformers'
//! `DeepseekV4HyperConnection` and `DeepseekV4HyperHead` and writes HC and
//! AttnRes from their papers. Agreement, fixed before the chapter's runs:
//! - per design, the training rule of `cross_rules.rs` (same status, mean
//!   final held-out losses within twice the pooled seed std, >= 0.05);
//! - the order of the designs' mean final losses: no pair of designs that
//!   one side orders beyond its own bound (twice the pair's pooled seed
//!   std, at least 0.05 nats) is ordered the other way by the other side;
//! - per design, the stream growth (RMS after the last block over after the
//!   first, on the last training batch), mean over seeds, within a factor
//!   of 2 between the sides.

use super::cross_rules::{compare_runs, mean_std, range, torch_runs};
use super::residual_routing::Design;
use super::runs;
use crate::present::{f, Table};
use crate::sweep::RunResult;
use normlab::error::Result;
use normlab::model::InitScheme;
use normlab::nn::Placement;
use normlab::train::TrainConfig;
use serde_json::{json, Value};

/// The designs compared, the baseline first.
const DESIGNS: [Design; 4] = [Design::Plain, Design::Hc, Design::Mhc, Design::AttnRes];

/// The learning rate (residual-routing's first).
const LR: f32 = 1e-3;

/// The largest ratio of the two sides' mean stream growth that agrees.
const GROWTH_FACTOR: f64 = 2.0;

/// C27's comparison: the toy net's size, steps and seeds.
pub struct C27 {
    /// Blocks.
    pub layers: usize,
    /// Training steps.
    pub steps: usize,
    /// Seeds per side and design.
    pub seeds: u64,
}

impl C27 {
    /// Full (the book: 12 blocks, 1000 steps, 2 seeds) or quick.
    pub fn new(quick: bool) -> C27 {
        if quick {
            C27 {
                layers: 4,
                steps: 100,
                seeds: 1,
            }
        } else {
            C27 {
                layers: 12,
                steps: 1000,
                seeds: 2,
            }
        }
    }

    /// What the PyTorch side is asked.
    pub fn request(&self) -> Value {
        json!({"layers": self.layers, "lr": LR, "steps": self.steps, "seeds": self.seeds,
               "designs": DESIGNS.map(Design::name)})
    }

    /// The setting as result.json records it.
    pub fn describe(&self) -> Value {
        json!({"layers": self.layers, "steps": self.steps, "seeds": self.seeds, "lr": LR,
               "designs": DESIGNS.map(Design::name), "streams": 4, "init": "torch"})
    }

    /// normlab's runs, design by design, seed by seed.
    pub fn configs(&self) -> Result<Vec<TrainConfig>> {
        let mut v = Vec::new();
        for d in DESIGNS {
            for seed in 0..self.seeds {
                v.push(runs::toy(|c| {
                    c.model.layers = self.layers;
                    c.model.placement = Placement::Pre;
                    c.model.init = InitScheme::Torch;
                    d.apply(&mut c.model);
                    c.lr = LR;
                    c.steps = self.steps;
                    c.seed = seed;
                    c.shards = 1;
                    c.eval_every = (self.steps / 10).max(1);
                })?);
            }
        }
        Ok(v)
    }
}

/// `names` ordered by `means`, lowest first ("a < b < c").
fn order(names: &[&str], means: &[f64]) -> String {
    let mut i: Vec<usize> = (0..names.len()).collect();
    i.sort_by(|&a, &b| means[a].total_cmp(&means[b]));
    i.iter().map(|&k| names[k]).collect::<Vec<_>>().join(" < ")
}

/// The pairs of designs the two sides order against each other's bound
/// (see the module doc); `side[k]`: design k's (mean, std) on one side.
fn crossed_pairs(names: &[&str], nl: &[(f64, f64)], pt: &[(f64, f64)]) -> Vec<String> {
    let bound =
        |a: (f64, f64), b: (f64, f64)| (2.0 * ((a.1 * a.1 + b.1 * b.1) / 2.0).sqrt()).max(0.05);
    let mut out = Vec::new();
    for i in 0..names.len() {
        for j in i + 1..names.len() {
            let (dn, dp) = (nl[i].0 - nl[j].0, pt[i].0 - pt[j].0);
            let beyond = dn.abs() > bound(nl[i], nl[j]) || dp.abs() > bound(pt[i], pt[j]);
            if beyond && dn.signum() != dp.signum() {
                out.push(format!("{} / {}", names[i], names[j]));
            }
        }
    }
    out
}

/// Compare normlab's runs `rs` (C27's configurations) with PyTorch's; add
/// rows and records.
pub fn compare(
    c: &C27,
    rs: &[RunResult],
    torch: &Value,
    table: &mut Table,
    records: &mut Vec<Value>,
) -> Result<()> {
    let setting = format!("toy net, {} blocks, lr 1e-3, {} steps", c.layers, c.steps);
    let names = DESIGNS.map(Design::name);
    let (mut nl_loss, mut pt_loss) = (Vec::new(), Vec::new());
    for d in DESIGNS {
        let nl: Vec<&RunResult> = rs
            .iter()
            .filter(|r| Design::of(&r.cfg.model) == d)
            .collect();
        let pt = torch_runs(torch, "C27", d.name())?;
        let stat = format!("{setting}, {}: status and final held-out loss", d.name());
        records.push(compare_runs("C27", stat, "-", &nl, &pt, table));
        let finite = |v: Vec<Option<f64>>| -> Vec<f64> { v.into_iter().flatten().collect() };
        nl_loss.push(mean_std(&finite(
            nl.iter().map(|r| r.summary.final_eval_loss).collect(),
        )));
        pt_loss.push(mean_std(&finite(
            pt.iter().map(|r| r["final_eval_loss"].as_f64()).collect(),
        )));
        let nl_g = finite(nl.iter().map(|r| runs::stream_growth(r)).collect());
        let pt_g = finite(pt.iter().map(|r| r["growth"].as_f64()).collect());
        let ((gn, _), (gp, _)) = (mean_std(&nl_g), mean_std(&pt_g));
        let ratio = gn.max(gp) / gn.min(gp);
        let agrees = !nl_g.is_empty() && !pt_g.is_empty() && ratio <= GROWTH_FACTOR;
        let stat = format!(
            "{setting}, {}: stream growth, last block over first",
            d.name()
        );
        let side = |v: &[f64]| {
            let (m, lo, hi) = range(v);
            format!("{} [{}, {}]", f(m, 3), f(lo, 3), f(hi, 3))
        };
        table.row(vec![
            "C27".into(),
            stat.clone(),
            nl.len().to_string(),
            side(&nl_g),
            side(&pt_g),
            "-".into(),
            format!(
                "{} (ratio of means {}, bound {GROWTH_FACTOR})",
                verdict(agrees),
                f(ratio, 3)
            ),
        ]);
        records.push(json!({"claim": "C27", "statistic": stat, "agrees": agrees,
            "rule": "the two sides' mean stream growth within a factor of 2",
            "normlab": {"mean": gn, "values": nl_g}, "torch": {"mean": gp, "values": pt_g}}));
    }
    let crossed = crossed_pairs(&names, &nl_loss, &pt_loss);
    let means = |v: &[(f64, f64)]| v.iter().map(|m| m.0).collect::<Vec<_>>();
    let (on, op) = (
        order(&names, &means(&nl_loss)),
        order(&names, &means(&pt_loss)),
    );
    let agrees = crossed.is_empty();
    let stat = format!("{setting}: the designs ordered by mean final held-out loss");
    table.row(vec![
        "C27".into(),
        stat.clone(),
        c.seeds.to_string(),
        on.clone(),
        op.clone(),
        "the lesson asks whether the routed designs beat Pre-LN".into(),
        if agrees {
            "agrees (no pair ordered the other way beyond its bound)".into()
        } else {
            format!("disagrees ({})", crossed.join(", "))
        },
    ]);
    records.push(json!({"claim": "C27", "statistic": stat, "agrees": agrees,
        "rule": "no pair of designs that one side orders beyond twice the pair's pooled seed std (at least 0.05 nats) is ordered the other way by the other side",
        "normlab": {"order": on, "means": means(&nl_loss)}, "torch": {"order": op, "means": means(&pt_loss)},
        "crossed": crossed}));
    Ok(())
}

fn verdict(agrees: bool) -> &'static str {
    if agrees {
        "agrees"
    } else {
        "disagrees"
    }
}
