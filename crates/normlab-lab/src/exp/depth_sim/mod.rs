//! The random-init depth simulator: a stream x_0 (rows of d values,
//! N(0,1)) passes N sublayers
//!
//! ```text
//! x_{l+1} = skip * x_l + branch * W_l In(x_l)
//! ```
//!
//! with W_l ~ N(0, g^2/d), In = RMSNorm (unit gain) when pre-norm is on and
//! the identity otherwise (times 1/sqrt(l), l = 1..N, with LayerNorm
//! Scaling), skip = 1 with residuals (0 without) and branch = 1/sqrt(N)
//! with write-back scaling (1 otherwise), times the branch gate's initial
//! value with ReZero (0) or LayerScale (its init; per channel, all equal
//! at init). The residual options (LayerNorm Scaling, the gates) are those
//! of `model::residual` whose declaration has a `SimKnob`: their flags,
//! settings, labels and effects at init come from there. The loss is
//! `sum(r * x_N)` with r ~ N(0,1), so the gradient at the top is r; it is
//! propagated down exactly. Computed in f64; values that overflow even f64
//! are reported as null.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{result, ExpResult, Experiment, Progress};
use crate::present::{f, Figure, LineChart, Panel, Series, Table};
use normlab::error::Result;
use normlab::kernels::rng::Rng;
use normlab::model::residual::{self, ResidualOption, SimKnob};
use serde_json::json;

mod config;
mod pass;
pub use config::{SimConfig, SimOption, SimResult, DYT_ALPHA};

use pass::simulate_from;

/// Run the simulator. Work is O(N * rows * d^2); memory O(d^2 + rows * d),
/// plus O(N * rows * d) with pre-norm (its backward reads each layer's
/// input): a layer's weights are drawn again for the backward pass from the
/// generator state saved before them, not kept.
pub fn simulate(c: &SimConfig) -> SimResult {
    let mut rng = Rng::derive(c.seed, "depth-sim");
    let x: Vec<f64> = (0..c.rows * c.d).map(|_| rng.normal_portable()).collect();
    let r: Vec<f64> = (0..c.rows * c.d).map(|_| rng.normal_portable()).collect();
    simulate_from(c, x, &r, rng).0
}

/// Check simulator settings (bounded work for the web lab too).
pub fn validate(c: &SimConfig) -> Result<()> {
    if c.sublayers == 0 || c.sublayers > 1000 {
        return Err(format!("sublayers must be in 1..=1000 (got {})", c.sublayers).into());
    }
    if c.gain < 0.0 {
        return Err(format!("gain must not be negative (got {})", c.gain).into());
    }
    if !(c.gain.is_finite() && c.gain <= 100.0) {
        return Err(format!("gain must be a number in [0, 100] (got {})", c.gain).into());
    }
    // Below 1e-6 every product of the pass is subnormal, which costs tens of
    // times the arithmetic and shows nothing a gain of 0 does not.
    if c.gain > 0.0 && c.gain < 1e-6 {
        return Err(format!("gain must be 0 or at least 1e-6 (got {:e})", c.gain).into());
    }
    let mut gates = Vec::new();
    for o in &c.options {
        let Some(k) = residual::option(o.name).and_then(|d| d.sim.as_ref()) else {
            return Err(format!("{} is not a residual option the simulator models", o.name).into());
        };
        (k.check)(o.value)?;
        if k.gate {
            gates.push(format!("--{}", o.name));
        }
    }
    if gates.len() > 1 {
        return Err(format!("{} each gate the branch; give one", gates.join(" and ")).into());
    }
    let streams: Vec<String> = c
        .residual_options()
        .iter()
        .filter(|(o, _)| o.sim.as_ref().is_some_and(|k| k.streams.is_some()))
        .map(|(o, _)| format!("--{}", o.name))
        .collect();
    if streams.len() > 1 {
        return Err(format!(
            "{} are two designs of the n streams; give one",
            streams.join(" and ")
        )
        .into());
    }
    if !streams.is_empty() && !c.residual {
        return Err(format!(
            "{} widens the residual stream; it needs the residual on",
            streams[0]
        )
        .into());
    }
    if c.d == 0 || c.d > 256 || c.rows == 0 || c.rows > 256 {
        return Err("d and rows must be in 1..=256".into());
    }
    Ok(())
}

