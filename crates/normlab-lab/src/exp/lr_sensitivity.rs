//! lr-sensitivity (claims C13, C14): how sensitive are Pre-LN and Post-LN to
//! the learning rate, with and without warm-up? The toy net at two depths,
//! a sweep of learning rates, several seeds: the final held-out loss per
//! cell, with diverged (D) and stalled (S) cells marked. The net starts from
//! PyTorch's default init, as the lesson's toy net (a plain PyTorch model)
//! does: GPT-2's init, normlab's default, scales the output projections by
//! 1/sqrt(2L), which itself steadies a deep Post-LN net.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{num, result, ExpResult, Experiment, Progress};
use super::runs::{self, grid_settings, lrs_json};
use crate::present::{f, grid as heat, opt, opt_step, Figure, Table};
use crate::sweep::{RunSpec, SeedGroup};
use normlab::error::Result;
use normlab::kernels::norm::NormKind;
use normlab::model::InitScheme;
use normlab::nn::Placement;
use normlab::train::Status;
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
        ExpFlag::Grid,
        ExpFlag::Norms,
    ],
    run,
    grid: Some(grid),
    hidden_training: None,
    quick_decides: false,
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
                        cfgs.push(runs::toy(|c| {
                            c.model.layers = l;
                            c.model.init = InitScheme::Torch;
                            c.model.norm = s.norm;
                            c.model.placement = p;
                            c.lr = lr;
                            c.warmup = w;
                            c.steps = s.steps;
                            c.seed = seed;
                            c.shards = 1;
                            c.eval_sequences = s.eval_sequences;
                            c.eval_every = (s.steps / 6).max(1);
                        })?);
                    }
                }
            }
        }
    }
    Ok(runs::specs(cfgs))
}

/// A cell of the grid: (layers, warm-up, placement, lr).
type Cell = (usize, usize, Placement, f32);

