//! Sweeps: grids of training runs with content-derived ids, run in parallel
//! (each run single-threaded), resumable (finished runs are skipped,
//! unfinished ones continue from their last checkpoint, bit-identically) and
//! shardable (`--shard I/N`, or the index from Slurm / Kubernetes): many
//! shards can write into one shared folder because every run folder belongs
//! to exactly one shard.

mod groups;
mod spec;

pub use groups::{group_by, mean_std, SeedGroup};
pub use spec::{expand_grid, read_grid, run_id, RunResult, RunSpec};

use normlab::error::{Error, Result};
use normlab::train::run::{read_metrics, read_summary, RunOptions, RunOutcome};
use normlab::train::RunLock;
use normlab::train::{self, TrainConfig};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Which share of a sweep this process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// 0-based index.
    pub index: usize,
    /// Number of shards.
    pub count: usize,
}

impl Shard {
    /// Parse `I/N`.
    pub fn parse(s: &str) -> Result<Shard> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("--shard must look like I/N (got '{s}')"))?;
        let (index, count) = (
            i.trim()
                .parse::<usize>()
                .map_err(|_| format!("bad shard index '{i}'"))?,
            n.trim()
                .parse::<usize>()
                .map_err(|_| format!("bad shard count '{n}'"))?,
        );
        if count == 0 || index >= count {
            return Err(format!("--shard needs 0 <= I < N (got {index}/{count})").into());
        }
        Ok(Shard { index, count })
    }

    /// From the environment of a cluster scheduler: Slurm job arrays
    /// (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT, minus SLURM_ARRAY_TASK_MIN)
    /// or Kubernetes indexed jobs (JOB_COMPLETION_INDEX with NORMLAB_SHARD_COUNT).
    pub fn from_env() -> Result<Option<Shard>> {
        let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let (Some(id), Some(count)) = (slurm_array_index()?, get("SLURM_ARRAY_TASK_COUNT")) {
            return Shard::parse(&format!("{id}/{count}")).map(Some);
        }
        if let Some(idx) = get("JOB_COMPLETION_INDEX") {
            let count = get("NORMLAB_SHARD_COUNT").ok_or("JOB_COMPLETION_INDEX is set: also set NORMLAB_SHARD_COUNT to the job's completions")?;
            return Shard::parse(&format!("{idx}/{count}")).map(Some);
        }
        Ok(None)
    }

    /// Whether run number `i` (in id order) belongs to this shard.
    pub fn owns(&self, i: usize) -> bool {
        i % self.count == self.index
    }
}

/// This Slurm array task's 0-based index (SLURM_ARRAY_TASK_ID minus
/// SLURM_ARRAY_TASK_MIN), if the process is one.
pub fn slurm_array_index() -> Result<Option<usize>> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let Some(id) = get("SLURM_ARRAY_TASK_ID") else {
        return Ok(None);
    };
    // A variable that is set must be a number (garbage read as 0 would run
    // another task's share).
    let min = match get("SLURM_ARRAY_TASK_MIN") {
        None => 0,
        Some(m) => m
            .trim()
            .parse::<usize>()
            .map_err(|_| format!("bad SLURM_ARRAY_TASK_MIN '{m}'"))?,
    };
    let id: usize = id
        .trim()
        .parse()
        .map_err(|_| format!("bad SLURM_ARRAY_TASK_ID '{id}'"))?;
    if id < min {
        return Err(format!("SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}").into());
    }
    Ok(Some(id - min))
}

/// How to run a set of specs.
#[derive(Clone, Debug, Default)]
pub struct SweepOptions {
    /// Folder: runs go to `<out>/runs/<id>`. None: in memory only.
    pub out: Option<PathBuf>,
    /// Runs in parallel.
    pub jobs: usize,
    /// Threads per run (results do not depend on it). A run spreads its
    /// batch shards over them, so more than one helps only runs with
    /// `shards >= 2`.
    pub threads_per_run: usize,
    /// Only this share.
    pub shard: Option<Shard>,
    /// Keep final parameters in the results (in-process runs only).
    pub keep_params: bool,
    /// A run another process is writing: wait for it (true; an experiment
    /// needs every result) or leave it to that process (false; a sweep).
    pub wait_for_held: bool,
    /// When set (by a signal handler): start no new run, and stop the
    /// running ones after their current step with a checkpoint.
    pub stop: Option<Arc<AtomicBool>>,
}

