//! The web lab's book pages: `GET /api/book` (the claims table of the
//! chapters in `--book DIR`, or without it in `--runs DIR`: each claim's
//! statement, its verdict and each chapter's; with neither, how to get a
//! book), `GET /api/book/{id}` (one chapter: question, settings, seeds,
//! verdicts with evidence, figures, machine and date, departures) and `GET
//! /api/book/{id}/figure/{stem}` (a figure of that chapter, as SVG, by the
//! name its result.json lists). A chapter whose run folders lie under
//! `--runs` lists them (`runs`: their ids on the dashboard, so the page can
//! overlay them). Reading runs nothing.

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

/// The folder the book is read from.
fn book_dir(lab: &Lab) -> Option<&std::path::Path> {
    lab.book.as_deref().or(lab.runs.as_deref())
}

pub(super) async fn api_book(State(lab): State<Shared>, RawQuery(raw): RawQuery) -> Response {
    if let Err(r) = query(raw, &[]) {
        return *r;
    }
    let held = lab.clone();
    heavy(&lab, move || {
        let dir = book_dir(&held);
        let label = dir.map(|d| d.display().to_string());
        match claims_page(dir, label.as_deref()) {
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
    if let Err(r) = query(raw, &[]) {
        return *r;
    }
    let held = lab.clone();
    heavy(&lab, move || chapter_answer(&held, &path)).await
}

/// A chapter's page or one of its figures (reads files: run on the
/// blocking pool).
fn chapter_answer(lab: &Lab, path: &str) -> Response {
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
    let Some(dir) = book_dir(lab) else {
        return err(StatusCode::NOT_FOUND, HOW_TO);
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
