//! residual-routing's verdicts: each routed design against plain Pre-LN
//! per model and learning rate (better or worse beyond twice the larger
//! seed std, at equal steps and at equal wall time), the conclusion, and
//! C27's verdict.

use super::cells::{Cell, Settings, Use, DESIGNS};
use crate::exp::claims::{ClaimCheck, Verdict};
use crate::exp::framework::num;
use crate::present::f;
use normlab::train::Status;

/// How a design compares with plain Pre-LN in one model at one rate.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cmp {
    Better,
    Worse,
    Same,
    /// One seed, or a run that did not train: no spread to compare with.
    Undecided,
}

/// `d` against plain Pre-LN: the gap beyond twice the larger seed std.
fn compare(plain: &Cell, d: &Cell, equal_time: bool) -> Cmp {
    let ok = |c: &Cell| c.status == Status::Converged.name();
    let pick = |c: &Cell| {
        if equal_time {
            (c.loss_equal_time, c.loss_equal_time_std)
        } else {
            (c.loss, c.loss_std)
        }
    };
    if !ok(d) && ok(plain) {
        return Cmp::Worse;
    }
    if ok(d) && !ok(plain) {
        return Cmp::Better;
    }
    match (pick(plain), pick(d)) {
        ((Some(p), Some(ps)), (Some(x), Some(xs))) if ps.max(xs) > 0.0 => {
            let gap = p - x;
            if gap > 2.0 * ps.max(xs) {
                Cmp::Better
            } else if -gap > 2.0 * ps.max(xs) {
                Cmp::Worse
            } else {
                Cmp::Same
            }
        }
        _ => Cmp::Undecided,
    }
}

/// Per model and design: the comparison at every rate (steps, time).
fn verdicts<'a>(cells: &'a [Cell], s: &Settings) -> Vec<(&'a Cell, Vec<(Cmp, Cmp)>)> {
    let mut out = Vec::new();
    for m in &s.models {
        let here = |d: &str, lr: &serde_json::Value| {
            cells
                .iter()
                .find(|c| c.model == m.to_string() && c.design == d && &c.lr == lr)
        };
        for d in &DESIGNS[1..] {
            let mut v = Vec::new();
            let mut first = None;
            for &lr in &s.lrs {
                if let (Some(p), Some(c)) = (here("pre-ln", &num(lr)), here(d.name(), &num(lr))) {
                    first.get_or_insert(c);
                    v.push((compare(p, c, false), compare(p, c, true)));
                }
            }
            if let Some(c) = first {
                out.push((c, v));
            }
        }
    }
    out
}

fn word(c: Cmp) -> &'static str {
    match c {
        Cmp::Better => "better",
        Cmp::Worse => "worse",
        Cmp::Same => "no detectable difference",
        Cmp::Undecided => "undecided (no seed spread)",
    }
}

pub(super) fn conclusion(cells: &[Cell], uses: &[Use], s: &Settings) -> String {
    let mut parts = Vec::new();
    for (c, v) in verdicts(cells, s) {
        let rates: Vec<String> = s
            .lrs
            .iter()
            .zip(&v)
            .map(|(lr, (st, t))| {
                format!(
                    "lr {lr}: {} at equal steps, {} at equal time",
                    word(*st),
                    word(*t)
                )
            })
            .collect();
        parts.push(format!(
            "{} {} against Pre-LN: {}",
            c.model,
            c.design,
            rates.join("; ")
        ));
    }
    let idle: Vec<String> = uses
        .iter()
        .map(|u| format!("{} {} {} of {}", u.model, u.design, u.idle, u.blocks))
        .collect();
    format!(
        "{}. Blocks whose skip costs under 0.01 nats: {}.",
        parts.join(". "),
        idle.join(", ")
    )
}

