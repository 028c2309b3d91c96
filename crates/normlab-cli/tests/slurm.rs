//! `normlab sweep --emit-slurm` on a real Slurm cluster: the script it
//! writes is submitted with `sbatch` from another folder, its array tasks
//! split the grid, and `normlab report` reads the result. Needs a running
//! Slurm (CI starts a one-node cluster with scripts/slurm_single_node.sh and
//! sets NORMLAB_REQUIRE_SLURM, so the test cannot skip there).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn normlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args(args)
        .output()
        .unwrap()
}

fn slurm_answers() -> bool {
    Command::new("sinfo")
        .arg("-h")
        .output()
        .is_ok_and(|o| o.status.success())
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

#[test]
fn emitted_job_array_runs_on_slurm_and_report_reads_it() {
    if !slurm_answers() {
        assert!(
            std::env::var_os("NORMLAB_REQUIRE_SLURM").is_none(),
            "Slurm does not answer (sinfo) but NORMLAB_REQUIRE_SLURM is set"
        );
        eprintln!("no Slurm here (sinfo): skipped; scripts/slurm_single_node.sh starts one");
        return;
    }
    let dir = tmp("array");
    std::fs::create_dir_all(&dir).unwrap();
    let grid = dir.join("grid.toml");
    std::fs::write(&grid, GRID).unwrap();
    let out = dir.join("sweep");
    // Relative paths on the command line: the script must not keep them.
    let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .current_dir(&dir)
        .args(["sweep", "grid.toml", "--out", "sweep", "--emit-slurm", "2"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let script = out.join("sweep.sbatch");
    // Submitted from another folder, and waited for (at most 5 minutes: a
    // task asking more CPUs than the node has would stay pending forever).
    let o = Command::new("timeout")
        .current_dir("/")
        .args(["300", "sbatch", "--wait", script.to_str().unwrap()])
        .output()
        .unwrap();
    if !o.status.success() {
        let _ = Command::new("scancel")
            .args(["--name", "normlab-sweep"])
            .status();
    }
    let logs: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name()?.to_string_lossy().into_owned();
            name.starts_with("slurm-")
                .then(|| std::fs::read_to_string(&p).unwrap_or_default())
        })
        .collect();
    assert!(
        o.status.success(),
        "sbatch: {}{}\nlogs: {logs:?}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // Two array tasks, each with its own log, together all four runs.
    assert_eq!(logs.len(), 2, "{logs:?}");
    assert_eq!(done_count(&grid, &out), 4);
    let o = normlab(&["report", out.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(4));
    let _ = std::fs::remove_dir_all(&dir);
}
