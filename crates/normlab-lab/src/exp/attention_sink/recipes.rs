//! attention-sink's recipe sensitivity (C26; issue 72): is the gate's
//! effect on the sink a property of the gate, or of normlab's recipe? The
//! ungated softmax model and the elementwise output gate are retrained on
//! every Bigram-Backcopy setting over 5 seeds, under the chapter's recipe
//! and under one change at a time that an independent implementation
//! (PyTorch's defaults) could make differently: PyTorch's initialisation,
//! no biases, Adam's beta2, AdamW's default weight decay, the training
//! length, the batch. Each run's
//! first-token share is read two ways (the largest over (layer, head), and
//! the largest block's mean over heads). The gate's effect under each
//! (recipe, reading) is classified by C26's rule (verdict.rs), and the
//! changes it depends on are named in the verdict.

use super::cells::{cell_read, Cell};
use super::designs::{Design, Setting, DESIGNS};
use super::rule::{effect, has_sink, Effect};
use crate::present::{opt, Table};
use crate::sweep::RunResult;
use normlab::error::Result;
use normlab::model::sinks::SinkStats;
use normlab::model::InitScheme;
use normlab::train::TrainConfig;
use serde::Serialize;

/// Seeds per (setting, recipe, design) unless `--seeds` says otherwise.
pub(super) const RECIPE_SEEDS: usize = 5;

/// One change of recipe (or none: the chapter's own).
pub(super) struct Recipe {
    /// Its name in tables and the verdict.
    pub(super) name: &'static str,
    /// The change, applied to the chapter's configuration.
    change: fn(&mut TrainConfig),
}

/// The chapter's recipe first, then one change each.
pub(super) const RECIPES: [Recipe; 8] = [
    Recipe {
        name: "normlab's recipe",
        change: |_| {},
    },
    Recipe {
        name: "PyTorch's default init (gate included)",
        change: |c| c.model.init = InitScheme::Torch,
    },
    Recipe {
        name: "no biases",
        change: |c| c.model.no_bias = true,
    },
    Recipe {
        name: "Adam beta2 0.999",
        change: |c| c.beta2 = 0.999,
    },
    Recipe {
        name: "weight decay 0.01 with norm gains",
        change: |c| {
            c.weight_decay = 0.01;
            c.wd_norm_gains = true;
        },
    },
    Recipe {
        name: "half the steps",
        change: |c| c.steps /= 2,
    },
    Recipe {
        name: "twice the steps",
        change: |c| c.steps *= 2,
    },
    Recipe {
        name: "batch 64",
        change: |c| c.batch = 64,
    },
];

/// How a run's first-token share is read from its last sink measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(super) enum Reading {
    /// The largest share over (layer, head) pairs (the chapter's).
    TopHead,
    /// Per block the mean over its heads; the largest block's.
    HeadMean,
}

impl Reading {
    pub(super) const ALL: [Reading; 2] = [Reading::TopHead, Reading::HeadMean];

    pub(super) fn name(self) -> &'static str {
        match self {
            Reading::TopHead => "largest over (layer, head)",
            Reading::HeadMean => "largest block's mean over heads",
        }
    }

    pub(super) fn share(self, s: &SinkStats) -> f64 {
        match self {
            Reading::TopHead => normlab::train::nan_max(s.top_share()),
            Reading::HeadMean => normlab::train::nan_max(
                s.head_share
                    .iter()
                    .map(|h| h.iter().sum::<f64>() / h.len().max(1) as f64),
            ),
        }
    }
}

/// The two designs the sensitivity retrains: ungated, elementwise gate.
fn designs() -> [&'static Design; 2] {
    [&DESIGNS[0], &DESIGNS[1]]
}

/// The configuration of one (recipe, design, seed) on `base`, the setting
/// already applied: logging and evaluation keep their share of the steps.
pub(super) fn recipe_config(base: &TrainConfig, r: &Recipe) -> Result<TrainConfig> {
    base.with(|c| {
        (r.change)(c);
        c.log_every = (c.steps / 30).max(1);
        c.eval_every = (c.steps / 6).max(1);
    })
}

/// Every configuration of the sensitivity: setting x recipe x design x seed.
/// `setting_config` builds the chapter's configuration of one (setting,
/// design, seed).
pub(super) fn configs(
    settings: &[Setting],
    seeds: &[u64],
    setting_config: &dyn Fn(&Setting, &Design, u64) -> Result<TrainConfig>,
) -> Result<Vec<TrainConfig>> {
    let mut out = Vec::new();
    for s in settings {
        for r in &RECIPES {
            for d in designs() {
                for &seed in seeds {
                    out.push(recipe_config(&setting_config(s, d, seed)?, r)?);
                }
            }
        }
    }
    Ok(out)
}

/// One (setting, recipe, reading): the ungated and gated cells and the
/// gate's effect.
#[derive(Serialize)]
pub(super) struct RecipeCell {
    pub(super) setting: &'static str,
    pub(super) recipe: &'static str,
    pub(super) reading: &'static str,
    pub(super) ungated: Cell,
    pub(super) gated: Cell,
    /// The gate's effect by C26's rule, or None when the ungated model has
    /// no sink on every seed here.
    pub(super) effect: Option<&'static str>,
}

