//! A grid of seed groups (rows x columns, e.g. placement x learning rate)
//! as a heat map and a table: the cell's value is the mean final held-out
//! loss over seeds, marked D where most seeds diverged (no value) and S
//! where most stalled. Used by the lr-sensitivity and placements
//! experiments and by `normlab report`.

use super::plot::{Heatmap, Panel};
use super::table::{f, Table};
use crate::sweep::SeedGroup;

/// The text of one cell: `D`, `2.345 S`, `2.345`, or `-` (no runs).
pub fn cell_text(g: Option<&SeedGroup>) -> String {
    match g {
        None => "-".into(),
        Some(g) => match (g.heat_value(), g.mark()) {
            (_, "D") => "D".into(),
            (Some(m), "") => f(m, 3),
            (Some(m), mark) => format!("{} {mark}", f(m, 3)),
            (None, _) => "-".into(),
        },
    }
}

/// A heat-map panel of `cells[row][col]`; `axes` names what the columns
/// and the rows are (the axis titles).
pub fn heat_panel(
    title: impl Into<String>,
    axes: (&str, &str),
    x_labels: Vec<String>,
    y_labels: Vec<String>,
    cells: &[Vec<Option<SeedGroup>>],
) -> Panel {
    Panel::Heat(Heatmap {
        title: title.into(),
        x_title: axes.0.into(),
        y_title: axes.1.into(),
        x_labels,
        y_labels,
        values: cells
            .iter()
            .map(|r| {
                r.iter()
                    .map(|c| c.as_ref().and_then(SeedGroup::heat_value))
                    .collect()
            })
            .collect(),
        marks: cells
            .iter()
            .map(|r| {
                r.iter()
                    .map(|c| c.as_ref().map_or("", SeedGroup::mark).to_string())
                    .collect()
            })
            .collect(),
        value_label: "held-out loss (seed mean)".into(),
    })
}

/// The same grid as a table: one row per row label, one column per column.
pub fn table(
    title: impl Into<String>,
    corner: &str,
    x_labels: &[String],
    y_labels: &[String],
    cells: &[Vec<Option<SeedGroup>>],
) -> Table {
    let mut header = vec![corner.to_string()];
    header.extend(x_labels.iter().cloned());
    let mut t = Table {
        title: title.into(),
        header,
        rows: Vec::new(),
    };
    for (label, row) in y_labels.iter().zip(cells) {
        let mut cells = vec![label.clone()];
        cells.extend(row.iter().map(|c| cell_text(c.as_ref())));
        t.rows.push(cells);
    }
    t
}
