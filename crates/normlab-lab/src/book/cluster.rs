//! The book on a cluster. Its work is cut into units (one training run of
//! a chapter's grid, or one chapter that trains nothing), grouped into
//! tasks of at least a minute each by the book's cost estimate, and written
//! as `book-plan.json` in the book folder. An array task runs its units
//! (`normlab book --task I`: runs through the sweep engine into the
//! chapters' run folders, whole chapters with their outputs); the
//! publishing step (`normlab book --assemble`) checks that every unit is
//! done and writes the book as a local run would, reading the finished runs
//! and the chapters the tasks wrote instead of computing them again.
//! `book_emit.rs` wraps the same plan in a Slurm job array with a
//! dependent publishing job, or a Kubernetes indexed Job.

use super::estimate::{run_cost, FIXED_COST};
use super::run::{chapters, Chapter};
use crate::exp::registry;
use crate::sweep::{self, RunSpec, SweepOptions};
use normlab::error::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::Path;

/// The plan's file in the book folder.
pub const PLAN: &str = "book-plan.json";
/// Where tasks record when they ran (one file per task).
const TASKS_DIR: &str = "book-tasks";
/// The plan format.
const PLAN_VERSION: u32 = 1;

/// One piece of a book's work.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Unit {
    /// The chapter (experiment id).
    pub chapter: String,
    /// The training run (its id in the chapter's grid); None: the whole
    /// chapter, which trains nothing.
    pub run: Option<String>,
    /// Estimated work, in seconds of one core.
    pub cost: f64,
}

/// A book cut into tasks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Plan {
    /// Format version.
    pub version: u32,
    /// The reduced settings.
    pub quick: bool,
    /// Only these chapters (None: all).
    pub only: Option<Vec<String>>,
    /// Each task's units.
    pub tasks: Vec<Vec<Unit>>,
}

impl Plan {
    /// Task `index`'s units, or an error naming the plan's tasks.
    pub fn task(&self, index: usize) -> Result<&[Unit]> {
        self.tasks.get(index).map(Vec::as_slice).ok_or_else(|| {
            Error::bad(format!(
                "task {index} is not in the plan (it has tasks 0..{})",
                self.tasks.len()
            ))
        })
    }

    /// Every unit, in task order.
    pub fn units(&self) -> impl Iterator<Item = &Unit> {
        self.tasks.iter().flatten()
    }

    /// The book options the plan stands for, writing into `out`.
    fn options(&self, out: &Path, jobs: Option<usize>) -> super::run::BookOptions {
        super::run::BookOptions {
            out: out.to_path_buf(),
            quick: self.quick,
            jobs,
            only: self.only.clone(),
            ..Default::default()
        }
    }
}

/// The book's units: every run of every chapter's grid, and each chapter
/// without a grid as one unit (costing its training outside a grid).
fn units(chapters: &[Chapter]) -> Vec<Unit> {
    let mut v = Vec::new();
    for c in chapters {
        if c.specs.is_empty() {
            v.push(Unit {
                chapter: c.id.into(),
                run: None,
                cost: FIXED_COST
                    + c.hidden
                        .parallel
                        .iter()
                        .chain(&c.hidden.serial)
                        .map(run_cost)
                        .sum::<f64>(),
            });
        }
        for s in &c.specs {
            v.push(Unit {
                chapter: c.id.into(),
                run: Some(s.id.clone()),
                cost: run_cost(s),
            });
        }
    }
    v
}

/// Units grouped into tasks of at least `min_cost` each (unless the whole
/// book is smaller): as many tasks as the total allows, filled longest unit
/// first into the least loaded task, then the smallest tasks merged until
/// every task reaches `min_cost`. Deterministic for the same units.
pub fn group(units: Vec<Unit>, min_cost: f64) -> Vec<Vec<Unit>> {
    let total: f64 = units.iter().map(|u| u.cost).sum();
    let n = ((total / min_cost).floor() as usize).clamp(1, units.len().max(1));
    let mut order: Vec<Unit> = units;
    // Longest first; ties in the units' own order (a stable sort).
    order.sort_by(|a, b| b.cost.total_cmp(&a.cost));
    let mut tasks: Vec<(f64, Vec<Unit>)> = (0..n).map(|_| (0.0, Vec::new())).collect();
    for u in order {
        let least = (0..n)
            .min_by(|&a, &b| tasks[a].0.total_cmp(&tasks[b].0))
            .expect("at least one task");
        tasks[least].0 += u.cost;
        tasks[least].1.push(u);
    }
    tasks.retain(|t| !t.1.is_empty());
    // A unit longer than its share leaves other tasks short: merge the two
    // smallest until each task is long enough.
    loop {
        tasks.sort_by(|a, b| a.0.total_cmp(&b.0));
        if tasks.len() < 2 || tasks[0].0 >= min_cost {
            break;
        }
        let (c, mut u) = tasks.remove(0);
        tasks[0].0 += c;
        tasks[0].1.append(&mut u);
    }
    // Largest task first (it starts first where tasks queue).
    tasks.sort_by(|a, b| b.0.total_cmp(&a.0));
    tasks.into_iter().map(|t| t.1).collect()
}

