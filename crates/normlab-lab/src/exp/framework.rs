//! The experiment framework: what an experiment is ([`Experiment`]: id,
//! question, flags, how it runs and the grid of runs that `normlab sweep
//! <id>` shares), what it returns ([`ExpResult`]: tables, figures, JSON
//! data and a conclusion derived from what was measured, or what it could
//! not measure here), how a result becomes `result.json`,
//! `<figure>.svg/.png` and `report.md` ([`write_outputs`]), and how one
//! experiment runs ([`Experiment::run_with`]). The list of experiments is
//! `registry.rs`; each experiment is a file that imports this one.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{self, ClaimCheck, Verdict};
use super::provenance;
use crate::present::{plot, Figure, Table};
use crate::sweep::RunSpec;
use normlab::error::Result;
use serde::Serialize;
use serde_json::{Map, Value};
use std::path::Path;

/// The runs a training experiment trains for its arguments.
pub type GridFn = fn(&ExpArgs) -> Result<Vec<RunSpec>>;

/// Training an experiment does outside its grid, for the book's estimate.
#[derive(Clone, Debug, Default)]
pub struct Hidden {
    /// Runs trained side by side (`--jobs` at a time), as a grid's are.
    pub parallel: Vec<RunSpec>,
    /// Runs trained one after another on one core, before the others
    /// (another program's: the cross-check's PyTorch side), timed as
    /// normlab's runs of the same configurations times `serial_factor`.
    pub serial: Vec<RunSpec>,
    /// The other program's time over normlab's for the same runs (a
    /// measured ratio; 0 when there are none).
    pub serial_factor: f64,
}

/// An experiment's training outside its grid for its arguments.
pub type HiddenFn = fn(&ExpArgs) -> Result<Hidden>;

/// One experiment: what it asks, which flags it takes, how it runs, and
/// (for training experiments) the grid of runs it trains, which `normlab
/// sweep <id>` runs as well.
pub struct Experiment {
    /// Command-line id.
    pub id: &'static str,
    /// The question it answers.
    pub question: &'static str,
    /// The flags it takes besides --quick, --out and --json.
    pub flags: &'static [ExpFlag],
    /// Run it.
    pub run: fn(&ExpArgs, Progress) -> Result<ExpResult>,
    /// The runs it trains (None: it trains nothing).
    pub grid: Option<GridFn>,
    /// Training it does inside its own run, outside its grid (`sweep`
    /// does not run it): counted only by the book's estimate, which times
    /// these configurations like the grid's (the cross-check's normlab
    /// runs, and the same again for its PyTorch side).
    pub hidden_training: Option<HiddenFn>,
    /// Whether its `--quick` setting is meant to decide its claims (the
    /// computations that train nothing); otherwise a quick run's verdicts
    /// are reported as inconclusive, with the numbers it measured.
    pub quick_decides: bool,
}

/// An experiment's description for `exp list --json`.
#[derive(Clone, Debug, Serialize)]
pub struct ExpInfo {
    /// Command-line id.
    pub id: &'static str,
    /// The question it answers.
    pub question: &'static str,
    /// Flags it takes.
    pub flags: Vec<&'static str>,
    /// Whether `normlab sweep <id>` runs its grid.
    pub has_grid: bool,
}

impl Experiment {
    /// The flags it takes, with [`ExpFlag::ResOptions`] expanded into
    /// one flag per residual option the simulator models.
    pub fn all_flags(&self) -> Vec<ExpFlag> {
        ExpFlag::expand(self.flags)
    }

    /// Its description.
    pub fn info(&self) -> ExpInfo {
        ExpInfo {
            id: self.id,
            question: self.question,
            flags: self.all_flags().iter().map(|f| f.name()).collect(),
            has_grid: self.grid.is_some(),
        }
    }

    /// Run it with `args` (checked against its flags); a `--quick` run of
    /// an experiment whose quick setting does not decide reports its
    /// verdicts as inconclusive, with what it measured (but for a check
    /// decided by an exact count, which the quick run decides too).
    pub fn run_with(&self, args: &ExpArgs, progress: Progress) -> Result<ExpResult> {
        let t0 = std::time::Instant::now();
        args.check(self.id, self.flags)?;
        let mut r = (self.run)(args, progress)?;
        if args.quick && !self.quick_decides {
            for c in &mut r.checks {
                if c.verdict != Verdict::Inconclusive && !c.exact {
                    c.evidence = format!(
                        "too short to decide at the --quick setting (it measured: {}; it would say: {})",
                        c.evidence.trim_end_matches('.'),
                        c.verdict.label()
                    );
                    c.verdict = Verdict::Inconclusive;
                }
            }
        }
        r.id = self.id.to_string();
        r.question = self.question.to_string();
        r.quick = args.quick;
        r.elapsed_seconds = t0.elapsed().as_secs_f64();
        Ok(r)
    }
}

/// What an experiment measured.
#[derive(Clone, Debug, Serialize)]
pub struct ExpResult {
    /// Experiment id.
    pub id: String,
    /// Its question.
    pub question: String,
    /// Every setting used (after defaults and flags).
    pub settings: Value,
    /// Seeds used.
    pub seeds: Vec<u64>,
    /// Whether this was the reduced `--quick` setting.
    pub quick: bool,
    /// Experiment-specific measurements (flattened into result.json).
    pub data: Map<String, Value>,
    /// Tables.
    #[serde(skip)]
    pub tables: Vec<Table>,
    /// Figures.
    #[serde(skip)]
    pub figures: Vec<Figure>,
    /// The conclusion, derived from the measurements.
    pub conclusion: String,
    /// Verdicts on the lesson's claims, computed from the measurements.
    pub checks: Vec<ClaimCheck>,
    /// What it needed and did not find here (None: it measured everything);
    /// such a result still has its report, and may have no figure.
    pub unavailable: Option<Unavailable>,
    /// Wall time (s).
    pub elapsed_seconds: f64,
}

