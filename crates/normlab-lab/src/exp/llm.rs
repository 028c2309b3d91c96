//! llm (claims C3, C6, C8, C17, C18, C19, C20, C21 on real models): what
//! do the lesson's claims look like in trained LLMs? Two models side by
//! side ([`super::llm_models`]): SmolLM2-135M-Instruct (Pre-RMSNorm, plain
//! gains) and Gemma 3 270M (sandwich RMSNorm with zero-centred 1 + w gains,
//! QK-Norm), on 16 lines of the bundled Shakespeare and 512 held-out
//! tokens: how the residual stream grows with depth by the lesson's metric
//! (C3), whether the rows entering the norms are centred (C6), how their
//! mean squares compare with eps and the largest activation with f16's
//! 65,504 (C8), where the trained gains sit (C17), the largest attention
//! logit with and without QK-Norm on the same inputs (C18), how much each
//! sublayer writes under pre and sandwich norms (C19), what removing the
//! final norm does (C20), and what replacing every RMSNorm by a LayerNorm
//! keeping its gain does (C21, reversed). C17 and C19 are descriptive: two
//! models trained differently confound any causal reading. For C3 the same
//! growth is measured on a GPT that normlab trains with SmolLM2's design
//! (Pre-RMSNorm with a final norm) at the residual-growth experiment's
//! setting. Without the model files the verdicts are inconclusive and say
//! how to get them.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{result, ExpResult, Experiment, Progress};
use super::llm_models::{combine, find, Measured, MODELS};
use super::runs::{self, block_row_norms, final_params, gpt_base};
use crate::present::{f, Figure, LineChart, Series, Table};
use crate::sweep::{RunResult, RunSpec};
use normlab::error::Result;
use normlab::io::sample_sentences;
use normlab::kernels::norm::NormKind;
use normlab::model::decoder::{self, Decoder, DecoderLayerRow};
use normlab::nn::Placement;
use serde_json::json;
use std::path::PathBuf;

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "llm",
    question: "Do the lesson's claims hold in trained LLMs (SmolLM2-135M: Pre-RMSNorm; Gemma 3 270M: sandwich, 1 + w gains, QK-Norm)?",
    flags: &[ExpFlag::Steps, ExpFlag::Seed, ExpFlag::Jobs],
    run,
    grid: Some(grid),
    hidden_training: None,
    quick_decides: true,
};

/// SmolLM2's file, for the cross-check chapter.
pub(super) fn find_model() -> Option<PathBuf> {
    find(MODELS[0].file)
}

const CLAIMS: [&str; 8] = ["C3", "C6", "C8", "C17", "C18", "C19", "C20", "C21"];

/// normlab's own GPT with the model's design, Pre-RMSNorm with a final
/// norm, at the residual-growth experiment's setting (d 128, 12 blocks,
/// 1000 steps at lr 1e-3; quick: d 64, 4 blocks, 100 steps).
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let d = if a.quick { 64 } else { 128 };
    let c = gpt_base(a).with(|c| {
        c.model.d_model = d;
        c.model.heads = 4.min(d / 16).max(1);
        c.model.hidden = 4 * d;
        c.model.layers = if a.quick { 4 } else { 12 };
        c.model.norm = NormKind::RmsNorm;
        c.model.placement = Placement::Pre;
        c.model.final_norm = Some(true);
        c.steps = a.steps_or(100, 1000);
        c.seed = a.seed_list(1)[0];
        c.lr = 1e-3;
        c.shards = 1;
    })?;
    Ok(runs::specs(vec![c]))
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let texts = sample_sentences(if a.quick { 4 } else { 16 }, 0, 53);
    let tokens = if a.quick { 128 } else { 512 };
    let files: Vec<&str> = MODELS.iter().map(|m| m.file).collect();
    let mut out = result(
        json!({"models": files, "texts": texts.len(), "held_out_tokens": tokens, "gpt_steps": a.steps_or(100, 1000), "seed": a.seed_list(1)[0]}),
        // The seed of normlab's own GPT (the models are deterministic).
        a.seed_list(1),
    );
    let (measured, absent) = measure_models(&texts, tokens)?;
    if measured.is_empty() {
        nothing_measured(&mut out, &absent);
        return Ok(out);
    }
    let missing = if absent.is_empty() {
        String::new()
    } else {
        format!(" Not measured: {}.", absent.join("; "))
    };
    stream_report(&mut out, &measured);
    let (r, growth) = own_gpt(a, progress, &mut out)?;
    checks(&mut out, &measured, &missing);
    out.tables.push(growth_table(&measured, &r, growth));
    model_tables(&mut out, &measured);
    Ok(out)
}

