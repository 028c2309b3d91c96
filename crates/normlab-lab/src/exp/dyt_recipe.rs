//! dyt-recipe (claim C12): what is each part of the DyT paper's
//! LLaMA recipe worth? "Transformers without Normalization" replaces every
//! norm of a Pre-LN GPT with DyT and, for its LLaMA models, also drops
//! DyT's beta, gives the attention sublayers' DyT a larger initial alpha
//! than the others, and multiplies the embeddings by a learnable scalar
//! initialised to sqrt(d). The GPT with plain DyT, with each part alone and
//! with all three, beside Pre-LN, at one learning rate over seeds: how much
//! each part moves the held-out loss, and how far the full recipe ends
//! from Pre-LN.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{result, ExpResult, Experiment, Progress};
use super::runs::{self, eval_curve, gpt_base, grid_settings, lrs_json};
use crate::present::{opt, Figure, Series, Table};
use crate::sweep::{group_by, RunResult, RunSpec, SeedGroup};
use normlab::error::Result;
use normlab::kernels::norm::NormKind;
use normlab::train::TrainConfig;
use serde_json::{json, Value};

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "dyt-recipe",
    question: "What is each part of DyT's LLaMA recipe worth?",
    flags: &[ExpFlag::Lrs, ExpFlag::Grid],
    run,
    grid: Some(grid),
    hidden_training: None,
    quick_decides: false,
};

/// The attention sublayers' initial alpha in the recipe's variants (the
/// others keep DyT's default 0.5): twice the others, as the recipe sets the
/// attention alpha above the rest.
const ALPHA_ATTN: f32 = 1.0;

/// One variant of the recipe (all pre placement): its norm and the parts
/// of the recipe it uses.
struct Variant {
    label: &'static str,
    norm: NormKind,
    no_beta: bool,
    alpha_attn: bool,
    emb_scale: bool,
}

impl Variant {
    const fn new(label: &'static str, parts: (bool, bool, bool)) -> Variant {
        Variant {
            label,
            norm: NormKind::Dyt,
            no_beta: parts.0,
            alpha_attn: parts.1,
            emb_scale: parts.2,
        }
    }

    /// Set the variant's options on a config.
    fn apply(&self, c: &mut TrainConfig) {
        c.model.norm = self.norm;
        c.model.no_beta = self.no_beta;
        c.model.dyt_alpha_attn = self.alpha_attn.then_some(ALPHA_ATTN);
        c.model.emb_scale = self.emb_scale;
    }

    /// The options it sets, for result.json.
    fn overrides(&self) -> Value {
        let mut v = json!({"norm": self.norm.name()});
        if self.no_beta {
            v["no_beta"] = json!(true);
        }
        if self.alpha_attn {
            v["dyt_alpha_attn"] = json!(ALPHA_ATTN);
        }
        if self.emb_scale {
            v["emb_scale"] = json!(true);
        }
        v
    }
}

/// The variants: Pre-LN, plain DyT, each part alone, the full recipe.
const VARIANTS: [Variant; 6] = [
    Variant {
        norm: NormKind::LayerNorm,
        ..Variant::new("pre-ln", (false, false, false))
    },
    Variant::new("dyt", (false, false, false)),
    Variant::new("dyt, no beta", (true, false, false)),
    Variant::new("dyt, attention alpha", (false, true, false)),
    Variant::new("dyt, embedding scale", (false, false, true)),
    Variant::new("dyt, full recipe", (true, true, true)),
];

/// Learning rates: 1e-3 (the rate at which DyT with the embedding scale
/// trained in `no-norm`'s GPT); quick: 1e-2 (the tiny GPT's Pre-LN trains
/// there within the quick steps).
fn lrs(a: &ExpArgs) -> Vec<f32> {
    a.lrs
        .clone()
        .unwrap_or(if a.quick { vec![1e-2] } else { vec![1e-3] })
}