impl RecipeCell {
    fn sink(&self) -> bool {
        self.effect.is_some()
    }
}

/// Effect names as the verdict writes them.
pub(super) fn effect_name(e: Effect) -> &'static str {
    match e {
        Effect::Removed => "removed",
        Effect::Lowered => "lowered, not removed",
        Effect::Kept => "not lowered",
        Effect::Unusable => "no usable share",
    }
}

/// The sensitivity's cells from the runs: each (setting, recipe, reading)
/// with runs of both designs.
pub(super) fn cells(
    rs: &[RunResult],
    settings: &[Setting],
    seeds: &[u64],
    uniform: f64,
    setting_config: &dyn Fn(&Setting, &Design, u64) -> Result<TrainConfig>,
) -> Result<Vec<RecipeCell>> {
    let mut out = Vec::new();
    for s in settings {
        for r in &RECIPES {
            let mut groups: Vec<Vec<&RunResult>> = Vec::new();
            for d in designs() {
                let want: Vec<TrainConfig> = seeds
                    .iter()
                    .map(|&seed| recipe_config(&setting_config(s, d, seed)?, r))
                    .collect::<Result<_>>()?;
                groups.push(rs.iter().filter(|x| want.contains(&x.cfg)).collect());
            }
            if groups.iter().any(|g| g.is_empty()) {
                continue;
            }
            for reading in Reading::ALL {
                let read = |st: &SinkStats| reading.share(st);
                let ungated = cell_read(s, designs()[0], &groups[0], &read);
                let gated = cell_read(s, designs()[1], &groups[1], &read);
                let effect =
                    has_sink(&ungated).then(|| effect_name(effect(&ungated, &gated, uniform)));
                out.push(RecipeCell {
                    setting: s.name,
                    recipe: r.name,
                    reading: reading.name(),
                    ungated,
                    gated,
                    effect,
                });
            }
        }
    }
    Ok(out)
}

/// The sensitivity's table.
pub(super) fn table(cells: &[RecipeCell], seeds: usize, uniform: f64) -> Table {
    let mut t = Table::new(
        format!(
            "recipe sensitivity: the ungated model and the elementwise gate under one change of recipe at a time ({seeds} seeds; first-token share at the end, mean ± std over seeds; uniform {}); the gate's effect by C26's rule",
            crate::present::f(uniform, 3)
        ),
        &["setting", "recipe", "share read as", "ungated share", "gated share", "gate's effect", "ungated loss", "gated loss"],
    );
    for c in cells {
        t.row(vec![
            c.setting.to_string(),
            c.recipe.to_string(),
            c.reading.to_string(),
            format!(
                "{} ± {}",
                opt(c.ungated.share, 3),
                opt(c.ungated.share_std, 3)
            ),
            format!("{} ± {}", opt(c.gated.share, 3), opt(c.gated.share_std, 3)),
            c.effect.unwrap_or("no sink without the gate").to_string(),
            opt(c.ungated.eval_loss, 4),
            opt(c.gated.eval_loss, 4),
        ]);
    }
    t
}

/// What the gate's effect depends on: per setting and reading, the recipes
/// under which it differs from the chapter's recipe; and whether the gate
/// removed the sink under every (recipe, reading) with a sink.
pub(super) fn dependence(cells: &[RecipeCell]) -> (String, bool) {
    let mut parts = Vec::new();
    let mut removed_everywhere = true;
    let mut any = false;
    for c in cells.iter().filter(|c| c.sink()) {
        any = true;
        removed_everywhere &= c.effect == Some(effect_name(Effect::Removed));
    }
    let mut keys: Vec<(&str, &str)> = cells.iter().map(|c| (c.setting, c.reading)).collect();
    keys.dedup();
    for (setting, reading) in keys {
        let of: Vec<&RecipeCell> = cells
            .iter()
            .filter(|c| c.setting == setting && c.reading == reading)
            .collect();
        let Some(base) = of.iter().find(|c| c.recipe == RECIPES[0].name) else {
            continue;
        };
        let said = |c: &RecipeCell| {
            format!(
                "{} ({}: ungated {}, gated {})",
                c.recipe,
                c.effect.unwrap_or("no sink without the gate"),
                opt(c.ungated.share, 3),
                opt(c.gated.share, 3)
            )
        };
        let differ: Vec<String> = of
            .iter()
            .filter(|c| c.recipe != base.recipe && c.effect != base.effect)
            .map(|c| said(c))
            .collect();
        let same = of.len() - 1 - differ.len();
        parts.push(if differ.is_empty() {
            format!(
                "{setting}, share read as the {reading}: the gate's effect is the same under all {} recipes ({})",
                of.len(),
                said(base)
            )
        } else {
            format!(
                "{setting}, share read as the {reading}: under {} the gate's effect differs from {}, unchanged under the other {same}",
                differ.join(", "),
                said(base)
            )
        });
    }
    (parts.join("; "), any && removed_everywhere)
}