/// Cut the book of `opts` into tasks of at least `min_task_seconds` of
/// estimated work each (nothing written: [`save_plan`] writes it).
pub fn make_plan(opts: &super::run::BookOptions, min_task_seconds: f64) -> Result<Plan> {
    Ok(Plan {
        version: PLAN_VERSION,
        quick: opts.quick,
        only: opts.only.clone(),
        tasks: group(units(&chapters(opts)?), min_task_seconds),
    })
}

/// Write `plan` into the book folder `out`.
pub fn save_plan(out: &Path, plan: &Plan) -> Result<()> {
    normlab::io::create_dir_all(out)?;
    normlab::io::atomic_write(
        &out.join(PLAN),
        serde_json::to_string_pretty(plan).expect("json").as_bytes(),
    )
}

/// [`make_plan`], then [`save_plan`] into its folder.
pub fn write_plan(opts: &super::run::BookOptions, min_task_seconds: f64) -> Result<Plan> {
    let plan = make_plan(opts, min_task_seconds)?;
    save_plan(&opts.out, &plan)?;
    Ok(plan)
}

/// The plan of the book folder `out`.
pub fn read_plan(out: &Path) -> Result<Plan> {
    let path = out.join(PLAN);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::bad(format!(
            "{}: {e} (write a plan first: normlab book --out {} --emit-slurm or --emit-k8s)",
            path.display(),
            out.display()
        ))
    })?;
    let plan: Plan = serde_json::from_str(&text)
        .map_err(|e| Error::bad(format!("{} is not a book plan: {e}", path.display())))?;
    if plan.version != PLAN_VERSION {
        return Err(Error::bad(format!(
            "{} has plan format {} (this normlab reads {PLAN_VERSION}); emit the plan again",
            path.display(),
            plan.version
        )));
    }
    plan.validate()
        .map_err(|why| Error::bad(format!("{}: {why}; emit the plan again", path.display())))?;
    Ok(plan)
}

impl Plan {
    /// Check everything before acting on the plan (an edited plan must
    /// not start the whole book, or name a folder outside the book):
    /// tasks and their units present, chapters that are experiments, run
    /// ids that are plain names, each unit once, finite costs.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.tasks.is_empty() {
            return Err("the plan has no tasks".into());
        }
        if let Some(i) = self.tasks.iter().position(Vec::is_empty) {
            return Err(format!("task {i} has no units"));
        }
        if let Some(only) = &self.only {
            if only.is_empty() {
                return Err("\"only\" lists no chapter".into());
            }
            for id in only {
                if registry::find(id).is_none() {
                    return Err(format!("\"only\" names '{id}', which is not an experiment"));
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        for u in self.units() {
            if registry::find(&u.chapter).is_none() {
                return Err(format!(
                    "a unit names '{}', which is not an experiment",
                    u.chapter
                ));
            }
            if let Some(r) = &u.run {
                let plain = !r.is_empty() && !r.starts_with('.') && !r.contains(['/', '\\', '\0']);
                if !plain {
                    return Err(format!("run id '{r}' is not a plain name"));
                }
            }
            if !(u.cost.is_finite() && u.cost >= 0.0) {
                return Err(format!("a unit of '{}' has cost {}", u.chapter, u.cost));
            }
            if !seen.insert((u.chapter.as_str(), u.run.as_deref())) {
                return Err(format!(
                    "'{}'{} is planned twice",
                    u.chapter,
                    u.run
                        .as_deref()
                        .map(|r| format!(" run {r}"))
                        .unwrap_or_default()
                ));
            }
        }
        Ok(())
    }
}

/// The task index from the scheduler's environment: a Slurm array task
/// (SLURM_ARRAY_TASK_ID minus SLURM_ARRAY_TASK_MIN) or a Kubernetes
/// indexed Job's pod (JOB_COMPLETION_INDEX).
pub fn task_from_env() -> Result<usize> {
    if let Some(i) = sweep::slurm_array_index()? {
        return Ok(i);
    }
    match std::env::var("JOB_COMPLETION_INDEX") {
        Ok(i) if !i.is_empty() => i
            .trim()
            .parse::<usize>()
            .map_err(|_| Error::bad(format!("bad JOB_COMPLETION_INDEX '{i}'"))),
        _ => Err(Error::bad(
            "--task without a number needs SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX in the environment",
        )),
    }
}

/// The chapters of a plan with their grids, and for each unit its chapter
/// and (for a run) its spec; an error when the plan names a run this
/// normlab's grids do not have (a plan written by another version).
fn resolve<'a>(
    plan: &Plan,
    chapters: &'a [Chapter],
    units: &[Unit],
) -> Result<Vec<(&'a Chapter, Option<&'a RunSpec>)>> {
    units
        .iter()
        .map(|u| {
            let c = chapters
                .iter()
                .find(|c| c.id == u.chapter)
                .ok_or_else(|| stale(plan, &u.chapter))?;
            let spec = match &u.run {
                None => None,
                Some(id) => Some(
                    c.specs
                        .iter()
                        .find(|s| &s.id == id)
                        .ok_or_else(|| stale(plan, id))?,
                ),
            };
            Ok((c, spec))
        })
        .collect()
}

