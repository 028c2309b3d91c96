//! `normlab train`: one training run from flags and/or a TOML config.

use crate::ui::{bad, progress};
use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use normlab::settings::{self, Flag};
use normlab::train::{self, RunOptions, RunOutcome, TrainConfig};
use serde_json::{Map, Value};
use std::path::PathBuf;

/// `normlab train`'s arguments: the run's options (one flag per field of
/// `TrainConfig`, generated from its field table, help from its doc
/// comments) and the invocation's own (not part of the run).
///
/// Every option can also be given in a TOML file (`--config run.toml`, keys
/// as the flags with '_' or '-': `model = "gpt"`, `d_model = 128`, ...);
/// flags override the file.
#[derive(Debug, Default)]
pub struct TrainArgs {
    /// The run options given as flags (key -> value).
    pub flags: Map<String, Value>,
    /// Flags that would change a run, by name (for refusing them on resume).
    pub given: Vec<String>,
    /// TOML file with options.
    pub config: Option<PathBuf>,
    /// Threads.
    pub threads: Option<usize>,
    /// Run folder to create.
    pub out: Option<PathBuf>,
    /// Continue the run in this folder.
    pub resume: Option<PathBuf>,
    /// Stop after N steps of this invocation.
    pub stop_after: Option<usize>,
    /// Print the summary as JSON.
    pub json: bool,
    /// No progress bar.
    pub quiet: bool,
}

/// The flags of the invocation itself (not part of the run's identity).
fn invocation_args(cmd: Command) -> Command {
    cmd.arg(
        Arg::new("config")
            .long("config")
            .value_name("FILE")
            .value_parser(clap::value_parser!(PathBuf))
            .help("TOML file with options (keys as the flags below); flags override it"),
    )
    .arg(
        Arg::new("threads")
            .long("threads")
            .value_name("N")
            .value_parser(clap::value_parser!(usize))
            .help("Threads (default: all cores). Results do not depend on it"),
    )
    .arg(
        Arg::new("out")
            .long("out")
            .value_name("DIR")
            .value_parser(clap::value_parser!(PathBuf))
            .help("Run folder to create"),
    )
    .arg(
        Arg::new("resume")
            .long("resume")
            .value_name("DIR")
            .value_parser(clap::value_parser!(PathBuf))
            .conflicts_with("out")
            .help("Continue the run in this folder (to its configured steps, or --steps)"),
    )
    .arg(
        Arg::new("stop_after")
            .long("stop-after")
            .value_name("N")
            .value_parser(clap::value_parser!(usize))
            .help("Stop after N steps of this invocation, leaving a resumable checkpoint"),
    )
    .arg(
        Arg::new("json")
            .long("json")
            .action(ArgAction::SetTrue)
            .help("Print the summary as JSON"),
    )
    .arg(
        Arg::new("quiet")
            .long("quiet")
            .action(ArgAction::SetTrue)
            .help("No progress bar"),
    )
}

impl Args for TrainArgs {
    fn augment_args(cmd: Command) -> Command {
        crate::flags::augment(invocation_args(cmd), TrainConfig::fields().copied())
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        TrainArgs::augment_args(cmd)
    }
}

impl FromArgMatches for TrainArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut a = TrainArgs {
            config: m.get_one::<PathBuf>("config").cloned(),
            threads: m.get_one::<usize>("threads").copied(),
            out: m.get_one::<PathBuf>("out").cloned(),
            resume: m.get_one::<PathBuf>("resume").cloned(),
            stop_after: m.get_one::<usize>("stop_after").copied(),
            json: m.get_flag("json"),
            quiet: m.get_flag("quiet"),
            ..TrainArgs::default()
        };
        for g in crate::flags::given(m, TrainConfig::fields().copied()) {
            let switch = TrainConfig::fields()
                .into_iter()
                .any(|f| f.key == g.key && matches!(f.flag, Flag::On | Flag::Off | Flag::OnOff));
            // Values are parsed (and refused with the flag's name) in
            // `overrides`; switches are their truth value.
            let v = if switch {
                Value::from(g.text == "true")
            } else {
                Value::from(g.text)
            };
            a.flags.insert(g.key.to_string(), v);
            a.given.push(g.written);
        }
        Ok(a)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = TrainArgs::from_arg_matches(m)?;
        Ok(())
    }
}

