//! speed (claims C9, C10, C11): is RMSNorm faster than LayerNorm, and how
//! many parameters do norms hold? Kernel times of LayerNorm and RMSNorm over
//! a shape sweep, and a whole training step with each, all timed in
//! interleaved rounds (see [`crate::bench::compare`]), a difference called
//! only beyond the per-round spread; the norms' share of the step, from the
//! kernel times at the model's own shape; an unfused RMSNorm (one pass per
//! elementary operation, as a framework without a fused kernel runs it)
//! against the fused LayerNorm; and the norms' parameter count in a d-4096,
//! 32-layer model.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{result, ExpResult, Experiment, Progress};
use crate::bench::compare::{self, Direction, Ratio};
use crate::bench::{NormBenchConfig, Pass};
use crate::present::{f, Figure, LineChart, Series, Table};
use normlab::error::Result;
use normlab::kernels::norm::NormKind;
use normlab::model::{Model, ModelConfig};
use normlab::nn::{Activation, NormRole};
use normlab::train::TrainConfig;
use serde_json::json;

mod kernels;
use kernels::{kernel_point, KernelPoint};

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "speed",
    question: "Is RMSNorm faster than LayerNorm, and how many parameters do norms hold?",
    flags: &[ExpFlag::Threads, ExpFlag::DModel, ExpFlag::Rows],
    run,
    grid: None,
    hidden_training: None,
    quick_decides: false,
};

/// Norm parameters and all parameters of a model, with and without the
/// final norm.
fn norm_params(cfg: &ModelConfig) -> Result<(usize, usize, usize)> {
    let m = Model::new(cfg)?;
    let mut with_final = 0;
    let mut blocks_only = 0;
    for site in m.norms() {
        let n = site.norm.p.len();
        with_final += n;
        if site.role != NormRole::Final {
            blocks_only += n;
        }
    }
    Ok((blocks_only, with_final, m.num_params()))
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let s = setting(a)?;
    let kernels = kernel_sweep(&s, progress);
    let t1 = kernel_table(&s, &kernels);
    let step = model_step(a, &s, progress)?;
    let (t3, share_rows) = param_counts()?;
    let mut out = report(&s, &kernels, &step, &share_rows);
    conclude(&mut out, &kernels, &step, &share_rows);
    out.tables.push(t1);
    out.tables.push(step.table);
    out.tables.push(t3);
    Ok(out)
}

/// What is timed: thread counts, the kernels' shapes, the rounds (and
/// seconds per round) of the kernel timings and of the model step, and the
/// progress steps in all.
struct Setting {
    threads: Vec<usize>,
    nb: NormBenchConfig,
    rounds: usize,
    secs: f64,
    step_rounds: usize,
    total: usize,
}

/// The setting from the flags (quick: two shapes, fewer rounds), checked.
fn setting(a: &ExpArgs) -> Result<Setting> {
    let threads = a.threads.clone().unwrap_or(vec![1]);
    let mut nb = NormBenchConfig::standard();
    nb.threads = threads.clone();
    if let Some(d) = a.d_model {
        nb.shapes = vec![(a.rows.unwrap_or(4096), d)];
    } else if a.quick {
        nb.shapes = vec![(512, 64), (2048, 1024)];
    }
    nb.check()?;
    let (rounds, secs, step_rounds) = if a.quick {
        (21, 0.003, 8)
    } else {
        (41, 0.01, 30)
    };
    let total = nb.shapes.len() * threads.len() + 1;
    Ok(Setting {
        threads,
        nb,
        rounds,
        secs,
        step_rounds,
        total,
    })
}

/// Every shape at every thread count, timed.
fn kernel_sweep(s: &Setting, progress: Progress) -> Vec<KernelPoint> {
    let (threads, nb, rounds, secs, total) = (&s.threads, &s.nb, s.rounds, s.secs, s.total);
    let mut kernels: Vec<KernelPoint> = Vec::new();
    let mut done = 0;
    for &(rows, d) in &nb.shapes {
        for &t in threads {
            kernels.extend(kernel_point(rows, d, t, rounds, secs));
            done += 1;
            progress(done, total, &format!("kernels {rows}x{d} t{t}"));
        }
    }
    kernels
}

