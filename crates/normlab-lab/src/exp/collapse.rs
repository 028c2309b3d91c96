//! collapse (claim C12): does a deep net train without normalization? The
//! toy net at several depths with no norm, LayerNorm and RMSNorm (pre
//! placement, Adam, lr 1e-3), several seeds, under PyTorch's default init
//! (the lesson's) and GPT-2's (normlab's default); and the deepest no-norm
//! net at a sweep of learning rates, to find where it does diverge.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{result, ExpResult, Experiment, Progress};
use super::runs::{self, eval_curve, grid_settings, lrs_json, mean_curve};
use crate::present::{f, opt, opt_step, Figure, Series, Table};
use crate::sweep::{group_by, RunResult, RunSpec, SeedGroup};
use normlab::error::Result;
use normlab::kernels::norm::NormKind;
use normlab::model::InitScheme;
use normlab::nn::Placement;
use normlab::train::Status;
use serde_json::json;

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "collapse",
    question: "Does a deep net train without normalization?",
    flags: &[
        ExpFlag::Layers,
        ExpFlag::Norms,
        ExpFlag::Lrs,
        ExpFlag::Inits,
        ExpFlag::Grid,
    ],
    run,
    grid: Some(grid),
    hidden_training: None,
    quick_decides: false,
};

/// The grid's axes.
struct Settings {
    layers: Vec<usize>,
    norms: Vec<NormKind>,
    lrs: Vec<f32>,
    inits: Vec<InitScheme>,
    /// Extra learning rates for the deepest no-norm net (first init).
    sweep_lrs: Vec<f32>,
    steps: usize,
    seeds: Vec<u64>,
    eval_sequences: usize,
}

fn settings(a: &ExpArgs) -> Settings {
    let layers = a.layers.clone().unwrap_or(if a.quick {
        vec![4, 16]
    } else {
        vec![6, 12, 20]
    });
    let lrs = a.lrs.clone().unwrap_or(vec![1e-3]);
    let sweep_lrs: Vec<f32> = if a.lrs.is_some() {
        Vec::new()
    } else if a.quick {
        vec![1e-2]
    } else {
        vec![1e-4, 3e-3, 1e-2]
    };
    Settings {
        layers,
        norms: a.norms.clone().unwrap_or(vec![
            NormKind::None,
            NormKind::LayerNorm,
            NormKind::RmsNorm,
        ]),
        lrs,
        inits: a.inits.clone().unwrap_or(if a.quick {
            vec![InitScheme::Torch]
        } else {
            vec![InitScheme::Torch, InitScheme::Gpt2]
        }),
        sweep_lrs,
        steps: a.steps_or(400, 3000),
        seeds: a.seeds_or(1, 3),
        eval_sequences: if a.quick { 64 } else { 512 },
    }
}

fn toy(
    s: &Settings,
    l: usize,
    n: NormKind,
    lr: f32,
    init: InitScheme,
    seed: u64,
) -> Result<normlab::train::TrainConfig> {
    runs::toy(|c| {
        c.model.layers = l;
        c.model.norm = n;
        c.model.placement = Placement::Pre;
        c.model.init = init;
        c.lr = lr;
        c.steps = s.steps;
        c.seed = seed;
        c.shards = 1;
        c.eval_sequences = s.eval_sequences;
        c.eval_every = (s.steps / 10).max(1);
    })
}

/// Toy net: init x depth x lr x norm x seed, pre placement; plus the
/// deepest no-norm net at the sweep's learning rates.
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let s = settings(a);
    let mut cfgs = Vec::new();
    for &init in &s.inits {
        for &l in &s.layers {
            for &lr in &s.lrs {
                for &n in &s.norms {
                    for &seed in &s.seeds {
                        cfgs.push(toy(&s, l, n, lr, init, seed)?);
                    }
                }
            }
        }
    }
    if let Some(&deepest) = s.layers.iter().max() {
        for &init in &s.inits {
            for &lr in &s.sweep_lrs {
                for &seed in &s.seeds {
                    cfgs.push(toy(&s, deepest, NormKind::None, lr, init, seed)?);
                }
            }
        }
    }
    Ok(runs::specs(cfgs))
}

/// Key of a seed group.
type Key = (InitScheme, usize, f32, NormKind);

