//! cure-all (claim C23): does a norm fix problems that are not about
//! normalization? The toy net with no norm, LayerNorm and RMSNorm, on a
//! healthy baseline and under three unrelated problems: heavy label noise,
//! a learning rate far too small (a bad schedule) and too little capacity
//! (d_model 8). Every run is scored on clean held-out targets (the rule
//! itself, `toy_eval_noise` 0), by its loss above the floor of a model that
//! learned the rule and its training labels' noise exactly (`-ln(1 - p +
//! p/64)`), so that noisy labels are not charged the noise they add to the
//! held-out targets. Each problem's cost is that excess above the same
//! norm's baseline; a norm "cures" a problem if it removes a cost the
//! problem has without a norm.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{result, ExpResult, Experiment, Progress};
use super::runs::{self, grid_settings};
use crate::present::{f, opt, Figure, Table};
use crate::sweep::{group_by, RunResult, RunSpec, SeedGroup};
use normlab::error::Result;
use normlab::kernels::norm::NormKind;
use normlab::nn::Placement;
use normlab::train::toy_task::ToyTask;
use normlab::train::TrainConfig;
use serde_json::json;

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "cure-all",
    question: "Does a norm fix label noise, a bad schedule or too little capacity?",
    flags: &[ExpFlag::Norms, ExpFlag::Grid],
    run,
    grid: Some(grid),
    hidden_training: None,
    quick_decides: false,
};

/// Depth of the toy net (deep enough that the norm matters, see collapse).
const LAYERS: usize = 12;
/// The baseline's learning rate and label noise (normlab's toy defaults).
const BASE_LR: f32 = 1e-3;
const BASE_NOISE: f32 = 0.1;

/// One condition of the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Problem {
    Baseline,
    LabelNoise,
    BadSchedule,
    SmallCapacity,
}

impl Problem {
    const ALL: [Problem; 4] = [
        Problem::Baseline,
        Problem::LabelNoise,
        Problem::BadSchedule,
        Problem::SmallCapacity,
    ];

    fn label(self) -> &'static str {
        match self {
            Problem::Baseline => "baseline (noise 0.1, lr 1e-3, d 64)",
            Problem::LabelNoise => "label noise 0.5",
            Problem::BadSchedule => "lr 1e-5 (100x too small)",
            Problem::SmallCapacity => "d_model 8 (hidden 32)",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Problem::Baseline => "baseline",
            Problem::LabelNoise => "label noise",
            Problem::BadSchedule => "bad schedule",
            Problem::SmallCapacity => "small capacity",
        }
    }

    /// (label noise, lr, d_model, hidden).
    fn setting(self) -> (f32, f32, usize, usize) {
        match self {
            Problem::Baseline => (BASE_NOISE, BASE_LR, 64, 256),
            Problem::LabelNoise => (0.5, BASE_LR, 64, 256),
            Problem::BadSchedule => (BASE_NOISE, 1e-5, 64, 256),
            Problem::SmallCapacity => (BASE_NOISE, BASE_LR, 8, 32),
        }
    }

    fn of(c: &TrainConfig) -> Problem {
        Problem::ALL
            .into_iter()
            .find(|p| {
                let (noise, lr, d, _) = p.setting();
                c.toy_noise == noise && c.lr == lr && c.model.d_model == d
            })
            .unwrap_or(Problem::Baseline)
    }
}

/// The grid's axes.
struct Settings {
    norms: Vec<NormKind>,
    steps: usize,
    seeds: Vec<u64>,
}

fn settings(a: &ExpArgs) -> Settings {
    Settings {
        norms: a.norms.clone().unwrap_or(vec![
            NormKind::None,
            NormKind::LayerNorm,
            NormKind::RmsNorm,
        ]),
        steps: a.steps_or(100, 2000),
        seeds: a.seeds_or(1, 2),
    }
}

