//! End-to-end tests of the `normlab` binary that need what a newcomer may
//! lack: the pretrained model files (inspect, generate) and a tiny tmpfs
//! for the full-disk case (root). Each skips with a one-line message naming
//! how to get what it needs, unless the matching `NORMLAB_REQUIRE_*` switch
//! is set (as CI sets them). The rest of the binary's tests are in `cli.rs`.

mod common;

use common::{json, normlab};
use std::process::Command;

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("normlab-cli-env-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `models/<rel>` of the checkout when `models/<probe>` is there; else
/// None after saying the test skips (an error when NORMLAB_REQUIRE_MODEL
/// is set, as in CI).
fn model_or_skip(rel: &str, probe: &str, test: &str, fetch: &str) -> Option<std::path::PathBuf> {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models");
    if root.join(probe).exists() {
        return Some(root.join(rel));
    }
    common::skip::skip(
        "NORMLAB_REQUIRE_MODEL",
        test,
        &format!("models/{probe} is missing"),
        &format!("run scripts/{fetch}"),
    );
    None
}

const SMOLLM2: &str = "SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf";

#[test]
fn inspect_a_pretrained_encoder() {
    let Some(model) = model_or_skip(
        "all-MiniLM-L6-v2",
        "all-MiniLM-L6-v2/model.safetensors",
        "inspect_a_pretrained_encoder",
        "fetch_minilm.sh",
    ) else {
        return;
    };
    let v = json(&[
        "inspect",
        model.to_str().unwrap(),
        "--text",
        "The quick brown fox.",
        "--json",
    ]);
    let norms = v["norms"].as_array().unwrap();
    assert_eq!(norms.len(), 13);
    assert!(norms[1]["write_over_stream"].as_f64().unwrap() > 0.0);
    let o = normlab(&["inspect", "/nonexistent"]);
    assert_eq!(o.status.code(), Some(2));
}

/// `normlab inspect MODEL --json` on one sentence and 64 held-out tokens.
fn inspect_decoder(model: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "inspect",
        model.to_str().unwrap(),
        "--text",
        "The quick brown fox jumps over the lazy dog.",
        "--held-out-tokens",
        "64",
        "--json",
    ];
    args.extend_from_slice(extra);
    json(&args)
}

#[test]
fn inspect_a_pretrained_pre_rmsnorm_decoder() {
    let test = "inspect_a_pretrained_pre_rmsnorm_decoder";
    let Some(model) = model_or_skip(SMOLLM2, SMOLLM2, test, "fetch_smollm2.sh") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("normlab-inspect-llama-{}", std::process::id()));
    let v = inspect_decoder(&model, &["--out", dir.to_str().unwrap()]);
    let blocks = v["blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), 30);
    let f = |b: &serde_json::Value, k: &str| b[k].as_f64().unwrap();
    // The Pre-LN stream grows with depth; every block writes something.
    assert!(f(&blocks[20], "rms_in") > 2.0 * f(&blocks[0], "rms_in"));
    // ... by the lesson's metric too, and for the median token.
    assert!(f(&blocks[20], "row_norm_out") > 2.0 * f(&blocks[0], "row_norm_out"));
    assert!(f(&blocks[20], "row_norm_median_out") > 2.0 * f(&blocks[0], "row_norm_median_out"));
    // One token's massive activation: larger than the mean token norm
    // where it sits (one element of one token outweighs whole tokens).
    let ma = &v["claims"]["massive"];
    assert!(f(ma, "value") >= f(&blocks[20], "max_abs"));
    assert!(f(ma, "over_mean_token_norm") > 1.0);
    assert!(blocks
        .iter()
        .all(|b| f(b, "attn_write") > 0.0 && f(b, "mlp_write") > 0.0));
    // The head is trained on normalised states: removing the final norm hurts.
    let fin = &v["final_norm"];
    assert!(f(fin, "loss_without") > f(fin, "loss_with"));
    assert_eq!(fin["tokens"].as_u64(), Some(64));
    // The lesson's claims on the model: the stream grows; a LayerNorm in
    // place of the RMSNorm it was trained with does not help.
    let cl = &v["claims"];
    assert!(f(cl, "growth_total") > 1.0);
    // A trained model's rows sit far above eps, where taking eps out
    // changes nothing.
    assert!(f(cl, "ms_min_over_eps") > 100.0);
    assert!((f(cl, "loss_without_eps") - f(fin, "loss_with")).abs() < 1e-3);
    assert!(f(cl, "loss_layernorm") >= 0.99 * f(fin, "loss_with"));
    assert!(dir.join("residual_rms.png").exists() && dir.join("residual_rms.svg").exists());
    let _ = std::fs::remove_dir_all(&dir);
    let o = normlab(&["inspect", "/nonexistent.gguf"]);
    assert_ne!(o.status.code(), Some(0));
}

