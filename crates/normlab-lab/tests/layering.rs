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

// ---------------------------------------------------------------------
// No import cycle between files. Every crate's (and the Python bridge's)
// source files form a graph: file A -> file B when A's code names an item
// that B owns (a path through `crate::`, `self::`, `super::` or a child
// module, followed through `pub use` re-exports to the file that defines
// the item; inline modules such as `mod x86 { .. }` count as their file).
// Declaring a module (`mod x;`) and re-exporting (`pub use x::Y`) are not
// uses. The graph must have no cycle: a piece two files share gets a file
// of its own, so each file can be read after the files it uses.
// ---------------------------------------------------------------------

/// Source with comments, string and char literals blanked (kept as
/// spaces, so that positions and braces outside them stay as they were).
fn code_only(text: &str) -> Vec<char> {
    let c: Vec<char> = text.chars().collect();
    let mut out = c.clone();
    let mut i = 0;
    let blank = |out: &mut Vec<char>, a: usize, b: usize| {
        for x in &mut out[a..b.min(c.len())] {
            if *x != '\n' {
                *x = ' ';
            }
        }
    };
    while i < c.len() {
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            let e = (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len());
            blank(&mut out, i, e);
            i = e;
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let (mut j, mut depth) = (i + 2, 1);
            while j < c.len() && depth > 0 {
                if c[j] == '/' && c.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 1;
                } else if c[j] == '*' && c.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 1;
                }
                j += 1;
            }
            blank(&mut out, i, j);
            i = j;
        } else if c[i] == 'r'
            && (c.get(i + 1) == Some(&'"') || c.get(i + 1) == Some(&'#'))
            && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            // A raw string r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            blank(&mut out, i, j);
            i = j;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                if c[j] == '\\' {
                    j += 1;
                }
                j += 1;
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if c[i] == '\'' {
            // A char literal ('a', '\n', '\u{..}'); else a lifetime.
            if c.get(i + 1) == Some(&'\\') {
                let e = (i + 2..c.len()).find(|&j| c[j] == '\'').unwrap_or(c.len());
                blank(&mut out, i, e + 1);
                i = e + 1;
            } else if c.get(i + 2) == Some(&'\'') {
                blank(&mut out, i, i + 3);
                i += 3;
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// A crate's files: module path (`["nn", "mhc"]`) -> file.
struct Tree {
    files: Vec<(Vec<String>, PathBuf)>,
}

impl Tree {
    fn of(src: &Path) -> Tree {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        paths.sort();
        let files = paths
            .into_iter()
            .map(|p| {
                let rel = p.strip_prefix(src).unwrap().with_extension("");
                let mut m: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                    m.pop();
                }
                (m, p)
            })
            .collect();
        Tree { files }
    }

    fn file_of(&self, m: &[String]) -> Option<usize> {
        self.files.iter().position(|(p, _)| p == m)
    }

    fn is_module(&self, m: &[String]) -> bool {
        self.file_of(m).is_some()
    }
}

/// One path a file names: the module it is named in (the file's module,
/// inside any inline modules), the path's segments from there (a leading
/// `crate`, `self`, `super` kept), and whether it is part of a `pub use`.
struct Named {
    module: Vec<String>,
    segs: Vec<String>,
    reexport: bool,
    /// The name a `use ... as NAME` gives it (re-exports only).
    alias: Option<String>,
}

fn ident_at(c: &[char], i: usize) -> Option<(String, usize)> {
    let start = i;
    let mut j = i;
    while j < c.len() && (c[j].is_alphanumeric() || c[j] == '_') {
        j += 1;
    }
    (j > start && !c[start].is_ascii_digit()).then(|| (c[start..j].iter().collect(), j))
}

fn skip_ws(c: &[char], mut i: usize) -> usize {
    while i < c.len() && c[i].is_whitespace() {
        i += 1;
    }
    i
}

/// The paths of a `use` tree or a path expression starting at `i` (after
/// any leading segments in `prefix`), with `{a, b::c}` groups expanded;
/// returns where it ends.
fn read_paths(
    c: &[char],
    mut i: usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    let mut segs = prefix;
    loop {
        i = skip_ws(c, i);
        if c.get(i) == Some(&'{') {
            i += 1;
            loop {
                i = skip_ws(c, i);
                if c.get(i) == Some(&'}') || i >= c.len() {
                    return i + 1;
                }
                i = read_paths(c, i, segs.clone(), out);
                i = skip_ws(c, i);
                if c.get(i) == Some(&',') {
                    i += 1;
                }
            }
        }
        if c.get(i) == Some(&'*') {
            segs.push("*".into());
            out.push((segs, None));
            return i + 1;
        }
        let Some((id, j)) = ident_at(c, i) else {
            out.push((segs, None));
            return i;
        };
        segs.push(id);
        i = skip_ws(c, j);
        if c.get(i) == Some(&':') && c.get(i + 1) == Some(&':') {
            i += 2;
            continue;
        }
        // `as NAME`
        let mut alias = None;
        if let Some((kw, k)) = ident_at(c, i) {
            if kw == "as" {
                if let Some((a, k2)) = ident_at(c, skip_ws(c, k)) {
                    alias = Some(a);
                    i = k2;
                }
            }
        }
        out.push((segs, alias));
        return i;
    }
}

/// Every path the code of `file` (module `m`) names outside its tests.
fn named_paths(tree: &Tree, m: &[String], text: &str) -> Vec<Named> {
    let code = code_only(non_test(text));
    let c = &code;
    let mut out = Vec::new();
    // Inline modules: (name, brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let mut pending_mod: Option<String> = None;
    let mut in_pub_use_until: Option<usize> = None;
    while i < c.len() {
        let ch = c[i];
        if ch == '{' {
            depth += 1;
            if let Some(name) = pending_mod.take() {
                inline.push((name, depth));
            }
            i += 1;
            continue;
        }
        if ch == '}' {
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
            i += 1;
            continue;
        }
        if ch == ';' {
            pending_mod = None;
        }
        let boundary = i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_');
        let Some((id, j)) = boundary.then(|| ident_at(c, i)).flatten() else {
            i += 1;
            continue;
        };
        let here: Vec<String> = m
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _)| n.clone()))
            .collect();
        if id == "mod" {
            let k = skip_ws(c, j);
            if let Some((name, k2)) = ident_at(c, k) {
                pending_mod = Some(name);
                i = k2;
                continue;
            }
        }
        if id == "use" {
            // `pub use` / `pub(crate) use`: a re-export, not a use.
            let before: String = c[i.saturating_sub(16)..i].iter().collect();
            let reexport = before.trim_end().ends_with("pub")
                || before.trim_end().ends_with(')') && before.contains("pub(");
            let mut paths = Vec::new();
            let k = read_paths(c, j, Vec::new(), &mut paths);
            for (segs, alias) in paths {
                out.push(Named {
                    module: here.clone(),
                    segs,
                    reexport,
                    alias,
                });
            }
            in_pub_use_until = None;
            i = k;
            continue;
        }
        let _ = in_pub_use_until;
        let k = skip_ws(c, j);
        let starts_path = c.get(k) == Some(&':') && c.get(k + 1) == Some(&':');
        let is_root = matches!(id.as_str(), "crate" | "self" | "super");
        let mut child = here.clone();
        child.push(id.clone());
        // `$crate::` in a macro counts as `crate::`.
        if starts_path && (is_root || tree.is_module(&child)) {
            let mut paths = Vec::new();
            let e = read_paths(c, k + 2, vec![id], &mut paths);
            for (segs, _) in paths {
                out.push(Named {
                    module: here.clone(),
                    segs,
                    reexport: false,
                    alias: None,
                });
            }
            i = e;
            continue;
        }
        i = j;
    }
    out
}