/// The kernel times and RMSNorm's speed-up, per shape, thread count and
/// pass.
fn kernel_table(s: &Setting, kernels: &[KernelPoint]) -> Table {
    let rounds = s.rounds;
    let mut t1 = Table::new(
        format!("Kernel time, median of {rounds} interleaved rounds; speed-up = per-round t_layernorm / t_rmsnorm (median and interquartile range)"),
        &["rows x d", "threads", "pass", "layernorm (us)", "rmsnorm (us)", "rmsnorm speed-up", "verdict", "unfused rmsnorm (us)"],
    );
    for k in kernels {
        let r = &k.rms_vs_ln;
        t1.row(vec![
            format!("{}x{}", k.rows, k.d),
            k.threads.to_string(),
            k.pass.label().into(),
            f(k.layernorm_us, 1),
            f(k.rmsnorm_us, 1),
            format!("{:.2}x ({:.2}-{:.2})", r.median, r.q1, r.q3),
            match r.direction() {
                Direction::Faster => "rmsnorm faster".into(),
                Direction::Slower => "layernorm faster".into(),
                Direction::NoDifference => "no measurable difference".to_string(),
            },
            f(k.unfused_rmsnorm_us, 1),
        ]);
    }
    t1
}

/// The whole-model step with each norm, and the norms' share of it from
/// the kernel times at the model's shape.
struct Step {
    base: TrainConfig,
    step_ratio: Ratio,
    ms_ln: f64,
    ms_rms: f64,
    norms_per_step: usize,
    share: f64,
    predicted: f64,
    table: Table,
}

/// A training step of the GPT with LayerNorm and with RMSNorm, timed in
/// interleaved steps, and what the kernels predict of it.
fn model_step(a: &ExpArgs, s: &Setting, progress: Progress) -> Result<Step> {
    let (rounds, secs, step_rounds, total) = (s.rounds, s.secs, s.step_rounds, s.total);
    // Whole-model step, interleaved.
    let base = if a.quick {
        super::runs::full_gpt().with(|c| {
            c.model.layers = 2;
            c.model.d_model = 64;
            c.model.heads = 2;
            c.model.seq = 64;
            c.model.hidden = 256;
            c.batch = 8;
        })?
    } else {
        crate::bench::train::standard_gpt()
    };
    let cfg_of = |n: NormKind| base.with(|c| c.model.norm = n);
    let (ln_cfg, rms_cfg) = (cfg_of(NormKind::LayerNorm)?, cfg_of(NormKind::RmsNorm)?);
    let steps = compare::train_steps(
        &[("layernorm", ln_cfg.clone()), ("rmsnorm", rms_cfg)],
        1,
        step_rounds,
    )?;
    progress(total, total, "model steps");
    let step_ratio = steps.ratio(0, 1);
    let (ms_ln, ms_rms) = (steps.median(0) * 1e3, steps.median(1) * 1e3);
    // The norms' share of the step, from kernel times at the model's shape.
    let model = Model::new(&ln_cfg.model)?;
    let norms_per_step = model.norms().count();
    let (rows, d) = (ln_cfg.batch * ln_cfg.model.seq, ln_cfg.model.d_model);
    let at_model = kernel_point(rows, d, 1, rounds, secs)
        .into_iter()
        .find(|k| k.pass == Pass::ForwardBackward)
        .expect("fwd+bwd point");
    let norm_ms_ln = norms_per_step as f64 * at_model.layernorm_us / 1e3;
    let norm_ms_rms = norms_per_step as f64 * at_model.rmsnorm_us / 1e3;
    let share = norm_ms_ln / ms_ln;
    let predicted = ms_ln / (ms_ln - (norm_ms_ln - norm_ms_rms));
    let mut t2 = Table::new(
        format!("Whole-model training step (gpt, 1 thread), {step_rounds} interleaved steps each"),
        &[
            "norm",
            "ms/step (median)",
            "norm kernels per step (ms)",
            "share of the step",
        ],
    );
    t2.row(vec![
        "layernorm".into(),
        f(ms_ln, 2),
        f(norm_ms_ln, 3),
        format!("{:.1}%", 100.0 * share),
    ]);
    t2.row(vec![
        "rmsnorm".into(),
        f(ms_rms, 2),
        f(norm_ms_rms, 3),
        format!("{:.1}%", 100.0 * norm_ms_rms / ms_rms),
    ]);
    Ok(Step {
        base,
        step_ratio,
        ms_ln,
        ms_rms,
        norms_per_step,
        share,
        predicted,
        table: t2,
    })
}

