//! Up-front bounds on what one command may ask of the machine: memory
//! (estimated from the sizes asked for, against what the OS says is
//! available), thread counts and the other counts a command takes (rounds,
//! calibration steps), one cap each for the CLI, the web lab and Python. A request beyond them is refused with one
//! line that names the sizes, before anything is allocated or started.

use crate::error::{Error, Result};

/// Threads per core a run or a sweep worker pool may start: more only
/// slow a run down (70x at 1000 threads on 2 cores), and each thread costs
/// memory.
pub const THREADS_PER_CORE: usize = 4;

/// Most threads a run, a sweep worker pool or a Python call may start:
/// [`THREADS_PER_CORE`] times this machine's cores (the CLI and Python
/// share this one rule).
pub fn max_threads() -> usize {
    THREADS_PER_CORE * std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Most interleaved rounds a benchmark or a timed comparison may run.
pub const MAX_ROUNDS: usize = 1000;

/// Most calibration (distillation) steps a checkpoint conversion may run.
pub const MAX_CALIBRATION_STEPS: usize = 1_000_000;

/// Refuse `n` outside `lo..=hi` for the option `what`, naming both.
pub fn check_count(what: &str, n: usize, lo: usize, hi: usize) -> Result<()> {
    if n < lo || n > hi {
        return Err(Error::bad(format!(
            "{what} must be in {lo}..={hi} (got {n})"
        )));
    }
    Ok(())
}

/// Memory the OS reports as available (`MemAvailable` of /proc/meminfo),
/// if it says.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Refuse `bytes` of memory for `what` when it exceeds what is available
/// (or 1 TiB when the OS does not say).
pub fn check_memory(bytes: f64, what: &str) -> Result<()> {
    let avail = available_memory().map_or(1u64 << 40, |a| a) as f64;
    if bytes > avail || !bytes.is_finite() {
        return Err(Error::bad(format!(
            "{what} needs about {} of memory, more than the {} available",
            human_bytes(bytes),
            human_bytes(avail)
        )));
    }
    Ok(())
}

/// Refuse a thread count outside 1..=[`max_threads`].
pub fn check_threads(flag: &str, n: usize) -> Result<()> {
    let max = max_threads();
    if n == 0 || n > max {
        return Err(Error::bad(format!(
            "{flag} must be between 1 and {max} ({THREADS_PER_CORE} per core of this machine's {}; got {n})",
            max / THREADS_PER_CORE
        )));
    }
    Ok(())
}

/// `12.3 GiB`, `456 MiB`.
pub fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v.is_finite() {
        format!("{v:.1} {}", UNITS[u])
    } else {
        "an unbounded amount".into()
    }
}

/// Bytes of `floats` f32 values.
pub fn f32_bytes(floats: f64) -> f64 {
    4.0 * floats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_sizes_are_refused_with_the_sizes() {
        let e = check_memory(1e18, "a batch of 1e9")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a batch of 1e9 needs about") && e.contains("PiB"),
            "{e}"
        );
        assert!(check_memory(1e6, "a little").is_ok());
        assert!(check_threads("--threads", 0).is_err());
        assert!(check_threads("--threads", 100_000).is_err());
        assert!(check_threads("--threads", 2).is_ok());
    }
}
