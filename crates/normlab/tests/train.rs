//! Training: determinism across thread counts, bit-identical resume,
//! divergence as a result, run-folder safety.

mod common;

use normlab::train::{self, RunOptions, RunOutcome, StepRecord, TrainConfig, Trainer};
use serde_json::json;
use std::path::PathBuf;

fn cfg(v: serde_json::Value) -> TrainConfig {
    TrainConfig::from_overrides(v.as_object().unwrap()).unwrap()
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("normlab-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn run_collect(c: &TrainConfig, opts: &RunOptions) -> (Vec<StepRecord>, RunOutcome) {
    let mut recs = Vec::new();
    let out = train::run(c, opts, &mut |r, _| recs.push(r.clone())).unwrap();
    (recs, out)
}

/// Run `c` into `dir` on one thread, stopping with a snapshot after `step`
/// steps (`--stop-after`).
fn interrupt_at(c: &TrainConfig, dir: &std::path::Path, step: usize) {
    let (_, out) = run_collect(
        c,
        &RunOptions {
            out: Some(dir.to_path_buf()),
            threads: 1,
            stop_after: Some(step),
            ..Default::default()
        },
    );
    assert!(
        matches!(out, RunOutcome::Interrupted { step: s, .. } if s == step),
        "{out:?}"
    );
}

fn bits(recs: &[StepRecord]) -> Vec<u64> {
    recs.iter().map(|r| r.loss.to_bits()).collect()
}

/// The bytes of a finished run folder's files.
fn run_files(d: &std::path::Path) -> Vec<Vec<u8>> {
    [
        "config.json",
        "summary.json",
        "metrics.jsonl",
        "checkpoint.safetensors",
    ]
    .iter()
    .map(|f| std::fs::read(d.join(f)).unwrap())
    .collect()
}

#[test]
fn same_config_same_losses_for_1_and_2_threads() {
    for c in [
        cfg(
            json!({"model": "toy", "layers": 3, "steps": 12, "eval_every": 6, "eval_sequences": 32, "batch": 8, "shards": 2, "log_every": 1}),
        ),
        cfg(
            json!({"model": "gpt", "layers": 2, "d_model": 32, "heads": 2, "seq": 32, "hidden": 64, "steps": 6, "batch": 4, "shards": 2, "eval_every": 3, "eval_sequences": 8, "qk_norm": true, "log_every": 1}),
        ),
        cfg(
            json!({"model": "toy", "layers": 2, "steps": 6, "batch": 6, "shards": 3, "norm": "rmsnorm", "placement": "sandwich", "eval_sequences": 12}),
        ),
        // Point-wise norms and the residual options (gate gradients are
        // sums over rows, per shard).
        cfg(
            json!({"model": "toy", "layers": 4, "steps": 6, "batch": 6, "shards": 3, "norm": "dyt", "placement": "mixln", "mixln_post_layers": 1, "lns": true, "layerscale": 0.1, "eval_sequences": 12}),
        ),
        cfg(
            json!({"model": "gpt", "layers": 2, "d_model": 32, "heads": 2, "seq": 32, "hidden": 64, "steps": 4, "batch": 4, "shards": 2, "eval_sequences": 8, "norm": "derf", "placement": "none", "rezero": true}),
        ),
        // Bigram-Backcopy and a sink remover: the sink logits' gradients
        // are sums over rows, per shard.
        cfg(
            json!({"model": "gpt", "data": "bigram-backcopy", "layers": 1, "d_model": 32, "heads": 2, "seq": 32, "hidden": 64, "steps": 6, "batch": 4, "shards": 2, "eval_every": 3, "eval_sequences": 8, "log_every": 1, "attn_kind": "sink-logit"}),
        ),
        // Low-precision storage (rounding is elementwise; f16's loss scaler
        // sees the shard-summed gradient).
        cfg(
            json!({"model": "gpt", "layers": 2, "d_model": 32, "heads": 2, "seq": 32, "hidden": 64, "steps": 6, "batch": 4, "shards": 2, "eval_every": 3, "eval_sequences": 8, "dtype": "bf16", "placement": "post"}),
        ),
        cfg(
            json!({"model": "toy", "layers": 3, "steps": 8, "batch": 8, "shards": 2, "eval_sequences": 16, "dtype": "f16", "norm": "rmsnorm"}),
        ),
        // Hyper-connections: n x d streams, coefficient gradients summed
        // over rows per shard.
        cfg(
            json!({"model": "gpt", "layers": 2, "d_model": 32, "heads": 2, "seq": 32, "hidden": 64, "steps": 6, "batch": 4, "shards": 2, "eval_every": 3, "eval_sequences": 8, "hc": 4, "hc_dynamic": true, "log_every": 1}),
        ),
        cfg(
            json!({"model": "toy", "layers": 3, "steps": 6, "batch": 6, "shards": 3, "eval_sequences": 12, "hc": 3, "placement": "sandwich", "norm": "rmsnorm"}),
        ),
        // mHC: per-token maps through a GEMM, Sinkhorn per row, the head.
        cfg(
            json!({"model": "gpt", "layers": 2, "d_model": 32, "heads": 2, "seq": 32, "hidden": 64, "steps": 6, "batch": 4, "shards": 2, "eval_every": 3, "eval_sequences": 8, "mhc": 4, "log_every": 1}),
        ),
        // Attention Residuals: a bank of block sums, the depth mixes.
        cfg(
            json!({"model": "gpt", "layers": 2, "d_model": 32, "heads": 2, "seq": 32, "hidden": 64, "steps": 6, "batch": 4, "shards": 2, "eval_every": 3, "eval_sequences": 8, "attnres": 1, "log_every": 1}),
        ),
        // The attention output gate (headwise and elementwise).
        cfg(
            json!({"model": "gpt", "layers": 2, "d_model": 32, "heads": 2, "seq": 32, "hidden": 64, "steps": 6, "batch": 4, "shards": 2, "eval_every": 3, "eval_sequences": 8, "attn_gate": "headwise", "log_every": 1}),
        ),
        cfg(
            json!({"model": "gpt", "layers": 2, "d_model": 32, "heads": 2, "seq": 32, "hidden": 64, "steps": 6, "batch": 4, "shards": 2, "eval_every": 3, "eval_sequences": 8, "attn_gate": "elementwise", "qk_norm": true, "log_every": 1}),
        ),
        // SwiGLU clamped (low enough to clamp at init).
        cfg(
            json!({"model": "gpt", "layers": 2, "d_model": 32, "heads": 2, "seq": 32, "hidden": 64, "steps": 6, "batch": 4, "shards": 2, "eval_every": 3, "eval_sequences": 8, "act": "swiglu", "swiglu_clamp": 0.05, "log_every": 1}),
        ),
    ] {
        let one = run_collect(
            &c,
            &RunOptions {
                threads: 1,
                ..Default::default()
            },
        );
        let two = run_collect(
            &c,
            &RunOptions {
                threads: 2,
                ..Default::default()
            },
        );
        assert_eq!(
            bits(&one.0),
            bits(&two.0),
            "{:?} {:?}",
            c.model,
            c.model.placement
        );
        let e = |r: &[StepRecord]| {
            r.iter()
                .filter_map(|x| x.eval_loss.map(f64::to_bits))
                .collect::<Vec<_>>()
        };
        assert_eq!(e(&one.0), e(&two.0));
        assert!(one.0.len() == c.steps && one.0.iter().all(|r| r.loss.is_finite()));
    }
}

#[test]
fn resume_is_bit_identical() {
    // Default shards (gradients summed across shards), and one shard (its
    // gradient buffer is swapped with the trainer's, and the optimizer's
    // zeroing spares backward the clearing pass).
    for (shards, tag) in [(None, "sharded"), (Some(1), "one-shard")] {
        let mut v = json!({"model": "toy", "layers": 2, "steps": 20, "eval_every": 5, "eval_sequences": 16, "batch": 8, "log_every": 1});
        if let Some(n) = shards {
            v["shards"] = json!(n);
        }
        resume_matches_uninterrupted(&cfg(v), tag);
    }
    // f16: the loss scaler's state travels in the snapshot.
    resume_matches_uninterrupted(
        &cfg(
            json!({"model": "toy", "layers": 2, "steps": 20, "eval_every": 5, "eval_sequences": 16, "batch": 8, "log_every": 1, "dtype": "f16"}),
        ),
        "f16",
    );
    // Hyper-connections (dynamic): their coefficients travel with the
    // parameters and Adam's moments.
    resume_matches_uninterrupted(
        &cfg(
            json!({"model": "toy", "layers": 2, "steps": 20, "eval_every": 5, "eval_sequences": 16, "batch": 8, "log_every": 1, "hc": 4, "hc_dynamic": true}),
        ),
        "hc",
    );
    resume_matches_uninterrupted(
        &cfg(
            json!({"model": "toy", "layers": 2, "steps": 20, "eval_every": 5, "eval_sequences": 16, "batch": 8, "log_every": 1, "mhc": 3, "mhc_sinkhorn": 5}),
        ),
        "mhc",
    );
    resume_matches_uninterrupted(
        &cfg(
            json!({"model": "toy", "layers": 3, "steps": 20, "eval_every": 5, "eval_sequences": 16, "batch": 8, "log_every": 1, "attnres": 2}),
        ),
        "attnres",
    );
    resume_matches_uninterrupted(
        &cfg(
            json!({"model": "gpt", "layers": 2, "d_model": 32, "heads": 2, "seq": 32, "hidden": 64, "steps": 8, "batch": 4, "eval_every": 4, "eval_sequences": 8, "log_every": 1, "act": "swiglu", "swiglu_clamp": 0.05}),
        ),
        "swiglu-clamp",
    );
    resume_matches_uninterrupted(
        &cfg(
            json!({"model": "gpt", "layers": 2, "d_model": 32, "heads": 2, "seq": 32, "hidden": 64, "steps": 8, "batch": 4, "eval_every": 4, "eval_sequences": 8, "log_every": 1, "attn_gate": "elementwise"}),
        ),
        "attn-gate",
    );
    // Bigram-Backcopy with each attention kind: the data is a function of
    // (seed, step, index), the sink logits travel with the parameters, and
    // the logged sink measures and split held-out loss come out the same.
    for kind in ["softmax", "sink-logit", "sigmoid", "relu"] {
        resume_matches_uninterrupted(
            &cfg(
                json!({"model": "gpt", "data": "bigram-backcopy", "layers": 1, "d_model": 32, "heads": 2, "seq": 32, "hidden": 64, "steps": 8, "batch": 4, "eval_every": 4, "eval_sequences": 8, "log_every": 1, "attn_kind": kind}),
            ),
            &format!("backcopy-{kind}"),
        );
    }
}

fn resume_matches_uninterrupted(c: &TrainConfig, tag: &str) {
    let c = c.clone();
    let a = tmpdir(&format!("resume-a-{tag}"));
    let b = tmpdir(&format!("resume-b-{tag}"));
    run_collect(
        &c,
        &RunOptions {
            out: Some(a.clone()),
            threads: 2,
            ..Default::default()
        },
    );
    interrupt_at(&c, &b, 7);
    assert!(!b.join("summary.json").exists());
    let (_, out) = run_collect(
        &c,
        &RunOptions {
            out: Some(b.clone()),
            resume: true,
            threads: 2,
            ..Default::default()
        },
    );
    assert!(matches!(out, RunOutcome::Finished(_)));
    for f in ["metrics.jsonl", "checkpoint.safetensors", "config.json"] {
        assert!(
            std::fs::read(a.join(f)).unwrap() == std::fs::read(b.join(f)).unwrap(),
            "{f} differs after resume"
        );
    }
    // The snapshot's metadata holds wall-clock seconds; compare its tensors.
    let (ta, tb) = (
        std::fs::read(a.join("resume.safetensors")).unwrap(),
        std::fs::read(b.join("resume.safetensors")).unwrap(),
    );
    let (sa, sb) = (
        safetensors::SafeTensors::deserialize(&ta).unwrap(),
        safetensors::SafeTensors::deserialize(&tb).unwrap(),
    );
    for (name, view) in sa.tensors() {
        assert!(
            view.data() == sb.tensor(&name).unwrap().data(),
            "snapshot tensor {name} differs after resume"
        );
    }
    let sa = train::run::read_summary(&a).unwrap();
    let sb = train::run::read_summary(&b).unwrap();
    assert_eq!(sa.final_loss.to_bits(), sb.final_loss.to_bits());
    assert_eq!(
        sa.eval_loss.map(f64::to_bits),
        sb.eval_loss.map(f64::to_bits)
    );
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

#[test]
fn divergence_is_a_result() {
    let c = cfg(
        json!({"model": "toy", "layers": 4, "norm": "none", "lr": 50.0, "steps": 200, "batch": 8, "eval_sequences": 8}),
    );
    let (recs, out) = run_collect(
        &c,
        &RunOptions {
            threads: 1,
            ..Default::default()
        },
    );
    let RunOutcome::Finished(s) = out else {
        panic!("not finished")
    };
    assert_eq!(s.status, train::Status::Diverged);
    let k = s.diverged_at_step.expect("diverged step");
    assert!(k <= 200 && recs.last().unwrap().step == k);
    assert!(s.eval_loss.is_none());
}

#[test]
fn existing_run_folder_is_left_untouched() {
    let c = cfg(json!({"model": "toy", "layers": 1, "steps": 3, "batch": 4, "eval_sequences": 4}));
    let d = tmpdir("untouched");
    run_collect(
        &c,
        &RunOptions {
            out: Some(d.clone()),
            threads: 1,
            ..Default::default()
        },
    );
    let before = run_files(&d);
    let err = train::run(
        &c,
        &RunOptions {
            out: Some(d.clone()),
            threads: 1,
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("already holds a run"), "{err}");
    let after = run_files(&d);
    assert_eq!(before, after);
    // A corrupt resume snapshot is a clear error, not a panic.
    std::fs::write(d.join("resume.safetensors"), b"not a snapshot").unwrap();
    let err = train::run(
        &c,
        &RunOptions {
            out: Some(d.clone()),
            resume: true,
            threads: 1,
            steps_override: Some(5),
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("not a valid safetensors"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A folder written before the resume snapshot (weights in
/// checkpoint.safetensors, Adam moments and progress in
/// optimizer.safetensors) still resumes, bit-identically.
#[test]
fn legacy_run_folders_resume() {
    use safetensors::tensor::{serialize, Dtype, TensorView};
    let c = cfg(
        json!({"model": "toy", "layers": 1, "steps": 12, "batch": 4, "eval_sequences": 4, "eval_every": 4, "log_every": 2}),
    );
    let (a, b) = (tmpdir("legacy-a"), tmpdir("legacy-b"));
    run_collect(
        &c,
        &RunOptions {
            out: Some(a.clone()),
            threads: 1,
            ..Default::default()
        },
    );
    interrupt_at(&c, &b, 5);
    // Rewrite b's snapshot as the old pair of files.
    let snap = std::fs::read(b.join("resume.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&snap).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&snap).unwrap();
    let state: serde_json::Value =
        serde_json::from_str(&meta.metadata().as_ref().unwrap()["normlab_resume"]).unwrap();
    let moments: Vec<(String, TensorView)> = st
        .tensors()
        .into_iter()
        .filter(|(n, _)| n.starts_with("m.") || n.starts_with("v."))
        .map(|(n, v)| {
            (
                n,
                TensorView::new(Dtype::F32, v.shape().to_vec(), v.data()).unwrap(),
            )
        })
        .collect();
    let mut m = std::collections::HashMap::new();
    m.insert(
        "normlab_optimizer".to_string(),
        json!({"adam_t": state["adam_t"], "progress": state["progress"]}).to_string(),
    );
    std::fs::write(
        b.join("optimizer.safetensors"),
        serialize(moments, Some(m)).unwrap(),
    )
    .unwrap();
    std::fs::remove_file(b.join("resume.safetensors")).unwrap();
    let (_, out) = run_collect(
        &c,
        &RunOptions {
            out: Some(b.clone()),
            resume: true,
            threads: 1,
            ..Default::default()
        },
    );
    assert!(matches!(out, RunOutcome::Finished(_)));
    for f in ["metrics.jsonl", "checkpoint.safetensors"] {
        assert!(
            std::fs::read(a.join(f)).unwrap() == std::fs::read(b.join(f)).unwrap(),
            "{f} differs after resuming a legacy folder"
        );
    }
    assert!(
        !b.join("optimizer.safetensors").exists(),
        "the snapshot replaces the legacy file"
    );
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

/// A second writer on a run folder is refused while the first holds it.
#[test]
fn one_writer_per_run_folder() {
    let d = tmpdir("locked");
    let held = train::RunLock::acquire(&d).unwrap();
    assert!(train::RunLock::try_acquire(&d).unwrap().is_none());
    let c = cfg(json!({"model": "toy", "layers": 1, "steps": 2, "batch": 2, "eval_sequences": 2}));
    let err = train::run(
        &c,
        &RunOptions {
            out: Some(d.clone()),
            threads: 1,
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("another normlab process is writing"), "{err}");
    assert!(!d.join("config.json").exists());
    drop(held);
    assert!(train::RunLock::try_acquire(&d).unwrap().is_some());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn pointwise_and_gate_diagnostics_follow_their_parameters() {
    let run = |extra: serde_json::Value| {
        let mut v = json!({"model": "toy", "layers": 3, "steps": 8, "batch": 8, "eval_sequences": 8, "log_every": 1, "lr": 0.01, "norm": "dyt"});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        run_collect(&cfg(v), &RunOptions::default()).0
    };
    // 3 blocks x 2 pre-norms + the final norm = 7 point-wise norms.
    let small = run(json!({"dyt_alpha": 0.01, "rezero": true}));
    let big = run(json!({"dyt_alpha": 1000.0, "layerscale": 0.5}));
    for (recs, alpha0) in [(&small, 0.01), (&big, 1000.0)] {
        let first = &recs[0];
        assert_eq!(first.norm_alpha.len(), 7);
        assert_eq!(first.norm_saturation.len(), 7);
        assert_eq!(first.gate.len(), 6);
        // Step 1's record is taken before its update: the initial alpha.
        assert!(first.norm_alpha.iter().all(|&a| (a - alpha0).abs() < 1e-6));
        assert!(first
            .norm_saturation
            .iter()
            .all(|&s| (0.0..=1.0).contains(&s)));
        // Training moves alpha.
        let last = recs.last().unwrap();
        assert!(last
            .norm_alpha
            .iter()
            .zip(&first.norm_alpha)
            .any(|(a, b)| a != b));
    }
    // The stream starts at the embeddings' scale (init std 0.02): tanh(0.01 x)
    // is linear there, tanh(1000 x) saturated.
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    assert!(mean(&small[0].norm_saturation) < 0.01);
    assert!(mean(&big[0].norm_saturation) > 0.5);
    // ReZero starts at 0 and leaves it; LayerScale starts at its init.
    assert!(small[0].gate.iter().all(|&g| g == 0.0));
    assert!(small.last().unwrap().gate.iter().any(|&g| g != 0.0));
    assert!(big[0].gate.iter().all(|&g| (g - 0.5).abs() < 1e-6));
    // No point-wise norm, no gate: nothing logged.
    let plain = run(json!({"norm": "layernorm"}));
    assert!(plain[0].norm_alpha.is_empty() && plain[0].gate.is_empty());
}

#[test]
fn runs_recorded_by_pytorch_are_read_leniently_and_never_resumed() {
    let d = tmpdir("pytorch_source");
    std::fs::create_dir_all(&d).unwrap();
    // What normlab's Python RunLogger writes: its own keys, the user's
    // (one unknown, one with a value normlab refuses), and the marker.
    let cfg = json!({"source": "pytorch", "model": "gpt", "layers": 5, "lr": 0.003,
        "placement": "pre", "norm": "rmsnorm", "warmup": "not a number", "tokenizer": "bpe",
        "pytorch_model": "Llama"});
    std::fs::write(d.join("config.json"), cfg.to_string()).unwrap();
    let (c, source) = train::run::read_run_config(&d).unwrap();
    assert_eq!(source.as_deref(), Some("pytorch"));
    assert_eq!(c.model.layers, 5);
    assert_eq!(c.lr, 0.003);
    assert_eq!(c.model.norm.name(), "rmsnorm");
    assert_eq!(
        c.warmup,
        TrainConfig::defaults(normlab::model::ModelKind::Gpt).warmup
    );
    let e = train::run::read_config(&d).unwrap_err().to_string();
    assert!(e.contains("cannot train or resume"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn metric_lines_with_non_finite_values_are_read_back() {
    // serde_json writes NaN and inf as null; a diverging run's lines must
    // still be read (as NaN), not dropped.
    use normlab::train::folder::read_metrics;
    use normlab::train::StepRecord;
    let dir = std::env::temp_dir().join(format!("normlab-nan-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rec = StepRecord {
        step: 3,
        loss: f64::NAN,
        lr: 1e-3,
        grad_norm: f64::INFINITY,
        grad_norm_per_block: vec![1.0, f64::NAN],
        residual_rms: vec![f64::INFINITY, 2.0],
        update_ratio: Some(f64::NAN),
        update_ratio_per_block: vec![f64::NAN],
        eval_loss: None,
        eval_loss_copy: None,
        eval_loss_bigram: None,
        attn_max_logit: vec![f64::NAN],
        attn_entropy: vec![],
        attn_sink: vec![f64::NAN],
        stream_max: vec![f64::INFINITY],
        stream_max_ratio: vec![f64::NAN],
        stream_max_position: vec![3],
        ffn_max: vec![f64::NAN],
        f16_overflow: vec![3],
        norm_alpha: vec![],
        norm_saturation: vec![],
        gate: vec![],
        loss_scale: Some(65536.0),
        skipped_steps: Some(1),
        // A diverged hyper-connection run: its gains are NaN too.
        streams: Some(normlab::model::StreamStats {
            read: vec![vec![f64::NAN, 0.5]],
            gain_fwd_max: f64::INFINITY,
            ..Default::default()
        }),
        sinks: Some(normlab::model::sinks::SinkStats {
            head_share: vec![vec![f64::NAN, 0.5]],
            massive0: vec![f64::INFINITY],
            ..Default::default()
        }),
    };
    let ok = StepRecord {
        step: 4,
        loss: 1.5,
        ..rec.clone()
    };
    let text = format!(
        "{}\n{}\n",
        serde_json::to_string(&rec).unwrap(),
        serde_json::to_string(&ok).unwrap()
    );
    assert!(text.contains("null"), "{text}");
    std::fs::write(dir.join("metrics.jsonl"), text).unwrap();
    let back = read_metrics(&dir);
    assert_eq!(back.len(), 2, "a line with NaN values was dropped");
    assert!(back[0].loss.is_nan() && back[0].grad_norm.is_nan());
    assert!(back[0].grad_norm_per_block[1].is_nan() && back[0].grad_norm_per_block[0] == 1.0);
    assert!(back[0].residual_rms[0].is_nan() && back[1].loss == 1.5);
    let st = back[0].streams.as_ref().unwrap();
    assert!(st.read[0][0].is_nan() && st.read[0][1] == 0.5 && st.gain_fwd_max.is_nan());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn low_precision_storage_rounds_and_f16_scales_the_loss() {
    use normlab::precision::Dtype;
    use normlab::train::LossScaler;
    // The same run in f32, bf16, f16: the rounding changes the numbers
    // (bf16 by more than f16: 8 significant bits against 11), all train.
    let base = json!({"model": "toy", "layers": 3, "steps": 150, "batch": 8, "eval_every": 150, "eval_sequences": 32, "log_every": 1, "lr": 3e-3});
    let run = |t: &str| {
        let mut v = base.clone();
        v["dtype"] = json!(t);
        run_collect(&cfg(v), &RunOptions::default()).0
    };
    let (f32r, bf, h) = (run("f32"), run("bf16"), run("f16"));
    let gap = |a: &[StepRecord], b: &[StepRecord]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x.loss - y.loss).abs())
            .fold(0f64, f64::max)
    };
    assert!(gap(&f32r, &bf) > 0.0 && gap(&f32r, &h) > 0.0);
    assert!(
        gap(&f32r, &bf) > gap(&f32r, &h),
        "bf16 {} vs f16 {}",
        gap(&f32r, &bf),
        gap(&f32r, &h)
    );
    for r in [&f32r, &bf, &h] {
        let tail = r[r.len() - 10..].iter().map(|x| x.loss).sum::<f64>() / 10.0;
        assert!(tail < 0.8 * r[0].loss, "{tail} vs {}", r[0].loss);
    }
    assert!(
        f32r.iter().all(|r| r.loss_scale.is_none()) && bf.iter().all(|r| r.loss_scale.is_none())
    );
    assert!(h
        .iter()
        .all(|r| r.loss_scale == Some(LossScaler::INIT) && r.skipped_steps == Some(0)));
    // The scaler: an overflowed gradient is dropped and the scale halved;
    // a finite one is unscaled exactly; 2000 good steps double the scale.
    let mut sc = LossScaler::new();
    let mut g = vec![1.0f32, f32::INFINITY, 3.0];
    assert!(!sc.update(&mut g));
    assert_eq!(
        (g, sc.scale, sc.skipped),
        (vec![0.0; 3], LossScaler::INIT / 2.0, 1)
    );
    let mut g = vec![sc.scale as f32 * 0.375, -(sc.scale as f32)];
    assert!(sc.update(&mut g));
    assert_eq!(g, vec![0.375, -1.0]);
    for _ in 1..LossScaler::GROWTH_INTERVAL {
        assert!(sc.update(&mut [1.0]));
    }
    assert_eq!((sc.scale, sc.good), (LossScaler::INIT, 0));
    // Rounding in place: as the 16-bit kernels store values.
    let mut v = vec![1.0f32 + 1.0 / 512.0, 70000.0, 1e-30];
    Dtype::F16.round_in_place(&mut v);
    assert_eq!(v[0], 1.0 + 1.0 / 512.0);
    assert!(v[1].is_infinite() && v[2] == 0.0);
    let mut v = vec![1.0f32 + 1.0 / 512.0];
    Dtype::Bf16.round_in_place(&mut v);
    assert_eq!(v[0], 1.0);
}

#[test]
fn no_beta_keeps_every_norm_bias_at_zero() {
    use normlab::kernels::norm::ParamRole;
    for norm in ["dyt", "layernorm"] {
        let betas = |no_beta: bool| {
            let c = cfg(
                json!({"model": "toy", "layers": 2, "steps": 5, "batch": 8, "lr": 0.01, "norm": norm, "no_beta": no_beta}),
            );
            let mut t = Trainer::new(&c, 1).unwrap();
            for _ in 0..5 {
                t.train_step(false);
            }
            let refs: Vec<_> = t
                .model
                .norms()
                .filter_map(|s| s.norm.param(ParamRole::Bias))
                .collect();
            assert_eq!(refs.len(), 5, "{norm}: 2 blocks x 2 norms + final");
            refs.iter()
                .flat_map(|r| r.get(&t.params).to_vec())
                .collect::<Vec<f32>>()
        };
        assert!(
            betas(true).iter().all(|&b| b == 0.0),
            "{norm}: a frozen beta moved"
        );
        assert!(
            betas(false).iter().any(|&b| b != 0.0),
            "{norm}: beta never trains"
        );
    }
}

/// A snapshot with a NaN weight (a damaged file: a diverged run writes no
/// snapshot) is refused on resume instead of resuming into "diverged"
/// (by its checksum; a snapshot without one by its non-finite values).
#[test]
fn a_snapshot_with_non_finite_values_is_refused() {
    let c = cfg(
        json!({"model": "toy", "layers": 1, "steps": 12, "batch": 4, "eval_sequences": 4, "eval_every": 4, "log_every": 2}),
    );
    let d = tmpdir("nan-snapshot");
    interrupt_at(&c, &d, 4);
    let path = d.join("resume.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    let header = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let at = 8 + header;
    bytes[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let resume = || {
        train::run(
            &c,
            &RunOptions {
                out: Some(d.clone()),
                resume: true,
                threads: 1,
                ..Default::default()
            },
            &mut |_, _| {},
        )
        .unwrap_err()
    };
    let err = resume();
    assert!(err.is_bad_input(), "{err}");
    // The snapshot's checksum catches the change first...
    assert!(err.to_string().contains("checksum"), "{err}");
    // ...and in a snapshot without one (written before checksums), the
    // non-finite check.
    common::run_folder::without_checksum(&path, "normlab_resume");
    let err = resume();
    assert!(err.is_bad_input(), "{err}");
    assert!(err.to_string().contains("non-finite"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Resuming a run whose metrics.jsonl is damaged keeps every readable
/// record, leaves the file as it was beside it (`metrics.jsonl.damaged`),
/// and goes on; a missing file loses only its own records.
#[test]
fn resume_keeps_what_a_damaged_history_still_holds() {
    let c = cfg(
        json!({"model": "toy", "layers": 2, "steps": 12, "eval_every": 6, "eval_sequences": 16, "batch": 8, "log_every": 1}),
    );
    let resume = |d: &std::path::Path| {
        let (_, out) = run_collect(
            &c,
            &RunOptions {
                out: Some(d.to_path_buf()),
                resume: true,
                threads: 1,
                ..Default::default()
            },
        );
        assert!(matches!(out, RunOutcome::Finished(_)), "{out:?}");
    };
    let steps_of = |d: &std::path::Path| -> Vec<usize> {
        train::folder::read_metrics(d)
            .iter()
            .map(|r| r.step)
            .collect()
    };
    // A line that is not UTF-8 in the middle (a torn or foreign write).
    let d = tmpdir("damaged-metrics");
    interrupt_at(&c, &d, 6);
    let path = d.join("metrics.jsonl");
    let mut bytes = std::fs::read(&path).unwrap();
    let cut = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
    bytes.splice(cut..cut, b"\xff\xfe not a record\n".iter().copied());
    std::fs::write(&path, &bytes).unwrap();
    resume(&d);
    assert_eq!(
        std::fs::read(d.join("metrics.jsonl.damaged")).unwrap(),
        bytes
    );
    let steps = steps_of(&d);
    assert_eq!(steps.iter().filter(|&&s| s <= 6).count(), 6, "{steps:?}");
    assert_eq!(steps.last(), Some(&12));
    let _ = std::fs::remove_dir_all(&d);
    // The file gone: the resumed run logs from where it resumed.
    let d = tmpdir("missing-metrics");
    interrupt_at(&c, &d, 6);
    std::fs::remove_file(d.join("metrics.jsonl")).unwrap();
    resume(&d);
    let steps = steps_of(&d);
    assert!(
        steps.iter().all(|&s| s > 6) && steps.last() == Some(&12),
        "{steps:?}"
    );
    let _ = std::fs::remove_dir_all(&d);
    // A FIFO in its place is not waited on: read as a missing file.
    let d = tmpdir("fifo-metrics");
    interrupt_at(&c, &d, 6);
    std::fs::remove_file(d.join("metrics.jsonl")).unwrap();
    let fifo = std::ffi::CString::new(d.join("metrics.jsonl").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    if unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) } == 0 {
        let (tx, rx) = std::sync::mpsc::channel();
        let (c2, d2) = (c.clone(), d.clone());
        std::thread::spawn(move || {
            let (_, out) = run_collect(
                &c2,
                &RunOptions {
                    out: Some(d2),
                    resume: true,
                    threads: 1,
                    ..Default::default()
                },
            );
            let _ = tx.send(matches!(out, RunOutcome::Finished(_)));
        });
        // hang bound: 120 s (idle: 0.2 s)
        let done = rx.recv_timeout(std::time::Duration::from_secs(120));
        assert_eq!(done, Ok(true), "the resume hangs on a FIFO or fails");
        assert_eq!(steps_of(&d).last(), Some(&12));
    }
    let _ = std::fs::remove_dir_all(&d);
}
