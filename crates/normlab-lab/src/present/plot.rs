//! Figures for experiments and reports, drawn with `plotters` into SVG and
//! PNG side by side: line charts (optionally log-scaled) and heat maps with
//! per-cell marks, axis titles and a colour bar, arranged as panels of one
//! figure. A diverged run's line never sets a chart's range: the axes fit
//! the other lines and the diverged one is drawn clipped at the edge,
//! marked where it leaves the range ([`line_axes`]). Whole-number ticks
//! print as whole numbers ([`tick`]). The font (DejaVu Sans) is embedded,
//! so nothing has to be installed.

use image::ImageEncoder;
use normlab::error::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;

use super::axis::err;
pub use super::axis::tick;
pub use super::heat::Heatmap;
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
    /// A diverged run: drawn clipped to the range the other lines set.
    pub diverged: bool,
}

impl Series {
    /// A series from y values at x = 0, 1, 2, ...
    pub fn indexed(name: impl Into<String>, ys: &[f64]) -> Series {
        Series {
            name: name.into(),
            points: ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect(),
            markers: true,
            diverged: false,
        }
    }

    /// A series from points.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            markers: false,
            diverged: false,
        }
    }

    /// Marked as a diverged run (or not): it does not set the chart's
    /// range and is drawn clipped, its legend saying so.
    pub fn diverged(mut self, yes: bool) -> Series {
        self.diverged = yes;
        self
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
            Panel::Heat(h) => super::heat::draw_heat(h, area)?,
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

/// The axes a line chart is drawn with: x and y ranges, and the series
/// drawn clipped (diverged ones with points outside the y range).
#[derive(Clone, Debug, PartialEq)]
pub struct Axes {
    /// X range.
    pub x: (f64, f64),
    /// Y range.
    pub y: (f64, f64),
    /// Indices of the series with points clipped at the y range's edge.
    pub clipped: Vec<usize>,
}

/// Whether a point can be drawn on the chart's axes.
fn drawable(c: &LineChart, (x, y): (f64, f64)) -> bool {
    x.is_finite() && y.is_finite() && (!c.log_y || y > 0.0) && (!c.log_x || x > 0.0)
}

/// The axes of a line chart: x over every series; y over the series that
/// did not diverge (all of them when every one did), so one exploding
/// run cannot flatten the others.
pub fn line_axes(c: &LineChart) -> Axes {
    let pts = |s: &Series| -> Vec<(f64, f64)> {
        s.points
            .iter()
            .copied()
            .filter(|p| drawable(c, *p))
            .collect()
    };
    let xs = c.series.iter().flat_map(&pts).map(|p| p.0);
    let x = bounds(xs, c.log_x);
    let calm = c.series.iter().any(|s| !s.diverged && !pts(s).is_empty());
    let ys = c
        .series
        .iter()
        .filter(|s| !calm || !s.diverged)
        .flat_map(&pts)
        .map(|p| p.1);
    let y = bounds(ys, c.log_y);
    let clipped = c
        .series
        .iter()
        .enumerate()
        .filter(|(_, s)| pts(s).iter().any(|p| p.1 < y.0 || p.1 > y.1))
        .map(|(i, _)| i)
        .collect();
    Axes { x, y, clipped }
}

fn draw_line<DB: DrawingBackend>(c: &LineChart, area: &DrawingArea<DB, Shift>) -> Result<()> {
    let ok = |x: f64, y: f64| drawable(c, (x, y));
    let axes = line_axes(c);
    let ((x0, x1), (y0, y1)) = (axes.x, axes.y);
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
                .x_label_formatter(&|v| tick(*v))
                .y_label_formatter(&|v| tick(*v))
                .label_style(("sans-serif", 12))
                .axis_desc_style(("sans-serif", 13))
                .light_line_style(RGBColor(235, 235, 235))
                .draw()
                .map_err(err)?;
            for (i, s) in c.series.iter().enumerate() {
                let col = PALETTE[i % PALETTE.len()];
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|p| ok(p.0, p.1))
                    .map(|(x, y)| (x, y.clamp(y0, y1)))
                    .collect();
                let clipped = axes.clipped.contains(&i);
                let name = if clipped {
                    format!("{} (clipped)", s.name)
                } else {
                    s.name.clone()
                };
                let style = if s.diverged {
                    col.stroke_width(1)
                } else {
                    col.stroke_width(2)
                };
                chart
                    .draw_series(LineSeries::new(pts.clone(), style))
                    .map_err(err)?
                    .label(name)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], col.stroke_width(2))
                    });
                if s.markers && pts.len() <= 64 {
                    chart
                        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, col.filled())))
                        .map_err(err)?;
                }
                if clipped {
                    // A cross where the line leaves the range.
                    let edge = s
                        .points
                        .iter()
                        .copied()
                        .filter(|p| ok(p.0, p.1))
                        .find(|p| p.1 < y0 || p.1 > y1)
                        .map(|(x, y)| (x, y.clamp(y0, y1)));
                    if let Some(p) = edge {
                        chart
                            .draw_series(std::iter::once(Cross::new(p, 6, col.stroke_width(2))))
                            .map_err(err)?;
                    }
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