/// Problem x norm x seed on the toy net (pre placement).
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let s = settings(a);
    let mut cfgs = Vec::new();
    for p in Problem::ALL {
        let (noise, lr, d, hidden) = p.setting();
        for &n in &s.norms {
            for &seed in &s.seeds {
                cfgs.push(runs::toy(|c| {
                    c.model.layers = LAYERS;
                    c.model.d_model = d;
                    c.model.hidden = hidden;
                    c.model.norm = n;
                    c.model.placement = Placement::Pre;
                    c.lr = lr;
                    c.toy_noise = noise;
                    c.toy_eval_noise = Some(0.0);
                    c.steps = s.steps;
                    c.seed = seed;
                    c.shards = 1;
                    c.eval_sequences = 256;
                    c.eval_every = (s.steps / 5).max(1);
                })?);
            }
        }
    }
    Ok(runs::specs(cfgs))
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let s = settings(a);
    let rs = runs::run_grid(a, grid(a)?, false, progress)?;
    let (table, costs) = costs(&s, &rs);
    let mut out = report(a, &s, &rs, &costs);
    judge(&s, &costs, &mut out);
    out.tables.push(table);
    Ok(out)
}

/// A problem's cost with one norm: (problem, norm, cost, seed spread).
type Cost = (Problem, NormKind, Option<f64>, f64);

/// The held-out loss of each condition and norm against its floor, and the
/// cost of each problem over the same norm's baseline.
fn costs(s: &Settings, rs: &[RunResult]) -> (Table, Vec<Cost>) {
    let groups: Vec<((Problem, NormKind), SeedGroup)> =
        group_by(rs, |r: &RunResult| (Problem::of(&r.cfg), r.cfg.model.norm))
            .into_iter()
            .map(|(k, g)| (k, SeedGroup::of_runs(g.iter().copied())))
            .collect();
    let find = |p: Problem, n: NormKind| groups.iter().find(|(k, _)| *k == (p, n)).map(|(_, g)| g);
    // The clean held-out targets' floor for each condition's training noise.
    let floor = |p: Problem| ToyTask::with_eval_noise(0, p.setting().0, 0.0).loss_floor();
    let mut table = Table::new(
        format!(
            "Toy net, {LAYERS} layers, pre placement, {} steps, {} seed(s): loss on clean held-out targets (mean ± std), its floor (-ln(1 - p + p/64): a model that learned the rule and its training noise p exactly) and the cost of the problem (loss above the floor, less the same norm's baseline's)",
            s.steps,
            s.seeds.len()
        ),
        &["condition", "norm", "status", "held-out loss", "loss floor", "cost over baseline"],
    );
    // (problem, norm, cost, spread)
    let mut costs: Vec<Cost> = Vec::new();
    for p in Problem::ALL {
        for &n in &s.norms {
            let (Some(g), Some(b)) = (find(p, n), find(Problem::Baseline, n)) else {
                continue;
            };
            let cost = g
                .mean
                .zip(b.mean)
                .map(|(x, y)| (x - floor(p)) - (y - floor(Problem::Baseline)));
            let spread = g.std.unwrap_or(0.0).max(b.std.unwrap_or(0.0));
            table.row(vec![
                p.label().into(),
                n.name().into(),
                g.label(),
                format!("{} ± {}", opt(g.mean, 3), opt(g.std, 3)),
                f(floor(p), 3),
                if p == Problem::Baseline {
                    "-".into()
                } else {
                    opt(cost, 3)
                },
            ]);
            if p != Problem::Baseline {
                costs.push((p, n, cost, spread));
            }
        }
    }
    (table, costs)
}