fn key(r: &RunResult) -> Key {
    let m = &r.cfg.model;
    (m.init, m.layers, r.cfg.lr, m.norm)
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let s = settings(a);
    let rs = runs::run_grid(a, grid(a)?, false, progress)?;
    let steps = s.steps;
    let mut table = Table::new(
        format!("Toy net, pre placement, Adam, {steps} steps, {} seed(s): held-out loss (mean ± std over seeds that did not diverge)", s.seeds.len()),
        &["init", "layers", "lr", "norm", "status", "final eval loss", "best eval loss", "diverged at step", "loss spikes (steps above 2 ln V)"],
    );
    let groups: Vec<(Key, SeedGroup, Vec<&RunResult>)> = group_by(&rs, key)
        .into_iter()
        .map(|(k, g)| (k, SeedGroup::of_runs(g.iter().copied()), g))
        .collect();
    let mut panels = Vec::new();
    for &(init, l, lr) in &groups
        .iter()
        .map(|((i, l, lr, _), _, _)| (*i, *l, *lr))
        .fold(Vec::new(), |mut v: Vec<(InitScheme, usize, f32)>, k| {
            if !v.contains(&k) {
                v.push(k);
            }
            v
        })
    {
        let mut series = Vec::new();
        for ((_, _, _, norm), sg, g) in groups
            .iter()
            .filter(|((gi, gl, glr, _), _, _)| *gi == init && *gl == l && *glr == lr)
        {
            let spikes: usize = g.iter().map(|r| r.summary.spikes.len()).sum();
            table.row(vec![
                init.name().into(),
                l.to_string(),
                format!("{lr}"),
                norm.name().into(),
                sg.label(),
                format!("{} ± {}", opt(sg.mean, 3), opt(sg.std, 3)),
                opt(sg.best, 3),
                opt_step(sg.diverged_at),
                spikes.to_string(),
            ]);
            let name = match sg.diverged_at {
                Some(d) if sg.status == Status::Diverged => {
                    format!("{norm} (diverged at step {d})")
                }
                _ => norm.name().to_string(),
            };
            series.push(
                Series::new(name, mean_curve(g, &eval_curve))
                    .diverged(sg.status == Status::Diverged),
            );
        }
        panels.push(runs::eval_panel(
            format!("{l} layers, lr {lr}, {} init", init.name()),
            series,
        ));
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "toy", "layers": s.layers, "norms": s.norms.iter().map(|n| n.name()).collect::<Vec<_>>(), "placement": "pre", "lrs": lrs_json(&s.lrs), "inits": s.inits.iter().map(|i| i.name()).collect::<Vec<_>>(), "no_norm_lr_sweep": lrs_json(&s.sweep_lrs), "optimizer": "adam", "steps": steps}),
        ),
        s.seeds.clone(),
    );
    out.data.insert("runs".into(), runs::records(&rs));
    let cols = panels.len().clamp(1, 3);
    out.figures.push(Figure::new("collapse", panels, cols));
    let find = |k: Key| groups.iter().find(|(g, _, _)| *g == k).map(|(_, sg, _)| sg);
    out.conclusion = conclusion(&s, &find);
    let spikes = |k: Key| {
        let g = groups
            .iter()
            .find(|(g, _, _)| *g == k)
            .map(|(_, _, g)| g.as_slice())
            .unwrap_or(&[]);
        let n = g.iter().map(|r| r.summary.spikes.len()).sum();
        let first = g
            .iter()
            .filter_map(|r| r.summary.spikes.first().map(|x| x.step))
            .min();
        (n, first)
    };
    out.checks.push(check_c12(&s, &find, &spikes, a.quick));
    out.tables.push(table);
    Ok(out)
}

