//! Terminal output helpers: one-line errors and exit codes, aligned tables,
//! progress bars.

use indicatif::{ProgressBar, ProgressStyle};
use std::fmt;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

/// An error caused by the user's input: reported on one line, exit code 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// `Err(BadInput(msg))` as an anyhow error.
pub fn bad<T>(msg: impl Into<String>) -> anyhow::Result<T> {
    Err(BadInput(msg.into()).into())
}

/// Exit code of a run stopped by SIGINT/SIGTERM after saving its state
/// (128 + SIGINT, as shells report it).
pub const INTERRUPTED: u8 = 130;

/// A flag that SIGINT and SIGTERM set: long work checks it between steps,
/// saves a checkpoint and stops. A second signal while the flag is set
/// exits at once (code 130). Registered once per process.
pub fn stop_flag() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // The order matters: the conditional exit sees the flag as it
            // was before this signal sets it.
            let _ = signal_hook::flag::register_conditional_shutdown(
                sig,
                INTERRUPTED as i32,
                Arc::clone(&flag),
            );
            let _ = signal_hook::flag::register(sig, Arc::clone(&flag));
        }
        flag
    })
    .clone()
}

/// Print `error: ...` on one line to stderr and pick the exit code: 2 for
/// input the user can fix, 130 for a run stopped by a signal (its state
/// saved), 1 for I/O and internal failures.
pub fn fail(e: &anyhow::Error) -> ExitCode {
    let msg = format!("{e:#}").replace('\n', " ");
    eprintln!("error: {msg}");
    if matches!(
        e.downcast_ref::<normlab::Error>(),
        Some(normlab::Error::Interrupted(_))
    ) {
        return ExitCode::from(INTERRUPTED);
    }
    let bad_input = e.downcast_ref::<BadInput>().is_some()
        || e.downcast_ref::<normlab::Error>()
            .is_some_and(normlab::Error::is_bad_input);
    if bad_input {
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    }
}

/// The first line of a clap error, without its "error: " prefix.
pub fn clap_one_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let lines: Vec<&str> = rendered.lines().filter(|l| !l.trim().is_empty()).collect();
    let first = lines.first().copied().unwrap_or("invalid arguments");
    let mut msg = first.trim_start_matches("error: ").to_string();
    // "the following required arguments were not provided:" lists them below.
    if msg.ends_with(':') {
        let listed: Vec<&str> = lines
            .iter()
            .skip(1)
            .take_while(|l| l.starts_with(' '))
            .map(|l| l.trim())
            .collect();
        msg = format!("{} {}", msg, listed.join(", "));
    }
    // Keep clap's list of possible values, which is on a later line.
    if let Some(pv) = rendered.lines().find(|l| l.contains("possible values")) {
        msg.push_str(&format!(
            " ({})",
            pv.trim().trim_start_matches('[').trim_end_matches(']')
        ));
    }
    msg
}

/// A simple left/right-aligned text table.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    right: Vec<bool>,
}

impl Table {
    /// A table with these column names; numeric-looking columns are right-aligned.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            right: vec![false; header.len()],
        }
    }

    /// Right-align column `i`.
    pub fn right(mut self, cols: &[usize]) -> Table {
        for &c in cols {
            self.right[c] = true;
        }
        self
    }

    /// Append a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.header.len();
        let mut w = vec![0; n];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |f: &mut fmt::Formatter<'_>, r: &Vec<String>| -> fmt::Result {
            let cells: Vec<String> = (0..n)
                .map(|i| {
                    let c = r.get(i).map(String::as_str).unwrap_or("");
                    if self.right[i] {
                        format!("{c:>width$}", width = w[i])
                    } else {
                        format!("{c:<width$}", width = w[i])
                    }
                })
                .collect();
            writeln!(f, "{}", cells.join("  ").trim_end())
        };
        line(f, &self.header)?;
        writeln!(
            f,
            "{}",
            w.iter()
                .map(|&k| "-".repeat(k))
                .collect::<Vec<_>>()
                .join("  ")
        )?;
        for r in &self.rows {
            line(f, r)?;
        }
        Ok(())
    }
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn progress(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {pos}/{len} {elapsed_precise} (eta {eta})",
        )
        .unwrap()
        .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

/// Format a float vector compactly.
pub fn fmt_vec(v: &[f32], digits: usize) -> String {
    let items: Vec<String> = v.iter().map(|x| format!("{x:.digits$}")).collect();
    format!("[{}]", items.join(", "))
}
