//! Planning and running the book: each experiment's chapter (its runs
//! trained through the sweep engine, so an interrupted book resumes:
//! finished runs are reused), the estimate before a run, the book's
//! sessions, and publishing a finished book.
use super::estimate::{run_cost, FIXED_COST};
use crate::exp::args::ExpArgs;
use crate::exp::claims::{Coverage, CLAIMS};
use crate::exp::framework::ExpResult;
use crate::exp::provenance::today;
use crate::exp::registry::{self, EXPERIMENTS};
use crate::sweep::{self, RunSpec};
use normlab::error::Result;
use serde::Serialize;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct BookOptions {
    /// Output folder: `<out>/<id>/` per experiment, `<out>/findings.md`.
    pub out: PathBuf,
    /// The reduced settings.
    pub quick: bool,
    /// Runs in parallel (default: all cores).
    pub jobs: Option<usize>,
    /// Only these experiments (default: all).
    pub only: Option<Vec<String>>,
    /// Set by a signal handler: stop after the current steps, resumable.
    pub stop: Option<Arc<AtomicBool>>,
    /// Chapters that cluster tasks wrote (`book --assemble`): read from
    /// their folders, not run again.
    pub written_by_tasks: Vec<String>,
    /// Count the wall time from this moment (Unix seconds; the first
    /// cluster task's start) instead of this session's start.
    pub clock_from: Option<u64>,
}

/// Progress of a book: work done and in all (units: estimated seconds of
/// one core), and what is running.
pub type BookProgress<'a> = &'a (dyn Fn(f64, f64, &str) + Sync);

/// One experiment's place in the book.
pub(super) struct Chapter {
    pub(super) id: &'static str,
    pub(super) args: ExpArgs,
    pub(super) specs: Vec<RunSpec>,
    /// Training outside the grid ([`crate::exp::framework::Experiment::hidden_training`]),
    /// for the estimate only.
    pub(super) hidden: crate::exp::framework::Hidden,
}

/// The book's result.
#[derive(Debug)]
pub struct Book {
    /// Each experiment's result (computed in this session).
    pub results: Vec<ExpResult>,
    /// Chapters read from what cluster tasks wrote (`--assemble`).
    pub read: usize,
    /// Wall time of this session (s).
    pub seconds: f64,
    /// Wall time of every session of this book folder at the same setting,
    /// interrupted ones included (s).
    pub total_seconds: f64,
}

/// One experiment of a planned book.
#[derive(Clone, Debug, Serialize)]
pub struct PlanRow {
    /// Experiment id.
    pub id: &'static str,
    /// Training runs in its grid.
    pub runs: usize,
    /// Of which finished already (in the book's folder).
    pub finished: usize,
    /// Estimated work left, in seconds of one core.
    pub core_seconds_left: f64,
}

/// A book's estimated wall time, per experiment, calibrated here (see
/// [`super::estimate`]): (id, runs, finished, estimated seconds left
/// with `jobs` runs side by side), and the calibration.
pub fn estimate(
    opts: &BookOptions,
    jobs: usize,
) -> Result<(Vec<(PlanRow, f64)>, super::estimate::Calibration)> {
    let chapters = chapters(opts)?;
    // Per chapter: the runs left side by side (the grid's not finished,
    // and, for a chapter not written yet, its parallel training outside
    // the grid not finished), and those left one after another.
    let left: Vec<(Vec<&RunSpec>, Vec<&RunSpec>)> = chapters
        .iter()
        .map(|c| {
            let written = c
                .args
                .out
                .as_ref()
                .is_some_and(|o| o.join("result.json").is_file());
            let parallel = c.hidden.parallel.iter().filter(|_| !written);
            let serial = c.hidden.serial.iter().filter(|_| !written).collect();
            let side = c
                .specs
                .iter()
                .chain(parallel)
                .filter(|s| !c.finished(s))
                .collect();
            (side, serial)
        })
        .collect();
    let all: Vec<&RunSpec> = left
        .iter()
        .flat_map(|(p, s)| p.iter().chain(s))
        .copied()
        .collect();
    let cal = super::estimate::calibrate(&all, jobs)?;
    let rows = chapters
        .iter()
        .zip(&left)
        .map(|(c, (side, serial))| {
            let grid_left = c.specs.iter().filter(|s| !c.finished(s)).count();
            let work = side.iter().chain(serial).map(|s| run_cost(s)).sum::<f64>();
            let row = PlanRow {
                id: c.id,
                runs: c.specs.len(),
                finished: c.specs.len() - grid_left,
                core_seconds_left: FIXED_COST + work,
            };
            let serial: f64 =
                c.hidden.serial_factor * serial.iter().map(|s| cal.run_seconds(s)).sum::<f64>();
            (row, cal.chapter_wall(side) + serial)
        })
        .collect();
    Ok((rows, cal))
}

