//! findings.md and findings.json: read every experiment result a book
//! folder holds (`<id>/result.json`), then write the claims table (one
//! verdict per claim, each chapter's beside it), a section per claim with
//! each chapter's setting, figures, verdict and, where the cross-check
//! chapter ran, its agreement, and the table of departures from the
//! lesson.

use crate::exp::claims::{decision_rule, Coverage, Verdict, CLAIMS};
use crate::exp::provenance::{machine, today};
use crate::exp::registry::EXPERIMENTS;
use crate::present::prose::readable;
use normlab::error::Result;
use serde::Serialize;
use serde_json::json;
use std::path::Path;

/// One verdict, as findings.json lists them.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// Claim id.
    pub claim: &'static str,
    /// The experiment that checked it.
    pub experiment: String,
    /// Its verdict.
    pub verdict: Verdict,
    /// The numbers.
    pub evidence: String,
}

/// An experiment's result as the book folder holds it (`<id>/result.json`):
/// what findings.md is written from, so that a book run with `--only`
/// refreshes its sections and keeps the others.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// Experiment id.
    pub id: String,
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Settings.
    pub settings: serde_json::Value,
    /// Figure file stems (`<stem>.png` beside result.json).
    pub figures: Vec<String>,
    /// Its verdicts.
    pub checks: Vec<Finding>,
    /// Wall time (s).
    pub seconds: f64,
    /// Where and when it ran ([`processor`], [`today`]); absent in results
    /// written before they were recorded.
    pub ran_on: Option<(String, String)>,
    /// The cross-check chapter's agreement records (null elsewhere).
    pub agreement: serde_json::Value,
    /// How many training runs the chapter analysed (None: it trains none).
    pub runs: Option<usize>,
}

/// The cross-check's records of one claim (statistic, agrees, and the two
/// sides' medians and ranges), if that chapter ran.
pub(super) fn cross_checked<'a>(
    recorded: impl IntoIterator<Item = &'a Recorded>,
    claim: &str,
) -> Vec<&'a serde_json::Value> {
    recorded
        .into_iter()
        .filter(|r| r.id == "cross-check")
        .flat_map(|r| r.agreement.as_array().into_iter().flatten())
        .filter(|a| a["claim"] == claim)
        .collect()
}

/// "agrees" when every cross-checked statistic of the claim agrees.
pub(super) fn agreement(records: &[&serde_json::Value]) -> &'static str {
    if records.iter().all(|a| a["agrees"] == true) {
        "agrees"
    } else {
        "disagrees"
    }
}

