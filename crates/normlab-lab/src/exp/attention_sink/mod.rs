//! attention-sink (claim C26): does a sigmoid gate on the attention output
//! remove the attention sink? First a setting where sinks form: GPTs
//! trained on Bigram-Backcopy (docs/bigram-backcopy.md; 1 layer with 1
//! head and 2 layers with 2 heads, 3 seeds), whose ungated softmax model
//! parks attention on the BOS; the formation is shown over training. Then
//! every sink remover against it at equal steps: the headwise and
//! elementwise output gates (Qiu et al. 2025, G1), a learned sink logit per
//! head (gpt-oss), sigmoid attention (Gu et al. 2024) and ReLU attention
//! over the number of keys (Guo et al. 2024), with the held-out loss on copy
//! and bigram targets, the sink measures (model/sinks.rs), the massive
//! activation at position 0 and the value drain. Then the byte-level GPT
//! with a fixed first byte, with and without the gate (one seed, wall time
//! stated; the verdict does not rest on it), and the pretrained models'
//! measures (SmolLM2 and Gemma 3, when their files are present). Last (full
//! setting only), the recipe sensitivity (recipes.rs): the ungated model
//! and the elementwise gate over 5 seeds under one change of recipe at a
//! time. The verdict follows C26's decision rule in claims.rs, fixed before
//! the runs.

use super::args::{ExpArgs, ExpFlag};
use super::claims::ClaimCheck;
use super::framework::{result, ExpResult, Experiment, Progress};
use super::runs::{self, full_gpt, grid_settings, tiny_gpt};
use crate::present::{f, opt, Figure, LineChart, Series, Table};
use crate::sweep::{RunResult, RunSpec};
use normlab::error::Result;
use normlab::model::sinks::SINK_EPS;
use normlab::nn::{uniform_sink_share, OutputGate};
use normlab::train::config::BACKCOPY;
use normlab::train::TrainConfig;
use serde_json::json;

mod cells;
mod designs;
mod real;
mod recipes;
mod rule;
mod verdict;
use cells::{cell, last_sinks, top_share, Cell, TextCell};
use designs::{Design, Setting, DESIGNS, SETTINGS};
use real::{real_models, real_texts};
use verdict::c26;

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "attention-sink",
    question: "Does a sigmoid gate on the attention output remove the attention sink?",
    flags: &[ExpFlag::Grid, ExpFlag::Layers],
    run,
    grid: Some(grid),
    hidden_training: None,
    quick_decides: false,
};

/// The fixed first byte of the byte-level GPT (NUL: it never occurs in
/// the bundled text, so it is a token of its own, as a BOS is).
pub const BOS_BYTE: u32 = 0;

/// Bigram-Backcopy's training (Guo et al.'s AdamW with weight decay 1e-4,
/// no warm-up, schedule or clipping; a CPU-sized model and batch).
fn backcopy_base(a: &ExpArgs) -> Result<TrainConfig> {
    let mut c = full_gpt().with(|c| {
        c.data = Some(BACKCOPY.into());
        c.model.d_model = 64;
        c.model.hidden = 256;
        c.model.seq = 64;
        c.batch = 32;
        c.lr = 1e-3;
        c.weight_decay = 1e-4;
        c.warmup = 0;
        c.schedule = normlab::train::optim::ScheduleKind::Constant;
        c.clip = 0.0;
        c.steps = if a.quick { 1000 } else { 3000 };
    })?;
    c.steps = a.steps.unwrap_or(c.steps);
    c.shards = 1;
    c.log_every = (c.steps / 30).max(1);
    c.eval_every = (c.steps / 6).max(1);
    Ok(c)
}

/// The settings this run covers.
fn settings(a: &ExpArgs) -> Vec<Setting> {
    let n = if a.quick { 1 } else { SETTINGS.len() };
    SETTINGS[..n]
        .iter()
        .map(|s| Setting {
            layers: a.first_layers().unwrap_or(s.layers),
            ..*s
        })
        .collect()
}

/// Seeds per design: every seed for the ungated model and the lesson's
/// gate; quick runs the other removers on the first seed only.
fn design_seeds(a: &ExpArgs, i: usize) -> Vec<u64> {
    let seeds = a.seeds_or(3, 3);
    if a.quick && i >= 2 {
        seeds[..1].to_vec()
    } else {
        seeds
    }
}

fn backcopy_config(b: &TrainConfig, s: &Setting, d: &Design, seed: u64) -> Result<TrainConfig> {
    b.with(|c| {
        c.model.layers = s.layers;
        c.model.heads = s.heads;
        c.model.attn_gate = d.gate;
        c.model.attn_kind = d.kind;
        c.seed = seed;
    })
}

