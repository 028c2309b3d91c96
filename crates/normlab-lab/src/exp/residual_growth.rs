//! residual-growth (claims C3, C20): how does the residual stream grow with
//! depth? The lesson's setting at initialisation (12 of its Pre-LN blocks
//! `x + MLP(LayerNorm(x))`, one sublayer and no attention, d 128, MLP 4d,
//! PyTorch's default init, x ~ N(0, 1) of shape (2, 16, 128), 30 seeds;
//! the mean over tokens of each token's norm); then the mean row norm after each block of trained GPTs:
//! Pre-LN with and without the final norm, against Post-LN (pinned at
//! sqrt(d) by its norms); and what removing the final norm from a trained
//! Pre-LN model does to its held-out loss.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{num, result, ExpResult, Experiment, Progress};
use super::lesson_block::{MlpStack, LAYERNORM_EPS};
use super::runs::{self, block_row_norms, final_params, gpt_base, grid_settings};
use crate::bench::timing::median;
use crate::present::{f, opt, Figure, LineChart, Panel, Series, Table};
use crate::sweep::{RunResult, RunSpec};
use normlab::error::Result;
use normlab::kernels::norm::NormKind;
use normlab::kernels::rng::Rng;
use normlab::model::Model;
use normlab::nn::norm::mean_row_norm;
use normlab::nn::Norm;
use normlab::nn::Placement;
use normlab::params::ParamLayout;
use serde_json::{json, Map, Value};

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "residual-growth",
    question: "How does the residual stream grow?",
    flags: &[
        ExpFlag::DModel,
        ExpFlag::Layers,
        ExpFlag::Grid,
        ExpFlag::Lrs,
    ],
    run,
    grid: Some(grid),
    hidden_training: None,
    quick_decides: false,
};

/// The variants: name, placement, final norm (None: the placement's default).
const VARIANTS: [(&str, Placement, Option<bool>); 3] = [
    ("pre, final norm", Placement::Pre, Some(true)),
    ("pre, no final norm", Placement::Pre, Some(false)),
    ("post", Placement::Post, None),
];

/// The grid's settings.
struct Settings {
    d: usize,
    layers: usize,
    steps: usize,
    seeds: Vec<u64>,
    lr: f32,
}

fn settings(a: &ExpArgs) -> Settings {
    Settings {
        d: a.d_model.unwrap_or(if a.quick { 64 } else { 128 }),
        layers: a.first_layers().unwrap_or(if a.quick { 4 } else { 12 }),
        steps: a.steps_or(100, 1000),
        seeds: a.seed_list(1),
        lr: a.lr_or(1e-3),
    }
}

/// GPT of width d (MLP 4d): variant x seed.
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let s = settings(a);
    let base = gpt_base(&ExpArgs {
        layers: None,
        ..a.clone()
    });
    let d = s.d;
    let mut cfgs = Vec::new();
    for (_, p, fin) in VARIANTS {
        for &seed in &s.seeds {
            cfgs.push(base.with(|c| {
                c.model.d_model = d;
                c.model.heads = 4.min(d / 16).max(1);
                c.model.hidden = 4 * d;
                c.model.layers = s.layers;
                c.model.placement = p;
                c.steps = s.steps;
                c.seed = seed;
                c.lr = s.lr;
                c.shards = 1;
                if fin.is_some() {
                    c.model.final_norm = fin;
                }
            })?);
        }
    }
    Ok(runs::specs(cfgs))
}

/// Seeds of the lesson's setting at initialisation (each takes a
/// millisecond, so every run measures all of them).
const LESSON_SEEDS: u64 = 30;