/// Each model whose file is here, loaded and inspected on the texts and
/// the held-out tokens; the others named with how to get them.
fn measure_models(texts: &[String], tokens: usize) -> Result<(Vec<Measured>, Vec<String>)> {
    let mut measured = Vec::new();
    let mut absent = Vec::new();
    for rm in &MODELS {
        match find(rm.file) {
            Some(path) => {
                let mut m = Decoder::load(&path)?;
                let insp = decoder::inspect(&mut m, texts, decoder::held_out_text(), tokens)?;
                measured.push(Measured {
                    name: rm.name,
                    cfg: m.cfg.clone(),
                    insp,
                });
            }
            None => absent.push(format!(
                "{} ({} absent: run {})",
                rm.name, rm.file, rm.fetch
            )),
        }
    }
    Ok((measured, absent))
}

/// No model file is here: the result says so, every claim inconclusive.
fn nothing_measured(out: &mut ExpResult, absent: &[String]) {
    let why = format!("no model file is here: {}", absent.join("; "));
    out.conclusion = format!("{why}: nothing measured.");
    out.unavailable = Some(super::framework::Unavailable {
        needs: "model",
        why: why.clone(),
    });
    let fetch: Vec<&str> = MODELS.iter().map(|m| m.fetch).collect();
    for c in CLAIMS {
        out.checks.push(ClaimCheck::new(
            c,
            Verdict::Inconclusive,
            format!("needs the model files ({})", fetch.join(", ")),
        ));
    }
}

/// Per model, the stream's size block by block (a table each and the
/// figure) and the inspection's data.
fn stream_report(out: &mut ExpResult, measured: &[Measured]) {
    let mut panels = Vec::new();
    for me in measured {
        let mut table = Table::new(
            format!("{}: per block, the residual stream entering it and after it by the lesson's metric (the mean over tokens of each token's L2 norm) and by the RMS over all elements of all tokens, the largest |activation|, and the smallest row mean square entering its norms over eps", me.name),
            &["block", "token norm in", "token norm out", "median token norm out", "RMS in", "RMS out", "max |x|", "|row mean| of x/rms(x)", "min mean square / eps"],
        );
        for r in &me.insp.blocks {
            table.row(vec![
                r.layer.to_string(),
                f(r.row_norm_in, 2),
                f(r.row_norm_out, 2),
                f(r.row_norm_median_out, 2),
                f(r.rms_in, 3),
                f(r.rms_out, 3),
                f(r.max_abs, 1),
                f(r.xhat_mean, 4),
                format!("{:.3e}", r.ms_min / f64::from(me.cfg.eps)),
            ]);
        }
        out.tables.push(table);
        let series = |name: &str, g: &dyn Fn(&DecoderLayerRow) -> f64| {
            Series::new(
                name,
                me.insp
                    .blocks
                    .iter()
                    .map(|r| (r.layer as f64, g(r)))
                    .collect(),
            )
        };
        let mut chart = LineChart::new(
            format!("{}: the residual stream after each block", me.name),
            "block",
            "size",
            vec![
                series("mean token norm (the lesson's metric)", &|r| r.row_norm_out),
                series("median token norm", &|r| r.row_norm_median_out),
                series("RMS over all elements", &|r| r.rms_out),
            ],
        );
        chart.log_y = true;
        panels.push(crate::present::Panel::Line(chart));
    }
    let cols = panels.len();
    out.figures
        .push(Figure::new("llm_residual_rms", panels, cols));
    out.data.insert(
        "models".into(),
        json!(measured.iter().map(|me| json!({"name": me.name, "config": me.cfg, "blocks": me.insp.blocks, "final_norm": me.insp.final_norm, "claims": me.insp.claims, "gains": me.insp.gains, "logit_lens": me.insp.lens, "sublayer_check": me.insp.sublayer_check})).collect::<Vec<_>>()),
    );
}

/// The stream's growth in normlab's own GPT: total, per block, blocks
/// growing it, and its depth.
type Growth = (f64, f64, usize, usize);

