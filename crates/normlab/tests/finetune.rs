//! `normlab train --from`: a pretrained model of every tiny family (the
//! Hugging Face fixtures, each given a character tokenizer of its 64-token
//! vocabulary) fine-tunes on the bundled text through the run folder every
//! run has, lowers the loss, and resumes bit-identically; SmolLM2 itself
//! when models/ holds it. Architecture options with --from are refused.

mod common;

use normlab::train::{self, RunOptions, RunOutcome, TrainConfig};
use serde_json::json;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A tokenizer.json that reads each of the text's 63 most common
/// characters as one token (ids 1..=63), anything else as `<unk>` (0).
fn char_tokenizer(vocab: usize) -> String {
    let text = String::from_utf8_lossy(normlab::io::BUNDLED_TEXT);
    let mut counts = std::collections::BTreeMap::<char, usize>::new();
    for c in text.chars() {
        *counts.entry(c).or_default() += 1;
    }
    let mut chars: Vec<(char, usize)> = counts.into_iter().collect();
    chars.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut v = serde_json::Map::new();
    v.insert("<unk>".into(), json!(0));
    for (i, (c, _)) in chars.iter().take(vocab - 1).enumerate() {
        v.insert(c.to_string(), json!(i + 1));
    }
    json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>",
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "vocab": v, "merges": []}
    })
    .to_string()
}

/// A copy of a fixture folder with a character tokenizer.
fn with_tokenizer(src: &Path, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("normlab-ft-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), d.join(f)).unwrap();
    }
    let c: serde_json::Value =
        serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    let vocab = c["vocab_size"]
        .as_u64()
        .or_else(|| c["text_config"]["vocab_size"].as_u64())
        .unwrap() as usize;
    std::fs::write(d.join("tokenizer.json"), char_tokenizer(vocab)).unwrap();
    d
}

fn config(from: &Path) -> TrainConfig {
    TrainConfig::from_overrides(
        json!({"from": from.to_str().unwrap(), "seq": 16, "steps": 6, "batch": 4, "lr": 3e-3,
               "warmup": 0, "log_every": 1, "eval_every": 3, "eval_sequences": 4})
        .as_object()
        .unwrap(),
    )
    .unwrap()
}

fn losses(c: &TrainConfig, out: &Path, stop_after: Option<usize>, resume: bool) -> Vec<u64> {
    let mut recs = Vec::new();
    let o = train::run(
        c,
        &RunOptions {
            out: Some(out.to_path_buf()),
            threads: 1,
            stop_after,
            resume,
            ..Default::default()
        },
        &mut |r, _| recs.push(r.loss.to_bits()),
    )
    .unwrap();
    if stop_after.is_none() {
        assert!(matches!(o, RunOutcome::Finished(_)), "{o:?}");
    }
    recs
}