/// The lesson's C3 setting: the mean over tokens of each token's L2 norm
/// for x ~ N(0,1) of shape (2, 16, d), after each of `layers` of the
/// lesson's Pre-LN blocks (`x + F(LayerNorm(x))`, F the MLP d -> 4d -> d,
/// one sublayer and no attention) at PyTorch's default init, and after a
/// final LayerNorm (unit gain, zero bias).
pub(super) fn lesson_init_growth(d: usize, layers: usize, seed: u64) -> (Vec<f64>, f64) {
    let rows = 2 * 16;
    let mut stack = MlpStack::pre_ln(layers, d, seed, rows);
    let x = Rng::derive(seed, "residual-growth-lesson").normal_vec(rows * d, 0.0, 1.0);
    let y = stack.forward(&x);
    let mut norms = vec![mean_row_norm(&x, d)];
    norms.extend(stack.outputs().map(|o| mean_row_norm(o, d)));
    let mut layout = ParamLayout::new();
    let ln = Norm::new(
        &mut layout,
        "ln_f",
        NormKind::LayerNorm,
        d,
        LAYERNORM_EPS,
        None,
    );
    let mut p = layout.zeros();
    layout.init(&mut p, seed);
    let mut out = vec![0.0; y.len()];
    ln.forward(&p, &y, &mut out, &mut ln.cache(rows));
    (norms, mean_row_norm(&out, d))
}

/// Median, min and max.
pub(super) fn spread(v: &[f64]) -> (f64, f64, f64) {
    let (lo, hi) = v
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    (median(&mut v.to_vec()), lo, hi)
}

/// Held-out loss of a trained model with and without its final norm.
fn without_final_norm(cfg: &normlab::train::TrainConfig, params: &[f32]) -> Result<(f64, f64)> {
    let model = Model::new(&cfg.model)?;
    let mut bare = cfg.model.clone();
    bare.final_norm = Some(false);
    let bare_model = Model::new(&bare)?;
    let mut q = vec![0.0f32; bare_model.layout.buffer_len()];
    normlab::convert::copy_common(&model, params, &bare_model, &mut q);
    let data = normlab::train::trainer::load_data(cfg)?;
    let a = normlab::convert::compare((&model, params), (&bare_model, &q), &data, 64);
    Ok((a.eval_loss_a, a.eval_loss_b))
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let s = settings(a);
    let (lesson, t0) = lesson_at_init();
    let rs = runs::run_grid(a, grid(a)?, true, progress)?;
    let (table, panels, data, trained_of) = trained_gpts(a, &s, &rs)?;
    let (mut out, init_pre, init_post) = report(a, &s, panels, data, &trained_of);
    let removed = final_norm_removed(a, &rs)?;
    let (loss_with, loss_removed, trained_without) = removed;
    let (growths, monotone_seeds) =
        check_c3(&mut out, &s, &lesson, (&init_pre, &init_post), &trained_of);
    check_c20(&mut out, &s, removed, &trained_of[1]);
    let Lesson {
        lesson,
        lesson_final,
        ..
    } = lesson;
    out.data.insert(
        "lesson_init".into(),
        json!({"block": "x + MLP(LayerNorm(x)), one sublayer, no attention", "metric": "mean over tokens of each token's L2 norm", "seeds": LESSON_SEEDS, "mean_row_norm": lesson, "after_final_norm": lesson_final, "growth": growths, "monotone_seeds": monotone_seeds}),
    );
    out.data.insert("final_norm_removed".into(), json!({"eval_loss_with": loss_with, "eval_loss_removed": loss_removed, "trained_without": trained_without}));
    out.tables.insert(0, t0);
    out.tables.push(table);
    Ok(out)
}

/// The lesson's setting at initialisation over its seeds: each seed's
/// mean row norms and final-norm output, their medians per block and after
/// the final norm.
struct Lesson {
    per_seed: Vec<(Vec<f64>, f64)>,
    lesson: Vec<f64>,
    finals: Vec<f64>,
    lesson_final: f64,
}