impl Chapter {
    /// Whether a run of this chapter finished in an earlier session.
    fn finished(&self, s: &RunSpec) -> bool {
        self.args
            .out
            .as_ref()
            .is_some_and(|o| sweep::is_finished(o, &s.id))
    }
}

/// The book's chapters: each selected experiment with its arguments and grid.
pub(super) fn chapters(opts: &BookOptions) -> Result<Vec<Chapter>> {
    let mut chapters = Vec::new();
    for e in EXPERIMENTS {
        if opts
            .only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|x| x == e.id))
        {
            continue;
        }
        let args = ExpArgs {
            quick: opts.quick,
            out: Some(opts.out.join(e.id)),
            jobs: opts
                .jobs
                .filter(|_| e.all_flags().contains(&crate::exp::args::ExpFlag::Jobs)),
            stop: opts.stop.clone(),
            ..ExpArgs::default()
        };
        let specs = match e.grid {
            Some(g) => g(&args)?,
            None => Vec::new(),
        };
        let hidden = match e.hidden_training {
            Some(g) => g(&args)?,
            None => Default::default(),
        };
        chapters.push(Chapter {
            id: e.id,
            args,
            specs,
            hidden,
        });
    }
    Ok(chapters)
}

/// Run the book.
pub fn run(opts: &BookOptions, progress: BookProgress) -> Result<Book> {
    let t0 = Instant::now();
    normlab::io::create_dir_all(&opts.out)?;
    let chapters = chapters(opts)?;
    let chapter_cost = |c: &Chapter| FIXED_COST + c.specs.iter().map(run_cost).sum::<f64>();
    let total: f64 = chapters.iter().map(chapter_cost).sum();
    // Work already done (finished runs of an earlier, interrupted book).
    let finished = |c: &Chapter, s: &RunSpec| c.finished(s);
    let mut done: f64 = chapters
        .iter()
        .flat_map(|c| c.specs.iter().filter(move |s| finished(c, s)))
        .map(run_cost)
        .sum();
    progress(done, total, "starting");
    let now = unix_now();
    // A cluster book's clock starts at its first task.
    let started = opts.clock_from.unwrap_or(now);
    let elapsed = || t0.elapsed().as_secs_f64() + now.saturating_sub(started) as f64;
    let mut results = Vec::new();
    let mut read = 0;
    let outcome = (|| -> Result<()> {
        for c in &chapters {
            if opts.written_by_tasks.iter().any(|x| x == c.id) {
                // Written by a cluster task: findings.md reads its folder.
                done += FIXED_COST;
                read += 1;
                progress(done, total, c.id);
                continue;
            }
            let costs: std::collections::HashMap<&str, f64> = c
                .specs
                .iter()
                .filter(|s| !finished(c, s))
                .map(|s| (s.id.as_str(), run_cost(s)))
                .collect();
            let base = done;
            let so_far = std::sync::Mutex::new(0.0f64);
            let r = registry::run(c.id, &c.args, &|_, _, id| {
                let mut s = so_far.lock().unwrap();
                *s += costs.get(id).copied().unwrap_or(0.0);
                progress(base + *s, total, &format!("{} {id}", c.id));
            })?;
            crate::exp::framework::write_outputs(
                &r,
                c.args.out.as_ref().expect("book chapters have a folder"),
            )?;
            done = base + costs.values().sum::<f64>() + FIXED_COST;
            progress(done, total, c.id);
            results.push(r);
            record_session(opts, started, elapsed())?;
        }
        Ok(())
    })();
    // An interrupted session's time counts too.
    let total_seconds = record_session(opts, started, elapsed())?;
    outcome?;
    let book = Book {
        results,
        read,
        seconds: elapsed(),
        total_seconds,
    };
    super::findings::write(
        &opts.out,
        opts.quick,
        Some((book.total_seconds, sessions(opts))),
    )?;
    Ok(book)
}

