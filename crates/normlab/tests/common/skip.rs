//! The one way a test skips a part this machine cannot run (a model not
//! fetched, no browser, no Slurm, no torch): under the part's
//! `NORMLAB_REQUIRE_*` switch (as CI sets them) it fails instead; else it
//! says so on stderr and appends the line to `$NORMLAB_SKIP_LOG`, from
//! which `scripts/test.sh` prints what was skipped and how to get it.
//! (Also used by the binary's tests, through a `#[path]` module.)

/// Skip `part` because `missing`; `how` says what gets it. Panics when the
/// environment variable `switch` is set.
pub fn skip(switch: &str, part: &str, missing: &str, how: &str) {
    if std::env::var_os(switch).is_some() {
        panic!("{part}: {missing}, but {switch} is set ({how})");
    }
    let line = format!("{part}: {missing}; {how}");
    eprintln!("skipped: {line}");
    if let Some(log) = std::env::var_os("NORMLAB_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            // One write (O_APPEND): lines of tests running at once do not
            // interleave.
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}
