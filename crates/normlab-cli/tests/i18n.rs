//! The web lab's translations (`src/web/i18n/*.json`): both languages have
//! every interface key the page uses (and no other), with the same
//! `{placeholders}`; every verdict word; and Chinese for every claim of
//! the registry and every chapter's question, checked against the English
//! it was translated from (a changed English text fails here until its
//! translation is refreshed) and keeping every number of it.

use normlab_lab::exp::claims::{Verdict, CLAIMS};
use normlab_lab::exp::registry::EXPERIMENTS;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

fn web(file: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/web")
        .join(file);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn ui(lang: &str) -> BTreeMap<String, String> {
    let v: Value = serde_json::from_str(&web(&format!("i18n/{lang}.json"))).unwrap();
    v["ui"]
        .as_object()
        .unwrap_or_else(|| panic!("{lang}.json has no ui object"))
        .iter()
        .map(|(k, v)| {
            let s = v
                .as_str()
                .unwrap_or_else(|| panic!("{lang}: {k} is not a string"));
            assert!(!s.trim().is_empty(), "{lang}: {k} is empty");
            (k.clone(), s.to_string())
        })
        .collect()
}

/// The `{name}`s of a string.
fn placeholders(s: &str) -> BTreeSet<String> {
    s.split('{')
        .skip(1)
        .filter_map(|p| p.split_once('}').map(|(n, _)| n.to_string()))
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect()
}

/// The keys `index.html` uses: `data-i18n[-html]="k"` attributes and every
/// string literal `"ns.word"` whose namespace is one of the files'.
fn used_keys(page: &str, namespaces: &BTreeSet<String>) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for part in page.split('"').skip(1).step_by(2) {
        if let Some((ns, rest)) = part.split_once('.') {
            let word = |s: &str| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            };
            if namespaces.contains(ns) && word(rest) {
                used.insert(part.to_string());
            }
        }
    }
    used
}

/// FNV-1a (64 bits) of a claim's English title and statement (of a
/// chapter's question: the question alone).
fn en_hash(title: &str, statement: &str) -> String {
    let text = if title.is_empty() {
        statement.to_string()
    } else {
        format!("{title}\n{statement}")
    };
    let mut h: u64 = 0xcbf29ce484222325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

/// Each maximal run of ASCII digits, with its count.
fn digit_runs(s: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for run in s
        .split(|c: char| !c.is_ascii_digit())
        .filter(|r| !r.is_empty())
    {
        *m.entry(run.to_string()).or_insert(0) += 1;
    }
    m
}

#[test]
fn both_languages_have_every_key_the_page_uses() {
    let (en, zh) = (ui("en"), ui("zh"));
    let ek: BTreeSet<&String> = en.keys().collect();
    let zk: BTreeSet<&String> = zh.keys().collect();
    assert_eq!(
        ek.symmetric_difference(&zk).collect::<Vec<_>>(),
        Vec::<&&String>::new(),
        "keys in one language only"
    );
    for (k, e) in &en {
        assert_eq!(
            placeholders(e),
            placeholders(&zh[k]),
            "{k}: placeholders differ"
        );
    }
    let namespaces: BTreeSet<String> = en
        .keys()
        .filter_map(|k| k.split_once('.').map(|(ns, _)| ns.to_string()))
        .collect();
    let page = web("index.html");
    let used = used_keys(&page, &namespaces);
    let missing: Vec<&String> = used.iter().filter(|k| !en.contains_key(*k)).collect();
    assert!(
        missing.is_empty(),
        "the page uses keys no file has: {missing:?}"
    );
    // Verdict words are looked up by the verdict's label.
    let verdicts: BTreeSet<String> = [
        Verdict::Holds,
        Verdict::Partly,
        Verdict::DoesNotHold,
        Verdict::Inconclusive,
    ]
    .iter()
    .map(|v| format!("verdict.{}", v.label().replace(' ', "_")))
    .collect();
    for v in &verdicts {
        assert!(en.contains_key(v), "no {v}");
    }
    let unused: Vec<&String> = en
        .keys()
        .filter(|k| !used.contains(*k) && !verdicts.contains(*k))
        .collect();
    assert!(unused.is_empty(), "keys the page never uses: {unused:?}");
}

#[test]
fn every_claim_is_in_chinese_with_its_numbers() {
    let v: Value = serde_json::from_str(&web("i18n/zh.json")).unwrap();
    let claims = v["claims"].as_object().expect("zh.json has claims");
    let ids: BTreeSet<&str> = claims.keys().map(String::as_str).collect();
    let registry: BTreeSet<&str> = CLAIMS.iter().map(|c| c.id).collect();
    assert_eq!(ids, registry, "zh.json's claims and the registry's");
    for c in CLAIMS {
        let z = &claims[c.id];
        let (title, statement) = (
            z["title"].as_str().unwrap(),
            z["statement"].as_str().unwrap(),
        );
        assert!(
            !title.trim().is_empty() && !statement.trim().is_empty(),
            "{}",
            c.id
        );
        let want = en_hash(c.title, c.statement);
        assert_eq!(
            z["en_hash"].as_str(),
            Some(want.as_str()),
            "{}'s English changed since it was translated: refresh its Chinese in src/web/i18n/zh.json and set en_hash to {want}",
            c.id
        );
        for (text, en_text) in [(title, c.title), (statement, c.statement)] {
            let zh_runs = digit_runs(text);
            for (run, n) in digit_runs(en_text) {
                assert!(
                    zh_runs.get(&run).copied().unwrap_or(0) >= n,
                    "{}: the number {run} appears {n} times in English, fewer in Chinese",
                    c.id
                );
            }
        }
    }
    // Each chapter's question, likewise.
    let questions = v["questions"].as_object().expect("zh.json has questions");
    let registry: BTreeSet<&str> = EXPERIMENTS.iter().map(|e| e.id).collect();
    assert_eq!(
        questions
            .keys()
            .map(String::as_str)
            .collect::<BTreeSet<_>>(),
        registry,
        "zh.json's questions and the experiments'"
    );
    for e in EXPERIMENTS {
        let z = &questions[e.id];
        let text = z["question"].as_str().unwrap();
        assert!(!text.trim().is_empty(), "{}", e.id);
        let want = en_hash("", e.question);
        assert_eq!(
            z["en_hash"].as_str(),
            Some(want.as_str()),
            "{}'s question changed since it was translated: refresh it in src/web/i18n/zh.json and set en_hash to {want}",
            e.id
        );
        let zh_runs = digit_runs(text);
        for (run, n) in digit_runs(e.question) {
            assert!(
                zh_runs.get(&run).copied().unwrap_or(0) >= n,
                "{}: {run}",
                e.id
            );
        }
    }
    // English claims come from the registry, not from en.json.
    let en: Value = serde_json::from_str(&web("i18n/en.json")).unwrap();
    assert!(en.get("claims").is_none());
}
