//! no-norm (claim C12, with today's methods): the lesson says a deep net
//! cannot train without normalization. Since then, designs train without
//! statistics: DyT and Derf replace every norm by a point-wise squashing
//! function, ReZero gates each branch by a scalar that starts at 0. This
//! experiment puts them beside no norm, Pre-LN, Pre-RMSNorm, Pre-LN with
//! LayerScale and LayerNorm Scaling (and DyT with the learnable embedding
//! scale of the DyT paper's LLaMA recipe), in the toy net at two depths and in
//! the GPT, over learning rates and seeds: which train, at which rates, and
//! how close each gets to Pre-LN.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{result, ExpResult, Experiment, Progress};
use super::runs::{self, eval_curve, gpt_base, grid_settings, group_series, lrs_json};
use crate::present::{f, grid as cells, Figure};
use crate::sweep::{group_by, RunResult, RunSpec, SeedGroup};
use normlab::error::Result;
use normlab::model::ModelConfig;
use normlab::nn::Placement;
use normlab::train::Status;
use serde_json::json;

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "no-norm",
    question:
        "Which normalization-free designs train a deep net, and how close do they get to Pre-LN?",
    flags: &[ExpFlag::Layers, ExpFlag::Lrs, ExpFlag::Grid],
    run,
    grid: Some(grid),
    hidden_training: None,
    quick_decides: false,
};

/// LayerScale's init in the `pre-ln+layerscale` variant (CaiT uses 0.1 to
/// 1e-6 by depth; 1e-4 starts every branch almost closed).
const LAYERSCALE_INIT: f32 = 1e-4;

/// One design of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    None,
    PreLn,
    PreRms,
    Dyt,
    DytEmb,
    Derf,
    ReZero,
    LayerScale,
    Lns,
}

impl Variant {
    const ALL: [Variant; 9] = [
        Variant::None,
        Variant::PreLn,
        Variant::PreRms,
        Variant::Dyt,
        Variant::DytEmb,
        Variant::Derf,
        Variant::ReZero,
        Variant::LayerScale,
        Variant::Lns,
    ];

    /// The designs that use no normalization statistics at all.
    const NORM_FREE: [Variant; 3] = [Variant::Dyt, Variant::Derf, Variant::ReZero];

    fn name(self) -> &'static str {
        match self {
            Variant::None => "none",
            Variant::PreLn => "pre-ln",
            Variant::PreRms => "pre-rmsnorm",
            Variant::Dyt => "dyt",
            Variant::DytEmb => "dyt+emb-scale",
            Variant::Derf => "derf",
            Variant::ReZero => "rezero",
            Variant::LayerScale => "pre-ln+layerscale",
            Variant::Lns => "pre-ln+lns",
        }
    }

    /// Set the design's model settings (all pre placement).
    fn apply(self, m: &mut ModelConfig) {
        use normlab::kernels::norm::NormKind as K;
        m.placement = Placement::Pre;
        m.norm = match self {
            Variant::None | Variant::ReZero => K::None,
            Variant::PreLn | Variant::LayerScale | Variant::Lns => K::LayerNorm,
            Variant::PreRms => K::RmsNorm,
            Variant::Dyt | Variant::DytEmb => K::Dyt,
            Variant::Derf => K::Derf,
        };
        match self {
            Variant::DytEmb => m.emb_scale = true,
            Variant::ReZero => m.rezero = true,
            Variant::LayerScale => m.layerscale = Some(LAYERSCALE_INIT),
            Variant::Lns => m.lns = true,
            _ => {}
        }
    }

    /// The design a trained config is.
    fn of(m: &ModelConfig) -> Option<Variant> {
        use normlab::kernels::norm::NormKind as K;
        if m.placement != Placement::Pre {
            return None;
        }
        Some(match (m.norm, m.rezero, m.layerscale.is_some(), m.lns) {
            (K::None, true, _, _) => Variant::ReZero,
            (K::None, false, _, _) => Variant::None,
            (K::LayerNorm, _, true, _) => Variant::LayerScale,
            (K::LayerNorm, _, _, true) => Variant::Lns,
            (K::LayerNorm, _, _, _) => Variant::PreLn,
            (K::RmsNorm, _, _, _) => Variant::PreRms,
            (K::Dyt, _, _, _) if m.emb_scale => Variant::DytEmb,
            (K::Dyt, _, _, _) => Variant::Dyt,
            (K::Derf, _, _, _) => Variant::Derf,
            _ => return None,
        })
    }
}