/// What a sweep did.
#[derive(Debug, Default)]
pub struct SweepOutcome {
    /// The finished runs (trained now or reused), in id order.
    pub results: Vec<RunResult>,
    /// Runs left to another process that holds their lock.
    pub held: Vec<String>,
    /// Runs stopped by a signal, with the step of their checkpoint.
    pub stopped: Vec<(String, usize)>,
    /// Runs not started because of a signal.
    pub not_started: usize,
}

impl SweepOutcome {
    /// Whether every run of the shard finished.
    pub fn is_complete(&self) -> bool {
        self.held.is_empty() && self.stopped.is_empty() && self.not_started == 0
    }

    /// Every result, or an error saying what is missing.
    pub fn complete(self) -> Result<Vec<RunResult>> {
        if self.is_complete() {
            Ok(self.results)
        } else {
            Err(Error::Interrupted(format!(
                "interrupted: {} runs finished, {} stopped at a checkpoint, {} not started, {} held by another process; run the same command again to resume",
                self.results.len(),
                self.stopped.len(),
                self.not_started,
                self.held.len()
            )))
        }
    }
}

/// What happened to one run.
enum RunState {
    Done(Box<RunResult>),
    Held,
    Stopped(usize),
}

/// Run `specs` (sorted by id first; the shard picks by position in that
/// order), calling `progress(done, total, id)` after each.
pub fn run_all(
    specs: &[RunSpec],
    opts: &SweepOptions,
    progress: &(dyn Fn(usize, usize, &str) + Sync),
) -> Result<SweepOutcome> {
    let mut sorted: Vec<&RunSpec> = specs.iter().collect();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    let mine: Vec<&RunSpec> = sorted
        .iter()
        .enumerate()
        .filter(|(i, _)| opts.shard.is_none_or(|s| s.owns(*i)))
        .map(|(_, s)| *s)
        .collect();
    if let Some(out) = &opts.out {
        normlab::io::create_dir_all(&out.join("runs"))?;
    }
    let total = mine.len();
    // Start the longest runs first (estimated from their matmul work), so
    // that no worker is left alone with a long run at the end. Which runs a
    // shard owns does not depend on this order, nor does any result.
    let cost: Vec<f64> = mine
        .iter()
        .map(|s| matmul_gflop(&s.cfg, s.cfg.steps))
        .collect();
    let mut order: Vec<usize> = (0..total).collect();
    order.sort_by(|&a, &b| cost[b].total_cmp(&cost[a]));
    let done = AtomicUsize::new(0);
    let next = AtomicUsize::new(0);
    let stopping = || {
        opts.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    };
    // Plain worker threads pulling runs in order (each run has its own
    // pool of `threads_per_run` threads): a rayon pool here would let a worker that waits on a
    // run's pool steal and start further runs, interleaving all of them.
    let mut slots: Vec<Option<Result<RunState>>> = (0..total).map(|_| None).collect();
    let slots_mx = std::sync::Mutex::new(&mut slots);
    std::thread::scope(|scope| {
        for _ in 0..opts.jobs.max(1).min(total.max(1)) {
            scope.spawn(|| loop {
                if stopping() {
                    break;
                }
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= total {
                    break;
                }
                let i = order[k];
                let r = run_one(mine[i], opts);
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                progress(n, total, &mine[i].id);
                slots_mx.lock().unwrap()[i] = Some(r);
            });
        }
    });
    let mut out = SweepOutcome::default();
    for (spec, r) in mine.iter().zip(slots) {
        match r {
            None => out.not_started += 1,
            Some(r) => match r? {
                RunState::Done(res) => out.results.push(*res),
                RunState::Held => out.held.push(spec.id.clone()),
                RunState::Stopped(step) => out.stopped.push((spec.id.clone(), step)),
            },
        }
    }
    Ok(out)
}

/// The folder of run `id` in the sweep folder `out`.
fn run_dir(out: &Path, id: &str) -> PathBuf {
    out.join("runs").join(id)
}

/// Whether run `id` in the sweep folder `out` has finished (its summary is
/// there): such runs are reused, not run again.
pub fn is_finished(out: &Path, id: &str) -> bool {
    read_summary(&run_dir(out, id)).is_some()
}

/// A finished run folder as a result (after checking it holds this run).
fn reuse(spec: &RunSpec, dir: &Path) -> Result<Option<RunResult>> {
    let Some(summary) = read_summary(dir) else {
        return Ok(None);
    };
    check_same_config(dir, &spec.cfg)?;
    Ok(Some(RunResult {
        id: spec.id.clone(),
        cfg: spec.cfg.clone(),
        summary,
        metrics: read_metrics(dir),
        params: None,
        reused: true,
    }))
}