/// The lesson's setting at initialisation, measured over its seeds, and
/// its table.
fn lesson_at_init() -> (Lesson, Table) {
    let per_seed: Vec<(Vec<f64>, f64)> = (0..LESSON_SEEDS)
        .map(|seed| lesson_init_growth(128, 12, seed))
        .collect();
    let at = |i: usize| per_seed.iter().map(|p| p.0[i]).collect::<Vec<f64>>();
    let lesson: Vec<f64> = (0..=12).map(|i| spread(&at(i)).0).collect();
    let finals: Vec<f64> = per_seed.iter().map(|p| p.1).collect();
    let lesson_final = spread(&finals).0;
    let mut t0 = Table::new(
        format!("The lesson's setting at initialisation: 12 of its Pre-LN blocks (x + MLP(LayerNorm(x)), MLP d -> 4d -> d with GELU, no attention), d 128, PyTorch default init, x ~ N(0,1) of shape (2, 16, 128); the mean over tokens of each token's norm, median and range over {LESSON_SEEDS} seeds (the lesson: one run, seed 11)"),
        &["after", "mean row norm (median)", "range over seeds", "lesson"],
    );
    let lesson_vals = [(0, "11.25"), (1, "11.42"), (12, "13.66")];
    for (i, v) in lesson.iter().enumerate() {
        let l = lesson_vals
            .iter()
            .find(|(k, _)| *k == i)
            .map_or("", |(_, s)| s);
        let (_, lo, hi) = spread(&at(i));
        t0.row(vec![
            if i == 0 {
                "input".into()
            } else {
                format!("block {i}")
            },
            f(*v, 3),
            format!("{}-{}", f(lo, 3), f(hi, 3)),
            l.into(),
        ]);
    }
    let (_, flo, fhi) = spread(&finals);
    t0.row(vec![
        "final LayerNorm".into(),
        f(lesson_final, 3),
        format!("{}-{}", f(flo, 3), f(fhi, 3)),
        "11.31 = sqrt(128)".into(),
    ]);
    let lesson = Lesson {
        per_seed,
        lesson,
        finals,
        lesson_final,
    };
    (lesson, t0)
}

/// The trained GPTs' mean row norms per block: a table, figure panels,
/// data by variant, and the trained profiles in variant order.
type Trained = (Table, Vec<Panel>, Map<String, Value>, Vec<Vec<f64>>);

/// Each variant's trained GPT (its first seed): mean row norm per block at
/// init and after training, as a table, figure panels and data; the
/// trained profiles in variant order.
fn trained_gpts(a: &ExpArgs, s: &Settings, rs: &[RunResult]) -> Result<Trained> {
    let (d, layers, steps) = (s.d, s.layers, s.steps);
    let mut table = Table::new(
        format!("Mean row norm of the residual stream, GPT d {d}, {layers} blocks (sqrt(d) = {:.2}), seed {}", (d as f64).sqrt(), s.seeds[0]),
        &["variant", "when", "after embedding", "after block 1", "middle block", "last block", "last / first block"],
    );
    let mut panels = Vec::new();
    let mut data = Map::new();
    let mut trained_of = Vec::new();
    for (name, p, fin) in VARIANTS {
        // The first seed's run of this variant.
        let r = rs
            .iter()
            .find(|r| {
                r.cfg.model.placement == p
                    && r.cfg.seed == s.seeds[0]
                    && (fin.is_none() || r.cfg.model.final_norm == fin)
            })
            .expect("every variant was run");
        let model = Model::new(&r.cfg.model)?;
        let init = block_row_norms(&r.cfg, &model.init_params(r.cfg.seed))?;
        let trained = block_row_norms(&r.cfg, &final_params(a, r)?)?;
        for (when, v) in [("init", &init), ("trained", &trained)] {
            table.row(vec![
                name.to_string(),
                when.into(),
                f(v[0], 3),
                f(v[1], 3),
                f(v[layers / 2], 3),
                f(v[layers], 3),
                f(v[layers] / v[1], 3),
            ]);
        }
        data.insert(name.to_string(), json!({"init": init, "trained": trained, "status": r.summary.status.name(), "final_eval_loss": r.summary.final_eval_loss}));
        panels.push(
            LineChart::new(
                name,
                "block (0 = embedding)",
                "mean row norm",
                vec![
                    Series::indexed("init", &init),
                    Series::indexed(format!("after {steps} steps"), &trained),
                    Series::indexed("sqrt(d)", &vec![(d as f64).sqrt(); layers + 1]),
                ],
            )
            .log_y()
            .panel(),
        );
        trained_of.push(trained);
    }
    Ok((table, panels, data, trained_of))
}

