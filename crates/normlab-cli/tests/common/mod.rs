//! Helpers shared by the binary's experiment tests (each file uses a part):
//! running normlab (and reading its stdout or JSON), temporary folders, and
//! the checks of an experiment's output folder.
#![allow(dead_code)]

pub mod lab;
#[path = "../../../normlab/tests/common/skip.rs"]
pub mod skip;
pub mod slurm;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

/// Run normlab; whatever the input, it must never panic.
pub fn normlab(args: &[&str]) -> Output {
    normlab_env(args, &[])
}

/// Run normlab with extra environment variables.
pub fn normlab_env(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run normlab");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    o
}

pub fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("normlab-exp-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

pub fn run_exp(id: &str, extra: &[&str], dir: &Path) -> Value {
    let out = dir.join(id);
    let mut args = vec!["exp", id, "--quick", "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = normlab(&args);
    assert!(
        o.status.success(),
        "exp {id}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("Conclusion:"), "{id}: {text}");
    check_files(id, &out)
}

/// An experiment's folder: result.json, report.md and its figures (PNG with
/// an SVG twin, embedded in the report); returns result.json. A result that
/// says it could not measure here (`unavailable`: a model file or torch is
/// absent) must say why in its report and may have no figure; that skips
/// with the result's one-line reason, unless the matching
/// `NORMLAB_REQUIRE_*` switch is set (as CI sets them).
pub fn check_files(id: &str, out: &Path) -> Value {
    for f in ["result.json", "report.md"] {
        assert!(out.join(f).exists(), "{id}: {f} missing");
    }
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    if let Some(u) = result.get("unavailable") {
        let (needs, why) = (u["needs"].as_str().unwrap(), u["why"].as_str().unwrap());
        let switch = format!("NORMLAB_REQUIRE_{}", needs.to_uppercase());
        assert!(
            std::env::var_os(&switch).is_none(),
            "{id}: {why}, but {switch} is set"
        );
        assert!(report.contains(why), "{id}: report.md does not say {why}");
        eprintln!("{id}: figures not checked: {why}");
        return result;
    }
    let pngs: Vec<_> = std::fs::read_dir(out)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".png"))
        .collect();
    assert!(!pngs.is_empty(), "{id}: no figure");
    for p in &pngs {
        assert!(
            out.join(p.replace(".png", ".svg")).exists(),
            "{id}: svg twin of {p} missing"
        );
        assert!(
            report.contains(p.as_str()),
            "{id}: report.md does not embed {p}"
        );
        assert!(
            std::fs::metadata(out.join(p)).unwrap().len() > 1000,
            "{id}: {p} is empty"
        );
    }
    result
}

/// Run normlab, which must succeed; its stdout.
pub fn stdout_ok(args: &[&str]) -> String {
    let out = normlab(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 on stdout")
}

/// Run normlab, which must succeed and print JSON; that JSON.
pub fn json(args: &[&str]) -> Value {
    serde_json::from_str(&stdout_ok(args)).expect("valid JSON on stdout")
}

pub fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}