fn opt(v: Option<f64>) -> String {
    v.map(|x| f(x, 4)).unwrap_or_else(|| "overflow".into())
}

fn label(c: &SimConfig) -> String {
    let mut parts = vec![if c.residual {
        "residual"
    } else {
        "no residual"
    }
    .to_string()];
    if c.pre_norm {
        parts.push(if c.dyt { "pre-DyT" } else { "pre-norm" }.into());
    }
    if c.scale_writeback {
        parts.push("1/sqrt(N)".into());
    }
    for (o, v) in c.residual_options() {
        if let Some(k) = o.sim.as_ref().filter(|k| c.pre_norm || !k.needs_pre_norm) {
            parts.push((k.label)(v));
        }
    }
    parts.join(" + ")
}

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "depth-sim",
    question: "Random-init depth simulator: how do residuals, pre-norm and write-back scaling shape signal and gradient?",
    flags: &[
        ExpFlag::Sublayers,
        ExpFlag::Gain,
        ExpFlag::Residual,
        ExpFlag::PreNorm,
        ExpFlag::ScaleWriteback,
        ExpFlag::Dyt,
        ExpFlag::ResOptions,
        ExpFlag::DModel,
        ExpFlag::Rows,
        ExpFlag::Seed,
    ],
    run,
    grid: None,
    hidden_training: None,
    quick_decides: true,
};

/// `normlab exp depth-sim`.
/// The simulator's settings from the experiment flags (the one declaration
/// of `exp::args` that `normlab exp depth-sim` and the web lab's
/// `/api/simulate` both parse), with the defaults of the lesson's widget
/// (N = 32, gain 1, residuals on) and `rows` rows; checked.
pub fn config(a: &ExpArgs, rows: usize) -> Result<SimConfig> {
    let c = SimConfig {
        sublayers: a.sublayers.unwrap_or(32),
        gain: a.gain.unwrap_or(1.0),
        residual: a.residual.unwrap_or(true),
        pre_norm: a.pre_norm.unwrap_or(false),
        scale_writeback: a.scale_writeback.unwrap_or(false),
        dyt: a.dyt.unwrap_or(false),
        options: a
            .res_options
            .iter()
            .map(|&(i, value)| SimOption {
                name: residual::OPTIONS[i].name,
                value,
            })
            .collect(),
        d: a.d_model.unwrap_or(64),
        rows: a.rows.unwrap_or(rows),
        seed: a.seed.unwrap_or(0),
    };
    validate(&c)?;
    Ok(c)
}

fn run(a: &ExpArgs, _progress: Progress) -> Result<ExpResult> {
    let base = config(a, 64)?;
    let main = simulate(&base);
    let (variants, simulated, first_option) = variants(&base);
    let results: Vec<SimResult> = variants.iter().map(simulate).collect();
    let table = table(&base, &main, &results);
    let mut out = report(&base, &main, &results);
    conclude(&base, &results, (&simulated, first_option), &mut out);
    out.checks.push(check_c4(&base, &results));
    out.tables.push(table);
    Ok(out)
}

/// The residual options the simulator models, with their knobs.
type Simulated = Vec<(&'static ResidualOption, &'static SimKnob)>;

/// The settings compared with the requested one; the simulated options
/// and the index of the first variant that shows one.
fn variants(base: &SimConfig) -> (Vec<SimConfig>, Simulated, usize) {
    // The canonical settings at the same N and gain, for comparison: the
    // four of the lesson, DyT in the pre-norm's place, then each residual
    // option the simulator models at its example setting (with the
    // pre-norm it acts on or, for the n streams, that models use; for a
    // gate, on residuals without a norm).
    let plain = SimConfig {
        residual: true,
        pre_norm: false,
        scale_writeback: false,
        dyt: false,
        options: Vec::new(),
        ..base.clone()
    };
    let lesson = [
        (false, false, false),
        (true, false, false),
        (true, true, false),
        (true, true, true),
    ];
    let mut variants: Vec<SimConfig> = lesson
        .iter()
        .map(|&(residual, pre_norm, scale_writeback)| SimConfig {
            residual,
            pre_norm,
            scale_writeback,
            ..plain.clone()
        })
        .collect();
    variants.push(SimConfig {
        pre_norm: true,
        dyt: true,
        ..plain.clone()
    });
    let simulated: Vec<_> = residual::simulated().collect();
    let first_option = variants.len();
    for (o, k) in &simulated {
        variants.push(
            SimConfig {
                // The n-stream designs are shown as models use them, with
                // a pre-norm in each sublayer.
                pre_norm: k.needs_pre_norm || k.streams.is_some(),
                ..plain.clone()
            }
            .with(o.name, k.example),
        );
    }
    (variants, simulated, first_option)
}