fn base(a: &ExpArgs) -> TrainConfig {
    let mut b = gpt_base(a);
    b.steps = a.steps_or(200, 600);
    b
}

/// Variant x lr x seed.
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let mut cfgs = Vec::new();
    for v in &VARIANTS {
        for &lr in &lrs(a) {
            for &seed in &a.seeds_or(1, 2) {
                cfgs.push(base(a).with(|c| {
                    v.apply(c);
                    c.lr = lr;
                    c.seed = seed;
                })?);
            }
        }
    }
    Ok(runs::specs(cfgs))
}

/// The variant a run belongs to (by its settings).
fn label_of(r: &RunResult) -> &'static str {
    let m = &r.cfg.model;
    let parts = (m.no_beta, m.dyt_alpha_attn.is_some(), m.emb_scale);
    match (m.norm.name(), parts) {
        ("layernorm", _) => "pre-ln",
        ("dyt", (false, false, false)) => "dyt",
        ("dyt", (true, false, false)) => "dyt, no beta",
        ("dyt", (false, true, false)) => "dyt, attention alpha",
        ("dyt", (false, false, true)) => "dyt, embedding scale",
        ("dyt", (true, true, true)) => "dyt, full recipe",
        _ => "?",
    }
}

/// `a - b` when every run of both trained, and whether it lies beyond the
/// seeds' spread (twice the larger std, plus 0.005 nats).
fn delta(a: &SeedGroup, b: &SeedGroup) -> Option<(f64, bool)> {
    if a.converged < a.runs || b.converged < b.runs || a.runs == 0 || b.runs == 0 {
        return None;
    }
    let (x, y) = (a.mean?, b.mean?);
    let spread = 2.0 * a.std.unwrap_or(0.0).max(b.std.unwrap_or(0.0)) + 0.005;
    Some((x - y, (x - y).abs() > spread))
}

