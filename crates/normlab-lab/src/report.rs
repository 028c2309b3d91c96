//! `normlab report`: tables and figures from any folder of runs (a sweep,
//! several shards merged into one folder, an experiment's `runs/`, or single
//! `normlab train` runs): the settings that vary, status and losses per run;
//! loss, grad-norm and residual-RMS figures; and, when the runs vary the
//! learning rate, the lr-sensitivity grid as a heat map with diverged and
//! stalled cells marked.

use crate::present::{f, grid, plot, Figure, LineChart, Panel, Series, Table};
use crate::sweep::SeedGroup;
use normlab::error::{Error, Result};
use normlab::train::run::{read_metrics_bounded, read_run_config, MetricsRead};
use normlab::train::Summary;
use normlab::train::{StepRecord, TrainConfig};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// One run found on disk.
#[derive(Clone, Debug)]
pub struct FoundRun {
    /// Folder.
    pub dir: PathBuf,
    /// Folder name relative to the scanned root.
    pub name: String,
    /// Config.
    pub cfg: TrainConfig,
    /// Who recorded the run when not normlab (`pytorch`: the Python logger).
    pub source: Option<String>,
    /// Summary (None: unfinished, or damaged).
    pub summary: Option<Summary>,
    /// What is damaged in the folder (its files against their checksums,
    /// unreadable metric lines; `normlab::train::run::damage`); the header
    /// scan checks the summary only.
    pub damage: Option<String>,
    /// Metrics (within `normlab::train::run::MAX_METRICS_BYTES` of
    /// metrics.jsonl's lines: past it, records evenly apart and the last).
    pub metrics: Vec<StepRecord>,
    /// Step records of metrics.jsonl left out of `metrics` to keep within
    /// that bound.
    pub metrics_left_out: usize,
}

/// Find every run folder (one with a valid `config.json`) under `root`,
/// with its metrics.
pub fn scan(root: &Path) -> Result<Vec<FoundRun>> {
    Ok(scan_with(root, true)?.0)
}

/// [`scan`], with the folders it skipped: one line each, saying why their
/// `config.json` is not a valid run (for `normlab report` to print).
pub fn scan_with_skipped(root: &Path) -> Result<(Vec<FoundRun>, Vec<String>)> {
    scan_with(root, true)
}

/// [`scan`] without reading the metrics (`metrics` stays empty): what a
/// listing needs, at a cost that does not grow with the runs' length.
pub fn scan_headers(root: &Path) -> Result<Vec<FoundRun>> {
    Ok(scan_with(root, false)?.0)
}

fn scan_with(root: &Path, metrics: bool) -> Result<(Vec<FoundRun>, Vec<String>)> {
    if !root.is_dir() {
        return Err(format!("{} is not a folder", root.display()).into());
    }
    let mut out = Vec::new();
    let mut invalid: Vec<String> = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if dir.join("config.json").exists() {
            let cfg = match read_run_config(&dir) {
                Ok(c) => Some(c),
                Err(e) => {
                    invalid.push(e.to_string());
                    None
                }
            };
            if let Some((cfg, source)) = cfg {
                let name = dir
                    .strip_prefix(root)
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                // One read of the summary and of the metrics; the full scan
                // checks every file, the header scan (the dashboard's
                // listing) the summary only.
                let (summary, broken) = match normlab::train::run::check_summary(&dir) {
                    Ok(s) => (s, None),
                    Err(why) => (None, Some(why)),
                };
                let read = if metrics {
                    read_metrics_bounded(&dir)
                } else {
                    MetricsRead::default()
                };
                let (records, unreadable) = (read.records, read.unreadable);
                let damage = broken.or_else(|| {
                    metrics
                        .then(|| normlab::train::run::file_damage(&dir, unreadable))
                        .flatten()
                });
                out.push(FoundRun {
                    name: if name.is_empty() { ".".into() } else { name },
                    cfg,
                    source,
                    summary,
                    damage,
                    metrics: records,
                    metrics_left_out: read.left_out,
                    dir: dir.clone(),
                });
            }
            continue;
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| Error::read(&dir, e))?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        entries.sort();
        stack.extend(entries.into_iter().rev());
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    if out.is_empty() && !invalid.is_empty() {
        return Err(format!(
            "{} folder(s) under {} have a config.json but none is a valid run (first: {})",
            invalid.len(),
            root.display(),
            invalid[0]
        )
        .into());
    }
    Ok((out, invalid))
}

