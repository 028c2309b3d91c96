//! End-to-end tests of the `normlab` binary: outputs, JSON keys, exit codes.

mod common;

use common::{json, normlab, stdout_ok};
use std::process::Command;

/// Piped (not a terminal), a long command prints a progress line every
/// NORMLAB_PROGRESS_SECS seconds: done/total, elapsed and what is left.
#[test]
fn piped_runs_print_progress_lines() {
    let out = std::env::temp_dir().join(format!("normlab-progress-{}", std::process::id()));
    let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args([
            "train",
            "--model",
            "gpt",
            "--layers",
            "2",
            "--d-model",
            "32",
        ])
        .args([
            "--heads", "2", "--seq", "16", "--hidden", "64", "--steps", "4000", "--out",
        ])
        .arg(&out)
        .env("NORMLAB_PROGRESS_SECS", "0.2")
        .output()
        .unwrap();
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("train: ")).collect();
    assert!(!lines.is_empty(), "no progress lines: {err}");
    assert!(
        lines[0].contains("/4000") && lines[0].contains("elapsed"),
        "{}",
        lines[0]
    );
    // --quiet prints none.
    let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args(["train", "--steps", "300", "--quiet", "--out"])
        .arg(out.join("q"))
        .env("NORMLAB_PROGRESS_SECS", "0.01")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&o.stderr).contains("train: "));
    let _ = std::fs::remove_dir_all(&out);
}

/// The vector may be given bare (`normlab calc 1,2,3,6`) or as --x; the
/// options are the web lab's /api/calc parameters, parsed alike.
#[test]
fn calc_takes_the_vector_bare_or_as_x() {
    let a = json(&["calc", "1,2,3,6", "--norm", "rmsnorm", "--json"]);
    let b = json(&["calc", "--x", "1,2,3,6", "--norm", "rmsnorm", "--json"]);
    assert_eq!(a, b);
    assert_eq!(a["d"], 4);
}

#[test]
fn calc_in_low_precision() {
    // A row of 1e-3s: its mean square 1e-6 is representable in f16, but
    // each square (1e-6) is a subnormal there and their naive f16 running sum
    // loses bits; f32 statistics keep the output at f16's own rounding.
    let x = "1e-3,-2e-3,3e-3,5e-4,-1e-3,2e-3";
    let lp = |extra: &[&str]| {
        let mut args = vec!["calc", "--x", x, "--norm", "rmsnorm", "--json"];
        args.extend_from_slice(extra);
        json(&args)["low_precision"].clone()
    };
    let up = lp(&["--dtype", "f16"]);
    let naive = lp(&["--dtype", "f16", "--naive"]);
    assert_eq!(up["dtype"], "f16");
    assert_eq!(naive["mode"], "naive");
    let (du, dn) = (
        up["max_abs_diff"].as_f64().unwrap(),
        naive["max_abs_diff"].as_f64().unwrap(),
    );
    assert!(du < 2e-3 && dn > du, "upcast {du} naive {dn}");
    // Rows whose squares overflow f16: the naive mean square is inf.
    let big = json(&[
        "calc",
        "--x",
        "300,-200,100",
        "--norm",
        "layernorm",
        "--dtype",
        "f16",
        "--naive",
        "--json",
    ]);
    assert!(big["low_precision"]["second_moment"].is_null());
    // bf16 stores 1.001 as 1.
    let b = json(&["calc", "--x", "1.001,2", "--dtype", "bf16", "--json"]);
    assert_eq!(b["low_precision"]["stored_input"][0], 1.0);
    for (args, msg) in [
        (
            vec!["calc", "--x", "1,2", "--norm", "dyt", "--dtype", "f16"],
            "simulated for",
        ),
        (vec!["calc", "--x", "1,2", "--naive"], "needs --dtype"),
        (vec!["calc", "--x", "1,2", "--dtype", "f8"], "unknown dtype"),
    ] {
        let o = normlab(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains(msg), "{args:?}");
    }
}

