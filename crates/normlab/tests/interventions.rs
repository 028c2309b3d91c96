//! Interventions at the decoder's hook points (`model/intervene.rs`), one
//! test per kind, on the tiny Hugging Face families of the fixtures (a
//! sequential Llama, Gemma 2 with windows and soft-caps, OLMo 2 with output
//! norms, GPT-NeoX's parallel block): a change that changes nothing leaves
//! every bit as it was; an edit at a position changes nothing before it
//! (causality) and changes what follows; a mean measured on the very text
//! it replaces is the value itself; a knockout leaves a renormalised
//! pattern with nothing on the removed keys.

use normlab::kernels::norm::NormKind;
use normlab::model::decoder::Decoder;
use normlab::model::hooks::{AttentionPattern, NoObserver, Observer};
use normlab::model::intervene::{Edit, Interventions, Knockout};
use std::path::PathBuf;

fn load(name: &str) -> Decoder {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf_tiny")
        .join(name);
    Decoder::load_hf(&dir).unwrap()
}

const FAMILIES: [&str; 4] = ["llama", "gemma2", "olmo2", "gpt_neox"];

fn ids() -> Vec<u32> {
    (0..14).map(|i| (i * 7 + 3) % 60).collect()
}

fn logits(m: &Decoder, iv: &Interventions) -> Vec<f32> {
    let h = m.hidden_with(&ids(), iv, &mut NoObserver).unwrap();
    m.logits_with(&h, iv)
}

fn with(f: impl FnOnce(&mut Interventions)) -> Interventions {
    let mut iv = Interventions::none();
    f(&mut iv);
    iv
}

#[test]
fn changes_that_change_nothing_leave_every_bit() {
    for name in FAMILIES {
        let m = load(name);
        let base = logits(&m, &Interventions::none());
        let own_kind = m.cfg.norm;
        let same = [
            with(|iv| iv.edits = vec![Edit::parse("resid_post=x1").unwrap()]),
            with(|iv| iv.edits = vec![Edit::parse("mlp_post:0#3=x1").unwrap()]),
            with(|iv| iv.norm_kind = Some(own_kind)),
            with(|iv| iv.eps = Some(m.cfg.eps)),
            with(|iv| iv.ffn_clamp = Some(1e30)),
            // A key no query of 14 tokens sees.
            with(|iv| iv.knockouts = vec![Knockout::parse("40").unwrap()]),
        ];
        for iv in &same {
            assert_eq!(logits(&m, iv), base, "{name}: {:?}", iv.describe());
        }
    }
}

#[test]
fn an_edit_changes_what_follows_and_nothing_before() {
    for name in FAMILIES {
        let m = load(name);
        let v = m.cfg.vocab;
        let base = logits(&m, &Interventions::none());
        for spec in [
            "resid_pre:1@5=zero",
            "attn_out:0@5#2=x3",
            "resid_mid:1@5=2.5",
            "mlp_post:0@5=zero",
            "mlp_out:1@5=zero",
            "resid_post:0@5=zero",
            "embed@5=zero",
        ] {
            let iv = with(|iv| iv.edits = vec![Edit::parse(spec).unwrap()]);
            let got = logits(&m, &iv);
            assert_eq!(
                got[..5 * v],
                base[..5 * v],
                "{name} {spec}: before position 5"
            );
            assert_ne!(
                got[5 * v..6 * v],
                base[5 * v..6 * v],
                "{name} {spec}: at position 5"
            );
        }
        // Zero the whole last stream: only the head's bias (none) is left
        // after an RMSNorm of zeros; a LayerNorm's bias shows through.
        let iv = with(|iv| {
            iv.edits = vec![Edit::parse(&format!("resid_post:{}=zero", m.cfg.layers - 1)).unwrap()];
            iv.no_final_norm = true;
        });
        assert!(
            logits(&m, &iv).iter().all(|&x| x == 0.0),
            "{name}: zero stream, no final norm"
        );
    }
}

#[test]
fn a_mean_over_the_same_text_is_the_value_itself() {
    for name in FAMILIES {
        let mut m = load(name);
        let base = logits(&m, &Interventions::none());
        m.interventions = with(|iv| {
            iv.edits = vec![
                Edit::parse("resid_post:0@0,3#1-5=mean").unwrap(),
                Edit::parse("mlp_post:1=mean").unwrap(),
            ]
        });
        assert!(m.interventions.needs_means());
        // One window: the text itself.
        m.resolve_means(&ids(), 64).unwrap();
        assert!(!m.interventions.needs_means());
        let iv = m.interventions.clone();
        assert_eq!(logits(&m, &iv), base, "{name}");
        // Over another text, a different model.
        let mut other = load(name);
        other.interventions =
            with(|iv| iv.edits = vec![Edit::parse("resid_post:0@0=mean").unwrap()]);
        let text: Vec<u32> = (0..30).map(|i| (i * 11 + 1) % 60).collect();
        other.resolve_means(&text, 10).unwrap();
        let iv = other.interventions.clone();
        assert_ne!(logits(&other, &iv), base, "{name}");
    }
}

/// Every head's pattern of one block.
struct Patterns(usize, Vec<Vec<f32>>, usize);

impl Observer for Patterns {
    fn attention(&mut self, p: &AttentionPattern) {
        if p.block == self.0 {
            self.2 = p.keys;
            self.1.push(p.probs.to_vec());
        }
    }
}

#[test]
fn a_knockout_removes_the_keys_and_renormalises() {
    for name in FAMILIES {
        let m = load(name);
        let base = logits(&m, &Interventions::none());
        let iv = with(|iv| iv.knockouts = vec![Knockout::parse("0,2:1").unwrap()]);
        let mut seen = Patterns(1, Vec::new(), 0);
        let mut other = Patterns(0, Vec::new(), 0);
        m.hidden_with(&ids(), &iv, &mut seen).unwrap();
        m.hidden_with(&ids(), &iv, &mut other).unwrap();
        let keys = seen.2;
        for p in &seen.1 {
            for (i, row) in p.chunks_exact(keys).enumerate() {
                assert_eq!((row[0], row[2]), (0.0, 0.0), "{name} query {i}");
                let sum: f32 = row.iter().sum();
                // Queries 0 and 2 might see nothing else.
                if i != 0 && !(i == 2 && row[1] == 0.0) {
                    assert!((sum - 1.0).abs() < 1e-5, "{name} query {i}: {sum}");
                }
            }
        }
        // Block 0 is untouched.
        assert!(other.1.iter().any(|p| p[other.2] > 0.0), "{name}");
        assert_ne!(logits(&m, &iv), base, "{name}");
    }
}

#[test]
fn the_norm_kind_eps_final_norm_and_clamp_are_interventions() {
    let m = load("llama");
    let base = logits(&m, &Interventions::none());
    let swapped = with(|iv| iv.norm_kind = Some(NormKind::LayerNorm));
    assert_ne!(logits(&m, &swapped), base);
    let h = m.hidden(&ids()).unwrap();
    assert_eq!(
        logits(&m, &with(|iv| iv.no_final_norm = true)),
        m.logits_from(&h, false)
    );
    // A clamp at the smallest gate value present changes the model.
    assert_ne!(logits(&m, &with(|iv| iv.ffn_clamp = Some(0.01))), base);
    // The model's own interventions are what hidden() and logits() run.
    let mut c = load("llama");
    c.interventions = swapped.clone();
    assert_eq!(c.logits(&ids()).unwrap(), logits(&m, &swapped));
    assert!(swapped.check(m.cfg.layers, m.cfg.d, m.cfg.ffn).is_ok());
    assert_eq!(swapped.describe().len(), 1);
}