/// normlab's own trained GPT of SmolLM2's design, for comparison: its run
/// and stream growth (also in the data).
fn own_gpt(a: &ExpArgs, progress: Progress, out: &mut ExpResult) -> Result<(RunResult, Growth)> {
    let specs = grid(a)?;
    let r = runs::run_grid(a, specs, true, progress)?.remove(0);
    let gpt = block_row_norms(&r.cfg, &final_params(a, &r)?)?;
    // From the first block's output on, as for the models (their block 0).
    let (g_total, g_per, g_growing) = decoder::stream_growth(&gpt[1..]);
    let g_layers = r.cfg.model.layers;
    out.data.insert(
        "own_gpt".into(),
        json!({"run": runs::record(&r), "mean_row_norm": gpt, "growth_total": g_total, "growth_per_block": g_per, "blocks_growing": g_growing}),
    );
    Ok((r, (g_total, g_per, g_growing, g_layers)))
}

/// C3 side by side: the stream's growth in each model and in normlab's GPT.
fn growth_table(
    measured: &[Measured],
    r: &RunResult,
    (g_total, g_per, g_growing, g_layers): Growth,
) -> Table {
    // C3 side by side.
    let mut t2 = Table::new(
        "C3 side by side: growth of the stream from block 1 to the last block, by the mean token norm (the lesson's metric) and by the RMS over all elements",
        &["model", "blocks", "x total", "x per block", "blocks growing it"],
    );
    for me in measured {
        let (cl, span) = (&me.insp.claims, me.span());
        for (label, total, per, growing) in [
            (
                format!("{} (trained by its makers)", me.name),
                cl.growth_total,
                cl.growth_per_block,
                cl.blocks_growing,
            ),
            (
                format!("{}, RMS over all elements", me.name),
                cl.rms_growth_total,
                cl.rms_growth_per_block,
                cl.rms_blocks_growing,
            ),
        ] {
            t2.row(vec![
                label,
                me.cfg.layers.to_string(),
                f(total, 2),
                f(per, 3),
                format!("{growing} of {span}"),
            ]);
        }
    }
    t2.row(vec![
        format!(
            "normlab GPT, Pre-RMSNorm, d {} ({} steps)",
            r.cfg.model.d_model, r.cfg.steps
        ),
        g_layers.to_string(),
        f(g_total, 2),
        f(g_per, 3),
        format!("{g_growing} of {}", g_layers - 1),
    ]);
    t2
}

/// The massive activation, the trained gains (C17), and attention logits
/// and sublayer writes (C18, C19), a table each.
fn model_tables(out: &mut ExpResult, measured: &[Measured]) {
    let mut massive = Table::new(
        "The massive activation: the largest |value| in the residual stream over the texts",
        &[
            "model",
            "|value|",
            "after block",
            "present from block",
            "token (text, position)",
            "channel",
            "of f16's max 65504",
            "over the mean token norm there",
        ],
    );
    for me in measured {
        let ma = &me.insp.claims.massive;
        massive.row(vec![
            me.name.into(),
            f(ma.value, 0),
            ma.block.to_string(),
            ma.from_block.to_string(),
            format!(
                "{:?} (text {}, position {})",
                ma.token, ma.text, ma.position
            ),
            ma.channel.to_string(),
            format!("{:.2}", ma.of_f16_max),
            f(ma.over_mean_token_norm, 1),
        ]);
    }
    out.tables.push(massive);
    let mut gains = Table::new(
        "C17: every kind of norm's trained gains (the factor the model multiplies by; for zero-centred gains also w, which weight decay pulls toward 0)",
        &["model", "norm", "gain mean", "gain min", "gain max", "w mean", "w std"],
    );
    for me in measured {
        for g in &me.insp.gains {
            let w = |i: usize| g.w.map_or("-".to_string(), |w| f(w[i], 3));
            gains.row(vec![
                me.name.into(),
                g.role.into(),
                f(g.gain[0], 3),
                f(g.gain[2], 3),
                f(g.gain[3], 3),
                w(0),
                w(1),
            ]);
        }
    }
    out.tables.push(gains);
    let mut attn = Table::new(
        "C18 and C19, per model: placement, QK-Norm, the largest attention logit (with and without QK-Norm on the same queries and keys), and the median over blocks of each sublayer's write over the stream it read",
        &["model", "placement", "QK-Norm", "max logit", "max logit without QK-Norm", "blocks where QK-Norm lowers it", "median attention write / stream", "median MLP write / stream"],
    );
    for me in measured {
        let (with, without, _) = me.insp.qk_norm_effect();
        let (wa, wm) = me.median_writes();
        attn.row(vec![
            me.name.into(),
            me.cfg.placement.name().into(),
            if me.cfg.qk_norm { "yes" } else { "no" }.into(),
            f(with, 2),
            if me.cfg.qk_norm {
                f(without, 2)
            } else {
                "-".into()
            },
            me.c18()
                .map_or("-".into(), |(_, n)| format!("{n} of {}", me.cfg.layers)),
            f(wa, 3),
            f(wm, 3),
        ]);
    }
    out.tables.push(attn);
}

