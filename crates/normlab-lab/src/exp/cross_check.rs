//! cross-check (claims C1, C2, C3, C5, C6, C12, C16, C24, C25, C26, C27): do normlab's numbers agree with
//! an independent PyTorch implementation? `cross_check.py` (beside this
//! file, compiled in and run by `NORMLAB_PYTHON`, default `python3`) is
//! written from the lesson and normlab's documented settings with torch's
//! own modules and RNG; normlab computes the same statistics with its
//! kernels and its own RNG, seed by seed. The agreement rule: for a
//! statistic over seeds, PyTorch's median lies inside normlab's seed range
//! and normlab's median inside PyTorch's; for an invariance, both find the
//! same outputs unchanged (to 1e-4); for training (C12, C16:
//! `cross_train.rs`), the same most common run status and mean final
//! held-out losses within twice the pooled seed standard deviation (at
//! least 0.05 nats). With SmolLM2's file and transformers
//! (+ gguf, accelerate) there, C3's stream on the real model is compared
//! too: transformers loads the same GGUF file and runs normlab's token ids;
//! per block, the mean and median token norm and the largest activation
//! agree within 1e-3 relative. C24: the SwiGLU clamp's largest activation
//! against its bound; C25: the std of 128 independent writes; C26: sink
//! formation on Bigram-Backcopy and the output gate's effect, trained on
//! both sides (`cross_train.rs`); C27: Pre-LN, hyper-connections, mHC and
//! block AttnRes on the toy net, final losses, their order and the stream
//! growth (`cross_routing.rs`). Without torch the chapter says so (and
//! how to install it) and measures nothing.

use super::args::ExpArgs;
use super::cross_train::{self, Setting};
use super::framework::{result, ExpResult, Experiment, Progress, Unavailable};
use super::lesson_block::{MlpStack, StackInit};
use super::residual_growth::{lesson_init_growth, spread};
use crate::present::{f, Figure, LineChart, Panel, Series, Table};
use normlab::error::{Error, Result};
use normlab::io::sample_sentences;
use normlab::kernels::matmul::linear_forward;
use normlab::kernels::norm::NormKind;
use normlab::kernels::rng::Rng;
use normlab::model::decoder::{Decoder, DecoderTrace};
use normlab::nn::norm::{mean_row_norm, normalise_rows};
use serde_json::{json, Value};

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "cross-check",
    question: "Does an independent PyTorch implementation give the same numbers?",
    flags: &[],
    run,
    grid: None,
    hidden_training: Some(cross_train::hidden_training),
    quick_decides: false,
};

/// The PyTorch side (run with its request as the one argument).
const SCRIPT: &str = include_str!("cross_check.py");

/// The installation line printed when torch is missing.
const INSTALL: &str = "python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy (and transformers gguf accelerate for SmolLM2), then NORMLAB_PYTHON=/tmp/venv/bin/python";

/// Seeds of C24's and C25's arithmetic.
fn arithmetic_seeds(quick: bool) -> usize {
    if quick {
        10
    } else {
        30
    }
}

/// The clamp limit of C24's comparison (DeepSeek V4's).
const C24_LIMIT: f32 = 10.0;

/// C24: the largest |silu(min(g, L)) clamp(u, -L, L)| over 2^18 gate and
/// up pre-activations N(0, std^2), over the bound SiLU(L) L.
fn c24(seed: u64, std: f32) -> f64 {
    let n = 1 << 18;
    let mut rng = Rng::derive(seed, "cross-check-c24");
    let ab = rng.normal_vec(2 * n, 0.0, std);
    let mut y = vec![0.0; n];
    normlab::kernels::act::swiglu_clamped_forward(&ab, n, C24_LIMIT, &mut y);
    let l = f64::from(C24_LIMIT);
    y.iter().fold(0f64, |m, v| m.max(f64::from(v.abs()))) / (l * l / (1.0 + (-l).exp()))
}

/// Seeds per claim: (C1, C2, C3, C6).
fn seeds(quick: bool) -> [usize; 4] {
    if quick {
        // Enough that a median lies well inside the other side's range.
        [20, 50, 15, 15]
    } else {
        [30, 200, 30, 30]
    }
}

