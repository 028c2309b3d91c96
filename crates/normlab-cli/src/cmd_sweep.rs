//! `normlab sweep` and `normlab report`.

use crate::ui::{bad, progress};
use clap::Args;
use normlab_lab::report;
use normlab_lab::sweep::{self, RunSpec, Shard, SweepOptions};
use std::path::PathBuf;

/// Run a grid of training runs: parallel, resumable, shardable.
#[derive(Args, Debug)]
pub struct SweepCmd {
    /// A grid TOML file (top-level keys are `normlab train` options; a list
    /// is an axis), or the id of a training experiment whose full grid to run
    /// (`normlab exp list`).
    grid: String,
    /// Folder for the runs (`<out>/runs/<id>`), shared by all shards.
    #[arg(long)]
    out: PathBuf,
    /// Runs in parallel (default: all cores divided by --threads).
    #[arg(long)]
    jobs: Option<usize>,
    /// Threads per run (default 1). Results do not depend on it; a run
    /// uses several threads across its batch shards (`shards` >= 2).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Run only share I of N (0-based). Default: from SLURM_ARRAY_TASK_ID /
    /// SLURM_ARRAY_TASK_COUNT or JOB_COMPLETION_INDEX / NORMLAB_SHARD_COUNT.
    #[arg(long)]
    shard: Option<String>,
    /// Write an sbatch job-array script with this many tasks to <out>/sweep.sbatch and exit
    /// (each task asks --jobs CPUs, default 1; the script names this normlab binary, the grid
    /// and the folder by absolute paths, so it can be submitted from anywhere).
    #[arg(long)]
    emit_slurm: Option<usize>,
    /// List the runs (ids and whether finished) and exit.
    #[arg(long)]
    dry_run: bool,
    /// Print one JSON record per run at the end.
    #[arg(long)]
    json: bool,
}

/// Tables and figures from a folder of runs.
#[derive(Args, Debug)]
pub struct ReportCmd {
    /// Folder containing run folders (any depth).
    dir: PathBuf,
    /// Where to write report.md, report.json and figures (default: DIR/report).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print one JSON record per run instead of the table.
    #[arg(long)]
    json: bool,
    /// Exit 2 when any run folder is damaged (its files fail their
    /// checksums, or its metrics cannot be read), after the report.
    #[arg(long)]
    strict: bool,
}

fn grid_specs(grid: &str) -> anyhow::Result<Vec<RunSpec>> {
    if let Some(e) = normlab_lab::exp::find(grid) {
        return Ok(e.sweep_specs()?);
    }
    let path = PathBuf::from(grid);
    if !path.exists() {
        let ids: Vec<&str> = normlab_lab::exp::EXPERIMENTS
            .iter()
            .filter(|e| e.grid.is_some())
            .map(|e| e.id)
            .collect();
        return bad(format!(
            "'{grid}' is neither a grid file nor an experiment with a grid ({})",
            ids.join(", ")
        ));
    }
    let g = sweep::read_grid(&path)?;
    Ok(sweep::expand_grid(&g)?)
}

