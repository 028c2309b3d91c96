//! The run-folder format, and the guarantees it gives.
//!
//! ```text
//! config.json             the run's settings (written first)
//! metrics.jsonl           one StepRecord per logged or evaluated step
//! resume.safetensors      the resume snapshot: weights, Adam moments (m., v.)
//!                         and, in its metadata, the step, Adam's t, the
//!                         running totals and the config: one atomic file,
//!                         so weights, optimizer state and data position
//!                         always belong to the same step
//! checkpoint.safetensors  the weights alone (Hugging Face-style names, the
//!                         config in the metadata), for users and `convert`
//! summary.json            written last: its presence marks a finished run
//! .lock                   the writer's advisory lock (see RunLock)
//! ```
//!
//! Every file is written atomically (temp name, fsync, rename; a failed
//! write removes its temp file). A checkpoint writes `metrics.jsonl`, then
//! `resume.safetensors`, then `checkpoint.safetensors`; a resume trusts
//! only the snapshot and drops metric lines after its step, so a kill at
//! any moment leaves a folder that resumes bit-identically from the last
//! complete snapshot. Older folders (weights in `checkpoint.safetensors`,
//! moments in `optimizer.safetensors`) still read and resume.
//!
//! Each of the snapshot, the weights and the summary carries a checksum of
//! its contents (CRC-32, [`crate::io::checksum`]): the snapshot's over its
//! record and tensors, the weights' over their tensors (in the
//! `normlab_config` record), the summary's over its other fields. A resume,
//! a load of the weights and [`damage`] verify them: a flipped bit is
//! refused with the file's name, never trained on or reported. Files
//! written before checksums load with a warning.

pub use super::metrics_file::{
    last_logged_step, read_metrics, read_metrics_bounded, read_metrics_counted,
    read_metrics_sampled, MetricsRead, MAX_METRICS_BYTES,
};
pub(crate) use super::metrics_file::{metric_lines_up_to, write_metrics};
use crate::error::{Error, Result};
use crate::io::{atomic_write, load_tensors, read_metadata, safetensors_bytes};
use crate::model::Model;
use crate::train::config::TrainConfig;
use crate::train::trainer::Trainer;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs;
use std::path::Path;

/// The resume snapshot's file name.
pub const SNAPSHOT: &str = "resume.safetensors";
/// The weights' file name.
pub const CHECKPOINT: &str = "checkpoint.safetensors";
/// The optimizer-state file of folders written before the snapshot.
const LEGACY_OPTIMIZER: &str = "optimizer.safetensors";
/// The snapshot format this version writes.
const SNAPSHOT_FORMAT: u64 = 1;

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Learned: the held-out loss moved well below the unigram entropy.
    Converged,
    /// Stayed near the unigram entropy (within 10% of the way to the floor).
    Stalled,
    /// The loss became non-finite, or stayed above the divergence bound.
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
    /// Training loss of the last step (NaN, written null, after a NaN).
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
    pub final_loss: f64,
    /// Lowest training loss of any step.
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
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
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
    pub steps_per_sec: f64,
    /// Training tokens per second.
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
    pub tokens_per_sec: f64,
    /// Wall time of the whole run (s).
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
    pub wall_seconds: f64,
    /// Learnable parameters.
    pub params: usize,
    /// Threads used.
    pub threads: usize,
    /// Unigram entropy of the targets (nats).
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
    pub unigram_entropy: f64,
    /// Lowest achievable loss, where known.
    pub loss_floor: Option<f64>,
    /// First step's training loss.
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
    pub first_loss: f64,
    /// Loss spikes: excursions above the divergence bound that came back
    /// below it within the divergence window.
    #[serde(default)]
    pub spikes: Vec<Spike>,
    /// Bigram-Backcopy: the final held-out loss on copy, on bigram targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_loss_parts: Option<[f64; 2]>,
}

/// An excursion of the training loss above the divergence bound.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Spike {
    /// First step above the bound.
    pub step: usize,
    /// Highest loss during it.
    pub peak_loss: f64,
    /// Steps it lasted.
    pub steps: usize,
}

/// Running totals that must survive a resume.
#[derive(Clone, Debug, Serialize, Deserialize, Default)]
pub(crate) struct Progress {
    pub step: usize,
    pub first_loss: Option<f64>,
    pub best_loss: Option<f64>,
    pub best_eval_loss: Option<f64>,
    pub last_loss: Option<f64>,
    pub last_eval_loss: Option<f64>,
    pub train_seconds: f64,
    /// Finished excursions above the divergence bound.
    #[serde(default)]
    pub spikes: Vec<Spike>,
    /// The excursion in progress, if the last step was above the bound.
    #[serde(default)]
    pub excursion: Option<Spike>,
}