/// The norms' parameter counts in a d 4096, 32-layer model: a table and
/// a record per norm.
fn param_counts() -> Result<(Table, Vec<serde_json::Value>)> {
    // Parameter counts in a d 4096, 32-layer model (LLaMA-7B's shape).
    let mut big = ModelConfig::gpt();
    big.vocab = 32000;
    big.d_model = 4096;
    big.heads = 32;
    big.layers = 32;
    big.hidden = 11008;
    big.act = Activation::Swiglu;
    big.seq = 4096;
    let mut t3 = Table::new("Norm parameters of a d 4096, 32-layer model (2 norms per layer, SwiGLU 11008, vocab 32000)", &["norm", "in the blocks", "with the final norm", "all parameters", "share"]);
    let mut share_rows = Vec::new();
    for n in [NormKind::LayerNorm, NormKind::RmsNorm] {
        big.norm = n;
        let (blocks, with_final, total_p) = norm_params(&big)?;
        t3.row(vec![
            n.name().into(),
            blocks.to_string(),
            with_final.to_string(),
            total_p.to_string(),
            format!("{:.4}%", 100.0 * with_final as f64 / total_p as f64),
        ]);
        share_rows.push(json!({"norm": n.name(), "norm_params_blocks": blocks, "norm_params_with_final": with_final, "total_params": total_p, "share": with_final as f64 / total_p as f64}));
    }
    Ok((t3, share_rows))
}

/// The result: settings, the kernels, the model step, the parameter
/// shares and the kernel-time figure.
fn report(
    s: &Setting,
    kernels: &[KernelPoint],
    step: &Step,
    share_rows: &[serde_json::Value],
) -> ExpResult {
    let (threads, nb, rounds, step_rounds) = (&s.threads, &s.nb, s.rounds, s.step_rounds);
    let Step {
        base,
        step_ratio,
        ms_ln,
        ms_rms,
        norms_per_step,
        share,
        predicted,
        ..
    } = step;
    let mut out = result(
        json!({"threads": threads, "shapes": nb.shapes, "rounds": rounds, "model": base.overrides(), "model_step_rounds": step_rounds, "large_model": {"d": 4096, "layers": 32, "hidden": 11008, "vocab": 32000}}),
        vec![],
    );
    out.data.insert("kernels".into(), json!(kernels));
    out.data.insert("model_step".into(), json!({"layernorm_ms": ms_ln, "rmsnorm_ms": ms_rms, "rms_vs_ln": step_ratio, "norms_per_step": norms_per_step, "norm_share": share, "predicted_speedup": predicted}));
    out.data.insert("param_share".into(), json!(share_rows));
    let pts = |sel: fn(&KernelPoint) -> f64| -> Vec<(f64, f64)> {
        kernels
            .iter()
            .filter(|k| k.pass == Pass::ForwardBackward && k.threads == threads[0])
            .map(|k| ((k.rows * k.d) as f64, sel(k)))
            .collect()
    };
    out.figures.push(Figure::new(
        "speed",
        vec![LineChart::new(
            "forward + backward kernel time",
            "elements (rows x d)",
            "median time (us)",
            vec![
                Series {
                    name: "layernorm".into(),
                    points: pts(|k| k.layernorm_us),
                    markers: true,
                    diverged: false,
                },
                Series {
                    name: "rmsnorm".into(),
                    points: pts(|k| k.rmsnorm_us),
                    markers: true,
                    diverged: false,
                },
                Series {
                    name: "unfused rmsnorm".into(),
                    points: pts(|k| k.unfused_rmsnorm_us),
                    markers: true,
                    diverged: false,
                },
            ],
        )
        .log_x()
        .log_y()
        .panel()],
        1,
    ));
    out
}