fn run_one(spec: &RunSpec, opts: &SweepOptions) -> Result<RunState> {
    let dir = opts.out.as_ref().map(|o| run_dir(o, &spec.id));
    // Only the holder of a run folder's lock writes it; a finished folder
    // (summary.json is written last, atomically) is read without it.
    let mut _lock = None;
    if let Some(d) = &dir {
        if let Some(r) = reuse(spec, d)? {
            return Ok(RunState::Done(Box::new(r)));
        }
        let lock = loop {
            if let Some(l) = RunLock::try_acquire(d)? {
                break l;
            }
            if !opts.wait_for_held {
                return Ok(RunState::Held);
            }
            if opts
                .stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed))
            {
                return Ok(RunState::Held);
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        };
        _lock = Some(lock);
        // Another process may have finished it while we waited.
        if let Some(r) = reuse(spec, d)? {
            return Ok(RunState::Done(Box::new(r)));
        }
        if d.join("config.json").exists() {
            // To be resumed: it must be this run.
            check_same_config(d, &spec.cfg)?;
        }
    }
    let resume = dir.as_ref().is_some_and(|d| d.join("config.json").exists());
    let ropts = RunOptions {
        out: dir.clone(),
        resume,
        threads: opts.threads_per_run.max(1),
        stop_after: None,
        steps_override: None,
        stop: opts.stop.clone(),
        lock_held: true,
    };
    let mut metrics = Vec::new();
    let mut params = None;
    let keep = opts.keep_params;
    let cfg_steps = spec.cfg.steps;
    let outcome = train::run(&spec.cfg, &ropts, &mut |rec, tr| {
        metrics.push(rec.clone());
        if keep && (tr.step >= cfg_steps || !rec.loss.is_finite()) {
            params = Some(tr.params.to_vec());
        }
    })
    .map_err(|e| e.within(&format!("run {}", spec.id)))?;
    let summary = match outcome {
        RunOutcome::Finished(s) => s,
        RunOutcome::Interrupted { step, .. } => return Ok(RunState::Stopped(step)),
    };
    if let Some(d) = &dir {
        // After a resume the in-memory metrics lack the earlier steps.
        metrics = read_metrics(d);
    }
    Ok(RunState::Done(Box::new(RunResult {
        id: spec.id.clone(),
        cfg: spec.cfg.clone(),
        summary,
        metrics,
        params,
        reused: false,
    })))
}

/// Matmul GFLOP of the training steps of the runs trained now (not those
/// reused): 3 x forward (backward counted as twice the forward) per step
/// taken; held-out evaluations are left out.
pub fn trained_matmul_gflop(results: &[RunResult]) -> f64 {
    results
        .iter()
        .filter(|r| !r.reused)
        .map(|r| matmul_gflop(&r.cfg, r.summary.steps))
        .sum()
}

/// Matmul work of `steps` training steps of `cfg` (backward = 2x forward).
pub fn matmul_gflop(cfg: &TrainConfig, steps: usize) -> f64 {
    3.0 * crate::bench::forward_gflop(&cfg.model, cfg.batch) * steps as f64
}

/// A run folder is reused or resumed only if it holds exactly this
/// configuration (it may come from another normlab version or a hand copy).
fn check_same_config(dir: &Path, cfg: &TrainConfig) -> Result<()> {
    let path = dir.join("config.json");
    let text = normlab::io::read_to_string(&path)?;
    let stored: TrainConfig = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a normlab run config: {e}", path.display()))?;
    let same = serde_json::to_value(&stored).ok() == serde_json::to_value(cfg).ok();
    if same {
        Ok(())
    } else {
        Err(format!(
            "{} holds a run with a different configuration than this sweep's run \
             (made by another normlab version?); move it away or use another --out",
            dir.display()
        )
        .into())
    }
}

