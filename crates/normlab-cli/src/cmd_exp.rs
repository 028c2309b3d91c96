//! `normlab exp <id>` (and `exp list`), and `normlab demo`.

use crate::ui::{bad, progress};
use clap::Args;
use normlab::exp::{self, ExpArgs, EXPERIMENTS};
use normlab::kernels::norm::NormKind;
use normlab::model::{InitScheme, ModelKind};
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
    /// depth-sim: LayerNorm Scaling, the pre-norm output of sublayer l times 1/sqrt(l) (with --pre-norm).
    #[arg(long)]
    lns: bool,
    /// depth-sim: DyT's tanh(0.5 x) in the pre-norm's place (with --pre-norm).
    #[arg(long)]
    dyt: bool,
    /// depth-sim: ReZero, each branch times a learnable scalar gate at its init 0.
    #[arg(long)]
    rezero: bool,
    /// depth-sim: LayerScale, each branch times a learnable per-channel scale at this init (e.g. 1e-4).
    #[arg(long, value_name = "INIT")]
    layerscale: Option<f64>,
    /// placements: toy or gpt (default both).
    #[arg(long)]
    model: Option<String>,
    /// convert: existing run folders to convert instead of training, comma-separated.
    #[arg(long)]
    runs: Option<String>,
    /// convert: calibration (distillation) steps.
    #[arg(long)]
    calibrate: Option<usize>,
    /// convert: a pretrained BERT folder to convert too (default: models/all-MiniLM-L6-v2 if present).
    #[arg(long)]
    bert: Option<PathBuf>,
    /// Weight initialisations, comma-separated: gpt2, torch (collapse).
    #[arg(long)]
    inits: Option<String>,
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
            lns: self.lns.then_some(true),
            dyt: self.dyt.then_some(true),
            rezero: self.rezero.then_some(true),
            layerscale: self.layerscale,
            model: match &self.model {
                Some(m) => Some(m.parse::<ModelKind>().or_else(bad)?),
                None => None,
            },
            runs: list::<PathBuf>("runs", &self.runs)?,
            calibrate: self.calibrate,
            bert: self.bert.clone(),
            inits: list::<InitScheme>("inits", &self.inits)?,
            stop: Some(crate::ui::stop_flag()),
        })
    }
}

