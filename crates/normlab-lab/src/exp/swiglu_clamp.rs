//! swiglu-clamp (claim C24): how large do SwiGLU's activations get, and
//! what does clamping them cost? The GPT with SwiGLU at lr 3e-3 and 1e-2,
//! its activations stored in f32, bf16 and f16 (`--dtype`), unclamped and
//! clamped at 10 (DeepSeek V4) and 7 (gpt-oss's limit, in DeepSeek V4's
//! form): the largest gate-times-up value over training; how many values
//! of the feed-forward's activation and of the stream f16 could not store
//! (|v| > 65504 or not finite, on logged steps, whatever the storage),
//! beside the steps f16's loss scaler skipped; held-out loss and status.
//! On the pretrained models (SmolLM2: SwiGLU; Gemma 3: GeGLU, clamped
//! alike): the largest gate-times-up value per block, and the held-out loss
//! with every feed-forward clamped at 10 and at 7 without retraining.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{num, result, ExpResult, Experiment, Progress};
use super::llm_models::{find, MODELS};
use super::runs::{self, block_curve, full_gpt, grid_settings, lrs_json, mean_curve, tiny_gpt};
use crate::present::{f, opt, Figure, LineChart, Series, Table};
use crate::sweep::{RunResult, RunSpec, SeedGroup};
use normlab::error::Result;
use normlab::model::decoder::{Decoder, DecoderTrace};
use normlab::nn::Activation;
use normlab::precision::Dtype;
use normlab::train::TrainConfig;
use serde::Serialize;
use serde_json::json;

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "swiglu-clamp",
    question: "How large do SwiGLU activations get, and what does clamping them cost?",
    flags: &[ExpFlag::Lrs, ExpFlag::Grid, ExpFlag::Layers],
    run,
    grid: Some(grid),
    hidden_training: None,
    quick_decides: false,
};

/// The clamps: none, DeepSeek V4's 10, gpt-oss's 7.
const CLAMPS: [Option<f32>; 3] = [None, Some(10.0), Some(7.0)];
const DTYPES: [Dtype; 3] = [Dtype::F32, Dtype::Bf16, Dtype::F16];

/// SiLU(10) x 10: the lesson's example of an unbounded SwiGLU value.
fn silu_times(x: f64) -> f64 {
    x * x / (1.0 + (-x).exp())
}

struct Settings {
    lrs: Vec<f32>,
    seeds: Vec<u64>,
    base: TrainConfig,
}

fn settings(a: &ExpArgs) -> Result<Settings> {
    let mut base = if a.quick {
        tiny_gpt().with(|c| c.steps = 60)?
    } else {
        full_gpt()
    };
    if let Some(l) = a.first_layers() {
        base.model.layers = l;
    }
    base.model.act = Activation::Swiglu;
    base.steps = a.steps.unwrap_or(base.steps);
    base.shards = 1;
    base.log_every = (base.steps / 20).max(1);
    Ok(Settings {
        lrs: a.lrs.clone().unwrap_or(if a.quick {
            vec![1e-2]
        } else {
            vec![3e-3, 1e-2]
        }),
        seeds: a.seeds_or(1, 1),
        base,
    })
}

/// lr x dtype x clamp x seed.
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let s = settings(a)?;
    let mut cfgs = Vec::new();
    for &lr in &s.lrs {
        for dtype in DTYPES {
            for clamp in CLAMPS {
                for &seed in &s.seeds {
                    cfgs.push(s.base.with(|c| {
                        c.lr = lr;
                        c.dtype = dtype;
                        c.model.swiglu_clamp = clamp;
                        c.seed = seed;
                    })?);
                }
            }
        }
    }
    Ok(runs::specs(cfgs))
}

/// One (lr, dtype, clamp) cell.
#[derive(Serialize)]
struct Cell {
    lr: serde_json::Value,
    dtype: String,
    clamp: Option<f32>,
    /// The largest finite gate x up of any block at any logged step (any
    /// seed; NaN when none was logged).
    ffn_peak: f64,
    /// Whether some logged gate x up was not finite.
    ffn_nonfinite: bool,
    /// Values f16 could not store, summed over logged steps, blocks and seeds.
    f16_overflow: u64,
    /// Steps the loss scaler skipped (f16; summed over seeds).
    skipped_steps: Option<u64>,
    final_eval_loss: Option<f64>,
    status: &'static str,
}

fn cell(lr: f32, dtype: Dtype, clamp: Option<f32>, g: &[&RunResult]) -> Cell {
    let sg = SeedGroup::of_runs(g.iter().copied());
    let ms = || g.iter().flat_map(|r| r.metrics.iter());
    let skipped: Vec<u64> = g
        .iter()
        .filter_map(|r| r.metrics.iter().rev().find_map(|m| m.skipped_steps))
        .collect();
    Cell {
        lr: num(lr),
        dtype: dtype.name().to_string(),
        clamp,
        ffn_peak: ms()
            .flat_map(|m| m.ffn_max.iter().copied())
            .filter(|v| v.is_finite())
            .fold(f64::NAN, f64::max),
        ffn_nonfinite: ms().flat_map(|m| m.ffn_max.iter()).any(|v| !v.is_finite()),
        f16_overflow: ms().flat_map(|m| m.f16_overflow.iter()).sum(),
        skipped_steps: (!skipped.is_empty()).then(|| skipped.iter().sum()),
        final_eval_loss: sg.mean,
        status: sg.status.name(),
    }
}