/// The best learning rate (lowest mean loss among converged cells).
fn best_lr<'a>(
    s: &Settings,
    find: &dyn Fn(Cell) -> Option<&'a SeedGroup>,
    l: usize,
    w: usize,
    p: Placement,
) -> Option<(f32, f64, f64)> {
    s.lrs
        .iter()
        .filter_map(|&lr| {
            find((l, w, p, lr))
                .filter(|g| g.status == Status::Converged)
                .and_then(|g| Some((lr, g.mean?, g.std.unwrap_or(0.0))))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// The answer per depth and warm-up: at how many learning rates each
/// placement trains, where it fails, and its best learning rate and loss.
fn conclusion<'a>(s: &Settings, find: &dyn Fn(Cell) -> Option<&'a SeedGroup>) -> String {
    let mut parts = Vec::new();
    for &l in &s.layers {
        for &w in &s.warmups {
            let each: Vec<String> = s
                .placements
                .iter()
                .map(|&p| {
                    let failed: Vec<String> = s
                        .lrs
                        .iter()
                        .filter_map(|&lr| {
                            find((l, w, p, lr))
                                .filter(|g| g.status != Status::Converged)
                                .map(|g| format!("{lr} ({})", g.status.name()))
                        })
                        .collect();
                    let ok = s.lrs.len() - failed.len();
                    let best = best_lr(s, find, l, w, p)
                        .map(|(lr, m, sd)| format!("; best lr {lr}: {} ± {}", f(m, 3), f(sd, 3)))
                        .unwrap_or_default();
                    format!(
                        "{} trains at {ok} of {} learning rates{}{best}",
                        p.name(),
                        s.lrs.len(),
                        if failed.is_empty() {
                            String::new()
                        } else {
                            format!(", failing at {}", failed.join(", "))
                        }
                    )
                })
                .collect();
            let warm = if w == 0 {
                "without warm-up".to_string()
            } else {
                format!("with {w} warm-up steps")
            };
            parts.push(format!("At {l} layers {warm}, {}", each.join("; ")));
        }
    }
    format!("{}.", parts.join(". "))
}

/// C13 (the window), C14 (warm-up rescues Post-LN) and C22 (tuned Post-LN
/// matches Pre-LN), from the cells.
fn checks<'a>(s: &Settings, find: &dyn Fn(Cell) -> Option<&'a SeedGroup>) -> Vec<ClaimCheck> {
    let mut out = Vec::new();
    // C13, warm-up 0, judged at the lesson's depth (12 layers, else the
    // shallowest); other depths are shown beside it. "An order of
    // magnitude": Pre-LN's best lr at least 10x Post-LN's (two steps of the
    // half-decade grid; 9.9 allows for f32 rates).
    let lesson_depth = if s.layers.contains(&12) {
        12
    } else {
        s.layers[0]
    };
    out.push(check_c13(s, find, lesson_depth));
    out.extend(check_c14(s, find, lesson_depth));
    out.push(check_c22(s, find));
    out
}

/// Whether a cell's runs failed (diverged or stalled).
fn fails(g: Option<&SeedGroup>) -> bool {
    g.is_some_and(|g| g.status != Status::Converged)
}

/// A cell's mean final loss, or its status when it did not converge.
fn label(g: Option<&SeedGroup>) -> String {
    match g {
        Some(g) if g.status == Status::Converged => opt(g.mean, 3),
        Some(g) => format!(
            "{}{}",
            g.status.name(),
            g.mean.map(|m| format!(" {}", f(m, 2))).unwrap_or_default()
        ),
        None => "-".into(),
    }
}

/// C13: without warm-up, Pre-LN trains at every lr while Post-LN fails at
/// the high ones, and Pre-LN's best lr is 10x Post-LN's, at `lesson_depth`.
fn check_c13<'a>(
    s: &Settings,
    find: &dyn Fn(Cell) -> Option<&'a SeedGroup>,
    lesson_depth: usize,
) -> ClaimCheck {
    use Placement::{Post, Pre};
    let mut parts = Vec::new();
    let (mut pre_all, mut post_high_fails, mut ratio_ok) = (false, false, false);
    for &l in &s.layers {
        let pre_ok = s
            .lrs
            .iter()
            .all(|&lr| find((l, 0, Pre, lr)).is_some_and(|g| g.status == Status::Converged));
        let high: Vec<f32> = s.lrs.iter().copied().filter(|&lr| lr >= 1e-3).collect();
        let post_fail_high = high.iter().all(|&lr| fails(find((l, 0, Post, lr))));
        let (bp, bq) = (best_lr(s, find, l, 0, Pre), best_lr(s, find, l, 0, Post));
        if l == lesson_depth {
            pre_all = pre_ok;
            post_high_fails = post_fail_high;
            ratio_ok = matches!((bp, bq), (Some(bp), Some(bq)) if bp.0 >= 9.9 * bq.0);
        }
        parts.push(format!(
            "{l} layers: Pre-LN {} (best lr {}), Post-LN by lr {} (best lr {})",
            if pre_ok {
                "converges at every lr".to_string()
            } else {
                "fails somewhere".to_string()
            },
            bp.map(|b| format!("{}", b.0)).unwrap_or_else(|| "-".into()),
            s.lrs
                .iter()
                .map(|&lr| format!("{lr}: {}", label(find((l, 0, Post, lr)))))
                .collect::<Vec<_>>()
                .join(", "),
            bq.map(|b| format!("{}", b.0)).unwrap_or_else(|| "-".into()),
        ));
    }
    let yes = |b: bool| if b { "yes" } else { "no" };
    let all = [pre_all, post_high_fails, ratio_ok];
    ClaimCheck::new(
        "C13",
        match all.iter().filter(|x| **x).count() {
            3 => Verdict::Holds,
            0 => Verdict::DoesNotHold,
            _ => Verdict::Partly,
        },
        format!(
            "without warm-up: {}. Judged at {lesson_depth} layers: Pre-LN converges at every lr: {}; Post-LN fails at every lr >= 1e-3: {}; Pre-LN's best lr 10x Post-LN's or more: {}. (Lesson: Post-LN at 12 layers diverges at lr >= 1e-3, Pre-LN converges everywhere with its best near 3e-3, an order of magnitude above Post-LN's.)",
            parts.join("; "),
            yes(pre_all),
            yes(post_high_fails),
            yes(ratio_ok)
        ),
    )
}

