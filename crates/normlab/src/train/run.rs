//! Run folders: `config.json`, `metrics.jsonl`, `summary.json`,
//! `checkpoint.safetensors` (Hugging Face-style names, the model config in
//! its metadata) and `optimizer.safetensors` (Adam moments, for `--resume`).
//! Every file is written atomically (temp name, fsync, rename), so a killed
//! run never leaves a half-written file; a run without `summary.json` is
//! unfinished and can be resumed from its last checkpoint, bit-identically.

use crate::error::Result;
use crate::io::{atomic_write, load_tensors, read_metadata, safetensors_bytes};
use crate::model::Model;
use crate::train::config::TrainConfig;
use crate::train::trainer::{StepRecord, Trainer};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Learned: the held-out loss moved well below the unigram entropy.
    Converged,
    /// Stayed near the unigram entropy (within 10% of the way to the floor).
    Stalled,
    /// Loss became non-finite or exceeded 2 ln(vocab).
    Diverged,
}

impl Status {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Status::Converged => "converged",
            Status::Stalled => "stalled",
            Status::Diverged => "diverged",
        }
    }
}

/// `summary.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// converged / stalled / diverged.
    pub status: Status,
    /// Training loss of the last step.
    pub final_loss: f64,
    /// Lowest training loss of any step.
    pub best_loss: f64,
    /// Held-out loss at the end (null if diverged).
    pub eval_loss: Option<f64>,
    /// Same as eval_loss (name used by experiment tables).
    pub final_eval_loss: Option<f64>,
    /// Lowest held-out loss of any evaluation.
    pub best_eval_loss: Option<f64>,
    /// Step at which the run diverged.
    pub diverged_at_step: Option<usize>,
    /// Steps completed.
    pub steps: usize,
    /// Optimisation steps per second (training steps only, no evaluation).
    pub steps_per_sec: f64,
    /// Training tokens per second.
    pub tokens_per_sec: f64,
    /// Wall time of the whole run (s).
    pub wall_seconds: f64,
    /// Learnable parameters.
    pub params: usize,
    /// Threads used.
    pub threads: usize,
    /// Unigram entropy of the targets (nats).
    pub unigram_entropy: f64,
    /// Lowest achievable loss, where known.
    pub loss_floor: Option<f64>,
    /// First step's training loss.
    pub first_loss: f64,
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

/// Running totals that must survive a resume.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
struct Progress {
    step: usize,
    first_loss: Option<f64>,
    best_loss: Option<f64>,
    best_eval_loss: Option<f64>,
    last_loss: Option<f64>,
    last_eval_loss: Option<f64>,
    train_seconds: f64,
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
    /// Steps to reach when resuming (default: the config's).
    pub steps_override: Option<usize>,
}

/// What a `run` call produced.
#[derive(Clone, Debug)]
pub enum RunOutcome {
    /// The run is complete.
    Finished(Summary),
    /// Stopped by `stop_after`; resumable.
    Interrupted {
        /// Steps completed so far.
        step: usize,
    },
}

fn write_checkpoint(dir: &Path, tr: &Trainer, prog: &Progress) -> Result<()> {
    // One metadata key per file: safetensors stores metadata as a hash map,
    // and a single key keeps the bytes deterministic.
    let mut meta = HashMap::new();
    meta.insert(
        "normlab_config".to_string(),
        serde_json::to_string(&tr.cfg).unwrap(),
    );
    let ck = safetensors_bytes(&tr.model.layout, &[("", &tr.params)], meta)?;
    let mut ometa = HashMap::new();
    let state = serde_json::json!({"adam_t": tr.opt.t, "progress": prog});
    ometa.insert("normlab_optimizer".to_string(), state.to_string());
    let ob = safetensors_bytes(
        &tr.model.layout,
        &[("m.", &tr.opt.m), ("v.", &tr.opt.v)],
        ometa,
    )?;
    // Optimizer state first: a checkpoint is only trusted with a matching one.
    atomic_write(&dir.join("optimizer.safetensors"), &ob)?;
    atomic_write(&dir.join("checkpoint.safetensors"), &ck)?;
    Ok(())
}

fn load_checkpoint(dir: &Path, tr: &mut Trainer) -> Result<Progress> {
    let ck = crate::io::read(&dir.join("checkpoint.safetensors"))?;
    let ob = crate::io::read(&dir.join("optimizer.safetensors"))?;
    load_tensors(
        &ck,
        &tr.model.layout,
        "",
        &mut tr.params,
        "checkpoint.safetensors",
    )?;
    load_tensors(
        &ob,
        &tr.model.layout,
        "m.",
        &mut tr.opt.m,
        "optimizer.safetensors",
    )?;
    load_tensors(
        &ob,
        &tr.model.layout,
        "v.",
        &mut tr.opt.v,
        "optimizer.safetensors",
    )?;
    let meta = read_metadata(&ob, "optimizer.safetensors")?;
    let state: serde_json::Value = meta
        .get("normlab_optimizer")
        .and_then(|p| serde_json::from_str(p).ok())
        .ok_or("optimizer.safetensors lacks its normlab_optimizer record (corrupt?)")?;
    let prog: Progress = serde_json::from_value(state["progress"].clone())
        .map_err(|_| "optimizer.safetensors has a bad progress record (corrupt?)")?;
    tr.opt.t = state["adam_t"]
        .as_u64()
        .ok_or("optimizer.safetensors lacks adam_t (corrupt?)")?;
    if tr.opt.t as usize != prog.step {
        return Err(
            "checkpoint and optimizer state disagree on the step (corrupt run folder?)".into(),
        );
    }
    tr.step = prog.step;
    Ok(prog)
}

