//! norm-stats (claims C5, C6): how do the outputs of LayerNorm and RMSNorm
//! (and the other row-wise kinds) differ? On rows ~ N(1.5, 3^2): the mean
//! and std of the output rows' means and stds, and each output's L2 norm;
//! and the invariances: each kind's output under x -> a x and x -> x + c.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{result, ExpResult, Experiment, Progress};
use crate::present::{f, Figure, LineChart, Series, Table};
use normlab::error::Result;
use normlab::kernels::norm::NormKind;
use normlab::kernels::rng::Rng;
use normlab::nn::norm::{mean_row_norm, normalise_rows};
use serde::Serialize;
use serde_json::json;

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "norm-stats",
    question: "How do LayerNorm and RMSNorm outputs differ?",
    flags: &[ExpFlag::DModel, ExpFlag::Rows, ExpFlag::Seed],
    run,
    grid: None,
    hidden_training: None,
    quick_decides: true,
};

/// The kinds compared.
const KINDS: [NormKind; 4] = [
    NormKind::LayerNorm,
    NormKind::RmsNorm,
    NormKind::ZRmsNorm,
    NormKind::ScaleNorm,
];

/// One kind's output statistics and invariances.
#[derive(Clone, Debug, Serialize)]
struct KindStats {
    norm: &'static str,
    row_mean_mean: f64,
    row_mean_std: f64,
    row_std_mean: f64,
    row_l2_over_sqrt_d: f64,
    /// Largest |Norm(3 x) - Norm(x)| over all rows.
    scale_change: f64,
    /// Largest |Norm(x + 2) - Norm(x)|.
    shift_change: f64,
}

