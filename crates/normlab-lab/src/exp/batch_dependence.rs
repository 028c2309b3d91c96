//! batch-dependence (claim C7): why not BatchNorm in language models? One
//! token's normalised output when the other sequences of its batch change,
//! when padding is added and when the batch is a single generated token;
//! BatchNorm's training and evaluation modes; LayerNorm and RMSNorm beside.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{result, ExpResult, Experiment, Progress};
use crate::present::{f, Figure, Heatmap, Panel, Table};
use normlab::error::Result;
use normlab::kernels::norm::{BatchNorm, NormKind};
use normlab::kernels::rng::Rng;
use normlab::nn::norm::normalise_rows;
use normlab::params::sum_squares;
use serde_json::json;

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "batch-dependence",
    question: "Why not BatchNorm in language models?",
    flags: &[ExpFlag::DModel, ExpFlag::Rows, ExpFlag::Seed],
    run,
    grid: None,
    hidden_training: None,
    quick_decides: true,
};

/// batch-dependence: one token's normalised output when the rest of its
/// batch changes.
fn run(a: &ExpArgs, _progress: Progress) -> Result<ExpResult> {
    let s = setting(a)?;
    let inputs = batches(&s);
    let m = measure(&s, &inputs);
    Ok(report(&s, &inputs, m))
}

/// What is normalised: feature width, sequences and positions of a batch,
/// the seed, and the tracked token's position in sequence 0.
struct Setting {
    d: usize,
    seqs: usize,
    t: usize,
    seed: u64,
    tracked: usize,
}

/// The setting from the flags, after checking the memory it needs.
fn setting(a: &ExpArgs) -> Result<Setting> {
    let d = a.d_model.unwrap_or(64);
    let seqs = a.rows.unwrap_or(8).max(2);
    let t = 16;
    let seed = a.seed.unwrap_or(0);
    normlab::limits::check_memory(
        normlab::limits::f32_bytes(16.0 * (seqs * t * d) as f64),
        &format!("batch-dependence ({seqs} sequences of {t} x {d})"),
    )?;
    let tracked = 5; // sequence 0, position 5
    Ok(Setting {
        d,
        seqs,
        t,
        seed,
        tracked,
    })
}

/// The batches the tracked token is normalised in, and BatchNorm's
/// parameters and running statistics.
struct Inputs {
    base: Vec<f32>,
    replaced: Vec<f32>,
    padded: Vec<f32>,
    single: Vec<f32>,
    bn_params: Vec<f32>,
    bn_state: BatchNorm,
}

/// BatchNorm in training mode on `x` (its own batch statistics).
fn bn_train(x: &[f32], bn_params: &[f32], bn: &mut BatchNorm) -> Vec<f32> {
    let mut y = vec![0.0; x.len()];
    bn.forward_train(x, bn_params, &mut y);
    y
}

/// The baseline batch, the same with the other sequences replaced, with
/// padding, and a batch of the tracked token alone; BatchNorm's running
/// statistics as after training on batches like the baseline.
fn batches(s: &Setting) -> Inputs {
    let (d, seqs, t, tracked) = (s.d, s.seqs, s.t, s.tracked);
    let mut rng = Rng::derive(s.seed, "batch-dependence");
    // Each sequence has its own feature offsets (sequences differ, as texts do).
    let make_seq = |rng: &mut Rng| -> Vec<f32> {
        let off = rng.normal_vec(d, 0.0, 1.0);
        let mut v = rng.normal_vec(t * d, 0.0, 1.0);
        for (i, x) in v.iter_mut().enumerate() {
            *x += off[i % d];
        }
        v
    };
    let batch: Vec<Vec<f32>> = (0..seqs).map(|_| make_seq(&mut rng)).collect();
    let flat = |b: &[Vec<f32>]| b.concat();
    let base = flat(&batch);
    let mut others = vec![batch[0].clone()];
    others.extend((1..seqs).map(|_| make_seq(&mut rng)));
    let replaced = flat(&others);
    let mut padded = base.clone();
    padded.extend(std::iter::repeat_n(0.0, seqs * 4 * d)); // 4 padding positions per sequence
    let single = batch[0][tracked * d..(tracked + 1) * d].to_vec();
    let bn_params = {
        let mut p = vec![0.0; 2 * d];
        NormKind::BatchNorm.init_params(d, &mut p);
        p
    };
    // Running statistics as after training on batches like the baseline.
    let mut bn_state = BatchNorm::new(d, 1e-5);
    for _ in 0..50 {
        let b: Vec<f32> = (0..seqs).flat_map(|_| make_seq(&mut rng)).collect();
        bn_train(&b, &bn_params, &mut bn_state);
    }
    Inputs {
        base,
        replaced,
        padded,
        single,
        bn_params,
        bn_state,
    }
}