/// The result: settings, the per-block data, the figure and the
/// conclusion; with the pre-LN (final norm) and post-LN profiles at init.
fn report(
    a: &ExpArgs,
    s: &Settings,
    panels: Vec<Panel>,
    data: Map<String, Value>,
    trained_of: &[Vec<f64>],
) -> (ExpResult, Vec<f64>, Vec<f64>) {
    let (d, layers, steps) = (s.d, s.layers, s.steps);
    let init_pre: Vec<f64> =
        serde_json::from_value(data["pre, final norm"]["init"].clone()).unwrap_or_default();
    let init_post: Vec<f64> =
        serde_json::from_value(data["post"]["init"].clone()).unwrap_or_default();
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "gpt", "d_model": d, "layers": layers, "steps": steps, "lr": num(s.lr)}),
        ),
        s.seeds.clone(),
    );
    out.data
        .insert("per_layer_mean_row_norm".into(), Value::Object(data));
    out.figures.push(Figure::new("residual_growth", panels, 3));
    let (pre, pre_nofinal, post) = (&trained_of[0], &trained_of[1], &trained_of[2]);
    out.conclusion = format!(
        "After training, the pre-LN stream's mean row norm grows from {} after block 1 to {} after block {layers} ({}x); with the final norm removed it ends at {}. Post-LN's block outputs lie between {} and {} (sqrt(d) = {:.2} at unit gains): each block ends in a norm, whose trained gains move it off sqrt(d).",
        f(pre[1], 2),
        f(pre[layers], 2),
        f(pre[layers] / pre[1], 2),
        f(pre_nofinal[layers], 2),
        f(post[1..].iter().copied().fold(f64::INFINITY, f64::min), 2),
        f(post[1..].iter().copied().fold(0.0, f64::max), 2),
        (d as f64).sqrt()
    );
    (out, init_pre, init_post)
}

/// C20's measurements: the trained pre-LN model's held-out loss with its
/// final norm and with it taken out; a pre-LN GPT trained without one.
fn final_norm_removed(a: &ExpArgs, rs: &[RunResult]) -> Result<(f64, f64, Option<f64>)> {
    // C20: the trained pre-LN model with its final norm taken out.
    let with_final = rs
        .iter()
        .find(|r| r.cfg.model.placement == Placement::Pre && r.cfg.model.final_norm == Some(true))
        .expect("the pre-LN run with a final norm");
    let (loss_with, loss_removed) =
        without_final_norm(&with_final.cfg, &final_params(a, with_final)?)?;
    let trained_without = rs
        .iter()
        .find(|r| r.cfg.model.placement == Placement::Pre && r.cfg.model.final_norm == Some(false))
        .and_then(|r| r.summary.final_eval_loss);
    Ok((loss_with, loss_removed, trained_without))
}