/// One writer per run folder: an exclusive advisory lock (`flock`) on
/// `<dir>/.lock`, held while a process trains the run and released by the
/// OS when the process ends, however it ends. On a local disk this is
/// exact. On network file systems it is as good as their lock service:
/// Linux maps `flock` on NFS (v3 with lockd, v4) to byte-range locks that
/// the server enforces across clients; Lustre and GPFS need the `flock`
/// mount option (without it `flock` fails or is local to a node — check
/// your cluster's mounts before sharing a sweep folder between nodes).
#[derive(Debug)]
pub struct RunLock {
    _file: fs::File,
}

impl RunLock {
    /// Take the lock of run folder `dir` (created if needed); `Ok(None)`
    /// when another process holds it.
    pub fn try_acquire(dir: &Path) -> Result<Option<RunLock>> {
        crate::io::create_dir_all(dir)?;
        let path = dir.join(".lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("open", &path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(RunLock { _file: file })),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(Error::io("lock", &path, e)),
        }
    }

    /// Take the lock, or fail saying another process writes `dir`.
    pub fn acquire(dir: &Path) -> Result<RunLock> {
        RunLock::try_acquire(dir)?.ok_or_else(|| {
            Error::bad(format!(
                "another normlab process is writing {} (its .lock is held); wait for it or use another folder",
                dir.display()
            ))
        })
    }
}

/// Read `config.json` of a run folder.
pub fn read_config(dir: &Path) -> Result<TrainConfig> {
    match read_run_config(dir)? {
        (cfg, None) => Ok(cfg),
        (_, Some(source)) => Err(format!(
            "{} holds a run recorded by {source} (normlab's Python logger): normlab reports it but cannot train or resume it",
            dir.display()
        )
        .into()),
    }
}

/// The key of `config.json` that marks a run recorded outside normlab
/// (`"source": "pytorch"`, written by the Python package's `RunLogger`).
pub const SOURCE_KEY: &str = "source";

/// Read `config.json` of any run folder: normlab's own runs (checked key by
/// key, as [`read_config`]) and runs recorded elsewhere, marked by
/// [`SOURCE_KEY`], whose keys that are normlab settings with valid values
/// are laid over the gpt defaults (the others, such as the PyTorch model's
/// class, stay in the file only). Returns the config and the source.
pub fn read_run_config(dir: &Path) -> Result<(TrainConfig, Option<String>)> {
    let path = dir.join("config.json");
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("{} is not a run folder (no config.json)", dir.display()).into())
        }
        Err(e) => return Err(Error::read(&path, e)),
    };
    let invalid = |e: &dyn std::fmt::Display| format!("{} is invalid: {e}", path.display());
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| invalid(&e))?;
    if let Some(source) = v.get(SOURCE_KEY) {
        let source = source
            .as_str()
            .ok_or_else(|| invalid(&format!("{SOURCE_KEY} must be a string")))?
            .to_string();
        let obj = v.as_object().ok_or_else(|| invalid(&"not a JSON object"))?;
        return Ok((external_config(obj), Some(source)));
    }
    TrainConfig::check_keys(&v).map_err(|e| invalid(&e))?;
    let cfg: TrainConfig = serde_json::from_value(v).map_err(|e| invalid(&e))?;
    cfg.validate().map_err(|e| invalid(&e))?;
    Ok((cfg, None))
}

/// The settings of a run recorded outside normlab: gpt defaults, then each
/// of its keys that normlab knows and accepts (one at a time, in file order,
/// so that one odd value does not hide the rest).
fn external_config(obj: &serde_json::Map<String, serde_json::Value>) -> TrainConfig {
    let mut accepted = serde_json::Map::new();
    accepted.insert("model".into(), "gpt".into());
    for (k, v) in obj {
        if k == SOURCE_KEY || k == "model" {
            continue;
        }
        let mut trial = accepted.clone();
        trial.insert(k.clone(), v.clone());
        if TrainConfig::from_overrides(&trial).is_ok() {
            accepted = trial;
        }
    }
    TrainConfig::from_overrides(&accepted).expect("the gpt defaults are valid")
}

/// Write `config.json`.
pub(crate) fn write_config(dir: &Path, cfg: &TrainConfig) -> Result<()> {
    atomic_write(
        &dir.join("config.json"),
        serde_json::to_string_pretty(cfg)
            .expect("config serialises")
            .as_bytes(),
    )
}

