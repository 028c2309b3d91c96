//! `Bert::load` on tiny BERT folders written here (no model file needed):
//! a valid one loads and embeds (with and without the "bert." prefix), and
//! every hostile variant is refused with one line of bad input, before the
//! weights are read where the config already says enough: sizes and eps
//! outside their ranges, a config.json past its cap, a weights file larger
//! than the config implies, weights that cannot fit in memory, an extra,
//! missing, misshapen or integer tensor, a NaN, a sharded folder, a
//! tokenizer.json that is a FIFO or gives ids outside the vocabulary.

mod common;

use normlab::model::bert::Bert;
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const D: usize = 8;
const F: usize = 16;
const VOCAB: usize = 16;
const POS: usize = 12;
const LAYERS: usize = 2;

fn config() -> Value {
    json!({"vocab_size": VOCAB, "hidden_size": D, "num_hidden_layers": LAYERS,
           "num_attention_heads": 2, "intermediate_size": F, "max_position_embeddings": POS,
           "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu"})
}

/// One tensor: name, dtype, shape, bytes.
type Raw = (String, Dtype, Vec<usize>, Vec<u8>);

/// The tensors of the tiny BERT.
fn tensors(prefix: &str) -> Vec<Raw> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut f32s = |n: usize| -> Vec<u8> {
        (0..n)
            .flat_map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2).to_le_bytes()
            })
            .collect()
    };
    let mut v = Vec::new();
    let mut add = |n: &str, s: &[usize]| {
        let bytes = f32s(s.iter().product());
        v.push((format!("{prefix}{n}"), Dtype::F32, s.to_vec(), bytes));
    };
    add("embeddings.word_embeddings.weight", &[VOCAB, D]);
    add("embeddings.position_embeddings.weight", &[POS, D]);
    add("embeddings.token_type_embeddings.weight", &[2, D]);
    add("embeddings.LayerNorm.weight", &[D]);
    add("embeddings.LayerNorm.bias", &[D]);
    for i in 0..LAYERS {
        for (n, s) in [
            ("attention.self.query", [D, D]),
            ("attention.self.key", [D, D]),
            ("attention.self.value", [D, D]),
            ("attention.output.dense", [D, D]),
            ("intermediate.dense", [F, D]),
            ("output.dense", [D, F]),
        ] {
            add(&format!("encoder.layer.{i}.{n}.weight"), &s);
            add(&format!("encoder.layer.{i}.{n}.bias"), &s[..1]);
        }
        for n in ["attention.output.LayerNorm", "output.LayerNorm"] {
            add(&format!("encoder.layer.{i}.{n}.weight"), &[D]);
            add(&format!("encoder.layer.{i}.{n}.bias"), &[D]);
        }
    }
    add("pooler.dense.weight", &[D, D]);
    add("pooler.dense.bias", &[D]);
    let ids: Vec<u8> = (0..POS as i64).flat_map(i64::to_le_bytes).collect();
    v.push((
        format!("{prefix}embeddings.position_ids"),
        Dtype::I64,
        vec![1, POS],
        ids,
    ));
    v
}

fn serialize(t: &[Raw]) -> Vec<u8> {
    let views: Vec<(String, TensorView)> = t
        .iter()
        .map(|(n, dt, s, b)| (n.clone(), TensorView::new(*dt, s.clone(), b).unwrap()))
        .collect();
    safetensors::tensor::serialize(views, None).unwrap()
}

/// A WordPiece tokenizer of `words` (id = position), [UNK] first.
fn tokenizer(words: &[(&str, u32)]) -> Value {
    let mut vocab = serde_json::Map::new();
    for (w, i) in words {
        vocab.insert(w.to_string(), Value::from(*i));
    }
    json!({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
           "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
           "decoder": null, "model": {"type": "WordPiece", "unk_token": "[UNK]",
           "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": vocab}})
}

const WORDS: [(&str, u32); 4] = [("[UNK]", 0), ("norm", 1), ("lab", 2), ("layer", 3)];