#[test]
fn every_tiny_family_fine_tunes_and_resumes_bit_identically() {
    let mut names: Vec<String> = std::fs::read_dir(fixtures().join("hf_tiny"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| !n.ends_with("-bf16") && n != "gpt2-bare")
        .collect();
    names.sort();
    let mut dirs: Vec<(String, PathBuf)> = names
        .iter()
        .map(|n| (n.clone(), fixtures().join("hf_tiny").join(n)))
        .collect();
    dirs.push(("gemma3".into(), fixtures().join("gemma3_tiny")));
    for (name, src) in dirs {
        let from = with_tokenizer(&src, &name);
        let c = config(&from);
        assert_eq!(
            c.model.vocab,
            normlab::model::decoder::Decoder::open(&from)
                .unwrap()
                .cfg
                .vocab
        );
        let straight = from.join("straight");
        let all = losses(&c, &straight, None, false);
        assert_eq!(all.len(), 6, "{name}");
        let first = f64::from_bits(all[0]);
        let last = f64::from_bits(all[5]);
        assert!(last < first, "{name}: the loss went from {first} to {last}");
        // Stopped after 3 steps, resumed: the same bits, the same files.
        let split = from.join("split");
        losses(&c, &split, Some(3), false);
        let rest = losses(&c, &split, None, true);
        assert_eq!(&all[3..], &rest[..], "{name}: resumed losses");
        for f in ["metrics.jsonl", "checkpoint.safetensors"] {
            assert_eq!(
                std::fs::read(straight.join(f)).unwrap(),
                std::fs::read(split.join(f)).unwrap(),
                "{name}: {f}"
            );
        }
        let _ = std::fs::remove_dir_all(&from);
    }
}

#[test]
fn architecture_options_with_from_are_refused() {
    let from = fixtures().join("hf_tiny/llama");
    for (k, v) in [
        ("layers", json!(3)),
        ("norm", json!("layernorm")),
        ("rope", json!(500.0)),
    ] {
        let mut o = json!({"from": from.to_str().unwrap()});
        o[k] = v;
        let e = TrainConfig::from_overrides(o.as_object().unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("would change the architecture of the model --from reads"),
            "{k}: {e}"
        );
    }
    // Sigmoid or ReLU attention would change what every head computes
    // (keys spelled either way, as a TOML file or a grid may).
    for key in ["attn_kind", "attn-kind"] {
        let mut o = json!({"from": from.to_str().unwrap()});
        o[key] = json!("sigmoid");
        let e = TrainConfig::from_overrides(o.as_object().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot be inserted"), "{key}: {e}");
    }
    let o = json!({"from": from.to_str().unwrap(), "attn-gate": "headwise"});
    let c = TrainConfig::from_overrides(o.as_object().unwrap()).unwrap();
    assert_eq!(c.model.attn_gate, Some(normlab::nn::OutputGate::Headwise));
}

/// The output gate and the sink logit inserted by a fine-tune (`--attn-gate`,
/// `--attn-kind sink-logit` with `--from`): the gated model's first loss is
/// the model's own, bit for bit (function-preserving start), the sink
/// logit's within 1e-5; both then train apart from the plain fine-tune and
/// resume bit-identically.
#[test]
fn inserted_gates_and_sinks_fine_tune_from_the_models_own_loss() {
    for name in ["llama", "qwen2"] {
        let from = with_tokenizer(
            &fixtures().join("hf_tiny").join(name),
            &format!("ins-{name}"),
        );
        let plain = losses(&config(&from), &from.join("plain"), None, false);
        for (key, val) in [("attn_gate", "elementwise"), ("attn_kind", "sink-logit")] {
            let mut o = json!({"from": from.to_str().unwrap(), "seq": 16, "steps": 6, "batch": 4,
                               "lr": 3e-3, "warmup": 0, "log_every": 1, "eval_every": 3,
                               "eval_sequences": 4});
            o[key] = json!(val);
            let c = TrainConfig::from_overrides(o.as_object().unwrap()).unwrap();
            let dir = from.join(val);
            let got = losses(&c, &dir, None, false);
            let (a, b) = (f64::from_bits(got[0]), f64::from_bits(plain[0]));
            if key == "attn_gate" {
                assert_eq!(got[0], plain[0], "{name} {val}: first loss {a} against {b}");
            } else {
                assert!(
                    (a - b).abs() <= 1e-5 * b,
                    "{name} {val}: first loss {a} against {b}"
                );
            }
            assert_ne!(
                got[5], plain[5],
                "{name} {val}: the insertion did not train"
            );
            assert!(
                f64::from_bits(got[5]) < a,
                "{name} {val}: the loss did not fall"
            );
            let split = from.join(format!("{val}-split"));
            losses(&c, &split, Some(3), false);
            let rest = losses(&c, &split, None, true);
            assert_eq!(&got[3..], &rest[..], "{name} {val}: resumed losses");
            // The inserted parameters at a rate of their own: the same
            // first loss, another run from there, resumed bit-identically.
            // (Adam moves a parameter about lr a step: the sink logit needs
            // 3 a step to leave -20 within these 6 steps.)
            o["inserted_lr_mult"] = json!(if key == "attn_gate" { 100.0 } else { 1000.0 });
            let c = TrainConfig::from_overrides(o.as_object().unwrap()).unwrap();
            let fast = losses(&c, &from.join(format!("{val}-fast")), None, false);
            assert_eq!(fast[0], got[0], "{name} {val}");
            assert_ne!(
                fast[5], got[5],
                "{name} {val}: the multiplier changed nothing"
            );
            let split = from.join(format!("{val}-fast-split"));
            losses(&c, &split, Some(3), false);
            assert_eq!(
                &fast[3..],
                &losses(&c, &split, None, true)[..],
                "{name} {val}"
            );
        }
        // Without an insertion the multiplier has nothing to act on.
        let o = json!({"from": from.to_str().unwrap(), "inserted_lr_mult": 10.0});
        let e = TrainConfig::from_overrides(o.as_object().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("applies to what --from inserts"), "{e}");
        let _ = std::fs::remove_dir_all(&from);
    }
}

/// SmolLM2-135M fine-tunes a few steps and resumes bit-identically
/// (skipped with a message without models/; required under
/// NORMLAB_REQUIRE_MODEL=1).
#[test]
fn smollm2_fine_tunes_and_resumes() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let f = root.join("models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !f.exists() {
        common::skip::skip(
            "NORMLAB_REQUIRE_MODEL",
            "the SmolLM2 fine-tune test",
            "models/SmolLM2-135M-Instruct is missing",
            "run scripts/fetch_smollm2.sh",
        );
        return;
    }
    let c = TrainConfig::from_overrides(
        json!({"from": f.to_str().unwrap(), "seq": 32, "steps": 4, "batch": 2, "lr": 1e-4,
               "warmup": 0, "log_every": 1, "eval_every": 2, "eval_sequences": 2})
        .as_object()
        .unwrap(),
    )
    .unwrap();
    let out = std::env::temp_dir().join(format!("normlab-ft-smol-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let all = losses(&c, &out.join("a"), None, false);
    losses(&c, &out.join("b"), Some(2), false);
    let rest = losses(&c, &out.join("b"), None, true);
    assert_eq!(&all[2..], &rest[..]);
    let _ = std::fs::remove_dir_all(&out);
}
