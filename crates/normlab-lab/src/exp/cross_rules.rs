//! The cross-check's agreement rules for training comparisons, stated once
//! and shared by `cross_train.rs` and `cross_routing.rs`: the same most
//! common run status, and mean final held-out losses within twice the
//! pooled seed standard deviation (at least 0.05 nats).

use super::residual_growth::spread;
use crate::present::{f, Table};
use crate::sweep::RunResult;
use normlab::error::{Error, Result};
use serde_json::{json, Value};

/// The most common of `statuses` (the first on ties).
pub(super) fn most_common<'a>(statuses: &[&'a str]) -> &'a str {
    let count = |s: &str| statuses.iter().filter(|&&x| x == s).count();
    statuses
        .iter()
        .copied()
        .max_by_key(|s| {
            (
                count(s),
                std::cmp::Reverse(statuses.iter().position(|x| x == s)),
            )
        })
        .unwrap_or("none")
}

/// Mean and (sample) standard deviation.
pub(super) fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n.max(1.0);
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (m, var.sqrt())
}

/// Median, min and max (NaN for none).
pub(super) fn range(v: &[f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        (f64::NAN, f64::NAN, f64::NAN)
    } else {
        spread(v)
    }
}

/// One training comparison: its table row and its record.
pub(super) fn compare_runs(
    claim: &str,
    stat: String,
    lesson: &str,
    nl: &[&RunResult],
    pt: &[Value],
    table: &mut Table,
) -> Value {
    let nl_status: Vec<&str> = nl.iter().map(|r| r.summary.status.name()).collect();
    let nl_loss: Vec<f64> = nl
        .iter()
        .filter_map(|r| r.summary.final_eval_loss)
        .collect();
    let pt_status: Vec<&str> = pt
        .iter()
        .map(|r| r["status"].as_str().unwrap_or("?"))
        .collect();
    let pt_loss: Vec<f64> = pt
        .iter()
        .filter_map(|r| r["final_eval_loss"].as_f64())
        .collect();
    let (status_n, status_p) = (most_common(&nl_status), most_common(&pt_status));
    let ((mn, sn), (mp, sp)) = (mean_std(&nl_loss), mean_std(&pt_loss));
    let tol = (2.0 * ((sn * sn + sp * sp) / 2.0).sqrt()).max(0.05);
    let losses_agree = match (nl_loss.is_empty(), pt_loss.is_empty()) {
        (true, true) => true,
        (false, false) => (mn - mp).abs() <= tol,
        _ => false,
    };
    let agrees = status_n == status_p && losses_agree;
    let side = |st: &str, v: &[f64], m: f64| {
        let (_, lo, hi) = range(v);
        if v.is_empty() {
            st.to_string()
        } else {
            format!("{st} {} [{}, {}]", f(m, 3), f(lo, 3), f(hi, 3))
        }
    };
    table.row(vec![
        claim.into(),
        stat.clone(),
        nl.len().to_string(),
        side(status_n, &nl_loss, mn),
        side(status_p, &pt_loss, mp),
        lesson.into(),
        format!(
            "{} (difference {}, bound {})",
            if agrees { "agrees" } else { "disagrees" },
            f((mn - mp).abs(), 3),
            f(tol, 3)
        ),
    ]);
    let summary = |st: &str, v: &[f64], m: f64, sd: f64, all: &[&str]| {
        let (med, lo, hi) = range(v);
        json!({"status": st, "statuses": all, "mean": m, "std": sd, "median": med, "min": lo, "max": hi, "values": v})
    };
    json!({"claim": claim, "statistic": stat, "agrees": agrees, "bound": tol,
        "normlab": summary(status_n, &nl_loss, mn, sn, &nl_status),
        "torch": summary(status_p, &pt_loss, mp, sp, &pt_status)})
}

/// PyTorch's runs of `key` (an error when it gave none).
pub(super) fn torch_runs(torch: &Value, claim: &str, key: &str) -> Result<Vec<Value>> {
    match torch[claim][key].as_array() {
        Some(v) if !v.is_empty() => Ok(v.clone()),
        _ => Err(Error::Internal(format!(
            "cross-check: PyTorch gave no {claim} runs for {key}"
        ))),
    }
}
