//! Figures for experiments and reports, drawn with `plotters` into SVG and
//! PNG side by side: line charts (optionally log-scaled) and heat maps with
//! per-cell marks, arranged as panels of one figure. The font (DejaVu Sans)
//! is embedded, so nothing has to be installed.

use image::ImageEncoder;
use normlab::error::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One line of a chart.
#[derive(Clone, Debug, Serialize)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// (x, y) points; non-finite points are skipped (and non-positive ones on log axes).
    pub points: Vec<(f64, f64)>,
    /// Draw markers at the points.
    pub markers: bool,
}

impl Series {
    /// A series from y values at x = 0, 1, 2, ...
    pub fn indexed(name: impl Into<String>, ys: &[f64]) -> Series {
        Series {
            name: name.into(),
            points: ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect(),
            markers: true,
        }
    }

    /// A series from points.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            markers: false,
        }
    }
}

/// A line chart panel.
#[derive(Clone, Debug, Serialize)]
pub struct LineChart {
    /// Panel title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Lines.
    pub series: Vec<Series>,
    /// Log-scaled y axis.
    pub log_y: bool,
    /// Log-scaled x axis.
    pub log_x: bool,
}

impl LineChart {
    /// A chart with linear axes.
    pub fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
        series: Vec<Series>,
    ) -> LineChart {
        LineChart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            series,
            log_y: false,
            log_x: false,
        }
    }

    /// With a logarithmic y axis.
    pub fn log_y(mut self) -> LineChart {
        self.log_y = true;
        self
    }

    /// With a logarithmic x axis.
    pub fn log_x(mut self) -> LineChart {
        self.log_x = true;
        self
    }

    /// As a panel.
    pub fn panel(self) -> Panel {
        Panel::Line(self)
    }
}

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
    /// What the colour means.
    pub value_label: String,
}

/// A panel.
#[derive(Clone, Debug, Serialize)]
pub enum Panel {
    /// Lines.
    Line(LineChart),
    /// Heat map.
    Heat(Heatmap),
}

/// A figure: panels on a grid of `cols` columns.
#[derive(Clone, Debug, Serialize)]
pub struct Figure {
    /// File stem (`<stem>.svg`, `<stem>.png`).
    pub stem: String,
    /// Panels, row by row.
    pub panels: Vec<Panel>,
    /// Columns of the grid.
    pub cols: usize,
}

const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

impl Figure {
    /// A figure of panels in `cols` columns, saved as `<stem>.svg/.png`.
    pub fn new(stem: impl Into<String>, panels: Vec<Panel>, cols: usize) -> Figure {
        Figure {
            stem: stem.into(),
            panels,
            cols,
        }
    }
}

/// The bundled DejaVu Sans for text in figures (the browser build has no
/// font registry: there plotters measures text with the page's fonts).
fn register_font() {
    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    {
        use plotters::style::FontStyle;
        static FONT: std::sync::Once = std::sync::Once::new();
        FONT.call_once(|| {
            let _ = plotters::style::register_font(
                "sans-serif",
                FontStyle::Normal,
                dejavu::sans::regular(),
            );
            let _ =
                plotters::style::register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold());
        });
    }
}

fn err<E: std::fmt::Display>(e: E) -> Error {
    Error::Internal(format!("cannot draw figure: {e}"))
}

/// Write `<dir>/<stem>.svg` and `<dir>/<stem>.png` (each atomically);
/// returns both paths.
pub fn save(fig: &Figure, dir: &Path) -> Result<Vec<PathBuf>> {
    let svg = dir.join(format!("{}.svg", fig.stem));
    let png = dir.join(format!("{}.png", fig.stem));
    normlab::io::atomic_write(&svg, svg_string(fig)?.as_bytes())?;
    normlab::io::atomic_write(&png, &png_bytes(fig)?)?;
    Ok(vec![svg, png])
}

/// Pixel size and panel grid of a figure.
fn layout(fig: &Figure) -> ((u32, u32), usize, usize) {
    let rows = fig.panels.len().div_ceil(fig.cols.max(1)).max(1);
    let cols = fig.cols.max(1).min(fig.panels.len().max(1));
    (((cols * 520) as u32, (rows * 380) as u32), rows, cols)
}

/// The figure as PNG bytes.
pub fn png_bytes(fig: &Figure) -> Result<Vec<u8>> {
    register_font();
    let (size, rows, cols) = layout(fig);
    let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
        draw(fig, &root, rows, cols)?;
        root.present().map_err(err)?;
    }
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(&rgb, size.0, size.1, image::ColorType::Rgb8)
        .map_err(err)?;
    Ok(out)
}

