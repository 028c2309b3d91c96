//! The run folder's guarantees under attack: SIGKILL at random moments,
//! SIGINT, and two sweeps writing one folder at the same time. Every test
//! compares against an uninterrupted run, byte for byte.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_normlab"))
}

/// Run normlab; whatever the input, it must never panic.
fn normlab(args: &[&str]) -> Output {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args(args)
        .output()
        .expect("run normlab");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    o
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("normlab-resume-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A tiny deterministic generator for kill times.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

const RUN: [&str; 17] = [
    "train",
    "--model",
    "toy",
    "--layers",
    "2",
    "--steps",
    "200",
    "--batch",
    "8",
    "--eval-every",
    "50",
    "--eval-sequences",
    "16",
    "--checkpoint-every",
    "1",
    "--threads",
    "1",
];

fn same_files(a: &Path, b: &Path) {
    for f in ["checkpoint.safetensors", "metrics.jsonl", "config.json"] {
        assert!(
            std::fs::read(a.join(f)).unwrap() == std::fs::read(b.join(f)).unwrap(),
            "{f} of {} differs from the uninterrupted run",
            b.display()
        );
    }
}

fn temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with('.') && n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn sigkill_at_random_moments_then_resume_is_bit_identical() {
    let dir = tmp("kill");
    let reference = dir.join("ref");
    let mut args: Vec<&str> = RUN.to_vec();
    let r = reference.to_str().unwrap().to_string();
    args.extend(["--quiet", "--out", &r]);
    let o = normlab(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut rng = Lcg(7);
    for i in 0..6 {
        let run = dir.join(format!("k{i}"));
        let out = run.to_str().unwrap().to_string();
        let mut args: Vec<&str> = RUN.to_vec();
        args.extend(["--quiet", "--out", &out]);
        let mut child = bin().args(&args).stderr(Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(20 + rng.next(600)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let o = if run.join("config.json").exists() {
            normlab(&["train", "--resume", &out, "--quiet"])
        } else {
            normlab(&args)
        };
        assert!(
            o.status.success(),
            "k{i}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        same_files(&reference, &run);
        assert!(temp_files(&run).is_empty(), "k{i}: temp files left");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigint_saves_a_checkpoint_and_says_so() {
    let dir = tmp("sigint");
    let reference = dir.join("ref");
    let (r, out) = (
        reference.to_str().unwrap().to_string(),
        dir.join("run").to_str().unwrap().to_string(),
    );
    let mut args: Vec<&str> = RUN.to_vec();
    args.extend(["--quiet", "--out", &r]);
    assert!(normlab(&args).status.success());
    let mut args: Vec<&str> = RUN.to_vec();
    args.extend(["--quiet", "--out", &out]);
    let child = bin().args(&args).stderr(Stdio::piped()).spawn().unwrap();
    // Wait until training has started (config written), then interrupt.
    let t0 = std::time::Instant::now();
    // hang bound: 30 s (idle: 0.2 s)
    while !Path::new(&out).join("config.json").exists() && t0.elapsed().as_secs() < 30 {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.success() {
        // The run finished before the signal arrived: nothing to resume.
        same_files(&reference, Path::new(&out));
        return;
    }
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted by a signal") && err.contains("--resume"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let o = normlab(&["train", "--resume", &out, "--quiet"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    same_files(&reference, Path::new(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

const GRID: &str = "model = \"toy\"\nsteps = 60\nbatch = 4\nshards = 1\neval_every = 20\neval_sequences = 8\ncheckpoint_every = 5\nlayers = [1, 2]\nnorm = [\"layernorm\", \"rmsnorm\"]\nlr = [1e-3, 1e-2]\n";

/// `normlab sweep --json` records: id -> (status, final eval loss).
fn records(o: &Output) -> Vec<(String, String, Option<f64>)> {
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut out: Vec<_> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_string(),
                r["status"].as_str().unwrap().to_string(),
                r["final_eval_loss"].as_f64(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn two_sweeps_on_one_folder_share_the_work_and_never_finish_a_run_wrongly() {
    let dir = tmp("two-writers");
    let grid = dir.join("grid.toml");
    std::fs::write(&grid, GRID).unwrap();
    let g = grid.to_str().unwrap();
    let alone = dir.join("alone");
    let o = normlab(&[
        "sweep",
        g,
        "--out",
        alone.to_str().unwrap(),
        "--jobs",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = records(&o);
    assert_eq!(want.len(), 8);
    for trial in 0..3 {
        let shared = dir.join(format!("shared{trial}"));
        let s = shared.to_str().unwrap();
        let spawn = || {
            bin()
                .args(["sweep", g, "--out", s, "--jobs", "1", "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn(), spawn());
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        for o in [&a, &b] {
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        // Together they finished every run, each with the right result.
        let mut got = records(&a);
        got.extend(records(&b));
        got.sort_by(|x, y| x.0.cmp(&y.0));
        got.dedup_by(|x, y| x.0 == y.0);
        assert_eq!(got, want, "trial {trial}");
        // A third sweep finds everything finished, with the same results.
        let o = normlab(&["sweep", g, "--out", s, "--jobs", "2", "--json"]);
        assert_eq!(records(&o), want);
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(v.as_array().unwrap().iter().all(|r| r["reused"] == true));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `train --resume` on a folder whose metrics.jsonl is gone says so in one
/// warning line naming the lost steps, and still finishes the run.
#[test]
fn resume_warns_about_a_lost_history() {
    let dir = tmp("lost-history");
    let out = dir.join("run").to_str().unwrap().to_string();
    let o = normlab(&[
        "train",
        "--model",
        "toy",
        "--layers",
        "1",
        "--steps",
        "10",
        "--batch",
        "2",
        "--shards",
        "1",
        "--eval-sequences",
        "2",
        "--eval-every",
        "5",
        "--log-every",
        "1",
        "--stop-after",
        "4",
        "--quiet",
        "--out",
        &out,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_file(Path::new(&out).join("metrics.jsonl")).unwrap();
    let o = normlab(&["train", "--resume", &out, "--quiet"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning:")
            && err.contains("metrics.jsonl is missing")
            && err.contains("steps 1-4"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