/// Read `summary.json` of a run folder, if finished (None also when it is
/// damaged: [`check_summary`] says how).
pub fn read_summary(dir: &Path) -> Option<Summary> {
    check_summary(dir).ok().flatten()
}

/// The key of the checksum in a record (summary.json, the snapshot's and
/// the weights' metadata records).
const CHECKSUM: &str = "checksum";

/// The checksum of a JSON record without its checksum field (its compact
/// form: keys in the order serde_json keeps them).
fn record_checksum(record: &serde_json::Value, data: &[u8]) -> String {
    let mut bare = record.clone();
    if let Some(o) = bare.as_object_mut() {
        o.remove(CHECKSUM);
    }
    crate::io::checksum(&[bare.to_string().as_bytes(), data])
}

/// A record's checksum against its contents: Ok(true) verified, Ok(false)
/// none recorded (written before checksums), Err(why) damaged.
fn verify_record(record: &serde_json::Value, data: &[u8]) -> std::result::Result<bool, String> {
    match record.get(CHECKSUM) {
        None | Some(serde_json::Value::Null) => Ok(false),
        Some(c) if c.as_str() == Some(record_checksum(record, data).as_str()) => Ok(true),
        Some(_) => Err("fails its checksum (the file is damaged)".into()),
    }
}

/// `summary.json` of a run folder: None when the run has not finished,
/// Err(why) when the file is there but damaged (unreadable, or failing its
/// checksum).
pub fn check_summary(dir: &Path) -> std::result::Result<Option<Summary>, String> {
    let path = dir.join("summary.json");
    let text = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("summary.json cannot be read: {e}")),
    };
    let v: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| format!("summary.json is not JSON: {e}"))?;
    verify_record(&v, &[]).map_err(|why| format!("summary.json {why}"))?;
    let mut bare = v;
    if let Some(o) = bare.as_object_mut() {
        o.remove(CHECKSUM);
    }
    serde_json::from_value(bare)
        .map(Some)
        .map_err(|e| format!("summary.json is not a run summary: {e}"))
}

/// Write `summary.json` (last: it marks the run finished), with the
/// checksum of its fields.
pub(crate) fn write_summary(dir: &Path, s: &Summary) -> Result<()> {
    let mut v = serde_json::to_value(s).expect("summary serialises");
    let sum = record_checksum(&v, &[]);
    v[CHECKSUM] = sum.into();
    atomic_write(
        &dir.join("summary.json"),
        serde_json::to_string_pretty(&v)
            .expect("summary serialises")
            .as_bytes(),
    )
}

/// `checkpoint.safetensors` bytes: the weights of `layout` from `params`,
/// and one metadata record, `normlab_config` (the run's config, with the
/// checksum of the tensors). One metadata key per file: safetensors stores
/// metadata as a hash map, and a single key keeps the bytes deterministic.
pub fn checkpoint_bytes(
    layout: &crate::params::ParamLayout,
    params: &[f32],
    cfg: &TrainConfig,
) -> Result<Vec<u8>> {
    // Through the config's own text, so that its f32 values keep their
    // short form (0.001, not 0.0010000000474974513).
    let record: serde_json::Value =
        serde_json::from_str(&serde_json::to_string(cfg).expect("config serialises"))
            .expect("config parses");
    let build = |record: &serde_json::Value| {
        let mut meta = HashMap::new();
        meta.insert("normlab_config".to_string(), record.to_string());
        safetensors_bytes(layout, &[("", params)], meta)
    };
    // The tensors' bytes do not depend on the metadata: checksum them,
    // then write the record with it.
    let first = build(&record)?;
    let mut record = record;
    record[CHECKSUM] = record_checksum(&record, crate::io::safetensors_data(&first)).into();
    build(&record)
}

/// The weights as `checkpoint.safetensors` bytes.
fn weights_bytes(tr: &Trainer) -> Result<Vec<u8>> {
    checkpoint_bytes(&tr.model.layout, &tr.params, &tr.cfg)
}

/// Verify a safetensors file of a run folder against the checksum in its
/// metadata record `key`: Ok(true) verified, Ok(false) none recorded.
fn verify_file(bytes: &[u8], key: &str, name: &str) -> std::result::Result<bool, String> {
    let meta = read_metadata(bytes, name).map_err(|e| e.to_string())?;
    let Some(text) = meta.get(key) else {
        return Ok(false);
    };
    let record: serde_json::Value =
        serde_json::from_str(text).map_err(|_| format!("{name}'s {key} record is not JSON"))?;
    verify_record(&record, crate::io::safetensors_data(bytes))
        .map_err(|why| format!("{name} {why}"))
}

