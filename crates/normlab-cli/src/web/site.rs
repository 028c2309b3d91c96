//! `normlab site --out DIR`: the web lab as a static folder that any web
//! server can host (a teacher puts the companion online; the students
//! install nothing). The page is the served lab's, marked static: its
//! widgets call the WebAssembly build of `normlab_lab::widgets` (the code
//! `normlab serve` answers with) and its book pages read JSON files
//! written here from the same book functions the server uses:
//!
//! - `index.html`, `i18n/<lang>.json`;
//! - `wasm/normlab_wasm.js`, `wasm/normlab_wasm_bg.wasm` (from
//!   `scripts/build_site_wasm.sh`);
//! - `api/book.json` (the claims table), `api/book/<id>.json` (a chapter),
//!   `api/book/<id>/figure/<stem>.svg` (its figures).
//!
//! The runs dashboard needs the server and is not in it. A folder that
//! holds anything but an earlier site is refused, never overwritten.

use super::{book::HOW_TO, PAGE, TRANSLATIONS};
use anyhow::{bail, Context};
use clap::Args;
use normlab::io::{atomic_write, create_dir_all};
use normlab_lab::exp::book_view;
use serde_json::json;
use std::path::{Path, PathBuf};

/// The file that marks a folder as one `normlab site` wrote.
const MARK: &str = ".normlab-site";

/// The WebAssembly package's files (wasm-bindgen's `--target web` output).
const WASM_FILES: [&str; 2] = ["normlab_wasm.js", "normlab_wasm_bg.wasm"];

/// Where `scripts/build_site_wasm.sh` puts the package by default.
const DEFAULT_WASM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/site-wasm");

/// Write the web lab as a static folder.
#[derive(Args, Debug)]
pub struct SiteCmd {
    /// Output folder (new, empty, or an earlier `normlab site` output).
    #[arg(long)]
    out: PathBuf,
    /// A book folder (`normlab book --out`, or the published `docs/findings`)
    /// whose chapters the site shows; without it the book section says how
    /// to get one.
    #[arg(long)]
    book: Option<PathBuf>,
    /// The widgets' WebAssembly package (`scripts/build_site_wasm.sh`
    /// writes it to target/site-wasm).
    #[arg(long)]
    wasm: Option<PathBuf>,
}

/// `normlab site`.
pub fn run(c: SiteCmd) -> anyhow::Result<()> {
    let wasm = c
        .wasm
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_WASM));
    for f in WASM_FILES {
        if !wasm.join(f).is_file() {
            bail!(
                "no WebAssembly build of the widgets in {} ({f} is missing): run scripts/build_site_wasm.sh, or pass --wasm DIR",
                wasm.display()
            );
        }
    }
    if let Some(b) = &c.book {
        if !b.is_dir() {
            bail!("--book {}: no such folder", b.display());
        }
    }
    claim_folder(&c.out)?;
    let page = PAGE.replacen(
        r#"<meta name="normlab-mode" content="server">"#,
        r#"<meta name="normlab-mode" content="static">"#,
        1,
    );
    if page == PAGE {
        bail!("the page has no mode marker to switch (a bug)");
    }
    put(&c.out, "index.html", page.as_bytes())?;
    for (lang, body) in TRANSLATIONS {
        put(&c.out, &format!("i18n/{lang}.json"), body.as_bytes())?;
    }
    let mut wasm_bytes = 0;
    for f in WASM_FILES {
        let bytes = std::fs::read(wasm.join(f))
            .with_context(|| format!("cannot read {}", wasm.join(f).display()))?;
        wasm_bytes += bytes.len();
        put(&c.out, &format!("wasm/{f}"), &bytes)?;
    }
    let (chapters, figures) = match &c.book {
        Some(dir) => write_book(dir, &c.out)?,
        None => {
            let empty = json!({"claims": [], "chapters": [], "how_to": HOW_TO});
            put(&c.out, "api/book.json", empty.to_string().as_bytes())?;
            (0, 0)
        }
    };
    println!(
        "wrote {}: the page, {} chapter(s) with {} figure(s), the widgets' WebAssembly ({} KiB). Serve it with any static web server, e.g. python3 -m http.server -d {} 8000",
        c.out.display(),
        chapters,
        figures,
        wasm_bytes / 1024,
        c.out.display()
    );
    Ok(())
}

/// The book's pages as files: the server's answers to `/api/book` and
/// `/api/book/<id>` (without dashboard runs), and every listed figure.
fn write_book(dir: &Path, out: &Path) -> anyhow::Result<(usize, usize)> {
    let mut table = book_view::claims_table(dir)?;
    let ids: Vec<String> = table["chapters"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["id"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    if ids.is_empty() {
        table["how_to"] = json!(HOW_TO);
    }
    table["folder"] = json!(dir.display().to_string());
    put(out, "api/book.json", table.to_string().as_bytes())?;
    let mut figures = 0;
    for id in &ids {
        let Some(mut ch) = book_view::chapter(dir, id)? else {
            continue;
        };
        ch["runs"] = json!([]);
        put(
            out,
            &format!("api/book/{id}.json"),
            ch.to_string().as_bytes(),
        )?;
        for stem in ch["figures"].as_array().into_iter().flatten() {
            let Some(stem) = stem.as_str() else { continue };
            let src = dir.join(id).join(format!("{stem}.svg"));
            let bytes = std::fs::read(&src)
                .with_context(|| format!("chapter {id}: cannot read figure {}", src.display()))?;
            put(out, &format!("api/book/{id}/figure/{stem}.svg"), &bytes)?;
            figures += 1;
        }
    }
    Ok((ids.len(), figures))
}

/// Make `out` ours: create it, or accept it empty or marked as an earlier
/// site; refuse anything else.
fn claim_folder(out: &Path) -> anyhow::Result<()> {
    if out.exists() {
        if !out.is_dir() {
            bail!("--out {}: exists and is not a folder", out.display());
        }
        let empty = std::fs::read_dir(out)
            .with_context(|| format!("cannot read {}", out.display()))?
            .next()
            .is_none();
        if !empty && !out.join(MARK).is_file() {
            bail!(
                "--out {}: the folder holds other files (not an earlier normlab site); choose a new or empty folder",
                out.display()
            );
        }
    }
    // An earlier site's pages go: a chapter this book lacks must not stay.
    for sub in ["api", "wasm", "i18n"] {
        let d = out.join(sub);
        if d.is_dir() {
            std::fs::remove_dir_all(&d).with_context(|| format!("cannot clear {}", d.display()))?;
        }
    }
    put(out, MARK, b"written by normlab site\n")
}

/// Write `rel` under `out` (atomically, creating folders).
fn put(out: &Path, rel: &str, bytes: &[u8]) -> anyhow::Result<()> {
    let path = out.join(rel);
    if let Some(parent) = path.parent() {
        create_dir_all(parent)?;
    }
    atomic_write(&path, bytes)?;
    Ok(())
}
