//! The built-in experiments of SPEC section 5. Each answers one question
//! with numbers it measures: it returns an [`ExpResult`] (tables, figures,
//! JSON data, and a conclusion derived from what was measured), which
//! [`write_outputs`] turns into `result.json`, `<figure>.svg/.png` and
//! `report.md`. `--quick` runs a reduced setting (for tests and CI).

pub mod args;
pub mod basics;
pub mod depth_sim;
pub mod grids;
pub mod plot;
pub mod speed;

pub use args::ExpArgs;

use crate::error::Result;
use plot::Figure;
use serde::Serialize;
use serde_json::{Map, Value};
use std::path::Path;

/// An experiment's id and question.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ExpInfo {
    /// Command-line id.
    pub id: &'static str,
    /// The question it answers.
    pub question: &'static str,
}

/// Every experiment, in SPEC order.
pub const EXPERIMENTS: &[ExpInfo] = &[
    ExpInfo { id: "drift", question: "What happens to the signal through 20 plain linear layers?" },
    ExpInfo { id: "batch-dependence", question: "Why not BatchNorm in language models?" },
    ExpInfo { id: "norm-stats", question: "How do LayerNorm and RMSNorm outputs differ?" },
    ExpInfo { id: "identity-path", question: "How much gradient takes the identity path?" },
    ExpInfo { id: "residual-growth", question: "How does the residual stream grow?" },
    ExpInfo { id: "depth-sim", question: "Random-init depth simulator: how do residuals, pre-norm and write-back scaling shape signal and gradient?" },
    ExpInfo { id: "collapse", question: "Does a deep net train without normalization?" },
    ExpInfo { id: "lr-sensitivity", question: "Pre-LN vs Post-LN: how sensitive is each to the learning rate (and warm-up)?" },
    ExpInfo { id: "warmup", question: "Does warm-up rescue Post-LN?" },
    ExpInfo { id: "speed", question: "Is RMSNorm faster than LayerNorm, and how many parameters do norms hold?" },
    ExpInfo { id: "norm-kind", question: "Does the norm kind change quality?" },
    ExpInfo { id: "gain-decay", question: "Why zero-centred RMSNorm (1 + w)?" },
    ExpInfo { id: "qk-norm", question: "What does QK-Norm hold down?" },
    ExpInfo { id: "placements", question: "All placements side by side: which train, at which learning rates?" },
    ExpInfo { id: "convert", question: "Can a LayerNorm checkpoint become RMSNorm (exactly, or after calibration)?" },
];

/// Look an experiment up.
pub fn info(id: &str) -> Option<ExpInfo> {
    EXPERIMENTS.iter().copied().find(|e| e.id == id)
}

/// A plain table (rendered as text on the terminal and markdown in reports).
#[derive(Clone, Debug, Serialize)]
pub struct Table {
    /// Title above the table.
    pub title: String,
    /// Column names.
    pub header: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table.
    pub fn new(title: impl Into<String>, header: &[&str]) -> Table {
        Table {
            title: title.into(),
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Append a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Aligned plain text.
    pub fn text(&self) -> String {
        let n = self.header.len();
        let mut w = vec![0; n];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |r: &Vec<String>| {
            let cells: Vec<String> = (0..n)
                .map(|i| {
                    format!(
                        "{:<width$}",
                        r.get(i).map(String::as_str).unwrap_or(""),
                        width = w[i]
                    )
                })
                .collect();
            cells.join("  ").trim_end().to_string()
        };
        let mut s = format!(
            "{}\n{}\n{}\n",
            self.title,
            line(&self.header),
            w.iter()
                .map(|&k| "-".repeat(k))
                .collect::<Vec<_>>()
                .join("  ")
        );
        for r in &self.rows {
            s.push_str(&line(r));
            s.push('\n');
        }
        s
    }

    /// GitHub markdown.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "**{}**\n\n| {} |\n|{}|\n",
            self.title,
            self.header.join(" | "),
            vec!["---"; self.header.len()].join("|")
        );
        for r in &self.rows {
            s.push_str(&format!("| {} |\n", r.join(" | ")));
        }
        s
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
    /// Wall time (s).
    pub elapsed_seconds: f64,
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
        for (k, v) in &self.data {
            m.insert(k.clone(), v.clone());
        }
        m.insert("conclusion".into(), Value::from(self.conclusion.clone()));
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
        s
    }
}

