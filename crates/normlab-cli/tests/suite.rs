//! The test suite's own rules (issue 75): no test asserts how fast
//! something ran, and `scripts/test.sh`'s summary names every failure and
//! everything that did not run.
//!
//! A test may bound a wait only to catch a hang, at ten times or more what
//! it takes on an idle machine, and says so next to the bound:
//! `hang bound: B s (idle: I s)` (checked: B >= 10 I), or `time budget:`
//! for a loop that runs for a set time and asserts nothing about it, or
//! `not timed:` where a timing word appears without a bound (a JSON key, a
//! constant handed on).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The words that time something, and the sleeps that do not.
fn timing(line: &str) -> bool {
    const WORDS: [&str; 15] = [
        "steps_per_sec",
        "wall_seconds",
        "tokens_per_sec",
        "elapsed()",
        "recv_timeout(",
        "Instant::now() +",
        "from_secs",
        "from_millis",
        "set_read_timeout",
        "set_write_timeout",
        "timeout=",
        "time.time()",
        "time.monotonic()",
        "perf_counter()",
        "Command::new(\"timeout\")",
    ];
    WORDS.iter().any(|w| line.contains(w)) && !line.contains("sleep(")
}

/// The test code of a file: all of a tests/ file, or a src file from its
/// `#[cfg(test)]` on.
fn test_lines(path: &Path, text: &str) -> Vec<(usize, String)> {
    let lines: Vec<(usize, String)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.to_string()))
        .collect();
    let in_tests = path.components().any(|c| c.as_os_str() == "tests");
    if in_tests {
        return lines;
    }
    match lines.iter().position(|(_, l)| l.trim() == "#[cfg(test)]") {
        Some(i) => lines[i..].to_vec(),
        None => Vec::new(),
    }
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            if !p.ends_with("fixtures") && !p.ends_with("target") {
                files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs" || x == "py") {
            out.push(p);
        }
    }
}

/// A marker's verdict: Ok when the line above it says why it times.
fn marked(window: &[(usize, String)]) -> Result<(), String> {
    for (_, l) in window.iter().rev() {
        if l.contains("time budget:") || l.contains("not timed:") {
            return Ok(());
        }
        if let Some(rest) = l.split("hang bound: ").nth(1) {
            let num = |s: &str| -> Option<f64> {
                s.trim_start()
                    .split(|c: char| !(c.is_ascii_digit() || c == '.'))
                    .next()?
                    .parse()
                    .ok()
            };
            let bound = num(rest).ok_or("a hang bound without its seconds")?;
            let idle = rest
                .split("(idle: ")
                .nth(1)
                .and_then(num)
                .ok_or("a hang bound without '(idle: I s)'")?;
            return if bound >= 10.0 * idle {
                Ok(())
            } else {
                Err(format!(
                    "a hang bound of {bound} s is under ten times the {idle} s it takes idle"
                ))
            };
        }
    }
    Err("a timing without 'hang bound: B s (idle: I s)', 'time budget:' or 'not timed:' in the 8 lines above".into())
}

