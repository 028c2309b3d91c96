//! `normlab exp <id>` (and `exp list`), and `normlab demo`.

use crate::ui::{bad, progress};
use clap::Args;
use normlab_lab::exp::{self, ExpArgs, ExpFlag, EXPERIMENTS};
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
    /// The experiment flags, from their one declaration (`exp::args`).
    #[command(flatten)]
    flags: ExpFlagArgs,
}

/// The experiment flags given on the command line, as (flag, text); the
/// clap arguments are made from [`ExpFlag::all`] (name, help, shape), so a
/// flag declared in `exp::args` is on the command line with nothing added
/// here.
#[derive(Clone, Debug, Default)]
pub struct ExpFlagArgs(Vec<(ExpFlag, String)>);

impl clap::FromArgMatches for ExpFlagArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut v = Self::default();
        v.update_from_arg_matches(m)?;
        Ok(v)
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        let fields = ExpFlag::all().into_iter().map(ExpFlag::field);
        for g in crate::flags::given(m, fields) {
            let f = ExpFlag::find(g.key).expect("a declared flag");
            self.0.push((f, g.text));
        }
        Ok(())
    }
}

impl clap::Args for ExpFlagArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        crate::flags::augment(cmd, ExpFlag::all().into_iter().map(ExpFlag::field))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// `normlab exp <id> --help`: that experiment's question, the claims it
/// checks (with the lesson's statement) and only the flags it takes, from
/// the same declarations as the generic `exp` help (`cli`: the binary's
/// command). None when `argv` is not such a request.
pub fn experiment_help(argv: &[String], cli: &clap::Command) -> Option<String> {
    if argv.get(1).map(String::as_str) != Some("exp")
        || !argv.iter().any(|a| a == "--help" || a == "-h")
    {
        return None;
    }
    let e = EXPERIMENTS
        .iter()
        .find(|e| argv.iter().skip(2).any(|a| a == e.id))?;
    let takes: Vec<&str> = e.all_flags().iter().map(|f| f.field().key).collect();
    let exp_cmd = cli.find_subcommand("exp")?;
    let mut cmd = clap::Command::new(format!("normlab exp {}", e.id))
        .bin_name(format!("normlab exp {}", e.id))
        .about(e.question)
        .disable_help_flag(false);
    for a in exp_cmd.get_arguments() {
        let id = a.get_id().as_str();
        let own = ["quick", "out", "json"].contains(&id);
        let flag = takes.contains(&id) || takes.contains(&id.trim_start_matches("no-"));
        if own || flag {
            cmd = cmd.arg(a.clone());
        }
    }
    let claims: Vec<String> = normlab_lab::exp::claims::CLAIMS
        .iter()
        .filter(|c| {
            matches!(c.coverage, normlab_lab::exp::claims::Coverage::Experiments(ids) if ids.contains(&e.id))
        })
        .map(|c| format!("  {} {}: {}", c.id, c.title, c.statement))
        .collect();
    let mut after = String::new();
    if !claims.is_empty() {
        after.push_str("Claims it checks (the lesson's statement):\n");
        after.push_str(&claims.join("\n"));
        after.push_str("\n\n");
    }
    after.push_str(&format!(
        "Its chapter of the published book: docs/findings/{}/report.md. Every experiment: `normlab exp list`.",
        e.id
    ));
    cmd = cmd.after_help(after);
    Some(cmd.render_help().to_string())
}

impl ExpCmd {
    fn args(&self) -> anyhow::Result<ExpArgs> {
        let mut a = ExpArgs {
            quick: self.quick,
            out: self.out.clone(),
            stop: Some(crate::ui::stop_flag()),
            ..ExpArgs::default()
        };
        for (f, text) in &self.flags.0 {
            f.set(&mut a, text)?;
        }
        Ok(a)
    }
}

pub fn run(c: ExpCmd) -> anyhow::Result<()> {
    if c.id == "list" {
        if c.json {
            let infos: Vec<_> = EXPERIMENTS.iter().map(|e| e.info()).collect();
            println!("{}", serde_json::to_string_pretty(&infos)?);
        } else {
            for e in EXPERIMENTS {
                let flags: Vec<String> = e
                    .all_flags()
                    .iter()
                    .map(|f| format!("--{}", f.name()))
                    .collect();
                println!(
                    "{:<17} {}\n{:<17} flags: {}",
                    e.id,
                    e.question,
                    "",
                    if flags.is_empty() {
                        "none".to_string()
                    } else {
                        flags.join(" ")
                    }
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
        pb.hide();
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

/// The headline results (about 2.5 minutes on 2 cores; docs/times.md):
/// depth-sim with its toggles,
/// collapse and lr-sensitivity in reduced size, and speed. The training
/// runs stay in `<out>/<experiment>/runs/` for the lab's dashboard
/// (`normlab serve --runs <out>`); a second demo reuses them.
#[derive(Args, Debug)]
pub struct DemoCmd {
    /// Output folder (report.md, one sub-folder per experiment).
    #[arg(long, default_value = "normlab-demo")]
    out: PathBuf,
    /// Runs in parallel (default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Each experiment's --quick setting instead (about 20 seconds): a
    /// first look, and the tests.
    #[arg(long)]
    quick: bool,
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
    let published = normlab_lab::book::view::published();
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
        let title = if c.quick {
            args = ExpArgs {
                quick: true,
                ..ExpArgs::default()
            };
            format!("{} (--quick)", title.split(" (").next().unwrap_or(title))
        } else {
            title.to_string()
        };
        args.jobs = c.jobs.or(args.jobs);
        let dir = c.out.join(id);
        // The runs stay on disk, for the dashboard.
        args.out = Some(dir.clone());
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
        if let Some(line) = beside_the_book(published.as_deref(), &dir, id, &r) {
            println!("{line}\n");
            md.push_str(&format!("{line}\n\n"));
        }
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

/// The published book's verdicts beside a demo chapter's: which setting
/// each rests on (the demo's is smaller than the book's unless they are
/// the same), so a reader never takes a demo verdict for the book's. None
/// without a published book or a chapter of it.
fn beside_the_book(
    book: Option<&std::path::Path>,
    dir: &std::path::Path,
    id: &str,
    r: &normlab_lab::exp::ExpResult,
) -> Option<String> {
    let book = book?;
    let (theirs, _) = normlab_lab::book::findings::read_recorded(book, id).ok()??;
    if r.checks.is_empty() && theirs.checks.is_empty() {
        return None;
    }
    let list = |v: Vec<(&str, &str)>| {
        v.iter()
            .map(|(c, verdict)| format!("{c} {verdict}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let here = list(
        r.checks
            .iter()
            .map(|c| (c.claim, c.verdict.label()))
            .collect(),
    );
    let there = list(
        theirs
            .checks
            .iter()
            .map(|c| (c.claim, c.verdict.label()))
            .collect(),
    );
    let smaller = normlab_lab::book::view::other_setting(dir, book, id);
    Some(format!(
        "{} Here: {}; the published book ({}/{id}/report.md): {}.",
        if smaller {
            "This runs a smaller setting than the book's chapter, so its verdicts can differ."
        } else {
            "This runs the book's setting."
        },
        if here.is_empty() {
            "no verdict".to_string()
        } else {
            here
        },
        book.display(),
        if there.is_empty() {
            "no verdict".to_string()
        } else {
            there
        },
    ))
}