/// The norms compared, in table and figure order.
const KINDS: [&str; 4] = [
    "batchnorm (train mode)",
    "batchnorm (eval mode)",
    "layernorm",
    "rmsnorm",
];

/// The scenarios, in table and figure order.
const SCENARIOS: [&str; 3] = [
    "other sequences replaced",
    "padding added",
    "batch of one generated token",
];

/// What was measured: the table, one record per (norm, scenario), and
/// BatchNorm's relative train/eval mismatch on the same batch.
struct Measured {
    table: Table,
    records: Vec<serde_json::Value>,
    mrel: f64,
}

/// The largest absolute difference of two outputs, and that relative to
/// the first one's size.
fn diff(u: &[f32], v: &[f32]) -> (f64, f64) {
    let m = u
        .iter()
        .zip(v)
        .fold(0f64, |m, (a, b)| m.max((a - b).abs() as f64));
    let n = sum_squares(u).sqrt();
    (m, m / n.max(1e-30))
}

/// The tracked token's output under each norm and scenario against its
/// output in the baseline batch; BatchNorm's train/eval mismatch.
fn measure(s: &Setting, inp: &Inputs) -> Measured {
    let (d, tracked) = (s.d, s.tracked);
    let row = |x: &[f32], r: usize| x[r * d..(r + 1) * d].to_vec();
    let bn_params = &inp.bn_params;
    let mut bn_eval = |x: &[f32]| {
        let mut y = vec![0.0; x.len()];
        let mut s = inp.bn_state.clone();
        s.forward_eval(x, bn_params, &mut y);
        y
    };
    let mut table = Table::new(
        "Change of the tracked token's output (sequence 0, position 5) against its output in the original batch",
        &["norm", "scenario", "max |change|", "relative to |output|"],
    );
    let mut records = Vec::new();
    let scenarios: [(&str, &[f32], usize); 3] = [
        (SCENARIOS[0], &inp.replaced, tracked),
        (SCENARIOS[1], &inp.padded, tracked),
        (SCENARIOS[2], &inp.single, 0),
    ];
    for kind in KINDS {
        let apply = |x: &[f32], eval: &mut dyn FnMut(&[f32]) -> Vec<f32>| -> Vec<f32> {
            match kind {
                "layernorm" => normalise_rows(NormKind::LayerNorm, d, x),
                "rmsnorm" => normalise_rows(NormKind::RmsNorm, d, x),
                "batchnorm (train mode)" => bn_train(x, bn_params, &mut BatchNorm::new(d, 1e-5)),
                _ => eval(x),
            }
        };
        let reference = row(&apply(&inp.base, &mut bn_eval), tracked);
        for (name, x, r) in scenarios {
            let out = row(&apply(x, &mut bn_eval), r);
            let (m, rel) = diff(&reference, &out);
            table.row(vec![kind.into(), name.into(), f(m, 4), f(rel, 4)]);
            records
                .push(json!({"norm": kind, "scenario": name, "max_abs_diff": m, "rel_diff": rel}));
        }
    }
    // Train/inference mismatch of BatchNorm on the same batch.
    let train_out = row(
        &bn_train(&inp.base, bn_params, &mut BatchNorm::new(d, 1e-5)),
        tracked,
    );
    let eval_out = row(&bn_eval(&inp.base), tracked);
    let (mm, mrel) = diff(&train_out, &eval_out);
    table.row(vec![
        "batchnorm".into(),
        "train mode vs eval mode, same batch".into(),
        f(mm, 4),
        f(mrel, 4),
    ]);
    records.push(json!({"norm": "batchnorm", "scenario": "train vs eval mode", "max_abs_diff": mm, "rel_diff": mrel}));
    Measured {
        table,
        records,
        mrel,
    }
}

