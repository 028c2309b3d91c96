//! The documents a newcomer reads: no prose paragraph over 120 words in
//! README.md and docs/ (tables and code excepted; a list item is its own
//! paragraph), docs/README.md links every page, and the measured times of
//! docs/times.md are the ones README.md and `normlab demo --help` quote.

mod common;

use common::stdout_ok;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The pages docs/README.md indexes: README.md, docs/*.md and
/// docs/commands/*.md.
fn pages() -> Vec<PathBuf> {
    let mut v = vec![root().join("README.md")];
    for dir in ["docs", "docs/commands"] {
        let mut here: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        here.sort();
        v.extend(here);
    }
    v
}

/// Every page [`pages`] lists and the published chapters' reports.
fn all_pages() -> Vec<PathBuf> {
    let mut v = pages();
    let mut reports: Vec<PathBuf> = std::fs::read_dir(root().join("docs/findings"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("report.md"))
        .filter(|p| p.exists())
        .collect();
    reports.sort();
    assert!(reports.len() >= 20, "{reports:?}");
    v.extend(reports);
    v
}

/// The prose paragraphs of a markdown text: blank lines, headings, tables,
/// HTML comments and code fences end one; a list item starts one.
fn paragraphs(text: &str) -> Vec<String> {
    let (mut out, mut cur, mut code) = (Vec::new(), Vec::<&str>::new(), false);
    let mut flush = |cur: &mut Vec<&str>| {
        if !cur.is_empty() {
            out.push(cur.join(" "));
            cur.clear();
        }
    };
    for line in text.lines() {
        let s = line.trim();
        if s.starts_with("```") {
            code = !code;
            flush(&mut cur);
            continue;
        }
        if code {
            continue;
        }
        if s.is_empty() || s.starts_with('|') || s.starts_with('#') || s.starts_with("<!--") {
            flush(&mut cur);
            continue;
        }
        let item = s.starts_with("- ")
            || s.starts_with("* ")
            || s.split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if item {
            flush(&mut cur);
        }
        cur.push(s);
    }
    flush(&mut cur);
    out
}

#[test]
fn the_paragraph_counter_sees_what_a_reader_sees() {
    let long = vec!["word"; 130].join(" ");
    let text = format!("# t\n\n{long}\n\n| {long} |\n\n```\n{long}\n```\n\n- a\n- b c\n");
    let p = paragraphs(&text);
    assert_eq!(p.len(), 3, "{p:?}");
    assert_eq!(p[0].split_whitespace().count(), 130);
    assert_eq!(p[2], "- b c");
}

#[test]
fn no_prose_paragraph_is_over_120_words() {
    let mut long = Vec::new();
    for page in all_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for p in paragraphs(&text) {
            let n = p.split_whitespace().count();
            if n > 120 {
                long.push(format!(
                    "{} ({n} words): {}...",
                    page.strip_prefix(root()).unwrap_or(&page).display(),
                    p.chars().take(80).collect::<String>()
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "paragraphs over 120 words:\n{}",
        long.join("\n")
    );
}

#[test]
fn docs_readme_indexes_every_page() {
    let index = std::fs::read_to_string(root().join("docs/README.md")).unwrap();
    for page in pages() {
        let rel = page.strip_prefix(root().join("docs")).ok();
        let Some(rel) = rel else { continue }; // README.md itself
        let rel = rel.to_string_lossy().to_string();
        if rel == "README.md" {
            continue;
        }
        assert!(
            index.contains(&format!("]({rel})")),
            "docs/README.md does not link {rel}"
        );
    }
}

/// The rows of docs/times.md's table: (step, quoted as).
fn quoted_times() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("docs/times.md")).unwrap();
    let mut rows = Vec::new();
    let mut header: Option<Vec<String>> = None;
    for line in text.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<String> = line
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect();
        match &header {
            None => header = Some(cells),
            Some(h) => {
                if cells
                    .iter()
                    .all(|c| c.chars().all(|x| x == '-' || x == ':'))
                {
                    continue;
                }
                let col = |name: &str| h.iter().position(|x| x == name).expect(name);
                rows.push((cells[col("step")].clone(), cells[col("quoted as")].clone()));
            }
        }
    }
    rows
}

#[test]
fn readme_and_demo_help_quote_the_measured_times() {
    let rows = quoted_times();
    let get = |step: &str| -> String {
        rows.iter()
            .find(|(s, _)| s == step)
            .unwrap_or_else(|| panic!("docs/times.md has no row '{step}': {rows:?}"))
            .1
            .clone()
    };
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for step in ["first build", "demo", "quick demo", "every test"] {
        let q = get(step);
        assert!(!q.is_empty(), "{step}: nothing to quote");
        assert!(
            readme.contains(&q),
            "README.md does not quote '{q}' ({step})"
        );
    }
    let help = stdout_ok(&["demo", "--help"])
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for step in ["demo", "quick demo"] {
        let q = get(step);
        assert!(
            help.contains(&q),
            "`normlab demo --help` does not quote '{q}' ({step}):\n{help}"
        );
    }
}
