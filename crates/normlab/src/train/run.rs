//! One training run: the step loop, evaluation (the divergence rule and the
//! classification are [`super::status`]'s), and
//! the run folder it writes (format and guarantees in [`super::folder`]):
//! checkpoints every `checkpoint_every` steps, a clean stop on request
//! (`--stop-after`, SIGINT/SIGTERM), and bit-identical resumption.

use crate::error::Result;
use crate::train::config::TrainConfig;
use crate::train::folder::{self, Progress, RunLock, Summary};
use crate::train::record::StepRecord;
use crate::train::status::{classify, track_excursion, unrecovered};
use crate::train::trainer::Trainer;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub use crate::train::folder::{
    check_summary, damage, file_damage, last_logged_step, load_model, read_config, read_metrics,
    read_metrics_bounded, read_metrics_counted, read_metrics_sampled, read_run_config,
    read_summary, MetricsRead, MAX_METRICS_BYTES,
};
pub use crate::train::status::DIVERGENCE_WINDOW;

/// Options of one invocation (not part of the run's identity).
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Run folder (None: nothing written).
    pub out: Option<PathBuf>,
    /// Continue the unfinished (or extend the finished) run in `out`.
    pub resume: bool,
    /// Threads.
    pub threads: usize,
    /// Stop after this many steps in this invocation (checkpoint, no summary).
    pub stop_after: Option<usize>,
    /// Steps to reach when resuming (default: the config's); at least the
    /// steps already done.
    pub steps_override: Option<usize>,
    /// When set (by a signal handler), stop after the current step with a
    /// checkpoint.
    pub stop: Option<Arc<AtomicBool>>,
    /// The caller already holds the run folder's lock (a sweep).
    pub lock_held: bool,
}

/// What a `run` call produced.
#[derive(Clone, Debug)]
// One per run, never in a loop: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum RunOutcome {
    /// The run is complete.
    Finished(Summary),
    /// Stopped early with a checkpoint (by `stop_after` or `stop`); resumable.
    Interrupted {
        /// Steps completed so far.
        step: usize,
        /// Whether `stop` (a signal) stopped it.
        by_signal: bool,
    },
}

