//! all-MiniLM-L6-v2 in normlab against the PyTorch / sentence-transformers
//! reference (fixtures from scripts/gen_minilm_fixtures.py): the same
//! WordPiece ids, and sentence embeddings with cosine >= 0.9999, English and
//! Chinese. The 90 MB model is not committed: scripts/fetch_minilm.sh
//! fetches it (`.ci/run` does, and sets NORMLAB_REQUIRE_MODEL=1).

mod common;

use normlab::model::bert::{self, Bert};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Deserialize)]
struct Fixtures {
    sentences: Vec<Sentence>,
}

#[derive(Deserialize)]
struct Sentence {
    text: String,
    ids: Vec<u32>,
    embedding: Vec<f32>,
}

fn model_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("NORMLAB_MINILM")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2")
        });
    if dir.join("model.safetensors").exists() {
        return Some(dir);
    }
    common::skip::skip(
        "NORMLAB_REQUIRE_MODEL",
        "the BERT (MiniLM) tests",
        &format!(
            "all-MiniLM-L6-v2 is not in {}",
            dir.display()
                .to_string()
                .replace("crates/normlab/../../", "")
        ),
        "run scripts/fetch_minilm.sh",
    );
    None
}

#[test]
fn minilm_matches_the_reference_embeddings() {
    let Some(dir) = model_dir() else { return };
    let bert = Bert::load(&dir).unwrap();
    let fx: Fixtures =
        serde_json::from_str(include_str!("fixtures/minilm_embeddings.json")).unwrap();
    assert!(fx.sentences.len() >= 20);
    let mut worst = 1.0f64;
    for s in &fx.sentences {
        let ids = bert.encode(&s.text).unwrap();
        assert_eq!(ids, s.ids, "tokenisation of {:?}", s.text);
        let e = bert.embed_ids(&ids, &bert.norms);
        let c = bert::cosine(&e, &s.embedding);
        worst = worst.min(c);
        assert!(c >= 0.9999, "{:?}: cosine {c}", s.text);
    }
    eprintln!(
        "worst cosine to the reference over {} sentences: {worst:.7}",
        fx.sentences.len()
    );
    // Chinese sentences are in the set.
    assert!(fx.sentences.iter().any(|s| s
        .text
        .chars()
        .any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c))));
}

#[test]
fn minilm_rmsnorm_conversion_and_calibration() {
    let Some(dir) = model_dir() else { return };
    let bert = Bert::load(&dir).unwrap();
    let enc = |v: Vec<String>| {
        v.iter()
            .map(|s| bert.encode(s).unwrap())
            .collect::<Vec<_>>()
    };
    let calib = enc(normlab::io::sample_sentences(24, 0, 37));
    let held = enc(normlab::io::sample_sentences(16, 5, 41));
    let mean_cos = |norms: &[bert::NormParams]| {
        held.iter()
            .map(|ids| {
                bert::cosine(
                    &bert.embed_ids(ids, &bert.norms),
                    &bert.embed_ids(ids, norms),
                )
            })
            .sum::<f64>()
            / held.len() as f64
    };
    let drop_beta = mean_cos(&bert::rms_norms(&bert, false));
    let calibrated = mean_cos(&bert::calibrate_rms(&bert, &calib));
    eprintln!("held-out cosine: gamma only {drop_beta:.4}, calibrated {calibrated:.4}");
    assert!(
        calibrated > drop_beta,
        "calibration should move the embeddings back toward the original"
    );
}

#[test]
fn minilm_trace_is_exact_per_sublayer() {
    // The one inspection type on a Post-LN encoder: per sublayer, the write
    // is the change across it, and before + write = after to rounding; the
    // stream after each sublayer is normalised (gain and bias aside).
    let Some(dir) = model_dir() else { return };
    let bert = Bert::load(&dir).unwrap();
    let ids = bert
        .encode("Residual connections keep deep networks trainable.")
        .unwrap();
    let mut tr = bert::Trace::default();
    bert.forward(&ids, &bert.norms, &mut tr);
    assert_eq!(tr.sublayers.len(), 2 * bert.cfg.num_hidden_layers);
    for s in &tr.sublayers {
        assert!(s.check < 1e-5 && s.write_rms > 0.0, "{s:?}");
    }
}