/// The options given (file, then flags) as a JSON object of overrides.
pub fn overrides(a: &TrainArgs) -> anyhow::Result<Map<String, Value>> {
    let mut m = Map::new();
    if let Some(path) = &a.config {
        let text = normlab::io::read_to_string(path)?;
        m.extend(settings::toml_overrides(
            &text,
            &format!("config {}", path.display()),
        )?);
    }
    for f in TrainConfig::fields() {
        if let Some(v) = a.flags.get(f.key) {
            let v = match v {
                Value::String(text) => settings::flag_value(f, text)?,
                other => other.clone(),
            };
            m.insert(f.key.to_string(), v);
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
    normlab::limits::check_threads("--threads", threads)?;
    let (cfg, opts) = if let Some(dir) = &a.resume {
        // A resumed run continues as configured: only the number of steps to
        // reach (and how this invocation runs) may be given.
        if let Some(flag) = a.given.iter().find(|g| *g != "--steps") {
            return bad(format!(
                "{flag} would change the run being resumed; with --resume only --steps (more steps), --threads, --stop-after, --json and --quiet are accepted"
            ));
        }
        if a.config.is_some() {
            return bad("--config would change the run being resumed; with --resume only --steps, --threads, --stop-after, --json and --quiet are accepted");
        }
        let steps = match a.flags.get("steps") {
            Some(Value::String(t)) => match t.trim().parse::<usize>() {
                Ok(n) if n > 0 => Some(n),
                _ => return bad(format!("--steps: '{t}' is not a positive whole number")),
            },
            _ => None,
        };
        let cfg = train::run::read_config(dir)?;
        (
            cfg,
            RunOptions {
                out: Some(dir.clone()),
                resume: true,
                threads,
                stop_after: a.stop_after,
                steps_override: steps,
                stop: Some(crate::ui::stop_flag()),
                lock_held: false,
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
                stop: Some(crate::ui::stop_flag()),
                lock_held: false,
            },
        )
    };
    let total = opts.steps_override.unwrap_or(cfg.steps) as u64;
    let pb = progress(total, "train");
    if a.quiet || a.json {
        pb.hide();
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
        RunOutcome::Interrupted { step, by_signal } => {
            let dir = opts
                .out
                .as_ref()
                .map(|d| d.display().to_string())
                .unwrap_or_default();
            let saved = if opts.out.is_some() {
                format!("checkpoint written; continue with: normlab train --resume {dir}")
            } else {
                "nothing saved (no --out)".to_string()
            };
            if by_signal {
                return Err(normlab::Error::Interrupted(format!(
                    "interrupted by a signal after step {step}: {saved}"
                ))
                .into());
            }
            if a.json {
                println!(
                    "{}",
                    serde_json::json!({"status": "interrupted", "steps": step})
                );
            } else {
                println!("stopped after step {step}; {saved}");
            }
        }
        RunOutcome::Finished(s) => {
            if a.json {
                println!("{}", serde_json::to_string_pretty(&s)?);
                return Ok(());
            }
            let f = |v: Option<f64>| v.map(|x| format!("{x:.4}")).unwrap_or_else(|| "-".into());
            let options = normlab::model::residual::label(&cfg.model);
            println!(
                "{} {} {}{options} L{} d{}: {}{}",
                cfg.model.kind,
                cfg.model.norm,
                cfg.model.placement,
                cfg.model.layers,
                cfg.model.d_model,
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
            if let Some([copy, bigram]) = s.eval_loss_parts {
                println!(
                    "  held out: copy targets {copy:.4}, bigram targets {bigram:.4}  ({})",
                    normlab::train::trainer::load_data(&cfg)?.describe()
                );
            }
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