/// The table: each setting's final residual RMS and gradient norms.
fn table(base: &SimConfig, main: &SimResult, results: &[SimResult]) -> Table {
    let mut table = Table::new(
        format!(
            "N = {} sublayers, gain {}, d {}: residual-stream RMS and gradient",
            base.sublayers, base.gain, base.d
        ),
        &[
            "setting",
            "final residual RMS",
            "grad norm bottom",
            "grad norm top",
            "bottom / top",
        ],
    );
    // The requested setting is marked in its row among the variants, or
    // listed first when it is none of them.
    let asked = label(&main.config);
    let among = results.iter().any(|r| label(&r.config) == asked);
    let first = (!among).then_some(main);
    for r in first.into_iter().chain(results.iter()) {
        let name = if label(&r.config) == asked {
            format!("{asked} (as requested)")
        } else {
            label(&r.config)
        };
        table.row(vec![
            name,
            opt(r.final_residual_rms),
            opt(r.grad_norm[0]),
            opt(r.grad_norm[base.sublayers]),
            opt(r.grad_ratio_bottom_top),
        ]);
    }
    table
}

/// The result: the requested setting's profiles, every variant's, and the
/// figure of RMS and gradient per layer.
fn report(base: &SimConfig, main: &SimResult, results: &[SimResult]) -> ExpResult {
    let pts = |v: &[Option<f64>]| {
        v.iter()
            .enumerate()
            .filter_map(|(i, x)| x.map(|y| (i as f64, y)))
            .collect::<Vec<_>>()
    };
    let mk = |title: &str, ylab: &str, sel: &dyn Fn(&SimResult) -> Vec<Option<f64>>| {
        Panel::Line(LineChart {
            title: title.into(),
            x_label: "layer".into(),
            y_label: ylab.into(),
            series: results
                .iter()
                .map(|r| Series::new(label(&r.config), pts(&sel(r))))
                .collect(),
            log_y: true,
            log_x: false,
        })
    };
    let mut out = result(serde_json::to_value(base).unwrap(), vec![base.seed]);
    out.data
        .insert("residual_rms".into(), json!(main.residual_rms));
    out.data.insert("grad_norm".into(), json!(main.grad_norm));
    out.data.insert(
        "grad_ratio_bottom_top".into(),
        json!(main.grad_ratio_bottom_top),
    );
    out.data
        .insert("final_residual_rms".into(), json!(main.final_residual_rms));
    out.data
        .insert("variants".into(), serde_json::to_value(results).unwrap());
    out.figures.push(Figure {
        stem: "depth_sim".into(),
        panels: vec![
            mk("residual-stream RMS", "RMS of x_l", &|r| {
                r.residual_rms.clone()
            }),
            mk("gradient", "|dL/dx_l| per row", &|r| r.grad_norm.clone()),
        ],
        cols: 2,
    });
    out
}

