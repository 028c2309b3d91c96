//! The layering the crates promise, checked on their sources: the library
//! (`normlab`) never names the lab (`normlab-lab`), and inside the lab no
//! file imports an item from its parent module's file (`use super::x` must
//! name a sibling file, never an item of `mod.rs`), so that the files of a
//! module import each other without a cycle: a `mod.rs` only declares its
//! files and re-exports what they own. Test sections (`#[cfg(test)]`, and
//! files named `tests.rs`) may use `super::*`.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

/// The code before the first `#[cfg(test)]`.
fn non_test(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

/// The first path segment of every `super::` reference in `code`, with
/// the brace groups of `use super::{a, b::c}` expanded.
fn super_names(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("super::") {
        rest = &rest[i + "super::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let first = item.trim().split("::").next().unwrap_or("").trim();
                if !first.is_empty() {
                    names.push(first.to_string());
                }
            }
        } else {
            let ident: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '*')
                .collect();
            names.push(ident);
        }
    }
    names
}

/// The module names of a folder: its `.rs` files (without the extension)
/// and its sub-folders.
fn modules_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            let stem = p.file_stem()?.to_string_lossy().into_owned();
            (p.is_dir() || p.extension().is_some_and(|x| x == "rs")).then_some(stem)
        })
        .collect()
}

#[test]
fn the_library_never_names_the_lab() {
    let mut files = Vec::new();
    rust_files(&crate_src("normlab"), &mut files);
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(
            !text.contains("normlab_lab"),
            "{} names the lab crate",
            f.display()
        );
    }
    let manifest = std::fs::read_to_string(crate_src("normlab").join("../Cargo.toml")).unwrap();
    assert!(
        !manifest.contains("normlab-lab"),
        "crates/normlab/Cargo.toml depends on the lab"
    );
}

#[test]
fn no_file_of_the_lab_imports_from_its_parent_module_file() {
    let mut files = Vec::new();
    rust_files(&crate_src("normlab-lab"), &mut files);
    let mut upward = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy();
        if name == "lib.rs" || name == "tests.rs" {
            continue;
        }
        // A file's `super` is its folder's module; a mod.rs's is the folder
        // above: the names that may follow `super::` are that module's files.
        let dir = f.parent().unwrap();
        let siblings = if name == "mod.rs" {
            modules_in(dir.parent().unwrap())
        } else {
            modules_in(dir)
        };
        let text = std::fs::read_to_string(f).unwrap();
        for n in super_names(non_test(&text)) {
            if !siblings.contains(&n) {
                upward.push(format!("{}: super::{n}", f.display()));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports of a parent module's items (move the item into a file of its own):\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_scanner_sees_groups_and_paths() {
    let names = super_names("use super::{a, b::c};\nlet x = super::d::e(super::f);");
    assert_eq!(names, ["a", "b", "d", "f"]);
}

/// Source files stay readable in one sitting: none under `crates/*/src`
/// is over 600 lines (test files may be longer).
#[test]
fn no_source_file_is_over_600_lines() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut long = Vec::new();
    for c in std::fs::read_dir(&crates).unwrap() {
        let src = c.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for f in files {
            let n = std::fs::read_to_string(&f).unwrap().lines().count();
            if n > 600 {
                long.push(format!("{} ({n} lines)", f.display()));
            }
        }
    }
    assert!(long.is_empty(), "split these files: {}", long.join(", "));
}