#[test]
fn calc_worked_example_and_invariances() {
    let v = json(&["calc", "--x", "1,2,3,6", "--json"]);
    let out: Vec<f64> = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    for (a, b) in out.iter().zip([-1.069, -0.535, 0.0, 1.604]) {
        assert!((a - b).abs() < 1e-3, "{out:?}");
    }
    for key in ["output", "mean", "std", "l2"] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    let v = json(&[
        "calc", "--x", "1,2,3,6", "--norm", "rmsnorm", "--shift", "2", "--json",
    ]);
    assert_eq!(v["unchanged"], serde_json::json!(false));
    assert!(v["transformed_output"].is_array());
    let v = json(&[
        "calc", "--x", "1,2,3,6", "--norm", "rmsnorm", "--scale", "3", "--json",
    ]);
    assert_eq!(v["unchanged"], serde_json::json!(true));
    let v = json(&[
        "calc",
        "--x",
        "1,2,3,6",
        "--norm",
        "layernorm",
        "--scale",
        "3",
        "--shift",
        "2",
        "--json",
    ]);
    assert_eq!(v["unchanged"], serde_json::json!(true));
    let text = String::from_utf8(
        normlab(&[
            "calc", "--x", "1,2,3,6", "--norm", "rmsnorm", "--shift", "2",
        ])
        .stdout,
    )
    .unwrap();
    assert!(text.contains("CHANGED by x + 2"), "{text}");
}