fn stale(plan: &Plan, what: &str) -> Error {
    Error::bad(format!(
        "the book plan names {what}, which this normlab's {} book does not have (written by another version?); emit the plan again",
        if plan.quick { "--quick" } else { "full" }
    ))
}

/// What a task did.
#[derive(Debug)]
pub struct TaskOutcome {
    /// Runs finished (trained now or found finished).
    pub runs: usize,
    /// Chapters written.
    pub chapters: usize,
    /// Wall time (s).
    pub seconds: f64,
}

/// Run task `index` of the plan in `out` with `jobs` runs in parallel:
/// its training runs through the sweep engine (finished ones are kept,
/// interrupted ones resume), then its whole chapters, each written to its
/// folder as `normlab exp` writes it.
pub fn run_task(
    out: &Path,
    index: usize,
    jobs: usize,
    stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
) -> Result<TaskOutcome> {
    let t0 = std::time::Instant::now();
    let started = super::run::unix_now();
    let plan = read_plan(out)?;
    let units = plan.task(index)?;
    let mut opts = plan.options(out, Some(jobs));
    opts.stop = stop.clone();
    let chapters = chapters(&opts)?;
    let resolved = resolve(&plan, &chapters, units)?;
    let mut outcome = TaskOutcome {
        runs: 0,
        chapters: 0,
        seconds: 0.0,
    };
    // Runs, chapter by chapter (each chapter's runs live in its folder).
    for c in &chapters {
        let specs: Vec<RunSpec> = resolved
            .iter()
            .filter(|(rc, s)| rc.id == c.id && s.is_some())
            .filter_map(|(_, s)| s.map(|s| (*s).clone()))
            .collect();
        if specs.is_empty() {
            continue;
        }
        let sopts = SweepOptions {
            out: c.args.out.clone(),
            jobs,
            threads_per_run: 1,
            shard: None,
            keep_params: false,
            wait_for_held: true,
            stop: stop.clone(),
        };
        outcome.runs += sweep::run_all(&specs, &sopts, &|_, _, _| {})?
            .complete()?
            .len();
    }
    for (c, _) in resolved.iter().filter(|(_, s)| s.is_none()) {
        let r = registry::run(c.id, &c.args, &|_, _, _| {})?;
        crate::exp::framework::write_outputs(
            &r,
            c.args.out.as_ref().expect("book chapters have a folder"),
        )?;
        outcome.chapters += 1;
    }
    outcome.seconds = t0.elapsed().as_secs_f64();
    let dir = out.join(TASKS_DIR);
    normlab::io::create_dir_all(&dir)?;
    normlab::io::atomic_write(
        &dir.join(format!("task-{index}.json")),
        json!({"task": index, "started_unix": started, "seconds": outcome.seconds,
               "machine": crate::exp::provenance::machine(), "runs": outcome.runs, "chapters": outcome.chapters})
        .to_string()
        .as_bytes(),
    )?;
    Ok(outcome)
}