/// Something an experiment needs that is not on this machine: it then
/// measures what it can, says why the rest is missing and how to get it,
/// and gives inconclusive verdicts for the rest.
#[derive(Clone, Debug, Serialize)]
pub struct Unavailable {
    /// What is missing: `model` (a pretrained model file) or `torch` (a
    /// Python with torch), the names the tests' `NORMLAB_REQUIRE_*`
    /// switches use.
    pub needs: &'static str,
    /// One line: what is missing and the command that gets it.
    pub why: String,
}

impl ExpResult {
    /// The JSON written to result.json: the fixed fields plus `data`.
    pub fn json(&self) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), Value::from(self.id.clone()));
        m.insert("question".into(), Value::from(self.question.clone()));
        m.insert("settings".into(), self.settings.clone());
        m.insert("seeds".into(), serde_json::to_value(&self.seeds).unwrap());
        m.insert("quick".into(), Value::from(self.quick));
        m.insert("machine".into(), Value::from(provenance::processor()));
        m.insert("date".into(), Value::from(provenance::today()));
        for (k, v) in &self.data {
            m.insert(k.clone(), v.clone());
        }
        m.insert("conclusion".into(), Value::from(self.conclusion.clone()));
        if let Some(u) = &self.unavailable {
            m.insert(
                "unavailable".into(),
                serde_json::to_value(u).expect("serialises"),
            );
        }
        m.insert(
            "claims".into(),
            serde_json::to_value(&self.checks).expect("checks serialise"),
        );
        m.insert(
            "figures".into(),
            Value::from(
                self.figures
                    .iter()
                    .map(|f| f.stem.clone())
                    .collect::<Vec<_>>(),
            ),
        );
        m.insert("elapsed_seconds".into(), Value::from(self.elapsed_seconds));
        Value::Object(m)
    }

    /// Tables as aligned text, then the conclusion.
    pub fn text(&self) -> String {
        let mut s = format!("{} — {}\n\n", self.id, self.question);
        for t in &self.tables {
            s.push_str(&t.text());
            s.push('\n');
        }
        s.push_str(&format!("Conclusion: {}\n", self.conclusion));
        for c in &self.checks {
            s.push_str(&format!(
                "Claim {} ({}): {}. {}\n",
                c.claim,
                claims::claim(c.claim).map_or("", |x| x.title),
                c.verdict.label(),
                c.evidence
            ));
        }
        s
    }
}

/// Write `result.json`, every figure (SVG + PNG) and `report.md` into `dir`
/// (created if needed; files written atomically).
pub fn write_outputs(r: &ExpResult, dir: &Path) -> Result<()> {
    normlab::io::create_dir_all(dir)?;
    normlab::io::atomic_write(
        &dir.join("result.json"),
        serde_json::to_string_pretty(&r.json()).unwrap().as_bytes(),
    )?;
    for f in &r.figures {
        plot::save(f, dir)?;
    }
    normlab::io::atomic_write(&dir.join("report.md"), report_markdown(r).as_bytes())?;
    Ok(())
}

/// The markdown report of one experiment.
pub fn report_markdown(r: &ExpResult) -> String {
    let mut s = format!("# {} — {}\n\n", r.id, r.question);
    s.push_str(&format!(
        "Setting{}: `{}`\n\nSeeds: {:?} ({} seed{}). Wall time of this invocation {:.1} s (runs already finished in its folder are read, not re-run).\n\n",
        if r.quick { " (reduced, --quick)" } else { "" },
        r.settings,
        r.seeds,
        r.seeds.len(),
        if r.seeds.len() == 1 { "" } else { "s" },
        r.elapsed_seconds
    ));
    if let Some(u) = &r.unavailable {
        s.push_str(&format!("**Not measured here:** {}\n\n", u.why));
    }
    for f in &r.figures {
        s.push_str(&format!("![{}]({}.png)\n\n", f.stem, f.stem));
    }
    for t in &r.tables {
        s.push_str(&t.markdown());
        s.push('\n');
    }
    s.push_str(&crate::present::prose::readable(
        "**Conclusion (from the numbers above):**",
        &r.conclusion,
    ));
    s.push('\n');
    if !r.checks.is_empty() {
        s.push_str("\n| claim | verdict | evidence |\n|---|---|---|\n");
        for c in &r.checks {
            s.push_str(&format!(
                "| {} {} | {} | {} |\n",
                c.claim,
                claims::claim(c.claim).map_or("", |x| x.title),
                c.verdict.label(),
                c.evidence.replace('|', "/")
            ));
        }
    }
    s
}

/// Progress reports from long experiments: (done, total, message).
pub type Progress<'a> = &'a (dyn Fn(usize, usize, &str) + Sync);

/// An empty result to fill in.
pub(crate) fn result(settings: Value, seeds: Vec<u64>) -> ExpResult {
    ExpResult {
        id: String::new(),
        question: String::new(),
        settings,
        seeds,
        quick: false,
        data: Map::new(),
        tables: Vec::new(),
        figures: Vec::new(),
        conclusion: String::new(),
        checks: Vec::new(),
        unavailable: None,
        elapsed_seconds: 0.0,
    }
}

/// An f32 as a JSON number with its shortest decimal form (0.001, not
/// 0.0010000000474974513).
pub fn num(v: f32) -> Value {
    v.to_string()
        .parse::<f64>()
        .map(Value::from)
        .unwrap_or(Value::Null)
}
