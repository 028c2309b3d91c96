//! Bad input, tried as an adversary would: every numeric option with NaN or
//! infinity, absurd sizes, flags that would change a resumed run, a closed
//! stdout, a checkpoint holding NaN. Each gets one line and exit 2 (or a
//! quiet end, for the closed pipe); nothing panics, hangs or is written.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// Run normlab; whatever the input, it must never panic.
fn normlab(args: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args(args)
        .output()
        .expect("run normlab");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    o
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("normlab-bad-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Exit 2, one line on stderr, containing every word of `want`.
fn refused(args: &[&str], want: &[&str]) {
    let o = normlab(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    for w in want {
        assert!(err.contains(w), "{args:?}: '{w}' not in: {err}");
    }
}

#[test]
fn every_numeric_train_option_refuses_nan_and_infinity_by_name() {
    let numeric = [
        "layers",
        "d-model",
        "heads",
        "seq",
        "hidden",
        "vocab",
        "eps",
        "branch-scale",
        "out-proj-std",
        "init-std",
        "toy-noise",
        "toy-eval-noise",
        "lr",
        "beta1",
        "beta2",
        "adam-eps",
        "weight-decay",
        "min-lr-frac",
        "clip",
        "steps",
        "batch",
        "shards",
        "seed",
        "eval-every",
        "eval-sequences",
        "log-every",
        "checkpoint-every",
        "warmup",
    ];
    for opt in numeric {
        for v in ["nan", "inf", "-inf"] {
            let flag = format!("--{opt}={v}");
            refused(&["train", &flag], &[&format!("--{opt}")]);
        }
    }
    // The same in a TOML file names the key.
    let dir = tmp("toml");
    for (key, val) in [("eps", "nan"), ("lr", "inf"), ("branch_scale", "nan")] {
        let f = dir.join(format!("{key}.toml"));
        std::fs::write(&f, format!("{key} = {val}\n")).unwrap();
        refused(
            &["train", "--config", f.to_str().unwrap()],
            &[key, "finite"],
        );
    }
    let f = dir.join("grid.toml");
    std::fs::write(&f, "lr = [0.001, nan]\n").unwrap();
    refused(
        &[
            "sweep",
            f.to_str().unwrap(),
            "--out",
            dir.join("g").to_str().unwrap(),
        ],
        &["lr", "finite"],
    );
    let f = dir.join("type.toml");
    std::fs::write(&f, "layers = \"many\"\n").unwrap();
    refused(
        &["train", "--config", f.to_str().unwrap()],
        &["layers", "many"],
    );
    // Experiments too.
    refused(&["exp", "collapse", "--lrs", "nan"], &["--lrs"]);
    refused(&["exp", "depth-sim", "--gain", "nan"], &["--gain"]);
    refused(&["exp", "drift", "--scales", "nan"], &["--scales"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn absurd_sizes_are_refused_up_front() {
    refused(&["train", "--batch", "100000000"], &["memory"]);
    refused(
        &["train", "--eval-sequences", "1000000000"],
        &["eval_sequences"],
    );
    refused(&["train", "--eval-sequences", "0"], &["eval_sequences"]);
    refused(
        &["exp", "identity-path", "--layers", "100000000", "--quick"],
        &["--layers"],
    );
    refused(
        &["exp", "drift", "--layers", "100000000", "--quick"],
        &["--layers"],
    );
    refused(&["exp", "drift", "--layers", "0"], &["--layers"]);
    refused(
        &[
            "exp",
            "identity-path",
            "--layers",
            "5000",
            "--d-model",
            "4096",
        ],
        &["memory"],
    );
    refused(
        &["bench", "norms", "--shapes", "1000000x1000000"],
        &["memory"],
    );
    refused(&["exp", "speed", "--threads", "0"], &["--threads"]);
    refused(
        &[
            "sweep",
            "collapse",
            "--out",
            "/tmp/normlab-never",
            "--threads",
            "100000",
        ],
        &["--threads"],
    );
    refused(&["train", "--threads", "100000"], &["--threads"]);
    // One cap per resource (normlab::limits), named in the message.
    refused(
        &["bench", "norms", "--threads", "2000", "--shapes", "64x64"],
        &["--threads", "per core", "2000"],
    );
    refused(
        &["bench", "train", "--rounds", "5000"],
        &["--rounds", "1000"],
    );
    refused(
        &[
            "convert",
            "/nonexistent",
            "/tmp/normlab-never-out",
            "--to",
            "rmsnorm",
            "--calibrate",
            "100000000",
        ],
        &["--calibrate", "1000000"],
    );
    let grid = std::env::temp_dir().join(format!("normlab-grid2-{}.toml", std::process::id()));
    std::fs::write(&grid, "lr = [0.001, 0.002]\nsteps = 2\n").unwrap();
    refused(
        &[
            "sweep",
            grid.to_str().unwrap(),
            "--out",
            "/tmp/normlab-never-sweep",
            "--emit-slurm",
            "1000000000",
        ],
        &["--emit-slurm", "1..=2"],
    );
    let _ = std::fs::remove_file(&grid);
}

#[test]
fn small_mistakes_are_named() {
    refused(&["calc", "--x", "1,,2"], &["empty"]);
    refused(&["train", "--heads", "4"], &["heads", "gpt"]);
    let dir = tmp("short");
    let short = dir.join("short.txt");
    std::fs::write(&short, "too short").unwrap();
    refused(
        &["train", "--model", "gpt", "--data", short.to_str().unwrap()],
        &["too short", "at least"],
    );
    // A folder of invalid run configs is not "no runs".
    std::fs::create_dir_all(dir.join("r")).unwrap();
    std::fs::write(
        dir.join("r/config.json"),
        "{\"model\": \"toy\", \"lr\": \"fast\"}",
    )
    .unwrap();
    refused(&["report", dir.to_str().unwrap()], &["none is a valid run"]);
    // Beside a valid run, an invalid one is reported as skipped, by name.
    let good = dir.join("good");
    let o = normlab(&[
        "train",
        "--model",
        "toy",
        "--layers",
        "1",
        "--steps",
        "2",
        "--batch",
        "2",
        "--shards",
        "1",
        "--eval-sequences",
        "2",
        "--quiet",
        "--out",
        good.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = normlab(&["report", dir.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning: skipped") && err.contains("r/config.json"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn overflow_in_drift_is_a_result_not_a_panic() {
    for args in [
        vec!["exp", "drift", "--scales", "100", "--quick"],
        vec![
            "exp", "drift", "--layers", "40", "--scales", "20", "--quick",
        ],
    ] {
        let o = normlab(&args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("overflows f32 at layer"), "{out}");
    }
}

#[test]
fn resume_refuses_flags_that_would_change_the_run() {
    let dir = tmp("resume-flags");
    let run = dir.join("r");
    let r = run.to_str().unwrap();
    let o = normlab(&[
        "train",
        "--layers",
        "1",
        "--steps",
        "20",
        "--batch",
        "4",
        "--eval-sequences",
        "4",
        "--quiet",
        "--stop-after",
        "10",
        "--out",
        r,
    ]);
    assert!(o.status.success());
    let config_before = std::fs::read(run.join("config.json")).unwrap();
    for flag in [
        vec!["--lr=-1"],
        vec!["--norm", "foo"],
        vec!["--lr", "0.1"],
        vec!["--config", "nosuch.toml"],
        vec!["--no-residual"],
    ] {
        let mut args = vec!["train", "--resume", r];
        args.extend(flag.iter());
        refused(&args, &["resume"]);
    }
    refused(&["train", "--resume", r, "--steps", "5"], &["below", "10"]);
    assert_eq!(
        std::fs::read(run.join("config.json")).unwrap(),
        config_before
    );
    // More steps are fine.
    let o = normlab(&["train", "--resume", r, "--steps", "30", "--quiet", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["steps"], 30);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn closed_stdout_ends_quietly() {
    let x = vec!["1"; 60_000].join(",");
    for args in [
        vec!["calc", "--x", x.as_str()],
        vec![
            "train",
            "--layers",
            "1",
            "--steps",
            "400",
            "--batch",
            "4",
            "--eval-sequences",
            "4",
            "--json",
        ],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_normlab"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut buf = [0u8; 10];
        let mut out = child.stdout.take().unwrap();
        let _ = out.read(&mut buf);
        drop(out); // `| head -c 10`
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{err}"
        );
    }
}

#[test]
fn nan_checkpoints_are_not_converted() {
    let dir = tmp("nan-convert");
    let run = dir.join("run");
    let o = normlab(&[
        "train",
        "--model",
        "gpt",
        "--layers",
        "1",
        "--d-model",
        "16",
        "--heads",
        "2",
        "--seq",
        "16",
        "--hidden",
        "32",
        "--steps",
        "2",
        "--batch",
        "2",
        "--eval-sequences",
        "2",
        "--quiet",
        "--out",
        run.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    // Put a NaN into lm_head.weight.
    let path = run.join("checkpoint.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let view = st.tensor("lm_head.weight").unwrap();
    let offset = view.data().as_ptr() as usize - bytes.as_ptr() as usize;
    let mut bytes = bytes.clone();
    bytes[offset..offset + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let out = dir.join("converted");
    // Its checksum catches the change first...
    refused(
        &[
            "convert",
            run.to_str().unwrap(),
            out.to_str().unwrap(),
            "--to",
            "rmsnorm",
        ],
        &["checkpoint.safetensors", "fails its checksum"],
    );
    assert!(!out.exists(), "nothing is written");
    // ...and without one (a file written before checksums), the NaN check.
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let mut record: serde_json::Value =
        serde_json::from_str(&meta.metadata().as_ref().unwrap()["normlab_config"]).unwrap();
    record.as_object_mut().unwrap().remove("checksum");
    let views: Vec<(String, safetensors::tensor::TensorView)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| {
            let t = safetensors::tensor::TensorView::new(v.dtype(), v.shape().to_vec(), v.data());
            (n, t.unwrap())
        })
        .collect();
    let mut m = std::collections::HashMap::new();
    m.insert("normlab_config".to_string(), record.to_string());
    std::fs::write(
        &path,
        safetensors::tensor::serialize(views, Some(m)).unwrap(),
    )
    .unwrap();
    let o = normlab(&[
        "convert",
        run.to_str().unwrap(),
        out.to_str().unwrap(),
        "--to",
        "rmsnorm",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    // The warning that the file is not verified, then the refusal.
    let lines: Vec<&str> = err.trim().lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].contains("not verified"), "{err}");
    assert!(
        lines[1].contains("lm_head.weight") && lines[1].contains("non-finite"),
        "{err}"
    );
    assert!(!out.exists(), "nothing is written");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A model or book that is not there: one line naming the script or
/// command that gets it (issue 64).
#[test]
fn missing_models_and_books_name_what_gets_them() {
    let smol = "models/SmolLM2-135M-Instruct/none.Q4_1.gguf";
    refused(&["inspect", smol], &["scripts/fetch_smollm2.sh"]);
    refused(
        &["generate", smol, "--prompt", "hi"],
        &["scripts/fetch_smollm2.sh"],
    );
    refused(
        &["bench", "decoder", "models/gemma-3-270m/none.gguf"],
        &["scripts/fetch_gemma3.sh"],
    );
    refused(
        &["inspect", "models/all-MiniLM-L6-v2-none"],
        &["scripts/fetch_minilm.sh"],
    );
    refused(
        &["inspect", "elsewhere.gguf"],
        &["scripts/fetch_smollm2.sh", "scripts/fetch_gemma3.sh"],
    );
    refused(
        &["serve", "--book", "no-such-book"],
        &["docs/findings", "normlab book --quick"],
    );
}

#[test]
fn decoder_folders_route_to_the_decoder_and_refuse_by_name() {
    let tiny = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../normlab/tests/fixtures/hf_tiny/llama"
    );
    // A decoder folder reaches the decoder (not the BERT reader), which
    // needs the folder's tokenizer to encode text.
    refused(&["inspect", tiny], &["tokenizer.json"]);
    refused(&["generate", tiny, "--prompt", "hi"], &["tokenizer.json"]);
    refused(
        &["generate", tiny, "--prompt", "hi", "--weights", "q8"],
        &["--weights q8", ".gguf"],
    );
    let dir = tmp("falcon");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), "{\"model_type\": \"falcon\"}").unwrap();
    refused(
        &["inspect", dir.to_str().unwrap()],
        &["model_type 'falcon' is not read by normlab's decoder"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}
