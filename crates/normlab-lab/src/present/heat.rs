//! Heat-map panels of a figure: coloured cells with their values and
//! marks (e.g. "D" for diverged), axis titles for what the rows and
//! columns are, and a colour bar giving the value range.

use super::axis::{err, tick};
use normlab::error::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Serialize;

/// A heat-map panel: `values[row][col]`, with optional marks (e.g. "div").
#[derive(Clone, Debug, Serialize)]
pub struct Heatmap {
    /// Panel title.
    pub title: String,
    /// Column labels (x).
    pub x_labels: Vec<String>,
    /// Row labels (y).
    pub y_labels: Vec<String>,
    /// Cell values (None: no value, drawn grey).
    pub values: Vec<Vec<Option<f64>>>,
    /// Text drawn in each cell (empty for none).
    pub marks: Vec<Vec<String>>,
    /// What the colour means (the colour bar's title).
    pub value_label: String,
    /// What the columns are (the x axis title).
    pub x_title: String,
    /// What the rows are (the y axis title).
    pub y_title: String,
}

/// Viridis-like colour for t in [0, 1].
fn colour(t: f64) -> RGBColor {
    let stops = [
        (68.0, 1.0, 84.0),
        (59.0, 82.0, 139.0),
        (33.0, 145.0, 140.0),
        (94.0, 201.0, 98.0),
        (253.0, 231.0, 37.0),
    ];
    let t = t.clamp(0.0, 1.0) * (stops.len() - 1) as f64;
    let i = (t.floor() as usize).min(stops.len() - 2);
    let f = t - i as f64;
    let (a, b) = (stops[i], stops[i + 1]);
    RGBColor(
        (a.0 + f * (b.0 - a.0)) as u8,
        (a.1 + f * (b.1 - a.1)) as u8,
        (a.2 + f * (b.2 - a.2)) as u8,
    )
}