fn describe(d: Option<(f64, bool)>) -> String {
    match d {
        None => "-".into(),
        Some((v, true)) => format!("{v:+.3}"),
        Some((v, false)) => format!("{v:+.3} (within spread)"),
    }
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let seeds = a.seeds_or(1, 2);
    let rs = runs::run_grid(a, grid(a)?, false, progress)?;
    let groups = group_by(&rs, |r| (label_of(r).to_string(), r.cfg.lr.to_bits()));
    let runs_of = |label: &str, lr: f32| {
        groups
            .iter()
            .find(|((l, x), _)| l == label && *x == lr.to_bits())
            .map(|(_, g)| g.clone())
            .unwrap_or_default()
    };
    let group = |label: &str, lr: f32| SeedGroup::of_runs(runs_of(label, lr).iter().copied());
    let mut table = Table::new(
        format!("GPT, pre placement: final held-out loss (mean ± std over {} seed(s)) and status; each part against plain DyT and each variant against Pre-LN (+ = higher loss; 'within spread' = inside twice the larger seed std + 0.005 nats)", seeds.len()),
        &["lr", "variant", "held-out loss", "vs plain DyT", "vs Pre-LN"],
    );
    let mut cells = Vec::new();
    let mut parts = Vec::new();
    let mut recipe = Vec::new();
    let mut trained_dyt = false;
    let mut panels = Vec::new();
    for &lr in &lrs(a) {
        let (pre, dyt) = (group("pre-ln", lr), group("dyt", lr));
        let mut series = Vec::new();
        for label in VARIANTS.iter().map(|v| v.label) {
            let g = group(label, lr);
            let (vs_dyt, vs_pre) = (delta(&g, &dyt), delta(&g, &pre));
            if label.starts_with("dyt") && g.converged > 0 {
                trained_dyt = true;
            }
            if label.starts_with("dyt, ") && label != "dyt, full recipe" {
                parts.push(format!(
                    "{} {} at lr {lr}",
                    &label[5..],
                    match vs_dyt {
                        None => format!("{} where plain DyT {}", g.label(), dyt.label()),
                        Some((v, true)) => format!("{v:+.3}"),
                        Some((v, false)) => format!("{v:+.3} (no measurable difference)"),
                    }
                ));
            }
            if label == "dyt, full recipe" {
                recipe.push(match vs_pre {
                    None => format!("at lr {lr} the full recipe: {} (Pre-LN {})", g.label(), pre.label()),
                    Some((v, true)) => format!("at lr {lr} the full recipe ends {v:+.3} against Pre-LN"),
                    Some((v, false)) => format!("at lr {lr} the full recipe ends level with Pre-LN ({v:+.3}, within the spread)"),
                });
            }
            table.row(vec![
                format!("{lr}"),
                label.to_string(),
                format!("{} {}", opt(g.mean, 4), g.label()),
                if label == "dyt" || label == "pre-ln" {
                    "-".into()
                } else {
                    describe(vs_dyt)
                },
                if label == "pre-ln" {
                    "-".into()
                } else {
                    describe(vs_pre)
                },
            ]);
            cells.push(json!({"lr": lr, "variant": label, "final_eval_loss": g.mean, "std": g.std,
                "status": g.status.name(), "vs_dyt": vs_dyt.map(|d| d.0), "vs_pre_ln": vs_pre.map(|d| d.0)}));
            if let Some(r) = runs_of(label, lr).first() {
                series.push(Series::new(label.to_string(), eval_curve(r)));
            }
        }
        panels.push(runs::eval_panel(
            format!("GPT, lr {lr}: held-out loss (first seed)"),
            series,
        ));
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"gpt": base(a).overrides(), "variants": VARIANTS.iter().map(|v| json!({"label": v.label, "overrides": v.overrides()})).collect::<Vec<_>>(), "lrs": lrs_json(&lrs(a)), "alpha_attn": ALPHA_ATTN}),
        ),
        seeds.clone(),
    );
    out.figures.push(Figure::new("dyt_recipe", panels, 1));
    out.data.insert("configs".into(), json!(cells));
    out.data.insert("runs".into(), runs::records(&rs));
    out.conclusion = format!(
        "Each part of DyT's LLaMA recipe alone, against plain DyT (held-out loss, + = worse): {}. {}.",
        parts.join("; "),
        recipe.join("; ")
    );
    out.checks.push(ClaimCheck::new(
        "C12",
        if trained_dyt {
            Verdict::Partly
        } else {
            Verdict::Holds
        },
        if trained_dyt {
            format!(
                "a GPT without any normalization statistics trains with DyT in some variant ({}); {}",
                parts.join("; "),
                recipe.join("; ")
            )
        } else {
            "no DyT variant of the GPT trains at these rates".to_string()
        },
    ));
    out.tables.push(table);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use normlab::train::Status;

    fn group(status: Status, mean: f64, std: f64) -> SeedGroup {
        SeedGroup {
            runs: 2,
            converged: if status == Status::Converged { 2 } else { 0 },
            stalled: if status == Status::Stalled { 2 } else { 0 },
            diverged: 0,
            status,
            mean: Some(mean),
            std: Some(std),
            best: Some(mean),
            diverged_at: None,
        }
    }

    #[test]
    fn a_part_counts_only_beyond_the_seeds_spread_and_only_when_both_train() {
        let c = |m, s| group(Status::Converged, m, s);
        // Spread: 2 x 0.01 + 0.005 = 0.025.
        assert_eq!(delta(&c(2.1, 0.01), &c(2.0, 0.01)).map(|d| d.1), Some(true));
        assert_eq!(
            delta(&c(2.02, 0.01), &c(2.0, 0.01)).map(|d| d.1),
            Some(false)
        );
        assert!((delta(&c(1.9, 0.0), &c(2.0, 0.0)).unwrap().0 + 0.1).abs() < 1e-12);
        assert_eq!(delta(&group(Status::Stalled, 3.5, 0.0), &c(2.0, 0.0)), None);
    }
}