/// C14: warm-up rescues Post-LN at lr 1e-3 at `lesson_depth` (and in the
/// other cells where it fails without); none without a warm-up in the grid.
fn check_c14<'a>(
    s: &Settings,
    find: &dyn Fn(Cell) -> Option<&'a SeedGroup>,
    lesson_depth: usize,
) -> Option<ClaimCheck> {
    use Placement::{Post, Pre};
    // C14: Post-LN 12 (or the shallowest) layers at lr 1e-3 with and without
    // warm-up (the lesson's cell); where Post-LN trains there without
    // warm-up, the grid's other cells where it fails show whether warm-up
    // rescues it. Pre-LN training without warm-up (C13's subject) qualifies
    // a rescue, never stands in for one.
    let l = lesson_depth;
    let longest = s.warmups.iter().copied().max().unwrap_or(0);
    if longest == 0 {
        return None;
    }
    let (w0, wl, pre) = (
        find((l, 0, Post, 1e-3)),
        find((l, longest, Post, 1e-3)),
        find((l, 0, Pre, 1e-3)),
    );
    let converged = |g: Option<&SeedGroup>| g.is_some_and(|g| g.status == Status::Converged);
    let close = match (wl.and_then(|g| g.mean), pre.and_then(|g| g.mean)) {
        (Some(a), Some(b)) => (a - b).abs() <= 0.1,
        _ => false,
    };
    // Every other cell where Post-LN fails without warm-up: rescued?
    let elsewhere: Vec<(usize, f32, bool)> = s
        .layers
        .iter()
        .flat_map(|&d| s.lrs.iter().map(move |&lr| (d, lr)))
        .filter(|&(d, lr)| (d, lr) != (l, 1e-3) && fails(find((d, 0, Post, lr))))
        .map(|(d, lr)| (d, lr, converged(find((d, longest, Post, lr)))))
        .collect();
    let rescued_elsewhere = elsewhere.iter().filter(|c| c.2).count();
    let verdict = if fails(w0) {
        match (converged(wl), close) {
            (true, true) => Verdict::Holds,
            (true, false) => Verdict::Partly,
            (false, _) if rescued_elsewhere > 0 => Verdict::Partly,
            (false, _) => Verdict::DoesNotHold,
        }
    } else if rescued_elsewhere > 0 {
        Verdict::Partly
    } else {
        Verdict::DoesNotHold
    };
    let others = if elsewhere.is_empty() {
        "Post-LN trained without warm-up in every other cell too".to_string()
    } else {
        format!(
            "elsewhere Post-LN failed without warm-up in {} cell(s) and {longest} warm-up steps rescued {rescued_elsewhere}: {}",
            elsewhere.len(),
            elsewhere
                .iter()
                .map(|(d, lr, r)| format!(
                    "{d} layers lr {lr} {}",
                    if *r { "rescued" } else { "not rescued" }
                ))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Some(ClaimCheck::new(
        "C14",
        verdict,
        format!(
            "toy, {l} layers, lr 1e-3: Post-LN without warm-up {}, with {longest} warm-up steps {}; Pre-LN without warm-up {}; {others} (lesson: Post-LN diverges without warm-up; 2.44 with 1000 steps of it vs Pre-LN's 2.38).",
            label(w0),
            label(wl),
            label(pre)
        ),
    ))
}

/// C22: the best tuned Post-LN (over lr and warm-up) matches the best
/// Pre-LN, per depth.
fn check_c22<'a>(s: &Settings, find: &dyn Fn(Cell) -> Option<&'a SeedGroup>) -> ClaimCheck {
    use Placement::{Post, Pre};
    // C22: the best tuned Post-LN against the best Pre-LN, per depth.
    let mut parts = Vec::new();
    let mut matches = 0;
    for &l in &s.layers {
        let best = |p| {
            s.warmups
                .iter()
                .filter_map(|&w| best_lr(s, find, l, w, p).map(|b| (w, b)))
                .min_by(|a, b| a.1 .1.total_cmp(&b.1 .1))
        };
        if let (Some((wp, bp)), Some((wq, bq))) = (best(Pre), best(Post)) {
            let tol = 0.02f64.max(2.0 * bp.2.max(bq.2));
            if bq.1 <= bp.1 + tol {
                matches += 1;
            }
            parts.push(format!(
                "{l} layers: best Post-LN {} (lr {}, warm-up {wq}) vs best Pre-LN {} (lr {}, warm-up {wp})",
                f(bq.1, 3),
                bq.0,
                f(bp.1, 3),
                bp.0
            ));
        }
    }
    ClaimCheck::new(
        "C22",
        Verdict::of_count(matches, parts.len()),
        format!(
            "tuned over lr and warm-up: {} (matching = within 0.02 or twice the seed std).",
            parts.join("; ")
        ),
    )
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
    let mut cells_all: Vec<(Cell, SeedGroup)> = Vec::new();
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
                    cells_all.push(((l, w, p, lr), g.clone()));
                    row.push(Some(g));
                }
                converged_lrs.insert(format!("L{l} warmup {w} {}", p.name()), Value::from(ok_lrs));
                cells.push(row);
            }
            panels.push(heat::heat_panel(
                format!("{l} layers, warm-up {w}"),
                ("learning rate", "placement"),
                s.lrs.iter().map(|v| format!("{v}")).collect(),
                s.placements.iter().map(|p| p.name().to_string()).collect(),
                &cells,
            ));
        }
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "toy", "layers": s.layers, "placements": s.placements.iter().map(|p| p.name()).collect::<Vec<_>>(), "lrs": lrs_json(&s.lrs), "warmups": s.warmups, "norm": s.norm.name(), "steps": s.steps, "optimizer": "adam", "init": "torch"}),
        ),
        s.seeds.clone(),
    );
    out.data.insert("runs".into(), runs::records(&rs));
    out.data
        .insert("converged_lrs".into(), Value::Object(converged_lrs));
    out.figures
        .push(Figure::new("lr_sensitivity", panels, s.warmups.len()));
    let find = |k: Cell| cells_all.iter().find(|(c, _)| *c == k).map(|(_, g)| g);
    out.conclusion = conclusion(&s, &find);
    out.checks.extend(checks(&s, &find));
    out.tables.push(table);
    Ok(out)
}