/// The byte-level GPT with a fixed first byte: full (or tiny with --quick)
/// with and without the elementwise gate, one seed.
fn text_configs(a: &ExpArgs) -> Result<Vec<TrainConfig>> {
    let mut b = if a.quick {
        tiny_gpt().with(|c| c.steps = 80)?
    } else {
        full_gpt()
    };
    if let Some(l) = a.first_layers() {
        b.model.layers = l;
    }
    b.bos_byte = Some(BOS_BYTE);
    b.shards = 1;
    b.seed = a.seeds_or(1, 1)[0];
    b.log_every = (b.steps / 20).max(1);
    b.eval_every = (b.steps / 10).max(1);
    [None, Some(OutputGate::Elementwise)]
        .into_iter()
        .map(|g| b.with(|c| c.model.attn_gate = g))
        .collect()
}

/// The first setting's run (1 layer, 1 head) with `gate` and `seed`, as
/// this chapter trains it (the cross-check chapter's C26 comparison).
pub(crate) fn sink_config(a: &ExpArgs, gate: Option<OutputGate>, seed: u64) -> Result<TrainConfig> {
    let d = Design { gate, ..DESIGNS[0] };
    backcopy_config(&backcopy_base(a)?, &settings(a)[0], &d, seed)
}

/// A run's largest first-token share over (layer, head) at its last
/// logged step (NaN without sink measures).
pub(super) fn final_share(r: &RunResult) -> f64 {
    last_sinks(r).map_or(f64::NAN, top_share)
}

/// The Bigram-Backcopy runs of the chapter's table: setting x design x seed.
fn design_configs(a: &ExpArgs, b: &TrainConfig, s: &Setting, d: usize) -> Result<Vec<TrainConfig>> {
    design_seeds(a, d)
        .into_iter()
        .map(|seed| backcopy_config(b, s, &DESIGNS[d], seed))
        .collect()
}

/// The recipe sensitivity's seeds (full setting only; none with --quick).
fn recipe_seeds(a: &ExpArgs) -> Vec<u64> {
    if a.quick {
        Vec::new()
    } else {
        a.seed_list(recipes::RECIPE_SEEDS)
    }
}

