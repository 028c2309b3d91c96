//! `normlab train`: one training run from flags and/or a TOML config.

use crate::ui::{bad, progress};
use clap::Args;
use normlab::train::{self, RunOptions, RunOutcome, TrainConfig};
use serde_json::{Map, Value};
use std::path::PathBuf;

/// Train a toy net or a GPT with any norm kind and placement.
///
/// Every option can also be given in a TOML file (`--config run.toml`, keys
/// as below with '_' or '-': `model = "gpt"`, `d_model = 128`, ...); flags
/// override the file.
#[derive(Args, Debug, Default)]
pub struct TrainArgs {
    /// TOML file with options.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// toy (synthetic task, causal-mean mixer) or gpt (attention, byte-level text).
    #[arg(long)]
    pub model: Option<String>,
    /// layernorm, rmsnorm, zrmsnorm, scalenorm, none.
    #[arg(long)]
    pub norm: Option<String>,
    /// none, post, pre, sandwich, peri, olmo2, deepnorm.
    #[arg(long)]
    pub placement: Option<String>,
    /// Blocks (each: mixer/attention + MLP).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Width d.
    #[arg(long)]
    pub d_model: Option<usize>,
    /// Attention heads (gpt).
    #[arg(long)]
    pub heads: Option<usize>,
    /// Sequence length.
    #[arg(long)]
    pub seq: Option<usize>,
    /// MLP hidden width.
    #[arg(long)]
    pub hidden: Option<usize>,
    /// gelu or swiglu.
    #[arg(long)]
    pub act: Option<String>,
    /// Norm eps.
    #[arg(long)]
    pub eps: Option<f32>,
    /// Turn residual connections off (x = S(...) replaces x).
    #[arg(long)]
    pub no_residual: bool,
    /// Multiplier on each sublayer output: a number, or `invsqrt` for 1/sqrt(2L).
    #[arg(long)]
    pub branch_scale: Option<String>,
    /// Output-projection init std (default 0.02/sqrt(2L)).
    #[arg(long)]
    pub out_proj_std: Option<f32>,
    /// Init std of the other weights (default 0.02).
    #[arg(long)]
    pub init_std: Option<f32>,
    /// QK-Norm in attention (gpt).
    #[arg(long)]
    pub qk_norm: bool,
    /// Drop the final norm (default: on for pre/sandwich/peri/olmo2).
    #[arg(long, conflicts_with = "final_norm")]
    pub no_final_norm: bool,
    /// Add a final norm even where the placement has none by default.
    #[arg(long)]
    pub final_norm: bool,
    /// Tie the head to the token embedding.
    #[arg(long)]
    pub tie_head: bool,
    /// Text file to train a gpt on (default: the bundled Shakespeare).
    #[arg(long)]
    pub data: Option<String>,
    /// Toy task label-noise probability (default 0.1).
    #[arg(long)]
    pub toy_noise: Option<f32>,
    /// adam or adamw.
    #[arg(long)]
    pub optimizer: Option<String>,
    /// Peak learning rate.
    #[arg(long, allow_hyphen_values = true)]
    pub lr: Option<f32>,
    /// Adam beta1.
    #[arg(long)]
    pub beta1: Option<f32>,
    /// Adam beta2.
    #[arg(long)]
    pub beta2: Option<f32>,
    /// Adam eps.
    #[arg(long)]
    pub adam_eps: Option<f32>,
    /// Weight decay.
    #[arg(long, allow_hyphen_values = true)]
    pub weight_decay: Option<f32>,
    /// Apply weight decay to norm gains too.
    #[arg(long)]
    pub wd_norm_gains: bool,
    /// Linear warm-up steps.
    #[arg(long)]
    pub warmup: Option<usize>,
    /// constant or cosine.
    #[arg(long)]
    pub schedule: Option<String>,
    /// Cosine floor as a fraction of lr.
    #[arg(long)]
    pub min_lr_frac: Option<f32>,
    /// Global grad-norm clip (0 = off).
    #[arg(long, allow_hyphen_values = true)]
    pub clip: Option<f32>,
    /// Optimisation steps.
    #[arg(long)]
    pub steps: Option<usize>,
    /// Sequences per step.
    #[arg(long)]
    pub batch: Option<usize>,
    /// Split the batch into this many shards (results depend on shards, not on threads).
    #[arg(long)]
    pub shards: Option<usize>,
    /// Seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Held-out evaluation every N steps.
    #[arg(long)]
    pub eval_every: Option<usize>,
    /// Held-out sequences per evaluation.
    #[arg(long)]
    pub eval_sequences: Option<usize>,
    /// Record metrics every N steps.
    #[arg(long)]
    pub log_every: Option<usize>,
    /// Checkpoint every N steps (0 = at the end only).
    #[arg(long)]
    pub checkpoint_every: Option<usize>,
    /// Threads (default: all cores). Results do not depend on it.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Run folder to create.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Continue the run in this folder (to its configured steps, or --steps).
    #[arg(long, conflicts_with = "out")]
    pub resume: Option<PathBuf>,
    /// Stop after N steps of this invocation, leaving a resumable checkpoint.
    #[arg(long)]
    pub stop_after: Option<usize>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// The options given (file, then flags) as a JSON object of overrides.
pub fn overrides(a: &TrainArgs) -> anyhow::Result<Map<String, Value>> {
    let mut m = Map::new();
    if let Some(path) = &a.config {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => return bad(format!("cannot read config {}: {e}", path.display())),
        };
        let v: Value = match toml::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                return bad(format!(
                    "config {} is not valid TOML: {}",
                    path.display(),
                    e.to_string().lines().next().unwrap_or("")
                ))
            }
        };
        match v {
            Value::Object(o) => m.extend(o),
            _ => return bad("config must be a TOML table"),
        }
    }
    macro_rules! put {
        ($($field:ident),*) => {$(
            if let Some(v) = &a.$field {
                m.insert(stringify!($field).to_string(), serde_json::to_value(v)?);
            }
        )*};
    }
    put!(
        model,
        norm,
        placement,
        layers,
        d_model,
        heads,
        seq,
        hidden,
        act,
        eps,
        out_proj_std,
        init_std,
        data,
        toy_noise,
        optimizer,
        lr
    );
    put!(
        beta1,
        beta2,
        adam_eps,
        weight_decay,
        warmup,
        schedule,
        min_lr_frac,
        clip,
        steps,
        batch,
        shards,
        seed,
        eval_every
    );
    put!(eval_sequences, log_every, checkpoint_every);
    if let Some(b) = &a.branch_scale {
        let v = match b.parse::<f64>() {
            Ok(x) => Value::from(x),
            Err(_) => Value::from(b.clone()),
        };
        m.insert("branch_scale".into(), v);
    }
    for (flag, key, val) in [
        (a.no_residual, "residual", false),
        (a.qk_norm, "qk_norm", true),
        (a.tie_head, "tie_head", true),
        (a.wd_norm_gains, "wd_norm_gains", true),
        (a.no_final_norm, "final_norm", false),
        (a.final_norm, "final_norm", true),
    ] {
        if flag {
            m.insert(key.into(), Value::from(val));
        }
    }
    Ok(m)
}

pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

pub fn run(a: TrainArgs) -> anyhow::Result<()> {
    let threads = a.threads.unwrap_or_else(default_threads);
    if threads == 0 || threads > 1024 {
        return bad("--threads must be between 1 and 1024");
    }
    let (cfg, opts) = if let Some(dir) = &a.resume {
        let cfg = train::run::read_config(dir)?;
        (
            cfg,
            RunOptions {
                out: Some(dir.clone()),
                resume: true,
                threads,
                stop_after: a.stop_after,
                steps_override: a.steps,
            },
        )
    } else {
        let cfg = TrainConfig::from_overrides(&overrides(&a)?)?;
        (
            cfg,
            RunOptions {
                out: a.out.clone(),
                resume: false,
                threads,
                stop_after: a.stop_after,
                steps_override: None,
            },
        )
    };
    let total = opts.steps_override.unwrap_or(cfg.steps) as u64;
    let pb = progress(total, "train");
    if a.quiet || a.json {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let mut last_eval = None;
    let outcome = train::run(&cfg, &opts, &mut |rec, _| {
        if let Some(e) = rec.eval_loss {
            last_eval = Some(e);
        }
        pb.set_position(rec.step as u64);
        pb.set_message(format!(
            "loss {:.4}{}",
            rec.loss,
            last_eval
                .map(|e| format!(" eval {e:.4}"))
                .unwrap_or_default()
        ));
    })?;
    pb.finish_and_clear();
    match outcome {
        RunOutcome::Interrupted { step } => {
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({"status": "interrupted", "steps": step})
                );
            } else {
                let dir = opts
                    .out
                    .as_ref()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default();
                println!("stopped after step {step}; continue with: normlab train --resume {dir}");
            }
        }
        RunOutcome::Finished(s) => {
            if a.json {
                println!("{}", serde_json::to_string_pretty(&s)?);
                return Ok(());
            }
            let f = |v: Option<f64>| v.map(|x| format!("{x:.4}")).unwrap_or_else(|| "-".into());
            println!(
                "{} {} {} L{} d{}: {}{}",
                cfg.model,
                cfg.norm,
                cfg.placement,
                cfg.layers,
                cfg.d_model,
                s.status.name(),
                s.diverged_at_step
                    .map(|k| format!(" at step {k}"))
                    .unwrap_or_default()
            );
            println!(
                "  steps {}  train loss {:.4} (best {:.4})  eval loss {} (best {})  unigram entropy {:.3}{}",
                s.steps,
                s.final_loss,
                s.best_loss,
                f(s.eval_loss),
                f(s.best_eval_loss),
                s.unigram_entropy,
                s.loss_floor.map(|x| format!("  floor {x:.3}")).unwrap_or_default()
            );
            println!(
                "  {:.1} steps/s  {:.0} tokens/s  {} threads  {} params  {:.1} s",
                s.steps_per_sec, s.tokens_per_sec, s.threads, s.params, s.wall_seconds
            );
            if let Some(dir) = &opts.out {
                println!("  run folder: {}", dir.display());
            }
        }
    }
    Ok(())
}