/// Whether `unit` is done in the book folder: its run finished, or its
/// chapter's result.json written at the plan's setting.
fn is_done(plan: &Plan, out: &Path, unit: &Unit) -> bool {
    let dir = out.join(&unit.chapter);
    match &unit.run {
        Some(id) => sweep::is_finished(&dir, id),
        None => std::fs::read(dir.join("result.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|j| j["quick"] == plan.quick),
    }
}

/// Units of the plan not done yet in `out`, by task.
pub fn missing(plan: &Plan, out: &Path) -> Vec<(usize, Unit)> {
    plan.tasks
        .iter()
        .enumerate()
        .flat_map(|(i, t)| t.iter().map(move |u| (i, u)))
        .filter(|(_, u)| !is_done(plan, out, u))
        .map(|(i, u)| (i, u.clone()))
        .collect()
}

/// The publishing step: once every unit of the plan in `out` is done, the
/// book as a local run writes it (chapters with a grid analyse their
/// finished runs; the chapters the tasks wrote are read, not run again),
/// with the wall time counted from the first task's start.
pub fn assemble(
    out: &Path,
    jobs: Option<usize>,
    stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    progress: super::run::BookProgress,
) -> Result<super::run::Book> {
    let plan = read_plan(out)?;
    let left = missing(&plan, out);
    if let Some((task, u)) = left.first() {
        let mut tasks: Vec<usize> = left.iter().map(|(t, _)| *t).collect();
        tasks.dedup();
        return Err(Error::bad(format!(
            "{} of the plan's {} units are not done (first: {} {} of task {task}; tasks with work left: {:?}); run those tasks again",
            left.len(),
            plan.units().count(),
            u.chapter,
            u.run.as_deref().unwrap_or("(chapter)"),
            tasks
        )));
    }
    let first_start = std::fs::read_dir(out.join(TASKS_DIR))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .filter_map(|j| j["started_unix"].as_u64())
        .min();
    let mut opts = plan.options(out, jobs);
    opts.written_by_tasks = plan
        .units()
        .filter(|u| u.run.is_none())
        .map(|u| u.chapter.clone())
        .collect();
    opts.clock_from = first_start;
    opts.stop = stop;
    super::run::run(&opts, progress)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(chapter: &str, run: Option<&str>, cost: f64) -> Unit {
        Unit {
            chapter: chapter.into(),
            run: run.map(str::to_string),
            cost,
        }
    }

    #[test]
    fn grouping_covers_every_unit_once_and_keeps_tasks_long_enough() {
        // A long unit, a handful of short ones and many tiny ones.
        let mut units = vec![u("a", None, 150.0)];
        for i in 0..7 {
            units.push(u("b", Some(&format!("r{i}")), 20.0 + i as f64));
        }
        for i in 0..40 {
            units.push(u("c", Some(&format!("t{i}")), 1.5));
        }
        let total: f64 = units.iter().map(|u| u.cost).sum();
        let tasks = group(units.clone(), 60.0);
        assert!(tasks.len() >= 2 && tasks.len() <= (total / 60.0) as usize);
        for t in &tasks {
            assert!(t.iter().map(|u| u.cost).sum::<f64>() >= 60.0, "{t:?}");
        }
        let mut seen: Vec<&Unit> = tasks.iter().flatten().collect();
        assert_eq!(seen.len(), units.len());
        seen.sort_by(|a, b| (&a.chapter, &a.run).cmp(&(&b.chapter, &b.run)));
        seen.dedup();
        assert_eq!(seen.len(), units.len());
        // Deterministic.
        assert_eq!(group(units.clone(), 60.0), tasks);
        // A book smaller than one task's minimum is one task; a huge
        // minimum too.
        assert_eq!(group(vec![u("x", None, 5.0)], 60.0).len(), 1);
        assert_eq!(group(units, 1e9).len(), 1);
        // Where the units allow it, the tasks are balanced: 8 units of 60
        // into 4 tasks of 120.
        let even: Vec<Unit> = (0..8)
            .map(|i| u("e", Some(&format!("{i}")), 60.0))
            .collect();
        let t = group(even, 100.0);
        assert_eq!(t.len(), 4);
        assert!(t.iter().all(|t| t.len() == 2));
    }
}
