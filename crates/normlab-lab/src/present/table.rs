//! Tables (aligned text on the terminal, markdown in reports) and the
//! number formatting every table and report uses.

use serde::Serialize;

/// A plain table (rendered as text on the terminal and markdown in reports).
#[derive(Clone, Debug, Serialize)]
pub struct Table {
    /// Title above the table.
    pub title: String,
    /// Column names.
    pub header: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table.
    pub fn new(title: impl Into<String>, header: &[&str]) -> Table {
        Table {
            title: title.into(),
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Append a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Aligned plain text.
    pub fn text(&self) -> String {
        let n = self.header.len();
        let mut w = vec![0; n];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |r: &Vec<String>| {
            let cells: Vec<String> = (0..n)
                .map(|i| {
                    format!(
                        "{:<width$}",
                        r.get(i).map(String::as_str).unwrap_or(""),
                        width = w[i]
                    )
                })
                .collect();
            cells.join("  ").trim_end().to_string()
        };
        let rule = w
            .iter()
            .map(|&k| "-".repeat(k))
            .collect::<Vec<_>>()
            .join("  ");
        let mut s = if self.title.is_empty() {
            String::new()
        } else {
            format!("{}\n", self.title)
        };
        s.push_str(&format!("{}\n{rule}\n", line(&self.header)));
        for r in &self.rows {
            s.push_str(&line(r));
            s.push('\n');
        }
        s
    }

    /// GitHub markdown.
    pub fn markdown(&self) -> String {
        let mut s = if self.title.is_empty() {
            String::new()
        } else {
            format!("**{}**\n\n", self.title)
        };
        s.push_str(&format!(
            "| {} |\n|{}|\n",
            self.header.join(" | "),
            vec!["---"; self.header.len()].join("|")
        ));
        for r in &self.rows {
            s.push_str(&format!("| {} |\n", r.join(" | ")));
        }
        s
    }
}

/// A number for tables: `digits` decimals, fewer for large values,
/// scientific for very large or small ones; NaN as `nan`.
pub fn f(v: f64, digits: usize) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.into()
    } else if v != 0.0 && (v.abs() >= 1e5 || v.abs() < 1e-3) {
        format!("{v:.2e}")
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.digits$}")
    }
}

/// [`f`] of a value that may be missing (`-`).
pub fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| f(x, digits)).unwrap_or_else(|| "-".into())
}

/// An optional step (`-` when absent).
pub fn opt_step(v: Option<usize>) -> String {
    v.map(|d| d.to_string()).unwrap_or_else(|| "-".into())
}