/// C1: the per-layer factor of the mean token norm through 20 plain linear
/// layers, d 64, x (4, 16, 64), W ~ N(0, 0.3^2/d).
fn c1(seed: u64) -> f64 {
    let (d, rows, layers) = (64, 64, 20);
    let mut rng = Rng::derive(seed, "cross-check-c1");
    let mut x = rng.normal_vec(rows * d, 0.0, 1.0);
    let first = mean_row_norm(&x, d);
    let mut y = vec![0.0; rows * d];
    for _ in 0..layers {
        let w = rng.normal_vec(d * d, 0.0, 0.3 / (d as f32).sqrt());
        linear_forward(&x, &w, None, rows, d, d, &mut y);
        std::mem::swap(&mut x, &mut y);
    }
    (mean_row_norm(&x, d) / first).powf(1.0 / layers as f64)
}

/// C2: the identity term's norm over dL/dx's, and dL/dx's norm, in the
/// lesson's block.
fn c2(seed: u64) -> (f64, f64) {
    let mut st = MlpStack::new(1, 64, 64, true, StackInit::Torch, seed, 1);
    let x = Rng::derive(seed, "cross-check-c2").normal_vec(64, 0.0, 1.0);
    let g = st.grad_sum_sq(&x);
    let total = normlab::params::sum_squares(&g).sqrt();
    (st.cache(0).identity_grad_sumsq.sqrt() / total, total)
}

/// C6: the mean row mean and row std of RMSNorm's output for N(1.5, 3^2)
/// rows, d 512, 4096 rows.
fn c6(seed: u64) -> (f64, f64) {
    let d = 512;
    let x = Rng::derive(seed, "cross-check-c6").normal_vec(4096 * d, 1.5, 3.0);
    let y = normalise_rows(NormKind::RmsNorm, d, &x);
    let (mut means, mut stds) = (0.0, 0.0);
    for r in y.chunks_exact(d) {
        let m = r.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
        means += m;
        stds += (r.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / d as f64).sqrt();
    }
    (means / 4096.0, stds / 4096.0)
}

/// C5: the largest output change under 3x and x + 2, per kind.
fn c5() -> Value {
    let d = 512;
    let x = Rng::derive(0, "cross-check-c5").normal_vec(256 * d, 1.5, 3.0);
    let change = |kind: NormKind, g: &dyn Fn(f32) -> f32| {
        let y = normalise_rows(kind, d, &x);
        let t: Vec<f32> = x.iter().map(|&v| g(v)).collect();
        let z = normalise_rows(kind, d, &t);
        y.iter()
            .zip(&z)
            .fold(0f64, |m, (a, b)| m.max((a - b).abs() as f64))
    };
    let mut out = json!({});
    for kind in [NormKind::LayerNorm, NormKind::RmsNorm] {
        out[kind.name()] = json!({
            "scale_change": change(kind, &|v| 3.0 * v),
            "shift_change": change(kind, &|v| v + 2.0),
        });
    }
    out
}