#[test]
fn no_test_asserts_how_fast_something_ran() {
    let root = root();
    let mut all = Vec::new();
    for d in ["crates", "python/tests", "python/src"] {
        files(&root.join(d), &mut all);
    }
    assert!(all.len() > 100, "found only {} files", all.len());
    let mut bad = Vec::new();
    let mut seen = 0;
    // (This file names the timing words to look for.)
    all.retain(|p| !p.ends_with("tests/suite.rs"));
    for p in &all {
        let text = std::fs::read_to_string(p).unwrap();
        let lines = test_lines(p, &text);
        for (k, (n, l)) in lines.iter().enumerate() {
            let code = l.split("//").next().unwrap_or("");
            let code = if p.extension().is_some_and(|x| x == "py") {
                l.split('#').next().unwrap_or("")
            } else {
                code
            };
            if !timing(code) {
                continue;
            }
            seen += 1;
            if let Err(e) = marked(&lines[k.saturating_sub(8)..=k]) {
                bad.push(format!(
                    "{}:{n}: {e}: {}",
                    p.strip_prefix(&root).unwrap_or(p).display(),
                    l.trim()
                ));
            }
        }
    }
    assert!(
        seen > 10,
        "the lint saw only {seen} timings: is it looking?"
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_lint_catches_a_speed_assertion_and_a_tight_bound() {
    let speed = [(1, "let secs = steps / run[\"steps_per_sec\"];".to_string())];
    // The bounded wait the lint reads, assembled here so that this file
    // holds no such line of its own.
    let wait = format!("assert!(t.{}() < Duration::from_secs(60));", "elapsed");
    assert!(timing(&speed[0].1) && marked(&speed).is_err());
    let tight = [
        (1, "// hang bound: 60 s (idle: 30 s)".to_string()),
        (2, wait.clone()),
    ];
    assert!(marked(&tight).unwrap_err().contains("ten times"));
    let fine = [
        (1, "// hang bound: 60 s (idle: 0.5 s)".to_string()),
        (2, wait.clone()),
    ];
    assert!(marked(&fine).is_ok());
    assert!(!timing("std::thread::sleep(Duration::from_millis(50));"));
}

/// A workspace of three test binaries: `a` with a failing test, `b` that
/// passes, `c` that aborts in its second of three tests.
fn failing_workspace(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"suite_probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    std::fs::write(
        dir.join("tests/a.rs"),
        "#[test]\nfn fine_in_a() {}\n#[test]\nfn broken_in_a() { assert_eq!(1, 2); }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("tests/b.rs"),
        "#[test]\nfn fine_in_b() {}\n#[test]\nfn also_fine_in_b() {}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("tests/c.rs"),
        "#[test]\nfn c1_fine() {}\n#[test]\nfn c2_aborts() { std::process::abort() }\n#[test]\nfn c3_never_runs() {}\n",
    )
    .unwrap();
}

#[test]
fn the_summary_names_each_failure_and_what_did_not_run() {
    let dir = std::env::temp_dir().join(format!("normlab-suite-{}", std::process::id()));
    failing_workspace(&dir);
    // Run as scripts/test.sh runs the workspace: --no-fail-fast, the
    // output and errors in one stream.
    let log_path = dir.join("cargo.log");
    let run_cargo = |args: &str| {
        Command::new("bash")
            .arg("-c")
            .arg(format!(
                "\"$0\" test --offline --no-fail-fast {args} > cargo.log 2>&1"
            ))
            .arg(env!("CARGO"))
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", dir.join("target"))
            .status()
            .unwrap()
    };
    assert!(!run_cargo("-- --test-threads=1").success());
    let log = std::fs::read(&log_path).unwrap();
    let skip = dir.join("skip.log");
    std::fs::write(&skip, "the browser test: install chromium\n").unwrap();
    let s = Command::new("python3")
        .arg(root().join("scripts/test_summary.py"))
        .args(["--seconds", "7", "--cargo-rc", "101", "--cargo-log"])
        .arg(&log_path)
        .arg("--skip-log")
        .arg(&skip)
        .args(["--python-not-run", "the workspace did not build"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&s.stdout).to_string();
    let cargo = String::from_utf8_lossy(&log);
    assert_eq!(s.status.code(), Some(1), "{text}\n{cargo}");
    // Every binary ran, the one after the failure included (a, b, c, the
    // library's unit tests and its doc-tests).
    assert!(text.contains("5 test binaries"), "{text}\n{cargo}");
    assert!(cargo.contains("fine_in_b ... ok"), "{cargo}");
    assert!(
        text.contains("FAILED: broken_in_a") && text.contains("tests/a.rs"),
        "{text}"
    );
    assert!(
        text.contains("DID NOT FINISH: tests/c.rs")
            && text.contains("during c2_aborts; 1 of its 3 tests never ran"),
        "{text}\n{cargo}"
    );
    assert!(
        text.contains("Python: not run: the workspace did not build"),
        "{text}"
    );
    assert!(text.contains("install chromium"), "{text}");
    // 1 + 2 + 1 passed, 1 failed; c2's abort leaves no result line.
    assert!(
        text.contains("5 tests ran, 4 passed, 1 failed"),
        "{text}\n{cargo}"
    );
    // A build that fails runs nothing, and the summary says so.
    std::fs::write(dir.join("src/lib.rs"), "fn broken( {").unwrap();
    assert!(!run_cargo("").success());

    let s = Command::new("python3")
        .arg(root().join("scripts/test_summary.py"))
        .args(["--cargo-rc", "101", "--cargo-log"])
        .arg(&log_path)
        .args(["--python-log", "/dev/null", "--python-rc", "0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&s.stdout).to_string();
    assert_eq!(s.status.code(), Some(1), "{text}");
    assert!(text.contains("no test ran: cargo test stopped"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
