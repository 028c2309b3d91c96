//! Slurm helpers for the tests that submit work to a real cluster
//! (slurm.rs: `sweep --emit-slurm`; exp.rs: `book --emit-slurm`): whether
//! Slurm answers (and whether CI requires it), submitting, waiting for a
//! job to leave the queue, and the jobs' logs.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn slurm_answers() -> bool {
    Command::new("sinfo")
        .arg("-h")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether the tests can run; panics where CI requires Slurm and it is absent.
pub fn slurm_or_skip() -> bool {
    if slurm_answers() {
        return true;
    }
    super::skip::skip(
        "NORMLAB_REQUIRE_SLURM",
        "the Slurm tests",
        "Slurm does not answer (sinfo)",
        "scripts/slurm_single_node.sh starts a one-node cluster (Debian's slurm-wlm and munge)",
    );
    false
}

/// `sbatch --parsable` from another folder (`/`): the job's id.
pub fn submit(script: &Path) -> String {
    // hang bound: 60 s (idle: 1 s)
    let o = Command::new("timeout")
        .current_dir("/")
        .args(["60", "sbatch", "--parsable", script.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap()
        .to_string()
}

/// Waits until job `job` (an array: all its tasks) has left the queue,
/// polling every 200 ms (`sbatch --wait` sleeps 2, 8, then 32 s between
/// its polls); after `limit` (a job asking more CPUs than the node has
/// would stay pending forever) it is cancelled and the test fails with
/// the logs in `logs_in`. Returns each task's final state (`scontrol show
/// job`: COMPLETED, CANCELLED, FAILED, ...).
pub fn wait_for(job: &str, logs_in: &Path, limit: Duration) -> Vec<String> {
    let t0 = Instant::now();
    loop {
        let q = Command::new("squeue")
            .args(["-h", "-j", job])
            .output()
            .unwrap();
        // Empty, or (once Slurm has forgotten the job) an unknown id.
        let gone = if q.status.success() {
            q.stdout.iter().all(u8::is_ascii_whitespace)
        } else {
            String::from_utf8_lossy(&q.stderr).contains("Invalid job id")
        };
        if gone {
            break;
        }
        // not timed: `limit` is the caller's hang bound, stated where it is given
        if t0.elapsed() > limit {
            let _ = Command::new("scancel").arg(job).status();
            panic!(
                "job {job} still queued after {} s; logs: {:?}",
                limit.as_secs(),
                logs(logs_in)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let o = Command::new("scontrol")
        .args(["-o", "show", "job", job])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .filter_map(|f| f.strip_prefix("JobState="))
        .map(str::to_string)
        .collect()
}

/// The contents of the Slurm logs (`slurm-*`) in `dir`.
pub fn logs(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name()?.to_string_lossy().into_owned();
            name.starts_with("slurm-")
                .then(|| std::fs::read_to_string(&p).unwrap_or_default())
        })
        .collect()
}
