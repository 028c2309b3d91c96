//! `metrics.jsonl`, one `StepRecord` per line: read whole, sampled as a
//! stream, or from its end; and, on resume, kept up to the snapshot's step
//! and rewritten. Lines are read as bytes, one at a time, so a line that is
//! not UTF-8 (a torn or foreign write) loses only itself; what a resume
//! cannot keep is reported and the file as it was is kept beside it. A read
//! for a report or the web lab holds at most one line of
//! [`MAX_METRICS_LINE`] bytes at a time and keeps records of at most
//! [`MAX_METRICS_BYTES`] bytes of lines, whatever the file's size; what it
//! leaves out is counted.

use crate::error::Result;
use crate::io::atomic_write;
use crate::train::record::StepRecord;
use std::fs;
use std::path::Path;

/// Read `metrics.jsonl` (lines that do not parse are skipped, one at a
/// time: a line that is not UTF-8 loses only itself), within the bounds of
/// [`read_metrics_bounded`].
pub fn read_metrics(dir: &Path) -> Vec<StepRecord> {
    read_metrics_bounded(dir).records
}

/// [`read_metrics`], with how many non-blank lines are not step records
/// (a damaged file's count, from the same read).
pub fn read_metrics_counted(dir: &Path) -> (Vec<StepRecord>, usize) {
    let r = read_metrics_bounded(dir);
    (r.records, r.unreadable)
}

/// What a bounded read of `metrics.jsonl` found.
#[derive(Debug, Default)]
pub struct MetricsRead {
    /// The records kept (every one when their lines fit
    /// [`MAX_METRICS_BYTES`]; else lines evenly apart, and the last one).
    pub records: Vec<StepRecord>,
    /// Non-blank lines that are not step records (lines longer than
    /// [`MAX_METRICS_LINE`] included: they are never held whole).
    pub unreadable: usize,
    /// Step records left out to keep within [`MAX_METRICS_BYTES`].
    pub left_out: usize,
}

/// Every record of `metrics.jsonl` while their lines come to at most
/// [`MAX_METRICS_BYTES`]; past it, records evenly apart (the last one
/// among them) up to that many bytes, with how many were left out. Every
/// line is parsed, one at a time, to count the unreadable ones. A missing
/// file reads as empty.
pub fn read_metrics_bounded(dir: &Path) -> MetricsRead {
    let s = sample(
        &dir.join("metrics.jsonl"),
        usize::MAX,
        MAX_METRICS_BYTES,
        true,
    );
    MetricsRead {
        left_out: s.total.saturating_sub(s.unreadable + s.records.len()),
        records: s.records,
        unreadable: s.unreadable,
    }
}

/// Most bytes of lines one read of `metrics.jsonl` keeps as records (32
/// MiB: some 12,000 records of a 12-block model); past it, lines are
/// sampled. The records parsed from them take less memory than their text
/// (a number of ~19 digits becomes 8 bytes), and at most about 8 times it
/// (a list of `0` or of `[]`): 256 MiB, with one line being parsed at a
/// time (at most [`MAX_METRICS_LINE`] bytes, about 16 times that while
/// parsed).
pub const MAX_METRICS_BYTES: usize = 32 << 20;

/// Longest metrics line read (a record of a 10,000-block run is about
/// 1 MiB); a longer line is counted and skipped, never held whole.
pub const MAX_METRICS_LINE: usize = 16 << 20;