/// Config keys whose values differ between runs: every key any run's
/// config.json holds, so that a setting left out where it is the default
/// (`init`, say) still tells its runs apart (a run without it shows null:
/// the default).
pub fn varying_keys(runs: &[FoundRun]) -> Vec<String> {
    let objs: Vec<Map<String, Value>> = runs
        .iter()
        .map(|r| match r.cfg.to_json_value() {
            Value::Object(o) => o,
            _ => Map::new(),
        })
        .collect();
    let mut keys: Vec<&String> = Vec::new();
    for k in objs.iter().flat_map(|o| o.keys()) {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .filter(|k| objs.iter().any(|o| o.get(*k) != objs[0].get(*k)))
        .cloned()
        .collect()
}

fn value_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        // A key a config.json leaves out (or a null one): the default.
        Value::Null => "default".into(),
        other => other.to_string(),
    }
}

/// The report: per-run records, a table and figures.
pub struct Report {
    /// One record per run: settings that vary, status, losses.
    pub records: Vec<Value>,
    /// Runs table.
    pub table: Table,
    /// Figures.
    pub figures: Vec<Figure>,
    /// Lr heat-map table, when the runs vary lr.
    pub grid_table: Option<Table>,
}

/// Build the report of `runs`.
pub fn build(runs: &[FoundRun]) -> Report {
    let keys = varying_keys(runs);
    // A "source" column when PyTorch runs (the Python logger's) are mixed in.
    let sources = runs.iter().any(|r| r.source.is_some());
    let source = |r: &FoundRun| r.source.clone().unwrap_or_else(|| "normlab".into());
    let mut header: Vec<&str> = vec!["run"];
    if sources {
        header.push("source");
    }
    header.extend(keys.iter().map(String::as_str));
    header.extend([
        "status",
        "final eval loss",
        "best eval loss",
        "diverged at step",
        "steps",
    ]);
    let mut table = Table::new(format!("{} runs", runs.len()), &header);
    let mut records = Vec::new();
    for r in runs {
        let cfgv = r.cfg.to_json_value();
        let mut rec = Map::new();
        rec.insert("run".into(), json!(r.name));
        rec.insert("source".into(), json!(source(r)));
        let mut settings = Map::new();
        for k in &keys {
            settings.insert(k.clone(), cfgv[k].clone());
        }
        rec.insert("settings".into(), Value::Object(settings));
        let (status, fe, be, div, steps) = match (&r.summary, &r.damage) {
            // A damaged folder is never shown as a result or as unfinished.
            (_, Some(why)) => (
                format!("damaged: {why}"),
                None,
                None,
                None,
                r.metrics.last().map(|m| m.step).unwrap_or(0),
            ),
            (Some(s), None) => (
                s.status.name().to_string(),
                s.final_eval_loss,
                s.best_eval_loss,
                s.diverged_at_step,
                s.steps,
            ),
            (None, None) => (
                "unfinished".into(),
                None,
                None,
                None,
                r.metrics.last().map(|m| m.step).unwrap_or(0),
            ),
        };
        rec.insert("status".into(), json!(status));
        rec.insert("final_eval_loss".into(), json!(fe));
        rec.insert("best_eval_loss".into(), json!(be));
        rec.insert("diverged_at_step".into(), json!(div));
        rec.insert("steps".into(), json!(steps));
        if let Some(st) = r.metrics.iter().rev().find_map(|m| m.streams.as_ref()) {
            rec.insert("streams".into(), json!(st));
        }
        let mut row = vec![r.name.clone()];
        if sources {
            row.push(source(r));
        }
        row.extend(keys.iter().map(|k| value_str(&cfgv[k])));
        row.extend([
            status,
            fe.map(|v| f(v, 4)).unwrap_or_else(|| "-".into()),
            be.map(|v| f(v, 4)).unwrap_or_else(|| "-".into()),
            div.map(|d| d.to_string()).unwrap_or_else(|| "-".into()),
            steps.to_string(),
        ]);
        table.row(row);
        records.push(Value::Object(rec));
    }
    let label = |r: &FoundRun| -> String {
        let v = r.cfg.to_json_value();
        let parts: Vec<String> = keys
            .iter()
            .map(|k| format!("{k}={}", value_str(&v[k])))
            .collect();
        if parts.is_empty() {
            r.name.clone()
        } else {
            parts.join(" ")
        }
    };
    let shown: Vec<&FoundRun> = runs.iter().take(12).collect();
    let diverged = |r: &FoundRun| {
        r.summary
            .as_ref()
            .is_some_and(|s| s.status == normlab::train::Status::Diverged)
    };
    let curve = |r: &FoundRun, sel: &dyn Fn(&StepRecord) -> Option<f64>| {
        r.metrics
            .iter()
            .filter_map(|m| sel(m).map(|v| (m.step as f64, v)))
            .collect::<Vec<_>>()
    };
    let mut panels = vec![
        Panel::Line(LineChart {
            title: "training loss".into(),
            x_label: "step".into(),
            y_label: "loss".into(),
            series: shown
                .iter()
                .map(|r| Series::new(label(r), curve(r, &|m| Some(m.loss))).diverged(diverged(r)))
                .collect(),
            log_y: false,
            log_x: false,
        }),
        Panel::Line(LineChart {
            title: "held-out loss".into(),
            x_label: "step".into(),
            y_label: "eval loss".into(),
            series: shown
                .iter()
                .map(|r| Series::new(label(r), curve(r, &|m| m.eval_loss)).diverged(diverged(r)))
                .collect(),
            log_y: false,
            log_x: false,
        }),
        Panel::Line(LineChart {
            title: "global grad norm".into(),
            x_label: "step".into(),
            y_label: "grad norm".into(),
            series: shown
                .iter()
                .map(|r| {
                    Series::new(label(r), curve(r, &|m| Some(m.grad_norm))).diverged(diverged(r))
                })
                .collect(),
            log_y: true,
            log_x: false,
        }),
        Panel::Line(LineChart {
            title: "residual-stream RMS after each block (last logged step)".into(),
            x_label: "block".into(),
            y_label: "RMS".into(),
            series: shown
                .iter()
                .map(|r| {
                    Series::indexed(
                        label(r),
                        &r.metrics
                            .last()
                            .map(|m| m.residual_rms.clone())
                            .unwrap_or_default(),
                    )
                })
                .collect(),
            log_y: true,
            log_x: false,
        }),
    ];
    // Panels of a per-step diagnostic, shown when some run logged it: n
    // parallel streams' composite mixing gain across depth, as the mHC
    // paper plots it (1 throughout for Attention Residuals, whose mixing
    // is the identity); the attention sink; massive activations; the
    // feed-forward's largest activation.
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let max = |v: &[f64]| (!v.is_empty()).then(|| normlab::train::nan_max(v.iter().copied()));
    type Sel<'a> = &'a dyn Fn(&StepRecord) -> Option<f64>;
    let sum = |v: &[u64]| (!v.is_empty()).then(|| v.iter().sum::<u64>() as f64);
    // (title, y label, log y, selector, shown only when some value is not 0)
    let diagnostics: [(&str, &str, bool, Sel, bool); 5] = [
        (
            "streams: composite mixing gain (max over tokens)",
            "largest absolute column sum",
            true,
            &|m| m.streams.as_ref().map(|s| s.gain_fwd_max),
            false,
        ),
        (
            "attention on position 0 (mean over blocks, heads, queries t >= 1)",
            "share",
            false,
            &|m| mean(&m.attn_sink),
            false,
        ),
        (
            "largest |x| in the stream over its median (max over blocks)",
            "ratio",
            true,
            &|m| max(&m.stream_max_ratio),
            false,
        ),
        (
            "feed-forward's largest |activation| (max over blocks)",
            "|gate x up| or |GELU|",
            true,
            &|m| max(&m.ffn_max),
            false,
        ),
        (
            "values f16 cannot store: |v| > 65504 or not finite (sum over blocks)",
            "count",
            false,
            &|m| sum(&m.f16_overflow),
            true,
        ),
    ];
    for (title, y, log_y, sel, nonzero) in diagnostics {
        if shown.iter().any(|r| {
            r.metrics
                .iter()
                .any(|m| sel(m).is_some_and(|v| !nonzero || v != 0.0))
        }) {
            panels.push(Panel::Line(LineChart {
                title: title.into(),
                x_label: "step".into(),
                y_label: y.into(),
                series: shown
                    .iter()
                    .map(|r| Series::new(label(r), curve(r, sel)).diverged(diverged(r)))
                    .collect(),
                log_y,
                log_x: false,
            }));
        }
    }
    if runs.len() > 12 {
        for p in &mut panels {
            if let Panel::Line(c) = p {
                c.title = format!("{} (first 12 of {} runs)", c.title, runs.len());
            }
        }
    }
    let mut figures = vec![Figure {
        stem: "report_curves".into(),
        panels,
        cols: 2,
    }];
    let mut grid_table = None;
    if keys.iter().any(|k| k == "lr") {
        let (fig, t) = lr_grid(runs, &keys);
        figures.push(fig);
        grid_table = Some(t);
    }
    Report {
        records,
        table,
        figures,
        grid_table,
    }
}

