//! One training run: the step loop, evaluation, the divergence rule, and
//! the run folder it writes (format and guarantees in [`super::folder`]):
//! checkpoints every `checkpoint_every` steps, a clean stop on request
//! (`--stop-after`, SIGINT/SIGTERM), and bit-identical resumption.

use crate::error::Result;
use crate::train::config::TrainConfig;
use crate::train::folder::{self, Progress, RunLock, Status, Summary};
use crate::train::trainer::{StepRecord, Trainer};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub use crate::train::folder::{
    last_logged_step, load_model, read_config, read_metrics, read_metrics_sampled, read_run_config,
    read_summary,
};

/// Consecutive steps a run may spend above the divergence bound (2 ln V,
/// twice the loss of a uniform guess) before it counts as diverged. A
/// non-finite loss or gradient is divergence at once. Measured: the spikes
/// normlab's grids produce last one or two steps (the 8-layer GPT at lr
/// 1e-2 without warm-up, seed 0: one step at 12.8 > 11.09, then it trains
/// to 2.67 held-out, as PyTorch trains the same setting to 2.61), while no
/// run that rose above the bound and stayed there for 50 steps came back.
pub const DIVERGENCE_WINDOW: usize = 50;

/// Follow the loss against the divergence bound: above it, a spike while it
/// lasts; the step it began, once it has lasted [`DIVERGENCE_WINDOW`]
/// steps (the run diverged there); back below, the spike is recorded.
pub(crate) fn track_excursion(
    prog: &mut Progress,
    step: usize,
    loss: f64,
    bound: f64,
) -> Option<usize> {
    if loss > bound {
        let e = prog.excursion.get_or_insert(folder::Spike {
            step,
            peak_loss: loss,
            steps: 0,
        });
        e.steps += 1;
        e.peak_loss = e.peak_loss.max(loss);
        (e.steps >= DIVERGENCE_WINDOW).then_some(e.step)
    } else {
        if let Some(e) = prog.excursion.take() {
            prog.spikes.push(e);
        }
        None
    }
}

/// Classify a finished run (SPEC section 4).
pub fn classify(diverged: bool, final_eval: f64, unigram: f64, floor: Option<f64>) -> Status {
    if diverged || !final_eval.is_finite() {
        return Status::Diverged;
    }
    let floor = floor.unwrap_or(0.0);
    if final_eval >= unigram - 0.1 * (unigram - floor) {
        Status::Stalled
    } else {
        Status::Converged
    }
}

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
            let lines = folder::metric_lines_up_to(dir, prog.step);
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
        diverged_at = track_excursion(&mut prog, rec.step, rec.loss, tr.divergence_bound());
        prog.last_loss = Some(rec.loss);
        prog.best_loss = Some(prog.best_loss.map_or(rec.loss, |b| b.min(rec.loss)));
        if tr.step % cfg.eval_every == 0 || tr.step == cfg.steps {
            let e = tr.evaluate();
            rec.eval_loss = Some(e);
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
        diverged_at = prog.excursion.map(|e| e.step);
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
    let eval_loss = if diverged_at.is_some() {
        None
    } else if last_eval_step == tr.step {
        prog.last_eval_loss
    } else {
        Some(tr.evaluate())
    };
    let status = classify(
        diverged_at.is_some(),
        eval_loss.unwrap_or(f64::NAN),
        tr.data.unigram_entropy(),
        tr.data.loss_floor(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spikes_that_come_back_are_events_and_sustained_ones_divergence() {
        let mut p = Progress::default();
        let bound = 10.0;
        // A two-step spike, then recovery.
        for (step, loss) in [(1, 5.0), (2, 12.0), (3, 15.0), (4, 6.0)] {
            assert_eq!(track_excursion(&mut p, step, loss, bound), None);
        }
        assert_eq!(p.spikes.len(), 1);
        assert_eq!(
            (p.spikes[0].step, p.spikes[0].steps, p.spikes[0].peak_loss),
            (2, 2, 15.0)
        );
        // An excursion that lasts the window diverges at its first step.
        let mut got = None;
        for k in 0..DIVERGENCE_WINDOW {
            got = track_excursion(&mut p, 10 + k, 11.0, bound);
            if k + 1 < DIVERGENCE_WINDOW {
                assert_eq!(got, None);
            }
        }
        assert_eq!(got, Some(10));
    }
}
