//! C26 by its decision rule (claims.rs `DECISION_RULES`): which settings
//! have a sink, what each design does to it, and the verdict on the
//! elementwise gate.

use super::cells::Cell;
use super::designs::{DESIGNS, SETTINGS};
use super::recipes::{dependence, RecipeCell};
use super::rule::{effect, has_sink, Effect};
use crate::exp::claims::Verdict;
use crate::present::{f, opt};

/// C26 by its decision rule (claims.rs), with the evidence; the recipe
/// sensitivity's cells (none with --quick) name what the gate's effect
/// depends on and keep "holds" for a gate that removes the sink under every
/// recipe.
pub(super) fn c26(
    cells: &[Cell],
    uniform: f64,
    recipes: &[RecipeCell],
    recipe_seeds: usize,
) -> (Verdict, String) {
    let mut parts = Vec::new();
    let (mut n, mut removed, mut moved, mut seeds) = (0, 0, 0, usize::MAX);
    let mut best: Vec<(&str, f64, &str)> = Vec::new();
    for s in SETTINGS {
        let of: Vec<&Cell> = cells.iter().filter(|c| c.setting == s.name).collect();
        let Some(base) = of.iter().find(|c| c.design == DESIGNS[0].name) else {
            continue;
        };
        let shares = base
            .share_by_seed
            .iter()
            .map(|v| f(*v, 3))
            .collect::<Vec<_>>()
            .join(", ");
        if !has_sink(base) {
            parts.push(format!(
                "{}: no sink on every seed (ungated largest first-token share by seed {shares}; uniform {})",
                s.name,
                f(uniform, 3)
            ));
            continue;
        }
        n += 1;
        seeds = seeds.min(base.seeds);
        // Designs by effect, then the lesson's gate against the ungated model.
        let mut by: [Vec<String>; 4] = Default::default();
        for c in of.iter().filter(|c| c.design != DESIGNS[0].name) {
            let e = effect(base, c, uniform);
            if c.design == DESIGNS[1].name {
                seeds = seeds.min(c.seeds);
                removed += usize::from(e == Effect::Removed);
                moved += usize::from(matches!(e, Effect::Removed | Effect::Lowered));
            }
            if let (Effect::Removed, Some(v)) = (e, c.share) {
                best.push((c.design, v, s.name));
            }
            let slot = match e {
                Effect::Removed => 0,
                Effect::Lowered => 1,
                Effect::Kept => 2,
                Effect::Unusable => 3,
            };
            by[slot].push(format!("{} {}", c.design, opt(c.share, 3)));
        }
        let mut said = format!(
            "{}: a sink on every seed ({} ± {}; by seed {shares}; uniform {})",
            s.name,
            opt(base.share, 3),
            opt(base.share_std, 3),
            f(uniform, 3)
        );
        for (list, what) in by.iter().zip([
            "removed by",
            "lowered, not removed, by",
            "not lowered beyond the seed spread by",
            "no usable share from",
        ]) {
            if !list.is_empty() {
                said.push_str(&format!("; {what} {}", list.join(", ")));
            }
        }
        if let Some(g) = of.iter().find(|c| c.design == DESIGNS[1].name) {
            said.push_str(&format!(
                "; with the elementwise gate the held-out loss is {} against {} (copy targets {} against {}), the massive activation at position 0 {}x against {}x the median, the sink head's value drain {} against {}",
                opt(g.eval_loss, 4),
                opt(base.eval_loss, 4),
                opt(g.eval_copy, 4),
                opt(base.eval_copy, 4),
                f(g.massive0, 1),
                f(base.massive0, 1),
                f(g.value_drain, 2),
                f(base.value_drain, 2)
            ));
        }
        parts.push(said);
    }
    let mut v = if n == 0 {
        Verdict::Inconclusive
    } else if removed == n && seeds >= 2 {
        Verdict::Holds
    } else if moved > 0 {
        Verdict::Partly
    } else {
        Verdict::DoesNotHold
    };
    if !recipes.is_empty() {
        let (said, removed_everywhere) = dependence(recipes);
        if v == Verdict::Holds && !removed_everywhere {
            v = Verdict::Partly;
        }
        parts.push(format!(
            "Recipe sensitivity ({recipe_seeds} seeds per recipe, the ungated model and the elementwise gate, one change at a time): {said}"
        ));
    }
    best.sort_by(|a, b| a.1.total_cmp(&b.1));
    let best = best
        .first()
        .map(|(d, v, s)| format!(" The lowest share a remover left: {d}, {} ({s}).", f(*v, 3)))
        .unwrap_or_default();
    (
        v,
        format!(
            "The largest first-token share over (layer, head) at the end of training on Bigram-Backcopy, mean over seeds. {}.{best}",
            parts.join(". ")
        ),
    )
}