pub fn run(c: ExpCmd) -> anyhow::Result<()> {
    if c.id == "list" {
        if c.json {
            let infos: Vec<_> = EXPERIMENTS.iter().map(|e| e.info()).collect();
            println!("{}", serde_json::to_string_pretty(&infos)?);
        } else {
            for e in EXPERIMENTS {
                let flags: Vec<String> =
                    e.flags.iter().map(|f| format!("--{}", f.name())).collect();
                println!(
                    "{:<17} {}\n{:<17} flags: {}",
                    e.id,
                    e.question,
                    "",
                    flags.join(" ")
                );
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
    })?;
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

/// The headline results in about two minutes: depth-sim with its toggles,
/// collapse and lr-sensitivity in reduced size, and speed.
#[derive(Args, Debug)]
pub struct DemoCmd {
    /// Output folder (report.md, one sub-folder per experiment).
    #[arg(long, default_value = "normlab-demo")]
    out: PathBuf,
    /// Runs in parallel (default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
}

pub fn demo(c: DemoCmd) -> anyhow::Result<()> {
    use normlab::kernels::norm::NormKind as K;
    if c.out.exists() {
        let ours = std::fs::read_to_string(c.out.join("report.md"))
            .map(|t| t.contains("normlab demo"))
            .unwrap_or(false);
        let empty = std::fs::read_dir(&c.out)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false);
        if !ours && !empty {
            return bad(format!(
                "{} exists and is not a normlab demo folder; choose another --out",
                c.out.display()
            ));
        }
    }
    let t0 = std::time::Instant::now();
    let plan: Vec<(&str, &str, ExpArgs)> = vec![
        ("depth-sim", "Depth simulator (N = 32 sublayers, gain 1)", ExpArgs::default()),
        (
            "collapse",
            "Collapse without normalization (reduced: 6 and 20 layers, lr 1e-3 and 1e-2, 500 steps, 1 seed)",
            ExpArgs { layers: Some(vec![6, 20]), lrs: Some(vec![1e-3, 1e-2]), steps: Some(500), seeds: Some(1), norms: Some(vec![K::None, K::LayerNorm, K::RmsNorm]), ..ExpArgs::default() },
        ),
        (
            "lr-sensitivity",
            "Pre-LN vs Post-LN learning-rate sensitivity (reduced: 24 layers, 3 learning rates, no warm-up, 500 steps, 1 seed)",
            ExpArgs { layers: Some(vec![24]), lrs: Some(vec![1e-3, 3e-3, 1e-2]), warmups: Some(vec![0]), steps: Some(500), seeds: Some(1), ..ExpArgs::default() },
        ),
        ("speed", "LayerNorm vs RMSNorm speed (reduced shape sweep)", ExpArgs { quick: true, ..ExpArgs::default() }),
    ];
    let mut md = String::from("# normlab demo\n\nThe headline results of normlab, each measured by this run (`normlab demo`). Every experiment has a full setting: `normlab exp <id>`.\n\n");
    for (id, title, mut args) in plan {
        args.jobs = c.jobs.or(args.jobs);
        let dir = c.out.join(id);
        args.out = None;
        let pb = progress(1, id);
        let r = exp::run(id, &args, &|done, total, msg| {
            pb.set_length(total as u64);
            pb.set_position(done as u64);
            pb.set_message(format!("{id} {msg}"));
        })?;
        pb.finish_and_clear();
        exp::write_outputs(&r, &dir).map_err(|e| anyhow::anyhow!(e))?;
        println!("== {title}\n");
        for t in &r.tables {
            println!("{}", t.text());
        }
        println!("Conclusion: {}\n", r.conclusion);
        md.push_str(&format!("## {title}\n\n*{}*\n\n", r.question));
        for f in &r.figures {
            md.push_str(&format!("![{}]({id}/{}.png)\n\n", f.stem, f.stem));
        }
        for t in &r.tables {
            md.push_str(&t.markdown());
            md.push('\n');
        }
        md.push_str(&format!("**Conclusion:** {}\n\nDetails: [{id}/report.md]({id}/report.md), [{id}/result.json]({id}/result.json).\n\n", r.conclusion));
    }
    md.push_str(&format!(
        "Total time: {:.0} s.\n",
        t0.elapsed().as_secs_f64()
    ));
    normlab::io::atomic_write(&c.out.join("report.md"), md.as_bytes())?;
    println!(
        "Wrote {}/report.md with the figures ({:.0} s).",
        c.out.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Run every experiment at its full setting and write findings.md: the
/// lesson's claims C1-C23, each with its statement, normlab's setting, the
/// measured figure and the verdict. Resumable: run it again after an
/// interruption and finished runs are reused.
#[derive(Args, Debug)]
pub struct BookCmd {
    /// Output folder (findings.md, findings.json, one folder per experiment).
    #[arg(long, default_value = "normlab-book")]
    out: PathBuf,
    /// The reduced settings (minutes): for tests, and a first look.
    #[arg(long)]
    quick: bool,
    /// Runs in parallel (default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Only these experiments, comma-separated.
    #[arg(long)]
    only: Option<String>,
    /// Print what would run (runs per experiment, finished ones, estimated
    /// time) and stop.
    #[arg(long)]
    dry_run: bool,
    /// After the book, publish it into this folder: findings.md and
    /// findings/<id>/ (reports, result.json, figures; no training runs).
    #[arg(long)]
    publish: Option<PathBuf>,
}

pub fn book(c: BookCmd) -> anyhow::Result<()> {
    use normlab::exp::book::{self, BookOptions};
    if c.out.exists() && !c.out.is_dir() {
        return bad(format!("{} exists and is not a folder", c.out.display()));
    }
    if let Some(j) = c.jobs {
        normlab::limits::check_threads("--jobs", j)?;
    }
    let only = match &c.only {
        Some(s) => {
            let ids: Vec<String> = s
                .split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect();
            for id in &ids {
                normlab::exp::get(id)?;
            }
            Some(ids)
        }
        None => None,
    };
    let opts = BookOptions {
        out: c.out.clone(),
        quick: c.quick,
        jobs: c.jobs,
        only,
        stop: Some(crate::ui::stop_flag()),
    };
    if let Some(p) = &c.publish {
        if p.exists() && !p.is_dir() {
            return bad(format!(
                "--publish: {} exists and is not a folder",
                p.display()
            ));
        }
    }
    if c.dry_run {
        let rows = book::plan(&opts)?;
        let jobs = c
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1);
        let mut t = crate::ui::Table::new(&[
            "experiment",
            "runs",
            "finished",
            "estimated core-minutes left",
        ]);
        let mut total = 0.0;
        for r in &rows {
            total += r.core_seconds_left;
            t.row(vec![
                r.id.into(),
                r.runs.to_string(),
                r.finished.to_string(),
                format!("{:.1}", r.core_seconds_left / 60.0),
            ]);
        }
        print!("{t}");
        println!(
            "\nestimated {:.1} core-hours left, about {:.1} h with {jobs} job(s) (estimate: matmul work at {} GFLOP/s per core)",
            total / 3600.0,
            total / 3600.0 / jobs as f64,
            normlab::exp::book::GFLOPS_PER_CORE
        );
        return Ok(());
    }
    // Units of the bar: tenths of an estimated core-second.
    let pb = progress(1, "book");
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {msg:40} [{bar:30}] {percent}% {elapsed_precise} (eta {eta})",
        )
        .unwrap()
        .progress_chars("=> "),
    );
    let started = std::sync::Mutex::new(false);
    let b = book::run(&opts, &|done, total, msg| {
        pb.set_length((total * 10.0).max(1.0) as u64);
        pb.set_position((done * 10.0) as u64);
        let mut s = started.lock().unwrap();
        if !*s {
            // Work found done at the start is not speed: restart the ETA.
            pb.reset_eta();
            *s = true;
        }
        pb.set_message(msg.chars().take(40).collect::<String>());
    })?;
    pb.finish_and_clear();
    let list = book::findings(&book::recorded(&c.out, c.quick)?);
    let mut t = crate::ui::Table::new(&["claim", "experiment", "verdict"]);
    for f in &list {
        t.row(vec![
            f.claim.into(),
            f.experiment.clone(),
            f.verdict.label().into(),
        ]);
    }
    print!("{t}");
    println!(
        "\n{} experiments in {:.1} min ({:.1} min over every session of this book); findings: {}/findings.md",
        b.results.len(),
        b.seconds / 60.0,
        b.total_seconds / 60.0,
        c.out.display()
    );
    if let Some(p) = &c.publish {
        book::publish(&c.out, p)?;
        println!("published: {}/findings.md", p.display());
    }
    Ok(())
}
