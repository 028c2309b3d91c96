//! The GGUF models against Hugging Face transformers: SmolLM2-135M-Instruct
//! (Llama, Q4_1) and Gemma 3 270M (Q4_K_M: Q8_0, Q5_0, Q4_K, Q6_K and F32
//! tensors). For each: dequantised values against the `gguf` package, token
//! ids of 16 prompts (English and Chinese), logits, greedy continuations,
//! held-out perplexity on 1,024 tokens (Gemma's in one window, past its
//! 512-token sliding window) and every layer's residual stream against
//! `output_hidden_states` (fixtures written by scripts/gen_gguf_fixtures.py).
//! Needs the model files (scripts/fetch_smollm2.sh, scripts/fetch_gemma3.sh);
//! skipped without them unless NORMLAB_REQUIRE_MODEL=1.

use normlab::gguf::qdot::ActBits;
use normlab::gguf::Gguf;
use normlab::model::decoder::{argmax, KvCache};
mod common;

use normlab::model::decoder::{Decoder, DecoderTrace};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn model_path(rel: &str, fetch: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../models")
        .join(rel);
    if p.exists() {
        return Some(p);
    }
    common::skip::skip(
        "NORMLAB_REQUIRE_MODEL",
        "the GGUF model tests",
        &format!("models/{rel} is missing"),
        &format!("run {fetch}"),
    );
    None
}