/// What is damaged in a run folder, if anything: the summary, the weights
/// and the snapshot against their checksums, and metrics.jsonl's lines
/// (each must be a step record). None for a sound folder (an unfinished
/// one included); files written before checksums count as sound.
pub fn damage(dir: &Path) -> Option<String> {
    check_summary(dir)
        .err()
        .or_else(|| file_damage(dir, read_metrics_counted(dir).1))
}

/// [`damage`] past the summary, for a reader that has checked the summary
/// and counted metrics.jsonl's unreadable lines already: the weights and
/// the snapshot against their checksums, then that count.
pub fn file_damage(dir: &Path, unreadable_metric_lines: usize) -> Option<String> {
    for (name, key) in [(CHECKPOINT, "normlab_config"), (SNAPSHOT, "normlab_resume")] {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        let bytes = match crate::io::read(&path) {
            Ok(b) => b,
            Err(e) => return Some(format!("{name} cannot be read: {e}")),
        };
        if let Err(why) = verify_file(&bytes, key, name) {
            return Some(why);
        }
    }
    match unreadable_metric_lines {
        0 => None,
        n => Some(format!("{n} line(s) of metrics.jsonl are not step records")),
    }
}

/// Write a checkpoint: the resume snapshot, then the weights.
pub(crate) fn write_checkpoint(dir: &Path, tr: &Trainer, prog: &Progress) -> Result<()> {
    let mut state = serde_json::json!({
        "format": SNAPSHOT_FORMAT,
        "step": prog.step,
        "adam_t": tr.opt.t,
        "progress": prog,
        "config": tr.cfg,
    });
    if let Some(sc) = &tr.scaler {
        // Only f16 runs have one: other snapshots keep their exact bytes.
        state["scaler"] = serde_json::json!(sc);
    }
    let build = |state: &serde_json::Value| {
        let mut meta = HashMap::new();
        meta.insert("normlab_resume".to_string(), state.to_string());
        safetensors_bytes(
            &tr.model.layout,
            &[("", &tr.params), ("m.", &tr.opt.m), ("v.", &tr.opt.v)],
            meta,
        )
    };
    // The checksum covers the record and the tensors (whose bytes do not
    // depend on the metadata).
    let first = build(&state)?;
    state[CHECKSUM] = record_checksum(&state, crate::io::safetensors_data(&first)).into();
    let snap = build(&state)?;
    atomic_write(&dir.join(SNAPSHOT), &snap)?;
    // The snapshot is the only resume state from now on.
    let _ = fs::remove_file(dir.join(LEGACY_OPTIMIZER));
    atomic_write(&dir.join(CHECKPOINT), &weights_bytes(tr)?)
}

/// Whether `dir` holds a resume state (a snapshot, or a legacy pair).
pub(crate) fn has_checkpoint(dir: &Path) -> bool {
    dir.join(SNAPSHOT).exists()
        || (dir.join(CHECKPOINT).exists() && dir.join(LEGACY_OPTIMIZER).exists())
}

