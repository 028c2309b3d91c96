//! The web lab as the tests meet it: `normlab serve` started on a free
//! port (stopped when dropped), plain HTTP/1.1 requests over a socket, and
//! the server process's memory.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

pub struct Server {
    pub child: Child,
    pub addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn serve(runs: Option<&std::path::Path>) -> Server {
    serve_with(runs, &[])
}

pub fn serve_with(runs: Option<&std::path::Path>, extra: &[&str]) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_normlab"));
    cmd.args(["serve", "--addr", "127.0.0.1:0"])
        .args(extra)
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
pub fn get(s: &Server, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(&s.addr).unwrap();
    stream
        // hang bound: 30 s (idle: 1 s, the slowest single request of the lab's tests)
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

/// A memory field of a process's /proc status (`VmRSS`: resident now,
/// `VmHWM`: its peak), in MiB.
pub fn status_mib(pid: u32, field: &str) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = s
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap();
    kib / 1024.0
}

/// Resident memory of a process (VmRSS), in MiB.
pub fn rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS")
}

/// The flags of a one-block GPT trained for 5 steps.
pub const TINY: [&str; 8] = [
    "--layers",
    "1",
    "--steps",
    "5",
    "--batch",
    "4",
    "--eval-sequences",
    "4",
];

/// Train a one-block GPT for 5 steps into `out` (a run folder).
pub fn train_tiny(out: &std::path::Path) {
    train_with(out, &TINY);
}

/// `normlab train ARGS --quiet --out OUT`, which must succeed.
pub fn train_with(out: &std::path::Path, args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .arg("train")
        .args(args)
        .args(["--quiet", "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