/// Write findings.md and findings.json of the book folder `out` again from
/// the chapters' results it holds (at this setting), and lay out each
/// chapter's report.md conclusion as reports are now written, running
/// nothing: for a published folder after a change to how findings and
/// reports are written. The
/// book's own wall time is named when the folder records its sessions.
pub fn rewrite_findings(out: &Path, quick: bool) -> Result<()> {
    if !out.is_dir() {
        return Err(normlab::Error::bad(format!(
            "{} is not a book folder",
            out.display()
        )));
    }
    let chapters = super::findings::recorded(out, quick)?;
    if chapters.is_empty() {
        return Err(normlab::Error::bad(format!(
            "{} holds no chapter results at this setting ({}); run `normlab book --out {}` first",
            out.display(),
            if quick { "--quick" } else { "full" },
            out.display()
        )));
    }
    let totals = std::fs::read(out.join(SESSIONS))
        .ok()
        .and_then(|b| serde_json::from_slice::<Vec<serde_json::Value>>(&b).ok())
        .map(|l| {
            let mine: Vec<&serde_json::Value> = l.iter().filter(|v| v["quick"] == quick).collect();
            (
                mine.iter()
                    .filter_map(|v| v["seconds"].as_f64())
                    .sum::<f64>(),
                mine.len(),
            )
        })
        .filter(|(_, n)| *n > 0);
    for r in &chapters {
        reflow_report(&out.join(&r.id).join("report.md"))?;
    }
    super::findings::write(out, quick, totals)
}

/// A chapter's report.md with its conclusion laid out as reports are now
/// written (a long one as a list of its clauses, every word kept;
/// `present::prose`); the file is left alone when nothing changes.
fn reflow_report(path: &Path) -> Result<()> {
    const LEAD: &str = "**Conclusion (from the numbers above):**";
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let lines: Vec<String> = text
        .lines()
        .map(|l| match l.strip_prefix(LEAD) {
            Some(rest) => crate::present::prose::readable(LEAD, rest.trim()),
            None => l.to_string(),
        })
        .collect();
    let mut new = lines.join("\n");
    if text.ends_with('\n') {
        new.push('\n');
    }
    if new != text {
        normlab::io::atomic_write(path, new.as_bytes())?;
    }
    Ok(())
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The sessions of a book folder: `book_sessions.json`.
const SESSIONS: &str = "book_sessions.json";

/// Record (or update) this session's wall time in the book folder; returns
/// the wall time of all sessions at the same setting (quick or full).
fn record_session(opts: &BookOptions, started: u64, seconds: f64) -> Result<f64> {
    let path = opts.out.join(SESSIONS);
    let mut list: Vec<serde_json::Value> = match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| {
            normlab::Error::BadInput(format!(
                "{} is not a book's session list ({e}); move it away to start the count again",
                path.display()
            ))
        })?,
        Err(_) => Vec::new(),
    };
    let this = json!({"started_unix": started, "date": today(), "seconds": seconds, "quick": opts.quick, "jobs": opts.jobs, "only": opts.only});
    match list.iter_mut().find(|v| v["started_unix"] == started) {
        Some(v) => *v = this,
        None => list.push(this),
    }
    normlab::io::atomic_write(
        &path,
        serde_json::to_string_pretty(&list)
            .expect("json")
            .as_bytes(),
    )?;
    Ok(list
        .iter()
        .filter(|v| v["quick"] == opts.quick)
        .filter_map(|v| v["seconds"].as_f64())
        .sum())
}