/// The colour bar beside a heat map: the value range top to bottom, its
/// ends and middle labelled, titled with what the colour means.
fn draw_colour_bar<DB: DrawingBackend>(
    h: &Heatmap,
    (lo, hi): (f64, f64),
    area: &DrawingArea<DB, Shift>,
) -> Result<()> {
    let (w, ht) = area.dim_in_pixel();
    let (top, bottom) = (44i32, ht as i32 - 48);
    let (x0, x1) = (8i32, 26i32);
    let steps = 64;
    for k in 0..steps {
        let t = 1.0 - k as f64 / steps as f64;
        let y = top + (bottom - top) * k / steps;
        let y2 = top + (bottom - top) * (k + 1) / steps;
        area.draw(&Rectangle::new([(x0, y), (x1, y2)], colour(t).filled()))
            .map_err(err)?;
    }
    area.draw(&Rectangle::new(
        [(x0, top), (x1, bottom)],
        BLACK.stroke_width(1),
    ))
    .map_err(err)?;
    let style = TextStyle::from(("sans-serif", 11).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (t, v) in [(0.0, hi), (0.5, (lo + hi) / 2.0), (1.0, lo)] {
        let y = top + ((bottom - top) as f64 * t) as i32;
        let label = if hi > lo {
            tick(round_sig(v, 3))
        } else {
            tick(round_sig(lo, 3))
        };
        area.draw(&Text::new(label, (x1 + 4, y), style.clone()))
            .map_err(err)?;
    }
    let title = TextStyle::from(("sans-serif", 11).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    // The title above the bar, wrapped to the bar's column.
    let words: Vec<&str> = h.value_label.split_whitespace().collect();
    let mut lines: Vec<String> = Vec::new();
    for wd in words {
        match lines.last_mut() {
            Some(l) if l.len() + wd.len() < (w as usize / 7).max(8) => {
                l.push(' ');
                l.push_str(wd);
            }
            _ => lines.push(wd.to_string()),
        }
    }
    for (i, l) in lines.iter().take(3).enumerate() {
        area.draw(&Text::new(l.clone(), (2, 6 + 12 * i as i32), title.clone()))
            .map_err(err)?;
    }
    Ok(())
}

/// `v` rounded to `sig` significant digits (for colour-bar labels).
fn round_sig(v: f64, sig: i32) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let p = 10f64.powi(sig - 1 - v.abs().log10().floor() as i32);
    (v * p).round() / p
}

pub(super) fn draw_heat<DB: DrawingBackend>(
    h: &Heatmap,
    full: &DrawingArea<DB, Shift>,
) -> Result<()> {
    let (nr, nc) = (h.y_labels.len().max(1), h.x_labels.len().max(1));
    let vals = h
        .values
        .iter()
        .flatten()
        .filter_map(|v| *v)
        .filter(|v| v.is_finite());
    let (lo, hi) = value_range(vals);
    let bar_w = 90;
    let (area, bar) = full.split_horizontally(full.dim_in_pixel().0.saturating_sub(bar_w));
    draw_colour_bar(h, (lo, hi), &bar)?;
    let max_label = h
        .y_labels
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(4) as u32;
    let mut chart = ChartBuilder::on(&area)
        .caption(h.title.as_str(), ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(44)
        .y_label_area_size((max_label * 7 + 30).clamp(56, 280))
        .build_cartesian_2d(
            (0..nc as i32 - 1).into_segmented(),
            (0..nr as i32 - 1).into_segmented(),
        )
        .map_err(err)?;
    let xl = h.x_labels.clone();
    let yl = h.y_labels.clone();
    let lab = |labels: &[String], v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
            labels.get(*i as usize).cloned().unwrap_or_default()
        }
        SegmentValue::Last => String::new(),
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(nc)
        .y_labels(nr)
        .x_label_formatter(&|v| lab(&xl, v))
        .y_label_formatter(&|v| lab(&yl, v))
        .x_desc(h.x_title.as_str())
        .y_desc(h.y_title.as_str())
        .axis_desc_style(("sans-serif", 13))
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(err)?;
    for r in 0..nr {
        for c in 0..nc {
            let v = h
                .values
                .get(r)
                .and_then(|row| row.get(c))
                .copied()
                .flatten();
            let fill = match v {
                Some(v) if v.is_finite() => {
                    colour(if hi > lo { (v - lo) / (hi - lo) } else { 0.5 })
                }
                _ => RGBColor(200, 200, 200),
            };
            let (c0, r0) = (c as i32, r as i32);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [
                        (SegmentValue::Exact(c0), SegmentValue::Exact(r0)),
                        (SegmentValue::Exact(c0 + 1), SegmentValue::Exact(r0 + 1)),
                    ],
                    fill.filled(),
                )))
                .map_err(err)?;
            let mut text = v
                .filter(|x| x.is_finite())
                .map(|x| format!("{x:.3}"))
                .unwrap_or_default();
            if let Some(m) = h
                .marks
                .get(r)
                .and_then(|row| row.get(c))
                .filter(|m| !m.is_empty())
            {
                text = if text.is_empty() {
                    m.clone()
                } else {
                    format!("{text} {m}")
                };
            }
            if !text.is_empty() {
                let light_cell = v
                    .map(|x| hi > lo && (x - lo) / (hi - lo) > 0.6)
                    .unwrap_or(true);
                let style = TextStyle::from(("sans-serif", 14).into_font())
                    .color(if light_cell { &BLACK } else { &WHITE })
                    .pos(Pos::new(HPos::Center, VPos::Center));
                chart
                    .draw_series(std::iter::once(Text::new(
                        text,
                        (SegmentValue::CenterOf(c0), SegmentValue::CenterOf(r0)),
                        style,
                    )))
                    .map_err(err)?;
            }
        }
    }
    Ok(())
}

/// The smallest and largest finite value (0..1 when there is none).
fn value_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo.is_finite() {
        (lo, hi)
    } else {
        (0.0, 1.0)
    }
}