/// One record as a phrase: the statistic, normlab's and PyTorch's values.
pub(super) fn agreement_line(a: &serde_json::Value) -> String {
    // A number; an order of names (C27's designs); or a spread over seeds,
    // recorded as median, min and max or as the values themselves.
    let side = |v: &serde_json::Value| {
        if let Some(x) = v.as_f64() {
            return format!("{x:.3e}");
        }
        if let Some(o) = v["order"].as_str() {
            return o.to_string();
        }
        let (med, lo, hi) = match v["median"].as_f64() {
            Some(m) => (
                m,
                v["min"].as_f64().unwrap_or(f64::NAN),
                v["max"].as_f64().unwrap_or(f64::NAN),
            ),
            None => {
                let mut xs: Vec<f64> = v["values"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
                    .unwrap_or_default();
                xs.sort_by(f64::total_cmp);
                match xs.len() {
                    0 => (f64::NAN, f64::NAN, f64::NAN),
                    n => {
                        let m = if n % 2 == 1 {
                            xs[n / 2]
                        } else {
                            0.5 * (xs[n / 2 - 1] + xs[n / 2])
                        };
                        (m, xs[0], xs[n - 1])
                    }
                }
            }
        };
        format!("{med:.4} [{lo:.4}, {hi:.4}]")
    };
    format!(
        "{}: normlab {}, PyTorch {} ({})",
        a["statistic"].as_str().unwrap_or("?"),
        side(&a["normlab"]),
        side(&a["torch"]),
        if a["agrees"] == true {
            "agrees"
        } else {
            "disagrees"
        }
    )
}

/// The recorded results of the book folder at this setting, in registry
/// order (experiments never run, or run at the other setting, are absent).
pub fn recorded(out: &Path, quick: bool) -> Result<Vec<Recorded>> {
    Ok(recorded_all(out)?
        .into_iter()
        .filter(|(_, q)| *q == quick)
        .map(|(r, _)| r)
        .collect())
}

/// Every recorded result of the folder, in registry order, each with
/// whether it is a `--quick` one.
pub fn recorded_all(out: &Path) -> Result<Vec<(Recorded, bool)>> {
    let mut v = Vec::new();
    for e in EXPERIMENTS {
        v.extend(read_recorded(out, e.id)?);
    }
    Ok(v)
}

/// Largest result.json a book folder may hold (the published book's
/// largest is under 100 KiB): a larger one is refused, not read.
pub const MAX_RESULT_BYTES: u64 = 16 << 20;

/// The recorded result of experiment `id` in the folder (None: not there),
/// with whether it is a `--quick` one.
pub fn read_recorded(out: &Path, id: &str) -> Result<Option<(Recorded, bool)>> {
    let Some(e) = EXPERIMENTS.iter().find(|e| e.id == id) else {
        return Ok(None);
    };
    let path = out.join(e.id).join("result.json");
    if !path.exists() && path.symlink_metadata().is_err() {
        return Ok(None);
    }
    let bytes = normlab::io::read_capped(&path, MAX_RESULT_BYTES)?;
    let bad = |why: &str| {
        normlab::Error::BadInput(format!(
            "{}: {why}; run the book again with --only {}",
            path.display(),
            e.id
        ))
    };
    let j: serde_json::Value = serde_json::from_slice(&bytes).map_err(|x| bad(&x.to_string()))?;
    // A result without the field belongs to neither setting.
    let Some(quick) = j["quick"].as_bool() else {
        return Ok(None);
    };
    let mut checks = Vec::new();
    for c in j["claims"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let claim = c["claim"]
            .as_str()
            .and_then(crate::exp::claims::claim)
            .ok_or_else(|| bad("unknown claim"))?;
        let verdict = c["verdict"]
            .as_str()
            .and_then(Verdict::from_label)
            .ok_or_else(|| bad("unknown verdict"))?;
        checks.push(Finding {
            claim: claim.id,
            experiment: e.id.to_string(),
            verdict,
            evidence: c["evidence"].as_str().unwrap_or_default().to_string(),
        });
    }
    Ok(Some((
        Recorded {
            id: e.id.to_string(),
            seeds: serde_json::from_value(j["seeds"].clone()).unwrap_or_default(),
            settings: j["settings"].clone(),
            figures: serde_json::from_value(j["figures"].clone()).unwrap_or_default(),
            checks,
            seconds: j["elapsed_seconds"].as_f64().unwrap_or(0.0),
            agreement: j["agreement"].clone(),
            runs: j["runs"].as_array().map(Vec::len),
            ran_on: j["machine"]
                .as_str()
                .map(|m| (m.to_string(), j["date"].as_str().unwrap_or("?").to_string())),
        },
        quick,
    )))
}

/// The verdicts of recorded results, claim by claim.
pub fn findings(results: &[Recorded]) -> Vec<Finding> {
    let mut out = Vec::new();
    for c in CLAIMS {
        for r in results {
            out.extend(r.checks.iter().filter(|k| k.claim == c.id).cloned());
        }
    }
    out
}

/// A compact, readable form of an experiment's settings.
fn settings_line(r: &Recorded) -> String {
    let mut s = serde_json::to_string(&r.settings).unwrap_or_default();
    if s.len() > 600 {
        s.truncate(600);
        s.push_str(" ...");
    }
    s
}

/// Write `findings.md` and `findings.json` into the book's folder `out`,
/// from every experiment result it holds at this setting (`quick`); the
/// provenance section gives each chapter's date, machine and time, and the
/// book's wall time and sessions (`totals`) when known.
pub fn write(out: &Path, quick: bool, totals: Option<(f64, usize)>) -> Result<()> {
    let recorded = recorded(out, quick)?;
    let list = findings(&recorded);
    let mut md = String::new();
    md.push_str("# What normlab finds: the lesson's claims, checked\n\n");
    md.push_str(&summary(&recorded, &list));
    if quick {
        md.push_str("**These are the reduced `--quick` settings: too short to decide some claims; the full book is `normlab book`.**\n\n");
    }
    md.push_str("One verdict per claim: the chapter on the lesson's own setting (the first listed) decides. The other chapters are evidence beside it and can only qualify it (a chapter whose verdict differs is named after the verdict); an inconclusive chapter hands the decision to the next. Each chapter states its settings and seeds, and its full tables are in `<id>/report.md` beside this file. A difference is called only beyond the seed-to-seed (losses) or round-to-round (timings) spread.\n\n");
    md.push_str("\"cross-checked\": the cross-check chapter computed the claim's statistics again in an independent PyTorch implementation. They agree when, over seeds, PyTorch's median lies inside normlab's seed range and normlab's median inside PyTorch's. For an invariance, both must find the same outputs unchanged to 1e-4; for a training comparison, the same most common run status, and mean final held-out losses within twice the pooled seed standard deviation (at least 0.05 nats).\n\nC26 compares directions (both sides form a sink or neither does; the gate lowers the share on both or on neither), and C27 also the designs' order (no pair ordered the other way beyond its bound) and the stream growth (within a factor of 2); the cross-check's report states each rule.\n\n");
    md.push_str("| claim | | verdict | each chapter |\n|---|---|---|---|\n");
    let mut overall = Vec::new();
    for c in CLAIMS {
        let mine: Vec<&Finding> = list.iter().filter(|f| f.claim == c.id).collect();
        let checks: Vec<(&str, Verdict)> = mine
            .iter()
            .map(|f| (f.experiment.as_str(), f.verdict))
            .collect();
        let (verdict, by) = match c.overall(&checks) {
            None => {
                let why = match c.coverage {
                    Coverage::Uncheckable(why) => format!("not checked: {why}"),
                    Coverage::Experiments(ids) => {
                        format!("not run here ({})", ids.join(", "))
                    }
                };
                (why, "-".to_string())
            }
            Some(o) => {
                let xc = cross_checked(&recorded, c.id);
                let label = if xc.is_empty() {
                    format!("**{}**", o.label())
                } else {
                    format!("**{}** · cross-checked: {}", o.label(), agreement(&xc))
                };
                overall.push(json!({"claim": c.id, "overall": o}));
                (
                    label,
                    mine.iter()
                        .map(|f| {
                            format!(
                                "[{}]({}/report.md): {}",
                                f.experiment,
                                f.experiment,
                                f.verdict.label()
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                )
            }
        };
        md.push_str(&format!("| {} | {} | {verdict} | {by} |\n", c.id, c.title));
    }
    md.push('\n');
    md.push('\n');
    for c in CLAIMS {
        md.push_str(&format!("## {} — {}\n\n", c.id, c.title));
        md.push_str(&format!("**The lesson:** {}\n\n", c.statement));
        if let Some(rule) = decision_rule(c.id) {
            md.push_str("**Decision rule (fixed before the runs):**\n\n");
            for clause in rule {
                md.push_str(&format!("- {clause}\n"));
            }
            md.push('\n');
        }
        let checks: Vec<(&Recorded, &Finding)> = recorded
            .iter()
            .flat_map(|r| {
                r.checks
                    .iter()
                    .filter(|k| k.claim == c.id)
                    .map(move |k| (r, k))
            })
            .collect();
        if checks.is_empty() {
            match c.coverage {
                Coverage::Uncheckable(why) => {
                    md.push_str(&format!("**Not checked yet:** {why}.\n\n"))
                }
                Coverage::Experiments(ids) => md.push_str(&format!(
                    "**Not run in this book** (checked by: {}).\n\n",
                    ids.join(", ")
                )),
            }
            continue;
        }
        for (r, k) in checks {
            md.push_str(&format!(
                "**normlab's setting** ([{}]({}/report.md), seeds {:?}): `{}`\n\n",
                r.id,
                r.id,
                r.seeds,
                settings_line(r)
            ));
            for stem in &r.figures {
                md.push_str(&format!("![{stem}]({}/{stem}.png)\n\n", r.id));
            }
            let lead = format!("**Verdict: {}.**", k.verdict.label());
            md.push_str(&readable(&lead, &k.evidence));
            md.push_str("\n\n");
        }
        let xc = cross_checked(&recorded, c.id);
        if !xc.is_empty() {
            let lines: Vec<String> = xc.iter().map(|a| agreement_line(a)).collect();
            let lead = format!(
                "**Cross-checked against PyTorch ([cross-check](cross-check/report.md)): {}.**",
                agreement(&xc)
            );
            md.push_str(&readable(&lead, &format!("{}.", lines.join("; "))));
            md.push_str("\n\n");
        }
    }
    md.push_str(&provenance(&recorded, quick, totals));
    md.push_str("## Where normlab departs from the lesson\n\nEach chapter against the lesson's own setting (the claims above give it): what the lesson gives, what normlab runs, why, and whether the verdict could depend on it. A verdict is whatever normlab's setting gives; where the answer is \"yes\", read it as a verdict on normlab's setting.\n\n");
    md.push_str(&super::departures::markdown(|id| {
        recorded.iter().any(|r| r.id == id)
    }));
    normlab::io::atomic_write(&out.join("findings.md"), md.as_bytes())?;
    let j = json!({
        "quick": quick,
        "date": today(),
        "machine": machine(),
        "seconds": totals.map(|t| t.0),
        "sessions": totals.map(|t| t.1),
        "findings": list,
        "claims": overall,
        "experiments": recorded.iter().map(|r| json!({"id": r.id, "seconds": r.seconds, "seeds": r.seeds})).collect::<Vec<_>>(),
    });
    normlab::io::atomic_write(
        &out.join("findings.json"),
        serde_json::to_string_pretty(&j).expect("json").as_bytes(),
    )
}

/// The opening: what was found, counted over the claims (`list`: the
/// verdicts of `recorded`).
fn summary(recorded: &[Recorded], list: &[Finding]) -> String {
    let order = [
        Verdict::Holds,
        Verdict::Partly,
        Verdict::DoesNotHold,
        Verdict::Inconclusive,
    ];
    let mut counts = [0usize; 4];
    let mut crossed = 0;
    let mut not_run = 0;
    for c in CLAIMS {
        let checks: Vec<(&str, Verdict)> = list
            .iter()
            .filter(|f| f.claim == c.id)
            .map(|f| (f.experiment.as_str(), f.verdict))
            .collect();
        match c.overall(&checks) {
            Some(o) => {
                if let Some(i) = order.iter().position(|v| *v == o.verdict) {
                    counts[i] += 1;
                }
                if !cross_checked(recorded, c.id).is_empty() {
                    crossed += 1;
                }
            }
            None => not_run += 1,
        }
    }
    let counts: Vec<(&str, usize)> = order
        .iter()
        .zip(counts)
        .filter(|(_, n)| *n > 0)
        .map(|(v, n)| {
            let plural = match v {
                Verdict::Holds => "hold",
                Verdict::Partly => "hold partly",
                Verdict::DoesNotHold => "do not hold",
                Verdict::Inconclusive => "inconclusive",
            };
            (if n == 1 { v.label() } else { plural }, n)
        })
        .collect();
    let parts: Vec<String> = counts
        .iter()
        .map(|(l, n)| match *l {
            "inconclusive" => format!("{n} {} inconclusive", if *n == 1 { "is" } else { "are" }),
            _ => format!("{n} {l}"),
        })
        .collect();
    let mut s = format!(
        "Of the lesson's {} checkable claims, {}.",
        CLAIMS.len(),
        parts.join(", ")
    );
    if not_run > 0 {
        s.push_str(&format!(" {not_run} were not run in this book."));
    }
    if crossed > 0 {
        s.push_str(&format!(
            " {crossed} verdicts are cross-checked against an independent PyTorch implementation."
        ));
    }
    s.push_str(" Where and when each chapter ran is at the end.\n\n");
    s
}

/// Where and when each chapter ran: its date, machine, wall time and runs
/// (from its result.json), then the book's own total.
fn provenance(recorded: &[Recorded], quick: bool, totals: Option<(f64, usize)>) -> String {
    let mut s = String::from("## Where and when each chapter ran\n\n");
    s.push_str("Each chapter records the machine and date of its last session and that session's wall time (runs already finished in its folder are read, not trained again, so a resumed chapter's time is only its last part). Only timings depend on the machine: every SIMD level gives the same bits.\n\n");
    s.push_str("| chapter | date | machine | wall time of that session | training runs |\n|---|---|---|---:|---:|\n");
    for r in recorded {
        let (m, d) = r
            .ran_on
            .clone()
            .unwrap_or_else(|| ("not recorded".into(), "not recorded".into()));
        s.push_str(&format!(
            "| [{}]({}/report.md) | {d} | {m} | {} | {} |\n",
            r.id,
            r.id,
            minutes(r.seconds),
            r.runs.map_or("-".to_string(), |n| n.to_string())
        ));
    }
    s.push_str(&format!(
        "\nThis page was last written by `normlab book{}{}` on {} ({})",
        if quick { " --quick" } else { "" },
        if totals.is_none() {
            " --rewrite-findings"
        } else {
            ""
        },
        today(),
        machine(),
    ));
    match totals {
        Some((seconds, sessions)) => s.push_str(&format!(
            "; its book folder saw {} of wall time over {sessions} session(s).\n\n",
            minutes(seconds)
        )),
        None => s.push_str(" from the chapters' results.\n\n"),
    }
    s
}

/// Seconds as a short duration: "42 s", "12 min", "1.9 h".
fn minutes(seconds: f64) -> String {
    if seconds < 1.0 {
        "under 1 s".to_string()
    } else if seconds < 90.0 {
        format!("{seconds:.0} s")
    } else if seconds < 90.0 * 60.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}
