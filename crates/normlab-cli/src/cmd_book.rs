//! `normlab book`: the whole book here (resumable), its estimate
//! (`--dry-run`), and the same book on a cluster: the plan with a Slurm job
//! array or a Kubernetes indexed Job around it (`--emit-slurm`,
//! `--emit-k8s`), one task of it (`--task`), and the publishing step
//! (`--assemble`).

use crate::ui::{bad, progress};
use clap::Args;
use normlab_lab::book::{self, BookOptions};
use normlab_lab::book::{cluster as book_cluster, emit as book_emit};
use std::path::{Path, PathBuf};

/// Run every experiment at its full setting and write findings.md: the
/// lesson's claims C1-C27, each with its statement, normlab's setting, the
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
    /// Runs in parallel (default: all cores); with --emit-slurm/--emit-k8s,
    /// the CPUs each task asks for (default 1).
    #[arg(long)]
    jobs: Option<usize>,
    /// Only these experiments, comma-separated.
    #[arg(long)]
    only: Option<String>,
    /// Print what would run (runs per experiment, finished ones, estimated
    /// time) and stop; with --task, that task's units.
    #[arg(long)]
    dry_run: bool,
    /// After the book, publish it into this folder: findings.md and
    /// findings/<id>/ (reports, result.json, figures; no training runs).
    #[arg(long)]
    publish: Option<PathBuf>,
    /// Cut the book into tasks of at least a minute each (book-plan.json in
    /// --out) and write a Slurm job array for them, a publishing job that
    /// depends on it and book-submit.sh, which submits both.
    #[arg(long, conflicts_with_all = ["emit_k8s", "task", "assemble", "dry_run"])]
    emit_slurm: bool,
    /// Cut the book into tasks (book-plan.json) and write Kubernetes
    /// manifests: an indexed Job with one pod per task, and the publishing
    /// Job to apply once it has completed.
    #[arg(long, conflicts_with_all = ["task", "assemble", "dry_run"])]
    emit_k8s: bool,
    /// --emit-k8s: the container image (its PATH must have normlab).
    #[arg(long, default_value = "normlab:latest", requires = "emit_k8s")]
    image: String,
    /// --emit-k8s: the persistent volume claim holding the current folder,
    /// mounted at the same path in every pod.
    #[arg(long, default_value = "normlab", requires = "emit_k8s")]
    claim: String,
    /// --emit-slurm/--emit-k8s: the shortest task, in estimated minutes.
    #[arg(long, default_value_t = 1.0)]
    min_task_minutes: f64,
    /// Run one task of the plan in --out (its index; without one, from
    /// SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX).
    #[arg(long, num_args = 0..=1, default_missing_value = "env", conflicts_with_all = ["quick", "only", "assemble", "publish"])]
    task: Option<String>,
    /// Once every task of the plan in --out has finished: write the book
    /// (findings.md) from their work, running nothing again.
    #[arg(long, conflicts_with_all = ["quick", "only", "dry_run"])]
    assemble: bool,
    /// Write findings.md again from the chapters' results in --out, running
    /// nothing (after an update of normlab changed how findings are
    /// written); with --publish, publish it too.
    #[arg(long, conflicts_with_all = ["only", "dry_run", "assemble", "task", "emit_slurm", "emit_k8s"])]
    rewrite_findings: bool,
}

fn parse_only(s: &Option<String>) -> anyhow::Result<Option<Vec<String>>> {
    let Some(s) = s else { return Ok(None) };
    let ids: Vec<String> = s
        .split(',')
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect();
    for id in &ids {
        normlab_lab::exp::get(id)?;
    }
    Ok(Some(ids))
}

/// An absolute form of `p` (which need not exist yet).
fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    Ok(std::path::absolute(p)?)
}

