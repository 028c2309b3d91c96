//! drift (claim C1): what happens to the signal through a stack of plain
//! linear layers, with and without a LayerNorm after each? The mean row norm
//! after every layer, for weights N(0, s^2/d) at several scales s.

use super::{num, result, ExpArgs, ExpFlag, ExpResult, Experiment, Progress};
use crate::error::Result;
use crate::kernels::matmul::linear_forward;
use crate::kernels::norm::NormKind;
use crate::kernels::rng::Rng;
use crate::nn::norm::{mean_row_norm, normalise_rows};
use crate::present::{f, Figure, LineChart, Panel, Series, Table};
use serde_json::{json, Map, Value};

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "drift",
    question: "What happens to the signal through a stack of plain linear layers?",
    flags: &[
        ExpFlag::Layers,
        ExpFlag::DModel,
        ExpFlag::Scales,
        ExpFlag::Rows,
        ExpFlag::Seed,
    ],
    run,
    grid: None,
};

/// drift: the mean row norm through 20 plain linear layers, with and
/// without a LayerNorm after each.
fn run(a: &ExpArgs, _progress: Progress) -> Result<ExpResult> {
    let d = a.d_model.unwrap_or(64);
    let depth = a.first_layers().unwrap_or(20);
    let rows = a.rows.unwrap_or(if a.quick { 64 } else { 256 });
    let scales = a.scales.clone().unwrap_or(vec![0.3, 1.2]);
    let seed = a.seed.unwrap_or(0);
    let mut rng = Rng::derive(seed, "drift");
    let x0 = rng.normal_vec(rows * d, 0.0, 1.0);
    let mut out = result(
        json!({"d": d, "layers": depth, "rows": rows, "scales": scales.iter().map(|&v| num(v)).collect::<Vec<_>>(), "weights": "W ~ N(0, s^2 / d)", "layernorm": "unit gain, eps 1e-5, after each layer"}),
        vec![seed],
    );
    let mut table = Table::new(
        "Mean row norm of the signal after layer l",
        &[
            "scale s",
            "setting",
            "l=0",
            "l=5",
            "l=10",
            &format!("l={depth}"),
            "last / first",
        ],
    );
    let mut panels = Vec::new();
    let mut curves = Vec::new();
    let mut by_scale = Map::new();
    for &s in &scales {
        // One set of weights per scale, shared by both settings.
        let ws: Vec<Vec<f32>> = (0..depth)
            .map(|_| rng.normal_vec(d * d, 0.0, s / (d as f32).sqrt()))
            .collect();
        let mut series = Vec::new();
        let mut per_setting = Map::new();
        for setting in ["plain", "layernorm"] {
            let mut x = x0.clone();
            let mut norms = vec![mean_row_norm(&x, d)];
            let mut y = vec![0.0; rows * d];
            for w in &ws {
                linear_forward(&x, w, None, rows, d, d, &mut y);
                x = if setting == "layernorm" {
                    normalise_rows(NormKind::LayerNorm, d, &y)
                } else {
                    y.clone()
                };
                norms.push(mean_row_norm(&x, d));
            }
            let at = |l: usize| {
                norms
                    .get(l)
                    .copied()
                    .map(|v| f(v, 4))
                    .unwrap_or_else(|| "-".into())
            };
            table.row(vec![
                format!("{s}"),
                setting.into(),
                at(0),
                at(5),
                at(10),
                at(depth),
                f(norms[depth] / norms[0], 4),
            ]);
            series.push(Series::indexed(setting, &norms));
            curves.push(json!({"scale": num(s), "setting": setting, "mean_row_norm": norms}));
            per_setting.insert(setting.into(), json!(norms));
        }
        by_scale.insert(format!("{s}"), Value::Object(per_setting));
        panels.push(Panel::Line(LineChart {
            title: format!("weights N(0, {s}^2/d)"),
            x_label: "layer".into(),
            y_label: "mean row norm".into(),
            series,
            log_y: true,
            log_x: false,
        }));
    }
    out.data
        .insert("mean_row_norm".into(), Value::Object(by_scale));
    out.data.insert("curves".into(), json!(curves));
    out.data.insert("sqrt_d".into(), json!((d as f64).sqrt()));
    out.figures.push(Figure {
        stem: "drift".into(),
        panels,
        cols: 2,
    });
    let mut parts = Vec::new();
    for c in &curves {
        let v: Vec<f64> = serde_json::from_value(c["mean_row_norm"].clone()).unwrap();
        let (first, last) = (v[0], v[depth]);
        let verdict = if c["setting"] == "layernorm" {
            format!(
                "stays at {} (sqrt(d) = {})",
                f(last, 3),
                f((d as f64).sqrt(), 3)
            )
        } else if last < first * 1e-2 {
            format!("vanishes ({} -> {})", f(first, 3), f(last, 3))
        } else if last > first * 1e2 {
            format!("explodes ({} -> {})", f(first, 3), f(last, 3))
        } else {
            format!("goes from {} to {}", f(first, 3), f(last, 3))
        };
        parts.push(format!(
            "s = {} {}: {}",
            c["scale"],
            c["setting"].as_str().unwrap(),
            verdict
        ));
    }
    out.conclusion = format!("After {depth} layers, {}.", parts.join("; "));
    out.tables.push(table);
    Ok(out)
}