/// The conclusion: each canonical setting and each option's stream and
/// gradient at the end, and which gates start as the identity map.
fn conclude(
    base: &SimConfig,
    results: &[SimResult],
    (simulated, first_option): (&Simulated, usize),
    out: &mut ExpResult,
) {
    let v = |i: usize| &results[i];
    let at = |r: &SimResult| {
        format!(
            "{} ({})",
            opt(r.final_residual_rms),
            opt(r.grad_ratio_bottom_top)
        )
    };
    let options: Vec<String> = simulated
        .iter()
        .zip(&results[first_option..])
        .map(|((_, k), r)| {
            let name = (k.label)(k.example);
            if k.needs_pre_norm || k.streams.is_some() {
                format!("pre-norm with {name} at {}", at(r))
            } else {
                format!("without a norm, {name} leaves the stream at {}", at(r))
            }
        })
        .collect();
    let gated: Vec<(&str, &SimResult)> = simulated
        .iter()
        .zip(&results[first_option..])
        .filter(|((_, k), _)| k.gate)
        .map(|((o, _), r)| (o.title, r))
        .collect();
    let identity = if !gated.is_empty() && gated.iter().all(|(_, r)| near_identity(r, 1e-2)) {
        format!(
            ": {} start as the identity map (input RMS and unit gradient ratio within 1%), deep as the net is",
            gated.iter().map(|(t, _)| *t).collect::<Vec<_>>().join(" and ")
        )
    } else {
        String::new()
    };
    out.conclusion = format!(
        "With N = {} and gain {}: without residuals the stream's RMS ends at {} and the gradient reaching the bottom is {} of the top's; residuals alone give RMS {} (bottom/top gradient {}); pre-norm gives {}; pre-norm with 1/sqrt(N) write-back keeps RMS at {}; DyT's tanh(0.5 x) in the pre-norm's place at {}; {}{identity}.",
        base.sublayers,
        base.gain,
        opt(v(0).final_residual_rms),
        opt(v(0).grad_ratio_bottom_top),
        opt(v(1).final_residual_rms),
        opt(v(1).grad_ratio_bottom_top),
        at(v(2)),
        at(v(3)),
        at(v(4)),
        options.join("; "),
    );
}

/// Whether a simulated net is within `tol` of the identity map at init:
/// final RMS relative to the input's and the bottom/top gradient ratio.
fn near_identity(r: &SimResult, tol: f64) -> bool {
    match (
        r.residual_rms[0],
        r.final_residual_rms,
        r.grad_ratio_bottom_top,
    ) {
        (Some(x0), Some(xn), Some(g)) => (xn / x0 - 1.0).abs() <= tol && (g - 1.0).abs() <= tol,
        _ => false,
    }
}

/// C4: residual alone > + pre-norm > + 1/sqrt(N) write-back, in both the
/// bottom/top gradient ratio and the final residual RMS, the last near 1.
/// The widget's sublayer model is unknown, so only directions count.
fn check_c4(base: &SimConfig, results: &[SimResult]) -> ClaimCheck {
    let pair = |r: &SimResult| r.grad_ratio_bottom_top.zip(r.final_residual_rms);
    let (Some(res), Some(pre), Some(scaled)) =
        (pair(&results[1]), pair(&results[2]), pair(&results[3]))
    else {
        return ClaimCheck::new("C4", Verdict::Inconclusive, "a setting overflowed f64");
    };
    let ordered = res.0 > pre.0 && pre.0 > scaled.0 && res.1 > pre.1 && pre.1 > scaled.1;
    let near_one = [scaled.0, scaled.1].iter().all(|v| (0.5..=2.0).contains(v));
    let verdict = match (ordered, near_one) {
        (true, true) => Verdict::Holds,
        (true, false) => Verdict::Partly,
        _ => Verdict::DoesNotHold,
    };
    ClaimCheck::new(
        "C4",
        verdict,
        format!(
            "N = {}, gain {}, d {}: bottom/top gradient ratio and final residual RMS are {} and {} with residuals alone (lesson 20.4 and 6.3), {} and {} with pre-norm (3.5, 4.3), {} and {} with 1/sqrt(N) write-back (0.97, 1.1). {} The sizes differ from the widget's because its sublayer model is not given (normlab's sublayer is a random linear map W ~ N(0, g^2/d), so residuals alone grow the stream by about sqrt(1 + g^2) per sublayer).",
            base.sublayers,
            base.gain,
            base.d,
            f(res.0, 1),
            f(res.1, 1),
            f(pre.0, 2),
            f(pre.1, 2),
            f(scaled.0, 2),
            f(scaled.1, 2),
            if ordered { "The ordering is the lesson's." } else { "The ordering differs from the lesson's." }
        ),
    )
}

#[cfg(test)]
mod tests;
