//! The web lab's model reports (each read by `report_file.rs`): reports
//! of `normlab inspect --json` (or of Python's `normlab.diagnose`, the same
//! format) given with `--report FILE`, so that the dashboard shows a
//! pretrained model's per-block profile beside training runs.
//!
//! - `GET /api/reports` — the reports: name, model, family, blocks.
//! - `GET /api/report-plot?report=N&metric=M&ids=a,b` — an SVG of report
//!   N's per-block profile and the runs' last logged per-block values, by
//!   relative depth (block + 1) / blocks, so that models of any depth
//!   share the axis. Metrics: `stream` (the stream's RMS after each block
//!   over its RMS after the first), `attn_sink`, `attn_max_logit`,
//!   `attn_entropy`, `ffn_max`, `max_over_median` (a run's
//!   `stream_max_ratio`).

use super::report_file::METRICS;
use super::state::{
    bad, err, heavy, query, run_ids, scan, Lab, Shared, MAX_PLOT_RUNS, METRIC_POINTS,
};
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use normlab_lab::present::plot::{self, Figure, LineChart, Panel, Series};
use serde_json::{json, Value};

/// `GET /api/reports`.
pub(super) async fn api_reports(State(lab): State<Shared>) -> Response {
    let list: Vec<Value> = lab
        .reports
        .iter()
        .enumerate()
        .map(|(i, r)| {
            json!({"id": i, "name": r.name, "model": r.model, "architecture": r.architecture,
                   "blocks": r.profile[0].len()})
        })
        .collect();
    Json(json!({"reports": list, "metrics": METRICS.map(|m| m.0)})).into_response()
}

/// `GET /api/report-plot`.
pub(super) async fn api_report_plot(
    State(lab): State<Shared>,
    RawQuery(raw): RawQuery,
) -> Response {
    let q = match query(raw, &["report", "metric", "ids"]) {
        Ok(q) => q,
        Err(r) => return *r,
    };
    let Some(report) = q.get("report").and_then(|r| r.parse::<usize>().ok()) else {
        return bad("report must be a report's number (see /api/reports)");
    };
    if report >= lab.reports.len() {
        return err(
            StatusCode::NOT_FOUND,
            format!("no report {report} (the lab has {})", lab.reports.len()),
        );
    }
    let metric = q.get("metric").map(String::as_str).unwrap_or("stream");
    let Some(m) = METRICS.iter().position(|x| x.0 == metric) else {
        return bad(format!(
            "metric must be one of {} (got '{metric}')",
            METRICS.map(|m| m.0).join(", ")
        ));
    };
    let ids = run_ids(&q);
    if ids.len() > MAX_PLOT_RUNS {
        return bad(format!("ids must name at most {MAX_PLOT_RUNS} runs"));
    }
    let held = lab.clone();
    heavy(&lab, move || plot_report(&held, report, m, &ids)).await
}

/// Per-block values by relative depth; the stream as a ratio to the
/// first block's.
fn by_depth(values: &[Option<f64>], stream: bool) -> Vec<(f64, f64)> {
    let n = values.len() as f64;
    let first = values.first().copied().flatten().unwrap_or(f64::NAN);
    values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let v = (*v)?;
            let y = if stream { v / first } else { v };
            y.is_finite().then_some(((i + 1) as f64 / n, y))
        })
        .collect()
}

fn plot_report(lab: &Lab, report: usize, m: usize, ids: &[String]) -> Response {
    let (metric, _, run_metric, log_y) = METRICS[m];
    let r = &lab.reports[report];
    let stream = metric == "stream";
    let mut series = vec![Series {
        name: format!("{} (report)", r.name),
        markers: true,
        points: by_depth(&r.profile[m], stream),
        diverged: false,
    }];
    if !ids.is_empty() {
        let runs = match scan(lab) {
            Ok(r) => r,
            Err(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
        for id in ids {
            let Some(found) = runs.iter().find(|r| r.name == *id) else {
                return err(
                    StatusCode::NOT_FOUND,
                    format!("no run '{id}' under the runs folder"),
                );
            };
            let (metrics, _) =
                normlab::train::run::read_metrics_sampled(&found.dir, METRIC_POINTS.0);
            // The last logged step with per-block values.
            let last = metrics.iter().rev().find_map(|x| {
                let v = match run_metric {
                    "residual_rms" => &x.residual_rms,
                    "attn_sink" => &x.attn_sink,
                    "attn_max_logit" => &x.attn_max_logit,
                    "attn_entropy" => &x.attn_entropy,
                    "ffn_max" => &x.ffn_max,
                    _ => &x.stream_max_ratio,
                };
                (!v.is_empty()).then(|| v.iter().map(|&y| Some(y)).collect::<Vec<_>>())
            });
            series.push(Series {
                name: id.clone(),
                markers: true,
                points: last.map(|v| by_depth(&v, stream)).unwrap_or_default(),
                diverged: false,
            });
        }
    }
    let y_label = if stream {
        "RMS after the block / after the first"
    } else {
        metric
    };
    let fig = Figure {
        stem: "report".into(),
        panels: vec![Panel::Line(LineChart {
            title: format!("{metric} by relative depth: {} beside runs", r.name),
            x_label: "(block + 1) / blocks".into(),
            y_label: y_label.into(),
            series,
            log_y,
            log_x: false,
        })],
        cols: 1,
    };
    match plot::svg_string(&fig) {
        Ok(svg) => ([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response(),
        Err(e) => err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
