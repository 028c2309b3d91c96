//! `normlab serve`: the web lab (and, in `web/site.rs`, `normlab site`: the
//! same page as a static folder, its widgets in WebAssembly). An axum
//! server (loopback by default)
//! serving one page (no front-end build step: `web/index.html` is compiled
//! in) and a JSON API that the page calls; every number and chart is
//! computed by the Rust engine. Every parameter is validated (unknown or
//! repeated parameters included) and every error, 404s too, is JSON
//! `{"error": ...}`. Work and memory are bounded: per request (vector and
//! depth limits, metrics read as a stream and sampled) and in total (at
//! most HEAVY_CONCURRENCY simulations or plots at a time; others wait); no
//! response body exceeds MAX_RESPONSE_BYTES ([`bound_responses`]).
//!
//! API:
//! - `GET /api/kinds` — the norm kinds a model can use, with their formulas.
//! - `GET /api/calc?norm=&x=&eps=&scale=&shift=&dtype=&naive=` — the norm
//!   calculator (`normlab::calc_options::CALC_OPTIONS`, as `normlab calc`).
//! - `GET /api/simulate?sublayers=&gain=&residual=&pre_norm=&scale_writeback=&dyt=&lns=&rezero=&layerscale=&d_model=&rows=&seed=` —
//!   the depth simulator, with an SVG chart: the parameters are `normlab exp
//!   depth-sim`'s flags (one declaration, `exp::args`; the residual
//!   options' from their declarations in `model::residual`).
//! - `GET /api/residual-options` — the residual options the simulator
//!   models (name, title, help, switch or value, example, gate), from which
//!   the page makes its controls.
//! - `GET /api/runs` — runs under `--runs DIR` (status, settings, losses):
//!   at most MAX_LISTED_RUNS, with `total` and `truncated`.
//! - `GET /api/runs/{id}?max_points=N` — one run: config, summary, and its
//!   metrics sampled to about N records (default 2000, at most 20000;
//!   every evaluation kept, or every j-th past N/2 of them), with
//!   `metrics_total`.
//! - `GET /i18n/en.json`, `GET /i18n/zh.json` — the page's translations.
//! - `GET /api/book`, `GET /api/book/{id}`, `GET /api/book/{id}/figure/{stem}`
//!   — the book pages (`web/book.rs`): the claims table, a chapter (with
//!   the dashboard ids of its runs when they lie under `--runs`), a figure.
//! - `GET /api/reports`, `GET /api/report-plot?report=N&metric=&ids=a,b` —
//!   the model reports given with `--report` beside runs (`web/reports.rs`).
//! - `GET /api/plot?ids=a,b&metric=loss|eval_loss|grad_norm|residual_rms|attn_sink|stream_max_ratio|ffn_max|f16_overflow|sink_head_share|sink_rate|massive0|value_drain` —
//!   an SVG overlaying those runs.

