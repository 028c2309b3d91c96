//! speed: LayerNorm vs RMSNorm kernel time over a shape sweep, whole-model
//! step time with each, and the norms' share of a large model's parameters.

use super::{result, ExpArgs, ExpFlag, ExpResult, Experiment, Progress};
use crate::bench::{self, NormBenchConfig, Pass};
use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::model::{Model, ModelConfig};
use crate::nn::Activation;
use crate::params::ParamKind;
use crate::present::{f, Figure, LineChart, Panel, Series, Table};
use serde_json::json;

/// Norm parameters and total parameters of a model config.
fn norm_share(cfg: &ModelConfig) -> Result<(usize, usize)> {
    let m = Model::new(cfg)?;
    let norm: usize = m
        .layout
        .tensors
        .iter()
        .filter(|t| matches!(t.kind, ParamKind::NormGain | ParamKind::NormBias))
        .map(|t| t.range.len())
        .sum();
    Ok((norm, m.num_params()))
}

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "speed",
    question: "Is RMSNorm faster than LayerNorm, and how many parameters do norms hold?",
    flags: &[ExpFlag::Threads, ExpFlag::DModel, ExpFlag::Rows],
    run,
    grid: None,
};

/// `normlab exp speed`.
fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let threads = a.threads.clone().unwrap_or(vec![1]);
    let mut nb = NormBenchConfig::standard();
    nb.kinds = vec![NormKind::LayerNorm, NormKind::RmsNorm];
    nb.threads = threads.clone();
    if let Some(d) = a.d_model {
        let rows = a.rows.unwrap_or(4096);
        nb.shapes = vec![(rows, d)];
    }
    if a.quick {
        nb.shapes = vec![(512, 64), (2048, 1024)];
        nb.target_seconds = 0.03;
        nb.min_reps = 5;
    }
    nb.check()?;
    let total = nb.shapes.len() * threads.len() * 4;
    let mut done = 0;
    let recs = bench::run_norm_bench(&nb, |r| {
        done += 1;
        progress(
            done,
            total + 2,
            &format!("{} {} {}x{}", r.kind, r.pass.label(), r.rows, r.d),
        );
    });
    let mut t1 = Table::new(
        "Kernel time (median), 1 thread unless stated",
        &[
            "rows x d",
            "threads",
            "pass",
            "layernorm (us)",
            "rmsnorm (us)",
            "rmsnorm speed-up",
        ],
    );
    let mut pts_ln = Vec::new();
    let mut pts_rms = Vec::new();
    let mut kernel = Vec::new();
    for &(rows, d) in &nb.shapes {
        for &t in &threads {
            for pass in [Pass::Forward, Pass::ForwardBackward] {
                let get = |k: &str| {
                    recs.iter()
                        .find(|r| {
                            r.kind == k
                                && r.rows == rows
                                && r.d == d
                                && r.threads == t
                                && r.pass == pass
                        })
                        .map(|r| r.median_us)
                        .unwrap_or(f64::NAN)
                };
                let (ln, rms) = (get("layernorm"), get("rmsnorm"));
                t1.row(vec![
                    format!("{rows}x{d}"),
                    t.to_string(),
                    pass.label().into(),
                    f(ln, 1),
                    f(rms, 1),
                    format!("{:.2}x", ln / rms),
                ]);
                kernel.push(json!({"rows": rows, "d": d, "threads": t, "pass": pass, "layernorm_us": ln, "rmsnorm_us": rms, "speedup": ln / rms}));
                if pass == Pass::ForwardBackward && t == threads[0] {
                    let n = (rows * d) as f64;
                    pts_ln.push((n, ln));
                    pts_rms.push((n, rms));
                }
            }
        }
    }
    // Whole-model step time with each norm.
    let model_cfg = if a.quick {
        json!({"model": "gpt", "layers": 2, "d_model": 64, "heads": 2, "seq": 64, "hidden": 256, "batch": 8})
    } else {
        json!({"model": "gpt", "layers": 8, "d_model": 128, "heads": 4, "seq": 128, "hidden": 512, "batch": 16})
    };
    let mut t2 = Table::new(
        "Whole-model training step (gpt, 1 thread, median)",
        &["norm", "ms/step", "GFLOP/s"],
    );
    let mut steps = Vec::new();
    for (i, n) in [NormKind::LayerNorm, NormKind::RmsNorm].iter().enumerate() {
        let mut v = model_cfg.clone();
        v["norm"] = json!(n.name());
        let c = super::runs::cfg(v)?;
        let r = bench::run_train_bench(&c, 1, if a.quick { 3 } else { 10 })?;
        progress(total + i + 1, total + 2, &format!("model step {n}"));
        t2.row(vec![n.name().into(), f(r.ms_per_step, 2), f(r.gflops, 1)]);
        steps.push(json!({"norm": n.name(), "ms_per_step": r.ms_per_step, "config": r.config}));
    }
    // Parameter share in a large model (d 4096, 32 layers, LLaMA-7B shape).
    let mut big = ModelConfig::gpt();
    big.vocab = 32000;
    big.d_model = 4096;
    big.heads = 32;
    big.layers = 32;
    big.hidden = 11008;
    big.act = Activation::Swiglu;
    big.seq = 4096;
    let mut t3 = Table::new("Norm parameters of a d 4096, 32-layer model (2 norms per layer + final, SwiGLU 11008, vocab 32000)", &["norm", "norm parameters", "all parameters", "share"]);
    let mut share = Vec::new();
    for n in [NormKind::LayerNorm, NormKind::RmsNorm] {
        big.norm = n;
        let (np, total_p) = norm_share(&big)?;
        t3.row(vec![
            n.name().into(),
            np.to_string(),
            total_p.to_string(),
            format!("{:.4}%", 100.0 * np as f64 / total_p as f64),
        ]);
        share.push(json!({"norm": n.name(), "norm_params": np, "total_params": total_p, "share": np as f64 / total_p as f64}));
    }
    let mut out = result(
        json!({"threads": threads, "shapes": nb.shapes, "model": model_cfg, "large_model": {"d": 4096, "layers": 32, "hidden": 11008, "vocab": 32000}}),
        vec![],
    );
    out.data.insert("kernels".into(), json!(kernel));
    out.data.insert("model_steps".into(), json!(steps));
    out.data.insert("param_share".into(), json!(share));
    out.figures.push(Figure {
        stem: "speed".into(),
        panels: vec![Panel::Line(LineChart {
            title: "forward + backward kernel time".into(),
            x_label: "elements (rows x d)".into(),
            y_label: "median time (us)".into(),
            series: vec![
                Series {
                    name: "layernorm".into(),
                    points: pts_ln,
                    markers: true,
                },
                Series {
                    name: "rmsnorm".into(),
                    points: pts_rms,
                    markers: true,
                },
            ],
            log_y: true,
            log_x: true,
        })],
        cols: 1,
    });
    let speedups: Vec<f64> = kernel
        .iter()
        .filter_map(|k| k["speedup"].as_f64())
        .collect();
    let (lo, hi) = speedups
        .iter()
        .fold((f64::INFINITY, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
    let ms = |i: usize| steps[i]["ms_per_step"].as_f64().unwrap();
    out.conclusion = format!(
        "RMSNorm's kernels ran {:.2}x to {:.2}x as fast as LayerNorm's over the shapes; a whole training step took {} ms with LayerNorm and {} ms with RMSNorm ({:+.1}%), since norms are a small part of a step. In a d-4096, 32-layer model the norms hold {} (LayerNorm) or {} (RMSNorm) parameters: {:.4}% and {:.4}% of all.",
        lo,
        hi,
        f(ms(0), 2),
        f(ms(1), 2),
        100.0 * (ms(1) / ms(0) - 1.0),
        share[0]["norm_params"],
        share[1]["norm_params"],
        100.0 * share[0]["share"].as_f64().unwrap(),
        100.0 * share[1]["share"].as_f64().unwrap()
    );
    out.tables.push(t1);
    out.tables.push(t2);
    out.tables.push(t3);
    Ok(out)
}
