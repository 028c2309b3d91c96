//! `normlab serve`: the web lab. An axum server (loopback by default)
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
//! - `GET /api/calc?norm=&x=&eps=&scale=&shift=` — the norm calculator.
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
//!   metrics sampled to at most N records (default 2000, at most 20000;
//!   evaluations always kept), with `metrics_total`.
//! - `GET /i18n/en.json`, `GET /i18n/zh.json` — the page's translations.
//! - `GET /api/book`, `GET /api/book/{id}`, `GET /api/book/{id}/figure/{stem}`
//!   — the book pages (`web/book.rs`): the claims table, a chapter (with
//!   the dashboard ids of its runs when they lie under `--runs`), a figure.
//! - `GET /api/plot?ids=a,b&metric=loss|eval_loss|grad_norm|residual_rms|attn_sink|stream_max_ratio|ffn_max|f16_overflow` —
//!   an SVG overlaying those runs.

use axum::extract::{Path as AxPath, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use clap::Args;
use normlab::calc::{self, CalcRequest};
use normlab::kernels::norm::NormKind;
use normlab_lab::exp::args::FlagValue;
use normlab_lab::exp::depth_sim;
use normlab_lab::exp::{ExpArgs, ExpFlag};
use normlab_lab::present::plot::{self, Figure, LineChart, Panel, Series};
use normlab_lab::report;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

mod book;
mod overlay;
use overlay::api_plot;

const PAGE: &str = include_str!("web/index.html");

/// The page's translation files, one per language (`web/i18n/`): the
/// interface strings under `ui`, and in `zh.json` the claims' titles and
/// statements (the English ones are the claims registry's).
pub const TRANSLATIONS: &[(&str, &str)] = &[
    ("en", include_str!("web/i18n/en.json")),
    ("zh", include_str!("web/i18n/zh.json")),
];

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
/// Longest vector the calculator accepts over HTTP.
pub const MAX_CALC_LEN: usize = 4096;
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
    /// table and each chapter with its figures.
    #[arg(long)]
    book: Option<PathBuf>,
    /// Seconds a client may take to send a request's header (from the
    /// connection's start, or from the previous response); a slower one is
    /// disconnected.
    #[arg(long, default_value_t = 10.0, value_parser = header_timeout)]
    header_timeout: f64,
    /// Connections served at once; more wait to be accepted.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_connections: u32,
}

/// `--header-timeout`: a number of seconds in (0, 3600].
fn header_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 3600.0 => Ok(v),
        _ => Err(format!("'{s}' is not a number of seconds in (0, 3600]")),
    }
}

struct Lab {
    runs: Option<PathBuf>,
    /// A book folder for the book pages (else `runs`).
    book: Option<PathBuf>,
    /// Permits for the heavy requests.
    heavy: tokio::sync::Semaphore,
}

type Shared = Arc<Lab>;

/// A 4xx answer with a one-line message.
fn err(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, Json(json!({"error": msg.into()}))).into_response()
}

fn bad(msg: impl Into<String>) -> Response {
    err(StatusCode::BAD_REQUEST, msg)
}

/// The query string as key -> value; a parameter outside `allowed`, or one
/// given twice, is a 400.
fn query(raw: Option<String>, allowed: &[&str]) -> Result<HashMap<String, String>, Box<Response>> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.as_deref().unwrap_or(""))
        .map_err(|e| Box::new(bad(format!("malformed query string: {e}"))))?;
    let mut out = HashMap::new();
    for (k, v) in pairs {
        if !allowed.contains(&k.as_str()) {
            return Err(Box::new(bad(format!(
                "unknown parameter '{k}' (expected: {})",
                allowed.join(", ")
            ))));
        }
        if out.insert(k.clone(), v).is_some() {
            return Err(Box::new(bad(format!("parameter '{k}' is given twice"))));
        }
    }
    Ok(out)
}

/// Any route that does not exist: a JSON 404.
async fn not_found(uri: axum::http::Uri) -> Response {
    err(
        StatusCode::NOT_FOUND,
        format!("no such route: {}", uri.path()),
    )
}

