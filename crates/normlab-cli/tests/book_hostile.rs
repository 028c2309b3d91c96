//! The cluster book and the static site against edited plans, garbage
//! environment variables and bad paths (issue 61, items 10 and 11): each is
//! refused with one line and exit code 2 before anything is written or
//! trained, and a failed site rebuild leaves the earlier site as it was.

mod common;
use common::normlab;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "normlab-book-hostile-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Exit code 2 and one line on stderr containing every one of `want`.
fn refused(o: &std::process::Output, want: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    for w in want {
        assert!(err.contains(w), "'{w}' not in: {err}");
    }
}

/// `book --quick --only depth-sim --out OUT --emit-slurm`: the scripts of
/// a one-chapter book (depth-sim: no training).
fn emit(out: &Path) -> std::process::Output {
    normlab(&[
        "book",
        "--quick",
        "--only",
        "depth-sim",
        "--out",
        out.to_str().unwrap(),
        "--emit-slurm",
    ])
}

/// A quick book plan of one chapter in `out` ([`emit`]).
fn plan(out: &Path) -> serde_json::Value {
    let o = emit(out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&std::fs::read_to_string(out.join("book-plan.json")).unwrap()).unwrap()
}

#[test]
fn an_edited_plan_is_refused_before_anything_runs() {
    let dir = tmp("plan");
    let good = plan(&dir);
    for (what, edit) in [
        ("no tasks", serde_json::json!({"tasks": []})),
        (
            "not an experiment",
            serde_json::json!({"only": ["../../x"]}),
        ),
        (
            "not an experiment",
            serde_json::json!({"tasks": [[{"chapter": "nope", "run": null, "cost": 1.0}]]}),
        ),
        (
            "not a plain name",
            serde_json::json!({"tasks": [[{"chapter": "collapse", "run": "../../etc", "cost": 1.0}]]}),
        ),
        (
            "planned twice",
            serde_json::json!({"tasks": [[{"chapter": "depth-sim", "run": null, "cost": 1.0}, {"chapter": "depth-sim", "run": null, "cost": 1.0}]]}),
        ),
    ] {
        let mut p = good.clone();
        for (k, v) in edit.as_object().unwrap() {
            p[k] = v.clone();
        }
        std::fs::write(dir.join("book-plan.json"), p.to_string()).unwrap();
        let o = normlab(&["book", "--out", dir.to_str().unwrap(), "--assemble"]);
        refused(&o, &[what]);
        let o = normlab(&["book", "--out", dir.to_str().unwrap(), "--task", "0"]);
        refused(&o, &[what]);
        // Nothing trained or written for the book.
        assert!(!dir.join("findings.md").exists());
        assert!(!dir.join("depth-sim").exists());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn garbage_in_the_schedulers_variables_is_refused() {
    let dir = tmp("env");
    plan(&dir);
    let run = |vars: &[(&str, &str)]| {
        Command::new(env!("CARGO_BIN_EXE_normlab"))
            .args(["book", "--out", dir.to_str().unwrap(), "--task"])
            .envs(vars.iter().copied())
            .output()
            .unwrap()
    };
    refused(
        &run(&[
            ("SLURM_ARRAY_TASK_ID", "1"),
            ("SLURM_ARRAY_TASK_MIN", "garbage"),
        ]),
        &["SLURM_ARRAY_TASK_MIN", "garbage"],
    );
    refused(
        &run(&[("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_MIN", "3")]),
        &["below"],
    );
    assert!(!dir.join("depth-sim").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_path_the_scripts_cannot_hold_is_refused_before_writing() {
    let dir = tmp("quote");
    let out = dir.join("say \"hi\"");
    let o = emit(&out);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !out.exists(),
        "the folder was created before the path was checked"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_site_rebuild_leaves_the_earlier_site() {
    let dir = tmp("site");
    // Stand-in WebAssembly files (the site copies them as they are).
    let wasm = dir.join("wasm");
    std::fs::create_dir_all(&wasm).unwrap();
    std::fs::write(wasm.join("normlab_wasm.js"), "// js").unwrap();
    std::fs::write(wasm.join("normlab_wasm_bg.wasm"), b"\0asm").unwrap();
    // A book of one published chapter.
    let book = dir.join("book");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/findings/collapse");
    std::fs::create_dir_all(book.join("collapse")).unwrap();
    let mut svg = None;
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, book.join("collapse").join(p.file_name().unwrap())).unwrap();
            if p.extension().is_some_and(|x| x == "svg") {
                svg = Some(p.file_name().unwrap().to_owned());
            }
        }
    }
    let site = dir.join("site");
    let build = || {
        normlab(&[
            "site",
            "--out",
            site.to_str().unwrap(),
            "--book",
            book.to_str().unwrap(),
            "--wasm",
            wasm.to_str().unwrap(),
        ])
    };
    let o = build();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let before = std::fs::read(site.join("api/book.json")).unwrap();
    let page = std::fs::read(site.join("index.html")).unwrap();
    // Now a figure becomes a link to a file outside the book, and the
    // chapter's result changes: the rebuild fails as bad input.
    let fig = book.join("collapse").join(svg.unwrap());
    std::fs::remove_file(&fig).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &fig).unwrap();
    let o = build();
    refused(&o, &["symbolic link"]);
    assert_eq!(std::fs::read(site.join("api/book.json")).unwrap(), before);
    assert_eq!(std::fs::read(site.join("index.html")).unwrap(), page);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("normlab-site"))
        .collect();
    assert!(leftovers.is_empty(), "a temporary folder was left behind");
    let _ = std::fs::remove_dir_all(&dir);
}