/// The absolute segments of a named path (`crate`, `self` and `super`
/// resolved; a first segment that is a child module of where it is named
/// taken as one; anything else is another crate: None).
fn absolute(tree: &Tree, n: &Named) -> Option<Vec<String>> {
    let mut base = n.module.clone();
    let mut segs = n.segs.as_slice();
    match segs.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            segs = &segs[1..];
        }
        Some("self") => segs = &segs[1..],
        Some("super") => {
            while segs.first().map(String::as_str) == Some("super") {
                base.pop();
                segs = &segs[1..];
            }
        }
        Some(first) => {
            let mut child = base.clone();
            child.push(first.to_string());
            // An inline module's child is in the same file: find the file
            // module the path starts in.
            if !tree.is_module(&child)
                && !(0..base.len()).any(|k| {
                    let mut m = base[..k].to_vec();
                    m.push(first.to_string());
                    tree.is_module(&m)
                })
            {
                return None;
            }
        }
        None => return None,
    }
    Some(base.into_iter().chain(segs.iter().cloned()).collect())
}

/// Where a re-export of another crate's item points.
const EXTERN: &str = "<another crate>";

/// The file that owns the item at absolute path `p`: the deepest file
/// module on the path, followed through that module's re-exports.
fn owner(
    tree: &Tree,
    reexports: &[(Vec<String>, String, Vec<String>)],
    p: &[String],
    hops: usize,
) -> Option<usize> {
    let k = (0..=p.len()).rev().find(|&k| tree.is_module(&p[..k]))?;
    if k < p.len() && hops < 16 {
        if let Some((_, _, to)) = reexports
            .iter()
            .find(|(m, name, _)| m.as_slice() == &p[..k] && *name == p[k])
        {
            if to.first().map(String::as_str) == Some(EXTERN) {
                return None;
            }
            let mut q = to.clone();
            q.extend(p[k + 1..].iter().cloned());
            return owner(tree, reexports, &q, hops + 1).or(tree.file_of(&p[..k]));
        }
    }
    tree.file_of(&p[..k])
}