/// C27: does a routed design beat Pre-LN beyond the seed spread at every
/// rate, at equal steps and at equal wall time, and do its deep blocks
/// stay in use?
pub(super) fn check_c27(cells: &[Cell], uses: &[Use], s: &Settings) -> ClaimCheck {
    let all = |v: &[(Cmp, Cmp)], k: usize| {
        !v.is_empty()
            && v.iter()
                .all(|p| (if k == 0 { p.0 } else { p.1 }) == Cmp::Better)
    };
    let vs = verdicts(cells, s);
    let steps: Vec<String> = vs
        .iter()
        .filter(|(_, v)| all(v, 0))
        .map(|(c, _)| format!("{} {}", c.model, c.design))
        .collect();
    let time: Vec<String> = vs
        .iter()
        .filter(|(_, v)| all(v, 0) && all(v, 1))
        .map(|(c, _)| format!("{} {}", c.model, c.design))
        .collect();
    // Its deep blocks at least as much in use as Pre-LN's (the last third's
    // skip cost, C22's measure).
    let skip_last = |m: &str, d: &str| {
        uses.iter()
            .find(|u| u.model == m && u.design == d)
            .map(|u| u.skip_last)
    };
    let deep_in_use =
        |c: &Cell| match (skip_last(&c.model, c.design), skip_last(&c.model, "pre-ln")) {
            (Some(x), Some(p)) => x >= p,
            _ => false,
        };
    let holds: Vec<&str> = vs
        .iter()
        .filter(|(c, v)| all(v, 0) && all(v, 1) && deep_in_use(c))
        .map(|(c, _)| c.design)
        .collect();
    let any_better = vs.iter().any(|(_, v)| v.iter().any(|p| p.0 == Cmp::Better));
    let undecided = vs
        .iter()
        .all(|(_, v)| v.iter().all(|p| p.0 == Cmp::Undecided));
    let deep: Vec<String> = uses
        .iter()
        .map(|u| format!("{} {} {}", u.model, u.design, f(u.skip_last, 3)))
        .collect();
    let verdict = if undecided {
        Verdict::Inconclusive
    } else if !holds.is_empty() {
        Verdict::Holds
    } else if !steps.is_empty() || any_better {
        Verdict::Partly
    } else {
        Verdict::DoesNotHold
    };
    let mut cmp = Vec::new();
    for (c, v) in &vs {
        let w: Vec<&str> = v.iter().map(|p| word(p.0)).collect();
        cmp.push(format!("{} {}: {}", c.model, c.design, w.join(" / ")));
    }
    ClaimCheck::new(
        "C27",
        verdict,
        format!(
            "Against plain Pre-LN at lr {} (final held-out loss, beyond twice the larger seed std): {}. Better at every rate at equal steps: {}; and at equal wall time too: {}. Deep blocks in use (loss rise when one of the last third is skipped, lr {}; holds needs a design better at equal steps and time whose deep blocks are at least as used as Pre-LN's): {}.",
            s.lrs.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(" / "),
            cmp.join("; "),
            if steps.is_empty() { "none".into() } else { steps.join(", ") },
            if time.is_empty() { "none".into() } else { time.join(", ") },
            s.lrs[0],
            deep.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::super::cells::{attnres_size, Design};
    use super::*;
    use normlab::model::{ModelConfig, ModelKind};

    #[test]
    fn attnres_blocks_number_about_eight() {
        assert_eq!(attnres_size(30), 8);
        assert_eq!(attnres_size(12), 3);
        assert_eq!(attnres_size(2), 1);
        for d in DESIGNS {
            let mut m = ModelConfig::gpt();
            d.apply(&mut m);
            assert_eq!(Design::of(&m), d);
        }
    }

    fn cell(design: &'static str, loss: f64, std: f64, status: Status) -> Cell {
        Cell {
            model: "gpt".into(),
            design,
            lr: num(1e-3),
            params: 0,
            step_seconds: 0.0,
            step_ratio: 1.0,
            step_ratio_q1_q3: (1.0, 1.0),
            status: status.name(),
            loss: Some(loss),
            loss_std: Some(std),
            equal_time_step: 0.0,
            loss_equal_time: Some(loss),
            loss_equal_time_std: Some(std),
            stream_growth: None,
            mixing_gain: None,
        }
    }

    #[test]
    fn better_means_beyond_the_seed_spread() {
        let p = cell("pre-ln", 2.0, 0.01, Status::Converged);
        assert_eq!(
            compare(&p, &cell("hc", 1.9, 0.01, Status::Converged), false),
            Cmp::Better
        );
        assert_eq!(
            compare(&p, &cell("hc", 1.99, 0.01, Status::Converged), false),
            Cmp::Same
        );
        assert_eq!(
            compare(&p, &cell("hc", 2.1, 0.01, Status::Converged), true),
            Cmp::Worse
        );
        assert_eq!(
            compare(&p, &cell("hc", 1.0, 0.01, Status::Diverged), false),
            Cmp::Worse
        );
        assert_eq!(
            compare(&p, &cell("hc", 1.9, 0.0, Status::Converged), false),
            Cmp::Better
        );
        let one_seed = cell("pre-ln", 2.0, 0.0, Status::Converged);
        assert_eq!(
            compare(&one_seed, &cell("hc", 1.9, 0.0, Status::Converged), false),
            Cmp::Undecided
        );
    }

    fn use_of(design: &'static str, skip_last: f64) -> Use {
        Use {
            model: "gpt".into(),
            design,
            skip_first: 0.1,
            skip_last,
            idle: 0,
            blocks: 12,
            skip_loss_rise: Vec::new(),
        }
    }

    #[test]
    fn c27_holds_only_for_a_design_better_everywhere_whose_deep_blocks_stay_in_use() {
        let s = Settings {
            models: vec![ModelKind::Gpt],
            lrs: vec![1e-3, 1e-2],
        };
        let at = |mut c: Cell, lr: f32| {
            c.lr = num(lr);
            c
        };
        let cells = |hc: f64, std: f64| {
            let mut v = Vec::new();
            for lr in [1e-3, 1e-2] {
                v.push(at(cell("pre-ln", 2.0, std, Status::Converged), lr));
                v.push(at(cell("hc", hc, std, Status::Converged), lr));
            }
            v
        };
        let uses = |hc: f64| vec![use_of("pre-ln", 0.05), use_of("hc", hc)];
        let v = |c: &[Cell], u: &[Use]| check_c27(c, u, &s).verdict;
        assert_eq!(v(&cells(1.8, 0.01), &uses(0.06)), Verdict::Holds);
        assert_eq!(v(&cells(1.8, 0.01), &uses(0.01)), Verdict::Partly);
        assert_eq!(v(&cells(1.995, 0.01), &uses(0.06)), Verdict::DoesNotHold);
        assert_eq!(v(&cells(1.8, 0.0), &uses(0.06)), Verdict::Inconclusive);
    }
}
