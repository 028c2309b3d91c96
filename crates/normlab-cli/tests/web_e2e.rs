//! End-to-end test of the web lab in a real headless Chromium driven over
//! WebDriver (Debian's chromium + chromium-driver; `.ci/run` installs them
//! and sets NORMLAB_REQUIRE_BROWSER=1 so a missing browser fails there).
//! Screenshots of each part go to `<target>/tmp/web-e2e/`.

#[path = "../../normlab/tests/common/skip.rs"]
mod skip;

use fantoccini::{Client, ClientBuilder, Locator};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn find(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).chain([
        PathBuf::from("/usr/bin"),
        PathBuf::from("/usr/lib/chromium"),
    ]) {
        for n in names {
            let p = dir.join(n);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// `normlab serve` with these arguments on a free port: the process (killed
/// when dropped) and its URL.
fn serve_lab(args: &[&std::ffi::OsStr]) -> (Kill, String) {
    let mut server = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("server prints its URL")
        .to_string();
    (Kill(server), url)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn make_runs(dir: &Path) {
    for (name, norm) in [("toy-layernorm", "layernorm"), ("toy-none", "none")] {
        let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
            .args([
                "train",
                "--model",
                "toy",
                "--layers",
                "2",
                "--norm",
                norm,
                "--steps",
                "40",
                "--batch",
                "8",
                "--eval-every",
                "20",
                "--eval-sequences",
                "16",
                "--log-every",
                "5",
                "--threads",
                "1",
                "--quiet",
                "--out",
            ])
            .arg(dir.join(name))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

/// Click the element `sel`.
async fn click(c: &Client, sel: &str) {
    c.find(Locator::Css(sel))
        .await
        .unwrap_or_else(|e| panic!("{sel}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {sel}: {e}"));
}

/// Click a calculator operation and wait until the log has `rows` entries.
async fn click_and_log(c: &Client, sel: &str, rows_wanted: usize) {
    click(c, sel).await;
    wait_for(sel, || async {
        (rows(c, "#calc-log tbody tr").await >= rows_wanted).then_some(())
    })
    .await;
}

async fn text(c: &Client, css: &str) -> String {
    try_text(c, css)
        .await
        .unwrap_or_else(|| panic!("no element {css} (or no text)"))
}

/// The text of the element `css` selects, or None while there is none
/// (for polling a page that is still being drawn).
async fn try_text(c: &Client, css: &str) -> Option<String> {
    c.find(Locator::Css(css)).await.ok()?.text().await.ok()
}

/// Poll until `f` returns Some or the timeout passes.
async fn wait_for<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let t0 = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            // hang bound: 60 s (idle: 2 s, the slowest page draw the test waits for)
            t0.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn rows(c: &Client, css: &str) -> usize {
    c.find_all(Locator::Css(css)).await.unwrap().len()
}

async fn shot(c: &Client, css: &str, dir: &Path, name: &str) {
    let png = c
        .find(Locator::Css(css))
        .await
        .unwrap()
        .screenshot()
        .await
        .unwrap();
    std::fs::write(dir.join(name), png).unwrap();
}

/// Wait until the simulator has finished a run other than `prev`; returns its stamp.
async fn next_sim(c: &Client, prev: String) -> String {
    wait_for("simulation", || {
        let prev = prev.clone();
        async move {
            c.find(Locator::Css("#sim"))
                .await
                .unwrap()
                .attr("data-done")
                .await
                .unwrap()
                .filter(|d| *d != prev)
        }
    })
    .await
}

fn num(s: &str) -> f64 {
    s.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a number: '{s}'"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_lab_in_headless_chromium() {
    let (Some(driver), Some(browser)) = (
        find(&["chromedriver"]),
        find(&["chromium", "chromium-browser"]),
    ) else {
        skip::skip(
            "NORMLAB_REQUIRE_BROWSER",
            "the web lab's browser test",
            "chromium and chromedriver are not installed",
            "apt-get install chromium chromium-driver",
        );
        return;
    };
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-e2e");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let runs = base.join("runs");
    make_runs(&runs);
    // A small quick book (three chapters) for the book pages, inside the
    // runs folder: gain-decay's two runs are on the dashboard, and its
    // chapter overlays them.
    let book = runs.join("book");
    let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args([
            "book",
            "--quick",
            "--only",
            "drift,norm-stats,gain-decay",
            "--out",
        ])
        .arg(&book)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // A model's report (inspect's format, the fields the dashboard draws).
    let report = base.join("tiny-model.json");
    let blocks: Vec<serde_json::Value> = (0..4)
        .map(|i| {
            serde_json::json!({"rms_out": 1.0 + i as f64, "attn_sink": 0.2, "attn_max_logit": 3.0,
                "attn_entropy": 1.0, "ffn_max": 5.0, "max_over_median": 20.0})
        })
        .collect();
    std::fs::write(
        &report,
        serde_json::json!({"model": "tiny", "architecture": "llama", "blocks": blocks}).to_string(),
    )
    .unwrap();

    // The lab, on a free port.
    let (_server, url) = serve_lab(&[
        "--runs".as_ref(),
        runs.as_os_str(),
        "--book".as_ref(),
        book.as_os_str(),
        "--report".as_ref(),
        report.as_os_str(),
    ]);

    // The browser.
    let port = free_port();
    let _driver = Kill(
        Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut caps = serde_json::Map::new();
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1300,1800",
    ];
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({"binary": browser, "args": args}),
    );
    let c = wait_for("chromedriver", || {
        let caps = caps.clone();
        async move {
            ClientBuilder::native()
                .capabilities(caps)
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
                .ok()
        }
    })
    .await;
    c.goto(&url).await.unwrap();

    // Norm calculator: the worked example, then x3 and +2.
    wait_for("calculator", || async {
        (rows(&c, "#calc-log tbody tr").await >= 1).then_some(())
    })
    .await;
    assert!(
        (num(&text(&c, "#rmsnorm-l2").await) - 2.0).abs() < 1e-3,
        "RMSNorm output length is sqrt(d) = 2"
    );
    assert!(num(&text(&c, "#layernorm-mean").await).abs() < 1e-3);
    let ln0 = text(&c, "#layernorm-out").await;
    let rms0 = text(&c, "#rmsnorm-out").await;
    assert_eq!(ln0, "[-1.0690, -0.5345, 0.0000, 1.6036]");
    click_and_log(&c, "#calc-x3", 2).await;
    assert_eq!(
        text(&c, "#layernorm-out").await,
        ln0,
        "x3 changes nothing (LayerNorm)"
    );
    assert_eq!(
        text(&c, "#rmsnorm-out").await,
        rms0,
        "x3 changes nothing (RMSNorm)"
    );
    click_and_log(&c, "#calc-plus2", 3).await;
    assert_eq!(
        text(&c, "#layernorm-out").await,
        ln0,
        "+2 changes nothing (LayerNorm)"
    );
    assert_ne!(text(&c, "#rmsnorm-out").await, rms0, "+2 changes RMSNorm");
    assert!(
        (num(&text(&c, "#rmsnorm-l2").await) - 2.0).abs() < 1e-3,
        "still length sqrt(d)"
    );
    let log = text(&c, "#calc-log tbody").await;
    assert!(
        log.contains("x3")
            && log.contains("+2")
            && log.contains("[3.0000, 6.0000, 9.0000, 18.0000]")
            && log.contains("[5.0000, 8.0000, 11.0000, 20.0000]"),
        "{log}"
    );
    // Stored in f16: the kinds it is simulated for show their stored-type
    // output; the others stay empty.
    click_and_log(&c, "#calc-dtype option:nth-child(3)", 4).await;
    let low = text(&c, "#layernorm-low").await;
    assert!(low.contains("upcast") && low.contains("max diff"), "{low}");
    assert!(text(&c, "#dyt-low").await.is_empty());
    shot(&c, "#calc", &base, "calculator.png").await;

    // Depth simulator: toggles move the summary numbers the right way.
    let read = || async {
        (
            num(&text(&c, "#sim-ratio").await),
            num(&text(&c, "#sim-final").await),
        )
    };
    let mut last = next_sim(&c, String::new()).await;
    let (ratio_res, rms_res) = read().await;
    assert!(
        ratio_res > 100.0 && rms_res > 100.0,
        "residuals alone at N = 32 grow signal and gradient: {ratio_res} {rms_res}"
    );
    click(&c, "#sim-prenorm").await;
    last = next_sim(&c, last).await;
    let (ratio_pre, rms_pre) = read().await;
    assert!(
        ratio_pre < ratio_res / 10.0 && rms_pre < rms_res / 10.0,
        "pre-norm tames both: {ratio_pre} {rms_pre}"
    );
    click(&c, "#sim-writeback").await;
    last = next_sim(&c, last).await;
    let (_, rms_wb) = read().await;
    assert!(
        rms_wb < rms_pre && (0.7..2.0).contains(&rms_wb),
        "1/sqrt(N) keeps the stream near 1: {rms_wb}"
    );
    let n = c.find(Locator::Css("#sim-n")).await.unwrap();
    n.clear().await.unwrap();
    n.send_keys("128\n").await.unwrap();
    click(&c, "#sim-run").await;
    // (Clearing the field fired a simulation of its own: wait for the one
    // the page says is at N = 128.)
    wait_for("the simulation at N = 128", || async {
        let sim = c.find(Locator::Css("#sim")).await.ok()?;
        let shown = sim.attr("data-sublayers").await.ok()??;
        (shown == "128" && sim.attr("data-done").await.ok()?? != last).then_some(())
    })
    .await;
    let (_, rms_128) = read().await;
    assert!(
        (0.7..2.0).contains(&rms_128),
        "still near 1 at N = 128: {rms_128}"
    );
    // The residual options' controls, made from their declarations:
    // ReZero's zero gate makes every block the identity (gradient ratio 1).
    // The N field's change and the button each started a simulation, so
    // wait for the page to show the gated one rather than for the next.
    click(&c, "#sim-gate option[value='rezero']").await;
    wait_for("ReZero's identity map (gradient ratio 1)", || async {
        let (ratio, _) = read().await;
        ((ratio - 1.0).abs() < 1e-3).then_some(())
    })
    .await;
    assert!(c.find(Locator::Css("#sim-charts svg")).await.is_ok());
    // The n-stream designs' controls, from their declarations too:
    // hyper-connections at init route as the plain residual (the same
    // numbers); without a pre-norm, mHC's read of about n/2 times the
    // stream grows it faster than the plain residual does.
    click(&c, "#sim-gate option[value='']").await;
    wait_for("the ungated simulation", || async {
        let (ratio, rms) = read().await;
        ((rms / rms_128 - 1.0).abs() < 1e-3 && (ratio - 1.0).abs() > 1e-2).then_some(())
    })
    .await;
    let done = || async {
        c.find(Locator::Css("#sim"))
            .await
            .unwrap()
            .attr("data-done")
            .await
            .unwrap()
            .unwrap_or_default()
    };
    let before = done().await;
    let (ratio_plain, _) = read().await;
    click(&c, "#sim-on-hc").await;
    next_sim(&c, before).await;
    let (ratio_hc, rms_hc) = read().await;
    assert!(
        (rms_hc / rms_128 - 1.0).abs() < 1e-3 && (ratio_hc / ratio_plain - 1.0).abs() < 1e-3,
        "hyper-connections at init: {ratio_hc} {rms_hc} vs {ratio_plain} {rms_128}"
    );
    click(&c, "#sim-on-hc").await;
    click(&c, "#sim-prenorm").await;
    let plain_rms = wait_for("the plain residual without a norm", || async {
        let (_, rms) = read().await;
        ((rms / rms_128 - 1.0).abs() > 1e-2).then_some(rms)
    })
    .await;
    click(&c, "#sim-on-mhc").await;
    wait_for("mHC's stream growing faster without a norm", || async {
        let (_, rms) = read().await;
        (rms > 1.3 * plain_rms).then_some(())
    })
    .await;
    shot(&c, "#sim", &base, "depth_simulator.png").await;

    // The book: every claim in the table; C1 opens its chapter, with the
    // verdict, the evidence and a figure that loads.
    wait_for("claims table", || async {
        (rows(&c, "#book-claims tbody tr").await == 27).then_some(())
    })
    .await;
    assert!(text(&c, "#claim-C13").await.contains("not run here"));
    click(&c, "#claim-C1").await;
    wait_for("C1's chapter", || async {
        c.find(Locator::Css("#chapter-drift img")).await.ok()
    })
    .await;
    let chapter = text(&c, "#book-chapter").await;
    assert!(
        chapter.contains("C1") && chapter.contains("Verdict:") && chapter.contains("departs"),
        "{chapter}"
    );
    wait_for("C1's figure", || async {
        let w = c
            .execute(
                "return document.querySelector('#chapter-drift img').naturalWidth",
                vec![],
            )
            .await
            .ok()?;
        (w.as_u64().unwrap_or(0) > 0).then_some(())
    })
    .await;
    shot(&c, "#book", &base, "book.png").await;
    // A claim a widget can show opens it at the lesson's setting: C4's
    // "+ pre-norm" gives the numbers of the toggles set by hand above (N =
    // 32, gain 1, pre-norm), whatever the simulator showed before.
    click(&c, "#claim-C4").await;
    click(&c, "#preset-C4-1").await;
    wait_for("C4's pre-norm preset", || async {
        let (ratio, rms) = read().await;
        (ratio == ratio_pre && rms == rms_pre).then_some(())
    })
    .await;
    // C5's preset: the worked example, then x3 and +2, in the log.
    let logged = rows(&c, "#calc-log tbody tr").await;
    click(&c, "#claim-C5").await;
    click(&c, "#preset-C5-0").await;
    wait_for("C5's preset in the operation log", || async {
        (rows(&c, "#calc-log tbody tr").await == logged + 3).then_some(())
    })
    .await;
    assert_eq!(text(&c, "#layernorm-out").await, ln0, "LayerNorm unmoved");
    let x = c
        .execute("return document.getElementById('calc-x').value", vec![])
        .await
        .unwrap();
    assert_eq!(x.as_str(), Some("5, 8, 11, 20"));

    // Chinese: the switch translates the interface, the claims table (C1's
    // title from zh.json, the verdict words) and the open claim, with its
    // numbers and ID unchanged; English again after.
    let translation = |lang: &str| -> serde_json::Value {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("src/web/i18n/{lang}.json"));
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let (en, zh) = (translation("en"), translation("zh"));
    let heading = |t: &serde_json::Value| t["ui"]["book.heading"].as_str().unwrap().to_string();
    let (heading_en, heading_zh) = (heading(&en), heading(&zh));
    click(&c, "#lang option[value='zh']").await;
    wait_for("the Chinese page", || async {
        (text(&c, "#book h2").await == heading_zh).then_some(())
    })
    .await;
    let c1 = zh["claims"]["C1"]["title"].as_str().unwrap().to_string();
    wait_for("C1 in Chinese", || async {
        text(&c, "#claim-C1").await.contains(&c1).then_some(())
    })
    .await;
    let row = text(&c, "#claim-C1").await;
    assert!(
        row.contains("C1") && ["成立", "不成立", "无定论"].iter().any(|w| row.contains(w)),
        "{row}"
    );
    let open = text(&c, "#book-chapter").await;
    let c5 = zh["claims"]["C5"]["statement"].as_str().unwrap();
    assert!(open.contains(c5) && open.contains("sqrt(d)"), "{open}");
    let q = zh["questions"]["norm-stats"]["question"].as_str().unwrap();
    assert!(
        open.contains(q),
        "the chapter's question in Chinese: {open}"
    );
    assert_eq!(text(&c, "#calc h2").await, "归一化计算器");
    shot(&c, "#book", &base, "book_zh.png").await;
    click(&c, "#lang option[value='en']").await;
    wait_for("the English page again", || async {
        (text(&c, "#book h2").await == heading_en).then_some(())
    })
    .await;

    // Runs dashboard: two runs listed, overlay them, open one.
    wait_for("runs list", || async {
        (rows(&c, "#runs-list tbody tr").await == 4).then_some(())
    })
    .await;
    for cb in c.find_all(Locator::Css(".run-select")).await.unwrap() {
        if !cb
            .attr("value")
            .await
            .unwrap()
            .unwrap_or_default()
            .starts_with("book/")
        {
            cb.click().await.unwrap();
        }
    }
    click(&c, "#runs-plot").await;
    wait_for("overlay charts", || async {
        (rows(&c, "#runs-charts svg").await == 7).then_some(())
    })
    .await;
    let svg = text(&c, "#runs-charts").await;
    assert!(
        svg.contains("toy-layernorm") && svg.contains("toy-none"),
        "both runs in the legend"
    );
    // The model's report beside the same runs: one chart per metric.
    click(&c, "#report-compare").await;
    wait_for("the report's charts", || async {
        (rows(&c, "#report-charts svg").await == 6).then_some(())
    })
    .await;
    let charts = text(&c, "#report-charts").await;
    assert!(
        charts.contains("tiny-model") && charts.contains("toy-none"),
        "{charts}"
    );
    c.find(Locator::LinkText("toy-none"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let status = wait_for("run detail", || async {
        c.find(Locator::Css("#run-status")).await.ok()
    })
    .await
    .text()
    .await
    .unwrap();
    assert!(
        status.contains("status") && status.contains("40 steps"),
        "{status}"
    );
    assert!(text(&c, "#run-detail pre")
        .await
        .contains("\"norm\": \"none\""));
    shot(&c, "#runs", &base, "runs_dashboard.png").await;
    // A chapter's runs: C17's chapter (gain-decay) has its run folders
    // under --runs; its button selects and overlays exactly them.
    click(&c, "#claim-C17").await;
    wait_for("the chapter's runs button", || async {
        c.find(Locator::Css("#chapter-runs-gain-decay")).await.ok()
    })
    .await;
    let charts = text(&c, "#runs-charts").await;
    click(&c, "#chapter-runs-gain-decay").await;
    let chosen = wait_for("the chapter's runs overlaid", || async {
        let v = c
            .execute(
                "return [...document.querySelectorAll('.run-select')].filter(b => b.checked).map(b => b.value)",
                vec![],
            )
            .await
            .ok()?;
        let ids: Vec<String> = v.as_array()?.iter().filter_map(|x| x.as_str().map(String::from)).collect();
        let redrawn = text(&c, "#runs-charts").await != charts;
        (redrawn && ids.len() == 2 && ids.iter().all(|i| i.starts_with("book/gain-decay/runs/")))
            .then_some(ids)
    })
    .await;
    let legend = text(&c, "#runs-charts").await;
    for id in &chosen {
        let name = id.rsplit('/').next().unwrap();
        assert!(legend.contains(name), "{name} in the overlay: {legend}");
    }
    let full = c.screenshot().await.unwrap();
    std::fs::write(base.join("page.png"), full).unwrap();
    // Without --book: the published book's verdicts (the checkout's
    // docs/findings), the quick book under --runs beside them as the
    // reader's own, marked as a smaller setting; ?lang=zh opens the page
    // in Chinese.
    {
        let own = runs.join("book");
        let (_own_lab, own_url) = serve_lab(&["--runs".as_ref(), own.as_os_str()]);
        c.goto(&format!("{own_url}?lang=en")).await.unwrap();
        let smaller = en["ui"]["book.smaller"].as_str().unwrap().to_string();
        let row = wait_for("the published verdicts with yours beside them", || async {
            let row = try_text(&c, "#claim-C17").await?;
            (row.contains("gain-decay") && row.contains(&smaller)).then_some(row)
        })
        .await;
        assert!(!row.contains("not run here"), "{row}");
        click(&c, "#claim-C17").await;
        let h = wait_for("your chapter under the claim", || async {
            try_text(&c, "#chapter-yours-gain-decay h4").await
        })
        .await;
        let mine = en["ui"]["book.yours_smaller"].as_str().unwrap();
        assert!(h.contains(mine), "{h}");
        assert!(c.find(Locator::Css("#chapter-gain-decay")).await.is_ok());
        c.goto(&format!("{own_url}?lang=zh")).await.unwrap();
        wait_for("the page in the language of ?lang=zh", || async {
            let h = try_text(&c, "#book h2").await?;
            (h == heading_zh).then_some(())
        })
        .await;
        c.goto(&format!("{url}?lang=en")).await.unwrap();
    }
    static_lab(&c, &base, &ln0).await;
    c.close().await.unwrap();

    // A browser whose language is Chinese gets the Chinese page (a fresh
    // profile: nothing remembered from the switch above).
    let mut caps = serde_json::Map::new();
    let zh_args: Vec<&str> = args.iter().copied().chain(["--lang=zh-CN"]).collect();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({"binary": browser, "args": zh_args, "prefs": {"intl.accept_languages": "zh-CN,zh"}}),
    );
    let c = ClientBuilder::native()
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap();
    c.goto(&url).await.unwrap();
    wait_for("the page in the browser's language", || async {
        (text(&c, "#calc h2").await == "归一化计算器").then_some(())
    })
    .await;
    c.close().await.unwrap();
}

/// Widget requests whose answers the static lab's WebAssembly must give
/// exactly as the server does: every norm kind on the lessons' vectors,
/// low-precision storage, the depth simulator's designs, and errors.
const WIDGET_QUERIES: &[(&str, &str)] = &[
    ("kinds", ""),
    ("residual-options", ""),
    ("calc", "norm=layernorm&x=1%2C2%2C3%2C6"),
    ("calc", "norm=rmsnorm&x=1.5%2C-3%2C4.5%2C0.25&eps=1e-6"),
    ("calc", "norm=zrmsnorm&x=5%2C8%2C11%2C20&scale=3&shift=2"),
    ("calc", "norm=dyt&x=0.1%2C-7%2C30%2C2"),
    ("calc", "norm=derf&x=0.1%2C-7%2C30%2C2"),
    (
        "calc",
        "norm=layernorm&x=300%2C-200%2C100%2C1e-3&dtype=f16&naive=true",
    ),
    ("calc", "norm=rmsnorm&x=1e-40%2C2e-40%2C-3e-40&eps=0"),
    ("calc", "norm=rmsnorm&x=3e4%2C-2e4%2C1e4&dtype=bf16"),
    ("calc", "norm=layernorm&x=1%2C%2C2"),
    ("simulate", ""),
    ("simulate", "sublayers=32&gain=1&pre_norm=true"),
    (
        "simulate",
        "sublayers=32&pre_norm=true&scale_writeback=true",
    ),
    (
        "simulate",
        "sublayers=64&gain=1.5&pre_norm=true&dyt=true&lns=true",
    ),
    ("simulate", "sublayers=16&residual=false"),
    ("simulate", "sublayers=32&rezero=true"),
    ("simulate", "sublayers=32&layerscale=0.1"),
    ("simulate", "sublayers=24&hc=4"),
    ("simulate", "sublayers=24&mhc=4&pre_norm=true"),
    ("simulate", "sublayers=abc"),
];

/// Run `script` (its last argument is the callback) in the page and parse
/// the string it hands back as JSON.
async fn call_json(c: &Client, script: &str, args: Vec<serde_json::Value>) -> serde_json::Value {
    let v = c.execute_async(script, args).await.unwrap();
    serde_json::from_str(v.as_str().expect("a JSON string")).unwrap()
}

/// An answer without its SVG (the browser lays text out with its own fonts).
fn numbers(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("svg");
    }
    v
}

/// The static lab (`normlab site`, of the published book) behind a plain
/// file server: the same widget answers as the served lab (which `c` shows
/// now, with `ln0` its calculator's worked example), to the bit; every
/// preset showing what it showed there; every claim readable in both
/// languages with its figures, in the static lab and in a served lab of
/// the same book; the dashboard's place says it needs the server.
async fn static_lab(c: &Client, base: &Path, ln0: &str) {
    let pkg = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/site-wasm");
    let why_not = match (package_time(&pkg), newest_source()) {
        (None, _) => Some("no WebAssembly build"),
        (Some(built), newest) if newest > built => {
            Some("the WebAssembly build is older than the widgets' sources")
        }
        _ if find(&["python3"]).is_none() => Some("no python3 for its file server"),
        _ => None,
    };
    if let Some(why) = why_not {
        skip::skip(
            "NORMLAB_REQUIRE_BROWSER",
            "the static lab's part of the browser test",
            &format!("{why} ({})", pkg.display()),
            "run scripts/build_site_wasm.sh (needs the wasm32 target and wasm-bindgen-cli: see .ci/run)",
        );
        return;
    }
    let served_presets = run_presets(c).await;
    let mut server_answers = Vec::new();
    for (route, q) in WIDGET_QUERIES {
        let url = format!("/api/{route}{}{q}", if q.is_empty() { "" } else { "?" });
        let v = call_json(
            c,
            "const done = arguments[1]; fetch(arguments[0]).then(r => r.text()).then(done);",
            vec![url.into()],
        )
        .await;
        server_answers.push(v);
    }
    // The published book (every kind of verdict, every figure); the quick
    // one served above has three chapters.
    let published = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/findings");
    let site = base.join("site");
    let o = Command::new(env!("CARGO_BIN_EXE_normlab"))
        .args(["site", "--out"])
        .arg(&site)
        .arg("--book")
        .arg(&published)
        .arg("--wasm")
        .arg(&pkg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Hosted under a sub-path, as a course page would put it.
    let port = free_port();
    let _files = Kill(
        Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1", "--directory"])
            .arg(base)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("http://127.0.0.1:{port}/site/");
    wait_for("the file server", || async {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    })
    .await;
    c.goto(&url).await.unwrap();
    wait_for("the static calculator", || async {
        (rows(c, "#calc-log tbody tr").await >= 1).then_some(())
    })
    .await;
    assert_eq!(text(c, "#layernorm-out").await, ln0, "the worked example");
    // Every widget answer equals the server's (errors: the same message).
    for ((route, q), want) in WIDGET_QUERIES.iter().zip(&server_answers) {
        let got = call_json(
            c,
            "const done = arguments[2]; widgets().then(m => done(m.api(arguments[0], arguments[1])));",
            vec![(*route).into(), (*q).into()],
        )
        .await;
        assert_eq!(
            numbers(got),
            numbers(want.clone()),
            "/api/{route}?{q}: the static lab differs from the server"
        );
    }
    // Every "Try it in the lab" preset shows what it showed on the server.
    assert_eq!(run_presets(c).await, served_presets, "the presets' widgets");
    // The published book: every claim readable, in both languages.
    let kinds = read_every_claim(c, &site, "static").await;
    shot(c, "main", base, "static_lab.png").await;
    click(c, "#lang option[value='en']").await;
    wait_for("the static page in English", || async {
        (text(c, "#calc h2").await != "归一化计算器").then_some(())
    })
    .await;
    let all: std::collections::BTreeSet<String> =
        ["holds", "holds partly", "does not hold", "inconclusive"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    assert_eq!(
        kinds, all,
        "the published book's chapters have every kind of verdict"
    );
    assert!(c.find(Locator::Css("#sim-charts svg")).await.is_ok());
    assert!(text(c, "#runs").await.contains("normlab serve"));
    // The served lab shows the published book the same way.
    let (_published_lab, published_url) = serve_lab(&["--book".as_ref(), published.as_os_str()]);
    c.goto(&published_url).await.unwrap();
    assert_eq!(read_every_claim(c, &site, "served").await, all);
    click(c, "#lang option[value='en']").await;
}

/// The "Try it in the lab" presets: (claim, button).
const PRESET_BUTTONS: &[(&str, usize)] = &[
    ("C4", 0),
    ("C4", 1),
    ("C4", 2),
    ("C5", 0),
    ("C6", 0),
    ("C8", 0),
    ("C8", 1),
    ("C25", 0),
    ("C27", 0),
    ("C27", 1),
];

/// Click every preset in turn; after each, what its widget shows (the
/// simulator's summary, or the calculator's outputs and stored-type lines).
async fn run_presets(c: &Client) -> Vec<Vec<String>> {
    let done = || async {
        c.find(Locator::Css("#sim"))
            .await
            .unwrap()
            .attr("data-done")
            .await
            .unwrap()
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for (claim, i) in PRESET_BUTTONS {
        // The page may still be loading the book (the claims table is drawn
        // from /api/book after the page itself): wait for the claim's row.
        let row = format!("#claim-{claim}");
        wait_for(&row, || async { c.find(Locator::Css(&row)).await.ok() }).await;
        click(c, &row).await;
        let button = format!("#preset-{claim}-{i}");
        wait_for(&button, || async {
            c.find(Locator::Css(&button)).await.ok()
        })
        .await;
        let (sim_before, log_before) = (done().await, rows(c, "#calc-log tbody tr").await);
        click(c, &button).await;
        wait_for(&format!("{button}'s result"), || async {
            let calc_done = rows(c, "#calc-log tbody tr").await > log_before
                && (*claim != "C5" || rows(c, "#calc-log tbody tr").await == log_before + 3);
            (calc_done || done().await != sim_before).then_some(())
        })
        .await;
        // The preset's own widget (the other keeps what it showed before).
        let sim = ["C4", "C25", "C27"].contains(claim);
        let fields: &[&str] = if sim {
            &["#sim-ratio", "#sim-final", "#sim-error"]
        } else {
            &[
                "#layernorm-out",
                "#rmsnorm-out",
                "#zrmsnorm-out",
                "#layernorm-low",
                "#rmsnorm-low",
                "#calc-error",
            ]
        };
        let mut shown = vec![format!("{claim}-{i}")];
        for css in fields {
            shown.push(text(c, css).await);
        }
        out.push(shown);
    }
    out
}

/// The published book (whose pages `site` holds) in the lab `c` shows:
/// every claim opens, in English and then in Chinese (left switched on),
/// with its statement and each of its chapters' figures loaded, its row
/// showing each verdict in the language's words. Returns the verdicts seen.
async fn read_every_claim(
    c: &Client,
    site: &Path,
    lab: &str,
) -> std::collections::BTreeSet<String> {
    let table: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(site.join("api/book.json")).unwrap())
            .unwrap();
    let zh: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(site.join("i18n/zh.json")).unwrap()).unwrap();
    let en: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(site.join("i18n/en.json")).unwrap()).unwrap();
    wait_for(&format!("the {lab} claims table"), || async {
        (rows(c, "#book-claims tbody tr").await == 27).then_some(())
    })
    .await;
    let claims = table["claims"].as_array().unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for lang in ["en", "zh"] {
        if lang == "zh" {
            click(c, "#lang option[value='zh']").await;
            wait_for(&format!("the {lab} page in Chinese"), || async {
                (text(c, "#calc h2").await == "归一化计算器").then_some(())
            })
            .await;
            // ... and its claims table redrawn in Chinese (a fetch later).
            wait_for(&format!("the {lab} claims table in Chinese"), || async {
                let t = c.find(Locator::Css("#book-claims")).await.ok()?;
                (t.attr("data-lang").await.ok()?? == "zh").then_some(())
            })
            .await;
        }
        let words = if lang == "en" { &en } else { &zh };
        for claim in claims {
            let id = claim["id"].as_str().unwrap();
            let figures: usize = claim["chapters"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| {
                    let f = site.join(format!(
                        "api/book/{}.json",
                        h["experiment"].as_str().unwrap()
                    ));
                    let ch: serde_json::Value =
                        serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
                    ch["figures"].as_array().unwrap().len()
                })
                .sum();
            // The overall verdict and each chapter's, in the row.
            let row = text(c, &format!("#claim-{id}")).await;
            let verdicts = claim["chapters"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| &h["verdict"])
                .chain([&claim["overall"]]);
            for v in verdicts.filter_map(|v| v.as_str()) {
                kinds.insert(v.to_string());
                let key = format!("verdict.{}", v.replace(' ', "_"));
                let word = words["ui"][&key].as_str().unwrap();
                assert!(row.contains(word), "{lab} {lang} {id}: '{word}' in {row}");
            }
            click(c, &format!("#claim-{id}")).await;
            let statement = if lang == "en" {
                claim["statement"].as_str().unwrap()
            } else {
                zh["claims"][id]["statement"].as_str().unwrap()
            };
            wait_for(&format!("{lab} {lang} {id} with its {figures} figure(s)"), || async {
                let open = text(c, "#book-chapter").await;
                let loaded = c
                    .execute(
                        "return [...document.querySelectorAll('#book-chapter img')].filter(i => i.complete && i.naturalWidth > 0).length",
                        vec![],
                    )
                    .await
                    .ok()?
                    .as_u64()?;
                (open.contains(statement) && loaded as usize == figures).then_some(())
            })
            .await;
        }
    }
    kinds
}

/// When the WebAssembly package was built (its .wasm file's time).
fn package_time(pkg: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(pkg.join("normlab_wasm_bg.wasm"))
        .ok()?
        .modified()
        .ok()
}

/// The newest change to the sources the package is built from.
fn newest_source() -> std::time::SystemTime {
    fn walk(dir: &Path, newest: &mut std::time::SystemTime) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, newest);
            } else if let Ok(t) = e.metadata().and_then(|m| m.modified()) {
                *newest = (*newest).max(t);
            }
        }
    }
    let mut newest = std::time::SystemTime::UNIX_EPOCH;
    let crates = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    for c in ["normlab-kernels", "normlab", "normlab-lab", "normlab-wasm"] {
        walk(&crates.join(c).join("src"), &mut newest);
    }
    newest
}