/// Write `result.json`, every figure (SVG + PNG) and `report.md` into `dir`
/// (created if needed; files written atomically).
pub fn write_outputs(r: &ExpResult, dir: &Path) -> Result<()> {
    crate::io::create_dir_all(dir)?;
    crate::io::atomic_write(
        &dir.join("result.json"),
        serde_json::to_string_pretty(&r.json()).unwrap().as_bytes(),
    )?;
    for f in &r.figures {
        plot::save(f, dir)?;
    }
    crate::io::atomic_write(&dir.join("report.md"), report_markdown(r).as_bytes())?;
    Ok(())
}

/// The markdown report of one experiment.
pub fn report_markdown(r: &ExpResult) -> String {
    let mut s = format!("# {} — {}\n\n", r.id, r.question);
    s.push_str(&format!(
        "Setting{}: `{}`\n\nSeeds: {:?} ({} seed{}). Wall time {:.1} s.\n\n",
        if r.quick { " (reduced, --quick)" } else { "" },
        r.settings,
        r.seeds,
        r.seeds.len(),
        if r.seeds.len() == 1 { "" } else { "s" },
        r.elapsed_seconds
    ));
    for f in &r.figures {
        s.push_str(&format!("![{}]({}.png)\n\n", f.stem, f.stem));
    }
    for t in &r.tables {
        s.push_str(&t.markdown());
        s.push('\n');
    }
    s.push_str(&format!(
        "**Conclusion (from the numbers above):** {}\n",
        r.conclusion
    ));
    s
}

/// Progress reports from long experiments: (done, total, message).
pub type Progress<'a> = &'a (dyn Fn(usize, usize, &str) + Sync);

/// Run experiment `id`.
pub fn run(id: &str, args: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let t0 = std::time::Instant::now();
    let info = info(id).ok_or_else(|| {
        let ids: Vec<&str> = EXPERIMENTS.iter().map(|e| e.id).collect();
        format!(
            "unknown experiment '{id}' (expected one of: {})",
            ids.join(", ")
        )
    })?;
    args.check_allowed(id)?;
    let mut r = match id {
        "drift" => basics::drift(args)?,
        "batch-dependence" => basics::batch_dependence(args)?,
        "norm-stats" => basics::norm_stats(args)?,
        "identity-path" => basics::identity_path(args)?,
        "depth-sim" => depth_sim::experiment(args)?,
        "speed" => speed::experiment(args, progress)?,
        "gain-decay" => grids::gain_decay(args, progress)?,
        "residual-growth" => grids::residual_growth(args, progress)?,
        "collapse" => grids::collapse(args, progress)?,
        "lr-sensitivity" => grids::lr_sensitivity(args, progress)?,
        "warmup" => grids::warmup(args, progress)?,
        "norm-kind" => grids::norm_kind(args, progress)?,
        "qk-norm" => grids::qk_norm(args, progress)?,
        "placements" => grids::placements(args, progress)?,
        "convert" => grids::convert_exp(args, progress)?,
        _ => unreachable!(),
    };
    r.id = info.id.to_string();
    r.question = info.question.to_string();
    r.quick = args.quick;
    r.elapsed_seconds = t0.elapsed().as_secs_f64();
    Ok(r)
}

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

/// Format a float for tables.
pub(crate) fn f(v: f64, digits: usize) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v != 0.0 && (v.abs() >= 1e5 || v.abs() < 1e-3) {
        format!("{v:.2e}")
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.digits$}")
    }
}