/// The lr-sensitivity heat map: rows = combinations of the other varying
/// keys (seeds merged), columns = learning rates; each cell the seed group
/// of the finished runs there (see [`crate::present::grid`]).
fn lr_grid(runs: &[FoundRun], keys: &[String]) -> (Figure, Table) {
    let mut lrs: Vec<f32> = runs.iter().map(|r| r.cfg.lr).collect();
    lrs.sort_by(f32::total_cmp);
    lrs.dedup();
    let row_keys: Vec<&String> = keys.iter().filter(|k| *k != "lr" && *k != "seed").collect();
    let row_of = |r: &FoundRun| {
        let v = r.cfg.to_json_value();
        let s: Vec<String> = row_keys
            .iter()
            .map(|k| format!("{k}={}", value_str(&v[k.as_str()])))
            .collect();
        if s.is_empty() {
            "all".to_string()
        } else {
            s.join(" ")
        }
    };
    let mut rows: Vec<String> = Vec::new();
    for r in runs {
        let k = row_of(r);
        if !rows.contains(&k) {
            rows.push(k);
        }
    }
    let cells: Vec<Vec<Option<SeedGroup>>> = rows
        .iter()
        .map(|row| {
            lrs.iter()
                .map(|&lr| {
                    let done: Vec<&Summary> = runs
                        .iter()
                        .filter(|r| r.cfg.lr == lr && &row_of(r) == row)
                        .filter_map(|r| r.summary.as_ref())
                        .collect();
                    (!done.is_empty()).then(|| SeedGroup::of(done))
                })
                .collect()
        })
        .collect();
    let x_labels: Vec<String> = lrs.iter().map(|l| format!("{l}")).collect();
    let t = grid::table(
        "Final held-out loss by learning rate (mean over seeds; D = diverged, S = stalled)",
        "setting",
        &x_labels
            .iter()
            .map(|l| format!("lr {l}"))
            .collect::<Vec<_>>(),
        &rows,
        &cells,
    );
    let fig = Figure::new(
        "report_lr_grid",
        vec![grid::heat_panel(
            "learning-rate sensitivity",
            ("learning rate", "setting"),
            x_labels,
            rows.clone(),
            &cells,
        )],
        1,
    );
    (fig, t)
}

/// Write `report.md` (+ figures) into `dir`.
pub fn write(report: &Report, dir: &Path, root: &Path) -> Result<()> {
    normlab::io::create_dir_all(dir)?;
    for fig in &report.figures {
        plot::save(fig, dir)?;
    }
    let mut md = format!("# Report: {}\n\n", root.display());
    for fig in &report.figures {
        md.push_str(&format!("![{}]({}.png)\n\n", fig.stem, fig.stem));
    }
    if let Some(t) = &report.grid_table {
        md.push_str(&t.markdown());
        md.push('\n');
    }
    md.push_str(&report.table.markdown());
    normlab::io::atomic_write(&dir.join("report.md"), md.as_bytes())?;
    normlab::io::atomic_write(
        &dir.join("report.json"),
        serde_json::to_string_pretty(&report.records)
            .unwrap()
            .as_bytes(),
    )
}