const GEMMA3: &str = "gemma-3-270m/gemma-3-270m-q4_k_m.gguf";

#[test]
fn inspect_a_pretrained_sandwich_decoder_with_qk_norm() {
    let test = "inspect_a_pretrained_sandwich_decoder_with_qk_norm";
    let Some(model) = model_or_skip(GEMMA3, GEMMA3, test, "fetch_gemma3.sh") else {
        return;
    };
    let v = inspect_decoder(&model, &[]);
    assert_eq!(v["architecture"], "gemma3");
    assert_eq!(v["config"]["placement"], "sandwich");
    let blocks = v["blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), 18);
    let f = |b: &serde_json::Value, k: &str| b[k].as_f64().unwrap();
    // Sandwich: the write as added (after the output norm) accounts for the
    // whole change of the stream.
    assert!(f(&v, "sublayer_check") < 1e-5);
    // QK-Norm lowers the largest logit of the same queries and keys in
    // most blocks.
    let lower = blocks
        .iter()
        .filter(|b| f(b, "attn_max_logit") < f(b, "attn_max_logit_raw"))
        .count();
    assert!(lower * 3 >= 2 * blocks.len(), "{lower} of 18");
    // Zero-centred gains: w = gain - 1 for every kind of norm, output
    // norms included.
    let gains = v["gains"].as_array().unwrap();
    assert!(gains.iter().any(|g| g["role"] == "MLP output"));
    for g in gains {
        let (gain, w) = (g["gain"][0].as_f64().unwrap(), g["w"][0].as_f64().unwrap());
        assert!((gain - 1.0 - w).abs() < 1e-6 * gain.abs().max(1.0), "{g}");
    }
    // The logit lens reads better predictions late than early.
    let lens = v["logit_lens"].as_array().unwrap();
    assert_eq!(lens.len(), 18);
    assert!(f(&lens[17], "loss") < f(&lens[0], "loss"));
    assert!(f(&lens[17], "agrees") > f(&lens[0], "agrees"));
    let fin = &v["final_norm"];
    assert!(f(fin, "loss_without") > f(fin, "loss_with"));
}

#[test]
fn generate_continues_a_prompt_as_transformers_does() {
    let test = "generate_continues_a_prompt_as_transformers_does";
    let Some(model) = model_or_skip(SMOLLM2, SMOLLM2, test, "fetch_smollm2.sh") else {
        return;
    };
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    // The fixtures' greedy continuations (transformers' generate): one that
    // ends with the end-of-sequence token, one that runs to 32 tokens.
    let fx: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("crates/normlab/tests/fixtures/smollm2.json")).unwrap(),
    )
    .unwrap();
    let m = normlab::model::decoder::Decoder::load(&model).unwrap();
    let mut ended = 0;
    for p in fx["prompts"].as_array().unwrap() {
        let Some(g) = p.get("greedy") else { continue };
        let text = p["text"].as_str().unwrap();
        let mut want: Vec<u32> = g
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let eos = want.last() == m.eos.as_ref();
        if eos {
            want.pop();
            ended += 1;
        }
        // The f32 path, and 16-bit activations on the quantised blocks
        // (within about 2e-4 of f32's logit range: no continuation of the
        // fixtures changes).
        for weights in ["f32", "q16"] {
            let o = normlab(&[
                "generate",
                model.to_str().unwrap(),
                "--prompt",
                text,
                "--tokens",
                "32",
                "--threads",
                "1",
                "--weights",
                weights,
            ]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let expect = format!("{text}{}\n", m.decode(&want).unwrap());
            assert_eq!(
                String::from_utf8_lossy(&o.stdout),
                expect,
                "{text:?} {weights}"
            );
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains("tokens/s after the first"), "{err}");
            assert_eq!(err.contains("end-of-sequence"), eos, "{err}");
        }
    }
    assert!(
        ended >= 1,
        "no fixture continuation ends with end-of-sequence"
    );
    for bad in [
        vec!["generate", model.to_str().unwrap(), "--prompt", ""],
        vec![
            "generate",
            model.to_str().unwrap(),
            "--prompt",
            "hi",
            "--tokens",
            "0",
        ],
        vec![
            "generate",
            model.to_str().unwrap(),
            "--prompt",
            "hi",
            "--tokens",
            "9000",
        ],
        vec!["generate", "/nonexistent.gguf", "--prompt", "hi"],
        vec!["generate", "models", "--prompt", "hi"],
    ] {
        let o = normlab(&bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
        assert!(o.stdout.is_empty(), "{bad:?}");
    }
}