/// Read `config.json` of a run folder.
pub fn read_config(dir: &Path) -> Result<TrainConfig> {
    let path = dir.join("config.json");
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("{} is not a run folder (no config.json)", dir.display()).into())
        }
        Err(e) => return Err(crate::Error::read(&path, e)),
    };
    let invalid = |e: &dyn std::fmt::Display| format!("{} is invalid: {e}", path.display());
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| invalid(&e))?;
    TrainConfig::check_keys(&v).map_err(|e| invalid(&e))?;
    let cfg: TrainConfig = serde_json::from_value(v).map_err(|e| invalid(&e))?;
    cfg.validate().map_err(|e| invalid(&e))?;
    Ok(cfg)
}

/// Read `summary.json` of a run folder, if finished.
pub fn read_summary(dir: &Path) -> Option<Summary> {
    serde_json::from_str(&fs::read_to_string(dir.join("summary.json")).ok()?).ok()
}

/// Read `metrics.jsonl` (lines that do not parse are skipped).
pub fn read_metrics(dir: &Path) -> Vec<StepRecord> {
    fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Train `cfg` (or, with `opts.resume`, the run in `opts.out`), calling
/// `on_step` after every step. Errors are one-line messages; nothing in an
/// existing run folder is changed unless resuming it.
pub fn run(
    cfg: &TrainConfig,
    opts: &RunOptions,
    on_step: &mut dyn FnMut(&StepRecord, &Trainer),
) -> Result<RunOutcome> {
    let wall = Instant::now();
    let (mut tr, mut prog, mut metrics_lines) = match (&opts.out, opts.resume) {
        (Some(dir), true) => {
            let mut cfg = read_config(dir)?;
            if let Some(s) = opts.steps_override {
                cfg.steps = s;
            }
            let mut tr = Trainer::new(&cfg, opts.threads)?;
            let prog = if dir.join("checkpoint.safetensors").exists() {
                load_checkpoint(dir, &mut tr)?
            } else {
                Progress::default()
            };
            // Keep the metrics up to the checkpoint; later lines are redone.
            let lines: Vec<String> = fs::read_to_string(dir.join("metrics.jsonl"))
                .unwrap_or_default()
                .lines()
                .filter(|l| {
                    serde_json::from_str::<StepRecord>(l)
                        .map(|r| r.step <= prog.step)
                        .unwrap_or(false)
                })
                .map(String::from)
                .collect();
            if opts.steps_override.is_some() {
                atomic_write(
                    &dir.join("config.json"),
                    serde_json::to_string_pretty(&cfg).unwrap().as_bytes(),
                )?;
            }
            let _ = fs::remove_file(dir.join("summary.json"));
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
                if dir.exists() && !dir.is_dir() {
                    return Err(format!("{} exists and is not a folder", dir.display()).into());
                }
                crate::io::create_dir_all(dir)?;
                atomic_write(
                    &dir.join("config.json"),
                    serde_json::to_string_pretty(cfg).unwrap().as_bytes(),
                )?;
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
    let flush_metrics = |dir: &Path, lines: &[String]| -> Result<()> {
        let mut text = lines.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        atomic_write(&dir.join("metrics.jsonl"), text.as_bytes())
    };
    while tr.step < cfg.steps {
        if opts.stop_after.is_some_and(|n| steps_this_run >= n) {
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
        if log || rec.eval_loss.is_some() {
            metrics_lines.push(serde_json::to_string(&rec).unwrap());
        }
        on_step(&rec, &tr);
        if let Some(dir) = &opts.out {
            if cfg.checkpoint_every > 0
                && tr.step % cfg.checkpoint_every == 0
                && tr.step < cfg.steps
            {
                flush_metrics(dir, &metrics_lines)?;
                write_checkpoint(dir, &tr, &prog)?;
            }
        }
    }
    let finished = diverged_at.is_some() || tr.step >= cfg.steps;
    if !finished {
        if let Some(dir) = &opts.out {
            flush_metrics(dir, &metrics_lines)?;
            write_checkpoint(dir, &tr, &prog)?;
        }
        return Ok(RunOutcome::Interrupted { step: tr.step });
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
    };
    if let Some(dir) = &opts.out {
        flush_metrics(dir, &metrics_lines)?;
        if diverged_at.is_none() {
            write_checkpoint(dir, &tr, &prog)?;
        }
        atomic_write(
            &dir.join("summary.json"),
            serde_json::to_string_pretty(&summary).unwrap().as_bytes(),
        )?;
    }
    Ok(RunOutcome::Finished(summary))
}

/// Load a model and its parameters from a run folder's checkpoint.
pub fn load_model(dir: &Path) -> Result<(TrainConfig, Model, Vec<f32>)> {
    let cfg = read_config(dir)?;
    let model = Model::new(&cfg.model)?;
    let bytes = crate::io::read(&dir.join("checkpoint.safetensors"))?;
    let mut params = vec![0.0; model.layout.buffer_len()];
    load_tensors(
        &bytes,
        &model.layout,
        "",
        &mut params,
        "checkpoint.safetensors",
    )?;
    Ok((cfg, model, params))
}