/// Load the resume state of `dir` into `tr`: the snapshot, checked against
/// the config (all but `steps`, which a resume may raise), or a legacy pair.
pub(crate) fn load_checkpoint(dir: &Path, tr: &mut Trainer) -> Result<Progress> {
    let corrupt = |what: &str| {
        Error::bad(format!(
            "{}/{SNAPSHOT} {what} (corrupt run folder?)",
            dir.display()
        ))
    };
    if !dir.join(SNAPSHOT).exists() {
        return load_legacy(dir, tr);
    }
    let bytes = crate::io::read(&dir.join(SNAPSHOT))?;
    let meta = read_metadata(&bytes, SNAPSHOT)?;
    let state: serde_json::Value = meta
        .get("normlab_resume")
        .and_then(|p| serde_json::from_str(p).ok())
        .ok_or_else(|| corrupt("lacks its normlab_resume record"))?;
    match verify_record(&state, crate::io::safetensors_data(&bytes)) {
        Ok(true) => {}
        Ok(false) => eprintln!(
            "warning: {}/{SNAPSHOT} has no checksum (written before normlab recorded them): not verified",
            dir.display()
        ),
        Err(why) => {
            return Err(Error::bad(format!(
                "{}/{SNAPSHOT} {why}: refused; resume from a copy of the folder, or start the run again",
                dir.display()
            )))
        }
    }
    let format = state["format"].as_u64().unwrap_or(0);
    if format != SNAPSHOT_FORMAT {
        return Err(Error::bad(format!(
            "{}/{SNAPSHOT} has snapshot format {format}; this normlab reads format {SNAPSHOT_FORMAT}",
            dir.display()
        )));
    }
    let mut stored: TrainConfig = serde_json::from_value(state["config"].clone())
        .map_err(|_| corrupt("has a bad config record"))?;
    stored.steps = tr.cfg.steps;
    if stored != tr.cfg {
        return Err(Error::bad(format!(
            "{}/{SNAPSHOT} was written for a different configuration than config.json",
            dir.display()
        )));
    }
    let prog: Progress = serde_json::from_value(state["progress"].clone())
        .map_err(|_| corrupt("has a bad progress record"))?;
    let t = state["adam_t"]
        .as_u64()
        .ok_or_else(|| corrupt("lacks adam_t"))?;
    // f16's loss scaler (absent in snapshots of other runs): its skipped
    // steps made no optimizer update, so Adam's t lags the step by them.
    let scaler: Option<crate::train::loss_scale::LossScaler> = match state.get("scaler") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(
            serde_json::from_value(v.clone()).map_err(|_| corrupt("has a bad scaler record"))?,
        ),
    };
    if tr.scaler.is_some() != scaler.is_some() {
        return Err(corrupt("disagrees with the config on loss scaling"));
    }
    let skipped = scaler.map_or(0, |s| s.skipped);
    if (t + skipped) as usize != prog.step || state["step"].as_u64() != Some(prog.step as u64) {
        return Err(corrupt("disagrees with itself on the step"));
    }
    tr.scaler = scaler;
    load_tensors(&bytes, &tr.model.layout, "", &mut tr.params, SNAPSHOT)?;
    load_tensors(&bytes, &tr.model.layout, "m.", &mut tr.opt.m, SNAPSHOT)?;
    load_tensors(&bytes, &tr.model.layout, "v.", &mut tr.opt.v, SNAPSHOT)?;
    // A snapshot is written only while the run is finite (a diverged run
    // writes none), so a non-finite weight or moment is damage, not a
    // result: refuse it rather than resume into a "diverged" run.
    let finite = |v: &[f32]| v.iter().all(|x| x.is_finite());
    if !finite(&tr.params)
        || !finite(&tr.opt.m)
        || !tr.opt.v.iter().all(|x| x.is_finite() && *x >= 0.0)
    {
        return Err(corrupt("holds non-finite weights or moments"));
    }
    tr.opt.t = t;
    tr.step = prog.step;
    Ok(prog)
}

/// Resume state of a folder written before the snapshot: weights in
/// `checkpoint.safetensors`, moments and progress in `optimizer.safetensors`.
fn load_legacy(dir: &Path, tr: &mut Trainer) -> Result<Progress> {
    let ck = crate::io::read(&dir.join(CHECKPOINT))?;
    let ob = crate::io::read(&dir.join(LEGACY_OPTIMIZER))?;
    load_tensors(&ck, &tr.model.layout, "", &mut tr.params, CHECKPOINT)?;
    load_tensors(&ob, &tr.model.layout, "m.", &mut tr.opt.m, LEGACY_OPTIMIZER)?;
    load_tensors(&ob, &tr.model.layout, "v.", &mut tr.opt.v, LEGACY_OPTIMIZER)?;
    let meta = read_metadata(&ob, LEGACY_OPTIMIZER)?;
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

/// Remove what a finished or resumed run rewrites: the summary (a resume
/// that extends a finished run makes a new one).
pub(crate) fn clear_summary(dir: &Path) {
    let _ = fs::remove_file(dir.join("summary.json"));
}

/// Load a model and its parameters from a run folder's checkpoint.
pub fn load_model(dir: &Path) -> Result<(TrainConfig, Model, Vec<f32>)> {
    let cfg = read_config(dir)?;
    let model = Model::new(&cfg.model)?;
    let bytes = crate::io::read(&dir.join(CHECKPOINT))?;
    match verify_file(&bytes, "normlab_config", CHECKPOINT) {
        Ok(true) => {}
        Ok(false) => eprintln!(
            "warning: {}/{CHECKPOINT} has no checksum (written before normlab recorded them): not verified",
            dir.display()
        ),
        Err(why) => return Err(Error::bad(format!("{}/{why}: refused", dir.display()))),
    }
    let mut params = vec![0.0; model.layout.buffer_len()];
    load_tensors(&bytes, &model.layout, "", &mut params, CHECKPOINT)?;
    Ok((cfg, model, params))
}