/// Setting x design x seed, the byte-level GPT, then the recipe
/// sensitivity (its runs under the chapter's recipe are the table's).
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let b = backcopy_base(a)?;
    let mut cfgs = Vec::new();
    for s in &settings(a) {
        for d in 0..DESIGNS.len() {
            cfgs.extend(design_configs(a, &b, s, d)?);
        }
    }
    cfgs.extend(text_configs(a)?);
    let of = |s: &Setting, d: &Design, seed: u64| backcopy_config(&b, s, d, seed);
    cfgs.extend(recipes::configs(&settings(a), &recipe_seeds(a), &of)?);
    Ok(runs::specs(cfgs))
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let b = backcopy_base(a)?;
    let rs = runs::run_grid(a, grid(a)?, false, progress)?;
    let uniform = uniform_sink_share(b.model.seq);
    let mut cells = Vec::new();
    let mut panels = Vec::new();
    for s in &settings(a) {
        let mut series = vec![Series::new(
            "uniform attention",
            vec![(1.0, uniform), (b.steps as f64, uniform)],
        )];
        for (i, d) in DESIGNS.iter().enumerate() {
            let want = design_configs(a, &b, s, i)?;
            let g: Vec<&RunResult> = rs.iter().filter(|r| want.contains(&r.cfg)).collect();
            if g.is_empty() {
                continue;
            }
            series.push(runs::group_series(d.name, &g, &|r| {
                r.metrics
                    .iter()
                    .filter_map(|m| Some((m.step as f64, top_share(m.sinks.as_ref()?))))
                    .collect()
            }));
            cells.push(cell(s, d, &g));
        }
        panels.push(
            LineChart::new(
                format!("Bigram-Backcopy, {}: largest first-token share", s.name),
                "step",
                "share",
                series,
            )
            .panel(),
        );
    }
    let texts = cells::text_cells(&rs);
    let reals = real_models(a.quick)?;
    let mut tables = tables(a, &b, uniform, &cells, &texts, &reals);
    let of = |s: &Setting, d: &Design, seed: u64| backcopy_config(&b, s, d, seed);
    let seeds = recipe_seeds(a);
    let sensitivity = recipes::cells(&rs, &settings(a), &seeds, uniform, &of)?;
    if !sensitivity.is_empty() {
        tables.push(recipes::table(&sensitivity, seeds.len(), uniform));
    }
    let mut out = result(
        grid_settings(
            a,
            json!({
                "model": "gpt",
                "data": BACKCOPY,
                "base": b.overrides(),
                "steps": b.steps,
                "settings": settings(a).iter().map(|s| json!({"name": s.name, "layers": s.layers, "heads": s.heads})).collect::<Vec<_>>(),
                "designs": DESIGNS.iter().map(|d| d.name).collect::<Vec<_>>(),
                "text_bos_byte": BOS_BYTE,
            }),
        ),
        a.seeds_or(3, 3),
    );
    out.figures.push(Figure::new("attention_sink", panels, 1));
    let (verdict, mut detail) = c26(&cells, uniform, &sensitivity, seeds.len());
    let text = texts
        .iter()
        .map(|t| {
            // No wall time here: the evidence must not depend on the
            // machine (the chapter's table states it).
            format!("{} {} after {} steps", t.design, f(t.share, 3), t.steps)
        })
        .collect::<Vec<_>>()
        .join(", ");
    if !text.is_empty() {
        detail.push_str(&format!(
            " Byte-level GPT with a fixed first byte (largest first-token share; uniform {}): {text}.",
            f(texts[0].uniform, 3)
        ));
    }
    let real = reals
        .iter()
        .map(|r| {
            format!(
                "{}: {} on position 0 (uniform {})",
                r.model,
                f(r.sink, 3),
                f(r.uniform, 3)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    if !real.is_empty() {
        detail.push_str(&format!(" Pretrained models: {real}."));
    }
    out.checks
        .push(ClaimCheck::new("C26", verdict, detail.clone()));
    out.conclusion = detail;
    out.data.insert("uniform".into(), json!(uniform));
    out.data.insert("sink_eps".into(), json!(SINK_EPS));
    out.data.insert("configs".into(), json!(cells));
    out.data.insert(
        "recipe_sensitivity".into(),
        if a.quick {
            json!("skipped with --quick (the full book runs it)")
        } else {
            json!(sensitivity)
        },
    );
    out.data.insert("text_gpt".into(), json!(texts));
    out.data.insert("real_models".into(), json!(reals));
    out.data.insert("runs".into(), runs::records(&rs));
    out.tables.extend(tables);
    Ok(out)
}

/// The chapter's tables: the Bigram-Backcopy designs, the byte-level GPT,
/// the pretrained models (when measured).
fn tables(
    a: &ExpArgs,
    b: &TrainConfig,
    uniform: f64,
    cells: &[Cell],
    texts: &[TextCell],
    reals: &[real::RealSink],
) -> Vec<Table> {
    let mut table = Table::new(
        format!(
            "Bigram-Backcopy GPTs (d {}, seq {}, {} steps, batch {}, AdamW lr {}): largest first-token share over (layer, head) at the end (± std over seeds; uniform attention gives {})",
            b.model.d_model, b.model.seq, b.steps, b.batch, b.lr, f(uniform, 3)
        ),
        &["setting", "design", "seeds", "status", "share", "at step 1", "sink rate", "massive act. at pos. 0", "value drain", "held-out loss", "copy targets", "bigram targets"],
    );
    for c in cells {
        table.row(vec![
            c.setting.to_string(),
            c.design.to_string(),
            c.seeds.to_string(),
            c.status.to_string(),
            format!("{} ± {}", opt(c.share, 3), opt(c.share_std, 3)),
            f(c.share_start, 3),
            f(c.sink_rate, 2),
            f(c.massive0, 1),
            f(c.value_drain, 2),
            format!("{} ± {}", opt(c.eval_loss, 4), opt(c.eval_std, 4)),
            opt(c.eval_copy, 4),
            opt(c.eval_bigram, 4),
        ]);
    }
    let mut text_table = Table::new(
        "byte-level GPT on the bundled text, every sequence starting with byte 0 (one seed; the verdict does not rest on it)",
        &["design", "blocks", "d", "steps", "status", "largest first-token share", "uniform", "massive act. at pos. 0", "held-out loss", "wall time (s)"],
    );
    for t in texts {
        text_table.row(vec![
            t.design.to_string(),
            t.layers.to_string(),
            t.d_model.to_string(),
            t.steps.to_string(),
            t.status.to_string(),
            f(t.share, 3),
            f(t.uniform, 3),
            f(t.massive0, 1),
            opt(t.eval_loss, 4),
            f(t.wall_seconds, 0),
        ]);
    }
    let mut real_table = Table::new(
        format!("pretrained models ({} lines of the bundled text): position 0's share of attention over heads and the queries past it", real_texts(a.quick)),
        &["model", "position 0 holds", "sink share (mean over blocks)", "largest block's", "uniform", "max / median |x|", "ffn max"],
    );
    for r in reals {
        real_table.row(vec![
            r.model.to_string(),
            r.position0
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            f(r.sink, 3),
            f(r.sink_max_block, 3),
            f(r.uniform, 3),
            f(r.max_over_median, 0),
            f(r.ffn_max, 1),
        ]);
    }
    let mut out = vec![table, text_table];
    if !reals.is_empty() {
        out.push(real_table);
    }
    out
}
