//! C26 against a recipe that is not normlab's: `backcopy_defaults.py`
//! (beside this file) trains Bigram-Backcopy without and with the
//! elementwise output gate the way a PyTorch user would write it from the
//! papers (PyTorch's default init, AdamW's defaults with weight decay 0.01,
//! no biases, a character vocabulary; its docstring lists every choice).
//! The cross-check's full book runs it on the attention-sink chapter's
//! setting and asks one question of it: does the gate lower the
//! first-token share there too, as it does in normlab's runs?

use super::cross_rules::range;
use crate::present::{f, Table};
use normlab::error::{Error, Result};
use normlab::train::TrainConfig;
use serde_json::{json, Value};

/// The independent script, run by the Python that runs `cross_check.py`.
const SCRIPT: &str = include_str!("backcopy_defaults.py");

/// Run the script on `base`'s setting (layers x heads, steps) over
/// `seeds` seeds: its (ungated, gated) shares, the largest (layer, head)'s
/// per seed.
fn shares(python: &str, base: &TrainConfig, seeds: u64) -> Result<(Vec<f64>, Vec<f64>, Value)> {
    let text = std::env::temp_dir().join(format!(
        "normlab-backcopy-defaults-{}.txt",
        std::process::id()
    ));
    normlab::io::atomic_write(&text, normlab::io::BUNDLED_TEXT)?;
    let setting = format!("{}x{}", base.model.layers, base.model.heads);
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .args(["--text", &text.display().to_string()])
        .args(["--seeds", &seeds.to_string()])
        .args(["--steps", &base.steps.to_string()])
        .args(["--settings", &setting])
        .output();
    let _ = std::fs::remove_file(&text);
    let out = out.map_err(|e| Error::Internal(format!("backcopy_defaults: {python}: {e}")))?;
    if !out.status.success() {
        return Err(Error::Internal(format!(
            "backcopy_defaults: {python} failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("no message")
        )));
    }
    let v: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::Internal(format!("backcopy_defaults: unreadable output: {e}")))?;
    let arm = |key: &str| -> Vec<f64> {
        v["settings"][&setting][key]
            .as_array()
            .map(|runs| {
                runs.iter()
                    .map(|r| r["share_top"].as_f64().unwrap_or(f64::NAN))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok((arm("ungated"), arm("gated"), v))
}

/// The gate's effect under PyTorch's defaults beside normlab's (`nl0`,
/// `nl1`: normlab's ungated and gated shares per seed): one table row and
/// one record. Agreement: the gate lowers the mean share in both or in
/// neither.
pub fn compare(
    base: &TrainConfig,
    seeds: u64,
    (nl0, nl1): (&[f64], &[f64]),
    table: &mut Table,
    records: &mut Vec<Value>,
) -> Result<()> {
    let python = std::env::var("NORMLAB_PYTHON").unwrap_or_else(|_| "python3".into());
    let (pd0, pd1, raw) = shares(&python, base, seeds)?;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let lowers = |a: &[f64], b: &[f64]| !a.is_empty() && !b.is_empty() && mean(b) < mean(a);
    let agrees = lowers(nl0, nl1) == lowers(&pd0, &pd1);
    let show = |a: &[f64], b: &[f64]| format!("{} -> {}", f(mean(a), 3), f(mean(b), 3));
    let stat = format!(
        "Bigram-Backcopy, {} layer(s), {} head(s), {} steps, written with PyTorch's defaults (backcopy_defaults.py: default init, AdamW wd 0.01, no biases): mean largest first-token share, ungated -> gated",
        base.model.layers, base.model.heads, base.steps
    );
    table.row(vec![
        "C26".into(),
        stat.clone(),
        nl0.len().min(nl1.len()).to_string(),
        show(nl0, nl1),
        show(&pd0, &pd1),
        "46.7% -> 4.8% (Qwen)".into(),
        if agrees { "agrees" } else { "disagrees" }.into(),
    ]);
    let side = |a: &[f64], b: &[f64]| {
        let (m0, lo0, hi0) = range(a);
        let (m1, lo1, hi1) = range(b);
        json!({"ungated": {"median": m0, "min": lo0, "max": hi0, "values": a},
               "gated": {"median": m1, "min": lo1, "max": hi1, "values": b}})
    };
    records.push(json!({"claim": "C26", "statistic": stat, "agrees": agrees,
        "rule": "the gate lowers the mean share under normlab's recipe and under PyTorch's defaults, or under neither",
        "normlab": side(nl0, nl1), "torch": side(&pd0, &pd1), "torch_defaults_run": raw}));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exp::args::ExpArgs;

    /// The attention-sink chapter's setting, cut to `steps`.
    fn base(steps: usize) -> TrainConfig {
        let a = ExpArgs {
            quick: true,
            ..ExpArgs::default()
        };
        let mut b = crate::exp::attention_sink::sink_config(&a, None, 0).unwrap();
        b.steps = steps;
        b
    }

    /// With a Python that has torch, the script runs on the chapter's
    /// setting and its shares come back per seed, each a share of attention
    /// (in [0, 1]); the row and the record name both sides. Without one it
    /// says so (an error under NORMLAB_REQUIRE_TORCH=1).
    #[test]
    fn the_defaults_recipe_runs_and_is_compared() {
        let python = std::env::var("NORMLAB_PYTHON").unwrap_or_else(|_| "python3".into());
        let has_torch = std::process::Command::new(&python)
            .args(["-c", "import torch"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !has_torch {
            assert!(
                std::env::var("NORMLAB_REQUIRE_TORCH").as_deref() != Ok("1"),
                "NORMLAB_REQUIRE_TORCH=1 but {python} has no torch"
            );
            eprintln!("skipped: {python} has no torch");
            return;
        }
        let b = base(12);
        let (u, g, raw) = shares(&python, &b, 2).unwrap();
        assert_eq!((u.len(), g.len()), (2, 2), "{raw}");
        assert!(u.iter().chain(&g).all(|s| (0.0..=1.0).contains(s)), "{raw}");
        let mut table = Table::new("t", &["claim"; 7]);
        let mut records = Vec::new();
        compare(&b, 1, (&[0.5], &[0.1]), &mut table, &mut records).unwrap();
        assert_eq!(records.len(), 1);
        assert!(records[0]["statistic"]
            .as_str()
            .unwrap()
            .contains("PyTorch's defaults"));
        assert_eq!(
            records[0]["torch"]["gated"]["values"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    /// A script that fails is an error naming the Python, not an agreement.
    #[test]
    fn a_failing_python_is_an_error() {
        let e = shares("false", &base(2), 1).unwrap_err().to_string();
        assert!(e.contains("backcopy_defaults: false failed"), "{e}");
    }
}