/// Cycles of the file graph of the crate at `src`: each as its files,
/// with the items that close it.
fn file_cycles(src: &Path) -> Vec<String> {
    let tree = Tree::of(src);
    let texts: Vec<String> = tree
        .files
        .iter()
        .map(|(_, p)| std::fs::read_to_string(p).unwrap())
        .collect();
    let named: Vec<Vec<Named>> = tree
        .files
        .iter()
        .zip(&texts)
        .map(|((m, _), t)| named_paths(&tree, m, t))
        .collect();
    // (module, name, where it comes from).
    let mut reexports = Vec::new();
    for ns in &named {
        for n in ns.iter().filter(|n| n.reexport) {
            // Another crate's item re-exported: naming it names no file.
            let abs = absolute(&tree, n).unwrap_or_else(|| vec![EXTERN.to_string()]);
            let name = n.alias.clone().or_else(|| n.segs.last().cloned()).unwrap();
            if name != "*" {
                reexports.push((n.module.clone(), name, abs));
            }
        }
    }
    let nfiles = tree.files.len();
    let mut edges: Vec<Vec<(usize, String)>> = vec![Vec::new(); nfiles];
    for (a, ns) in named.iter().enumerate() {
        for n in ns.iter().filter(|n| !n.reexport) {
            let Some(abs) = absolute(&tree, n) else {
                continue;
            };
            if let Some(b) = owner(&tree, &reexports, &abs, 0) {
                if b != a && !edges[a].iter().any(|(x, _)| *x == b) {
                    edges[a].push((b, abs.join("::")));
                }
            }
        }
    }
    // Tarjan's strongly connected components.
    struct St {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        comps: Vec<Vec<usize>>,
    }
    fn visit(v: usize, e: &[Vec<(usize, String)>], s: &mut St) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on[v] = true;
        for (w, _) in &e[v] {
            match s.index[*w] {
                None => {
                    visit(*w, e, s);
                    s.low[v] = s.low[v].min(s.low[*w]);
                }
                Some(iw) if s.on[*w] => s.low[v] = s.low[v].min(iw),
                _ => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                s.comps.push(comp);
            }
        }
    }
    let mut s = St {
        index: vec![None; nfiles],
        low: vec![0; nfiles],
        on: vec![false; nfiles],
        stack: Vec::new(),
        next: 0,
        comps: Vec::new(),
    };
    for v in 0..nfiles {
        if s.index[v].is_none() {
            visit(v, &edges, &mut s);
        }
    }
    let rel = |i: usize| {
        tree.files[i]
            .1
            .strip_prefix(src)
            .unwrap()
            .display()
            .to_string()
    };
    s.comps
        .iter()
        .map(|comp| {
            let mut lines = Vec::new();
            for &a in comp {
                for (b, item) in edges[a].iter().filter(|(b, _)| comp.contains(b)) {
                    lines.push(format!("{} -> {} ({item})", rel(a), rel(*b)));
                }
            }
            lines.sort();
            format!("{}:\n  {}", src.display(), lines.join("\n  "))
        })
        .collect()
}

#[test]
fn no_import_cycle_between_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut cycles = Vec::new();
    let mut srcs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    srcs.push(root.join("python/src"));
    srcs.sort();
    for src in &srcs {
        cycles.extend(file_cycles(src));
    }
    assert!(
        cycles.is_empty(),
        "import cycles between files (give what two files share a file of its own):\n{}",
        cycles.join("\n")
    );
}