/// C3: growth in the lesson's setting at init, the Post-LN stream pinned at
/// sqrt(d), and training amplifying the growth; returns each seed's growth
/// and how many seeds grew monotonically.
fn check_c3(
    out: &mut ExpResult,
    s: &Settings,
    lesson: &Lesson,
    (init_pre, init_post): (&[f64], &[f64]),
    trained_of: &[Vec<f64>],
) -> (Vec<f64>, usize) {
    let (d, layers) = (s.d, s.layers);
    let Lesson {
        per_seed,
        lesson,
        finals,
        lesson_final,
    } = lesson;
    let (pre, post) = (&trained_of[0], &trained_of[2]);
    // C3.
    let growths: Vec<f64> = per_seed.iter().map(|p| p.0[12] / p.0[0]).collect();
    let (growth, growth_lo, growth_hi) = spread(&growths);
    let monotone_seeds = per_seed
        .iter()
        .filter(|p| p.0.windows(2).all(|w| w[1] >= w[0]))
        .count();
    let monotone = monotone_seeds as u64 == LESSON_SEEDS;
    let per_layer = growth.powf(1.0 / 12.0) - 1.0;
    let trained_growth = pre[layers] / pre[1];
    let init_growth = match (init_pre.get(layers), init_pre.get(1)) {
        (Some(a), Some(b)) => a / b,
        _ => f64::NAN,
    };
    // "Amplified by training": per block, the trained stream grows faster
    // than the same GPT at its init (GPT-2 init, whose small writes barely
    // grow it) and than the lesson's block at PyTorch's init.
    let per_block = |g: f64, blocks: usize| g.powf(1.0 / blocks.max(1) as f64);
    let (trained_rate, init_rate) = (
        per_block(trained_growth, layers.saturating_sub(1)),
        per_block(init_growth, layers.saturating_sub(1)),
    );
    let amplified = trained_rate > init_rate && trained_rate > per_block(growth, 12);
    // Pinned at init (the lesson's statement): flat across blocks and at
    // sqrt(d), unit gains; the trained stream is reported beside it.
    let range = |v: &[f64]| {
        v.get(1..)
            .unwrap_or(&[])
            .iter()
            .fold((f64::INFINITY, 0f64), |(a, b), &x| (a.min(x), b.max(x)))
    };
    let (post_min, post_max) = range(post);
    let (init_post_min, init_post_max) = range(init_post);
    let post_pinned = init_post.len() > 1
        && init_post[1..]
            .iter()
            .all(|v| (v / (d as f64).sqrt() - 1.0).abs() < 0.01);
    let final_back = finals
        .iter()
        .all(|v| (v / (128f64).sqrt() - 1.0).abs() < 0.01);
    let c3 = monotone && (1.0..3.0).contains(&growth) && final_back && post_pinned && amplified;
    let post_text = format!(
        "{} at init ({}-{} over the blocks) and lies at {}-{} after training (its trained gains move it)",
        if post_pinned {
            "sits at sqrt(d)"
        } else {
            "is not pinned at sqrt(d)"
        },
        f(init_post_min, 2),
        f(init_post_max, 2),
        f(post_min, 2),
        f(post_max, 2)
    );
    out.checks.push(ClaimCheck::new(
        "C3",
        if c3 { Verdict::Holds } else if monotone && final_back { Verdict::Partly } else { Verdict::DoesNotHold },
        format!(
            "lesson's setting at init (its one-sublayer Pre-LN block, median of {LESSON_SEEDS} seeds): {} -> {} -> ... -> {} after 12 blocks (x{:.2}, range x{:.2}-x{:.2}; {:.1}% per layer; monotone in {monotone_seeds} of {LESSON_SEEDS} seeds; lesson 11.25 -> 11.42 -> 13.66, x1.21, 1.6%); the final LayerNorm gives {} (sqrt(128) = 11.31). Trained GPT (d {d}, {layers} blocks): block {layers} / block 1 = {} after training vs {} at its init (GPT-2 init); per block {:.1}% after training against {:.1}% at its init and the lesson block's {:.1}% (growth {} in training; lesson: it amplifies); the Post-LN stream {}.",
            f(lesson[0], 2),
            f(lesson[1], 2),
            f(lesson[lesson.len() - 1], 2),
            growth,
            growth_lo,
            growth_hi,
            100.0 * per_layer,
            f(*lesson_final, 2),
            f(trained_growth, 2),
            f(init_growth, 2),
            100.0 * (trained_rate - 1.0),
            100.0 * (init_rate - 1.0),
            100.0 * per_layer,
            if amplified { "amplified" } else { "did not amplify" },
            post_text
        ),
    ));
    (growths, monotone_seeds)
}

/// C20: removing the final norm from the trained Pre-LN GPT.
fn check_c20(
    out: &mut ExpResult,
    s: &Settings,
    (loss_with, loss_removed, trained_without): (f64, f64, Option<f64>),
    pre_nofinal: &[f64],
) {
    let (d, layers) = (s.d, s.layers);
    let removal_hurts = loss_removed > loss_with + 0.1;
    out.checks.push(ClaimCheck::new(
        "C20",
        if removal_hurts { Verdict::Holds } else { Verdict::DoesNotHold },
        format!(
            "removing the final norm from the trained Pre-LN GPT takes its held-out loss from {} to {}{}; a Pre-LN GPT trained without one from the start ends at {} (its stream after the last block: {} vs sqrt(d) = {:.2}).",
            f(loss_with, 3),
            f(loss_removed, 3),
            if removal_hurts { " (the head reads an un-normalised, grown stream)" } else { "" },
            opt(trained_without, 3),
            f(pre_nofinal[layers], 2),
            (d as f64).sqrt()
        ),
    ));
}