/// A fresh folder `name`: the config with `edit` applied, the weights
/// (`weights` or the tiny BERT's), the tokenizer of [`WORDS`].
fn folder(name: &str, edit: impl FnOnce(&mut Value), weights: Option<Vec<u8>>) -> PathBuf {
    let d = std::env::temp_dir().join(format!("normlab-bert-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let mut c = config();
    edit(&mut c);
    std::fs::write(d.join("config.json"), serde_json::to_vec(&c).unwrap()).unwrap();
    let w = weights.unwrap_or_else(|| serialize(&tensors("")));
    std::fs::write(d.join("model.safetensors"), w).unwrap();
    let tok = serde_json::to_vec(&tokenizer(&WORDS)).unwrap();
    std::fs::write(d.join("tokenizer.json"), tok).unwrap();
    d
}

/// Load and encode a text: the one-line bad-input error, or what went
/// wrong instead.
fn refusal(dir: &Path) -> Result<String, String> {
    let d = dir.to_path_buf();
    common::refusal::refusal(move || {
        Bert::load(&d).and_then(|b| b.encode("norm lab layer").map(|_| ()))
    })
}

#[test]
fn a_tiny_bert_folder_loads_and_embeds_with_either_prefix() {
    for prefix in ["", "bert."] {
        let d = folder(
            &format!("ok{}", prefix.len()),
            |_| {},
            Some(serialize(&tensors(prefix))),
        );
        let b = Bert::load(&d).unwrap();
        let ids = b.encode("norm lab layer").unwrap();
        assert_eq!(ids, vec![1, 2, 3]);
        let e = b.embed_ids(&ids, &b.norms);
        assert_eq!(e.len(), D);
        assert!(e.iter().all(|x| x.is_finite()));
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn hostile_bert_folders_are_refused_with_one_line() {
    let mut failed = Vec::new();
    let mut dirs = Vec::new();
    let mut expect = |case: &str, d: PathBuf, words: &[&str]| {
        common::refusal::judge(case, &d, refusal(&d), words, &mut failed);
        dirs.push(d);
    };
    // The config is checked before model.safetensors is looked at.
    for (key, val, words) in [
        ("layer_norm_eps", json!(-1.0), &["layer_norm_eps"][..]),
        ("layer_norm_eps", json!(0.0), &["layer_norm_eps"]),
        ("layer_norm_eps", json!(1e-60), &["layer_norm_eps"]),
        ("hidden_act", json!("relu"), &["activation"]),
        ("num_attention_heads", json!(3), &["divide"]),
        ("vocab_size", json!(0), &["vocab_size 0"]),
        (
            "num_hidden_layers",
            json!(1u64 << 40),
            &["num_hidden_layers"],
        ),
        (
            "max_position_embeddings",
            json!(1u64 << 30),
            &["max_position_embeddings"],
        ),
        ("hidden_size", json!("wide"), &["not a BERT config"]),
        ("is_decoder", json!(true), &["is_decoder"]),
        ("is_decoder", json!("yes"), &["not a BERT config"]),
        (
            "position_embedding_type",
            json!("relative_key"),
            &["position_embedding_type 'relative_key'"],
        ),
    ] {
        let d = folder(&format!("cfg-{key}-{val}"), |c| c[key] = val.clone(), None);
        std::fs::remove_file(d.join("model.safetensors")).unwrap();
        expect(&format!("{key} = {val}"), d, words);
    }
    let d = folder("big-config", |_| {}, None);
    let mut text = std::fs::read(d.join("config.json")).unwrap();
    text.resize(text.len() + (2 << 20), b' ');
    std::fs::write(d.join("config.json"), text).unwrap();
    expect("big config.json", d, &["config.json", "more than"]);
    let d = folder("big-weights", |_| {}, None);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("model.safetensors"))
        .unwrap();
    f.set_len(64 << 20).unwrap();
    expect(
        "big weights",
        d,
        &["model.safetensors", "config.json implies"],
    );
    let d = folder(
        "huge",
        |c| {
            c["vocab_size"] = json!(1u64 << 24);
            c["hidden_size"] = json!(1u64 << 16);
            c["num_attention_heads"] = json!(1);
        },
        None,
    );
    expect("huge config", d, &["needs about", "TiB"]);
    // The table: extra, missing, misshapen, integer, NaN.
    let base = tensors("");
    let edit = |f: &dyn Fn(&mut Vec<Raw>)| {
        let mut t = base.clone();
        f(&mut t);
        Some(serialize(&t))
    };
    let extra = edit(&|t| {
        t.push((
            "encoder.layer.2.output.dense.bias".into(),
            Dtype::F32,
            vec![D],
            vec![0; 4 * D],
        ))
    });
    expect(
        "extra tensor",
        folder("extra", |_| {}, extra),
        &["encoder.layer.2.output.dense.bias", "does not describe"],
    );
    let missing = edit(&|t| t.retain(|x| x.0 != "encoder.layer.1.output.LayerNorm.bias"));
    expect(
        "missing tensor",
        folder("missing", |_| {}, missing),
        &["has no tensor", "encoder.layer.1.output.LayerNorm.bias"],
    );
    let shape = edit(&|t| t[0].2 = vec![D, VOCAB]);
    expect(
        "misshapen tensor",
        folder("shape", |_| {}, shape),
        &["has shape"],
    );
    let int = edit(&|t| t[3].1 = Dtype::I32);
    expect(
        "integer tensor",
        folder("int", |_| {}, int),
        &["normlab reads F32"],
    );
    let nan = edit(&|t| t[5].3[..4].copy_from_slice(&f32::NAN.to_le_bytes()));
    expect("NaN weight", folder("nan", |_| {}, nan), &["not finite"]);
    let d = folder("sharded", |_| {}, None);
    std::fs::remove_file(d.join("model.safetensors")).unwrap();
    std::fs::write(d.join("model.safetensors.index.json"), b"{}").unwrap();
    expect("sharded without a weight_map", d, &["weight_map"]);
    // The tokenizer: ids outside the vocabulary, a FIFO, none.
    let d = folder("tok-ids", |_| {}, None);
    let far = [("[UNK]", 0), ("norm", 1), ("lab", 40), ("layer", 3)];
    std::fs::write(
        d.join("tokenizer.json"),
        serde_json::to_vec(&tokenizer(&far)).unwrap(),
    )
    .unwrap();
    expect("tokenizer ids", d, &["token id 40", "vocab_size"]);
    let d = folder("tok-fifo", |_| {}, None);
    std::fs::remove_file(d.join("tokenizer.json")).unwrap();
    let fifo = std::ffi::CString::new(d.join("tokenizer.json").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    if unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) } == 0 {
        expect("tokenizer.json FIFO", d, &["not a regular file"]);
    }
    let d = folder("tok-none", |_| {}, None);
    std::fs::remove_file(d.join("tokenizer.json")).unwrap();
    expect("no tokenizer.json", d, &["no tokenizer.json"]);
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