/// Temp files of atomic writes (`.<name>.<pid>.tmp`) anywhere under `dir`.
fn temp_files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                out.extend(temp_files(&e.path()));
            } else if name.starts_with('.') && name.ends_with(".tmp") {
                out.push(e.path().display().to_string());
            }
        }
    }
    out
}

#[test]
fn io_failures_exit_1_with_the_path_and_leave_no_temp_file() {
    let dir = tmp("io-fail");
    std::fs::create_dir_all(&dir).unwrap();
    // A file where a folder must be (root ignores permission bits, not this).
    let blocker = dir.join("a-file");
    std::fs::write(&blocker, b"x").unwrap();
    let run = blocker.join("run");
    let exp_out = blocker.join("exp");
    for args in [
        vec![
            "train",
            "--model",
            "toy",
            "--layers",
            "1",
            "--steps",
            "2",
            "--batch",
            "2",
            "--quiet",
            "--out",
            run.to_str().unwrap(),
        ],
        vec![
            "exp",
            "drift",
            "--quick",
            "--out",
            exp_out.to_str().unwrap(),
        ],
    ] {
        let out = normlab(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("a-file") && err.contains("Not a directory"),
            "{args:?}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    // A full disk: a 64 KiB tmpfs (needs root; CI runs as root and sets
    // NORMLAB_REQUIRE_TMPFS so that this part cannot skip there).
    let mnt = dir.join("tiny");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=64k",
            "tmpfs",
            mnt.to_str().unwrap(),
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !mounted {
        common::skip::skip(
            "NORMLAB_REQUIRE_TMPFS",
            "the full-disk part of the resume test",
            "a tmpfs cannot be mounted",
            "run the tests as root",
        );
        return;
    }
    let run = mnt.join("run");
    let out = normlab(&[
        "train",
        "--model",
        "toy",
        "--layers",
        "2",
        "--steps",
        "5",
        "--batch",
        "4",
        "--quiet",
        "--out",
        run.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let left = temp_files(&mnt);
    let _ = Command::new("umount").arg(&mnt).output();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("No space left") && err.contains("tiny/run/"),
        "{err}"
    );
    assert!(
        left.is_empty(),
        "temp files left on the full disk: {left:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn generate_refuses_a_token_count_beyond_the_context() {
    let test = "generate_refuses_a_token_count_beyond_the_context";
    let Some(model) = model_or_skip(SMOLLM2, SMOLLM2, test, "fetch_smollm2.sh") else {
        return;
    };
    for tokens in ["18446744073709551615", "9000"] {
        let o = normlab(&[
            "generate",
            model.to_str().unwrap(),
            "--prompt",
            "Hi",
            "--tokens",
            tokens,
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{tokens}: {err}");
        assert!(err.contains("context"), "{tokens}: {err}");
    }
    // inspect's held-out count: named, not "fewer than 2 tokens".
    let o = normlab(&[
        "inspect",
        model.to_str().unwrap(),
        "--held-out-tokens",
        "18446744073709551615",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--held-out-tokens"), "{err}");
}
