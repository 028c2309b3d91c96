//! The book as data for a reader (the web lab's book pages): the claims
//! table (each claim's statement, its one verdict over the chapters found,
//! each chapter's verdict, and the PyTorch cross-check's agreement when
//! that chapter is there) and one chapter (its question, settings,
//! seeds, verdicts with their evidence, figures, where and when it ran,
//! where it departs from the lesson), read from a folder of chapters
//! (`<dir>/<id>/result.json`: a book, a demo, or `exp --out` folders side
//! by side; each chapter says whether it ran at the `--quick` setting).
//! Reading runs nothing.

use super::departures::DEPARTURES;
use super::findings::{agreement, agreement_line, cross_checked, read_recorded, recorded_all};
use crate::exp::claims::{Coverage, Verdict, CLAIMS};
use normlab::error::Result;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The published book of the checkout normlab runs from: `docs/findings`
/// under the current folder, else in the checkout the binary was built
/// from (wherever cargo put the build: CARGO_TARGET_DIR may lie outside
/// it), else three levels above the binary (`target/release/normlab`),
/// the first that holds findings.
pub fn published() -> Option<PathBuf> {
    let here = std::env::current_dir()
        .ok()
        .map(|d| d.join("docs/findings"));
    let built_from = Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/findings"));
    let beside = std::env::current_exe().ok().and_then(|e| {
        e.parent()?
            .parent()?
            .parent()
            .map(|r| r.join("docs/findings"))
    });
    [here, built_from, beside]
        .into_iter()
        .flatten()
        .find(|d| super::run::has_findings(d))
}

/// Whether chapter `id` of `dir` ran at another setting than the same
/// chapter of the book `book` (at --quick, or with other settings): its
/// verdict then rests on a smaller setting than the book's.
pub fn other_setting(dir: &Path, book: &Path, id: &str) -> bool {
    let (Ok(Some((mine, q1))), Ok(Some((theirs, q2)))) =
        (read_recorded(dir, id), read_recorded(book, id))
    else {
        return true;
    };
    q1 != q2 || mine.settings != theirs.settings
}

/// The claims table of the chapters in `dir`: per claim its id, title,
/// statement, overall verdict (and the chapter deciding it), and each
/// chapter's verdict; with the chapters found. `chapters` is empty when
/// `dir` holds none.
pub fn claims_table(dir: &Path) -> Result<Value> {
    let found = recorded_all(dir)?;
    let mut claims = Vec::new();
    for c in CLAIMS {
        let mine: Vec<(&str, Verdict)> = found
            .iter()
            .flat_map(|(r, _)| r.checks.iter())
            .filter(|f| f.claim == c.id)
            .map(|f| (f.experiment.as_str(), f.verdict))
            .collect();
        let overall = c.overall(&mine);
        let not_checked = match c.coverage {
            Coverage::Uncheckable(why) => Some(why),
            Coverage::Experiments(_) => None,
        };
        let xc = cross_checked(found.iter().map(|(r, _)| r), c.id);
        let cross_check = (!xc.is_empty()).then(|| {
            json!({
                "agrees": agreement(&xc) == "agrees",
                "lines": xc.iter().map(|a| agreement_line(a)).collect::<Vec<_>>(),
            })
        });
        claims.push(json!({
            "id": c.id,
            "title": c.title,
            "statement": c.statement,
            "decision_rule": crate::exp::claims::decision_rule(c.id),
            "overall": overall.as_ref().map(|o| o.verdict.label()),
            "overall_label": overall.as_ref().map(|o| o.label()),
            "decided_by": overall.as_ref().map(|o| o.decided_by.clone()),
            "qualified_by": overall.as_ref().map_or_else(Vec::new, |o| o.qualified_by.iter().map(|(e, v)| json!({"experiment": e, "verdict": v.label()})).collect()),
            "not_checked": not_checked,
            "cross_check": cross_check,
            "chapters": mine.iter().map(|(e, v)| json!({"experiment": e, "verdict": v.label()})).collect::<Vec<_>>(),
        }));
    }
    Ok(json!({
        "claims": claims,
        "chapters": found.iter().map(|(r, q)| json!({"id": r.id, "quick": q})).collect::<Vec<_>>(),
    }))
}

/// One chapter of `dir`: None when it is not there.
pub fn chapter(dir: &Path, id: &str) -> Result<Option<Value>> {
    let Some((r, quick)) = read_recorded(dir, id)? else {
        return Ok(None);
    };
    let question = crate::exp::registry::find(id).map(|e| e.question);
    Ok(Some(json!({
        "id": r.id,
        "question": question,
        "quick": quick,
        "settings": r.settings,
        "seeds": r.seeds,
        "figures": r.figures,
        "ran_on": r.ran_on.as_ref().map(|(m, d)| json!({"machine": m, "date": d})),
        "seconds": r.seconds,
        "verdicts": r.checks.iter().map(|f| {
            let c = crate::exp::claims::claim(f.claim);
            json!({
                "claim": f.claim,
                "title": c.map(|c| c.title),
                "statement": c.map(|c| c.statement),
                "verdict": f.verdict.label(),
                "evidence": f.evidence,
            })
        }).collect::<Vec<_>>(),
        "departures": DEPARTURES.iter().filter(|d| d.chapter == id).map(|d| json!({
            "claims": d.claims, "lesson": d.lesson, "normlab": d.normlab, "why": d.why, "depends": d.depends,
        })).collect::<Vec<_>>(),
    })))
}
