//! `normlab sweep --emit-slurm` on a real Slurm cluster: the script it
//! writes is submitted with `sbatch` from another folder, its array tasks
//! split the grid, and `normlab report` on the shared folder equals a local
//! run of the same grid; an array task cancelled mid-run (`scancel`) loses
//! no finished run, and resubmitting the script completes the grid with the
//! same results. Needs a running Slurm (CI starts a one-node cluster with
//! scripts/slurm_single_node.sh and sets NORMLAB_REQUIRE_SLURM, so the tests
//! cannot skip there).

mod common;

use common::slurm::{logs, slurm_or_skip, submit};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

/// The job arrays here take seconds; 5 minutes means a task never ran.
fn wait_for(job: &str, out: &Path) -> Vec<String> {
    // hang bound: 300 s (idle: 15 s; the two Slurm tests take about 30 s together)
    common::slurm::wait_for(job, out, Duration::from_secs(300))
}

fn normlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args(args)
        .output()
        .unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("normlab-slurm-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

const GRID: &str = "model = \"toy\"\nsteps = 12\nbatch = 4\nshards = 1\neval_every = 6\neval_sequences = 8\nlayers = [1, 2]\nnorm = [\"layernorm\", \"rmsnorm\"]\n";

fn done_count(grid: &Path, out: &Path) -> usize {
    let o = normlab(&[
        "sweep",
        grid.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--dry-run",
    ]);
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with("done"))
        .count()
}

/// `dir/grid.toml` with `grid`, and the job array emitted for it (2 tasks)
/// into `dir/sweep`, by a command with relative paths run in `dir` (the
/// script must not keep them). Returns (grid, sweep folder, script).
fn emit(dir: &Path, grid: &str) -> (PathBuf, PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let g = dir.join("grid.toml");
    std::fs::write(&g, grid).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .current_dir(dir)
        .args(["sweep", "grid.toml", "--out", "sweep", "--emit-slurm", "2"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = dir.join("sweep");
    let script = out.join("sweep.sbatch");
    (g, out, script)
}

/// `normlab report DIR --json`, parsed.
fn report(dir: &Path) -> serde_json::Value {
    let o = normlab(&["report", dir.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Every run folder's name with its final weights (the bytes of
/// `checkpoint.safetensors`), sorted.
fn weights(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (
                name,
                std::fs::read(p.join("checkpoint.safetensors")).unwrap_or_default(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The grid run here, one run at a time, into `dir/local`, and compared
/// with the cluster's shared folder `out`: the same report and, bit for
/// bit, the same final weights.
fn assert_same_as_local(grid: &Path, dir: &Path, out: &Path) {
    let local = dir.join("local");
    let o = normlab(&[
        "sweep",
        grid.to_str().unwrap(),
        "--out",
        local.to_str().unwrap(),
        "--jobs",
        "1",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(report(out), report(&local));
    assert_eq!(weights(out), weights(&local));
}

/// The finished runs' summaries: (folder, bytes, modification time).
fn finished(out: &Path) -> Vec<(PathBuf, Vec<u8>, SystemTime)> {
    let mut v: Vec<_> = std::fs::read_dir(out.join("runs"))
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path().join("summary.json");
            let meta = std::fs::metadata(&p).ok()?;
            Some((
                p.clone(),
                std::fs::read(&p).unwrap(),
                meta.modified().unwrap(),
            ))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn emitted_job_array_runs_on_slurm_and_equals_a_local_run() {
    if !slurm_or_skip() {
        return;
    }
    let dir = tmp("array");
    let (grid, out, script) = emit(&dir, GRID);
    let job = submit(&script);
    let states = wait_for(&job, &out);
    let logs = logs(&out);
    assert!(
        !states.is_empty() && states.iter().all(|s| s == "COMPLETED"),
        "tasks: {states:?}\nlogs: {logs:?}"
    );
    // Two array tasks, each with its own log, together all four runs.
    assert_eq!(logs.len(), 2, "{logs:?}");
    assert_eq!(done_count(&grid, &out), 4);
    assert_eq!(report(&out).as_array().map(Vec::len), Some(4));
    // The same grid run here gives the same report and the same weights.
    assert_same_as_local(&grid, &dir, &out);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs of about 2-3 s each here, so that an array task can be cancelled
/// while it trains.
const LONG_GRID: &str = "model = \"toy\"\nsteps = 15000\nbatch = 4\nshards = 1\neval_every = 5000\neval_sequences = 8\nlayers = [1, 2]\nnorm = [\"layernorm\", \"rmsnorm\"]\n";

#[test]
fn cancelled_array_task_is_completed_by_resubmitting() {
    if !slurm_or_skip() {
        return;
    }
    let dir = tmp("cancel");
    let (grid, out, script) = emit(&dir, LONG_GRID);
    let job = submit(&script);
    // Cancel task 1 while it trains one of its runs (config written, no
    // summary yet).
    let o = normlab(&[
        "sweep",
        grid.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--dry-run",
        "--shard",
        "1/2",
    ]);
    assert!(o.status.success());
    let mine: Vec<PathBuf> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("todo "))
        .map(|r| out.join("runs").join(r))
        .collect();
    assert_eq!(mine.len(), 2);
    let t0 = Instant::now();
    let training = loop {
        let t = mine
            .iter()
            .find(|r| r.join("config.json").exists() && !r.join("summary.json").exists());
        if let Some(t) = t {
            break t.clone();
        }
        assert!(
            // hang bound: 240 s (idle: 5 s)
            t0.elapsed() < Duration::from_secs(240),
            "task 1 never trained; logs: {:?}",
            logs(&out)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(500));
    let st = Command::new("scancel")
        .arg(format!("{job}_1"))
        .status()
        .unwrap();
    assert!(st.success());
    // Wait for the array to leave the queue (task 0 finishes its runs).
    wait_for(&job, &out);
    // The cancelled run stopped on SIGTERM with a resume snapshot; task 0's
    // runs finished.
    assert!(
        !training.join("summary.json").exists(),
        "{} finished",
        training.display()
    );
    assert!(
        training.join("resume.safetensors").exists(),
        "{} left no snapshot",
        training.display()
    );
    let before = finished(&out);
    let done = done_count(&grid, &out);
    assert!(
        (2..4).contains(&done),
        "{done} runs done after the cancel; logs: {:?}",
        logs(&out)
    );
    assert_eq!(before.len(), done);
    // Resubmitted, the array completes the grid; the runs finished before
    // were not run again (their summaries untouched), the cancelled one
    // resumed from its snapshot.
    let job = submit(&script);
    let states = wait_for(&job, &out);
    assert!(
        !states.is_empty() && states.iter().all(|s| s == "COMPLETED"),
        "tasks: {states:?}\nlogs: {:?}",
        logs(&out)
    );
    assert_eq!(done_count(&grid, &out), 4);
    let after = finished(&out);
    for b in &before {
        assert!(after.contains(b), "{} was rewritten", b.0.display());
    }
    // And the grid equals one run here: the interrupted run resumed
    // bit-identically.
    assert_same_as_local(&grid, &dir, &out);
    let _ = std::fs::remove_dir_all(&dir);
}
