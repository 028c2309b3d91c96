//! `metrics.jsonl`, one `StepRecord` per line: read whole, sampled as a
//! stream, or from its end; and, on resume, kept up to the snapshot's step
//! and rewritten. Lines are read as bytes, one at a time, so a line that is
//! not UTF-8 (a torn or foreign write) loses only itself; what a resume
//! cannot keep is reported and the file as it was is kept beside it.

use crate::error::Result;
use crate::io::atomic_write;
use crate::train::record::StepRecord;
use std::fs;
use std::path::Path;

/// Read `metrics.jsonl` (lines that do not parse are skipped, one at a
/// time: a line that is not UTF-8 loses only itself).
pub fn read_metrics(dir: &Path) -> Vec<StepRecord> {
    read_metrics_counted(dir).0
}

/// [`read_metrics`], with how many non-blank lines are not step records
/// (a damaged file's count, from the same read).
pub fn read_metrics_counted(dir: &Path) -> (Vec<StepRecord>, usize) {
    let bytes = fs::read(dir.join("metrics.jsonl")).unwrap_or_default();
    let mut unreadable = 0;
    let records = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
        .filter_map(|l| {
            let r = serde_json::from_slice(l).ok();
            unreadable += usize::from(r.is_none());
            r
        })
        .collect();
    (records, unreadable)
}

/// Longest metrics line read (a record of a 10,000-block run is about
/// 1 MiB); a longer line is counted and skipped, never held whole.
pub const MAX_METRICS_LINE: usize = 16 << 20;

/// Call `f` with each non-blank line of `path` (without its newline) that
/// is at most `cap` bytes; longer lines are passed as empty slices (so
/// that they count but parse as nothing). Reads through a fixed buffer:
/// memory does not grow with the file or with one line past `cap`.
pub fn for_each_line(path: &Path, cap: usize, mut f: impl FnMut(&[u8])) -> bool {
    use std::io::BufRead;
    let Ok(file) = fs::File::open(path) else {
        return false;
    };
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
/// evaluation). Returns them with the file's number of records.
pub fn read_metrics_sampled(dir: &Path, max: usize) -> (Vec<StepRecord>, usize) {
    let path = dir.join("metrics.jsonl");
    let max = max.max(1);
    // Lines as bytes: a line that is not UTF-8 (a torn or foreign write) is
    // counted and skipped, not the end of the history.
    let (mut total, mut evals) = (0usize, 0usize);
    if !for_each_line(&path, MAX_METRICS_LINE, |l| {
        total += 1;
        evals += usize::from(is_evaluation(l));
    }) {
        return (Vec::new(), 0);
    }
    let stride = total.div_ceil(max).max(1);
    let eval_stride = evals.div_ceil(max.div_ceil(2)).max(1);
    let mut out = Vec::new();
    let (mut i, mut e) = (0usize, 0usize);
    for_each_line(&path, MAX_METRICS_LINE, |line| {
        let eval = is_evaluation(line);
        let keep = i % stride == 0 || i + 1 == total || (eval && e % eval_stride == 0);
        if keep {
            if let Ok(r) = serde_json::from_slice(line) {
                out.push(r);
            }
        }
        i += 1;
        e += usize::from(eval);
    });
    (out, total)
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
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(_) if step == 0 => return (Vec::new(), None),
        Err(_) => {
            return (
                Vec::new(),
                Some(format!(
                    "metrics.jsonl is missing: the records of steps 1-{step} are lost (the run goes on from step {step})"
                )),
            )
        }
    };
    let (mut lines, mut unreadable, mut last) = (Vec::new(), 0usize, 0usize);
    for raw in bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
    {
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
    }
    let mut problems = Vec::new();
    if unreadable > 0 {
        let kept = dir.join("metrics.jsonl.damaged");
        let saved = atomic_write(&kept, &bytes).is_ok();
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
}
