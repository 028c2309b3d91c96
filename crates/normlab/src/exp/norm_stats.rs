//! norm-stats (claim C6): how do the outputs of LayerNorm and RMSNorm (and
//! the other row-wise kinds) differ on inputs with an offset, N(1.5, 3^2)?
//! Row means and row standard deviations of the outputs.

use super::{result, ExpArgs, ExpFlag, ExpResult, Experiment, Progress};
use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::kernels::rng::Rng;
use crate::nn::norm::{mean_row_norm, normalise_rows};
use crate::present::{f, Figure, LineChart, Panel, Series, Table};
use serde_json::{json, Map};

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "norm-stats",
    question: "How do LayerNorm and RMSNorm outputs differ?",
    flags: &[ExpFlag::DModel, ExpFlag::Rows, ExpFlag::Seed],
    run,
    grid: None,
};

/// norm-stats: row means and stds of LayerNorm vs RMSNorm outputs.
fn run(a: &ExpArgs, _progress: Progress) -> Result<ExpResult> {
    let d = a.d_model.unwrap_or(512);
    let rows = a.rows.unwrap_or(if a.quick { 256 } else { 4096 });
    let seed = a.seed.unwrap_or(0);
    crate::limits::check_memory(
        crate::limits::f32_bytes(4.0 * rows as f64 * d as f64),
        &format!("norm-stats ({rows} rows of d {d})"),
    )?;
    let x = Rng::derive(seed, "norm-stats").normal_vec(rows * d, 1.5, 3.0);
    let mut table = Table::new(
        "Statistics of the output rows (inputs N(1.5, 3^2))",
        &[
            "norm",
            "mean of row means",
            "std of row means",
            "mean of row stds",
            "mean row L2 / sqrt(d)",
        ],
    );
    let mut data = Map::new();
    let mut panels_mean = Vec::new();
    let mut panels_std = Vec::new();
    for kind in [
        NormKind::LayerNorm,
        NormKind::RmsNorm,
        NormKind::ZRmsNorm,
        NormKind::ScaleNorm,
    ] {
        let y = normalise_rows(kind, d, &x);
        let means: Vec<f64> = y
            .chunks_exact(d)
            .map(|r| r.iter().map(|&v| v as f64).sum::<f64>() / d as f64)
            .collect();
        let stds: Vec<f64> = y
            .chunks_exact(d)
            .zip(&means)
            .map(|(r, m)| {
                (r.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / d as f64).sqrt()
            })
            .collect();
        let n = rows as f64;
        let mm = means.iter().sum::<f64>() / n;
        let ms = (means.iter().map(|v| (v - mm).powi(2)).sum::<f64>() / n).sqrt();
        let sm = stds.iter().sum::<f64>() / n;
        let l2 = mean_row_norm(&y, d) / (d as f64).sqrt();
        table.row(vec![
            kind.name().into(),
            f(mm, 4),
            f(ms, 4),
            f(sm, 4),
            f(l2, 4),
        ]);
        data.insert(kind.name().into(), json!({"row_mean_mean": mm, "row_mean_std": ms, "row_std_mean": sm, "row_l2_over_sqrt_d": l2}));
        let mut sm_sorted = means.clone();
        sm_sorted.sort_by(f64::total_cmp);
        let mut ss = stds.clone();
        ss.sort_by(f64::total_cmp);
        let q = |v: &[f64]| {
            v.iter()
                .enumerate()
                .map(|(i, &y)| ((i as f64 + 0.5) / n, y))
                .collect::<Vec<_>>()
        };
        panels_mean.push(Series::new(kind.name(), q(&sm_sorted)));
        panels_std.push(Series::new(kind.name(), q(&ss)));
    }
    let mut out = result(
        json!({"d": d, "rows": rows, "inputs": "N(1.5, 3^2) per element", "gains": "unit (scalenorm g = sqrt(d))"}),
        vec![seed],
    );
    let ln = data["layernorm"].clone();
    let rms = data["rmsnorm"].clone();
    out.data = data;
    out.figures.push(Figure {
        stem: "norm_stats".into(),
        panels: vec![
            Panel::Line(LineChart {
                title: "row means (sorted)".into(),
                x_label: "quantile".into(),
                y_label: "row mean".into(),
                series: panels_mean,
                log_y: false,
                log_x: false,
            }),
            Panel::Line(LineChart {
                title: "row stds (sorted)".into(),
                x_label: "quantile".into(),
                y_label: "row std".into(),
                series: panels_std,
                log_y: false,
                log_x: false,
            }),
        ],
        cols: 2,
    });
    let expected = 1.5 / (1.5f64 * 1.5 + 9.0).sqrt();
    out.conclusion = format!(
        "LayerNorm output rows have mean {} (spread {}) and std {}: centred and unit-scale. RMSNorm output rows keep the inputs' offset: mean {} (spread {}; 1.5 / sqrt(1.5^2 + 3^2) = {:.3} expected) and std {}, with RMS exactly 1.",
        f(ln["row_mean_mean"].as_f64().unwrap(), 4),
        f(ln["row_mean_std"].as_f64().unwrap(), 4),
        f(ln["row_std_mean"].as_f64().unwrap(), 4),
        f(rms["row_mean_mean"].as_f64().unwrap(), 4),
        f(rms["row_mean_std"].as_f64().unwrap(), 4),
        expected,
        f(rms["row_std_mean"].as_f64().unwrap(), 4),
    );
    out.tables.push(table);
    Ok(out)
}
