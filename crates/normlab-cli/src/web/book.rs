//! The web lab's book pages: `GET /api/book` (the claims table: each
//! claim's statement, its verdict and each chapter's), `GET
//! /api/book/{id}` (one chapter: question, settings, seeds, verdicts with
//! evidence, figures, machine and date, departures) and `GET
//! /api/book/{id}/figure/{stem}` (a figure of that chapter, as SVG, by the
//! name its result.json lists). The verdicts are those of `--book DIR`;
//! without it, of the published book (the checkout's docs/findings), with
//! the chapters under `--runs` (a demo, a quick book) beside them as the
//! reader's own (`yours`; their pages with `?source=yours`), each marked
//! when it ran at the smaller `--quick` setting; without a published book,
//! of the chapters under `--runs`; with nothing, how to get a book. A
//! chapter whose run folders lie under `--runs` lists them (`runs`: their
//! ids on the dashboard, so the page can overlay them). Reading runs
//! nothing.

use super::state::{err, heavy, query, Lab, Shared};
use axum::extract::{Path as AxPath, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use normlab_lab::report;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// What the page says when the lab has no chapters.
pub(super) const HOW_TO: &str = "no chapters here: normlab book --quick --out book (a few minutes), then normlab serve --book book; or normlab demo, then normlab serve --runs normlab-demo";

/// Largest figure served or published (the book's largest is 300 KB).
pub(super) const MAX_FIGURE_BYTES: u64 = 8 << 20;

/// Where the book pages read from: the book whose verdicts lead, and the
/// reader's own chapters shown beside them (None: no such column).
fn sources(lab: &Lab) -> (Option<&Path>, Option<&Path>) {
    match (&lab.book, &lab.published) {
        (Some(b), _) => (Some(b), None),
        (None, Some(p)) => (Some(p), lab.runs.as_deref()),
        (None, None) => (lab.runs.as_deref(), None),
    }
}

pub(super) async fn api_book(State(lab): State<Shared>, RawQuery(raw): RawQuery) -> Response {
    if let Err(r) = query(raw, &[]) {
        return *r;
    }
    let held = lab.clone();
    heavy(&lab, move || {
        let (dir, yours) = sources(&held);
        let label = dir.map(|d| d.display().to_string());
        let page = claims_page(dir, label.as_deref()).and_then(|mut v| {
            if let (Some(y), Some(b)) = (yours, dir) {
                add_yours(&mut v, y, b)?;
            }
            v["published"] = json!(held.book.is_none() && held.published.is_some());
            Ok(v)
        });
        match page {
            Ok(v) => Json(v).into_response(),
            Err(e) => err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    })
    .await
}

/// The answer to `/api/book` (the served and the static lab's): the claims
/// table of the chapters in `dir`, the folder as `label` names it, and how
/// to get a book when there are no chapters.
pub(super) fn claims_page(dir: Option<&Path>, label: Option<&str>) -> normlab::Result<Value> {
    let Some(dir) = dir else {
        return Ok(json!({"claims": [], "chapters": [], "how_to": HOW_TO}));
    };
    let mut v = normlab_lab::book::view::claims_table(dir)?;
    if v["chapters"].as_array().is_some_and(Vec::is_empty) {
        v["how_to"] = json!(HOW_TO);
    }
    v["folder"] = json!(label);
    Ok(v)
}

/// Beside the book's verdicts, the reader's own chapters (a demo, a
/// quick book under --runs): per claim `yours` (each chapter's verdict and
/// `other_setting`: whether it ran at another, smaller setting than the
/// book's chapter, --quick or reduced like the demo's), and `yours` at the
/// top (the folder and its chapters, each with the same mark). Nothing is
/// added when it holds none.
fn add_yours(page: &mut Value, dir: &Path, book: &Path) -> normlab::Result<()> {
    let own = normlab_lab::book::view::claims_table(dir)?;
    let mut chapters = own["chapters"].as_array().cloned().unwrap_or_default();
    if chapters.is_empty() {
        return Ok(());
    }
    for c in &mut chapters {
        let id = c["id"].as_str().unwrap_or_default().to_string();
        c["other_setting"] = json!(normlab_lab::book::view::other_setting(dir, book, &id));
    }
    let quick = |id: &Value| {
        chapters
            .iter()
            .any(|c| &c["id"] == id && c["other_setting"] == true)
    };
    let empty = Vec::new();
    let own_claims = own["claims"].as_array().unwrap_or(&empty);
    if let Some(claims) = page["claims"].as_array_mut() {
        for c in claims {
            let mine: Vec<Value> = own_claims
                .iter()
                .find(|o| o["id"] == c["id"])
                .and_then(|o| o["chapters"].as_array())
                .map(|list| {
                    list.iter()
                        .map(|h| {
                            json!({
                                "experiment": h["experiment"],
                                "verdict": h["verdict"],
                                "other_setting": quick(&h["experiment"]),
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            c["yours"] = json!(mine);
        }
    }
    page["yours"] = json!({"folder": dir.display().to_string(), "chapters": chapters});
    Ok(())
}

/// The file of chapter `id`'s figure `stem` in the book `dir`: only a plain
/// file name (no folder part, not hidden) that the chapter lists.
pub(super) fn figure_path(dir: &Path, id: &str, chapter: &Value, stem: &str) -> Option<PathBuf> {
    let plain = !stem.is_empty() && !stem.starts_with('.') && !stem.contains(['/', '\\', '\0']);
    let listed = chapter["figures"]
        .as_array()
        .is_some_and(|f| f.iter().any(|s| s == stem));
    (plain && listed).then(|| dir.join(id).join(format!("{stem}.svg")))
}

/// `/api/book/{id}` and `/api/book/{id}/figure/{stem}`.
pub(super) async fn api_chapter(
    State(lab): State<Shared>,
    AxPath(path): AxPath<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let q = match query(raw, &["source"]) {
        Ok(q) => q,
        Err(r) => return *r,
    };
    let yours = match q.get("source").map(String::as_str) {
        None | Some("book") => false,
        Some("yours") => true,
        Some(other) => {
            return err(
                StatusCode::BAD_REQUEST,
                format!("source must be book or yours, not '{other}'"),
            )
        }
    };
    let held = lab.clone();
    heavy(&lab, move || chapter_answer(&held, &path, yours)).await
}

/// A chapter's page or one of its figures (reads files: run on the
/// blocking pool).
fn chapter_answer(lab: &Lab, path: &str, yours: bool) -> Response {
    let parts: Vec<&str> = path.split('/').collect();
    let (id, figure) = match parts.as_slice() {
        [id] => (*id, None),
        [id, "figure", stem] => (*id, Some(*stem)),
        _ => {
            return err(
                StatusCode::NOT_FOUND,
                format!("no book page /api/book/{path}"),
            )
        }
    };
    let (book, own) = sources(lab);
    let dir = if yours { own } else { book };
    let Some(dir) = dir else {
        return err(
            StatusCode::NOT_FOUND,
            if yours {
                "no chapters of your own here (serve --runs DIR with a demo or a book in it)"
            } else {
                HOW_TO
            },
        );
    };
    let chapter = match normlab_lab::book::view::chapter(dir, id) {
        Ok(Some(c)) => c,
        Ok(None) => return err(StatusCode::NOT_FOUND, format!("no chapter '{id}' here")),
        Err(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let Some(stem) = figure else {
        let mut chapter = chapter;
        chapter["runs"] = json!(chapter_runs(lab, dir, id));
        return Json(chapter).into_response();
    };
    let Some(file) = figure_path(dir, id, &chapter, stem) else {
        return err(
            StatusCode::NOT_FOUND,
            format!("chapter '{id}' has no figure '{stem}'"),
        );
    };
    match normlab::io::read_capped(&file, MAX_FIGURE_BYTES) {
        Ok(bytes) => ([(header::CONTENT_TYPE, "image/svg+xml")], bytes).into_response(),
        Err(e) => err(
            StatusCode::NOT_FOUND,
            format!("figure '{stem}' of '{id}' cannot be read: {e}"),
        ),
    }
}

/// The dashboard ids of chapter `id`'s runs (`<book>/<id>/runs/...`), when
/// that folder lies under `--runs`; else none.
fn chapter_runs(lab: &Lab, book: &std::path::Path, id: &str) -> Vec<String> {
    let Some(root) = lab.runs.as_deref() else {
        return Vec::new();
    };
    let folder = book.join(id).join("runs");
    let (Ok(root), Ok(folder)) = (root.canonicalize(), folder.canonicalize()) else {
        return Vec::new();
    };
    let Ok(rel) = folder.strip_prefix(&root) else {
        return Vec::new();
    };
    let rel: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    report::scan_headers(&folder)
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            let mut parts = rel.clone();
            if r.name != "." {
                parts.push(r.name);
            }
            parts.join("/")
        })
        .collect()
}