/// The grid's axes.
struct Settings {
    toy_layers: Vec<usize>,
    lrs: Vec<f32>,
    toy_steps: usize,
    gpt_steps: usize,
    seeds: Vec<u64>,
    gpt_seeds: Vec<u64>,
    eval_sequences: usize,
}

fn settings(a: &ExpArgs) -> Settings {
    let seeds = a.seeds_or(1, 3);
    Settings {
        toy_layers: a
            .layers
            .clone()
            .unwrap_or(if a.quick { vec![4] } else { vec![12, 30] }),
        lrs: a.lrs.clone().unwrap_or(if a.quick {
            vec![1e-3, 1e-2]
        } else {
            vec![1e-4, 1e-3, 1e-2]
        }),
        toy_steps: a.steps_or(150, 1000),
        gpt_steps: a.steps_or(60, 600),
        gpt_seeds: seeds[..1].to_vec(),
        seeds,
        eval_sequences: if a.quick { 64 } else { 512 },
    }
}

/// The label of a trained model: "toy L12", "gpt L4".
fn model_label(m: &ModelConfig) -> String {
    format!("{} L{}", m.kind, m.layers)
}

/// Toy net (each depth) and GPT x design x lr x seed (the GPT with the
/// first seed only: its runs cost most).
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let s = settings(a);
    let mut cfgs = Vec::new();
    for &l in &s.toy_layers {
        for v in Variant::ALL {
            for &lr in &s.lrs {
                for &seed in &s.seeds {
                    cfgs.push(runs::toy(|c| {
                        c.model.layers = l;
                        c.lr = lr;
                        c.steps = s.toy_steps;
                        c.seed = seed;
                        c.shards = 1;
                        c.eval_sequences = s.eval_sequences;
                        c.eval_every = (s.toy_steps / 10).max(1);
                        v.apply(&mut c.model);
                    })?);
                }
            }
        }
    }
    let mut gpt = gpt_base(&ExpArgs {
        layers: None,
        ..a.clone()
    });
    gpt.steps = s.gpt_steps;
    for v in Variant::ALL {
        for &lr in &s.lrs {
            for &seed in &s.gpt_seeds {
                cfgs.push(gpt.with(|c| {
                    c.lr = lr;
                    c.seed = seed;
                    v.apply(&mut c.model);
                })?);
            }
        }
    }
    Ok(runs::specs(cfgs))
}

