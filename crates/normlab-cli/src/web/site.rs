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
//! The runs dashboard needs the server and is not in it. The site is
//! written beside `--out` first and moved into place only when complete:
//! an earlier site's entries (those above) are then replaced whole, other
//! files in its folder are kept; a folder that holds anything but an
//! earlier site is refused.

use super::book::{claims_page, figure_path, MAX_FIGURE_BYTES};
use super::state::{PAGE, TRANSLATIONS};
use crate::ui::bad;
use anyhow::{bail, Context};
use clap::Args;
use normlab::io::{atomic_write, create_dir_all};
use normlab_lab::book::view as book_view;
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
    let mut wasm_files = Vec::new();
    for f in WASM_FILES {
        let path = wasm.join(f);
        let bytes = std::fs::read(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => anyhow::anyhow!(
                "no WebAssembly build of the widgets in {} ({f} is missing): run scripts/build_site_wasm.sh, or pass --wasm DIR",
                wasm.display()
            ),
            _ => anyhow::anyhow!("cannot read {}: {e}", path.display()),
        })?;
        wasm_files.push((f, bytes));
    }
    if let Some(b) = &c.book {
        if !b.is_dir() {
            return bad(format!(
                "--book {}: no such folder; the published book is docs/findings, or write one with normlab book --quick --out {}",
                b.display(),
                b.display()
            ));
        }
    }
    check_folder(&c.out)?;
    // Everything is written to a folder beside --out first; only a complete
    // site replaces an earlier one's files.
    let name = c
        .out
        .file_name()
        .map_or("site".into(), |n| n.to_string_lossy().into_owned());
    let tmp = c
        .out
        .with_file_name(format!(".{name}.normlab-site-{}", std::process::id()));
    let built = build(&c, &tmp, &wasm_files);
    let moved = built.and_then(|summary| {
        replace_entries(&tmp, &c.out)?;
        Ok(summary)
    });
    let _ = std::fs::remove_dir_all(&tmp);
    let (chapters, figures) = moved?;
    let wasm_bytes: usize = wasm_files.iter().map(|(_, b)| b.len()).sum();
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

/// Move the complete site in `new` into `out`: an earlier site's entries
/// are first moved aside (into `new/.old`), then the new ones moved in;
/// if a move fails, what was moved in is taken out and the earlier
/// entries are put back, so `out` holds the old site or the new one, never
/// a mix.
fn replace_entries(new: &Path, out: &Path) -> anyhow::Result<()> {
    create_dir_all(out)?;
    let old = new.join(".old");
    create_dir_all(&old)?;
    let mut aside = Vec::new();
    let mut placed = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        for entry in ENTRIES {
            let to = out.join(entry);
            if to.symlink_metadata().is_ok() {
                std::fs::rename(&to, old.join(entry))
                    .with_context(|| format!("cannot move {} aside", to.display()))?;
                aside.push(entry);
            }
        }
        for entry in ENTRIES {
            let to = out.join(entry);
            std::fs::rename(new.join(entry), &to)
                .with_context(|| format!("cannot move {} into place", to.display()))?;
            placed.push(entry);
        }
        Ok(())
    })();
    if result.is_err() {
        for entry in placed {
            let p = out.join(entry);
            let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
        }
        for entry in aside {
            let _ = std::fs::rename(old.join(entry), out.join(entry));
        }
    }
    result
}

/// What a site consists of (the entries an earlier site's are replaced by).
const ENTRIES: [&str; 5] = ["index.html", "i18n", "wasm", "api", MARK];

/// Write the whole site into `dir`: (chapters, figures).
fn build(c: &SiteCmd, dir: &Path, wasm: &[(&str, Vec<u8>)]) -> anyhow::Result<(usize, usize)> {
    let page = PAGE.replacen(
        r#"<meta name="normlab-mode" content="server">"#,
        r#"<meta name="normlab-mode" content="static">"#,
        1,
    );
    if page == PAGE {
        bail!("the page has no mode marker to switch (a bug)");
    }
    put(dir, "index.html", page.as_bytes())?;
    for (lang, body) in TRANSLATIONS {
        put(dir, &format!("i18n/{lang}.json"), body.as_bytes())?;
    }
    for (f, bytes) in wasm {
        put(dir, &format!("wasm/{f}"), bytes)?;
    }
    put(dir, MARK, b"written by normlab site\n")?;
    // The folder by its name only (not the machine's path to it).
    let label = c
        .book
        .as_ref()
        .and_then(|b| b.canonicalize().ok())
        .and_then(|b| b.file_name().map(|n| n.to_string_lossy().into_owned()));
    let table = claims_page(c.book.as_deref(), label.as_deref())?;
    put(dir, "api/book.json", table.to_string().as_bytes())?;
    let ids: Vec<&str> = table["chapters"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["id"].as_str()).collect())
        .unwrap_or_default();
    let (Some(book), false) = (&c.book, ids.is_empty()) else {
        return Ok((0, 0));
    };
    let mut figures = 0;
    for id in &ids {
        let Some(mut ch) = book_view::chapter(book, id)? else {
            continue;
        };
        ch["runs"] = json!([]);
        put(
            dir,
            &format!("api/book/{id}.json"),
            ch.to_string().as_bytes(),
        )?;
        for stem in ch["figures"].as_array().into_iter().flatten() {
            let stem = stem.as_str().unwrap_or_default();
            let Some(src) = figure_path(book, id, &ch, stem) else {
                return bad(format!(
                    "chapter {id} lists a figure '{stem}' that is not a plain file name"
                ));
            };
            let bytes = normlab::io::read_capped(&src, MAX_FIGURE_BYTES)
                .with_context(|| format!("chapter {id}: cannot read figure {}", src.display()))?;
            put(dir, &format!("api/book/{id}/figure/{stem}.svg"), &bytes)?;
            figures += 1;
        }
    }
    Ok((ids.len(), figures))
}

/// `out` must be new, an empty folder or an earlier site.
fn check_folder(out: &Path) -> anyhow::Result<()> {
    if !out.exists() {
        return Ok(());
    }
    if !out.is_dir() {
        return bad(format!(
            "--out {}: exists and is not a folder",
            out.display()
        ));
    }
    let empty = std::fs::read_dir(out)
        .with_context(|| format!("cannot read {}", out.display()))?
        .next()
        .is_none();
    if !empty && !out.join(MARK).is_file() {
        return bad(format!(
            "--out {}: the folder holds other files (not an earlier normlab site); choose a new or empty folder",
            out.display()
        ));
    }
    Ok(())
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