/// The answer, per init at each learning rate of the grid: at which depths
/// the no-norm net fails, how far behind the better norm it ends, how close
/// LayerNorm and RMSNorm are (when both ran), and where each point-wise
/// replacement (DyT, Derf, when asked for with --norms) ends against the
/// better norm.
fn conclusion<'a>(s: &Settings, find: &dyn Fn(Key) -> Option<&'a SeedGroup>) -> String {
    let mut out = Vec::new();
    for &init in &s.inits {
        for &lr in &s.lrs {
            let mut fails = Vec::new();
            let mut gaps = Vec::new();
            let mut ln_rms: Option<f64> = None;
            let pointwise: Vec<NormKind> = s
                .norms
                .iter()
                .copied()
                .filter(|n| *n != NormKind::None && n.spec().elementwise)
                .collect();
            let mut pw_gaps: Vec<Vec<String>> = vec![Vec::new(); pointwise.len()];
            for &l in &s.layers {
                let best = [
                    NormKind::LayerNorm,
                    NormKind::RmsNorm,
                    NormKind::ZRmsNorm,
                    NormKind::ScaleNorm,
                ]
                .iter()
                .filter_map(|&n| find((init, l, lr, n)).and_then(|g| g.mean))
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
                if let (Some(a), Some(b)) = (
                    find((init, l, lr, NormKind::LayerNorm)).and_then(|g| g.mean),
                    find((init, l, lr, NormKind::RmsNorm)).and_then(|g| g.mean),
                ) {
                    ln_rms = Some(ln_rms.unwrap_or(0.0).max((a - b).abs()));
                }
                for (k, gaps) in pointwise.iter().zip(pw_gaps.iter_mut()) {
                    if let Some(g) = find((init, l, lr, *k)) {
                        gaps.push(match (g.status, g.mean, best) {
                            (Status::Converged, Some(m), Some(b)) => {
                                format!("{:+.2} at {l}", m - b)
                            }
                            (st, _, _) => format!("{} at {l}", st.name()),
                        });
                    }
                }
                match find((init, l, lr, NormKind::None)) {
                    Some(g) if g.status != Status::Converged => fails.push(format!(
                        "{l} ({}{})",
                        g.status.name(),
                        g.diverged_at
                            .map(|d| format!(" at step {d}"))
                            .unwrap_or_default()
                    )),
                    Some(g) => {
                        if let (Some(m), Some(b)) = (g.mean, best) {
                            gaps.push(format!("{} at {l}", f(m - b, 2)));
                        }
                    }
                    None => {}
                }
            }
            let mut part = format!(
                "With {} init at lr {lr}, without a norm the net ",
                init.name()
            );
            part.push_str(&if fails.is_empty() {
                "trains at every depth".to_string()
            } else {
                format!("fails at {} layers", fails.join(", "))
            });
            if !gaps.is_empty() {
                part.push_str(&format!(
                    ", ending behind the better norm by {} layers (nats)",
                    gaps.join(", ")
                ));
            }
            if let Some(d) = ln_rms {
                part.push_str(&format!(
                    "; LayerNorm and RMSNorm end within {} of each other",
                    f(d, 3)
                ));
            }
            for (k, gaps) in pointwise.iter().zip(&pw_gaps) {
                if !gaps.is_empty() {
                    part.push_str(&format!(
                        "; {k} ends {} layers against the better norm (nats, + behind)",
                        gaps.join(", ")
                    ));
                }
            }
            out.push(part);
        }
    }
    if let Some(&deepest) = s.layers.iter().max() {
        for &init in &s.inits {
            let sweep: Vec<String> = s
                .sweep_lrs
                .iter()
                .filter_map(|&x| find((init, deepest, x, NormKind::None)).map(|g| (x, g)))
                .map(|(x, g)| match (g.status, g.diverged_at) {
                    (Status::Diverged, Some(d)) => format!("lr {x} diverges at step {d}"),
                    (st, _) => format!("lr {x} {} ({})", st.name(), opt(g.mean, 2)),
                })
                .collect();
            if !sweep.is_empty() {
                out.push(format!(
                    "The {deepest}-layer no-norm net ({} init): {}",
                    init.name(),
                    sweep.join(", ")
                ));
            }
        }
    }
    format!("{}.", out.join(". "))
}

/// One depth of C12's comparison at lr 1e-3: how the no-norm net ended
/// against the better of LayerNorm and RMSNorm.
struct Gap {
    layers: usize,
    status: Status,
    none: Option<f64>,
    normed: Option<f64>,
    spread: f64,
}

