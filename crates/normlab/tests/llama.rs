//! SmolLM2-135M-Instruct (Llama, GGUF Q4_1) against Hugging Face
//! transformers: dequantised values, token ids, logits, greedy
//! continuations and held-out perplexity (fixtures written by
//! scripts/gen_smollm2_fixtures.py). Needs the model file
//! (scripts/fetch_smollm2.sh); skipped without it unless
//! NORMLAB_REQUIRE_MODEL=1.

use normlab::gguf::Gguf;
use normlab::kernels::norm::NormKind;
use normlab::model::llama::{argmax, KvCache, Llama};
use serde_json::Value;
use std::path::PathBuf;

fn model_path() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    if p.exists() {
        return Some(p);
    }
    if std::env::var("NORMLAB_REQUIRE_MODEL").as_deref() == Ok("1") {
        panic!("{} missing (run scripts/fetch_smollm2.sh)", p.display());
    }
    eprintln!(
        "skipping: {} missing (scripts/fetch_smollm2.sh)",
        p.display()
    );
    None
}

fn fixtures() -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/smollm2.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn smollm2_matches_transformers() {
    let Some(path) = model_path() else { return };
    let fx = fixtures();
    // Dequantisation against the gguf package.
    let g = Gguf::open(&path).unwrap();
    for (name, want) in fx["dequantized"].as_object().unwrap() {
        let got = g.tensor(name).unwrap();
        assert_eq!(got.len() as u64, want["n"].as_u64().unwrap(), "{name}");
        for (a, b) in got.iter().zip(want["first"].as_array().unwrap()) {
            // (the gguf package computes in wider floats: agree to f32 rounding)
            let b = b.as_f64().unwrap();
            assert!(
                (*a as f64 - b).abs() <= 1e-7 * b.abs(),
                "{name}: {a} vs {b}"
            );
        }
        let sum: f64 = got.iter().map(|&x| x as f64).sum();
        let want_sum = want["sum"].as_f64().unwrap();
        let abs = want["abs_sum"].as_f64().unwrap();
        assert!(
            (sum - want_sum).abs() <= 1e-7 * abs,
            "{name}: sum {sum} vs {want_sum}"
        );
    }
    drop(g);
    let m = Llama::load(&path).unwrap();
    assert_eq!(
        (m.cfg.layers, m.cfg.d, m.cfg.heads, m.cfg.kv_heads),
        (30, 576, 9, 3)
    );
    let cols = ids(&fx["cols"]);
    let v = m.cfg.vocab;
    let mut worst = 0f64;
    for p in fx["prompts"].as_array().unwrap() {
        let text = p["text"].as_str().unwrap();
        let want_ids = ids(&p["ids"]);
        let got_ids = m.encode(text).unwrap();
        assert_eq!(got_ids, want_ids, "token ids of {text:?}");
        let logits = m.logits(&got_ids).unwrap();
        let rows = p["logits"].as_array().unwrap();
        for (r, row) in rows.iter().enumerate() {
            let range = p["range"][r].as_f64().unwrap();
            for (c, want) in cols.iter().zip(row.as_array().unwrap()) {
                let err =
                    (logits[r * v + *c as usize] as f64 - want.as_f64().unwrap()).abs() / range;
                worst = worst.max(err);
            }
            // The argmax agrees wherever the top two are not a near tie.
            if p["top2_gap"][r].as_f64().unwrap() > 1e-2 {
                let got = argmax(&logits[r * v..(r + 1) * v]);
                assert_eq!(
                    got as u64,
                    p["argmax"][r].as_u64().unwrap(),
                    "{text:?} position {r}"
                );
            }
        }
        if let Some(g) = p.get("greedy") {
            let got = m.greedy(&got_ids, 32).unwrap();
            assert_eq!(got, ids(g), "greedy continuation of {text:?}");
        }
    }
    eprintln!("largest logit error: {worst:.2e} of the logit range");
    assert!(worst < 1e-3, "largest logit error {worst} of the range");
    // Held-out perplexity within 0.1%.
    let pp = &fx["perplexity"];
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/shakespeare.txt"),
    )
    .unwrap();
    let from = pp["chars_from"].as_u64().unwrap() as usize;
    let held: String = text.chars().skip(from).collect();
    let n = pp["tokens"].as_u64().unwrap() as usize;
    let mut toks = m.encode(&held).unwrap();
    toks.truncate(n + 1);
    assert_eq!(&toks[..16], &ids(&pp["first_ids"])[..]);
    let nll = m
        .nll(&toks, pp["window"].as_u64().unwrap() as usize, true)
        .unwrap();
    let (ppl, want) = (nll.exp(), pp["ppl"].as_f64().unwrap());
    eprintln!("perplexity {ppl:.4} (transformers {want:.4})");
    assert!(
        (ppl / want - 1.0).abs() < 1e-3,
        "perplexity {ppl} vs {want}"
    );
    // The key/value cache: a prompt in parts (5 tokens, then 3, then one at
    // a time) gives the hidden states of the whole prompt in one pass, to
    // float rounding (the matmuls see other shapes), and more calls than the
    // context allows are refused.
    let toks = &toks[..12];
    let d = m.cfg.d;
    let full = m.hidden(toks, None).unwrap();
    let mut cache = KvCache::new(&m);
    let mut parts = m
        .forward(&toks[..5], NormKind::RmsNorm, &mut cache, None)
        .unwrap();
    parts.extend(
        m.forward(&toks[5..8], NormKind::RmsNorm, &mut cache, None)
            .unwrap(),
    );
    for &t in &toks[8..] {
        parts.extend(
            m.forward(&[t], NormKind::RmsNorm, &mut cache, None)
                .unwrap(),
        );
    }
    assert_eq!(cache.len(), toks.len());
    assert_eq!(parts.len(), full.len());
    for (r, (a, b)) in parts.chunks(d).zip(full.chunks(d)).enumerate() {
        let scale = b.iter().fold(0f32, |s, x| s.max(x.abs()));
        let err = a.iter().zip(b).fold(0f32, |s, (x, y)| s.max((x - y).abs()));
        assert!(err <= 1e-4 * scale, "position {r}: cached {err} of {scale}");
    }
    let mut short = KvCache::new(&m);
    let e = m
        .forward(
            &vec![1; m.cfg.context + 1],
            NormKind::RmsNorm,
            &mut short,
            None,
        )
        .unwrap_err();
    assert!(e.to_string().contains("exceed the context"), "{e}");
}
