//! The web lab's `GET /api/plot`: an SVG overlaying runs of the runs
//! folder, one metric: the loss curves, the gradient norm, the stream by
//! block, and the sink and outlier diagnostics over steps.

use super::state::{
    bad, err, heavy, query, run_ids, scan, Lab, Shared, MAX_PLOT_RUNS, METRIC_POINTS,
};
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use normlab_lab::present::plot::{self, Figure, LineChart, Panel, Series};
use normlab_lab::report;

/// What `/api/plot` draws: the loss curves, the gradient norm, the stream
/// by block, and the sink and outlier diagnostics over steps.
const PLOT_METRICS: [&str; 12] = [
    "loss",
    "eval_loss",
    "grad_norm",
    "residual_rms",
    "attn_sink",
    "stream_max_ratio",
    "ffn_max",
    "f16_overflow",
    "sink_head_share",
    "sink_rate",
    "massive0",
    "value_drain",
];

pub(super) async fn api_plot(State(lab): State<Shared>, RawQuery(raw): RawQuery) -> Response {
    let q = match query(raw, &["ids", "metric"]) {
        Ok(q) => q,
        Err(r) => return *r,
    };
    let metric = q.get("metric").map(String::as_str).unwrap_or("loss");
    if !PLOT_METRICS.contains(&metric) {
        return bad(format!(
            "metric must be one of {} (got '{metric}')",
            PLOT_METRICS.join(", ")
        ));
    }
    let ids = run_ids(&q);
    if ids.is_empty() || ids.len() > MAX_PLOT_RUNS {
        return bad(format!("ids must name 1..={MAX_PLOT_RUNS} runs"));
    }
    let metric = metric.to_string();
    let held = lab.clone();
    heavy(&lab, move || plot(&held, &ids, &metric)).await
}

/// The plot of `metric` over runs `ids` (reads their metrics: run on the
/// blocking pool).
fn plot(lab: &Lab, ids: &[String], metric: &str) -> Response {
    let runs = match scan(lab) {
        Ok(r) => r,
        Err(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let mut series = Vec::new();
    for id in ids {
        let Some(found) = runs.iter().find(|r| r.name == *id) else {
            return err(
                StatusCode::NOT_FOUND,
                format!("no run '{id}' under the runs folder"),
            );
        };
        let (metrics, _) = normlab::train::run::read_metrics_sampled(&found.dir, METRIC_POINTS.0);
        let r = report::FoundRun {
            metrics,
            ..found.clone()
        };
        let pts: Vec<(f64, f64)> = match metric {
            "loss" => r.metrics.iter().map(|m| (m.step as f64, m.loss)).collect(),
            "eval_loss" => r
                .metrics
                .iter()
                .filter_map(|m| m.eval_loss.map(|e| (m.step as f64, e)))
                .collect(),
            "grad_norm" => r
                .metrics
                .iter()
                .map(|m| (m.step as f64, m.grad_norm))
                .collect(),
            // The sink and outlier diagnostics of logged steps: the mean
            // over blocks (position 0's share), the max (the others).
            "attn_sink" | "stream_max_ratio" | "ffn_max" => r
                .metrics
                .iter()
                .filter_map(|m| {
                    let v = match metric {
                        "attn_sink" => &m.attn_sink,
                        "stream_max_ratio" => &m.stream_max_ratio,
                        _ => &m.ffn_max,
                    };
                    let y = if metric == "attn_sink" {
                        v.iter().sum::<f64>() / v.len().max(1) as f64
                    } else {
                        normlab::train::nan_max(v.iter().copied())
                    };
                    (!v.is_empty()).then_some((m.step as f64, y))
                })
                .collect(),
            // The sink measures (model/sinks.rs) of runs that log them: the
            // largest head's first-token share, the Sink metric, the
            // largest block's massive activation at position 0, the
            // smallest head's value drain.
            "sink_head_share" | "sink_rate" | "massive0" | "value_drain" => r
                .metrics
                .iter()
                .filter_map(|m| {
                    let s = m.sinks.as_ref()?;
                    let y = match metric {
                        "sink_head_share" => normlab::train::nan_max(s.top_share()),
                        "sink_rate" => s.sink_rate,
                        "massive0" => normlab::train::nan_max(s.massive0.iter().copied()),
                        _ => s.min_drain().into_iter().fold(f64::INFINITY, f64::min),
                    };
                    Some((m.step as f64, y))
                })
                .collect(),
            // Values f16 cannot store, summed over blocks.
            "f16_overflow" => r
                .metrics
                .iter()
                .filter(|m| !m.f16_overflow.is_empty())
                .map(|m| (m.step as f64, m.f16_overflow.iter().sum::<u64>() as f64))
                .collect(),
            _ => r
                .metrics
                .last()
                .map(|m| {
                    m.residual_rms
                        .iter()
                        .enumerate()
                        .map(|(i, v)| (i as f64, *v))
                        .collect()
                })
                .unwrap_or_default(),
        };
        let diverged = r
            .summary
            .as_ref()
            .is_some_and(|s| s.status == normlab::train::Status::Diverged);
        series.push(Series {
            name: id.to_string(),
            markers: metric == "residual_rms",
            points: pts,
            diverged,
        });
    }
    // Runs that log no sink measures (no fixed first token): nothing to draw.
    let sink_metric = metric.starts_with("sink_") || ["massive0", "value_drain"].contains(&metric);
    if sink_metric && series.iter().all(|s| s.points.is_empty()) {
        return StatusCode::NO_CONTENT.into_response();
    }
    let (x_label, title) = if metric == "residual_rms" {
        (
            "block",
            "residual-stream RMS after each block (last logged step)",
        )
    } else {
        ("step", metric)
    };
    let fig = Figure {
        stem: "plot".into(),
        panels: vec![Panel::Line(LineChart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: metric.into(),
            series,
            log_y: ![
                "loss",
                "eval_loss",
                "attn_sink",
                "sink_head_share",
                "sink_rate",
                "value_drain",
            ]
            .contains(&metric),
            log_x: false,
        })],
        cols: 1,
    };
    match plot::svg_string(&fig) {
        Ok(svg) => ([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response(),
        Err(e) => err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