/// The figure as an SVG string (for the web lab).
pub fn svg_string(fig: &Figure) -> Result<String> {
    register_font();
    let (size, rows, cols) = layout(fig);
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, size).into_drawing_area();
        draw(fig, &root, rows, cols)?;
        root.present().map_err(err)?;
    }
    Ok(s)
}

fn draw<DB: DrawingBackend>(
    fig: &Figure,
    root: &DrawingArea<DB, Shift>,
    rows: usize,
    cols: usize,
) -> Result<()> {
    root.fill(&WHITE).map_err(err)?;
    let areas = root.split_evenly((rows, cols));
    for (panel, area) in fig.panels.iter().zip(areas.iter()) {
        match panel {
            Panel::Line(c) => draw_line(c, area)?,
            Panel::Heat(h) => draw_heat(h, area)?,
        }
    }
    Ok(())
}

fn bounds(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return if log { (0.1, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        if hi / lo < 1.01 {
            return (lo / 2.0, hi * 2.0);
        }
        (lo / 1.3, hi * 1.3)
    } else {
        let pad = if hi > lo {
            0.05 * (hi - lo)
        } else {
            0.5_f64.max(hi.abs() * 0.1)
        };
        (lo - pad, hi + pad)
    }
}

fn draw_line<DB: DrawingBackend>(c: &LineChart, area: &DrawingArea<DB, Shift>) -> Result<()> {
    let ok = |x: f64, y: f64| {
        x.is_finite() && y.is_finite() && (!c.log_y || y > 0.0) && (!c.log_x || x > 0.0)
    };
    let xs = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().filter(|p| ok(p.0, p.1)).map(|p| p.0));
    let ys = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().filter(|p| ok(p.0, p.1)).map(|p| p.1));
    let (x0, x1) = bounds(xs, c.log_x);
    let (y0, y1) = bounds(ys, c.log_y);
    let mut b = ChartBuilder::on(area);
    b.caption(&c.title, ("sans-serif", 17))
        .margin(8)
        .x_label_area_size(36)
        .y_label_area_size(62);
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(c.x_label.as_str())
                .y_desc(c.y_label.as_str())
                .label_style(("sans-serif", 12))
                .axis_desc_style(("sans-serif", 13))
                .light_line_style(RGBColor(235, 235, 235))
                .draw()
                .map_err(err)?;
            for (i, s) in c.series.iter().enumerate() {
                let col = PALETTE[i % PALETTE.len()];
                let pts: Vec<(f64, f64)> =
                    s.points.iter().copied().filter(|p| ok(p.0, p.1)).collect();
                chart
                    .draw_series(LineSeries::new(pts.clone(), col.stroke_width(2)))
                    .map_err(err)?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], col.stroke_width(2))
                    });
                if s.markers && pts.len() <= 64 {
                    chart
                        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, col.filled())))
                        .map_err(err)?;
                }
            }
            if c.series.len() > 1 {
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.85))
                    .border_style(RGBColor(200, 200, 200))
                    .label_font(("sans-serif", 11))
                    .position(SeriesLabelPosition::UpperRight)
                    .draw()
                    .map_err(err)?;
            }
        }};
    }
    match (c.log_x, c.log_y) {
        (false, false) => body!(b.build_cartesian_2d(x0..x1, y0..y1).map_err(err)?),
        (false, true) => body!(b
            .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
            .map_err(err)?),
        (true, false) => body!(b
            .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
            .map_err(err)?),
        (true, true) => body!(b
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(err)?),
    }
    Ok(())
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

fn draw_heat<DB: DrawingBackend>(h: &Heatmap, area: &DrawingArea<DB, Shift>) -> Result<()> {
    let (nr, nc) = (h.y_labels.len().max(1), h.x_labels.len().max(1));
    let vals = h
        .values
        .iter()
        .flatten()
        .filter_map(|v| *v)
        .filter(|v| v.is_finite());
    let (lo, hi) = bounds(vals, false);
    let max_label = h
        .y_labels
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(4) as u32;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{} (colour: {})", h.title, h.value_label),
            ("sans-serif", 16),
        )
        .margin(8)
        .x_label_area_size(36)
        .y_label_area_size((max_label * 7 + 12).clamp(40, 260))
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
