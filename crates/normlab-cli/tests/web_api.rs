//! The web lab's JSON API over real HTTP: answers, validation (4xx with a
//! clear message, never a crash or a hang) and confinement to the runs folder.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

mod common;
use common::lab::{get, rss_mib, serve, serve_with, status_mib, train_tiny, train_with};

fn json_body(body: &str) -> serde_json::Value {
    // Bodies may be chunked: take from the first '{' to the last '}'.
    let (a, b) = (body.find('{').unwrap(), body.rfind('}').unwrap());
    serde_json::from_str(&body[a..=b]).unwrap()
}

/// Train a one-block toy run (5 steps) into `out`.
#[test]
fn api_answers_and_validates() {
    let dir = std::env::temp_dir().join(format!("normlab-web-api-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    train_tiny(&dir.join("a"));
    // A Bigram-Backcopy run logs the sink measures.
    train_with(
        &dir.join("b"),
        &[
            "--model",
            "gpt",
            "--data",
            "bigram-backcopy",
            "--layers",
            "1",
            "--d-model",
            "32",
            "--heads",
            "2",
            "--seq",
            "16",
            "--hidden",
            "64",
            "--steps",
            "4",
            "--batch",
            "4",
            "--eval-sequences",
            "4",
        ],
    );
    let s = serve(Some(&dir));
    let (code, page) = get(&s, "/");
    assert_eq!(code, 200);
    assert!(page.contains("normlab lab") && page.contains("calc-x3"));
    let (code, body) = get(&s, "/api/calc?norm=rmsnorm&x=1,2,3,6");
    assert_eq!(code, 200);
    let v = json_body(&body);
    assert!((v["l2"].as_f64().unwrap() - 2.0).abs() < 1e-5);
    // The calculator's kinds come from the kernels' registry: every kind a
    // model can use, and each computes.
    let (code, body) = get(&s, "/api/kinds");
    assert_eq!(code, 200);
    let kinds: Vec<String> = json_body(&body)["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap().to_string())
        .collect();
    for k in normlab::kernels::norm::NormKind::row_wise().filter(|k| k.name() != "none") {
        assert!(
            kinds.contains(&k.name().to_string()),
            "{k} missing from /api/kinds"
        );
        let (code, _) = get(&s, &format!("/api/calc?norm={k}&x=1,2,3,6"));
        assert_eq!(code, 200, "{k}");
    }
    // DyT with the default alpha: tanh(0.5 x) for unit gain and zero bias.
    let (_, body) = get(&s, "/api/calc?norm=dyt&x=1,2");
    let out = json_body(&body)["output"].as_array().unwrap().clone();
    assert!(
        (out[0].as_f64().unwrap() - 0.5f64.tanh()).abs() < 1e-6,
        "{out:?}"
    );
    let (code, body) = get(
        &s,
        "/api/simulate?sublayers=16&gain=1&residual=true&pre_norm=true&scale_writeback=true",
    );
    assert_eq!(code, 200);
    let v = json_body(&body);
    assert_eq!(v["residual_rms"].as_array().unwrap().len(), 17);
    assert!(v["svg"].as_str().unwrap().contains("<svg"));
    // The calculator in a stored type: naive f16 statistics overflow on a
    // row whose squares exceed 65504.
    let (code, body) = get(
        &s,
        "/api/calc?norm=layernorm&x=300,-200,100&dtype=f16&naive=true",
    );
    assert_eq!(code, 200);
    let v = json_body(&body);
    assert!(v["low_precision"]["second_moment"].is_null(), "{v}");
    let (code, body) = get(&s, "/api/calc?norm=layernorm&x=300,-200,100&dtype=f16");
    assert_eq!(code, 200);
    assert!(
        json_body(&body)["low_precision"]["max_abs_diff"]
            .as_f64()
            .unwrap()
            < 1e-3
    );
    for bad in ["dtype=f8", "norm=dyt&dtype=f16", "naive=maybe"] {
        let (code, _) = get(&s, &format!("/api/calc?x=1,2&{bad}"));
        assert_eq!(code, 400, "{bad}");
    }
    // LayerNorm Scaling shrinks deep branches: the stream grows less than
    // with pre-norm alone.
    let final_rms = |lns: bool| {
        let (code, body) = get(
            &s,
            &format!("/api/simulate?sublayers=32&pre_norm=true&lns={lns}"),
        );
        assert_eq!(code, 200);
        json_body(&body)["final_residual_rms"].as_f64().unwrap()
    };
    assert!(final_rms(true) < 0.8 * final_rms(false));
    let (code, _) = get(&s, "/api/simulate?lns=maybe");
    assert_eq!(code, 400);
    // DyT in the pre-norm's place reaches the simulator: its tanh(0.5 x)
    // branch inputs (RMS below 1) grow the stream less than RMSNorm's.
    let (code, body) = get(&s, "/api/simulate?sublayers=32&pre_norm=true&dyt=true");
    assert_eq!(code, 200);
    assert!(json_body(&body)["final_residual_rms"].as_f64().unwrap() < final_rms(false));
    let (code, _) = get(&s, "/api/simulate?dyt=2");
    assert_eq!(code, 400);
    // A branch gate: ReZero's 0 leaves the stream as it came in; without a
    // gate the same 32 sublayers without a norm blow it up.
    let sim = |q: &str| {
        let (code, body) = get(&s, &format!("/api/simulate?sublayers=32&{q}"));
        assert_eq!(code, 200, "{q}");
        json_body(&body)
    };
    let rezero = sim("rezero=true");
    assert_eq!(rezero["grad_ratio_bottom_top"].as_f64(), Some(1.0));
    let (ls, plain) = (sim("layerscale=0.0001"), sim("layerscale="));
    let rms = |v: &serde_json::Value| v["final_residual_rms"].as_f64().unwrap();
    assert!(
        rms(&plain) > 100.0 * rms(&ls),
        "{} vs {}",
        rms(&plain),
        rms(&ls)
    );
    for bad in [
        "layerscale=-1",
        "layerscale=x",
        "layerscale=inf",
        "rezero=true&layerscale=0.1",
    ] {
        let (code, _) = get(&s, &format!("/api/simulate?{bad}"));
        assert_eq!(code, 400, "{bad}");
    }
    // The page's controls for the residual options come from their
    // declarations: every option the simulator models is listed, and each
    // is a parameter /api/simulate takes.
    let (code, body) = get(&s, "/api/residual-options");
    assert_eq!(code, 200);
    let listed = json_body(&body);
    let names: Vec<&str> = listed["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    let simulated: Vec<&str> = normlab::model::residual::simulated()
        .map(|(o, _)| o.name)
        .collect();
    assert_eq!(names, simulated);
    for o in listed["options"].as_array().unwrap() {
        let value = if o["switch"].as_bool().unwrap() {
            "true".to_string()
        } else {
            o["example"].to_string()
        };
        sim(&format!("{}={value}", o["name"].as_str().unwrap()));
    }
    let (code, body) = get(&s, "/api/runs");
    assert_eq!(code, 200);
    assert_eq!(json_body(&body)["runs"][0]["id"], "a");
    assert_eq!(json_body(&body)["runs"][1]["id"], "b");
    let (code, body) = get(&s, "/api/runs/a");
    assert_eq!(code, 200);
    assert_eq!(json_body(&body)["summary"]["steps"], 5);
    for metric in [
        "grad_norm",
        "stream_max_ratio",
        "ffn_max",
        "attn_sink",
        "f16_overflow",
    ] {
        let (code, body) = get(&s, &format!("/api/plot?ids=a&metric={metric}"));
        assert_eq!(code, 200, "{metric}");
        assert!(body.contains("<svg"));
    }
    for metric in ["sink_head_share", "sink_rate", "massive0", "value_drain"] {
        let (code, body) = get(&s, &format!("/api/plot?ids=b&metric={metric}"));
        assert_eq!(code, 200, "{metric}");
        assert!(body.contains("<svg"));
        // The toy run has no attention: nothing to draw.
        let (code, _) = get(&s, &format!("/api/plot?ids=a&metric={metric}"));
        assert_eq!(code, 204, "{metric}");
    }
    let (code, body) = get(&s, "/api/plot?ids=a&metric=nonsense");
    assert_eq!(code, 400);
    assert!(body.contains("ffn_max"), "{body}");
    let long: String = (0..5000)
        .map(|i| (i % 7).to_string())
        .collect::<Vec<_>>()
        .join(",");
    for (path, want, msg) in [
        ("/api/simulate?sublayers=1001".to_string(), 400, "sublayers"),
        ("/api/simulate?gain=-1".into(), 400, "negative"),
        ("/api/simulate?gain=abc".into(), 400, "gain"),
        ("/api/simulate?residual=maybe".into(), 400, "residual"),
        ("/api/simulate?colour=red".into(), 400, "unknown parameter"),
        ("/api/calc?norm=rmsnorm&x=1,nan".into(), 400, "non-finite"),
        ("/api/calc?norm=rmsnorm&x=".into(), 400, "empty"),
        ("/api/calc?norm=bogus&x=1".into(), 400, "unknown norm kind"),
        (format!("/api/calc?x={long}"), 400, "at most 4096"),
        ("/api/runs/..%2F..%2Fetc%2Fpasswd".into(), 404, "no run"),
        ("/api/runs/../../etc/passwd".into(), 404, ""),
        ("/api/plot?ids=a&metric=bogus".into(), 400, "metric"),
        ("/api/plot?ids=nope&metric=loss".into(), 404, "no run"),
        ("/api/calc?x=1,2&x=3".into(), 400, "given twice"),
        ("/api/simulate?gain=1&gain=2".into(), 400, "given twice"),
        (
            "/api/calc?x=1,2&colour=red".into(),
            400,
            "unknown parameter",
        ),
        ("/api/calc?x=1,,2".into(), 400, "empty"),
        ("/api/runs?x=1".into(), 400, "unknown parameter"),
        ("/api/runs/a?max_points=0".into(), 400, "max_points"),
        ("/api/nothing-here".into(), 404, "no such route"),
        ("/api/runs/a/b/c".into(), 404, "no run"),
        (
            "/api/calc?norm=rmsnorm&x=1e-40,3e-40&eps=0".into(),
            200,
            "0.44",
        ),
    ] {
        let (code, body) = get(&s, &path);
        assert_eq!(code, want, "{path}: {body}");
        assert!(body.contains(msg), "{path}: {body}");
        // Every answer of the API is JSON, errors included.
        let _ = json_body(&body);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run that diverged with a NaN loss is `diverged` in the listing and in
/// its own record (its summary has null losses, which must still read).
#[test]
fn nan_diverged_runs_show_as_diverged() {
    let dir = std::env::temp_dir().join(format!("normlab-web-nan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    train_tiny(&dir.join("a"));
    // Make its summary what a NaN divergence writes: null losses.
    let p = dir.join("a/summary.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v["status"] = "diverged".into();
    for k in [
        "final_loss",
        "best_loss",
        "eval_loss",
        "final_eval_loss",
        "first_loss",
    ] {
        v[k] = serde_json::Value::Null;
    }
    v["diverged_at_step"] = 3.into();
    // Edited by hand, so without the checksum normlab would write (a
    // summary with one that no longer matches is damaged: checked below).
    let edited = v.to_string();
    v.as_object_mut().unwrap().remove("checksum");
    std::fs::write(&p, v.to_string()).unwrap();
    let s = serve(Some(&dir));
    let (code, body) = get(&s, "/api/runs");
    assert_eq!(code, 200);
    assert_eq!(json_body(&body)["runs"][0]["status"], "diverged", "{body}");
    let (code, body) = get(&s, "/api/runs/a");
    assert_eq!(code, 200);
    let v = json_body(&body);
    assert_eq!(v["status"], "diverged");
    assert_eq!(v["summary"]["diverged_at_step"], 3);
    let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args(["report", "--json"])
        .arg(&dir)
        .output()
        .unwrap();
    let recs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(recs[0]["status"], "diverged");
    drop(s);
    // With the checksum of the summary as trained, the edit is damage.
    std::fs::write(&p, edited).unwrap();
    let s = serve(Some(&dir));
    let (_, body) = get(&s, "/api/runs");
    let run = &json_body(&body)["runs"][0];
    assert_eq!(run["status"], "damaged", "{body}");
    assert!(
        run["damage"]
            .as_str()
            .unwrap()
            .contains("summary.json fails its checksum"),
        "{body}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A claim of an `/api/book` answer by id.
fn claim_of(book: &serde_json::Value, id: &str) -> serde_json::Value {
    book["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no claim {id}"))
        .clone()
}

/// 60 of the heaviest documented simulations, 20 at a time, and a long
/// run's metrics: the server stays under 200 MiB resident.
#[test]
fn server_memory_is_bounded() {
    let dir = std::env::temp_dir().join(format!("normlab-web-mem-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A run with a long metrics file (about 40 MB).
    let run = dir.join("long");
    std::fs::create_dir_all(&run).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args([
            "train",
            "--layers",
            "1",
            "--steps",
            "5",
            "--batch",
            "4",
            "--eval-sequences",
            "4",
            "--log-every",
            "1",
            "--quiet",
            "--out",
        ])
        .arg(&run)
        .output()
        .unwrap();
    assert!(o.status.success());
    let line = std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .to_string();
    let mut text = String::new();
    let mut rec: serde_json::Value = serde_json::from_str(&line).unwrap();
    for step in 1..=120_000 {
        rec["step"] = step.into();
        text.push_str(&rec.to_string());
        text.push('\n');
    }
    std::fs::write(run.join("metrics.jsonl"), text).unwrap();
    let s = serve(Some(&dir));
    let pid = s.child.id();
    for round in 0..3 {
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let addr = s.addr.clone();
                std::thread::spawn(move || {
                    let sv = Server2 { addr };
                    let (code, body) = get2(
                        &sv,
                        &format!(
                            "/api/simulate?sublayers=1000&pre_norm=true&seed={}",
                            round * 20 + i
                        ),
                    );
                    assert_eq!(code, 200, "{body}");
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }
    let (code, body) = get(&s, "/api/runs/long");
    assert_eq!(code, 200);
    let v = json_body(&body);
    assert_eq!(v["metrics_total"], 120_000);
    assert!(v["metrics"].as_array().unwrap().len() <= 2100);
    let (code, _) = get(&s, "/api/plot?ids=long&metric=loss");
    assert_eq!(code, 200);
    let rss = rss_mib(pid);
    eprintln!("server resident memory after the heavy requests: {rss:.0} MiB");
    assert!(
        rss < 200.0,
        "server resident memory {rss:.0} MiB after the heavy requests"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The published book (docs/findings: every chapter with its figures) read
/// by 20 clients at once, each the claims table, every chapter and every
/// figure, twice: everything is served, and the server's peak resident
/// memory stays under 200 MiB.
#[test]
fn the_published_book_is_served_in_bounded_memory() {
    let book = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/findings");
    let s = serve_with(None, &["--book", book.to_str().unwrap()]);
    let pid = s.child.id();
    let (code, body) = get(&s, "/api/book");
    assert_eq!(code, 200, "{body}");
    let v = json_body(&body);
    let chapters: Vec<String> = v["chapters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    let on_disk = std::fs::read_dir(&book)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("result.json").is_file())
        .count();
    assert_eq!(chapters.len(), on_disk, "{chapters:?}");
    // A claim the PyTorch cross-check covered carries its agreement; one
    // it did not, none.
    let claim = |id: &str| claim_of(&v, id);
    let c1 = claim("C1");
    assert!(c1["cross_check"]["agrees"].is_boolean(), "{c1}");
    assert!(
        c1["cross_check"]["lines"][0]
            .as_str()
            .is_some_and(|l| l.contains("normlab") && l.contains("PyTorch")),
        "{c1}"
    );
    assert!(claim("C13")["cross_check"].is_null());
    let mut pages = vec!["/api/book".to_string()];
    let mut figures = 0;
    for id in &chapters {
        let (code, body) = get(&s, &format!("/api/book/{id}"));
        assert_eq!(code, 200, "{id}: {body}");
        pages.push(format!("/api/book/{id}"));
        for f in json_body(&body)["figures"].as_array().unwrap() {
            pages.push(format!("/api/book/{id}/figure/{}", f.as_str().unwrap()));
            figures += 1;
        }
    }
    assert!(figures >= chapters.len() / 2, "{figures} figures");
    let pages = std::sync::Arc::new(pages);
    for _round in 0..2 {
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let (addr, pages) = (s.addr.clone(), pages.clone());
                std::thread::spawn(move || {
                    let sv = Server2 { addr };
                    // Each client in its own order.
                    for k in 0..pages.len() {
                        let p = &pages[(k + i * 7) % pages.len()];
                        let (code, body) = get2(&sv, p);
                        assert_eq!(code, 200, "{p}: {}", &body[..body.len().min(200)]);
                        if p.contains("/figure/") {
                            assert!(body.contains("<svg"), "{p}");
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }
    let peak = status_mib(pid, "VmHWM");
    eprintln!(
        "serving the published book ({} chapters, {figures} figures) to 20 clients: peak {peak:.0} MiB",
        chapters.len()
    );
    assert!(peak < 200.0, "peak resident memory {peak:.0} MiB");
}

/// An address only (for client threads).
struct Server2 {
    addr: String,
}

fn get2(s: &Server2, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(&s.addr).unwrap();
    stream
        // hang bound: 120 s (idle: 3.3 s, a round of 20 requests at once)
        .set_read_timeout(Some(std::time::Duration::from_secs(120)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        s.addr
    )
    .unwrap();
    let mut resp = Vec::new();
    stream.read_to_end(&mut resp).unwrap();
    let text = String::from_utf8_lossy(&resp).into_owned();
    let status: u16 = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, text)
}

/// Clients that connect and send half a header, more of them than the lab
/// serves at once, are cut off after the header timeout; a normal request
/// that arrives meanwhile is answered once they are.
#[test]
fn slow_clients_cannot_starve_the_lab() {
    use std::time::{Duration, Instant};
    let s = serve_with(None, &["--header-timeout", "0.5", "--max-connections", "4"]);
    let slow: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut c = TcpStream::connect(&s.addr).unwrap();
            // A header that never ends.
            let _ = c.write_all(b"GET /api/kinds HTTP/1.1\r\nHost: x\r\n");
            c
        })
        .collect();
    let t = Instant::now();
    let (status, body) = get(&s, "/api/kinds");
    // not timed: measured here, bounded below
    let waited = t.elapsed();
    assert_eq!(status, 200, "{body}");
    // The four served slow clients held every slot until their timeout;
    // the request waited for that, not for the slow clients to give up.
    // hang bound: 20 s (idle: 1.1 s)
    assert!(waited < Duration::from_secs(20), "waited {waited:?}");
    for mut c in slow {
        // hang bound: 20 s (idle: 1.1 s)
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = Vec::new();
        // Closed by the server (EOF or reset), not left hanging.
        match c.read_to_end(&mut buf) {
            Ok(_) => {}
            Err(e) => assert!(
                !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "a slow client was never disconnected"
            ),
        }
    }
    // Bad limits are refused.
    let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args(["serve", "--header-timeout", "0"])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
}

#[path = "../../normlab/tests/common/fuzz.rs"]
#[allow(dead_code)]
mod fuzz;

/// The API's query parsing, fuzzed over HTTP: mutated query strings of
/// every endpoint (percent-encoded into a valid request line) get a JSON
/// answer, 200 or 4xx, never a 5xx or a dropped connection, for the time
/// budget (`NORMLAB_FUZZ_SECONDS`); the server stays under 300 MiB.
#[test]
fn api_survives_mutated_queries() {
    let s = serve(None);
    let seeds: Vec<Vec<u8>> = [
        "/api/calc?norm=rmsnorm&x=1,2,3,6&eps=1e-5&scale=3&shift=2",
        "/api/calc?norm=layernorm&x=0.5,-1,2&dtype=f16&naive=true",
        "/api/simulate?sublayers=32&gain=1&residual=true&pre_norm=true&scale_writeback=false",
        "/api/simulate?sublayers=8&lns=true&dyt=true&rezero=true&layerscale=0.1&d_model=16&rows=4&seed=3",
        "/api/kinds",
        "/api/runs",
        "/api/runs/a/b?max_points=10",
        "/api/plot?ids=a,b&metric=loss",
    ]
    .iter()
    .map(|q| q.as_bytes().to_vec())
    .collect();
    // time budget: the fuzzing runs for its budget; nothing is asserted about time
    let deadline = std::time::Instant::now() + fuzz::budget();
    let mut n = 0u64;
    for m in fuzz::mutations(&seeds) {
        if std::time::Instant::now() > deadline && n > 0 {
            break;
        }
        // Keep the path's first '/', percent-encode what a request line
        // cannot carry.
        let mut path = String::from("/");
        for &b in m.iter().skip(1) {
            if b.is_ascii_graphic() && b != b'#' {
                path.push(b as char);
            } else {
                path.push_str(&format!("%{b:02X}"));
            }
        }
        let (status, body) = get(&s, &path);
        assert!(
            status == 200 || (400..500).contains(&status),
            "{path}: status {status}: {body}"
        );
        n += 1;
    }
    let rss = rss_mib(s.child.id());
    eprintln!("fuzz web query: {n} requests, server resident memory {rss:.0} MiB");
    assert!(rss < 300.0, "server resident memory {rss:.0} MiB");
}

#[test]
fn run_listing_is_bounded() {
    // More run folders than /api/runs lists: the first MAX_LISTED_RUNS
    // (2000), with the total and a truncation flag.
    let dir = std::env::temp_dir().join(format!("normlab-web-many-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    train_tiny(&dir.join("r0"));
    let cfg = std::fs::read(dir.join("r0/config.json")).unwrap();
    for i in 1..2001 {
        let d = dir.join(format!("r{i}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("config.json"), &cfg).unwrap();
    }
    let s = serve(Some(&dir));
    let (code, body) = get(&s, "/api/runs");
    assert_eq!(code, 200, "{body}");
    let v = json_body(&body);
    assert_eq!(v["runs"].as_array().unwrap().len(), 2000);
    assert_eq!(v["total"], 2001);
    assert_eq!(v["truncated"], true);
    std::fs::remove_dir_all(&dir).ok();
}

/// `normlab demo` keeps its training runs (`<out>/<experiment>/runs/`), so
/// the dashboard of `normlab serve --runs <out>` lists them, finished; a
/// second demo reuses them.
#[test]
fn demo_runs_show_on_the_dashboard() {
    let dir = std::env::temp_dir().join(format!("normlab-web-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let demo = dir.join("demo");
    // Piped, as in a log: progress comes as lines (every 0.3 s here).
    let run_demo = || {
        let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
            .args(["demo", "--quick", "--out"])
            .arg(&demo)
            .env("NORMLAB_PROGRESS_SECS", "0.3")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (first, progress) = run_demo();
    assert!(first.contains("Wrote"), "{first}");
    assert!(
        progress
            .lines()
            .any(|l| l.contains("elapsed") && l.contains('/')),
        "no progress line when piped: {progress}"
    );
    let s = serve(Some(&demo));
    let (code, body) = get(&s, "/api/runs");
    assert_eq!(code, 200, "{body}");
    let v = json_body(&body);
    let runs = v["runs"].as_array().unwrap();
    for exp in ["collapse", "lr-sensitivity"] {
        let mine: Vec<&serde_json::Value> = runs
            .iter()
            .filter(|r| {
                r["id"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("{exp}/runs/"))
            })
            .collect();
        assert!(mine.len() >= 2, "{exp}: {body}");
        assert!(mine.iter().all(|r| r["status"] != "unfinished"), "{body}");
    }
    // The book pages show the published book's verdicts (the checkout's
    // docs/findings), and the demo's chapters beside them as the reader's
    // own, each marked as run at the smaller --quick setting.
    let (code, body) = get(&s, "/api/book");
    assert_eq!(code, 200, "{body}");
    let book = json_body(&body);
    assert_eq!(book["published"], true, "{body}");
    assert!(
        book["chapters"].as_array().unwrap().len() >= 20,
        "the published book's chapters: {body}"
    );
    let chapters: Vec<&str> = book["yours"]["chapters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        chapters,
        ["depth-sim", "collapse", "lr-sensitivity", "speed"]
    );
    let c12 = claim_of(&book, "C12");
    assert!(c12["overall"].is_string(), "{c12}");
    let mine = c12["yours"].as_array().unwrap();
    assert!(
        mine.iter()
            .any(|h| h["experiment"] == "collapse" && h["other_setting"] == true),
        "{c12}"
    );
    // Without the published book: the demo's chapters alone.
    let alone = serve_with(Some(&demo), &["--no-published"]);
    let (_, body) = get(&alone, "/api/book");
    let b = json_body(&body);
    assert_eq!(b["published"], false, "{body}");
    assert_eq!(b["chapters"].as_array().unwrap().len(), 4, "{body}");
    drop(alone);
    // A chapter lists its runs by their dashboard ids (the page overlays
    // them); a chapter without runs lists none.
    let ids: Vec<&str> = runs.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let (code, body) = get(&s, "/api/book/collapse?source=yours");
    assert_eq!(code, 200, "{body}");
    let ch = json_body(&body);
    assert_eq!(ch["quick"], true, "{body}");
    let mine: Vec<&str> = ch["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(mine.len() >= 2, "{body}");
    assert!(
        mine.iter()
            .all(|r| r.starts_with("collapse/runs/") && ids.contains(r)),
        "{mine:?} vs {ids:?}"
    );
    let (_, body) = get(&s, "/api/book/speed?source=yours");
    assert_eq!(json_body(&body)["runs"], serde_json::json!([]), "{body}");
    // The published chapter of the same id: the book's setting, no runs here.
    let (code, body) = get(&s, "/api/book/collapse");
    assert_eq!(code, 200, "{body}");
    assert_eq!(json_body(&body)["quick"], false, "{body}");
    let (code, _) = get(&s, "/api/book/collapse?source=other");
    assert_eq!(code, 400);
    // Reused: the same run folders, their summaries untouched.
    let summary = |r: &serde_json::Value| {
        let p = demo.join(r["id"].as_str().unwrap()).join("summary.json");
        (
            std::fs::read(&p).unwrap(),
            std::fs::metadata(&p).unwrap().modified().unwrap(),
        )
    };
    let before: Vec<_> = runs.iter().map(summary).collect();
    run_demo();
    let after: Vec<_> = runs.iter().map(summary).collect();
    assert_eq!(before, after);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The book pages: `serve --book` on a small quick book gives the claims
/// table (a checked claim with its verdict and chapter, an uncovered one
/// "not run here"), a chapter with its verdicts, settings and figures, and
/// the figure itself; only listed figures are served; without a book or
/// runs folder the lab says how to get one.
#[test]
fn book_pages_read_a_book_folder() {
    let dir = std::env::temp_dir().join(format!("normlab-web-book-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let book = dir.join("book");
    let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args(["book", "--quick", "--only", "drift,norm-stats", "--out"])
        .arg(&book)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = serve_with(None, &["--book", book.to_str().unwrap()]);
    let (code, body) = get(&s, "/api/book");
    assert_eq!(code, 200, "{body}");
    let v = json_body(&body);
    let claim = |id: &str| claim_of(&v, id);
    let c1 = claim("C1");
    assert!(c1["statement"].as_str().unwrap().len() > 20, "{c1}");
    assert_eq!(c1["chapters"][0]["experiment"], "drift", "{c1}");
    assert!(c1["overall"].is_string(), "{c1}");
    assert!(c1["qualified_by"].is_array(), "{c1}");
    // A claim no chapter here checked.
    assert!(claim("C13")["overall"].is_null());
    // The page's translations.
    for lang in ["en", "zh"] {
        let (code, body) = get(&s, &format!("/i18n/{lang}.json"));
        assert_eq!(code, 200, "{body}");
        assert!(json_body(&body)["ui"]["book.heading"].is_string(), "{lang}");
    }
    let ids: Vec<&str> = v["chapters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["drift", "norm-stats"]);
    let (code, body) = get(&s, "/api/book/drift");
    assert_eq!(code, 200, "{body}");
    let ch = json_body(&body);
    assert_eq!(ch["quick"], true);
    assert_eq!(ch["verdicts"][0]["claim"], "C1");
    assert!(!ch["verdicts"][0]["evidence"].as_str().unwrap().is_empty());
    assert!(ch["settings"].is_object() && ch["ran_on"]["date"].is_string());
    assert!(!ch["departures"].as_array().unwrap().is_empty());
    let fig = ch["figures"][0].as_str().unwrap().to_string();
    let (code, svg) = get(&s, &format!("/api/book/drift/figure/{fig}"));
    assert_eq!(code, 200);
    assert!(svg.contains("<svg"), "{}", &svg[..svg.len().min(200)]);
    for bad in [
        "/api/book/drift/figure/nothing",
        "/api/book/drift/figure/..%2F..%2Ffindings",
        "/api/book/warmup",
        "/api/book/drift/other/x",
        "/api/book?x=1",
        "/i18n/fr.json",
        "/i18n/..%2Fen.json",
    ] {
        let (code, body) = get(&s, bad);
        assert!((400..500).contains(&code), "{bad}: {code} {body}");
        assert!(json_body(&body)["error"].is_string(), "{bad}: {body}");
    }
    drop(s);
    // Neither --book nor --runs: the published book; without it either,
    // how to get a book.
    let s = serve(None);
    let (code, body) = get(&s, "/api/book");
    assert_eq!(code, 200);
    assert_eq!(json_body(&body)["published"], true, "{body}");
    assert!(json_body(&body)["yours"].is_null(), "{body}");
    drop(s);
    let s = serve_with(None, &["--no-published"]);
    let (code, body) = get(&s, "/api/book");
    assert_eq!(code, 200);
    assert!(json_body(&body)["how_to"]
        .as_str()
        .unwrap()
        .contains("normlab book --quick"));
    let _ = std::fs::remove_dir_all(&dir);
}