/// The conclusion and claims C9, C10 and C11's verdicts.
fn conclude(
    out: &mut ExpResult,
    kernels: &[KernelPoint],
    step: &Step,
    share_rows: &[serde_json::Value],
) {
    let Step {
        step_ratio,
        ms_ln,
        ms_rms,
        share,
        predicted,
        ..
    } = step;
    let (share, predicted) = (*share, *predicted);
    let count = |dir: Direction| {
        kernels
            .iter()
            .filter(|k| k.rms_vs_ln.direction() == dir)
            .count()
    };
    let (faster, slower, same) = (
        count(Direction::Faster),
        count(Direction::Slower),
        count(Direction::NoDifference),
    );
    let meds: Vec<f64> = kernels.iter().map(|k| k.rms_vs_ln.median).collect();
    let (lo, hi) = meds
        .iter()
        .fold((f64::INFINITY, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
    out.conclusion = format!(
        "Of {} kernel comparisons RMSNorm was faster in {faster}, slower in {slower} and not measurably different in {same} (median speed-ups {:.2}x-{:.2}x). A whole step: {} (the median of each round's ratio of its two interleaved steps; the step table's medians, {:.2} ms with LayerNorm and {:.2} ms with RMSNorm, give {:.2}x). The norms take {:.1}% of a LayerNorm step here, so the kernels alone predict a {:.3}x step speed-up.",
        kernels.len(),
        lo,
        hi,
        step_ratio.describe(),
        ms_ln,
        ms_rms,
        ms_ln / ms_rms,
        100.0 * share,
        predicted
    );
    out.checks.push(check_c9(share_rows));
    out.checks
        .push(check_c10(kernels, step_ratio, share, predicted));
    out.checks.push(check_c11(kernels));
}

fn check_c9(share: &[serde_json::Value]) -> ClaimCheck {
    let blocks = |i: usize| share[i]["norm_params_blocks"].as_u64().unwrap_or(0);
    let holds = blocks(0) == 524_288 && blocks(1) == 262_144;
    ClaimCheck::new(
        "C9",
        if holds { Verdict::Holds } else { Verdict::DoesNotHold },
        format!(
            "counted in the built model: LayerNorm {} and RMSNorm {} parameters in the blocks (lesson 524,288 and 262,144; with the final norm {} and {}), {:.4}% and {:.4}% of all {} parameters. The course's 660,480 at 0.0024% implies ~2.75e10 parameters in all: a large reference model.",
            blocks(0),
            blocks(1),
            share[0]["norm_params_with_final"],
            share[1]["norm_params_with_final"],
            100.0 * share[0]["share"].as_f64().unwrap_or(0.0),
            100.0 * share[1]["share"].as_f64().unwrap_or(0.0),
            share[0]["total_params"],
        ),
    )
    .exact()
}

/// Of `points`, how many show the candidate of `ratio` measurably faster,
/// and the smallest and largest median ratio.
fn wins_and_range(points: &[&KernelPoint], ratio: fn(&KernelPoint) -> &Ratio) -> (usize, f64, f64) {
    let wins = points
        .iter()
        .filter(|k| ratio(k).direction() == Direction::Faster)
        .count();
    let (lo, hi) = points
        .iter()
        .map(|k| ratio(k).median)
        .fold((f64::INFINITY, 0f64), |(a, b), x| (a.min(x), b.max(x)));
    (wins, lo, hi)
}

/// C10's "steady across shapes": the largest per-shape median speed-up at
/// most this many times the smallest.
const STEADY: f64 = 1.10;

fn check_c10(kernels: &[KernelPoint], step: &Ratio, share: f64, predicted: f64) -> ClaimCheck {
    let single: Vec<&KernelPoint> = kernels.iter().filter(|k| k.threads == 1).collect();
    let (faster, lo, hi) = wins_and_range(&single, |k| &k.rms_vs_ln);
    // The step agrees with the kernels when it is measurably faster, or when
    // the kernel-predicted speed-up lies within the step's per-round spread.
    let step_agrees =
        step.direction() == Direction::Faster || (step.q1 <= predicted && predicted <= step.q3);
    // "Steady across shapes": the largest per-shape speed-up within
    // STEADY of the smallest (the lesson's 1.14x-1.15x differ by 1%).
    let steady = lo > 0.0 && hi / lo <= STEADY;
    let verdict = match Verdict::of_count(faster, single.len()) {
        Verdict::Holds if !step_agrees || !steady => Verdict::Partly,
        v => v,
    };
    ClaimCheck::new(
        "C10",
        verdict,
        format!(
            "1 thread: RMSNorm's fused kernel beat LayerNorm's beyond the per-round spread in {faster} of {} shape/pass points, by {:.2}x-{:.2}x (lesson ~1.14-1.15x, steady): {} across shapes (largest over smallest {:.2}x; steady means at most {STEADY:.2}x); a whole GPT step: {} (norms {:.1}% of the step, kernel-predicted {:.3}x; lesson 7-9% for Transformers with RMSNorm's paper's slower norms).",
            single.len(),
            lo,
            hi,
            if steady { "steady" } else { "not steady" },
            hi / lo,
            step.describe(),
            100.0 * share,
            predicted
        ),
    )
}

fn check_c11(kernels: &[KernelPoint]) -> ClaimCheck {
    let fb: Vec<&KernelPoint> = kernels
        .iter()
        .filter(|k| k.pass == Pass::ForwardBackward)
        .collect();
    let (ln_wins, lo, hi) = wins_and_range(&fb, |k| &k.ln_vs_unfused_rms);
    ClaimCheck::new(
        "C11",
        Verdict::of_count(ln_wins, fb.len()),
        format!(
            "on this CPU (not the course's Apple GPU) the fused LayerNorm ran {:.2}x-{:.2}x as fast as an unfused RMSNorm (one memory pass per operation) forward+backward, faster in {ln_wins} of {} shapes: which is faster depends on fusion, not on the formula (lesson: fused LayerNorm 0.667 ms vs PyTorch RMSNorm 0.792 ms).",
            lo,
            hi,
            fb.len()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ratio(median: f64) -> Ratio {
        Ratio {
            a: "layernorm".into(),
            b: "rmsnorm".into(),
            median,
            q1: median - 0.01,
            q3: median + 0.01,
            rounds: 9,
        }
    }

    fn point(speed_up: f64) -> KernelPoint {
        KernelPoint {
            rows: 8,
            d: 64,
            threads: 1,
            pass: Pass::Forward,
            layernorm_us: speed_up,
            rmsnorm_us: 1.0,
            unfused_rmsnorm_us: 2.0,
            rms_vs_ln: ratio(speed_up),
            ln_vs_unfused_rms: ratio(1.5),
        }
    }

    /// C10 holds only when RMSNorm wins at every shape by a steady factor:
    /// the same wins spread from 1.09x to 1.45x hold partly.
    #[test]
    fn c10_needs_a_steady_speed_up() {
        let verdict = |ups: &[f64]| {
            let k: Vec<KernelPoint> = ups.iter().map(|&u| point(u)).collect();
            check_c10(&k, &ratio(1.02), 0.02, 1.003).verdict
        };
        assert_eq!(verdict(&[1.14, 1.15, 1.15]), Verdict::Holds);
        assert_eq!(verdict(&[1.09, 1.2, 1.45]), Verdict::Partly);
    }

    /// The conclusion quotes the step table's own medians beside the
    /// per-round speed-up, so a noisy round cannot leave the text saying
    /// one thing and the table under it another; C9, an exact count, is
    /// decided however short the run.
    #[test]
    fn the_conclusion_quotes_the_step_table_and_c9_is_exact() {
        let step = Step {
            base: super::super::runs::full_gpt(),
            step_ratio: ratio(1.10),
            ms_ln: 3.0,
            ms_rms: 3.62,
            norms_per_step: 5,
            share: 0.02,
            predicted: 1.003,
            table: Table::new("t", &["a"]),
        };
        let share = [
            json!({"norm_params_blocks": 524_288u64, "share": 0.0}),
            json!({"norm_params_blocks": 262_144u64, "share": 0.0}),
        ];
        let mut out = result(serde_json::Value::Null, Vec::new());
        conclude(&mut out, &[point(1.14)], &step, &share);
        assert!(
            out.conclusion
                .contains("3.00 ms with LayerNorm and 3.62 ms with RMSNorm, give 0.83x"),
            "{}",
            out.conclusion
        );
        let c9 = out.checks.iter().find(|c| c.claim == "C9").unwrap();
        assert!(c9.exact && c9.verdict == Verdict::Holds);
    }
}