/// Run the PyTorch side: Ok(None) when the Python has no torch (or no
/// Python is there), an error when the script fails otherwise.
fn torch_side(request: &Value) -> Result<Option<Value>> {
    let python = std::env::var("NORMLAB_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = match std::process::Command::new(&python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(request.to_string())
        .output()
    {
        Ok(o) => o,
        Err(_) => return Ok(None),
    };
    match out.status.code() {
        Some(0) => serde_json::from_slice(&out.stdout).map(Some).map_err(|e| {
            Error::Internal(format!("cross-check: unreadable output of {python}: {e}"))
        }),
        Some(3) => Ok(None),
        _ => Err(Error::Internal(format!(
            "cross-check: {python} failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("no message")
        ))),
    }
}

/// One compared statistic: claim, what, the lesson's value, normlab's
/// values over seeds, PyTorch's.
type Statistic = (&'static str, &'static str, &'static str, Vec<f64>, Vec<f64>);

/// Sorted values against their quantile, for a figure.
fn quantiles(v: &[f64]) -> Vec<(f64, f64)> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len() as f64;
    s.iter()
        .enumerate()
        .map(|(i, &y)| ((i as f64 + 0.5) / n, y))
        .collect()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

/// The SmolLM2 decoder and normlab's token ids of the texts it runs on.
type Smol = (Decoder, Vec<Vec<u32>>);

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let [n1, n2, n3, n6] = seeds(a.quick);
    let setting = Setting::new(a)?;
    let (text, request, llm) = request(a, &setting, [n1, n2, n3, n6])?;
    let mut out = result(
        json!({"seeds": {"C1": n1, "C2": n2, "C3": n3, "C6": n6, }, "training": setting.describe(), "smollm2_texts": llm.as_ref().map(|l| l.1.len()), "rule": "PyTorch's median inside normlab's seed range and normlab's median inside PyTorch's; invariances: the same outputs unchanged to 1e-4; SmolLM2: every block within 1e-3 relative"}),
        vec![],
    );
    let torch = torch_side(&request);
    let _ = std::fs::remove_file(&text);
    let Some(torch) = torch? else {
        let why = format!("no Python with torch (NORMLAB_PYTHON): {INSTALL}");
        out.conclusion = format!("Nothing cross-checked: {why}.");
        out.unavailable = Some(Unavailable {
            needs: "torch",
            why,
        });
        return Ok(out);
    };
    let stats = statistics(&setting, [n1, n2, n3, n6], &torch)?;
    let (mut table, mut records, panels) = compare_statistics(&stats, &torch)?;
    compare_invariances(&torch, &mut table, &mut records);
    // C12 and C16 trained on both sides.
    cross_train::compare(a, &setting, progress, &torch, &mut table, &mut records)?;
    let notes = compare_smollm2(&llm, &torch, &mut table, &mut records)?;
    conclude(&mut out, &torch, (table, records, panels), &notes);
    Ok(out)
}

/// The request for the PyTorch side (seeds, the training setting and the
/// GPT's text written to a file, whose path is returned), with SmolLM2's
/// token ids when its file is here.
fn request(
    a: &ExpArgs,
    setting: &Setting,
    [n1, n2, n3, n6]: [usize; 4],
) -> Result<(std::path::PathBuf, Value, Option<Smol>)> {
    // The GPT's text for the PyTorch side: the bundled text, as a file.
    let text = std::env::temp_dir().join(format!("normlab-cross-check-{}.txt", std::process::id()));
    normlab::io::atomic_write(&text, normlab::io::BUNDLED_TEXT)?;
    let na = arithmetic_seeds(a.quick);
    let mut request =
        json!({"C1": n1, "C2": n2, "C3": n3, "C6": n6, "C5": 1, "C24": na, "C25": na});
    for (k, v) in setting
        .request(&text.display().to_string())
        .as_object()
        .into_iter()
        .flatten()
    {
        request[k] = v.clone();
    }
    // SmolLM2, when its file is here: normlab's token ids of the llm
    // chapter's texts, for transformers to run on the same file.
    let llm = match super::llm::find_model() {
        Some(path) => {
            let m = Decoder::load(&path)?;
            let texts = sample_sentences(if a.quick { 4 } else { 16 }, 0, 53);
            let ids: Vec<Vec<u32>> = texts
                .iter()
                .map(|t| m.encode(t))
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .filter(|ids| !ids.is_empty())
                .collect();
            request["smollm2"] = json!({"path": path.display().to_string(), "ids": ids});
            Some((m, ids))
        }
        None => None,
    };
    Ok((text, request, llm))
}

/// normlab's values of each compared statistic, seed by seed, beside
/// PyTorch's.
fn statistics(
    setting: &Setting,
    [n1, n2, n3, n6]: [usize; 4],
    torch: &Value,
) -> Result<Vec<Statistic>> {
    let seeds_of = |n: usize| 0..n as u64;
    let nl_c1: Vec<f64> = seeds_of(n1).map(c1).collect();
    let nl_c2: Vec<(f64, f64)> = seeds_of(n2).map(c2).collect();
    let nl_c3: Vec<(Vec<f64>, f64)> = seeds_of(n3)
        .map(|s| lesson_init_growth(128, 12, s))
        .collect();
    let nl_c6: Vec<(f64, f64)> = seeds_of(n6).map(c6).collect();
    let nl_c16 = cross_train::init_ratios(setting)?;
    let na = floats(&torch["C25"]["std"]).len().max(1) as u64;
    let nl_c24: Vec<f64> = (0..na).map(|s| c24(s, 2.0)).collect();
    let nl_c25: Vec<f64> = (0..na).map(super::stream_sum::sum_of_writes).collect();
    let stats: Vec<Statistic> = vec![
        (
            "C1",
            "per-layer factor of the mean token norm, W ~ N(0, 0.3^2/d)",
            "x0.3",
            nl_c1,
            floats(&torch["C1"]["per_layer_factor"]),
        ),
        (
            "C2",
            "norm of the identity term / norm of dL/dx, one block",
            "0.881 (seed 3)",
            nl_c2.iter().map(|p| p.0).collect(),
            floats(&torch["C2"]["identity_ratio"]),
        ),
        (
            "C2",
            "norm of dL/dx, one block",
            "13.79 (seed 3)",
            nl_c2.iter().map(|p| p.1).collect(),
            floats(&torch["C2"]["grad_norm"]),
        ),
        (
            "C3",
            "mean token norm after 12 Pre-LN blocks / before",
            "x1.21 (seed 11)",
            nl_c3.iter().map(|p| p.0[12] / p.0[0]).collect(),
            floats(&torch["C3"]["growth"]),
        ),
        (
            "C3",
            "mean token norm after the final LayerNorm",
            "11.31 = sqrt(128)",
            nl_c3.iter().map(|p| p.1).collect(),
            floats(&torch["C3"]["after_final_norm"]),
        ),
        (
            "C6",
            "RMSNorm output: mean of row means, N(1.5, 3^2) rows",
            "~0.4475",
            nl_c6.iter().map(|p| p.0).collect(),
            floats(&torch["C6"]["row_mean"]),
        ),
        (
            "C6",
            "RMSNorm output: mean of row stds",
            "~0.8944",
            nl_c6.iter().map(|p| p.1).collect(),
            floats(&torch["C6"]["row_std"]),
        ),
        (
            "C16",
            "per-block gradient norm at init, Post-LN over Pre-LN (mean over blocks)",
            "~1% (0.017 vs ~1.6)",
            nl_c16,
            floats(&torch["C16"]["init_ratio"]),
        ),
        (
            "C24",
            "SwiGLU clamped at 10 (DeepSeek V4's form): largest |activation| / (SiLU(10) x 10), 2^18 pre-activations N(0, 2^2)",
            "bounded by SiLU(10) x 10 = 99.995",
            nl_c24,
            floats(&torch["C24"]["peak_std2"]),
        ),
        (
            "C25",
            "std of a unit-variance embedding plus 128 independent unit-variance writes (2^18 elements)",
            "sqrt(129) = 11.36",
            nl_c25,
            floats(&torch["C25"]["std"]),
        ),
    ];
    Ok(stats)
}

/// The statistics compared by the agreement rule: the table, one record
/// and one figure panel each.
fn compare_statistics(
    stats: &[Statistic],
    torch: &Value,
) -> Result<(Table, Vec<Value>, Vec<Panel>)> {
    let mut table = Table::new(
        format!("normlab (its kernels and RNG) against an independent PyTorch {} implementation (torch's modules and RNG), seed by seed: median and range over the seeds", torch["torch"].as_str().unwrap_or("?")),
        &["claim", "statistic", "seeds", "normlab", "PyTorch", "lesson", "agrees"],
    );
    let mut records = Vec::new();
    let mut panels = Vec::new();
    for (claim, stat, lesson, nl, pt) in stats {
        if pt.is_empty() {
            return Err(Error::Internal(format!(
                "cross-check: PyTorch gave no values for {claim} ({stat})"
            )));
        }
        let ((nm, nlo, nhi), (pm, plo, phi)) = (spread(nl), spread(pt));
        let agrees = (nlo..=nhi).contains(&pm) && (plo..=phi).contains(&nm);
        table.row(vec![
            claim.to_string(),
            stat.to_string(),
            nl.len().to_string(),
            format!("{} [{}, {}]", f(nm, 4), f(nlo, 4), f(nhi, 4)),
            format!("{} [{}, {}]", f(pm, 4), f(plo, 4), f(phi, 4)),
            lesson.to_string(),
            if agrees { "agrees" } else { "disagrees" }.into(),
        ]);
        records.push(json!({"claim": claim, "statistic": stat, "agrees": agrees,
            "normlab": {"median": nm, "min": nlo, "max": nhi, "values": nl},
            "torch": {"median": pm, "min": plo, "max": phi, "values": pt}}));
        panels.push(
            LineChart::new(
                format!("{claim}: {stat}"),
                "quantile over seeds",
                "value",
                vec![
                    Series::new("normlab", quantiles(nl)),
                    Series::new("PyTorch", quantiles(pt)),
                ],
            )
            .panel(),
        );
    }
    Ok((table, records, panels))
}

/// C5: the same invariances (unchanged to 1e-4) on both sides, as rows
/// and records; C24: the clamp's bound, reached and never exceeded (to
/// 1e-6) with pre-activations N(0, 20^2), on both sides.
fn compare_invariances(torch: &Value, table: &mut Table, records: &mut Vec<Value>) {
    let na = floats(&torch["C25"]["std"]).len().max(1) as u64;
    let n = (0..na).map(|s| c24(s, 20.0)).fold(0f64, f64::max);
    let p = torch["C24"]["peak_std20"].as_f64().unwrap_or(f64::NAN);
    let at_bound = |v: f64| (v - 1.0).abs() <= 1e-6;
    let agrees = at_bound(n) && at_bound(p);
    let stat = "SwiGLU clamped at 10: largest |activation| / (SiLU(10) x 10) with pre-activations N(0, 20^2): the bound, reached and not exceeded (to 1e-6)";
    table.row(vec![
        "C24".into(),
        stat.into(),
        na.to_string(),
        format!("{n:.7}"),
        format!("{p:.7}"),
        "at most SiLU(L) x L".into(),
        if agrees { "agrees" } else { "disagrees" }.into(),
    ]);
    records.push(
        json!({"claim": "C24", "statistic": stat, "agrees": agrees, "normlab": n, "torch": p}),
    );
    let nl_c5 = c5();
    for kind in ["layernorm", "rmsnorm"] {
        for (t, key) in [("x -> 3x", "scale_change"), ("x -> x + 2", "shift_change")] {
            let (n, p) = (
                nl_c5[kind][key].as_f64().unwrap_or(f64::NAN),
                torch["C5"][kind][key].as_f64().unwrap_or(f64::NAN),
            );
            let agrees = (n < 1e-4) == (p < 1e-4);
            let lesson = match (kind, key) {
                ("rmsnorm", "shift_change") => "changes",
                _ => "unchanged",
            };
            table.row(vec![
                "C5".into(),
                format!("{kind}: largest output change under {t}"),
                "1".into(),
                format!("{n:.2e}"),
                format!("{p:.2e}"),
                lesson.into(),
                if agrees { "agrees" } else { "disagrees" }.into(),
            ]);
            records.push(json!({"claim": "C5", "statistic": format!("{kind}: largest output change under {t}"), "agrees": agrees, "normlab": n, "torch": p}));
        }
    }
}

/// C3 on SmolLM2: the stream after each block, per text, as normlab's
/// engine and transformers compute it, as rows and records; or a note on
/// why it was not compared.
fn compare_smollm2(
    llm: &Option<Smol>,
    torch: &Value,
    table: &mut Table,
    records: &mut Vec<Value>,
) -> Result<Vec<String>> {
    // C3 on SmolLM2: the stream after each block, per text, as normlab's
    // engine and transformers compute it from the same file and tokens.
    let mut notes = Vec::new();
    match (&llm, &torch["smollm2"]) {
        (None, _) => notes.push(
            "SmolLM2 not compared: its file is absent (scripts/fetch_smollm2.sh)".to_string(),
        ),
        (Some(_), v) if v.is_null() || v.get("unavailable").is_some() => notes.push(format!(
            "SmolLM2 not compared: {}",
            v["unavailable"]
                .as_str()
                .unwrap_or("the PyTorch side gave no answer")
        )),
        (Some((m, ids)), hf) => {
            let mut nl: [Vec<Vec<f64>>; 3] = Default::default();
            for t in ids {
                let mut tr = DecoderTrace::default();
                m.observe(t, &mut tr)?;
                nl[0].push(tr.row_norm_out);
                nl[1].push(tr.row_norm_median_out);
                nl[2].push(tr.max_abs);
            }
            for (i, (key, what)) in [
                ("row_norm_out", "mean token norm"),
                ("row_norm_median_out", "median token norm"),
                ("max_abs", "largest absolute activation"),
            ]
            .into_iter()
            .enumerate()
            {
                // Per block: the mean over texts (the max for the maximum).
                let per_block = |v: &Vec<Vec<f64>>| -> Vec<f64> {
                    (0..v.first().map_or(0, Vec::len))
                        .map(|b| {
                            let col = v.iter().map(|t| t.get(b).copied().unwrap_or(f64::NAN));
                            if key == "max_abs" {
                                col.fold(0f64, f64::max)
                            } else {
                                col.sum::<f64>() / v.len() as f64
                            }
                        })
                        .collect()
                };
                let theirs: Vec<Vec<f64>> = hf[key]
                    .as_array()
                    .map(|a| a.iter().map(floats).collect())
                    .unwrap_or_default();
                let (n, p) = (per_block(&nl[i]), per_block(&theirs));
                let worst = if n.len() == p.len() && !n.is_empty() {
                    n.iter()
                        .zip(&p)
                        .map(|(x, y)| (x - y).abs() / x.abs().max(1e-30))
                        .fold(0f64, f64::max)
                } else {
                    f64::INFINITY
                };
                let agrees = worst < 1e-3;
                let stat = format!(
                    "SmolLM2: {what} after each of {} blocks ({} texts)",
                    n.len(),
                    ids.len()
                );
                let growth = |v: &[f64]| {
                    v.last().copied().unwrap_or(f64::NAN) / v.first().copied().unwrap_or(f64::NAN)
                };
                table.row(vec![
                    "C3".into(),
                    stat.clone(),
                    "-".into(),
                    format!("x{} over the blocks", f(growth(&n), 3)),
                    format!("x{} over the blocks", f(growth(&p), 3)),
                    "-".into(),
                    format!(
                        "{} (largest relative difference {worst:.1e})",
                        if agrees { "agrees" } else { "disagrees" }
                    ),
                ]);
                records.push(json!({"claim": "C3", "statistic": format!("{stat}, growth from block 0 to the last; per block within 1e-3"), "agrees": agrees,
                    "normlab": growth(&n), "torch": growth(&p), "max_relative_difference": worst,
                    "per_block": {"normlab": n, "torch": p}}));
            }
        }
    }
    Ok(notes)
}

/// The conclusion (how many statistics agree, which do not, the notes),
/// the data, the table and the figure.
fn conclude(
    out: &mut ExpResult,
    torch: &Value,
    (table, records, panels): (Table, Vec<Value>, Vec<Panel>),
    notes: &[String],
) {
    let n_agree = records.iter().filter(|r| r["agrees"] == true).count();
    let disagree: Vec<String> = records
        .iter()
        .filter(|r| r["agrees"] != true)
        .map(|r| {
            format!(
                "{} ({})",
                r["claim"].as_str().unwrap_or("?"),
                r["statistic"].as_str().unwrap_or("?")
            )
        })
        .collect();
    out.conclusion = format!(
        "{n_agree} of {} statistics agree between normlab and an independent PyTorch implementation{}.{}",
        records.len(),
        if disagree.is_empty() {
            String::new()
        } else {
            format!("; these do not: {}", disagree.join(", "))
        },
        notes.iter().map(|n| format!(" {n}.")).collect::<String>()
    );
    out.data
        .insert("torch_version".into(), torch["torch"].clone());
    out.data.insert("agreement".into(), json!(records));
    out.tables.push(table);
    out.figures.push(Figure::new("cross_check", panels, 2));
}
