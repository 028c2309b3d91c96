//! What every route of the web lab shares: the lab's state (its folders
//! and the permits for heavy requests), the one-line JSON errors, the
//! query-string check, the scan of the runs folder, the page and its
//! translations, and the bounds every answer keeps.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use normlab_lab::{report, widgets};
use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

pub(super) struct Lab {
    pub(super) runs: Option<PathBuf>,
    /// A book folder for the book pages (else `runs`).
    pub(super) book: Option<PathBuf>,
    /// Permits for the heavy requests.
    pub(super) heavy: tokio::sync::Semaphore,
}

pub(super) type Shared = Arc<Lab>;

/// A 4xx answer with a one-line message.
pub(super) fn err(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, Json(json!({"error": msg.into()}))).into_response()
}

pub(super) fn bad(msg: impl Into<String>) -> Response {
    err(StatusCode::BAD_REQUEST, msg)
}

/// The query string as key -> value (`widgets::parse_query`); a parameter
/// outside `allowed`, or one given twice, is a 400.
pub(super) fn query(
    raw: Option<String>,
    allowed: &[&str],
) -> Result<HashMap<String, String>, Box<Response>> {
    widgets::parse_query(raw.as_deref().unwrap_or(""), allowed).map_err(|e| Box::new(bad(e)))
}

/// The runs under the runs folder, without their metrics.
pub(super) fn scan(lab: &Lab) -> normlab::Result<Vec<report::FoundRun>> {
    match &lab.runs {
        None => Ok(Vec::new()),
        Some(dir) => report::scan_headers(dir),
    }
}

/// The lab's page.
pub const PAGE: &str = include_str!("index.html");

/// The page's translation files, one per language (`web/i18n/`): the
/// interface strings under `ui`, and in `zh.json` the claims' titles and
/// statements (the English ones are the claims registry's).
pub const TRANSLATIONS: &[(&str, &str)] = &[
    ("en", include_str!("i18n/en.json")),
    ("zh", include_str!("i18n/zh.json")),
];

/// Most runs one plot overlays.
pub const MAX_PLOT_RUNS: usize = 20;
/// Simulations and plots computed at the same time; more requests wait.
pub const HEAVY_CONCURRENCY: usize = 2;
/// Default and largest number of metric records one answer carries.
pub const METRIC_POINTS: (usize, usize) = (2000, 20_000);
/// Most runs `/api/runs` lists (the rest are counted in `total`).
pub const MAX_LISTED_RUNS: usize = 2000;
/// Largest response body: a larger one is replaced by a 500 error naming
/// the bound (no endpoint should come near it: each bounds its own work).
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;