/// The result: settings, runs, held-out curves per condition, the costs.
fn report(a: &ExpArgs, s: &Settings, rs: &[RunResult], costs: &[Cost]) -> ExpResult {
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "toy", "layers": LAYERS, "placement": "pre", "norms": s.norms.iter().map(|n| n.name()).collect::<Vec<_>>(), "steps": s.steps, "conditions": Problem::ALL.iter().map(|p| { let (noise, lr, d, hidden) = p.setting(); json!({"name": p.short(), "toy_noise": noise, "lr": super::framework::num(lr), "d_model": d, "hidden": hidden}) }).collect::<Vec<_>>()}),
        ),
        s.seeds.clone(),
    );
    out.data.insert("runs".into(), runs::records(rs));
    let panels = Problem::ALL
        .iter()
        .map(|&p| {
            let series = s
                .norms
                .iter()
                .map(|&n| {
                    let g: Vec<&RunResult> = rs
                        .iter()
                        .filter(|r| Problem::of(&r.cfg) == p && r.cfg.model.norm == n)
                        .collect();
                    runs::group_series(n.name(), &g, &runs::eval_curve)
                })
                .collect();
            runs::eval_panel(p.label(), series)
        })
        .collect();
    out.figures.push(Figure::new("cure_all", panels, 2));
    out.data.insert(
        "costs".into(),
        json!(costs
            .iter()
            .map(|(p, n, c, sp)| json!({"condition": p.short(), "norm": n.name(), "cost": c, "seed_std": sp}))
            .collect::<Vec<_>>()),
    );
    out
}

/// Which problems bite and which norms cure them: the conclusion and
/// claim C23's verdict.
fn judge(s: &Settings, costs: &[Cost], out: &mut ExpResult) {
    // A problem costs nothing with a norm if its cost there is within the
    // seed spread (at least 0.05 nats) of nothing. A norm cures it only if it
    // costs the net without a norm: a problem free without one does not
    // bite at this setting and is left out (kept when no run is without).
    let free = |c: &(Problem, NormKind, Option<f64>, f64)| {
        c.2.is_some_and(|x| x <= 0.05f64.max(3.0 * c.3))
    };
    let bites = |p: Problem| {
        !costs
            .iter()
            .any(|c| c.0 == p && c.1 == NormKind::None && free(c))
    };
    let idle: Vec<&str> = Problem::ALL[1..]
        .iter()
        .filter(|&&p| !bites(p))
        .map(|p| p.short())
        .collect();
    let normed: Vec<&(Problem, NormKind, Option<f64>, f64)> = costs
        .iter()
        .filter(|c| c.1 != NormKind::None && bites(c.0))
        .collect();
    let per_problem: Vec<String> = Problem::ALL[1..]
        .iter()
        .map(|&p| {
            let cs: Vec<String> = costs
                .iter()
                .filter(|c| c.0 == p)
                .map(|c| format!("{} {}", c.1, opt(c.2, 2)))
                .collect();
            format!("{}: {}", p.short(), cs.join(", "))
        })
        .collect();
    let n_cured = normed.iter().filter(|c| free(c)).count();
    let idle_text = if idle.is_empty() {
        String::new()
    } else {
        format!(
            " Without a norm these cost nothing, so they do not bite here and are left out: {}.",
            idle.join(", ")
        )
    };
    out.conclusion = format!(
        "Cost of each problem on clean held-out targets (loss above its floor, over the same norm's baseline): {}.{idle_text} {}",
        per_problem.join("; "),
        if normed.is_empty() {
            "No normalised run of a problem that bites to judge.".to_string()
        } else if n_cured == 0 {
            "No norm removes any of the problems: each costs every norm kind, so the fix lies elsewhere (clean the labels, fix the schedule, add capacity).".to_string()
        } else {
            format!(
                "A norm removed the cost in {} of {} cases: {}.",
                n_cured,
                normed.len(),
                normed
                    .iter()
                    .filter(|c| free(c))
                    .map(|c| format!("{} with {}", c.0.short(), c.1))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    let verdict = if normed.is_empty() {
        Verdict::Inconclusive
    } else if n_cured == 0 {
        Verdict::Holds
    } else if n_cured < normed.len() {
        Verdict::Partly
    } else {
        Verdict::DoesNotHold
    };
    out.checks.push(ClaimCheck::new(
        "C23",
        verdict,
        format!(
            "{LAYERS}-layer toy net, {} steps, scored on clean held-out targets: the cost of each problem (loss above the floor of a model that learned the rule and its training noise, less the same norm's healthy baseline's; cured = within max(0.05, 3 seed std)) is {}.{idle_text} A norm cured {} of {} (problem, norm) cases.",
            s.steps,
            per_problem.join("; "),
            n_cured,
            normed.len()
        ),
    ));
}
