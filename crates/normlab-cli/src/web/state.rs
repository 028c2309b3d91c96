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
    /// The published book (the checkout's docs/findings) whose verdicts
    /// the book pages show when no --book is given, with the chapters
    /// under `runs` beside them as the reader's own.
    pub(super) published: Option<PathBuf>,
    /// The model reports given with --report.
    pub(super) reports: Vec<super::report_file::ModelReport>,
    /// Permits for the heavy requests (file reads, simulations, plots):
    /// a request holds one from its start until its answer has been
    /// written (or its client is cut off), so never-reading clients cannot
    /// pile answers up in memory.
    pub(super) heavy: Arc<tokio::sync::Semaphore>,
}

pub(super) type Shared = Arc<Lab>;

/// A 4xx answer with a one-line message.
pub(super) fn err(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, Json(json!({"error": msg.into()}))).into_response()
}

pub(super) fn bad(msg: impl Into<String>) -> Response {
    err(StatusCode::BAD_REQUEST, msg)
}

/// A heavy request's permit, carried in its response's extensions until
/// [`bound_responses`](super::bound_responses) moves it into the body.
#[derive(Clone)]
pub(super) struct HeavyPermit {
    _held: Arc<tokio::sync::OwnedSemaphorePermit>,
}

/// Run `work` (which reads files or computes) on the blocking pool, off
/// the async workers, once a heavy permit is free; the answer keeps the
/// permit until it has been written.
pub(super) async fn heavy<F>(lab: &Lab, work: F) -> Response
where
    F: FnOnce() -> Response + Send + 'static,
{
    let Ok(permit) = lab.heavy.clone().acquire_owned().await else {
        return err(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    };
    let mut r = match tokio::task::spawn_blocking(work).await {
        Ok(r) => r,
        Err(_) => err(StatusCode::INTERNAL_SERVER_ERROR, "the request failed"),
    };
    r.extensions_mut().insert(HeavyPermit {
        _held: Arc::new(permit),
    });
    r
}

/// Answers larger than this hold their heavy permit until written; smaller
/// ones give it back at once (hyper buffers them whole).
pub(super) const HELD_ABOVE: usize = 256 << 10;

/// A large answer's body: handed to hyper in 64 KiB chunks, so that hyper
/// asks for the next only when the client has taken the last (a client
/// that never reads leaves the rest here, not in hyper's write buffer),
/// and holding its heavy permit until dropped (written out, or the
/// connection cut off by the write timeout). At most HEAVY_CONCURRENCY
/// large answers are thus in memory at once, however many clients wait.
pub(super) struct HeldBody {
    pub(super) data: axum::body::Bytes,
    pub(super) _permit: HeavyPermit,
}

impl http_body::Body for HeldBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if self.data.is_empty() {
            return std::task::Poll::Ready(None);
        }
        let n = self.data.len().min(64 << 10);
        let chunk = self.data.split_to(n);
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(chunk))))
    }
    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.data.len() as u64)
    }
    fn is_end_stream(&self) -> bool {
        self.data.is_empty()
    }
}

/// The query string as key -> value (`widgets::parse_query`); a parameter
/// outside `allowed`, or one given twice, is a 400.
pub(super) fn query(
    raw: Option<String>,
    allowed: &[&str],
) -> Result<HashMap<String, String>, Box<Response>> {
    widgets::parse_query(raw.as_deref().unwrap_or(""), allowed).map_err(|e| Box::new(bad(e)))
}

/// The run ids of a query's comma-separated `ids` (none when absent).
pub(super) fn run_ids(q: &HashMap<String, String>) -> Vec<String> {
    q.get("ids")
        .map(|s| {
            s.split(',')
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
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