/// A pretrained model's feed-forward values and the clamps' cost.
#[derive(Serialize)]
struct RealClamp {
    model: &'static str,
    /// The largest |act(gate) x up| per block over the texts.
    ffn_max_by_block: Vec<f64>,
    /// Held-out loss (nats/token) unclamped, clamped at 10, at 7.
    loss: Vec<(Option<f32>, f64)>,
}

/// Held-out tokens the pretrained models are scored on.
const HELD_OUT_TOKENS: usize = 512;

fn real_models(quick: bool) -> Result<Vec<RealClamp>> {
    let texts = normlab::io::sample_sentences(if quick { 2 } else { 8 }, 0, 53);
    let mut out = Vec::new();
    for rm in &MODELS {
        let Some(path) = find(rm.file) else { continue };
        let mut m = Decoder::load(&path)?;
        let mut top = vec![0f64; m.cfg.layers];
        for t in &texts {
            let ids = m.encode(t)?;
            if ids.is_empty() {
                continue;
            }
            let mut tr = DecoderTrace::default();
            m.observe(&ids, &mut tr)?;
            for (a, &b) in top.iter_mut().zip(&tr.ffn_max) {
                *a = normlab::train::nan_max([*a, b]);
            }
        }
        let mut ids = m.encode(normlab::model::decoder::held_out_text())?;
        ids.truncate(if quick { 65 } else { HELD_OUT_TOKENS + 1 });
        let mut loss = Vec::new();
        for clamp in CLAMPS {
            m.interventions.ffn_clamp = clamp;
            loss.push((clamp, m.nll(&ids, 256, true)?));
        }
        out.push(RealClamp {
            model: rm.name,
            ffn_max_by_block: top,
            loss,
        });
    }
    Ok(out)
}

fn clamp_name(c: Option<f32>) -> String {
    c.map_or("off".into(), |l| format!("{l}"))
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let s = settings(a)?;
    let rs = runs::run_grid(a, grid(a)?, false, progress)?;
    let mut cells = Vec::new();
    let mut series = Vec::new();
    for &lr in &s.lrs {
        for dtype in DTYPES {
            for clamp in CLAMPS {
                let g: Vec<&RunResult> = rs
                    .iter()
                    .filter(|r| {
                        r.cfg.lr == lr && r.cfg.dtype == dtype && r.cfg.model.swiglu_clamp == clamp
                    })
                    .collect();
                if !g.is_empty() {
                    cells.push(cell(lr, dtype, clamp, &g));
                    series.push(Series::new(
                        format!("lr {lr} {} clamp {}", dtype.name(), clamp_name(clamp)),
                        mean_curve(&g, &|r| {
                            block_curve(
                                r,
                                |m| &m.ffn_max,
                                |v| normlab::train::nan_max(v.iter().copied()),
                            )
                        }),
                    ));
                }
            }
        }
    }
    let b = &s.base;
    let mut table = Table::new(
        format!(
            "GPT with SwiGLU, {} blocks, d {}, {} steps, {} seed(s): the largest gate x up over training, values f16 cannot store (|v| > 65504 or not finite; activations and stream, logged steps), steps f16's loss scaler skipped",
            b.model.layers, b.model.d_model, b.steps, s.seeds.len()
        ),
        &["lr", "storage", "clamp", "status", "largest gate x up", "values beyond f16", "skipped steps", "held-out loss"],
    );
    for c in &cells {
        table.row(vec![
            c.lr.to_string(),
            c.dtype.clone(),
            clamp_name(c.clamp),
            c.status.to_string(),
            f(c.ffn_peak, 2),
            c.f16_overflow.to_string(),
            c.skipped_steps.map_or("-".into(), |v| v.to_string()),
            opt(c.final_eval_loss, 4),
        ]);
    }
    let reals = real_models(a.quick)?;
    let mut real_table = Table::new(
        format!("pretrained models, not retrained: held-out loss ({} tokens of the bundled text) with every feed-forward's gate and up clamped", if a.quick { 64 } else { HELD_OUT_TOKENS }),
        &["model", "largest gate x up (block)", "loss unclamped", "clamp 10", "clamp 7"],
    );
    for r in &reals {
        let (bi, top) = r
            .ffn_max_by_block
            .iter()
            .enumerate()
            .fold((0, 0f64), |m, (i, &v)| if v > m.1 { (i, v) } else { m });
        let mut row = vec![r.model.to_string(), format!("{} ({bi})", f(top, 1))];
        row.extend(r.loss.iter().map(|(_, l)| f(*l, 4)));
        real_table.row(row);
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "gpt", "act": "swiglu", "base": b.overrides(), "lrs": lrs_json(&s.lrs), "steps": b.steps, "dtypes": DTYPES.iter().map(|d| d.name()).collect::<Vec<_>>(), "clamps": CLAMPS}),
        ),
        s.seeds.clone(),
    );
    out.figures.push(Figure::new(
        "swiglu_clamp",
        vec![LineChart::new(
            "largest SwiGLU gate x up (over blocks)",
            "step",
            "|gate x up|",
            series,
        )
        .log_y()
        .panel()],
        1,
    ));
    let (verdict, detail) = c24(&cells, &reals);
    out.checks
        .push(ClaimCheck::new("C24", verdict, detail.clone()));
    out.conclusion = detail;
    out.data
        .insert("silu10_times10".into(), json!(silu_times(10.0)));
    out.data.insert("configs".into(), json!(cells));
    out.data.insert("real_models".into(), json!(reals));
    out.data.insert("runs".into(), runs::records(&rs));
    out.tables.push(table);
    if !reals.is_empty() {
        out.tables.push(real_table);
    }
    Ok(out)
}