/// The heatmap, the conclusion, claim C7's verdict and the result.
fn report(s: &Setting, inp: &Inputs, m: Measured) -> ExpResult {
    let (d, seqs, t, seed) = (s.d, s.seqs, s.t, s.seed);
    let Measured {
        table,
        records,
        mrel,
    } = m;
    let kinds_order = KINDS;
    let scen: Vec<&str> = SCENARIOS.to_vec();
    let values: Vec<Vec<Option<f64>>> = kinds_order
        .iter()
        .map(|k| {
            scen.iter()
                .map(|s| {
                    records
                        .iter()
                        .find(|r| r["norm"] == *k && r["scenario"] == *s)
                        .and_then(|r| r["rel_diff"].as_f64())
                })
                .collect()
        })
        .collect();
    let row = |x: &[f32], r: usize| x[r * d..(r + 1) * d].to_vec();
    let single_bn = row(
        &bn_train(&inp.single, &inp.bn_params, &mut BatchNorm::new(d, 1e-5)),
        0,
    );
    let single_zero = single_bn.iter().all(|&v| v == 0.0);
    let mut out = result(
        json!({"d": d, "sequences": seqs, "positions": t, "padding_positions_per_sequence": 4, "tracked": "sequence 0, position 5"}),
        vec![seed],
    );
    out.data.insert("results".into(), json!(records));
    out.figures.push(Figure {
        stem: "batch_dependence".into(),
        panels: vec![Panel::Heat(Heatmap {
            title: "change of one token's output".into(),
            x_labels: vec![
                "others replaced".into(),
                "padding".into(),
                "batch of one".into(),
            ],
            y_labels: kinds_order.iter().map(|s| s.to_string()).collect(),
            marks: vec![vec![String::new(); 3]; 4],
            values,
            value_label: "|change| / |output|".into(),
            x_title: "what the batch does to the token".into(),
            y_title: "norm".into(),
        })],
        cols: 1,
    });
    out.data.insert(
        "single_token_batchnorm_output_is_all_zero".into(),
        json!(single_zero),
    );
    let get = |k: &str, s: &str| {
        records
            .iter()
            .find(|r| r["norm"] == k && r["scenario"] == s)
            .map(|r| r["rel_diff"].as_f64().unwrap())
            .unwrap_or(f64::NAN)
    };
    let ln_max = records
        .iter()
        .filter(|r| r["norm"] == "layernorm" || r["norm"] == "rmsnorm")
        .map(|r| r["max_abs_diff"].as_f64().unwrap())
        .fold(0.0, f64::max);
    out.conclusion = format!(
        "Under BatchNorm in training mode the tracked token's output moved by {} of its size when the other sequences changed and by {} when padding was added; a batch of one generated token {}. In eval mode BatchNorm is row-independent but differs from its own training-mode output by {}. LayerNorm and RMSNorm changed by at most {} in every scenario: a token's output depends on that token alone.",
        f(get("batchnorm (train mode)", "other sequences replaced"), 3),
        f(get("batchnorm (train mode)", "padding added"), 3),
        if single_zero { "normalises to exactly zero (no batch statistics)".to_string() } else { format!("changes by {}", f(get("batchnorm (train mode)", "batch of one generated token"), 3)) },
        f(mrel, 3),
        if ln_max == 0.0 { "exactly 0".to_string() } else { format!("at most {}", f(ln_max, 3)) }
    );
    // C7: all three failure modes, and none for the row-wise norms.
    let (others, padding) = (
        get("batchnorm (train mode)", "other sequences replaced"),
        get("batchnorm (train mode)", "padding added"),
    );
    let c7 = others > 1e-3 && padding > 1e-3 && single_zero && mrel > 1e-3 && ln_max == 0.0;
    out.checks.push(ClaimCheck::new(
        "C7",
        if c7 { Verdict::Holds } else { Verdict::Partly },
        format!(
            "in training mode a token's BatchNorm output moved by {} of its size when the other sequences changed and by {} with padding; a batch of one token {}; training and evaluation modes differ by {} on the same batch; LayerNorm and RMSNorm outputs changed by {} in every case.",
            f(others, 3),
            f(padding, 3),
            if single_zero { "normalises to exactly 0 (no statistics)" } else { "does not normalise to 0" },
            f(mrel, 3),
            if ln_max == 0.0 { "exactly 0".to_string() } else { f(ln_max, 3) }
        ),
    ));
    out.tables.push(table);
    out
}