#[test]
fn bad_input_gives_one_line_and_exit_2() {
    for args in [
        vec!["calc", "--x", ""],
        vec!["calc", "--x", "1,nan"],
        vec!["calc", "--x", "1,2", "--norm", "foo"],
        vec!["calc", "--x", "1,2", "--eps", "-1"],
        vec!["calc", "--x", "1,x"],
        vec!["calc"],
        vec!["calc", "--x", "1,2", "--bogus"],
        vec!["bench", "norms", "--shapes", "0x4"],
        vec!["bench", "norms", "--kinds", "batchnorm"],
        vec!["bench", "norms", "--dtype", "f8"],
        vec!["bench", "norms", "--dtype", ""],
        vec!["bench", "norms", "--rounds", "0"],
        vec!["bench", "train", "--rounds", "0"],
        vec!["bench", "train", "--steps", "0"],
    ] {
        let out = normlab(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(out.stdout.is_empty());
    }
}

/// `bench train --rounds`: each round's step time and its own matmul peak
/// kept, the medians reported, the per-round % of peak as a range.
#[test]
fn bench_train_rounds() {
    let v = json(&[
        "bench",
        "train",
        "--model",
        "toy",
        "--threads",
        "1",
        "--steps",
        "2",
        "--rounds",
        "3",
        "--json",
    ]);
    let recs = v.as_array().unwrap();
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    let nums = |k: &str| -> Vec<f64> {
        r[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let (mut ms, mut peaks) = (nums("round_ms"), nums("round_peak_gflops"));
    assert_eq!((ms.len(), peaks.len()), (3, 3), "{r}");
    ms.sort_by(f64::total_cmp);
    peaks.sort_by(f64::total_cmp);
    assert_eq!(r["ms_per_step"].as_f64().unwrap(), ms[1], "{r}");
    assert_eq!(r["matmul_peak_gflops"].as_f64().unwrap(), peaks[1], "{r}");
    let range = nums("peak_fraction_range");
    assert!(range[0] > 0.0 && range[0] <= range[1], "{r}");
    // The printed table, without a `--vs` column and with one.
    for vs in [&[][..], &["--vs", "hc=2"][..]] {
        let mut args = vec![
            "bench",
            "train",
            "--model",
            "toy",
            "--threads",
            "1",
            "--steps",
            "1",
        ];
        args.extend_from_slice(vs);
        let t = stdout_ok(&args);
        assert!(t.contains("% peak"), "{t}");
        assert_eq!(t.contains("time vs plain"), !vs.is_empty(), "{t}");
    }
}

/// The printed table, with one kind (no "vs" column) and with two.
#[test]
fn bench_norms_tables() {
    // `bench norms` on one small shape, 1 thread, with `extra` flags.
    let table = |extra: &[&str]| {
        let mut args = vec!["bench", "norms", "--shapes", "64x48", "--threads", "1"];
        args.extend_from_slice(extra);
        stdout_ok(&args)
    };
    for (kinds, vs) in [("rmsnorm", false), ("rmsnorm,layernorm", true)] {
        let text = table(&["--kinds", kinds, "--seconds", "0.01"]);
        let head = text.lines().next().unwrap();
        assert!(head.contains("% roofline"), "{text}");
        assert_eq!(head.contains("vs rmsnorm"), vs, "{text}");
        assert_eq!(
            text.lines().count(),
            2 + 2 * kinds.split(',').count(),
            "{text}"
        );
    }
    // With rounds, the speed-up over f32 carries its range over the rounds.
    let text = table(&[
        "--kinds",
        "rmsnorm",
        "--dtype",
        "f32,bf16",
        "--rounds",
        "2",
        "--seconds",
        "0.02",
    ]);
    let bf16 = text
        .lines()
        .find(|l| l.contains(" bf16 "))
        .expect("a bf16 row");
    assert!(
        bf16.trim_end().ends_with(')') && bf16.contains("x ("),
        "{text}"
    );
}

#[test]
fn bench_norms_json_records() {
    let v = json(&[
        "bench",
        "norms",
        "--shapes",
        "64x48,40x16",
        "--threads",
        "1,2",
        "--seconds",
        "0.01",
        "--json",
    ]);
    let recs = v.as_array().unwrap();
    assert_eq!(recs.len(), 2 * 2 * 3 * 2);
    for r in recs {
        for key in [
            "kind",
            "pass",
            "rows",
            "d",
            "threads",
            "median_us",
            "gbps",
            "roofline_gbps",
        ] {
            assert!(r.get(key).is_some(), "missing {key} in {r}");
        }
        assert!(
            r["median_us"].as_f64().unwrap() > 0.0 && r["roofline_gbps"].as_f64().unwrap() > 0.0
        );
        assert_eq!(r["dtype"], "f32");
    }
    // Rounds: one record per point still, each round's median kept, the
    // reported median the median of those.
    let v = json(&[
        "bench",
        "norms",
        "--shapes",
        "64x48",
        "--threads",
        "1",
        "--kinds",
        "rmsnorm,dyt",
        "--rounds",
        "3",
        "--seconds",
        "0.03",
        "--json",
    ]);
    let recs = v.as_array().unwrap();
    assert_eq!(recs.len(), 2 * 2);
    for r in recs {
        let mut rounds: Vec<f64> = r["round_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(rounds.len(), 3, "{r}");
        rounds.sort_by(f64::total_cmp);
        assert_eq!(r["median_us"].as_f64().unwrap(), rounds[1], "{r}");
    }
    // 16-bit storage next to f32: every point in each type, and half the
    // bytes counted for the 16-bit ones.
    let v = json(&[
        "bench",
        "norms",
        "--shapes",
        "64x48",
        "--threads",
        "1",
        "--kinds",
        "rmsnorm",
        "--dtype",
        "f32,bf16,f16",
        "--seconds",
        "0.01",
        "--json",
    ]);
    let recs = v.as_array().unwrap();
    assert_eq!(recs.len(), 3 * 2);
    for t in ["f32", "bf16", "f16"] {
        let r = recs
            .iter()
            .find(|r| r["dtype"] == t && r["pass"] == "forward")
            .unwrap();
        let bytes = r["gbps"].as_f64().unwrap() * r["median_us"].as_f64().unwrap() * 1e3;
        let want = 64.0 * 48.0 * if t == "f32" { 8.0 } else { 4.0 };
        assert!((bytes / want - 1.0).abs() < 1e-6, "{t}: {bytes} bytes");
    }
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("normlab-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn train_json_summary_and_run_folder() {
    let dir = tmp("train");
    let out = dir.join("run");
    let v = json(&[
        "train",
        "--model",
        "toy",
        "--layers",
        "2",
        "--steps",
        "30",
        "--batch",
        "8",
        "--eval-every",
        "15",
        "--eval-sequences",
        "16",
        "--threads",
        "1",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    for key in [
        "status",
        "final_loss",
        "best_loss",
        "eval_loss",
        "diverged_at_step",
        "steps",
        // not timed: a key the summary must hold
        "steps_per_sec",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert_eq!(v["steps"], 30);
    for f in [
        "config.json",
        "metrics.jsonl",
        "summary.json",
        "checkpoint.safetensors",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    // TOML config, overridden by a flag.
    let toml = dir.join("run.toml");
    std::fs::write(&toml, "model = \"gpt\"\nlayers = 1\nd_model = 32\nheads = 2\nseq = 16\nhidden = 64\nsteps = 4\nbatch = 4\neval_sequences = 4\nwarmup = 0\n").unwrap();
    let v = json(&[
        "train",
        "--config",
        toml.to_str().unwrap(),
        "--steps",
        "3",
        "--json",
    ]);
    assert_eq!(v["steps"], 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The unpacked GEMM kernel (normlab_kernels::matmul::gemm_direct, used at
/// the AVX-512 levels) and `matrixmultiply` (`NORMLAB_GEMM=matrixmultiply`)
/// train bit-identical runs: the toy (k over several 256-blocks in the
/// weight gradients) and a GPT with attention (scaled products), QK-norm,
/// SwiGLU and a tied head.
#[test]
fn training_is_bit_identical_through_either_gemm() {
    let dir = tmp("gemm");
    let runs: [&[&str]; 2] = [
        &[
            "--model", "toy", "--layers", "3", "--batch", "32", "--steps", "12",
        ],
        &[
            "--model",
            "gpt",
            "--layers",
            "2",
            "--d-model",
            "64",
            "--heads",
            "2",
            "--seq",
            "64",
            "--hidden",
            "96",
            "--batch",
            "8",
            "--steps",
            "6",
            "--qk-norm",
            "--act",
            "swiglu",
            "--tie-head",
        ],
    ];
    for (i, args) in runs.iter().enumerate() {
        let mut weights = Vec::new();
        for gemm in ["direct", "matrixmultiply"] {
            let out = dir.join(format!("{i}-{gemm}"));
            let mut a = vec![
                "train",
                "--threads",
                "1",
                "--eval-every",
                "6",
                "--eval-sequences",
                "8",
                "--quiet",
            ];
            a.extend_from_slice(args);
            a.extend_from_slice(&["--out", out.to_str().unwrap()]);
            let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
                .env("NORMLAB_GEMM", gemm)
                .args(&a)
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "{a:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            weights.push(std::fs::read(out.join("checkpoint.safetensors")).unwrap());
        }
        assert!(
            weights[0] == weights[1],
            "{args:?}: the two GEMM paths trained different weights"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn train_bad_config_exits_2_and_leaves_runs_alone() {
    let dir = tmp("bad");
    let out = dir.join("run");
    let o = out.to_str().unwrap();
    let ok = normlab(&[
        "train",
        "--layers",
        "1",
        "--steps",
        "2",
        "--batch",
        "4",
        "--eval-sequences",
        "4",
        "--out",
        o,
    ]);
    assert!(ok.status.success());
    let before = std::fs::read(out.join("summary.json")).unwrap();
    let data_missing = dir.join("nope.txt");
    for args in [
        vec!["train", "--model", "gpt", "--d-model", "30", "--heads", "4"],
        vec!["train", "--lr", "0"],
        vec!["train", "--lr", "-1"],
        vec!["train", "--placement", "sideways"],
        vec!["train", "--norm", "batchnorm"],
        vec![
            "train",
            "--model",
            "gpt",
            "--data",
            data_missing.to_str().unwrap(),
        ],
        vec!["train", "--layers", "1", "--steps", "2", "--out", o],
        vec!["train", "--resume", dir.to_str().unwrap()],
    ] {
        let r = normlab(&args);
        assert_eq!(
            r.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        let err = String::from_utf8(r.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(out.join("summary.json")).unwrap(), before);
    std::fs::write(out.join("resume.safetensors"), b"garbage").unwrap();
    let r = normlab(&["train", "--resume", o, "--steps", "4"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("resume.safetensors"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn convert_is_exact_for_pre_ln_and_refused_then_approximated_for_post_ln() {
    let dir = tmp("convert");
    let common = [
        "--model",
        "gpt",
        "--layers",
        "1",
        "--d-model",
        "32",
        "--heads",
        "2",
        "--seq",
        "32",
        "--hidden",
        "64",
        "--batch",
        "4",
        "--steps",
        "20",
        "--warmup",
        "2",
        "--eval-sequences",
        "4",
        "--quiet",
    ];
    for p in ["pre", "post"] {
        let mut args = vec!["train", "--placement", p, "--out"];
        let out = dir.join(p);
        args.push(out.to_str().unwrap());
        args.extend_from_slice(&common);
        assert!(normlab(&args).status.success());
    }
    let (pre, post) = (dir.join("pre"), dir.join("post"));
    let v = json(&[
        "convert",
        pre.to_str().unwrap(),
        dir.join("pre-rms").to_str().unwrap(),
        "--to",
        "rmsnorm",
        "--check-sequences",
        "8",
        "--json",
    ]);
    assert_eq!(v["exact"], serde_json::json!(true));
    assert!(
        v["max_abs_logit_diff"].as_f64().unwrap()
            < 1e-4 * v["max_abs_logit"].as_f64().unwrap().max(1.0)
    );
    for key in [
        "mean_abs_logit_diff",
        "eval_loss_original",
        "eval_loss_converted",
        "norms",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    // The converted folder is a normlab run: it converts back exactly.
    let v = json(&[
        "convert",
        dir.join("pre-rms").to_str().unwrap(),
        dir.join("back").to_str().unwrap(),
        "--to",
        "layernorm",
        "--check-sequences",
        "8",
        "--json",
    ]);
    assert_eq!(v["exact"], serde_json::json!(true));
    // Post-LN: refused without --approximate, nothing written.
    let o = normlab(&[
        "convert",
        post.to_str().unwrap(),
        dir.join("post-rms").to_str().unwrap(),
        "--to",
        "rmsnorm",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no exact conversion"));
    assert!(!dir.join("post-rms").exists());
    let v = json(&[
        "convert",
        post.to_str().unwrap(),
        dir.join("post-rms").to_str().unwrap(),
        "--to",
        "rmsnorm",
        "--approximate",
        "--calibrate",
        "20",
        "--check-sequences",
        "8",
        "--json",
    ]);
    assert_eq!(v["exact"], serde_json::json!(false));
    assert!(v["calibration"]["after"]["mean_abs_logit_diff"].is_number());
    // An existing output folder is never overwritten.
    let o = normlab(&[
        "convert",
        pre.to_str().unwrap(),
        dir.join("post-rms").to_str().unwrap(),
        "--to",
        "rmsnorm",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The command reference (the pages under docs/commands/, one per command
/// family) has a section for every subcommand `normlab --help` lists.
#[test]
fn every_subcommand_has_a_section_in_the_command_reference() {
    let help = stdout_ok(&["--help"]);
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 10, "{help}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/commands");
    let mut pages: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    assert!(pages.len() >= 5, "{pages:?}");
    let doc: String = pages
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap() + "\n")
        .collect();
    for c in commands {
        assert!(
            doc.lines()
                .any(|l| l.starts_with(&format!("## `normlab {c}"))),
            "no page under docs/commands/ has a section for `normlab {c}`"
        );
    }
}

/// A token count so large that prompt + tokens wraps around is refused
/// against the model's context (it once panicked: "capacity overflow").
#[test]
fn inspect_a_trained_run_in_any_placement() {
    // Per sublayer of a run folder: before + write = after, for a post-norm
    // and a sandwich GPT; the table names each block's placement.
    let dir = tmp("inspect-run");
    for placement in ["post", "sandwich"] {
        let out = dir.join(placement);
        stdout_ok(&[
            "train",
            "--model",
            "gpt",
            "--layers",
            "2",
            "--d-model",
            "32",
            "--heads",
            "2",
            "--seq",
            "16",
            "--hidden",
            "64",
            "--steps",
            "4",
            "--batch",
            "2",
            "--eval-sequences",
            "2",
            "--placement",
            placement,
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]);
        let v = json(&[
            "inspect",
            out.to_str().unwrap(),
            "--sequences",
            "3",
            "--json",
        ]);
        let subs = v["sublayers"].as_array().unwrap();
        assert_eq!(subs.len(), 4, "{v}");
        for s in subs {
            assert!(s["check"].as_f64().unwrap() < 1e-5, "{s}");
        }
        assert_eq!(v["placement"], placement);
        let text = stdout_ok(&["inspect", out.to_str().unwrap(), "--sequences", "2"]);
        assert!(text.contains(&format!("attn      {placement}")), "{text}");
    }
    let o = normlab(&[
        "inspect",
        dir.join("post").to_str().unwrap(),
        "--sequences",
        "0",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let o = normlab(&[
        "inspect",
        dir.join("post").to_str().unwrap(),
        "--text",
        "hi",
    ]);
    assert_eq!(o.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}

/// `book --emit-k8s`: the manifests parse; the tasks' Job is indexed with
/// one completion per plan task, each pod running `book --task` (the index
/// from JOB_COMPLETION_INDEX) in the mounted folder; and the plan's tasks,
/// listed one index at a time (`book --task I --dry-run`), cover every run
/// of every chapter's grid (as `sweep <id> --dry-run` lists it) and every
/// chapter that trains nothing, each exactly once.
#[test]
fn book_k8s_manifest_parses_and_its_tasks_cover_every_run_once() {
    let dir = std::env::temp_dir().join(format!("normlab-k8s-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("book");
    let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .current_dir(&dir)
        .args(["book", "--out", "book", "--emit-k8s", "--jobs", "2"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(out.join(name)).unwrap()).unwrap()
    };
    let job = read("book-k8s-tasks.json");
    assert_eq!(job["kind"], "Job");
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    let n = job["spec"]["completions"].as_u64().unwrap() as usize;
    let pod = &job["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let cmd: Vec<&str> = c["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let abs_out = out.canonicalize().unwrap();
    assert_eq!(
        cmd,
        [
            "normlab",
            "book",
            "--out",
            abs_out.to_str().unwrap(),
            "--task",
            "--jobs",
            "2"
        ]
    );
    assert_eq!(c["resources"]["requests"]["cpu"], "2");
    assert_eq!(
        c["workingDir"],
        dir.canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(pod["restartPolicy"], "Never");
    let publish = read("book-k8s-publish.json");
    assert!(
        publish["spec"]["template"]["spec"]["containers"][0]["command"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("--assemble"))
    );
    // Task i's units, for every completion index.
    let mut units: Vec<(String, String)> = Vec::new();
    for i in 0..n {
        let text = stdout_ok(&[
            "book",
            "--out",
            out.to_str().unwrap(),
            "--task",
            &i.to_string(),
            "--dry-run",
        ]);
        assert!(!text.trim().is_empty(), "task {i} has no work");
        for l in text.lines() {
            let (c, r) = l.split_once(' ').unwrap();
            units.push((c.into(), r.into()));
        }
    }
    // An index past the last is refused.
    let o = normlab(&[
        "book",
        "--out",
        out.to_str().unwrap(),
        "--task",
        &n.to_string(),
    ]);
    assert!(!o.status.success());
    let mut expected: Vec<(String, String)> = Vec::new();
    let list: serde_json::Value = json(&["exp", "list", "--json"]);
    for e in list.as_array().unwrap() {
        let id = e["id"].as_str().unwrap();
        if e["has_grid"] == true {
            let runs = stdout_ok(&[
                "sweep",
                id,
                "--out",
                dir.join("x").to_str().unwrap(),
                "--dry-run",
            ]);
            for l in runs.lines() {
                expected.push((id.into(), l.strip_prefix("todo ").unwrap().into()));
            }
        } else {
            expected.push((id.into(), "(chapter)".into()));
        }
    }
    let count = units.len();
    units.sort();
    units.dedup();
    assert_eq!(units.len(), count, "a unit is in two tasks");
    expected.sort();
    assert_eq!(units, expected);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two runs that differ only in a setting config.json leaves out where it
/// is the default (`init`) are told apart by `report` and the dashboard's
/// listing, never merged as one setting (issue 75, item 2).
#[test]
fn runs_differing_only_in_a_defaulted_setting_stay_apart() {
    let dir = common::tmp("report-init");
    // The run without the key first: the one whose config.json lacks it.
    common::lab::train_tiny(&dir.join("run1"));
    let mut torch = common::lab::TINY.to_vec();
    torch.extend(["--init", "torch"]);
    common::lab::train_with(&dir.join("run2"), &torch);
    let o = normlab(&[
        "report",
        dir.to_str().unwrap(),
        "--out",
        dir.join("rep").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let row = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap()
            .to_string()
    };
    assert!(
        out.lines()
            .any(|l| l.starts_with("run ") && l.contains("init")),
        "{out}"
    );
    assert!(row("run2").contains("torch"), "{out}");
    assert!(row("run1").contains("default"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `report` shows a run whose files are damaged as "damaged: <reason>"
/// (never as a result, never "unfinished"), warns, and `--strict` exits 2.
#[test]
fn report_names_damaged_runs_and_strict_refuses_them() {
    let dir = common::tmp("report-damaged");
    let train = |name: &str| common::lab::train_tiny(&dir.join(name));
    train("sound");
    train("flipped");
    let ck = dir.join("flipped/checkpoint.safetensors");
    let mut b = std::fs::read(&ck).unwrap();
    let start = 8 + u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    b[start + 7] ^= 0x10;
    std::fs::write(&ck, b).unwrap();
    let d = dir.to_str().unwrap();
    let o = normlab(&["report", d, "--out", dir.join("rep").to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    let row = out.lines().find(|l| l.starts_with("flipped")).unwrap();
    assert!(
        row.contains("damaged: checkpoint.safetensors fails its checksum"),
        "{out}"
    );
    assert!(!row.contains("unfinished"), "{row}");
    assert!(!out
        .lines()
        .find(|l| l.starts_with("sound"))
        .unwrap()
        .contains("damaged"));
    assert!(err.contains("flipped is damaged"), "{err}");
    let o = normlab(&[
        "report",
        d,
        "--strict",
        "--out",
        dir.join("rep2").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("1 of 2 run folder(s) are damaged"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `inspect --help` and `generate --help` name every family of the
/// registry (decoder/family.rs), and a model_type it does not read is
/// refused with what it is and where to go.
#[test]
fn help_and_refusals_come_from_the_family_registry() {
    use normlab::model::decoder::family::FAMILIES;
    for cmd in ["inspect", "generate"] {
        let o = common::normlab(&[cmd, "--help"]);
        let help = String::from_utf8_lossy(&o.stdout);
        for f in FAMILIES {
            assert!(help.contains(f.title), "{cmd} --help lacks {}", f.title);
        }
    }
    let dir = common::tmp("gemma3-wrapper");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"model_type": "gemma3"}"#).unwrap();
    // A folder's config.json stands for the folder.
    let o = common::normlab(&["inspect", dir.join("config.json").to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("multimodal wrapper of gemma3_text") && err.contains("normlab.diagnose"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