/// Call `f` with each non-blank line of `path` (without its newline) that
/// is at most `cap` bytes; longer lines are passed as empty slices (so
/// that they count but parse as nothing). Reads through a fixed buffer:
/// memory does not grow with the file or with one line past `cap`. False
/// (nothing read) when `path` cannot be opened or is not a regular file.
pub fn for_each_line(path: &Path, cap: usize, mut f: impl FnMut(&[u8])) -> bool {
    use std::io::BufRead;
    // Opened without blocking (a FIFO is not waited on) and read only when
    // a regular file (a link to /dev/zero is never read).
    let mut opts = fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let Ok(file) = opts.open(path) else {
        return false;
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut r = std::io::BufReader::with_capacity(1 << 16, file);
    let mut line = Vec::new();
    let mut too_long = false;
    let mut emit = |line: &mut Vec<u8>, too_long: &mut bool| {
        if *too_long {
            f(&[]);
        } else if !line.trim_ascii().is_empty() {
            f(line);
        }
        line.clear();
        *too_long = false;
    };
    loop {
        let buf = match r.fill_buf() {
            Ok([]) => break,
            Ok(b) => b,
            Err(_) => break,
        };
        let (chunk, end) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long {
            if line.len() + chunk.len() > cap {
                too_long = true;
                line.clear();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = end.unwrap_or(buf.len());
        r.consume(used);
        if end.is_some() {
            emit(&mut line, &mut too_long);
        }
    }
    if too_long || !line.is_empty() {
        emit(&mut line, &mut too_long);
    }
    true
}

/// At most about `max` records of `metrics.jsonl`, read as a stream (a long
/// run's file is never held whole): every k-th line, the last one, and
/// every evaluation, or every j-th when there are more than `max / 2` (so
/// that at most about 1.5 `max` come back, however many lines carry an
/// evaluation), within [`MAX_METRICS_BYTES`] of lines. Returns them with
/// the file's number of records.
pub fn read_metrics_sampled(dir: &Path, max: usize) -> (Vec<StepRecord>, usize) {
    let s = sample(&dir.join("metrics.jsonl"), max, MAX_METRICS_BYTES, false);
    (s.records, s.total)
}

/// What [`sample`] found.
struct Sample {
    records: Vec<StepRecord>,
    /// Non-blank lines.
    total: usize,
    /// Lines parsed that are not records.
    unreadable: usize,
}

/// At most about `max` records of the lines of `path` and at most `budget`
/// bytes of lines: every k-th line, the last one, and every j-th
/// evaluation (see [`read_metrics_sampled`]), k and j large enough that
/// the lines kept come to about `budget` bytes at most; a line that would
/// pass `budget` is left out whatever k and j give (room is kept for the
/// last one). With `parse_all`, lines not kept are parsed too (and
/// dropped) to count the unreadable ones. The file is read once when
/// every line is wanted and it is no larger than `budget`; else twice
/// (counts, then records). Only a regular file is read.
fn sample(path: &Path, max: usize, budget: usize, parse_all: bool) -> Sample {
    let max = max.max(1);
    let mut out = Sample {
        records: Vec::new(),
        total: 0,
        unreadable: 0,
    };
    let Ok(meta) = fs::metadata(path) else {
        return out;
    };
    // Strides, and the last line's length (room kept for it).
    let (mut stride, mut eval_stride, mut last, mut last_len) = (1, 1, usize::MAX, 0);
    if max != usize::MAX || meta.len() > budget as u64 {
        let (mut total, mut evals, mut bytes, mut eval_bytes) = (0usize, 0usize, 0usize, 0usize);
        if !for_each_line(path, MAX_METRICS_LINE, |l| {
            let eval = is_evaluation(l);
            total += 1;
            evals += usize::from(eval);
            bytes = bytes.saturating_add(l.len());
            eval_bytes = eval_bytes.saturating_add(if eval { l.len() } else { 0 });
            last_len = l.len();
        }) {
            return out;
        }
        // Half the budget for every k-th line, half for the evaluations.
        let half = (budget / 2).max(1);
        stride = total.div_ceil(max).max(bytes.div_ceil(half)).max(1);
        eval_stride = evals
            .div_ceil(max.div_ceil(2))
            .max(eval_bytes.div_ceil(half))
            .max(1);
        last = total.saturating_sub(1);
    }
    let mut kept = 0usize;
    let (mut i, mut e) = (0usize, 0usize);
    for_each_line(path, MAX_METRICS_LINE, |line| {
        let eval = is_evaluation(line);
        let is_last = i == last;
        let room = kept + line.len() + if is_last { 0 } else { last_len } <= budget;
        let keep = room && (i % stride == 0 || is_last || (eval && e % eval_stride == 0));
        if keep || parse_all {
            match serde_json::from_slice::<StepRecord>(line) {
                Ok(r) if keep => {
                    kept += line.len();
                    out.records.push(r);
                }
                Ok(_) => {}
                Err(_) => out.unreadable += 1,
            }
        }
        i += 1;
        e += usize::from(eval);
    });
    out.total = i;
    out
}

/// Whether a metrics line records a held-out evaluation: its `eval_loss`
/// is not null, however the writer spaced the JSON (normlab writes
/// `"eval_loss":null`, Python's json module `"eval_loss": null`).
fn is_evaluation(line: &[u8]) -> bool {
    const KEY: &[u8] = b"\"eval_loss\"";
    let Some(i) = line.windows(KEY.len()).position(|w| w == KEY) else {
        return false;
    };
    let rest = line[i + KEY.len()..].trim_ascii_start();
    let value = rest.strip_prefix(b":").unwrap_or(rest).trim_ascii_start();
    !value.starts_with(b"null")
}

/// The step of the last record of `metrics.jsonl`, reading only its end.
pub fn last_logged_step(dir: &Path) -> usize {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = fs::File::open(dir.join("metrics.jsonl")) else {
        return 0;
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    // Bytes, not a string: the cut may fall inside a character, and a line
    // that is not UTF-8 must not hide the records before it.
    let mut tail = Vec::new();
    let _ = f.read_to_end(&mut tail);
    tail.split(|&b| b == b'\n')
        .rev()
        .find_map(|l| serde_json::from_slice::<StepRecord>(l).ok())
        .map_or(0, |r| r.step)
}

/// The metric lines of `dir` up to and including `step` (later ones belong
/// to steps that a resume redoes), and what is wrong with the history, in
/// words: the file missing, lines that cannot be read (the file as it was
/// is then kept beside it as `metrics.jsonl.damaged`, since the resume
/// rewrites it), or records ending well before `step` (more than
/// `log_every` steps).
pub(crate) fn metric_lines_up_to(
    dir: &Path,
    step: usize,
    log_every: usize,
) -> (Vec<String>, Option<String>) {
    let path = dir.join("metrics.jsonl");
    let (mut lines, mut unreadable, mut last) = (Vec::new(), 0usize, 0usize);
    // Streamed (a FIFO is not waited on, a long run's file is never held
    // whole); a line past MAX_METRICS_LINE counts as unreadable.
    let read = for_each_line(&path, MAX_METRICS_LINE, |raw| {
        let parsed = std::str::from_utf8(raw)
            .ok()
            .and_then(|l| Some((l, serde_json::from_str::<StepRecord>(l).ok()?)));
        match parsed {
            Some((l, r)) if r.step <= step => {
                last = last.max(r.step);
                lines.push(l.to_string());
            }
            Some(_) => {}
            None => unreadable += 1,
        }
    });
    if !read {
        if step == 0 {
            return (Vec::new(), None);
        }
        return (
            Vec::new(),
            Some(format!(
                "metrics.jsonl is missing or not a regular file: the records of steps 1-{step} are lost (the run goes on from step {step})"
            )),
        );
    }
    let mut problems = Vec::new();
    if unreadable > 0 {
        let kept = dir.join("metrics.jsonl.damaged");
        let saved = fs::copy(&path, &kept).is_ok();
        problems.push(format!(
            "{unreadable} line(s) of metrics.jsonl cannot be read and are left out of the resumed history{}",
            if saved {
                " (the file as it was: metrics.jsonl.damaged)"
            } else {
                ""
            }
        ));
    }
    if step > last + log_every.max(1) {
        problems.push(format!(
            "metrics.jsonl's records end at step {last} but the run resumes from step {step}: steps {}-{step} have no records",
            last + 1
        ));
    }
    (lines, (!problems.is_empty()).then(|| problems.join("; ")))
}

/// Write `metrics.jsonl` with these lines.
pub(crate) fn write_metrics(dir: &Path, lines: &[String]) -> Result<()> {
    let mut text = lines.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    atomic_write(&dir.join("metrics.jsonl"), text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluations_are_found_however_the_json_is_spaced() {
        assert!(!is_evaluation(br#"{"step":1,"eval_loss":null}"#));
        assert!(!is_evaluation(br#"{"step": 1, "eval_loss": null}"#));
        assert!(is_evaluation(br#"{"step":1,"eval_loss":2.5}"#));
        assert!(is_evaluation(br#"{"step": 1, "eval_loss": 2.5}"#));
        assert!(!is_evaluation(br#"{"step": 1}"#));
    }

    /// A Python logger's run (spaced JSON) of 600 lines with 3
    /// evaluations, and a last line that is not UTF-8: sampling to 10 keeps
    /// about 10 records plus the evaluations, and counts every line.
    #[test]
    fn sampling_keeps_evaluations_and_survives_a_bad_line() {
        let dir = std::env::temp_dir().join(format!("normlab-sample-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut text = Vec::new();
        for s in 1..=600 {
            let eval = if s % 200 == 0 { "1.5" } else { "null" };
            text.extend(format!("{{\"step\": {s}, \"loss\": 2.0, \"lr\": 0.001, \"grad_norm\": 1.0, \"grad_norm_per_block\": [], \"residual_rms\": [], \"update_ratio\": null, \"update_ratio_per_block\": [], \"eval_loss\": {eval}}}\n").bytes());
        }
        text.extend(b"\xff\xfe not utf-8\n");
        fs::write(dir.join("metrics.jsonl"), &text).unwrap();
        let (recs, total) = read_metrics_sampled(&dir, 10);
        assert_eq!(total, 601);
        let evals = recs.iter().filter(|r| r.eval_loss.is_some()).count();
        assert_eq!(evals, 3);
        assert!(recs.len() <= 10 + 3 + 1, "{} records", recs.len());
        // Read whole, and from its end: the bad last line loses only itself.
        assert_eq!(read_metrics(&dir).len(), 600);
        assert_eq!(last_logged_step(&dir), 600);
        let _ = fs::remove_dir_all(&dir);
    }

    /// Every line an evaluation (as a run evaluating at each step writes),
    /// and a 20 MiB line: sampling to 10 still gives about 10 of each, and
    /// the long line is counted, skipped, and never held whole.
    #[test]
    fn sampling_bounds_evaluations_and_long_lines_too() {
        let dir = std::env::temp_dir().join(format!("normlab-sample-eval-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut text = Vec::new();
        for s in 1..=20_000 {
            text.extend(format!("{{\"step\":{s},\"loss\":2.0,\"lr\":0.001,\"grad_norm\":1.0,\"grad_norm_per_block\":[],\"residual_rms\":[],\"update_ratio\":null,\"update_ratio_per_block\":[],\"eval_loss\":1.5}}\n").bytes());
        }
        text.extend(b"{\"step\": 0, \"x\": \"");
        text.resize(text.len() + (20 << 20), b'a');
        text.extend(b"\"}\n");
        fs::write(dir.join("metrics.jsonl"), &text).unwrap();
        let (recs, total) = read_metrics_sampled(&dir, 10);
        assert_eq!(total, 20_001);
        assert!(recs.len() <= 10 + 5 + 1, "{} records", recs.len());
        assert!(recs.len() >= 10, "{} records", recs.len());
        let mut n = 0;
        for_each_line(&dir.join("metrics.jsonl"), 1 << 20, |l| {
            assert!(l.len() <= 1 << 20);
            n += 1;
        });
        assert_eq!(n, 20_001);
        let _ = fs::remove_dir_all(&dir);
    }

    /// A line of `metrics.jsonl` for `step` whose per-block gradient norms
    /// are `blocks` zeros (a huge array inside a line).
    fn record_line(step: usize, blocks: usize) -> Vec<u8> {
        let mut l = format!("{{\"step\":{step},\"loss\":2.0,\"lr\":0.001,\"grad_norm\":1.0,\"update_ratio\":null,\"update_ratio_per_block\":[],\"residual_rms\":[],\"eval_loss\":null,\"grad_norm_per_block\":[").into_bytes();
        for b in 0..blocks {
            l.extend_from_slice(if b == 0 { b"0" } else { b",0" });
        }
        l.extend_from_slice(b"]}\n");
        l
    }

    /// A whole read holds no line past [`MAX_METRICS_LINE`]: a valid
    /// record of 18 MiB is counted as unreadable, not parsed.
    #[test]
    fn whole_reads_skip_lines_past_the_cap() {
        let dir = std::env::temp_dir().join(format!("normlab-long-line-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut text = Vec::new();
        for s in 1..=3 {
            text.extend(record_line(s, 2));
        }
        text.extend(record_line(4, 9 << 20));
        fs::write(dir.join("metrics.jsonl"), &text).unwrap();
        let (recs, unreadable) = read_metrics_counted(&dir);
        assert_eq!((recs.len(), unreadable), (3, 1));
        let _ = fs::remove_dir_all(&dir);
    }

    /// 20 records of 4 MiB each (80 MiB, past the 32 MiB a read keeps):
    /// a whole read and a sampled one keep at most 32 MiB of lines, the
    /// last record among them, and say how many they left out.
    #[test]
    fn reads_keep_within_the_byte_budget() {
        let dir = std::env::temp_dir().join(format!("normlab-budget-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut text = Vec::new();
        let line = record_line(1, 2 << 20).len();
        for s in 1..=20 {
            text.extend(record_line(s, 2 << 20));
        }
        fs::write(dir.join("metrics.jsonl"), &text).unwrap();
        let budget = MAX_METRICS_BYTES;
        let r = read_metrics_bounded(&dir);
        assert_eq!((r.unreadable, r.left_out), (0, 20 - r.records.len()));
        let recs = r.records;
        assert!(recs.len() * line <= budget, "{} records kept", recs.len());
        assert!(recs.len() >= 4, "{} records kept", recs.len());
        assert_eq!(recs.last().map(|r| r.step), Some(20));
        let (recs, total) = read_metrics_sampled(&dir, 100);
        assert_eq!(total, 20);
        assert!(
            recs.len() * line <= budget,
            "{} records sampled",
            recs.len()
        );
        assert_eq!(recs.last().map(|r| r.step), Some(20));
        let _ = fs::remove_dir_all(&dir);
    }

    /// A metrics.jsonl that is a FIFO (no writer) or a link to /dev/zero
    /// reads as missing, at once: it was waited on, or read forever.
    #[test]
    fn only_regular_metrics_files_are_read() {
        let dir = std::env::temp_dir().join(format!("normlab-fifo-metrics-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("metrics.jsonl");
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        let fifo = unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0;
        for kind in ["fifo", "/dev/zero"] {
            if kind == "fifo" && !fifo {
                continue;
            }
            if kind == "/dev/zero" {
                let _ = fs::remove_file(&path);
                std::os::unix::fs::symlink(kind, &path).unwrap();
            }
            let d = dir.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let r = read_metrics_bounded(&d);
                let s = read_metrics_sampled(&d, 10);
                let _ = tx.send((r.records.len(), r.unreadable, s.1));
            });
            // hang bound: 20 s (idle: 0.01 s)
            let got = rx.recv_timeout(std::time::Duration::from_secs(20));
            assert_eq!(got, Ok((0, 0, 0)), "{kind}");
        }
        let _ = fs::remove_dir_all(&dir);
    }
}