/// The router (also used by tests).
pub fn router(runs: Option<PathBuf>, book: Option<PathBuf>) -> Router {
    let state = Arc::new(Lab {
        runs,
        book,
        heavy: tokio::sync::Semaphore::new(HEAVY_CONCURRENCY),
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
pub async fn bound_responses(r: Response, limit: usize) -> Response {
    let (parts, body) = r.into_parts();
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => Response::from_parts(parts, axum::body::Body::from(bytes)),
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
            return crate::ui::bad(format!("--book {} is not a folder", b.display()));
        }
    }
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
            max_connections: c.max_connections as usize,
        };
        serve(listener, router(c.runs.clone(), c.book.clone()), limits).await;
        Ok(())
    })
}

/// What one client can hold of the server.
struct Limits {
    /// Time allowed for a request's header.
    header_timeout: std::time::Duration,
    /// Connections served at once.
    max_connections: usize,
}

/// Accept and serve connections until Ctrl-C: HTTP/1.1 with a header-read
/// timeout (hyper's, on tokio's timer), at most `max_connections` at once
/// (the next waits in the listen queue until one closes), so clients that
/// open connections and send nothing, or a header byte by byte, cannot
/// starve the others.
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
        tokio::spawn(async move {
            let _permit = permit;
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(timeout)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn parse_f32(name: &str, v: Option<&String>) -> Result<Option<f32>, String> {
    match v.map(|s| s.trim()).filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => s
            .parse::<f32>()
            .map(Some)
            .map_err(|_| format!("{name}: '{s}' is not a number")),
    }
}

async fn api_kinds(RawQuery(raw): RawQuery) -> Response {
    if let Err(r) = query(raw, &[]) {
        return *r;
    }
    let kinds: Vec<serde_json::Value> = NormKind::row_wise()
        .filter(|k| *k != NormKind::None)
        .map(|k| serde_json::json!({"name": k.name(), "formula": k.spec().formula}))
        .collect();
    Json(serde_json::json!({ "kinds": kinds })).into_response()
}

async fn api_residual_options(RawQuery(raw): RawQuery) -> Response {
    if let Err(r) = query(raw, &[]) {
        return *r;
    }
    let options = normlab::model::residual::simulated_json();
    Json(serde_json::json!({ "options": options })).into_response()
}

async fn api_calc(RawQuery(raw): RawQuery) -> Response {
    let q = match query(
        raw,
        &["norm", "x", "eps", "scale", "shift", "dtype", "naive"],
    ) {
        Ok(q) => q,
        Err(r) => return *r,
    };
    let kind: NormKind = match q.get("norm").map_or("layernorm", String::as_str).parse() {
        Ok(k) => k,
        Err(e) => return bad(e.to_string()),
    };
    let Some(xs) = q.get("x") else {
        return bad("missing parameter x (comma-separated numbers)");
    };
    if xs.len() > MAX_CALC_LEN * 32 {
        return bad(format!("x is too long (at most {MAX_CALC_LEN} values)"));
    }
    let x = match calc::parse_vector("x", xs) {
        Ok(v) => v,
        Err(e) => return bad(e),
    };
    if x.len() > MAX_CALC_LEN {
        return bad(format!(
            "x has {} values; at most {MAX_CALC_LEN} are allowed",
            x.len()
        ));
    }
    let mut req = CalcRequest::new(kind, x);
    if let Some(t) = q.get("dtype").filter(|t| !t.is_empty()) {
        match t.parse() {
            Ok(t) => req.dtype = Some(t),
            Err(e) => return bad(e),
        }
    }
    match parse_bool("naive", q.get("naive"), false) {
        Ok(n) => req.naive = n,
        Err(e) => return bad(e),
    }
    match (
        parse_f32("eps", q.get("eps")),
        parse_f32("scale", q.get("scale")),
        parse_f32("shift", q.get("shift")),
    ) {
        (Ok(e), Ok(a), Ok(c)) => {
            req.eps = e;
            req.scale = a;
            req.shift = c;
        }
        (Err(r), _, _) | (_, Err(r), _) | (_, _, Err(r)) => return bad(r),
    }
    match calc::calc(&req) {
        Ok(r) => Json(r).into_response(),
        Err(e) => bad(e.to_string()),
    }
}

/// A switch parameter (the experiment flags' parsing of true/false), or
/// `default` when absent or empty.
fn parse_bool(name: &str, v: Option<&String>, default: bool) -> Result<bool, String> {
    match v.map(|s| s.trim()).filter(|s| !s.is_empty()) {
        None => Ok(default),
        Some(s) => <bool as FlagValue>::parse_flag(name, s).map_err(|e| e.to_string()),
    }
}

async fn api_simulate(State(lab): State<Shared>, RawQuery(raw): RawQuery) -> Response {
    // The parameters are the depth-sim experiment's flags (one declaration
    // in exp::args: the same names, parsing and help as `normlab exp
    // depth-sim`), with `_` for `-`; an empty value is the default.
    let flags = depth_sim::EXPERIMENT.all_flags();
    let allowed: Vec<String> = flags.iter().map(|f| f.name().replace('-', "_")).collect();
    let allowed: Vec<&str> = allowed.iter().map(String::as_str).collect();
    let q = match query(raw, &allowed) {
        Ok(q) => q,
        Err(r) => return *r,
    };
    let mut args = ExpArgs::default();
    for (key, value) in &q {
        let flag = ExpFlag::find(key).expect("an allowed parameter is a flag");
        if value.trim().is_empty() {
            continue;
        }
        if let Err(e) = flag.set_as(&mut args, value, key) {
            return bad(e.to_string());
        }
    }
    // The lab's charts average 32 rows (the experiment: 64).
    let cfg = match depth_sim::config(&args, 32) {
        Ok(c) => c,
        Err(e) => return bad(e.to_string()),
    };
    let Ok(_permit) = lab.heavy.acquire().await else {
        return err(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    };
    let res = match tokio::task::spawn_blocking(move || depth_sim::simulate(&cfg)).await {
        Ok(r) => r,
        Err(_) => return err(StatusCode::INTERNAL_SERVER_ERROR, "simulation failed"),
    };
    let pts = |v: &[Option<f64>]| {
        v.iter()
            .enumerate()
            .filter_map(|(i, x)| x.map(|y| (i as f64, y)))
            .collect::<Vec<_>>()
    };
    let fig = Figure {
        stem: "sim".into(),
        panels: vec![
            Panel::Line(LineChart {
                title: "residual-stream RMS".into(),
                x_label: "layer".into(),
                y_label: "RMS of x_l".into(),
                series: vec![Series::new("x_l", pts(&res.residual_rms))],
                log_y: true,
                log_x: false,
            }),
            Panel::Line(LineChart {
                title: "gradient".into(),
                x_label: "layer".into(),
                y_label: "|dL/dx_l| per row".into(),
                series: vec![Series::new("dL/dx_l", pts(&res.grad_norm))],
                log_y: true,
                log_x: false,
            }),
        ],
        cols: 2,
    };
    let svg = plot::svg_string(&fig).unwrap_or_default();
    let mut v = serde_json::to_value(&res).unwrap();
    v["svg"] = json!(svg);
    Json(v).into_response()
}

/// The runs under the runs folder, without their metrics.
fn scan(lab: &Lab) -> normlab::Result<Vec<report::FoundRun>> {
    match &lab.runs {
        None => Ok(Vec::new()),
        Some(dir) => report::scan_headers(dir),
    }
}

async fn api_runs(State(lab): State<Shared>, RawQuery(raw): RawQuery) -> Response {
    if let Err(r) = query(raw, &[]) {
        return *r;
    }
    let runs = match scan(&lab) {
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
                "status": r.summary.as_ref().map(|s| s.status.name()).unwrap_or("unfinished"),
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
    let runs = match scan(&lab) {
        Ok(r) => r,
        Err(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    // Ids are matched against the runs found under the folder, never joined
    // to a path: nothing outside the runs folder can be reached.
    match runs.iter().find(|r| r.name == id) {
        Some(r) => {
            let (metrics, total) = normlab::train::run::read_metrics_sampled(&r.dir, max_points);
            let status = r.summary.as_ref().map_or("unfinished", |s| s.status.name());
            Json(json!({"id": r.name, "config": r.cfg.to_json_value(), "status": status, "summary": r.summary, "metrics": metrics, "metrics_total": total})).into_response()
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
