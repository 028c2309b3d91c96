//! GGUF files of the Hugging Face families (issue 63): each tiny model of
//! tests/fixtures/hf_tiny written as llama.cpp's converter writes its
//! family (scripts/gen_gguf_families.py, with the `gguf` package: Llama's
//! Q/K rows permuted, Gemma 2's gains as 1 + w, GPT-2's Conv1D weights
//! transposed) gives transformers' logits for the folder within 1e-5 of
//! the largest, and the same configuration as the folder but for what the
//! converter changed. Always runs (the files are in the repository).

use normlab::model::decoder::{Decoder, GainStore, RopePairs};

mod common;
use common::gguf_writer::{tiny_gemma3, tiny_llama_bpe, Meta};
use serde_json::Value;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn floats(v: &Value) -> Vec<f64> {
    fn go(v: &Value, out: &mut Vec<f64>) {
        match v {
            Value::Array(a) => a.iter().for_each(|x| go(x, out)),
            x => out.push(x.as_f64().unwrap()),
        }
    }
    let mut out = Vec::new();
    go(v, &mut out);
    out
}

#[test]
fn tiny_gguf_families_give_their_folders_logits() {
    for (name, arch) in [
        ("llama", "llama"),
        ("qwen2", "qwen2"),
        ("qwen3", "qwen3"),
        ("olmo2", "olmo2"),
        ("gemma2", "gemma2"),
        ("gpt2", "gpt2"),
    ] {
        let m = Decoder::load(&fixtures().join(format!("gguf_tiny/{name}.gguf")))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let folder = fixtures().join("hf_tiny").join(name);
        let f = Decoder::load_hf(&folder).unwrap();
        assert_eq!(m.cfg.family, arch);
        // The configuration is the folder's but for the converter's
        // changes: where the gains' 1 is stored, the Q/K row order, the
        // q/k/v layout.
        let (mut a, mut b) = (m.cfg.clone(), f.cfg.clone());
        assert_eq!(
            a.gain,
            if name == "gemma2" {
                GainStore::OnePlusFolded
            } else {
                GainStore::Plain
            }
        );
        assert_eq!(a.rope_pairs == RopePairs::Adjacent, name == "llama");
        (a.gain, a.rope_pairs, a.gpt.conv1d) = (b.gain, b.rope_pairs, b.gpt.conv1d);
        // (A GGUF file's context is its own.)
        a.context = b.context;
        b.family = a.family.clone();
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            serde_json::to_value(&b).unwrap(),
            "{name}"
        );
        let v: Value =
            serde_json::from_slice(&std::fs::read(folder.join("expected.json")).unwrap()).unwrap();
        let ids: Vec<u32> = floats(&v["ids"]).iter().map(|&x| x as u32).collect();
        let want = floats(&v["logits"]);
        let got = m.logits(&ids).unwrap();
        assert_eq!(got.len(), want.len());
        let top = want.iter().fold(0f64, |m, x| m.max(x.abs()));
        let r = got
            .iter()
            .zip(&want)
            .fold(0f64, |m, (x, y)| m.max((f64::from(*x) - y).abs()))
            / top;
        eprintln!("{name}.gguf: logits within {r:e} of transformers (relative to the largest)");
        assert!(r < 1e-5, "{name}.gguf: logits differ by {r:e}");
        // No tokenizer in the file: token ids only.
        assert!(m.encode("a").is_err());
    }
}

#[test]
fn architectures_and_options_normlab_does_not_run_are_refused_by_name() {
    let refused = |f: &common::gguf_writer::GgufFile, name: &str| -> String {
        let p = f.write(name);
        let e = Decoder::load(&p).err().expect("refused").to_string();
        let _ = std::fs::remove_file(&p);
        e
    };
    let mut f = tiny_gemma3();
    f.set("general.architecture", Meta::Str("falcon".into()));
    let e = refused(&f, "falcon");
    assert!(e.contains("architecture 'falcon' is not supported"), "{e}");
    let mut f = tiny_llama_bpe();
    f.set("llama.rope.scaling.type", Meta::Str("yarn".into()));
    let e = refused(&f, "yarn");
    assert!(e.contains("RoPE scaling 'yarn'"), "{e}");
    let mut f = tiny_llama_bpe();
    f.tensors
        .push(("rope_freqs.weight".into(), vec![2], vec![1.0, 1.0]));
    let e = refused(&f, "rope-freqs");
    assert!(e.contains("rope_freqs.weight"), "{e}");
    // "none" is no scaling: the file loads.
    let mut f = tiny_llama_bpe();
    f.set("llama.rope.scaling.type", Meta::Str("none".into()));
    let p = f.write("rope-none");
    Decoder::load(&p).unwrap();
    let _ = std::fs::remove_file(&p);
}