pub fn book(c: BookCmd) -> anyhow::Result<()> {
    if c.out.exists() && !c.out.is_dir() {
        return bad(format!("{} exists and is not a folder", c.out.display()));
    }
    if let Some(j) = c.jobs {
        normlab::limits::check_threads("--jobs", j)?;
    }
    if let Some(p) = &c.publish {
        if p.exists() && !p.is_dir() {
            return bad(format!(
                "--publish: {} exists and is not a folder",
                p.display()
            ));
        }
    }
    if let Some(t) = &c.task {
        return task(&c, t);
    }
    if c.rewrite_findings {
        book::rewrite_findings(&c.out, c.quick)?;
        println!("findings: {}/findings.md", c.out.display());
        if let Some(p) = &c.publish {
            book::publish(&c.out, p)?;
            println!("published: {}/findings.md", p.display());
        }
        return Ok(());
    }
    let opts = BookOptions {
        out: c.out.clone(),
        quick: c.quick,
        jobs: c.jobs,
        only: parse_only(&c.only)?,
        stop: Some(crate::ui::stop_flag()),
        ..Default::default()
    };
    if c.emit_slurm || c.emit_k8s {
        return emit(&c, &opts);
    }
    if c.dry_run {
        return dry_run(&c, &opts);
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
    let bar = |done: f64, total: f64, msg: &str| {
        pb.set_length((total * 10.0).max(1.0) as u64);
        pb.set_position((done * 10.0) as u64);
        let mut s = started.lock().unwrap();
        if !*s {
            // Work found done at the start is not speed: restart the ETA.
            pb.reset_eta();
            *s = true;
        }
        pb.set_message(msg.chars().take(40).collect::<String>());
    };
    let (b, quick) = if c.assemble {
        let plan = book_cluster::read_plan(&c.out)?;
        (
            book_cluster::assemble(&c.out, c.jobs, Some(crate::ui::stop_flag()), &bar)?,
            plan.quick,
        )
    } else {
        (book::run(&opts, &bar)?, c.quick)
    };
    pb.finish_and_clear();
    let list = book::findings(&book::recorded(&c.out, quick)?);
    let mut t = crate::ui::Table::new(&["claim", "experiment", "verdict"]);
    for f in &list {
        t.row(vec![
            f.claim.into(),
            f.experiment.clone(),
            f.verdict.label().into(),
        ]);
    }
    print!("{t}");
    let read = if b.read > 0 {
        format!(" (and {} written by the cluster's tasks)", b.read)
    } else {
        String::new()
    };
    println!(
        "\n{} experiments{read} in {:.1} min ({:.1} min over every session of this book); findings: {}/findings.md",
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

/// `--dry-run`: per experiment its runs, finished ones, the matmul work
/// left and the wall time left, calibrated here (every distinct training
/// shape steps a few times, `jobs` side by side).
fn dry_run(c: &BookCmd, opts: &BookOptions) -> anyhow::Result<()> {
    let jobs = c
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let (rows, cal) = book::estimate(opts, jobs)?;
    let mut t = crate::ui::Table::new(&[
        "experiment",
        "runs",
        "finished",
        "matmul core-minutes left",
        "estimated minutes left",
    ]);
    let (mut work, mut wall) = (0.0, 0.0);
    for (r, w) in &rows {
        work += r.core_seconds_left;
        wall += w;
        t.row(vec![
            r.id.into(),
            r.runs.to_string(),
            r.finished.to_string(),
            format!("{:.1}", r.core_seconds_left / 60.0),
            format!("{:.1}", w / 60.0),
        ]);
    }
    print!("{t}");
    println!(
        "\nestimated {:.0} min ({:.1} h) left with {jobs} job(s): each of the {} training shapes timed here ({} side by side, {:.0} s), runs scheduled longest first; {:.1} core-hours of matmul work (at {} GFLOP/s per core, the old estimate)",
        wall / 60.0,
        wall / 3600.0,
        cal.shapes(),
        cal.jobs,
        cal.seconds,
        work / 3600.0,
        book::GFLOPS_PER_CORE
    );
    Ok(())
}

/// `--task [I]`: run (or with --dry-run list) one task of the plan.
fn task(c: &BookCmd, t: &str) -> anyhow::Result<()> {
    let index = if t == "env" {
        book_cluster::task_from_env()?
    } else {
        match t.parse::<usize>() {
            Ok(i) => i,
            Err(_) => return bad(format!("--task wants a task number (got '{t}')")),
        }
    };
    if c.dry_run {
        let plan = book_cluster::read_plan(&c.out)?;
        for u in plan.task(index)? {
            println!("{} {}", u.chapter, u.run.as_deref().unwrap_or("(chapter)"));
        }
        return Ok(());
    }
    let jobs = c.jobs.unwrap_or(1);
    let o = book_cluster::run_task(&c.out, index, jobs, Some(crate::ui::stop_flag()))?;
    println!(
        "task {index}: {} runs finished, {} chapters written in {:.1} min",
        o.runs,
        o.chapters,
        o.seconds / 60.0
    );
    Ok(())
}

/// `--emit-slurm` / `--emit-k8s`: the plan and the scheduler's files.
fn emit(c: &BookCmd, opts: &BookOptions) -> anyhow::Result<()> {
    if !(c.min_task_minutes > 0.0 && c.min_task_minutes.is_finite()) {
        return bad(format!(
            "--min-task-minutes must be positive (got {})",
            c.min_task_minutes
        ));
    }
    let out = absolute(&c.out)?;
    let opts = BookOptions {
        out: out.clone(),
        ..opts.clone()
    };
    // Everything checked (the scripts' paths included) before anything is
    // written.
    let plan = book_cluster::make_plan(&opts, c.min_task_minutes * 60.0)?;
    let cpus = c.jobs.unwrap_or(1);
    let workdir = std::env::current_dir()?;
    let files: Vec<(&str, String, bool)> = if c.emit_slurm {
        let publish = c.publish.as_deref().map(absolute).transpose()?;
        book_emit::slurm_scripts(
            &std::env::current_exe()?,
            &workdir,
            &out,
            plan.tasks.len(),
            cpus,
            publish.as_deref(),
        )?
    } else {
        book_emit::k8s_manifests(&c.image, &c.claim, &workdir, &out, plan.tasks.len(), cpus)?
            .into_iter()
            .map(|(n, t)| (n, t, false))
            .collect()
    };
    book_cluster::save_plan(&out, &plan)?;
    let paths = book_emit::write_files(&out, &files)?;
    let units = plan.units().count();
    let cost: f64 = plan.units().map(|u| u.cost).sum();
    println!(
        "{} units ({:.1} estimated core-minutes) in {} tasks; wrote {}",
        units,
        cost / 60.0,
        plan.tasks.len(),
        std::iter::once(out.join(book_cluster::PLAN))
            .chain(paths.iter().cloned())
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if c.emit_slurm {
        println!("submit with: {}", out.join("book-submit.sh").display());
    } else {
        println!(
            "apply with: kubectl apply -f {}; then, once it has completed (kubectl wait --for=condition=complete --timeout=-1s job/normlab-book): kubectl apply -f {}",
            out.join("book-k8s-tasks.json").display(),
            out.join("book-k8s-publish.json").display()
        );
    }
    Ok(())
}