use axum::extract::{Path as AxPath, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use clap::Args;
use normlab_lab::report;
use normlab_lab::widgets;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

mod book;
mod overlay;
mod report_file;
mod reports;
mod site;
mod state;
use overlay::api_plot;
use report_file::ModelReport;
pub use site::{run as site, SiteCmd};
use state::{
    bad, err, heavy, query, scan, HeavyPermit, HeldBody, Lab, Shared, HEAVY_CONCURRENCY,
    HELD_ABOVE, MAX_LISTED_RUNS, MAX_RESPONSE_BYTES, METRIC_POINTS, PAGE, TRANSLATIONS,
};

/// `GET /i18n/{lang}.json`: a translation file.
async fn api_i18n(AxPath(file): AxPath<String>) -> Response {
    let lang = file.strip_suffix(".json").unwrap_or("");
    match TRANSLATIONS.iter().find(|(l, _)| *l == lang) {
        Some((_, body)) => (
            [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
            *body,
        )
            .into_response(),
        None => err(
            StatusCode::NOT_FOUND,
            format!("no translation '{file}' (en.json, zh.json)"),
        ),
    }
}
/// Serve the web lab.
#[derive(Args, Debug)]
pub struct ServeCmd {
    /// Address to listen on (loopback by default; port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Folder of runs for the dashboard (from train, sweep, exp --out,
    /// demo); its chapters (`<id>/result.json`) also make the book pages
    /// when --book is not given.
    #[arg(long)]
    runs: Option<PathBuf>,
    /// A book folder (`normlab book --out`) for the book pages: the claims
    /// table and each chapter with its figures. Without it the pages show
    /// the published book (the checkout's docs/findings, found beside the
    /// current folder or the binary), with the chapters under --runs
    /// beside its verdicts as your own.
    #[arg(long)]
    book: Option<PathBuf>,
    /// Without --book: do not show the published book (only the chapters
    /// under --runs).
    #[arg(long, conflicts_with = "book")]
    no_published: bool,
    /// Seconds a client may take to send a request's header (from the
    /// connection's start, or from the previous response); a slower one is
    /// disconnected.
    #[arg(long, default_value_t = 10.0, value_parser = header_timeout)]
    header_timeout: f64,
    /// Connections served at once; more wait to be accepted.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_connections: u32,
    /// Seconds writing an answer may stall: a client that stops reading
    /// its answers (pipelining requests it never reads) is disconnected
    /// after it. (An idle connection is cut off by --header-timeout.)
    #[arg(long, default_value_t = 10.0, value_parser = header_timeout)]
    write_timeout: f64,
    /// A host name the lab also answers to (repeatable). By default it
    /// answers only requests addressed to an IP address or localhost, so
    /// that a web page cannot reach it through a name it controls (DNS
    /// rebinding).
    #[arg(long, value_name = "NAME")]
    allow_host: Vec<String>,
    /// A model's report (`normlab inspect MODEL --json > FILE`, or Python's
    /// normlab.diagnose saved as JSON), shown in the dashboard beside the
    /// runs (repeatable).
    #[arg(long, value_name = "FILE")]
    report: Vec<PathBuf>,
}

/// Whether a request's Host header (`name[:port]`) may reach the lab: an
/// IP address, localhost, or a name given with --allow-host. A browser
/// always sends the name it resolved, so a page on another site that makes
/// its name resolve to 127.0.0.1 is refused.
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [v6]:port
        return rest
            .split_once(']')
            .is_some_and(|(ip, _)| ip.parse::<std::net::Ipv6Addr>().is_ok());
    } else {
        host.rsplit_once(':')
            .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
            .map_or(host, |(n, _)| n)
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<std::net::IpAddr>().is_ok()
        || name == "localhost"
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(&name))
}

/// Refuse (421) a request whose Host the lab does not answer to.
async fn check_host(
    allowed: Arc<Vec<String>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{fffd}").to_string());
    match host {
        Some(h) if !host_allowed(&h, &allowed) => err(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "this lab answers requests addressed to its IP address or localhost, not '{h}' (start it with --allow-host NAME to answer to a name)"
            ),
        ),
        _ => next.run(req).await,
    }
}

/// `--header-timeout`: a number of seconds in (0, 3600].
fn header_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 3600.0 => Ok(v),
        _ => Err(format!("'{s}' is not a number of seconds in (0, 3600]")),
    }
}

/// Any route that does not exist: a JSON 404.
async fn not_found(uri: axum::http::Uri) -> Response {
    err(
        StatusCode::NOT_FOUND,
        format!("no such route: {}", uri.path()),
    )
}

/// The router.
pub fn router(
    runs: Option<PathBuf>,
    book: Option<PathBuf>,
    published: Option<PathBuf>,
    reports: Vec<ModelReport>,
) -> Router {
    let state = Arc::new(Lab {
        runs,
        book,
        published,
        reports,
        heavy: Arc::new(tokio::sync::Semaphore::new(HEAVY_CONCURRENCY)),
    });
    Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/i18n/{file}", get(api_i18n))
        .route("/api/kinds", get(api_kinds))
        .route("/api/calc", get(api_calc))
        .route("/api/simulate", get(api_simulate))
        .route("/api/residual-options", get(api_residual_options))
        .route("/api/runs", get(api_runs))
        .route("/api/runs/{*id}", get(api_run))
        .route("/api/plot", get(api_plot))
        .route("/api/reports", get(reports::api_reports))
        .route("/api/report-plot", get(reports::api_report_plot))
        .route("/api/book", get(book::api_book))
        .route("/api/book/{*path}", get(book::api_chapter))
        .fallback(not_found)
        .with_state(state)
        .layer(axum::middleware::map_response(|r: Response| {
            bound_responses(r, MAX_RESPONSE_BYTES)
        }))
}

/// Pass `r` through if its body has at most `limit` bytes; otherwise a
/// 500 error that names the bound (the body is read up to the limit only).
/// A heavy request's permit moves from the response's extensions into its
/// body when the body is large ([`state::HeldBody`]), which holds it until
/// written or dropped.
pub async fn bound_responses(r: Response, limit: usize) -> Response {
    let (mut parts, body) = r.into_parts();
    let permit = parts.extensions.remove::<HeavyPermit>();
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => {
            let body = match permit {
                Some(p) if bytes.len() > HELD_ABOVE => axum::body::Body::new(HeldBody {
                    data: bytes,
                    _permit: p,
                }),
                _ => axum::body::Body::from(bytes),
            };
            Response::from_parts(parts, body)
        }
        Err(_) => err(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the response would exceed the lab's bound of {limit} bytes; ask for less"),
        ),
    }
}