/// Key of a seed group: (model label, design, lr).
type Key = (String, &'static str, f32);

fn key(r: &RunResult) -> Key {
    let v = Variant::of(&r.cfg.model).map_or("?", Variant::name);
    (model_label(&r.cfg.model), v, r.cfg.lr)
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let s = settings(a);
    let rs = runs::run_grid(a, grid(a)?, false, progress)?;
    let groups: Vec<(Key, SeedGroup, Vec<&RunResult>)> = group_by(&rs, key)
        .into_iter()
        .map(|(k, g)| (k, SeedGroup::of_runs(g.iter().copied()), g))
        .collect();
    let find = |m: &str, v: Variant, lr: f32| {
        groups
            .iter()
            .find(|((gm, gv, glr), _, _)| gm == m && *gv == v.name() && *glr == lr)
            .map(|(_, sg, _)| sg)
    };
    let mut models: Vec<String> = Vec::new();
    for r in &rs {
        let l = model_label(&r.cfg.model);
        if !models.contains(&l) {
            models.push(l);
        }
    }
    let lr_labels: Vec<String> = s.lrs.iter().map(|lr| format!("lr {lr}")).collect();
    let v_labels: Vec<String> = Variant::ALL.iter().map(|v| v.name().to_string()).collect();
    let mut out = result(
        grid_settings(
            a,
            json!({"toy_layers": s.toy_layers, "gpt": gpt_base(&ExpArgs { layers: None, ..a.clone() }).overrides(), "designs": v_labels, "lrs": lrs_json(&s.lrs), "toy_steps": s.toy_steps, "gpt_steps": s.gpt_steps, "gpt_seeds": s.gpt_seeds, "layerscale_init": LAYERSCALE_INIT, "optimizer": "adam"}),
        ),
        s.seeds.clone(),
    );
    let mut heat = Vec::new();
    let mut curves = Vec::new();
    let mut answers = Vec::new();
    for m in &models {
        let cells: Vec<Vec<Option<SeedGroup>>> = Variant::ALL
            .iter()
            .map(|&v| s.lrs.iter().map(|&lr| find(m, v, lr).cloned()).collect())
            .collect();
        let seeds = if m.starts_with("gpt") {
            s.gpt_seeds.len()
        } else {
            s.seeds.len()
        };
        out.tables.push(cells::table(
            format!("{m}: final held-out loss, mean over {seeds} seed(s) (D: most seeds diverged, S: stalled)"),
            "design",
            &lr_labels,
            &v_labels,
            &cells,
        ));
        heat.push(cells::heat_panel(
            m.clone(),
            ("learning rate", "design"),
            lr_labels.clone(),
            v_labels.clone(),
            &cells,
        ));
        // Each design's curve at Pre-LN's best rate.
        if let Some((lr, _, _)) = best(&s, &find, m, Variant::PreLn) {
            let series = Variant::ALL
                .iter()
                .filter_map(|v| {
                    groups
                        .iter()
                        .find(|((gm, gv, glr), _, _)| gm == m && *gv == v.name() && *glr == lr)
                        .map(|(_, _, g)| group_series(v.name(), g, &eval_curve))
                })
                .collect();
            curves.push(runs::eval_panel(
                format!("{m}, lr {lr} (Pre-LN's best)"),
                series,
            ));
        }
        answers.push(answer(&s, &find, m));
    }
    let cols = heat.len().clamp(1, 3);
    out.figures.push(Figure::new("no_norm", heat, cols));
    if !curves.is_empty() {
        let cols = curves.len().clamp(1, 3);
        out.figures
            .push(Figure::new("no_norm_curves", curves, cols));
    }
    out.data.insert("runs".into(), runs::records(&rs));
    out.conclusion = format!("{}.", answers.join(". "));
    out.checks.push(check_c12(&s, &find, &models, a.quick));
    Ok(out)
}

/// A design's best learning rate: (lr, mean, std) of the lowest mean loss
/// among converged cells.
fn best<'a>(
    s: &Settings,
    find: &dyn Fn(&str, Variant, f32) -> Option<&'a SeedGroup>,
    m: &str,
    v: Variant,
) -> Option<(f32, f64, f64)> {
    s.lrs
        .iter()
        .filter_map(|&lr| {
            find(m, v, lr)
                .filter(|g| g.status == Status::Converged)
                .and_then(|g| Some((lr, g.mean?, g.std.unwrap_or(0.0))))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// For one model: at how many rates each design trains, and its best loss
/// against Pre-LN's best (a gap is called only beyond the seed spread).
fn answer<'a>(
    s: &Settings,
    find: &dyn Fn(&str, Variant, f32) -> Option<&'a SeedGroup>,
    m: &str,
) -> String {
    let reference = best(s, find, m, Variant::PreLn);
    let mut parts = Vec::new();
    for v in Variant::ALL {
        let trains = s
            .lrs
            .iter()
            .filter(|&&lr| find(m, v, lr).is_some_and(|g| g.status == Status::Converged))
            .count();
        let fails: Vec<String> = s
            .lrs
            .iter()
            .filter_map(|&lr| {
                find(m, v, lr)
                    .filter(|g| g.status != Status::Converged)
                    .map(|g| format!("{} at {lr}", g.status.name()))
            })
            .collect();
        let mut p = format!("{} trains at {trains} of {} rates", v.name(), s.lrs.len());
        if !fails.is_empty() {
            p.push_str(&format!(" ({})", fails.join(", ")));
        }
        match (best(s, find, m, v), reference) {
            (Some((lr, mean, sd)), Some((_, r, rsd))) if v != Variant::PreLn => {
                let gap = mean - r;
                let spread = sd.max(rsd);
                let verdict = if spread == 0.0 {
                    format!("{:+.3} vs Pre-LN (one seed: no spread to judge by)", gap)
                } else if gap.abs() <= spread {
                    "level with Pre-LN (within the seed spread)".to_string()
                } else if gap > 0.0 {
                    format!("{} behind Pre-LN", f(gap, 3))
                } else {
                    format!("{} ahead of Pre-LN", f(-gap, 3))
                };
                p.push_str(&format!(", best {} at lr {lr}: {verdict}", f(mean, 3)));
            }
            (Some((lr, mean, sd)), _) => {
                p.push_str(&format!(", best {} ± {} at lr {lr}", f(mean, 3), f(sd, 3)))
            }
            _ => {}
        }
        parts.push(p);
    }
    format!("{m}: {}", parts.join("; "))
}

/// C12 as the lesson means it (remove the norm, change nothing else), at
/// the deepest toy net: does no norm fail or fall clearly behind where
/// Pre-LN trains, and do the statistics-free designs (DyT, Derf, ReZero)
/// close the gap?
fn check_c12<'a>(
    s: &Settings,
    find: &dyn Fn(&str, Variant, f32) -> Option<&'a SeedGroup>,
    models: &[String],
    quick: bool,
) -> ClaimCheck {
    let Some(deep) = s
        .toy_layers
        .iter()
        .max()
        .map(|l| format!("toy L{l}"))
        .filter(|m| models.contains(m))
    else {
        return ClaimCheck::new("C12", Verdict::Inconclusive, "no toy runs");
    };
    let (none, pre) = (
        best(s, find, &deep, Variant::None),
        best(s, find, &deep, Variant::PreLn),
    );
    let none_fails: Vec<String> = s
        .lrs
        .iter()
        .filter_map(|&lr| {
            find(&deep, Variant::None, lr)
                .filter(|g| g.status != Status::Converged)
                .map(|g| format!("{} at lr {lr}", g.status.name()))
        })
        .collect();
    let free: Vec<String> = Variant::NORM_FREE
        .iter()
        .map(|&v| match (best(s, find, &deep, v), pre) {
            (Some((lr, m, _)), Some((_, r, _))) => {
                format!(
                    "{} {} at lr {lr} ({:+.3} vs Pre-LN)",
                    v.name(),
                    f(m, 3),
                    m - r
                )
            }
            (Some((lr, m, _)), None) => format!("{} {} at lr {lr}", v.name(), f(m, 3)),
            (None, _) => format!("{} trains at no rate", v.name()),
        })
        .collect();
    let (verdict, what) = match (none, pre) {
        (_, None) => (
            Verdict::Inconclusive,
            "Pre-LN itself trained at no rate".to_string(),
        ),
        (None, Some((_, r, _))) => (
            Verdict::Holds,
            format!(
                "without a norm the {deep} net trains at no rate ({}); Pre-LN reaches {}",
                none_fails.join(", "),
                f(r, 3)
            ),
        ),
        (Some((lr, m, sd)), Some((_, r, rsd))) => {
            let gap = m - r;
            let v = if gap > 3.0 * sd.max(rsd).max(0.01) {
                Verdict::Partly
            } else {
                Verdict::DoesNotHold
            };
            let fails = if none_fails.is_empty() {
                String::new()
            } else {
                format!(" (fails: {})", none_fails.join(", "))
            };
            (
                v,
                format!("without a norm the {deep} net trains (best {} at lr {lr}{fails}), {} behind Pre-LN's {}", f(m, 3), f(gap, 3), f(r, 3)),
            )
        }
    };
    let verdict = if quick {
        Verdict::Inconclusive
    } else {
        verdict
    };
    ClaimCheck::new(
        "C12",
        verdict,
        format!(
            "{what}. Designs without normalization statistics: {}",
            free.join("; ")
        ),
    )
}
