//! `normlab exp <id>` (and `exp list`), and `normlab demo`.

use crate::ui::{bad, progress};
use clap::Args;
use normlab::exp::{self, ExpArgs, EXPERIMENTS};
use normlab::kernels::norm::NormKind;
use normlab::model::ModelKind;
use normlab::nn::Placement;
use std::path::PathBuf;

/// Run a built-in experiment (`normlab exp list` names them).
#[derive(Args, Debug)]
pub struct ExpCmd {
    /// Experiment id, or `list`.
    id: String,
    /// Reduced setting: seconds to a minute.
    #[arg(long)]
    quick: bool,
    /// Write result.json, figures (PNG + SVG) and report.md here; training
    /// grids keep their runs in <out>/runs and resume from them.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print result.json instead of the tables.
    #[arg(long)]
    json: bool,
    /// Number of seeds.
    #[arg(long)]
    seeds: Option<usize>,
    /// First seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Training steps per run.
    #[arg(long)]
    steps: Option<usize>,
    /// Runs in parallel (each single-threaded; default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Thread counts (speed), comma-separated.
    #[arg(long)]
    threads: Option<String>,
    /// Depths, comma-separated.
    #[arg(long)]
    layers: Option<String>,
    /// Norm kinds, comma-separated.
    #[arg(long)]
    norms: Option<String>,
    /// Placements, comma-separated.
    #[arg(long)]
    placements: Option<String>,
    /// Learning rates, comma-separated.
    #[arg(long)]
    lrs: Option<String>,
    /// Warm-up lengths, comma-separated.
    #[arg(long)]
    warmups: Option<String>,
    /// Weight scales (drift), comma-separated.
    #[arg(long)]
    scales: Option<String>,
    /// Width.
    #[arg(long)]
    d_model: Option<usize>,
    /// Rows of random inputs.
    #[arg(long)]
    rows: Option<usize>,
    /// depth-sim: number of sublayers N.
    #[arg(long)]
    sublayers: Option<usize>,
    /// depth-sim: init gain g.
    #[arg(long)]
    gain: Option<f32>,
    /// depth-sim: residual connections on (default).
    #[arg(long, overrides_with = "no_residual")]
    residual: bool,
    /// depth-sim: residual connections off.
    #[arg(long)]
    no_residual: bool,
    /// depth-sim: RMSNorm before each sublayer.
    #[arg(long)]
    pre_norm: bool,
    /// depth-sim: scale each write-back by 1/sqrt(N).
    #[arg(long)]
    scale_writeback: bool,
    /// placements: toy or gpt (default both).
    #[arg(long)]
    model: Option<String>,
}

fn list<T: std::str::FromStr>(flag: &str, s: &Option<String>) -> anyhow::Result<Option<Vec<T>>>
where
    T::Err: std::fmt::Display,
{
    let Some(s) = s else { return Ok(None) };
    let mut out = Vec::new();
    for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p.parse::<T>() {
            Ok(v) => out.push(v),
            Err(e) => return bad(format!("--{flag}: '{p}': {e}")),
        }
    }
    if out.is_empty() {
        return bad(format!("--{flag} is empty"));
    }
    Ok(Some(out))
}

impl ExpCmd {
    fn args(&self) -> anyhow::Result<ExpArgs> {
        Ok(ExpArgs {
            quick: self.quick,
            out: self.out.clone(),
            seeds: self.seeds,
            seed: self.seed,
            steps: self.steps,
            jobs: self.jobs,
            threads: list::<usize>("threads", &self.threads)?,
            layers: list::<usize>("layers", &self.layers)?,
            norms: list::<NormKind>("norms", &self.norms)?,
            placements: list::<Placement>("placements", &self.placements)?,
            lrs: list::<f32>("lrs", &self.lrs)?,
            warmups: list::<usize>("warmups", &self.warmups)?,
            scales: list::<f32>("scales", &self.scales)?,
            d_model: self.d_model,
            rows: self.rows,
            sublayers: self.sublayers,
            gain: self.gain,
            residual: if self.no_residual {
                Some(false)
            } else if self.residual {
                Some(true)
            } else {
                None
            },
            pre_norm: self.pre_norm.then_some(true),
            scale_writeback: self.scale_writeback.then_some(true),
            model: match &self.model {
                Some(m) => Some(m.parse::<ModelKind>().or_else(bad)?),
                None => None,
            },
        })
    }
}

pub fn run(c: ExpCmd) -> anyhow::Result<()> {
    if c.id == "list" {
        if c.json {
            println!("{}", serde_json::to_string_pretty(EXPERIMENTS)?);
        } else {
            for e in EXPERIMENTS {
                println!("{:<17} {}", e.id, e.question);
            }
        }
        return Ok(());
    }
    let args = c.args()?;
    if let Some(out) = &c.out {
        if out.exists() && !out.is_dir() {
            return bad(format!("{} exists and is not a folder", out.display()));
        }
    }
    let pb = progress(1, &c.id);
    if c.json {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let r = exp::run(&c.id, &args, &|done, total, msg| {
        pb.set_length(total as u64);
        pb.set_position(done as u64);
        pb.set_message(format!("{} {msg}", c.id));
    })
    .or_else(bad)?;
    pb.finish_and_clear();
    if let Some(out) = &c.out {
        exp::write_outputs(&r, out).map_err(|e| anyhow::anyhow!(e))?;
    }
    if c.json {
        println!("{}", serde_json::to_string_pretty(&r.json())?);
    } else {
        print!("{}", r.text());
        if let Some(out) = &c.out {
            println!(
                "\nWrote {}/result.json, report.md and {} figure(s).",
                out.display(),
                r.figures.len()
            );
        }
    }
    Ok(())
}