/// Train `cfg` (or, with `opts.resume`, the run in `opts.out`), calling
/// `on_step` after every step. Errors are one-line messages; nothing in an
/// existing run folder is changed unless resuming it, and only the process
/// holding the folder's lock writes it.
pub fn run(
    cfg: &TrainConfig,
    opts: &RunOptions,
    on_step: &mut dyn FnMut(&StepRecord, &Trainer),
) -> Result<RunOutcome> {
    let wall = Instant::now();
    if let Some(dir) = &opts.out {
        if dir.exists() && !dir.is_dir() {
            return Err(format!("{} exists and is not a folder", dir.display()).into());
        }
    }
    // One writer per folder (released when this function returns).
    let _lock = match &opts.out {
        Some(dir) if !opts.lock_held => Some(RunLock::acquire(dir)?),
        _ => None,
    };
    let (mut tr, mut prog, mut metrics_lines) = match (&opts.out, opts.resume) {
        (Some(dir), true) => {
            let mut cfg = read_config(dir)?;
            crate::io::remove_stale_temp_files(dir);
            if let Some(s) = opts.steps_override {
                cfg.steps = s;
            }
            let mut tr = Trainer::new(&cfg, opts.threads)?;
            let prog = if folder::has_checkpoint(dir) {
                folder::load_checkpoint(dir, &mut tr)?
            } else {
                Progress::default()
            };
            if cfg.steps < prog.step {
                return Err(format!(
                    "--steps {} is below the {} steps {} has already done",
                    cfg.steps,
                    prog.step,
                    dir.display()
                )
                .into());
            }
            // Keep the metrics up to the checkpoint; later lines are redone.
            let (lines, problem) = folder::metric_lines_up_to(dir, prog.step, cfg.log_every);
            if let Some(p) = problem {
                // A damaged history is reported, never silently replaced.
                eprintln!("warning: {}: {p}", dir.display());
            }
            if opts.steps_override.is_some() {
                folder::write_config(dir, &cfg)?;
            }
            folder::clear_summary(dir);
            (tr, prog, lines)
        }
        (None, true) => return Err("--resume needs a run folder".into()),
        (out, false) => {
            let tr = Trainer::new(cfg, opts.threads)?;
            if let Some(dir) = out {
                if dir.join("config.json").exists() || dir.join("summary.json").exists() {
                    return Err(format!(
                        "{} already holds a run; use --resume {} or another --out",
                        dir.display(),
                        dir.display()
                    )
                    .into());
                }
                crate::io::create_dir_all(dir)?;
                folder::write_config(dir, cfg)?;
            }
            (tr, Progress::default(), Vec::new())
        }
    };
    let cfg = tr.cfg.clone();
    let mut diverged_at = None;
    let mut steps_this_run = 0;
    // The last evaluation's split by target kind (Bigram-Backcopy), when
    // it ran in this process.
    let mut last_split = None;
    let mut last_eval_step = if prog.last_eval_loss.is_some() {
        prog.step
    } else {
        usize::MAX
    };
    let stop_requested = || {
        opts.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    };
    let mut by_signal = false;
    while tr.step < cfg.steps {
        if opts.stop_after.is_some_and(|n| steps_this_run >= n) {
            break;
        }
        if stop_requested() {
            by_signal = true;
            break;
        }
        let next = tr.step + 1;
        let log = next % cfg.log_every == 0 || next == cfg.steps || next == 1;
        let t0 = Instant::now();
        let (mut rec, diverged) = tr.train_step(log);
        prog.train_seconds += t0.elapsed().as_secs_f64();
        prog.first_loss.get_or_insert(rec.loss);
        if diverged {
            diverged_at = Some(rec.step);
            prog.last_loss = Some(rec.loss);
            metrics_lines.push(serde_json::to_string(&rec).unwrap());
            on_step(&rec, &tr);
            break;
        }
        steps_this_run += 1;
        prog.step = tr.step;
        diverged_at = track_excursion(
            &mut prog.excursion,
            &mut prog.spikes,
            rec.step,
            rec.loss,
            tr.divergence_bound(),
        );
        prog.last_loss = Some(rec.loss);
        prog.best_loss = Some(prog.best_loss.map_or(rec.loss, |b| b.min(rec.loss)));
        if tr.step % cfg.eval_every == 0 || tr.step == cfg.steps {
            let (e, split) = tr.evaluate_parts();
            last_split = split;
            rec.eval_loss = Some(e);
            if let Some([copy, bigram]) = split {
                rec.eval_loss_copy = Some(copy);
                rec.eval_loss_bigram = Some(bigram);
            }
            prog.last_eval_loss = Some(e);
            last_eval_step = tr.step;
            if e.is_finite() {
                prog.best_eval_loss = Some(prog.best_eval_loss.map_or(e, |b| b.min(e)));
            }
        }
        if log || rec.eval_loss.is_some() || diverged_at.is_some() {
            metrics_lines.push(serde_json::to_string(&rec).unwrap());
        }
        on_step(&rec, &tr);
        if diverged_at.is_some() {
            break;
        }
        if let Some(dir) = &opts.out {
            if cfg.checkpoint_every > 0
                && tr.step % cfg.checkpoint_every == 0
                && tr.step < cfg.steps
            {
                folder::write_metrics(dir, &metrics_lines)?;
                folder::write_checkpoint(dir, &tr, &prog)?;
            }
        }
    }
    // A run that ends above the bound has not recovered.
    if tr.step >= cfg.steps && diverged_at.is_none() {
        diverged_at = unrecovered(prog.excursion.as_ref());
    }
    let finished = diverged_at.is_some() || tr.step >= cfg.steps;
    if !finished {
        if let Some(dir) = &opts.out {
            folder::write_metrics(dir, &metrics_lines)?;
            folder::write_checkpoint(dir, &tr, &prog)?;
        }
        return Ok(RunOutcome::Interrupted {
            step: tr.step,
            by_signal,
        });
    }
    let needs_split = matches!(tr.data, crate::train::data::Data::Backcopy(_));
    let (eval_loss, eval_loss_parts) = if diverged_at.is_some() {
        (None, None)
    } else if last_eval_step == tr.step && (last_split.is_some() || !needs_split) {
        (prog.last_eval_loss, last_split)
    } else {
        let (e, split) = tr.evaluate_parts();
        (Some(e), split)
    };
    let status = classify(
        diverged_at.is_some(),
        eval_loss.unwrap_or(f64::NAN),
        tr.data.unigram_entropy(),
        tr.data.loss_floor(),
        prog.first_loss.unwrap_or(f64::NAN),
    );
    let train_s = prog.train_seconds.max(1e-9);
    let summary = Summary {
        status,
        final_loss: prog.last_loss.unwrap_or(f64::NAN),
        best_loss: prog.best_loss.unwrap_or(f64::NAN),
        eval_loss,
        final_eval_loss: eval_loss,
        best_eval_loss: prog.best_eval_loss,
        diverged_at_step: diverged_at,
        steps: tr.step,
        steps_per_sec: tr.step as f64 / train_s,
        tokens_per_sec: (tr.step * tr.tokens_per_step()) as f64 / train_s,
        wall_seconds: wall.elapsed().as_secs_f64(),
        params: tr.model.num_params(),
        threads: tr.threads(),
        unigram_entropy: tr.data.unigram_entropy(),
        loss_floor: tr.data.loss_floor(),
        first_loss: prog.first_loss.unwrap_or(f64::NAN),
        spikes: prog.spikes.clone(),
        eval_loss_parts,
    };
    if let Some(dir) = &opts.out {
        folder::write_metrics(dir, &metrics_lines)?;
        if diverged_at.is_none() {
            folder::write_checkpoint(dir, &tr, &prog)?;
        }
        folder::write_summary(dir, &summary)?;
    }
    Ok(RunOutcome::Finished(summary))
}