/// C12 under the lesson's init (the first of the settings' inits) at lr
/// 1e-3: does the no-norm net diverge at depth, how far behind the norms is
/// it at each depth, are LayerNorm and RMSNorm within 0.03 (or the seed
/// spread), and at which learning rate does the deepest no-norm net diverge.
fn check_c12<'a>(
    s: &Settings,
    find: &dyn Fn(Key) -> Option<&'a SeedGroup>,
    spikes: &dyn Fn(Key) -> (usize, Option<usize>),
    quick: bool,
) -> ClaimCheck {
    let (Some(&init), Some(&deepest)) = (s.inits.first(), s.layers.iter().max()) else {
        return ClaimCheck::new("C12", Verdict::Inconclusive, "no runs");
    };
    let lr = 1e-3f32;
    let at = |l: usize, n: NormKind| find((init, l, lr, n));
    let mut gaps = Vec::new();
    let mut ln_rms = Vec::new();
    for &l in &s.layers {
        if let (Some(none), Some(ln), Some(rms)) = (
            at(l, NormKind::None),
            at(l, NormKind::LayerNorm),
            at(l, NormKind::RmsNorm),
        ) {
            let normed = ln.mean.zip(rms.mean).map(|(a, b)| a.min(b));
            // The seed spread a gap must exceed: twice the largest seed std
            // of the three groups (0 with one seed).
            let spread = [none, ln, rms]
                .iter()
                .filter_map(|g| g.std)
                .fold(0.0f64, f64::max);
            gaps.push(Gap {
                layers: l,
                status: none.status,
                none: none.mean,
                normed,
                spread,
            });
            if let (Some(a), Some(b)) = (ln.mean, rms.mean) {
                let spread = ln.std.unwrap_or(0.0).max(rms.std.unwrap_or(0.0));
                ln_rms.push((l, (a - b).abs(), spread));
            }
        }
    }
    if gaps.is_empty() {
        return ClaimCheck::new(
            "C12",
            Verdict::Inconclusive,
            "needs none, layernorm and rmsnorm at lr 1e-3",
        );
    }
    let deep_fails = gaps
        .iter()
        .find(|g| g.layers == deepest)
        .is_some_and(|g| g.status != Status::Converged);
    // No-norm behind the norms beyond the seed spread (twice the largest
    // seed std), and more so with depth. A no-norm net that failed is behind.
    let gap_of = |g: &Gap| match (g.none, g.normed) {
        (Some(a), Some(b)) => a - b,
        _ => f64::INFINITY,
    };
    let behind = gaps.iter().all(|g| gap_of(g) > 2.0 * g.spread);
    let grows = gaps
        .windows(2)
        .all(|w| gap_of(&w[1]) >= gap_of(&w[0]) - 0.02);
    let close = ln_rms
        .iter()
        .all(|(_, d, spread)| *d <= 0.03_f64.max(2.0 * spread));
    // The deepest no-norm net at every learning rate and init: how its
    // seeds ended, and its loss spikes (excursions above 2 ln V it recovered from).
    let mut lrs: Vec<f32> = s
        .sweep_lrs
        .iter()
        .copied()
        .chain(std::iter::once(lr))
        .collect();
    lrs.sort_by(f32::total_cmp);
    let sweep: Vec<String> = s
        .inits
        .iter()
        .flat_map(|&i| lrs.iter().map(move |&x| (i, x)))
        .filter_map(|(i, x)| find((i, deepest, x, NormKind::None)).map(|g| (i, x, g)))
        .map(|(i, x, g)| {
            let (n, first) = spikes((i, deepest, x, NormKind::None));
            let spiky = match first {
                Some(st) => format!(", {n} loss spike(s), the first at step {st}"),
                None => String::new(),
            };
            match (g.status, g.diverged_at) {
                (Status::Diverged, Some(d)) => format!(
                    "{} lr {x}: {} of {} seeds diverged (first at step {d}){spiky}",
                    i.name(),
                    g.diverged,
                    g.runs
                ),
                (st, _) => format!(
                    "{} lr {x}: {} ({}){spiky}",
                    i.name(),
                    st.name(),
                    opt(g.mean, 3)
                ),
            }
        })
        .collect();
    let verdict = if quick && !deep_fails {
        Verdict::Inconclusive
    } else if deep_fails && behind && close {
        Verdict::Holds
    } else if behind || close {
        Verdict::Partly
    } else {
        Verdict::DoesNotHold
    };
    ClaimCheck::new(
        "C12",
        verdict,
        format!(
            "{} init, lr 1e-3, {} steps: no-norm ends {} (held-out loss; gap to the better norm {}); {} at {deepest} layers (lesson: NaN around step 300, never recovering){}. The better norm ends at {} by depth (lesson: falls slightly with depth, 2.28 at 20 layers). LayerNorm vs RMSNorm differ by {} (lesson within 0.03). The {deepest}-layer no-norm net by init and learning rate: {}.",
            init.name(),
            s.steps,
            gaps.iter()
                .map(|g| format!("{} at {} layers", opt(g.none, 3), g.layers))
                .collect::<Vec<_>>()
                .join(", "),
            gaps.iter()
                .map(|g| format!("{} (seed std {})", f(gap_of(g), 3), f(g.spread, 3)))
                .collect::<Vec<_>>()
                .join(", "),
            if deep_fails { "it fails" } else { "it still trains" },
            if grows { ", the gap growing with depth" } else { "" },
            gaps.iter().map(|g| opt(g.normed, 3)).collect::<Vec<_>>().join(", "),
            ln_rms
                .iter()
                .map(|(l, d, sp)| format!("{} at {l} layers (seed std {})", f(*d, 3), f(*sp, 3)))
                .collect::<Vec<_>>()
                .join(", "),
            if sweep.is_empty() { "-".into() } else { sweep.join("; ") }
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(mean: f64) -> SeedGroup {
        SeedGroup {
            runs: 1,
            converged: 1,
            stalled: 0,
            diverged: 0,
            status: Status::Converged,
            mean: Some(mean),
            std: Some(0.0),
            best: Some(mean),
            diverged_at: None,
        }
    }

    #[test]
    fn conclusion_places_point_wise_kinds_against_the_better_norm() {
        let s = Settings {
            layers: vec![4],
            norms: vec![NormKind::None, NormKind::LayerNorm, NormKind::Dyt],
            lrs: vec![1e-3],
            inits: vec![InitScheme::Torch],
            sweep_lrs: Vec::new(),
            steps: 10,
            seeds: vec![0],
            eval_sequences: 1,
        };
        let groups = [
            (NormKind::None, group(2.0)),
            (NormKind::LayerNorm, group(1.8)),
            (NormKind::Dyt, group(2.1)),
        ];
        let find = |(_, _, _, n): Key| groups.iter().find(|(k, _)| *k == n).map(|(_, g)| g);
        let c = conclusion(&s, &find);
        assert!(c.contains("dyt ends +0.30 at 4"), "{c}");
        assert!(c.contains("behind the better norm by 0.20 at 4"), "{c}");
        // Without RMSNorm in the grid there is no LayerNorm-vs-RMSNorm gap.
        assert!(!c.contains("LayerNorm and RMSNorm"), "{c}");
    }

    /// C12 counts the no-norm net as behind only where its gap to the
    /// better norm exceeds twice the seed std: the same gap within the
    /// seeds' noise turns "holds" into "holds partly".
    #[test]
    fn c12_behind_means_beyond_the_seed_spread() {
        let s = Settings {
            layers: vec![4, 8],
            norms: vec![NormKind::None, NormKind::LayerNorm, NormKind::RmsNorm],
            lrs: vec![1e-3],
            inits: vec![InitScheme::Torch],
            sweep_lrs: Vec::new(),
            steps: 10,
            seeds: vec![0, 1],
            eval_sequences: 1,
        };
        let verdict = |std: f64| {
            let with_std = |mean: f64| SeedGroup {
                std: Some(std),
                ..group(mean)
            };
            let failed = SeedGroup {
                status: Status::Diverged,
                mean: None,
                converged: 0,
                diverged: 1,
                diverged_at: Some(5),
                ..group(0.0)
            };
            let groups = [
                (4, NormKind::None, with_std(2.0)),
                (4, NormKind::LayerNorm, with_std(1.9)),
                (4, NormKind::RmsNorm, with_std(1.9)),
                (8, NormKind::None, failed),
                (8, NormKind::LayerNorm, with_std(1.9)),
                (8, NormKind::RmsNorm, with_std(1.9)),
            ];
            let find = |(_, l, _, n): Key| {
                groups
                    .iter()
                    .find(|(gl, k, _)| *gl == l && *k == n)
                    .map(|(_, _, g)| g)
            };
            check_c12(&s, &find, &|_| (0, None), false).verdict
        };
        assert_eq!(verdict(0.01), Verdict::Holds);
        assert_eq!(verdict(0.08), Verdict::Partly);
    }
}
