//! Experiments, sweeps and reports through the binary: every experiment's
//! quick setting writes its files, and the direction of each known effect
//! is checked on what it measured (never against a copied number). Nothing
//! here needs a model file or torch (those tests are in `exp.rs`).

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

#[test]
fn signal_and_norm_experiments_show_the_known_effects() {
    let dir = tmp("basic");
    // precision: f32 statistics stay at f32 accuracy; a naive f16 norm's
    // mean square underflows for small rows and overflows for large ones;
    // naive bf16 loses accuracy in its running sum; SwiGLU overflows f16.
    let r = run_exp("precision", &[], &dir);
    let cell = |norm: &str, dtype: &str, mode: &str, eps: f64, m: f64| -> Value {
        r["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| {
                c["norm"] == norm
                    && c["dtype"] == dtype
                    && c["mode"] == mode
                    && c["eps"].as_f64() == Some(eps)
                    && c["magnitude"].as_f64() == Some(m)
            })
            .unwrap_or_else(|| panic!("no cell {norm} {dtype} {mode} {eps} {m}"))
            .clone()
    };
    for norm in ["layernorm", "rmsnorm"] {
        assert!(num(&cell(norm, "f32", "upcast", 0.0, 1.0)["rel_error"]) < 1e-6);
        assert_eq!(
            num(&cell(norm, "f16", "naive", 1e-5, 1e-6)["second_moment"]),
            0.0
        );
        assert!(cell(norm, "f16", "naive", 1e-5, 1e3)["second_moment"].is_null());
        assert!(num(&cell(norm, "f16", "upcast", 1e-5, 1e3)["rel_error"]) < 1e-3);
        // normlab's own 16-bit kernels: as accurate as the storage allows,
        // where the naive computation overflows.
        assert!(num(&cell(norm, "f16", "kernel", 1e-5, 1e3)["rel_error"]) < 1e-3);
        assert!(num(&cell(norm, "bf16", "kernel", 1e-5, 1.0)["rel_error"]) < 4e-3);
        let (naive, up) = (
            num(&cell(norm, "bf16", "naive", 1e-5, 1.0)["rel_error"]),
            num(&cell(norm, "bf16", "upcast", 1e-5, 1.0)["rel_error"]),
        );
        assert!(naive > 5.0 * up, "{naive} vs {up}");
    }
    let sw = r["swiglu"].as_array().unwrap();
    assert!(sw.iter().any(|s| s["f16"].is_null()) && sw.iter().all(|s| s["bf16"].is_number()));
    assert!(!r["claims"].as_array().unwrap().is_empty());
    // drift: plain stack vanishes at 0.3, explodes at 1.2; LayerNorm holds sqrt(d).
    let r = run_exp("drift", &[], &dir);
    let curve = |reading: &str, s: f64, k: &str| -> Vec<f64> {
        r["curves"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| {
                c["reading"] == reading && c["scale"].as_f64() == Some(s) && c["setting"] == k
            })
            .unwrap_or_else(|| panic!("no curve {reading} {s} {k}"))["mean_row_norm"]
            .as_array()
            .unwrap()
            .iter()
            .map(num)
            .collect()
    };
    let scaled = "N(0, s^2/d)";
    let (p03, p12, l03, l12, raw12) = (
        curve(scaled, 0.3, "plain"),
        curve(scaled, 1.2, "plain"),
        curve(scaled, 0.3, "layernorm"),
        curve(scaled, 1.2, "layernorm"),
        curve("s * randn", 1.2, "plain"),
    );
    assert!(p03[20] < p03[0] * 1e-6, "s=0.3 should vanish: {:?}", p03);
    assert!(p12[20] > p12[0] * 10.0, "s=1.2 should grow: {:?}", p12);
    assert!(
        raw12[4] > raw12[0] * 100.0,
        "1.2 * randn explodes: {:?}",
        raw12
    );
    for v in l03[1..].iter().chain(&l12[1..]) {
        assert!(
            (v - 8.0).abs() < 0.01,
            "LayerNorm should hold sqrt(64) = 8: {v}"
        );
    }
    assert_eq!(r["claims"][0]["claim"], "C1");
    // norm-stats: RMSNorm keeps a non-zero row mean; LayerNorm centres.
    let r = run_exp("norm-stats", &[], &dir);
    assert!(num(&r["rmsnorm"]["row_mean_mean"]) > 0.3);
    assert!(num(&r["layernorm"]["row_mean_mean"]).abs() < 1e-4);
    assert!((num(&r["layernorm"]["row_std_mean"]) - 1.0).abs() < 1e-3);
    // batch-dependence: BatchNorm output moves with the batch; LN/RMS never.
    let r = run_exp("batch-dependence", &[], &dir);
    for rec in r["results"].as_array().unwrap() {
        let (norm, d) = (rec["norm"].as_str().unwrap(), num(&rec["max_abs_diff"]));
        if norm == "layernorm" || norm == "rmsnorm" {
            assert_eq!(d, 0.0, "{rec}");
        }
        if norm == "batchnorm (train mode)" {
            assert!(d > 1e-3, "{rec}");
        }
    }
    // identity-path: with small init almost all gradient takes the identity path.
    let r = run_exp("identity-path", &[], &dir);
    assert!(num(&r["by_init"]["GPT-2 (std 0.02)"]["identity_share"]) > 0.9);
    assert!(num(&r["no_residual_grad_norm"]) < num(&r["total_grad_norm"]));
    let with: Vec<f64> = r["stack"]["with_residual"]
        .as_array()
        .unwrap()
        .iter()
        .map(num)
        .collect();
    let without: Vec<f64> = r["stack"]["without_residual"]
        .as_array()
        .unwrap()
        .iter()
        .map(num)
        .collect();
    assert!(with.last().unwrap() > &(without.last().unwrap() * 100.0));
    // depth-sim: residual-only RMS grows with N; pre-norm + 1/sqrt(N) stays near 1.
    let dir2 = dir.join("ds");
    let small = run_exp("depth-sim", &["--sublayers", "8"], &dir2);
    let big = run_exp("depth-sim", &["--sublayers", "32"], &dir);
    assert!(num(&big["final_residual_rms"]) > 4.0 * num(&small["final_residual_rms"]));
    let scaled = run_exp(
        "depth-sim",
        &["--sublayers", "32", "--pre-norm", "--scale-writeback"],
        &dir.join("ds2"),
    );
    let rms = num(&scaled["final_residual_rms"]);
    assert!(
        (0.7..2.0).contains(&rms),
        "pre-norm + 1/sqrt(N) should stay near 1: {rms}"
    );
    assert_eq!(scaled["residual_rms"].as_array().unwrap().len(), 33);
    assert!(
        scaled["grad_norm"].as_array().unwrap().len() == 33
            && scaled["grad_ratio_bottom_top"].is_number()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn training_experiments_show_the_known_effects() {
    let dir = tmp("train");
    // collapse: at lr 1e-2 a 12-layer net without norms fails (GPT-2 init)
    // or ends behind (PyTorch's init) where pre-LN trains.
    let r = run_exp(
        "collapse",
        &[
            "--layers",
            "12",
            "--lrs",
            "0.01",
            "--norms",
            "none,layernorm",
            "--inits",
            "torch,gpt2",
        ],
        &dir,
    );
    let runs = r["runs"].as_array().unwrap();
    let run = |n: &str, init: &str| {
        runs.iter()
            .find(|x| x["norm"] == n && x["init"] == init)
            .unwrap_or_else(|| panic!("no run {n} {init}"))
    };
    let status = |n: &str, init: &str| run(n, init)["status"].as_str().unwrap().to_string();
    assert_ne!(status("none", "gpt2"), "converged");
    for init in ["torch", "gpt2"] {
        assert_eq!(status("layernorm", init), "converged");
    }
    let loss = |n: &str| {
        run(n, "torch")["final_eval_loss"]
            .as_f64()
            .unwrap_or(f64::INFINITY)
    };
    assert!(
        loss("none") > loss("layernorm"),
        "torch init: none {} vs layernorm {}",
        loss("none"),
        loss("layernorm")
    );
    for key in [
        "status",
        "final_eval_loss",
        "best_eval_loss",
        "diverged_at_step",
    ] {
        assert!(runs[0].get(key).is_some(), "collapse record lacks {key}");
    }
    // qk-norm: QK-Norm holds the attention logits down.
    let r = run_exp("qk-norm", &[], &dir);
    let cfgs = r["configs"].as_array().unwrap();
    let peak = |qk: bool| num(&cfgs.iter().find(|c| c["qk_norm"] == qk).unwrap()["max_logit_peak"]);
    assert!(
        peak(true) < peak(false),
        "with {} vs without {}",
        peak(true),
        peak(false)
    );
    // precision-train: with f32 statistics, 16-bit storage of activations
    // barely moves a small net's held-out loss (and does move it: the
    // rounding happens), and f16's loss scaler is on.
    let r = run_exp("precision-train", &[], &dir);
    let cfgs = r["configs"].as_array().unwrap();
    assert_eq!(cfgs.len(), 10);
    let (mut moved, mut most) = (0, 0f64);
    for c in cfgs {
        let l = |t: &str| num(&c["final_eval_loss"][t]);
        for t in ["bf16", "f16"] {
            moved += usize::from(l(t) != l("f32"));
            most = most.max((l(t) - l("f32")).abs());
        }
    }
    assert!(
        moved > 0 && most < 0.05,
        "moved {moved}, largest change {most}"
    );
    assert!(r["runs"].as_array().unwrap().len() == 30);
    // gain-decay: a plain gain decays toward 0, a (1 + w) gain toward 1.
    let r = run_exp("gain-decay", &[], &dir);
    assert!(
        num(&r["decay_only"]["plain_gain_end"]) < 0.5
            && num(&r["decay_only"]["zero_centred_gain_end"]) > 1.0
    );
    // residual-growth: post-LN is pinned at sqrt(d) at init; pre-LN grows with depth.
    let r = run_exp("residual-growth", &[], &dir);
    let post: Vec<f64> = r["per_layer_mean_row_norm"]["post"]["init"]
        .as_array()
        .unwrap()
        .iter()
        .map(num)
        .collect();
    for v in &post[1..] {
        assert!((v - 8.0).abs() < 0.05, "post-LN at init: {v}");
    }
    let pre: Vec<f64> = r["per_layer_mean_row_norm"]["pre, final norm"]["trained"]
        .as_array()
        .unwrap()
        .iter()
        .map(num)
        .collect();
    assert!(pre.last().unwrap() > &pre[1]);
    // The lesson's one-sublayer Pre-LN block at init: the stream grows block
    // after block, and a final LayerNorm brings every token back to sqrt(d).
    let lesson = &r["lesson_init"];
    let norms: Vec<f64> = lesson["mean_row_norm"]
        .as_array()
        .unwrap()
        .iter()
        .map(num)
        .collect();
    assert_eq!(norms.len(), 13);
    assert!(norms.windows(2).all(|w| w[1] > w[0]), "{norms:?}");
    assert!((num(&lesson["after_final_norm"]) - 128f64.sqrt()).abs() < 0.05);
    // residual-routing: mHC's doubly stochastic mixing keeps the composite
    // gain at 1 where static hyper-connections' drifts from it at lr 1e-2;
    // the extra streams cost parameters in the order of their machinery;
    // 128 independent unit-variance writes add up to std sqrt(129).
    let r = run_exp(
        "residual-routing",
        &["--model", "gpt", "--lrs", "0.01"],
        &dir,
    );
    let cfgs = r["configs"].as_array().unwrap();
    let cell = |d: &str| cfgs.iter().find(|c| c["design"] == d).unwrap();
    let gain = |d: &str| num(&cell(d)["mixing_gain"]);
    assert!((gain("mhc") - 1.0).abs() < 1e-3, "mHC gain {}", gain("mhc"));
    assert!((gain("hc") - 1.0).abs() > 0.01, "HC gain {}", gain("hc"));
    // AttnRes mixes no streams: no gain to report (not a 1 by definition).
    assert!(cell("attnres")["mixing_gain"].is_null());
    assert!(cell("pre-ln")["mixing_gain"].is_null());
    let params = |d: &str| cell(d)["params"].as_u64().unwrap();
    assert!(params("pre-ln") < params("hc") && params("hc") < params("hc-dynamic"));
    assert!(params("hc-dynamic") < params("mhc"));
    let sum = &r["stream_sum"];
    assert!((num(&sum["measured_std"]) / num(&sum["expected_std"]) - 1.0).abs() < 0.01);
    assert_eq!(r["depth_use"].as_array().unwrap().len(), 5);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn experiments_reject_flags_they_do_not_use() {
    let o = normlab(&["exp", "drift", "--sublayers", "4"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("does not take --sublayers"));
    let o = normlab(&["exp", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    let o = normlab(&["exp", "depth-sim", "--sublayers", "0"]);
    assert_eq!(o.status.code(), Some(2));
}

const GRID: &str = "model = \"toy\"\nsteps = 12\nbatch = 4\nshards = 1\neval_every = 6\neval_sequences = 8\nlayers = [1, 2]\nnorm = [\"layernorm\", \"rmsnorm\"]\nlr = [1e-3, 1e-2]\n";

fn report_records(dir: &Path) -> Vec<(String, String, Option<f64>)> {
    let o = normlab(&["report", dir.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut recs: Vec<_> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["settings"].to_string(),
                r["status"].as_str().unwrap().to_string(),
                r["final_eval_loss"].as_f64(),
            )
        })
        .collect();
    recs.sort_by(|a, b| a.0.cmp(&b.0));
    recs
}

#[test]
fn two_shards_in_one_folder_report_like_one_run() {
    let dir = tmp("shards");
    std::fs::create_dir_all(&dir).unwrap();
    let grid = dir.join("grid.toml");
    std::fs::write(&grid, GRID).unwrap();
    let (one, shared) = (dir.join("one"), dir.join("shared"));
    let o = normlab(&[
        "sweep",
        grid.to_str().unwrap(),
        "--out",
        one.to_str().unwrap(),
        "--jobs",
        "2",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Two shard processes at once, writing into the same folder.
    let spawn = |s: &str| {
        Command::new(env!("CARGO_BIN_EXE_normlab"))
            .args([
                "sweep",
                grid.to_str().unwrap(),
                "--out",
                shared.to_str().unwrap(),
                "--jobs",
                "1",
                "--shard",
                s,
            ])
            .spawn()
            .unwrap()
    };
    let (mut a, mut b) = (spawn("0/2"), spawn("1/2"));
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    let (r1, r2) = (report_records(&one), report_records(&shared));
    assert_eq!(r1.len(), 8);
    assert_eq!(
        r1, r2,
        "sharded and unsharded sweeps must give the same table"
    );
    // Slurm's environment picks the shard.
    let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args([
            "sweep",
            grid.to_str().unwrap(),
            "--out",
            one.to_str().unwrap(),
            "--dry-run",
        ])
        .env("SLURM_ARRAY_TASK_ID", "1")
        .env("SLURM_ARRAY_TASK_COUNT", "2")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("done"))
            .count(),
        4
    );
    let o = normlab(&[
        "sweep",
        grid.to_str().unwrap(),
        "--out",
        dir.join("slurm").to_str().unwrap(),
        "--emit-slurm",
        "4",
    ]);
    assert!(o.status.success());
    let script = std::fs::read_to_string(dir.join("slurm/sweep.sbatch")).unwrap();
    assert!(script.contains("#SBATCH --array=0-3") && script.contains("#SBATCH --cpus-per-task=1"));
    // Absolute paths: the binary, the grid file and the folder.
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_normlab")).unwrap();
    assert!(
        script.contains(&format!(
            "'{}' sweep '{}'",
            exe.display(),
            std::fs::canonicalize(&grid).unwrap().display()
        )),
        "{script}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn killed_sweep_loses_no_finished_run() {
    let dir = tmp("kill");
    std::fs::create_dir_all(&dir).unwrap();
    let grid = dir.join("grid.toml");
    std::fs::write(&grid, GRID.replace("steps = 12", "steps = 300")).unwrap();
    let out = dir.join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args([
            "sweep",
            grid.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--jobs",
            "1",
        ])
        .spawn()
        .unwrap();
    let count_done = || {
        std::fs::read_dir(out.join("runs"))
            .map(|it| {
                it.filter_map(|e| e.ok())
                    .filter(|e| e.path().join("summary.json").exists())
                    .count()
            })
            .unwrap_or(0)
    };
    let t0 = std::time::Instant::now();
    // hang bound: 120 s (idle: 1.2 s)
    while count_done() < 2 && t0.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let finished_before = count_done();
    assert!(finished_before >= 2);
    // Every file that exists parses: nothing half-written.
    for e in std::fs::read_dir(out.join("runs")).unwrap().flatten() {
        for f in ["config.json", "summary.json"] {
            let p = e.path().join(f);
            if p.exists() {
                let _: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap())
                    .unwrap_or_else(|_| panic!("corrupt {}", p.display()));
            }
        }
    }
    let o = normlab(&[
        "sweep",
        grid.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--jobs",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let recs = v.as_array().unwrap();
    assert_eq!(recs.len(), 8);
    assert!(recs.iter().filter(|r| r["reused"] == true).count() >= finished_before);
    let _ = std::fs::remove_dir_all(&dir);
}