fn fixtures(name: &str) -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// Dequantisation against the gguf package: the first 64 values and the
/// sum of every listed tensor.
fn check_dequantised(path: &Path, fx: &Value) {
    let g = Gguf::open(path).unwrap();
    for (name, want) in fx["dequantized"].as_object().unwrap() {
        let got = g.tensor(name).unwrap();
        if let Some(ty) = want.get("type") {
            assert_eq!(
                g.info(name).unwrap().ty.name(),
                ty.as_str().unwrap(),
                "{name}"
            );
        }
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
}

/// Token ids, logits (within 1e-3 of each position's range), argmax and
/// greedy continuations of the fixture's prompts; then held-out perplexity
/// within 0.1%; then every layer's stream within 1e-3 relative. Returns
/// the held-out tokens.
fn check_against_transformers(m: &Decoder, fx: &Value) -> Vec<u32> {
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
    // Every layer's stream on the same tokens in one pass, at the sampled
    // positions and channels: ||got - want|| / ||want|| per layer and
    // position, and each position's full-width norm.
    let hx = &fx["hidden"];
    let t = hx["tokens"].as_u64().unwrap() as usize;
    let mut tr = DecoderTrace::keeping_streams();
    m.observe(&toks[..t], &mut tr).unwrap();
    let last = tr.streams.pop().unwrap();
    tr.streams.push(m.final_normed(&last));
    let (pos, ch) = (ids(&hx["positions"]), ids(&hx["channels"]));
    let layers = hx["values"].as_array().unwrap();
    assert_eq!(layers.len(), tr.streams.len(), "hidden states per layer");
    let d = m.cfg.d;
    let mut worst = (0f64, 0, 0);
    for (l, (want, got)) in layers.iter().zip(&tr.streams).enumerate() {
        let norms = floats(&hx["row_norms"][l]);
        for ((i, &p), want_row) in pos.iter().enumerate().zip(want.as_array().unwrap()) {
            let row = &got[p as usize * d..(p as usize + 1) * d];
            let (mut diff, mut size) = (0f64, 0f64);
            for (&c, w) in ch.iter().zip(floats(want_row)) {
                diff += (f64::from(row[c as usize]) - w).powi(2);
                size += w * w;
            }
            let err = (diff / size.max(1e-30)).sqrt();
            let norm: f64 = row
                .iter()
                .map(|&x| f64::from(x).powi(2))
                .sum::<f64>()
                .sqrt();
            let err = err.max((norm / norms[i] - 1.0).abs());
            if err > worst.0 {
                worst = (err, l, p as usize);
            }
        }
    }
    eprintln!(
        "largest hidden-state error: {:.2e} (layer {}, position {})",
        worst.0, worst.1, worst.2
    );
    assert!(worst.0 < 1e-3, "hidden state {worst:?}");
    toks
}

/// The model at `models/<rel>` with its fixtures, its dequantisation
/// checked (None: the file is absent and not required); then the same file
/// kept in its blocks ([`check_quantised_paths`]).
fn load_checked(rel: &str, fetch: &str, name: &str) -> Option<(Decoder, Value)> {
    let path = model_path(rel, fetch)?;
    let fx = fixtures(name);
    check_dequantised(&path, &fx);
    let m = Decoder::load(&path).unwrap();
    check_quantised_paths(&path, &m, &fx);
    Some((m, fx))
}

/// The weights kept as the file's blocks: at most half the f32 memory;
/// with f32 activations exactly the f32 logits at every generation step
/// (and the same greedy tokens); with 8-bit activations different, but
/// within 5% of each step's logit range on 4 fixture prompts (issue 39's
/// target is 2%: measured 2-3% on all 16, see bench/RESULTS.md).
fn check_quantised_paths(path: &Path, m: &Decoder, fx: &Value) {
    use normlab::model::decoder::{compare::deviation, WeightStorage};
    let mut q = Decoder::load_as(path, WeightStorage::Quantised).unwrap();
    assert!(
        2 * q.weight_bytes() <= m.weight_bytes(),
        "{} vs {} bytes",
        q.weight_bytes(),
        m.weight_bytes()
    );
    let prompts: Vec<Vec<u32>> = fx["prompts"].as_array().unwrap()[..4]
        .iter()
        .map(|p| ids(&p["ids"]))
        .collect();
    // (Two prompts, two steps: one-row steps in f32 from the blocks
    // dequantise every row of the head each time, slow for Gemma's.)
    let exact = deviation(m, &q, &prompts[..2], 2).unwrap();
    assert_eq!(
        (exact.max_rel_logit_diff, exact.greedy_changed),
        (0.0, 0),
        "{exact:?}"
    );
    q.quantised_activations = Some(ActBits::Eight);
    let fast = deviation(m, &q, &prompts, 6).unwrap();
    eprintln!("8-bit activations: {fast:?}");
    assert!(
        fast.max_rel_logit_diff > 0.0 && fast.max_rel_logit_diff < 5e-2,
        "{fast:?}"
    );
    // 16-bit activations (two 8-bit limbs): issue 39's 2e-2 of the logit
    // range, with room to spare.
    q.quantised_activations = Some(ActBits::Sixteen);
    let fine = deviation(m, &q, &prompts, 6).unwrap();
    eprintln!("16-bit activations: {fine:?}");
    assert!(
        fine.max_rel_logit_diff > 0.0
            && fine.max_rel_logit_diff < 2e-2
            && fine.max_rel_logit_diff < fast.max_rel_logit_diff / 4.0,
        "{fine:?} against 8 bits' {fast:?}"
    );
}

#[test]
fn smollm2_matches_transformers() {
    let Some((m, fx)) = load_checked(
        "SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf",
        "scripts/fetch_smollm2.sh",
        "smollm2",
    ) else {
        return;
    };
    assert_eq!(
        (m.cfg.layers, m.cfg.d, m.cfg.heads, m.cfg.kv_heads),
        (30, 576, 9, 3)
    );
    assert_eq!(m.bos, None);
    let toks = check_against_transformers(&m, &fx);
    // The key/value cache: a prompt in parts (5 tokens, then 3, then one at
    // a time) gives the hidden states of the whole prompt in one pass, to
    // float rounding (the matmuls see other shapes), and more calls than the
    // context allows are refused.
    let toks = &toks[..12];
    let d = m.cfg.d;
    let full = m.hidden(toks).unwrap();
    let mut cache = KvCache::new(&m);
    let mut parts = m
        .forward(
            &toks[..5],
            &m.interventions,
            &mut cache,
            &mut normlab::model::hooks::NoObserver,
        )
        .unwrap();
    parts.extend(
        m.forward(
            &toks[5..8],
            &m.interventions,
            &mut cache,
            &mut normlab::model::hooks::NoObserver,
        )
        .unwrap(),
    );
    for &t in &toks[8..] {
        parts.extend(
            m.forward(
                &[t],
                &m.interventions,
                &mut cache,
                &mut normlab::model::hooks::NoObserver,
            )
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
            &m.interventions,
            &mut short,
            &mut normlab::model::hooks::NoObserver,
        )
        .unwrap_err();
    assert!(e.to_string().contains("exceed the context"), "{e}");
}

#[test]
fn gemma3_matches_transformers() {
    let Some((m, fx)) = load_checked(
        "gemma-3-270m/gemma-3-270m-q4_k_m.gguf",
        "scripts/fetch_gemma3.sh",
        "gemma3",
    ) else {
        return;
    };
    let c = &m.cfg;
    assert_eq!(
        (c.layers, c.d, c.heads, c.kv_heads, c.head_dim),
        (18, 640, 4, 1, 256)
    );
    // Layers 5, 11 and 17 attend globally (RoPE base 1e6), the others
    // through a window of 512 (RoPE base 1e4).
    for (l, a) in c.attn.iter().enumerate() {
        let global = l % 6 == 5;
        assert_eq!(a.window, (!global).then_some(512), "layer {l}");
        assert_eq!(a.rope_base, if global { 1e6 } else { 1e4 }, "layer {l}");
    }
    assert_eq!(m.bos, Some(2));
    check_against_transformers(&m, &fx);
}
