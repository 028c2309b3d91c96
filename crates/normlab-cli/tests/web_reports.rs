//! The dashboard's model reports (`normlab serve --report FILE`, issue 63):
//! a report of `normlab inspect --json`'s format is listed and drawn by
//! relative depth beside runs, every metric; a file that is not such a
//! report stops the lab at start with a one-line message naming it; bad
//! queries get a 4xx with a message.

use std::process::Command;

mod common;
use common::lab::{get, serve_with, train_with};

fn json_body(body: &str) -> serde_json::Value {
    let (a, b) = (body.find('{').unwrap(), body.rfind('}').unwrap());
    serde_json::from_str(&body[a..=b]).unwrap()
}

/// A report of `blocks` blocks in inspect's format (the fields the
/// dashboard reads; attention null, as diagnose writes for a model whose
/// attention it cannot see).
fn report(blocks: usize) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = (0..blocks)
        .map(|i| {
            serde_json::json!({
                "layer": i, "rms_out": 1.5f64.powi(i as i32), "attn_sink": null,
                "attn_max_logit": null, "attn_entropy": null, "ffn_max": 3.0 + i as f64,
                "max_over_median": 10.0 * (i + 1) as f64,
            })
        })
        .collect();
    serde_json::json!({"model": "tiny.gguf", "architecture": "llama", "blocks": rows})
}

#[test]
fn reports_show_beside_runs() {
    let dir = std::env::temp_dir().join(format!("normlab-web-reports-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    train_with(
        &dir.join("runs/deep"),
        &[
            "--model",
            "gpt",
            "--layers",
            "3",
            "--d-model",
            "32",
            "--heads",
            "2",
            "--seq",
            "16",
            "--hidden",
            "64",
            "--steps",
            "4",
            "--batch",
            "4",
            "--eval-sequences",
            "4",
        ],
    );
    let file = dir.join("mymodel.json");
    std::fs::write(&file, report(6).to_string()).unwrap();
    let s = serve_with(
        Some(&dir.join("runs")),
        &["--report", file.to_str().unwrap()],
    );
    let (code, body) = get(&s, "/api/reports");
    assert_eq!(code, 200, "{body}");
    let v = json_body(&body);
    assert_eq!(v["reports"][0]["name"], "mymodel");
    assert_eq!(v["reports"][0]["blocks"], 6);
    let metrics: Vec<String> = v["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect();
    assert!(metrics.contains(&"stream".to_string()) && metrics.len() == 6);
    for m in &metrics {
        let (code, svg) = get(
            &s,
            &format!("/api/report-plot?report=0&metric={m}&ids=deep"),
        );
        assert_eq!(code, 200, "{m}: {svg}");
        assert!(
            svg.contains("<svg") && svg.contains("mymodel") && svg.contains("deep"),
            "{m}"
        );
    }
    // The report alone.
    let (code, svg) = get(&s, "/api/report-plot?report=0&metric=stream");
    assert_eq!(code, 200);
    assert!(svg.contains("mymodel"));
    for (q, want) in [
        ("report=1", 404),
        ("report=x", 400),
        ("report=0&metric=loss", 400),
        ("report=0&ids=nosuchrun", 404),
        ("report=0&colour=red", 400),
    ] {
        let (code, body) = get(&s, &format!("/api/report-plot?{q}"));
        assert_eq!(code, want, "{q}: {body}");
        assert!(json_body(&body)["error"].is_string(), "{q}");
    }
    // The page lists them.
    let (_, page) = get(&s, "/");
    assert!(page.contains("report-compare"));
    drop(s);
    // Files that are not reports stop the lab at start, naming the file.
    let bad = |name: &str, text: &str| -> String {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
            .args(["serve", "--addr", "127.0.0.1:0", "--report"])
            .arg(&p)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{name} was accepted");
        let e = String::from_utf8_lossy(&o.stderr).trim().to_string();
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains(name), "{e}");
        e
    };
    assert!(bad("notjson.json", "{blocks").contains("not JSON"));
    assert!(bad("run.json", r#"{"steps": 3}"#).contains("not an inspect report"));
    let mut r = report(2);
    r["blocks"][1]["rms_out"] = serde_json::json!("big");
    assert!(bad("text.json", &r.to_string()).contains("rms_out"));
    // A FIFO (which would keep the lab from ever listening) and a link to
    // /dev/zero (read until memory runs out) are refused at start, exit 2.
    let fifo = dir.join("fifo.json");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let zero = dir.join("zero.json");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    for p in [&fifo, &zero] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_normlab"))
            .args(["serve", "--addr", "127.0.0.1:0", "--report"])
            .arg(p)
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t0 = std::time::Instant::now();
        // hang bound: 60 s (idle: 0.05 s)
        while child.try_wait().unwrap().is_none() {
            if t0.elapsed().as_secs() > 60 {
                let _ = child.kill();
                panic!("serve --report {} did not stop", p.display());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let o = child.wait_with_output().unwrap();
        let e = String::from_utf8_lossy(&o.stderr).trim().to_string();
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains("not a regular file"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