pub fn run(c: ServeCmd) -> anyhow::Result<()> {
    if let Some(r) = &c.runs {
        if !r.is_dir() {
            return crate::ui::bad(format!("--runs {} is not a folder", r.display()));
        }
    }
    if let Some(b) = &c.book {
        if !b.is_dir() {
            return crate::ui::bad(format!(
                "--book {} is not a folder: the published book is docs/findings, or write one with normlab book --quick --out {} (a few minutes)",
                b.display(),
                b.display()
            ));
        }
    }
    let reports = c
        .report
        .iter()
        .map(|p| ModelReport::load(p))
        .collect::<Result<Vec<_>, _>>();
    let reports = match reports {
        Ok(r) => r,
        Err(e) => return crate::ui::bad(e),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(c.addr).await {
            Ok(l) => l,
            Err(e) => return crate::ui::bad(format!("cannot listen on {}: {e}", c.addr)),
        };
        let addr = listener.local_addr()?;
        println!(
            "normlab lab: http://{addr}/{}",
            c.runs
                .as_ref()
                .map(|r| format!("  (runs: {})", r.display()))
                .unwrap_or_default()
        );
        use std::io::Write;
        std::io::stdout().flush()?;
        let limits = Limits {
            header_timeout: std::time::Duration::from_secs_f64(c.header_timeout),
            write_timeout: std::time::Duration::from_secs_f64(c.write_timeout),
            max_connections: c.max_connections as usize,
        };
        let allowed = Arc::new(c.allow_host.clone());
        let published = if c.book.is_some() || c.no_published {
            None
        } else {
            normlab_lab::book::view::published()
        };
        let app = router(c.runs.clone(), c.book.clone(), published, reports).layer(
            axum::middleware::from_fn(move |req, next| check_host(allowed.clone(), req, next)),
        );
        serve(listener, app, limits).await;
        Ok(())
    })
}

/// What one client can hold of the server.
struct Limits {
    /// Time allowed for a request's header.
    header_timeout: std::time::Duration,
    /// Time a write may stall.
    write_timeout: std::time::Duration,
    /// Connections served at once.
    max_connections: usize,
}

/// Accept and serve connections until Ctrl-C: HTTP/1.1 with a header-read
/// timeout (hyper's, on tokio's timer, which also ends idle kept-alive
/// connections) and a stall timeout on every write, at most
/// `max_connections` at once (the
/// next waits in the listen queue until one closes), so clients that open
/// connections and send nothing, send a header byte by byte, or pipeline
/// requests and never read the answers, cannot hold the lab.
async fn serve(listener: tokio::net::TcpListener, app: Router, limits: Limits) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let mut stop = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        let permit = tokio::select! {
            _ = &mut stop => return,
            p = slots.clone().acquire_owned() => p.expect("the semaphore is never closed"),
        };
        let stream = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => match a {
                Ok((s, _)) => s,
                // Out of file descriptors and the like: wait, then go on.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let service = TowerToHyperService::new(app.clone());
        let timeout = limits.header_timeout;
        // No read timeout: a client waiting for a long answer is not
        // reading, and hyper's header timeout covers slow requests.
        let mut stream = tokio_io_timeout::TimeoutStream::new(stream);
        stream.set_write_timeout(Some(limits.write_timeout));
        tokio::spawn(async move {
            let _permit = permit;
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(timeout)
                .max_buf_size(64 * 1024)
                .serve_connection(TokioIo::new(Box::pin(stream)), service)
                .await;
        });
    }
}

async fn api_kinds(RawQuery(raw): RawQuery) -> Response {
    widget("kinds", raw)
}

async fn api_residual_options(RawQuery(raw): RawQuery) -> Response {
    widget("residual-options", raw)
}

async fn api_calc(RawQuery(raw): RawQuery) -> Response {
    widget("calc", raw)
}

/// A widget that answers at once (`widgets::call`): its JSON, or a 400.
fn widget(route: &str, raw: Option<String>) -> Response {
    match widgets::call(route, raw.as_deref().unwrap_or("")) {
        Ok(v) => Json(v).into_response(),
        Err(e) => bad(e),
    }
}

async fn api_simulate(State(lab): State<Shared>, RawQuery(raw): RawQuery) -> Response {
    let cfg = match widgets::simulate_query(raw.as_deref().unwrap_or("")) {
        Ok(c) => c,
        Err(e) => return bad(e),
    };
    heavy(&lab, move || Json(widgets::simulate(&cfg)).into_response()).await
}