fn run(a: &ExpArgs, _progress: Progress) -> Result<ExpResult> {
    let d = a.d_model.unwrap_or(512);
    let rows = a.rows.unwrap_or(if a.quick { 256 } else { 4096 });
    let seed = a.seed.unwrap_or(0);
    normlab::limits::check_memory(
        normlab::limits::f32_bytes(6.0 * rows as f64 * d as f64),
        &format!("norm-stats ({rows} rows of d {d})"),
    )?;
    let x = Rng::derive(seed, "norm-stats").normal_vec(rows * d, 1.5, 3.0);
    let scaled: Vec<f32> = x.iter().map(|v| 3.0 * v).collect();
    let shifted: Vec<f32> = x.iter().map(|v| v + 2.0).collect();
    let max_diff = |p: &[f32], q: &[f32]| {
        p.iter()
            .zip(q)
            .fold(0f64, |m, (a, b)| m.max((a - b).abs() as f64))
    };
    let mut table = Table::new(
        "Statistics of the output rows (inputs N(1.5, 3^2)), and the largest change of any output under x -> 3x and x -> x + 2",
        &["norm", "mean of row means", "std of row means", "mean of row stds", "mean row L2 / sqrt(d)", "change under 3x", "change under +2"],
    );
    let mut stats = Vec::new();
    let (mut panels_mean, mut panels_std) = (Vec::new(), Vec::new());
    for kind in KINDS {
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
        let st = KindStats {
            norm: kind.name(),
            row_mean_mean: mm,
            row_mean_std: (means.iter().map(|v| (v - mm).powi(2)).sum::<f64>() / n).sqrt(),
            row_std_mean: stds.iter().sum::<f64>() / n,
            row_l2_over_sqrt_d: mean_row_norm(&y, d) / (d as f64).sqrt(),
            scale_change: max_diff(&y, &normalise_rows(kind, d, &scaled)),
            shift_change: max_diff(&y, &normalise_rows(kind, d, &shifted)),
        };
        table.row(vec![
            st.norm.into(),
            f(st.row_mean_mean, 4),
            f(st.row_mean_std, 4),
            f(st.row_std_mean, 4),
            f(st.row_l2_over_sqrt_d, 4),
            f(st.scale_change, 3),
            f(st.shift_change, 3),
        ]);
        let quantiles = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.iter()
                .enumerate()
                .map(|(i, &y)| ((i as f64 + 0.5) / n, y))
                .collect::<Vec<_>>()
        };
        panels_mean.push(Series::new(kind.name(), quantiles(means)));
        panels_std.push(Series::new(kind.name(), quantiles(stds)));
        stats.push(st);
    }
    let mut out = result(
        json!({"d": d, "rows": rows, "inputs": "N(1.5, 3^2) per element", "gains": "unit (scalenorm g = sqrt(d))", "transforms": ["3x", "x + 2"]}),
        vec![seed],
    );
    for s in &stats {
        out.data.insert(s.norm.into(), json!(s));
    }
    out.figures.push(Figure::new(
        "norm_stats",
        vec![
            LineChart::new("row means (sorted)", "quantile", "row mean", panels_mean).panel(),
            LineChart::new("row stds (sorted)", "quantile", "row std", panels_std).panel(),
        ],
        2,
    ));
    let (ln, rms) = (&stats[0], &stats[1]);
    let expected_mean = 1.5 / (1.5f64 * 1.5 + 9.0).sqrt();
    let expected_std = 3.0 / (1.5f64 * 1.5 + 9.0).sqrt();
    out.conclusion = format!(
        "LayerNorm output rows have mean {} (spread {}) and std {}: centred and unit-scale. RMSNorm output rows keep the inputs' offset: mean {} (spread {}; 1.5 / sqrt(1.5^2 + 3^2) = {:.4} expected) and std {} ({:.4} expected), with L2 norm sqrt(d) (ratio {}). Under x -> 3x no kind's output changes by more than {}; under x -> x + 2 LayerNorm's changes by {} and RMSNorm's by {}.",
        f(ln.row_mean_mean, 4),
        f(ln.row_mean_std, 4),
        f(ln.row_std_mean, 4),
        f(rms.row_mean_mean, 4),
        f(rms.row_mean_std, 4),
        expected_mean,
        f(rms.row_std_mean, 4),
        expected_std,
        f(rms.row_l2_over_sqrt_d, 5),
        f(stats.iter().map(|s| s.scale_change).fold(0.0, f64::max), 3),
        f(ln.shift_change, 3),
        f(rms.shift_change, 3),
    );
    // C5: LayerNorm invariant to 3x and +2; RMSNorm to 3x only; RMS L2 sqrt(d).
    let tiny = 1e-4;
    let c5 = ln.scale_change < tiny
        && ln.shift_change < tiny
        && rms.scale_change < tiny
        && rms.shift_change > 0.01
        && (rms.row_l2_over_sqrt_d - 1.0).abs() < 1e-3;
    out.checks.push(ClaimCheck::new(
        "C5",
        if c5 { Verdict::Holds } else { Verdict::DoesNotHold },
        format!(
            "largest output change: LayerNorm {} under 3x and {} under +2; RMSNorm {} under 3x and {} under +2; RMSNorm's output rows have L2 norm {} x sqrt(d).",
            f(ln.scale_change, 2),
            f(ln.shift_change, 2),
            f(rms.scale_change, 2),
            f(rms.shift_change, 3),
            f(rms.row_l2_over_sqrt_d, 5)
        ),
    ));
    // C6: RMSNorm row mean ~0.4475 and std ~0.8944 on N(1.5, 3^2).
    let near = |a: f64, b: f64| ((a - b) / b).abs() < 0.02;
    let c6 = near(rms.row_mean_mean, 0.4475)
        && near(rms.row_std_mean, 0.8944)
        && ln.row_mean_mean.abs() < 1e-3
        && (ln.row_std_mean - 1.0).abs() < 1e-3;
    out.checks.push(ClaimCheck::new(
        "C6",
        if c6 { Verdict::Holds } else { Verdict::DoesNotHold },
        format!(
            "RMSNorm output rows: mean {} and std {} (lesson 0.4475 and 0.8944; exactly 1.5/sqrt(11.25) = {:.4} and 3/sqrt(11.25) = {:.4} for large d); LayerNorm: {} and {} (lesson 0 and 1). d = {d}, {rows} rows.",
            f(rms.row_mean_mean, 4),
            f(rms.row_std_mean, 4),
            expected_mean,
            expected_std,
            f(ln.row_mean_mean, 4),
            f(ln.row_std_mean, 4),
        ),
    ));
    out.tables.push(table);
    Ok(out)
}