/// `s` quoted for a POSIX shell.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// An `sbatch` job-array script that runs the grid in `count` shards of
/// `cpus` CPUs each. Every path in it is absolute (`exe`: the normlab
/// binary, `grid`: an experiment id or an absolute grid file, `out`), so it
/// runs from any folder and on nodes whose PATH has no normlab (they must
/// see the same file system).
pub fn slurm_script(
    exe: &Path,
    grid: &str,
    out: &Path,
    count: usize,
    cpus: usize,
) -> Result<String> {
    let out_s = out.to_string_lossy();
    if out_s.contains(['"', '\n', '%']) {
        return Err(format!(
            "--out {out_s} cannot be written into an #SBATCH line (it holds a quote, a newline or %); choose another folder"
        )
        .into());
    }
    Ok(format!(
        "#!/bin/bash\n\
         # Generated by `normlab sweep --emit-slurm`: one array task per shard, all\n\
         # writing into the same folder (each run folder belongs to one shard).\n\
         #SBATCH --job-name=normlab-sweep\n\
         #SBATCH --array=0-{last}\n\
         #SBATCH --cpus-per-task={cpus}\n\
         #SBATCH --output=\"{out_s}/slurm-%A_%a.log\"\n\
         set -euo pipefail\n\
         {exe} sweep {grid} --out {out} --jobs \"${{SLURM_CPUS_PER_TASK:-{cpus}}}\"\n\
         # normlab reads SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT to pick its shard.\n\
         # When every task has finished: {exe} report {out}\n",
        last = count.saturating_sub(1),
        exe = sh_quote(&exe.to_string_lossy()),
        out = sh_quote(&out_s),
        grid = sh_quote(grid),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn grid_expansion_and_ids() {
        let g = json!({"model": "toy", "steps": 5, "layers": [2, 4], "norm": ["layernorm", "rmsnorm"], "seed": [0, 1]});
        let specs = expand_grid(g.as_object().unwrap()).unwrap();
        assert_eq!(specs.len(), 8);
        let ids: std::collections::HashSet<_> = specs.iter().map(|s| s.id.clone()).collect();
        assert_eq!(ids.len(), 8);
        assert!(specs[0].id.starts_with("toy-L2-layernorm-pre-lr0.001-s0-"));
        // Same content, same id.
        let again = expand_grid(g.as_object().unwrap()).unwrap();
        assert_eq!(
            specs.iter().map(|s| &s.id).collect::<Vec<_>>(),
            again.iter().map(|s| &s.id).collect::<Vec<_>>()
        );
        let bad = json!({"layers": [2, 0]});
        assert!(expand_grid(bad.as_object().unwrap())
            .unwrap_err()
            .to_string()
            .contains("layers"));
    }

    #[test]
    fn ids_ignore_default_settings_and_reuse_checks_the_config() {
        let g = json!({"model": "toy", "steps": 4, "layers": 1, "batch": 2, "eval_sequences": 4, "seed": [0, 1]});
        let specs = expand_grid(g.as_object().unwrap()).unwrap();
        // A config written before `head_bias`/`out_norm_bias` existed (both
        // default to off) parses to the same run and keeps its id.
        let mut old = serde_json::to_value(&specs[0].cfg).unwrap();
        let obj = old.as_object_mut().unwrap();
        obj.remove("head_bias");
        obj.remove("out_norm_bias");
        let parsed: TrainConfig = serde_json::from_value(old).unwrap();
        assert_eq!(run_id(&parsed), specs[0].id);
        // Any non-default setting changes the id.
        let mut other = specs[0].cfg.clone();
        other.model.head_bias = true;
        assert_ne!(run_id(&other), specs[0].id);

        let dir = std::env::temp_dir().join(format!("normlab-sweep-ids-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let opts = SweepOptions {
            out: Some(dir.clone()),
            jobs: 1,
            threads_per_run: 2,
            shard: None,
            keep_params: false,
            ..Default::default()
        };
        let first = run_all(&specs, &opts, &|_, _, _| {})
            .unwrap()
            .complete()
            .unwrap();
        assert!(first.iter().all(|r| !r.reused));
        let again = run_all(&specs, &opts, &|_, _, _| {})
            .unwrap()
            .complete()
            .unwrap();
        assert!(again.iter().all(|r| r.reused));
        // A finished folder whose config differs is not taken for this run.
        let cfg_path = dir.join("runs").join(&specs[1].id).join("config.json");
        let mut stored: Value =
            serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
        stored["lr"] = json!(0.5);
        std::fs::write(&cfg_path, stored.to_string()).unwrap();
        let err = run_all(&specs, &opts, &|_, _, _| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("different configuration"), "{err}");
        // Nor is an unfinished one resumed as this run.
        std::fs::remove_file(cfg_path.with_file_name("summary.json")).unwrap();
        let err = run_all(&specs, &opts, &|_, _, _| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("different configuration"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn shards_partition() {
        let s = Shard::parse("1/3").unwrap();
        assert!(s.owns(1) && s.owns(4) && !s.owns(0));
        assert!(Shard::parse("3/3").is_err() && Shard::parse("x").is_err());
    }
}
