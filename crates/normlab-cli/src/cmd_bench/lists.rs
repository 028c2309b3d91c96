//! The benchmarks' list arguments: comma-separated values, and the thread
//! counts to measure.

use crate::ui::bad;

/// A comma-separated list, each item parsed by `f`; empty or unparsable
/// items are a one-line error naming `what`.
pub(super) fn parse_list<T>(
    what: &str,
    s: &str,
    f: impl Fn(&str) -> Option<T>,
) -> anyhow::Result<Vec<T>> {
    let mut out = Vec::new();
    for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match f(p) {
            Some(v) => out.push(v),
            None => return bad(format!("{what}: cannot parse '{p}'")),
        }
    }
    if out.is_empty() {
        return bad(format!("{what} is empty"));
    }
    Ok(out)
}

/// `--threads` as a list of counts; without it, 1 and all cores.
pub(super) fn thread_counts(arg: Option<&str>) -> anyhow::Result<Vec<usize>> {
    let all = crate::cmd_train::default_threads();
    match arg {
        Some(s) => {
            let v = parse_list("--threads", s, |p| p.parse::<usize>().ok())?;
            for &t in &v {
                normlab::limits::check_threads("--threads", t)?;
            }
            Ok(v)
        }
        None if all > 1 => Ok(vec![1, all]),
        None => Ok(vec![1]),
    }
}
