//! The web lab's JSON API over real HTTP: answers, validation (4xx with a
//! clear message, never a crash or a hang) and confinement to the runs folder.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(runs: Option<&std::path::Path>) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_normlab"));
    cmd.args(["serve", "--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped());
    if let Some(r) = runs {
        cmd.arg("--runs").arg(r);
    }
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap();
    Server {
        child,
        addr: url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string(),
    }
}

/// GET `path`; returns (status, body).
fn get(s: &Server, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(&s.addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
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
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn json_body(body: &str) -> serde_json::Value {
    // Bodies may be chunked: take from the first '{' to the last '}'.
    let (a, b) = (body.find('{').unwrap(), body.rfind('}').unwrap());
    serde_json::from_str(&body[a..=b]).unwrap()
}

#[test]
fn api_answers_and_validates() {
    let dir = std::env::temp_dir().join(format!("normlab-web-api-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
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
            "--quiet",
            "--out",
        ])
        .arg(dir.join("a"))
        .output()
        .unwrap();
    assert!(o.status.success());
    let s = serve(Some(&dir));
    let (code, page) = get(&s, "/");
    assert_eq!(code, 200);
    assert!(page.contains("normlab lab") && page.contains("calc-x3"));
    let (code, body) = get(&s, "/api/calc?norm=rmsnorm&x=1,2,3,6");
    assert_eq!(code, 200);
    let v = json_body(&body);
    assert!((v["l2"].as_f64().unwrap() - 2.0).abs() < 1e-5);
    let (code, body) = get(
        &s,
        "/api/simulate?sublayers=16&gain=1&residual=true&pre_norm=true&scale_writeback=true",
    );
    assert_eq!(code, 200);
    let v = json_body(&body);
    assert_eq!(v["residual_rms"].as_array().unwrap().len(), 17);
    assert!(v["svg"].as_str().unwrap().contains("<svg"));
    let (code, body) = get(&s, "/api/runs");
    assert_eq!(code, 200);
    assert_eq!(json_body(&body)["runs"][0]["id"], "a");
    let (code, body) = get(&s, "/api/runs/a");
    assert_eq!(code, 200);
    assert_eq!(json_body(&body)["summary"]["steps"], 5);
    let (code, body) = get(&s, "/api/plot?ids=a&metric=grad_norm");
    assert_eq!(code, 200);
    assert!(body.contains("<svg"));
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
    ] {
        let (code, body) = get(&s, &path);
        assert_eq!(code, want, "{path}: {body}");
        assert!(body.contains(msg), "{path}: {body}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