pub fn sweep_run(c: SweepCmd) -> anyhow::Result<()> {
    let specs = grid_specs(&c.grid)?;
    if let Some(n) = c.emit_slurm {
        if n == 0 || n > specs.len() {
            return bad(format!(
                "--emit-slurm must be in 1..={} (the grid's runs: a task runs one or more of them; got {n})",
                specs.len()
            ));
        }
        normlab::io::create_dir_all(&c.out)?;
        let cpus = c.jobs.unwrap_or(1);
        let abs = |p: &std::path::Path| {
            p.canonicalize()
                .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
        };
        let out = abs(&c.out)?;
        let grid_path = std::path::Path::new(&c.grid);
        let grid = if grid_path.is_file() {
            abs(grid_path)?.to_string_lossy().into_owned()
        } else {
            c.grid.clone()
        };
        let exe = std::env::current_exe()?;
        let path = out.join("sweep.sbatch");
        normlab::io::atomic_write(
            &path,
            sweep::slurm_script(&exe, &grid, &out, n, cpus)?.as_bytes(),
        )?;
        println!(
            "wrote {} ({} runs in {n} array tasks); submit with: sbatch {}",
            path.display(),
            specs.len(),
            path.display()
        );
        return Ok(());
    }
    let shard = match &c.shard {
        Some(s) => Some(Shard::parse(s)?),
        None => Shard::from_env()?,
    };
    if c.dry_run {
        let mut sorted: Vec<&RunSpec> = specs.iter().collect();
        sorted.sort_by(|a, b| a.id.cmp(&b.id));
        for (i, s) in sorted.iter().enumerate() {
            if shard.is_none_or(|sh| sh.owns(i)) {
                let done = sweep::is_finished(&c.out, &s.id);
                println!("{} {}", if done { "done" } else { "todo" }, s.id);
            }
        }
        return Ok(());
    }
    normlab::limits::check_threads("--threads", c.threads)?;
    if let Some(j) = c.jobs {
        normlab::limits::check_threads("--jobs", j)?;
    }
    normlab::limits::check_threads("--jobs x --threads", c.jobs.unwrap_or(1) * c.threads)?;
    let cores = crate::cmd_train::default_threads();
    let jobs = c.jobs.unwrap_or((cores / c.threads).max(1));
    let opts = SweepOptions {
        out: Some(c.out.clone()),
        jobs,
        threads_per_run: c.threads,
        shard,
        keep_params: false,
        wait_for_held: false,
        stop: Some(crate::ui::stop_flag()),
    };
    // The sgemm peak for the closing line: measured before the runs (on the
    // idle machine) and again after, the better one reported; one taken right
    // after an hour of full load read 151 instead of ~280 GFLOP/s on the
    // development VM.
    let threads = (jobs * c.threads).min(cores).max(1);
    let any_todo = specs.iter().any(|s| !sweep::is_finished(&c.out, &s.id));
    let peak_before = if !c.json && any_todo {
        normlab_lab::bench::matmul_peak_gflops(threads, 0.3)
    } else {
        0.0
    };
    let pb = progress(1, "sweep");
    if c.json {
        pb.hide();
    }
    let t0 = std::time::Instant::now();
    let outcome = sweep::run_all(&specs, &opts, &|d, t, id| {
        pb.set_length(t as u64);
        pb.set_position(d as u64);
        pb.set_message(id.to_string());
    })?;
    pb.finish_and_clear();
    if !outcome.held.is_empty() {
        eprintln!(
            "{} run(s) are being written by another process (their .lock is held) and were left to it: {}",
            outcome.held.len(),
            outcome.held.join(", ")
        );
    }
    let interrupted = !outcome.stopped.is_empty() || outcome.not_started > 0;
    let results = &outcome.results;
    if c.json {
        let recs: Vec<_> = results.iter().map(|r| serde_json::json!({"id": r.id, "status": r.summary.status.name(), "final_eval_loss": r.summary.final_eval_loss, "reused": r.reused})).collect();
        println!("{}", serde_json::to_string_pretty(&recs)?);
    } else {
        let reused = results.iter().filter(|r| r.reused).count();
        println!(
            "{} runs{} in {:.1} s ({} already finished, {} run now) -> {}/runs",
            results.len(),
            shard
                .map(|s| format!(" (shard {}/{})", s.index, s.count))
                .unwrap_or_default(),
            t0.elapsed().as_secs_f64(),
            reused,
            results.len() - reused,
            c.out.display()
        );
        let gflop = sweep::trained_matmul_gflop(results);
        let secs = t0.elapsed().as_secs_f64();
        if gflop > 0.0 && secs > 1.0 {
            // The share of this machine's sgemm peak on the threads the
            // sweep used.
            let peak = normlab_lab::bench::matmul_peak_gflops(threads, 0.3).max(peak_before);
            println!(
                "matmul work of the training steps: {:.0} GFLOP, {:.1} GFLOP/s = {:.0}% of this machine's sgemm peak ({:.0} GFLOP/s on {threads} threads, the better of measurements before and after the runs)",
                gflop,
                gflop / secs,
                100.0 * gflop / secs / peak,
                peak
            );
        }
        println!("tables and figures: normlab report {}", c.out.display());
    }
    if interrupted {
        return Err(normlab::Error::Interrupted(format!(
            "interrupted by a signal: {} runs finished, {} stopped at a checkpoint, {} not started; run the same command again to resume",
            results.len(),
            outcome.stopped.len(),
            outcome.not_started
        ))
        .into());
    }
    Ok(())
}

pub fn report_run(c: ReportCmd) -> anyhow::Result<()> {
    let (runs, skipped) = report::scan_with_skipped(&c.dir)?;
    // Folders that look like runs but are not valid ones are named, never
    // silently left out of the tables.
    for why in skipped.iter().take(5) {
        eprintln!("warning: skipped: {why}");
    }
    if skipped.len() > 5 {
        eprintln!("warning: skipped {} more such folder(s)", skipped.len() - 5);
    }
    if runs.is_empty() {
        return bad(format!(
            "no runs (folders with config.json) under {}",
            c.dir.display()
        ));
    }
    let rep = report::build(&runs);
    let out = c.out.clone().unwrap_or_else(|| c.dir.join("report"));
    report::write(&rep, &out, &c.dir)?;
    if c.json {
        println!("{}", serde_json::to_string_pretty(&rep.records)?);
    } else {
        if let Some(t) = &rep.grid_table {
            println!("{}", t.text());
        }
        print!("{}", rep.table.text());
        println!(
            "\nWrote {}/report.md, report.json and {} figure(s).",
            out.display(),
            rep.figures.len()
        );
    }
    for r in runs.iter().filter(|r| r.metrics_left_out > 0) {
        eprintln!(
            "warning: {}/metrics.jsonl is past the {} MiB read: {} of its records left out (the rest evenly apart, the last kept)",
            r.dir.display(),
            normlab::train::run::MAX_METRICS_BYTES >> 20,
            r.metrics_left_out
        );
    }
    let damaged: Vec<&report::FoundRun> = runs.iter().filter(|r| r.damage.is_some()).collect();
    for r in &damaged {
        eprintln!(
            "warning: {} is damaged: {}",
            r.dir.display(),
            r.damage.as_deref().unwrap_or_default()
        );
    }
    if c.strict && !damaged.is_empty() {
        return bad(format!(
            "{} of {} run folder(s) are damaged (--strict)",
            damaged.len(),
            runs.len()
        ));
    }
    Ok(())
}