/// The claims' verdicts from the measured models.
fn checks(out: &mut ExpResult, measured: &[Measured], missing: &str) {
    let each = |g: &dyn Fn(&Measured) -> String| -> String {
        measured
            .iter()
            .map(|me| format!("{}: {}", me.name, g(me)))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let verdicts = |g: &dyn Fn(&Measured) -> Verdict| -> Verdict {
        combine(&measured.iter().map(g).collect::<Vec<_>>())
    };
    out.checks.push(ClaimCheck::new("C3", verdicts(&|me| me.c3().0), format!(
        "by the lesson's metric (the mean over tokens of each token's norm), from block 1 to the output (lesson: steady growth, 1.6% per layer at init, amplified by training). {}. The RMS over all elements, which one token's massive activation dominates, beside it: {}.{missing}",
        each(&|me| {
            let cl = &me.insp.claims;
            format!("x{} (x{} per block), {}: {} of {} blocks grow it, the largest one-block step x{} (block {})",
                f(cl.growth_total, 2), f(cl.growth_per_block, 3), if me.c3().1 { "steadily" } else { "not steadily" },
                cl.blocks_growing, me.span(), f(cl.largest_jump.0, 2), cl.largest_jump.1)
        }),
        each(&|me| {
            let cl = &me.insp.claims;
            format!("x{} ({} of {} blocks; one step of x{} at block {})", f(cl.rms_growth_total, 1), cl.rms_blocks_growing, me.span(), f(cl.rms_largest_jump.0, 1), cl.rms_largest_jump.1)
        })
    )));
    out.checks.push(ClaimCheck::new("C6", verdicts(&|me| me.c6()), format!(
        "|row mean| of x / rms(x) at the attention norms, largest block average, against 0.447 for the lesson's N(1.5, 3^2) rows: {}; rows this close to centred (0.1 or less) do not set up the claim's condition (off-centre rows), so they leave it untested: RMSNorm's output is then nearly zero-mean, though not by construction.{missing}",
        each(&|me| f(me.insp.claims.xhat_mean_max_abs, 3))
    )));
    out.checks.push(ClaimCheck::new("C8", verdicts(&|me| me.c8()), format!(
        "the smallest mean square of any row entering any norm over eps (eps from the file), the held-out loss with eps taken out of every norm, and the largest |activation| in the stream against f16's largest finite value 65,504: {}. The claim predicts that with every row 100x or more above eps, taking eps out moves the loss by less than 1e-3 nats (and a stream stored in f16 overflows where an activation passes 65,504).{missing}",
        each(&|me| {
            let (cl, eps) = (&me.insp.claims, me.cfg.eps);
            let ms = cl.ms_min_over_eps;
            format!("{} x eps {eps:e} (eps moves no row by more than {:.1e}); without eps the loss moves {:+.1e} nats; largest |x| {} = {:.0}% of f16's max{}",
                f(ms, 3), 1.0 - (ms / (ms + 1.0)).sqrt(), me.eps_effect(), f(cl.massive.value, 0), 100.0 * cl.massive.of_f16_max,
                if cl.massive.of_f16_max > 1.0 { ", so f16 storage of the stream would overflow" } else { "" })
        })
    )));
    out.checks.push(ClaimCheck::new("C17", Verdict::Inconclusive, format!(
        "descriptive: a trained checkpoint does not say what weight decay did to its gains (whether the gains were decayed, and how strongly, is not in the file), and the two models differ in data, size and recipe. Where the trained gains sit, pooled over every norm: {}.{missing}",
        each(&|me| {
            let rows = me.insp.gains.iter().map(|g| match g.w {
                Some(w) => format!("{} w mean {} (std {})", g.role, f(w[0], 2), f(w[1], 2)),
                None => format!("{} gain mean {} (min {}, max {})", g.role, f(g.gain[0], 2), f(g.gain[2], 2), f(g.gain[3], 2)),
            }).collect::<Vec<_>>().join(", ");
            format!("{} gains: {rows}", if me.cfg.gain.zero_centred() { "zero-centred (1 + w)" } else { "plain" })
        })
    )));
    let with_qk: Vec<(&Measured, Verdict, usize)> = measured
        .iter()
        .filter_map(|me| me.c18().map(|(v, n)| (me, v, n)))
        .collect();
    let c18 = combine(&with_qk.iter().map(|x| x.1).collect::<Vec<_>>());
    out.checks.push(ClaimCheck::new("C18", c18, format!(
        "on the same queries and keys, with and without the model's own q/k norms: {}. Across models (descriptive, confounded by training): the largest logit is {}.{missing}",
        if with_qk.is_empty() { "no measured model has QK-Norm".to_string() } else {
            with_qk.iter().map(|(me, _, n)| format!("{}: the largest logit {} with QK-Norm, {} without, lower with it in {n} of {} blocks", me.name, f(me.insp.qk_norm_effect().0, 2), f(me.insp.qk_norm_effect().1, 1), me.cfg.layers)).collect::<Vec<_>>().join("; ")
        },
        each(&|me| format!("{} ({})", f(me.insp.qk_norm_effect().0, 2), if me.cfg.qk_norm { "QK-Norm" } else { "no QK-Norm" }))
    )));
    out.checks.push(ClaimCheck::new("C19", Verdict::Inconclusive, format!(
        "descriptive: the two models differ in more than their placement, so nothing here shows that Sandwich stabilises anything. What each sublayer writes relative to the stream it read (median over blocks, attention and MLP) and how the stream grows: {}.{missing}",
        each(&|me| {
            let (wa, wm) = me.median_writes();
            format!("{} ({}): writes {} and {}, the stream x{} over the blocks", me.cfg.placement.name(), if me.cfg.placement == normlab::nn::Placement::Sandwich { "each write normalised before it is added" } else { "raw writes" }, f(wa, 3), f(wm, 3), f(me.insp.claims.growth_total, 1))
        })
    )));
    out.checks.push(ClaimCheck::new(
        "C20",
        verdicts(&|me| me.c20()),
        format!(
            "held-out loss with the final RMSNorm and without it: {}.{missing}",
            each(&|me| {
                let fin = &me.insp.final_norm;
                format!(
                    "{} -> {} nats/token ({} tokens; the logits change by {}% RMS)",
                    f(fin.loss_with, 3),
                    f(fin.loss_without, 1),
                    fin.tokens,
                    f(100.0 * fin.logit_change, 0)
                )
            })
        ),
    ));
    out.checks.push(ClaimCheck::new("C21", verdicts(&|me| me.c21()), format!(
        "in reverse, on real models: every RMSNorm replaced by a LayerNorm keeping its gain, no fine-tuning: {}. Any nonzero change makes the swap approximate; its size is the model's, not centring's alone (C6 gives each model's centring).{missing}",
        each(&|me| format!("held-out loss {} against {} ({:+.3} nats)", f(me.insp.claims.loss_layernorm, 3), f(me.insp.final_norm.loss_with, 3), me.insp.claims.loss_layernorm - me.insp.final_norm.loss_with))
    )));
    let each_model: Vec<String> = measured.iter().map(|me| {
        let (cl, fin) = (&me.insp.claims, &me.insp.final_norm);
        let ma = &cl.massive;
        format!(
            "{} ({}): the mean token norm grows x{} over the blocks ({} of {} grow it); the largest activation {} sits on {:?} (position {}, channel {}) from block {} on, {:.0}% of f16's largest value; rows entering the norms are nearly centred (|mean| <= {}) and the smallest row mean square entering a norm is {} x eps (taking eps out moves the loss {:+.1e} nats); without the final norm the loss goes {} -> {}; LayerNorm in place of every RMSNorm costs {:+.2} nats.",
            me.name, me.cfg.placement.name(), f(cl.growth_total, 2), cl.blocks_growing, me.span(), f(ma.value, 0), ma.token, ma.position, ma.channel, ma.from_block, 100.0 * ma.of_f16_max,
            f(cl.xhat_mean_max_abs, 3), f(cl.ms_min_over_eps, 3), me.eps_effect(), f(fin.loss_with, 2), f(fin.loss_without, 0), cl.loss_layernorm - fin.loss_with
        )
    }).collect();
    out.conclusion = format!("{}{missing}", each_model.join(" "));
}