/// The cycle check sees what it must: a cycle through a re-export, one
/// through an inline module, a glob import of the parent; and no cycle
/// from declarations, re-exports or comments alone.
#[test]
fn the_cycle_check_finds_cycles_and_only_cycles() {
    let dir = std::env::temp_dir().join(format!("normlab-cycles-{}", std::process::id()));
    let write = |files: &[(&str, &str)]| {
        let _ = std::fs::remove_dir_all(&dir);
        for (p, t) in files {
            let f = dir.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, t).unwrap();
        }
        file_cycles(&dir)
    };
    // a -> b through the parent's re-export, b -> a directly.
    let c = write(&[
        ("lib.rs", "pub mod m;"),
        ("m/mod.rs", "mod a;\nmod b;\npub use a::A;\npub use b::B;"),
        ("m/a.rs", "use crate::m::B;\npub struct A(B);"),
        ("m/b.rs", "pub struct B;\nfn f(_: super::a::A) {}"),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(
        c[0].contains("m/a.rs -> m/b.rs") && c[0].contains("m/b.rs -> m/a.rs"),
        "{c:?}"
    );
    // Declarations, re-exports, comments and strings make no cycle.
    let c = write(&[
        ("lib.rs", "pub mod m;"),
        ("m/mod.rs", "mod a;\nmod b;\npub use a::A;\npub use b::B;"),
        ("m/a.rs", "use super::b::B;\npub struct A(B);"),
        (
            "m/b.rs",
            "// super::a::A\npub struct B;\nconst S: &str = \"super::a::A\";",
        ),
    ]);
    assert!(c.is_empty(), "{c:?}");
    // An inline module of b names a; a names the inline module's item.
    let c = write(&[
        ("lib.rs", "mod a;\nmod b;"),
        ("a.rs", "use crate::b::x86::V;\npub struct A;"),
        (
            "b.rs",
            "pub mod x86 {\n    use super::super::a::A;\n    pub struct V(A);\n}",
        ),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
    // A child's glob import of its parent, which names the child's item.
    let c = write(&[
        ("lib.rs", "mod web;"),
        ("web.rs", "mod page;\nfn f() { page::g(); }\nstruct Lab;"),
        ("web/page.rs", "use super::*;\npub fn g() {}"),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------
// Experiment functions read in one sitting: none is over 150 lines.
// ---------------------------------------------------------------------

/// Every `fn` with a body in `text` (outside its tests): its name, the
/// line it starts on (1-based) and how many lines it spans, from the line
/// with `fn` to the line with its matching closing brace.
fn fn_spans(text: &str) -> Vec<(String, usize, usize)> {
    let c = code_only(non_test(text));
    let line_at = |i: usize| 1 + c[..i].iter().filter(|&&x| x == '\n').count();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let boundary = i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_');
        let Some((id, j)) = boundary.then(|| ident_at(&c, i)).flatten() else {
            i += 1;
            continue;
        };
        let start = i;
        i = j;
        if id != "fn" {
            continue;
        }
        // `fn name` (not the type `fn(..)`); the body is the first `{`
        // before any `;` outside brackets (a declaration without a body
        // has none; `[T; N]` in the signature is not its end).
        let Some((name, k)) = ident_at(&c, skip_ws(&c, j)) else {
            continue;
        };
        let mut nesting = 0i32;
        let Some(open) = (k..c.len()).find(|&x| {
            match c[x] {
                '(' | '[' => nesting += 1,
                ')' | ']' => nesting -= 1,
                _ => {}
            }
            nesting == 0 && (c[x] == '{' || c[x] == ';')
        }) else {
            continue;
        };
        if c[open] == ';' {
            continue;
        }
        let mut depth = 0usize;
        let mut close = c.len() - 1;
        for (x, &ch) in c.iter().enumerate().skip(open) {
            if ch == '{' {
                depth += 1;
            } else if ch == '}' {
                depth -= 1;
                if depth == 0 {
                    close = x;
                    break;
                }
            }
        }
        let first = line_at(start);
        out.push((name, first, line_at(close) - first + 1));
    }
    out
}

/// No function under `exp/` spans more than 150 lines (files named
/// `tests.rs` and code after the first `#[cfg(test)]` excepted): a long
/// experiment is split into parts that read in order.
#[test]
fn no_experiment_function_is_over_150_lines() {
    let exp = crate_src("normlab-lab").join("exp");
    let mut files = Vec::new();
    rust_files(&exp, &mut files);
    files.sort();
    let mut long = Vec::new();
    for f in files {
        if f.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (name, line, n) in fn_spans(&text) {
            if n > 150 {
                long.push(format!(
                    "{}:{line} {name} ({n} lines)",
                    f.strip_prefix(&exp).unwrap_or(&f).display()
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "split these functions into parts (setting, runs, analysis, report):\n{}",
        long.join("\n")
    );
}

/// The span counter matches braces in code only, not in strings or
/// comments, skips `fn(..)` types and bodiless declarations, and reads
/// past a `;` inside a signature's brackets.
#[test]
fn the_span_counter_counts_from_fn_to_its_closing_brace() {
    let text = "fn a() {\n    let s = \"}\";\n    // }\n    let f: fn(u8) = g;\n}\n\ntrait T {\n    fn b(&self);\n    fn c() {\n    }\n}\nfn d(x: [u8; 2]) -> [u8; 2] {\n    x\n}\n";
    let spans = fn_spans(text);
    let spans: Vec<(&str, usize, usize)> =
        spans.iter().map(|(n, l, k)| (n.as_str(), *l, *k)).collect();
    assert_eq!(spans, [("a", 1, 5), ("c", 9, 2), ("d", 12, 3)]);
}