/// Publish a finished book into a documentation folder: `<dest>/findings.md`
/// (links pointing into `<dest>/findings/`) and, per experiment,
/// `<dest>/findings/<id>/` with its report.md, result.json and figures
/// (the training runs stay in the book folder). Files of an earlier
/// publication are replaced; nothing else in `dest` is touched.
pub fn publish(book: &Path, dest: &Path) -> Result<()> {
    let md = normlab::io::read(&book.join("findings.md"))?;
    let md = String::from_utf8_lossy(&md).into_owned();
    let sub = dest.join("findings");
    normlab::io::create_dir_all(&sub)?;
    let mut text = md.clone();
    for e in EXPERIMENTS {
        let src = book.join(e.id);
        if !src.join("result.json").exists() {
            continue;
        }
        let to = sub.join(e.id);
        normlab::io::create_dir_all(&to)?;
        let entries = std::fs::read_dir(&src).map_err(|e| normlab::Error::io("read", &src, e))?;
        for ent in entries.flatten() {
            let name = ent.file_name().to_string_lossy().into_owned();
            let keep = name == "report.md"
                || name == "result.json"
                || name.ends_with(".png")
                || name.ends_with(".svg");
            if keep && ent.path().is_file() {
                let bytes = normlab::io::read(&ent.path())?;
                normlab::io::atomic_write(&to.join(&name), &bytes)?;
            }
        }
        text = text.replace(&format!("]({}/", e.id), &format!("](findings/{}/", e.id));
    }
    let json = normlab::io::read(&book.join("findings.json"))?;
    normlab::io::atomic_write(&sub.join("findings.json"), &json)?;
    normlab::io::atomic_write(&dest.join("findings.md"), text.as_bytes())
}

/// How many sessions at this setting the book folder has seen.
fn sessions(opts: &BookOptions) -> usize {
    std::fs::read(opts.out.join(SESSIONS))
        .ok()
        .and_then(|b| serde_json::from_slice::<Vec<serde_json::Value>>(&b).ok())
        .map_or(1, |l| l.iter().filter(|v| v["quick"] == opts.quick).count())
}

/// Claims whose coverage names an experiment that is not registered, or
/// that no experiment covers and no reason excuses (for the test).
pub fn uncovered_claims() -> Vec<&'static str> {
    CLAIMS
        .iter()
        .filter(|c| match c.coverage {
            Coverage::Experiments(ids) => {
                ids.is_empty() || ids.iter().any(|id| registry::find(id).is_none())
            }
            Coverage::Uncheckable(why) => why.trim().is_empty(),
        })
        .map(|c| c.id)
        .collect()
}

/// Whether `path` is a book folder that holds findings.
pub fn has_findings(path: &Path) -> bool {
    path.join("findings.json").exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_claim_is_covered_by_a_registered_experiment_or_excused() {
        assert_eq!(uncovered_claims(), Vec::<&str>::new());
        assert_eq!(CLAIMS.len(), 27);
        for (i, c) in CLAIMS.iter().enumerate() {
            assert_eq!(c.id, format!("C{}", i + 1));
            assert!(crate::exp::claims::claim(c.id).is_some());
        }
    }

    #[test]
    fn dates_are_civil() {
        let d = today();
        assert_eq!(d.len(), 10);
        assert!(d.starts_with("20"));
    }
}
