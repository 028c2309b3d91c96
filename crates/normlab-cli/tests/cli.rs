//! End-to-end tests of the `normlab` binary: outputs, JSON keys, exit codes.

use std::process::{Command, Output};

fn normlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args(args)
        .output()
        .expect("run normlab")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = normlab(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON on stdout")
}

#[test]
fn calc_worked_example_and_invariances() {
    let v = json(&["calc", "--x", "1,2,3,6", "--json"]);
    let out: Vec<f64> = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    for (a, b) in out.iter().zip([-1.069, -0.535, 0.0, 1.604]) {
        assert!((a - b).abs() < 1e-3, "{out:?}");
    }
    for key in ["output", "mean", "std", "l2"] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    let v = json(&[
        "calc", "--x", "1,2,3,6", "--norm", "rmsnorm", "--shift", "2", "--json",
    ]);
    assert_eq!(v["unchanged"], serde_json::json!(false));
    assert!(v["transformed_output"].is_array());
    let v = json(&[
        "calc", "--x", "1,2,3,6", "--norm", "rmsnorm", "--scale", "3", "--json",
    ]);
    assert_eq!(v["unchanged"], serde_json::json!(true));
    let v = json(&[
        "calc",
        "--x",
        "1,2,3,6",
        "--norm",
        "layernorm",
        "--scale",
        "3",
        "--shift",
        "2",
        "--json",
    ]);
    assert_eq!(v["unchanged"], serde_json::json!(true));
    let text = String::from_utf8(
        normlab(&[
            "calc", "--x", "1,2,3,6", "--norm", "rmsnorm", "--shift", "2",
        ])
        .stdout,
    )
    .unwrap();
    assert!(text.contains("CHANGED by x + 2"), "{text}");
}

#[test]
fn bad_input_gives_one_line_and_exit_2() {
    for args in [
        vec!["calc", "--x", ""],
        vec!["calc", "--x", "1,nan"],
        vec!["calc", "--x", "1,2", "--norm", "foo"],
        vec!["calc", "--x", "1,2", "--eps", "-1"],
        vec!["calc", "--x", "1,x"],
        vec!["calc"],
        vec!["calc", "--x", "1,2", "--bogus"],
        vec!["bench", "norms", "--shapes", "0x4"],
        vec!["bench", "norms", "--kinds", "batchnorm"],
    ] {
        let out = normlab(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn bench_norms_json_records() {
    let v = json(&[
        "bench",
        "norms",
        "--shapes",
        "64x48,40x16",
        "--threads",
        "1,2",
        "--seconds",
        "0.01",
        "--json",
    ]);
    let recs = v.as_array().unwrap();
    assert_eq!(recs.len(), 2 * 2 * 3 * 2);
    for r in recs {
        for key in [
            "kind",
            "pass",
            "rows",
            "d",
            "threads",
            "median_us",
            "gbps",
            "roofline_gbps",
        ] {
            assert!(r.get(key).is_some(), "missing {key} in {r}");
        }
        assert!(
            r["median_us"].as_f64().unwrap() > 0.0 && r["roofline_gbps"].as_f64().unwrap() > 0.0
        );
    }
}