async fn api_runs(State(lab): State<Shared>, RawQuery(raw): RawQuery) -> Response {
    if let Err(r) = query(raw, &[]) {
        return *r;
    }
    let held = lab.clone();
    heavy(&lab, move || runs_list(&held)).await
}

/// The runs under the runs folder (reads their headers: run on the
/// blocking pool).
fn runs_list(lab: &Lab) -> Response {
    let runs = match scan(lab) {
        Ok(r) => r,
        Err(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let keys = report::varying_keys(&runs);
    let total = runs.len();
    let list: Vec<Value> = runs
        .iter()
        .take(MAX_LISTED_RUNS)
        .map(|r| {
            let cfgv = r.cfg.to_json_value();
            let varying: serde_json::Map<String, Value> = keys.iter().map(|k| (k.clone(), cfgv[k].clone())).collect();
            json!({
                "id": r.name,
                "model": r.source.clone().unwrap_or_else(|| r.cfg.model.kind.to_string()), "source": r.source.as_deref().unwrap_or("normlab"), "norm": r.cfg.model.norm.name(), "placement": r.cfg.model.placement.name(), "layers": r.cfg.model.layers, "lr": normlab_lab::exp::num(r.cfg.lr),
                "varying": varying,
                "status": if r.damage.is_some() { "damaged" } else { r.summary.as_ref().map(|s| s.status.name()).unwrap_or("unfinished") },
                "damage": r.damage,
                "final_eval_loss": r.summary.as_ref().and_then(|s| s.final_eval_loss),
                "steps": r.summary.as_ref().map_or_else(|| normlab::train::run::last_logged_step(&r.dir), |s| s.steps),
            })
        })
        .collect();
    Json(json!({"runs_folder": lab.runs.as_ref().map(|p| p.display().to_string()), "runs": list, "total": total, "truncated": total > MAX_LISTED_RUNS}))
        .into_response()
}

async fn api_run(
    State(lab): State<Shared>,
    AxPath(id): AxPath<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let q = match query(raw, &["max_points"]) {
        Ok(q) => q,
        Err(r) => return *r,
    };
    let max_points = match q.get("max_points").map(|v| v.trim().parse::<usize>()) {
        None => METRIC_POINTS.0,
        Some(Ok(n)) if (1..=METRIC_POINTS.1).contains(&n) => n,
        Some(_) => {
            return bad(format!(
                "max_points must be an integer in 1..={}",
                METRIC_POINTS.1
            ))
        }
    };
    let held = lab.clone();
    heavy(&lab, move || run_answer(&held, &id, max_points)).await
}

/// Run `id`'s config, summary and sampled metrics (reads files: run on the
/// blocking pool).
fn run_answer(lab: &Lab, id: &str, max_points: usize) -> Response {
    let runs = match scan(lab) {
        Ok(r) => r,
        Err(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    // Ids are matched against the runs found under the folder, never joined
    // to a path: nothing outside the runs folder can be reached.
    match runs.iter().find(|r| r.name == id) {
        Some(r) => {
            let (metrics, total) = normlab::train::run::read_metrics_sampled(&r.dir, max_points);
            let status = if r.damage.is_some() {
                "damaged"
            } else {
                r.summary.as_ref().map_or("unfinished", |s| s.status.name())
            };
            // Serialised straight to bytes (no JSON tree of 20,000 records).
            #[derive(serde::Serialize)]
            struct RunAnswer<'a> {
                id: &'a str,
                config: Value,
                status: &'a str,
                summary: &'a Option<normlab::train::Summary>,
                metrics: &'a [normlab::train::StepRecord],
                metrics_total: usize,
            }
            let answer = RunAnswer {
                id: &r.name,
                config: r.cfg.to_json_value(),
                status,
                summary: &r.summary,
                metrics: &metrics,
                metrics_total: total,
            };
            match serde_json::to_vec(&answer) {
                Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
                Err(e) => err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            }
        }
        None => err(
            StatusCode::NOT_FOUND,
            format!("no run '{id}' under the runs folder"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn responses_over_the_bound_become_an_error() {
        let small = bound_responses((StatusCode::OK, "x".repeat(100)).into_response(), 100).await;
        assert_eq!(small.status(), StatusCode::OK);
        let body = axum::body::to_bytes(small.into_body(), 1000).await.unwrap();
        assert_eq!(body.len(), 100);
        let big = bound_responses((StatusCode::OK, "x".repeat(101)).into_response(), 100).await;
        assert_eq!(big.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(big.into_body(), 1000).await.unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert!(v["error"].as_str().unwrap().contains("100 bytes"), "{v}");
    }
}