/// C24 from the numbers. Its arithmetic (SiLU(10) x 10 = 99.995) is
/// computed; "can overflow in low precision" holds where an unclamped
/// run's values went beyond f16's range (in any storage: f32 and bf16
/// have the range to hold them); the clamps bound gate x up (by
/// SiLU(L) x L) in every run. Holds when the clamp bounds every run and
/// some unclamped model (trained here or pretrained) exceeds 10 x SiLU(10);
/// partly when the clamp bounds them but nothing gets that large (the
/// clamp is then free but unneeded at this setting).
fn c24(cells: &[Cell], reals: &[RealClamp]) -> (Verdict, String) {
    // The bound is checked on every clamped cell that logged a value; a
    // verdict needs at least one.
    let clamped: Vec<(&Cell, f64)> = cells
        .iter()
        .filter_map(|c| {
            c.clamp
                .map(|l| (c, silu_times(f64::from(l)) * (1.0 + 1e-5)))
        })
        .filter(|(c, _)| c.ffn_peak.is_finite())
        .collect();
    let bounded = clamped.iter().all(|(c, bound)| c.ffn_peak <= *bound);
    let peak_trained = cells
        .iter()
        .filter(|c| c.clamp.is_none())
        .map(|c| c.ffn_peak)
        .filter(|v| v.is_finite())
        .fold(0f64, f64::max);
    let beyond_f16: u64 = cells
        .iter()
        .filter(|c| c.clamp.is_none())
        .map(|c| c.f16_overflow)
        .sum();
    let peak_real = reals
        .iter()
        .flat_map(|r| r.ffn_max_by_block.iter().copied())
        .fold(0f64, f64::max);
    let large = peak_trained.max(peak_real) > silu_times(10.0);
    let cost = |l: f32| {
        reals
            .iter()
            .map(|r| {
                let base = r.loss[0].1;
                let at = r
                    .loss
                    .iter()
                    .find(|(c, _)| *c == Some(l))
                    .map_or(f64::NAN, |x| x.1);
                format!("{} {} -> {}", r.model, f(base, 3), f(at, 3))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let v = match (clamped.is_empty(), bounded, large) {
        (true, _, _) => Verdict::Inconclusive,
        (false, true, true) => Verdict::Holds,
        (false, true, false) => Verdict::Partly,
        (false, false, _) => Verdict::DoesNotHold,
    };
    let unclamped_cost = cells
        .iter()
        .filter(|c| c.clamp.is_none())
        .filter_map(|c| {
            let clamped = cells
                .iter()
                .find(|d| d.lr == c.lr && d.dtype == c.dtype && d.clamp == Some(7.0))?;
            Some(format!(
                "lr {} {}: {} -> {}",
                c.lr,
                c.dtype,
                opt(c.final_eval_loss, 3),
                opt(clamped.final_eval_loss, 3)
            ))
        })
        .collect::<Vec<_>>()
        .join("; ");
    (
        v,
        format!(
            "SiLU(10) x 10 = {}. Unclamped, the trained GPT's largest finite gate x up is {} and {} of its activation and stream values went beyond f16's range on logged steps{}; the pretrained models' reach {}. The clamps {} gate x up by SiLU(L) x L in the {} clamped cell(s) that logged one. Held-out loss unclamped -> clamped at 7 (trained with it): {}.{}",
            f(silu_times(10.0), 3),
            f(peak_trained, 2),
            beyond_f16,
            match cells.iter().filter(|c| c.ffn_nonfinite).count() {
                0 => String::new(),
                k => format!(" ({k} cell(s) logged a non-finite gate x up)"),
            },
            if reals.is_empty() { "-".to_string() } else { f(peak_real, 1) },
            if bounded { "bound" } else { "do not bound" },
            clamped.len(),
            unclamped_cost,
            if reals.is_empty() {
                String::new()
            } else {
                format!(" Clamping a pretrained model without retraining: at 10 {}; at 7 {}.", cost(10.0), cost(7.0))
            }
        ),
    )
}
