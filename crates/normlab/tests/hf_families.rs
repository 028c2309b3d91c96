//! The one decoder configured as each Hugging Face family it reads from a
//! folder, against transformers' own `*ForCausalLM` of that family, built
//! with random weights at a tiny size (fixtures written by
//! scripts/gen_hf_families.py; each saved in float32 and in bfloat16):
//! logits at every position and every block's output stream within 1e-5
//! of the largest value (f32 on both sides; the bf16 folder against the
//! same model with its weights rounded to bf16). Always runs (the fixtures
//! are in the repository). Config options normlab does not implement are
//! refused by name.

use normlab::model::decoder::Decoder;
use normlab::model::hooks::Observer;
use normlab::nn::Placement;
use serde_json::Value;
use std::path::PathBuf;

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf_tiny")
        .join(name)
}

/// Each block's output stream.
#[derive(Default)]
struct Streams(Vec<Vec<f32>>);

impl Observer for Streams {
    fn wants_attention(&self) -> bool {
        false
    }
    fn sublayer_out(&mut self, _block: usize, sub: usize, x: &[f32]) {
        if sub == 1 {
            self.0.push(x.to_vec());
        }
    }
}

fn floats(v: &Value) -> Vec<f64> {
    let mut out = Vec::new();
    let mut walk = |v: &Value| {
        fn go(v: &Value, out: &mut Vec<f64>) {
            match v {
                Value::Array(a) => a.iter().for_each(|x| go(x, out)),
                x => out.push(x.as_f64().unwrap()),
            }
        }
        go(v, &mut out)
    };
    walk(v);
    out
}

/// Largest |a - b| over the largest |b|.
fn rel(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let top = b.iter().fold(0f64, |m, x| m.max(x.abs()));
    a.iter()
        .zip(b)
        .fold(0f64, |m, (x, y)| m.max((f64::from(*x) - y).abs()))
        / top
}

#[test]
fn tiny_families_match_transformers_in_f32_and_bf16() {
    for (name, family, qk, window) in [
        ("gemma2", "gemma2", false, Some(8)),
        ("llama", "llama", false, None),
        ("llama-rope-llama3", "llama", false, None),
        ("llama-rope-linear", "llama", false, None),
        ("mistral", "mistral", false, Some(8)),
        ("olmo2", "olmo2", true, None),
        ("phi3", "phi3", false, Some(8)),
        ("qwen2", "qwen2", false, None),
        ("qwen3", "qwen3", true, None),
        ("gpt2", "gpt2", false, None),
        ("gpt2-bare", "gpt2", false, None),
        ("gpt_neox", "gpt_neox", false, None),
        ("gpt_neox-sequential", "gpt_neox", false, None),
    ] {
        let suffixes: &[&str] = if name.contains('-') {
            &[""]
        } else {
            &["", "-bf16"]
        };
        for suffix in suffixes {
            let folder = format!("{name}{suffix}");
            let scaled = name.contains("-rope-");
            let m = Decoder::load_hf(&dir(&folder)).unwrap();
            assert_eq!(m.cfg.family, family);
            let gemma = family.starts_with("gemma");
            let gpt = family.starts_with("gpt");
            let placement = match family {
                "gemma2" => Placement::Sandwich,
                "olmo2" => Placement::Olmo2,
                _ => Placement::Pre,
            };
            assert_eq!(m.cfg.qk_norm_whole, family == "olmo2", "{folder}");
            assert_eq!(m.cfg.placement, placement);
            assert_eq!(m.cfg.attn_softcap.is_some(), gemma, "{folder}");
            assert_eq!(m.cfg.qk_norm, qk, "{folder}");
            assert_eq!(m.cfg.qkv_bias, family == "qwen2" || gpt, "{folder}");
            assert_eq!(m.cfg.rope_scaling.is_some(), scaled, "{folder}");
            // The older families' operations, each where it belongs.
            let g = m.cfg.gpt;
            assert_eq!((g.norm_bias, g.linear_bias, g.plain_mlp), (gpt, gpt, gpt));
            assert_eq!(g.learned_positions, family == "gpt2", "{folder}");
            assert_eq!(g.conv1d, family == "gpt2", "{folder}");
            assert_eq!(g.parallel, name == "gpt_neox", "{folder}");
            assert_eq!(g.fused_gate_up, family == "phi3", "{folder}");
            let rot = match name {
                "gpt2" | "gpt2-bare" => 0,
                "gpt_neox" => 4,
                "gpt_neox-sequential" => 2,
                "phi3" => 4,
                _ => m.cfg.head_dim,
            };
            assert_eq!(m.cfg.rotary_dims(), rot, "{folder}");
            // The one-line description names the placement in the
            // lesson's terms.
            let line = m.cfg.describe();
            let words = match name {
                "gpt2" | "gpt2-bare" => "Pre-LayerNorm (with bias; eps 1e-5), GELU (tanh) MLP, biases on every projection, learned positions",
                "gpt_neox" => "Pre-LayerNorm (with bias; eps 1e-5), attention and MLP in parallel, GELU MLP, biases on every projection, RoPE on 4 of 8 dims per head",
                "gpt_neox-sequential" => "Pre-LayerNorm (with bias; eps 1e-5), GELU (tanh) MLP",
                "olmo2" => "Output-RMSNorm",
                "gemma2" => "Sandwich-RMSNorm (zero-centred gains 1 + w;",
                _ => "Pre-RMSNorm",
            };
            assert!(line.contains(words), "{folder}: {line}");
            // Gemma 2 alternates: a window on layer 0, full attention on 1.
            let windows: Vec<_> = m.cfg.attn.iter().map(|a| a.window).collect();
            let want = if gemma {
                vec![window, None]
            } else {
                vec![window; 2]
            };
            assert_eq!(windows, want, "{folder}");
            let v: Value =
                serde_json::from_slice(&std::fs::read(dir(&folder).join("expected.json")).unwrap())
                    .unwrap();
            let ids: Vec<u32> = floats(&v["ids"]).iter().map(|&x| x as u32).collect();
            assert!(window.is_none_or(|w| ids.len() > w));
            let mut obs = Streams::default();
            m.observe(&ids, &mut obs).unwrap();
            let want = v["streams"].as_array().unwrap();
            assert_eq!(obs.0.len(), want.len(), "{folder}: blocks");
            for (b, (got, want)) in obs.0.iter().zip(want).enumerate() {
                let r = rel(got, &floats(want));
                assert!(r < 1e-5, "{folder}: block {b}'s stream differs by {r:e}");
            }
            let r = rel(&m.logits(&ids).unwrap(), &floats(&v["logits"]));
            eprintln!("{folder}: logits within {r:e} of transformers (relative to the largest)");
            assert!(r < 1e-5, "{folder}: logits differ by {r:e}");
        }
    }
}

/// A copy of a fixture folder with `edit` applied to its config.json.
fn edited(name: &str, case: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let d = std::env::temp_dir().join(format!("normlab-hf-{}-{case}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let src = dir(name);
    let mut c: Value =
        serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    edit(&mut c);
    std::fs::write(d.join("config.json"), serde_json::to_vec(&c).unwrap()).unwrap();
    std::fs::copy(src.join("model.safetensors"), d.join("model.safetensors")).unwrap();
    d
}

#[test]
fn options_the_decoder_does_not_implement_are_refused_by_name() {
    use serde_json::json;
    for (case, edit, words) in [
        (
            "yarn-rope",
            Box::new(|c: &mut Value| {
                c["rope_parameters"] =
                    json!({"rope_type": "yarn", "rope_theta": 5e5, "factor": 8.0})
            }) as Box<dyn FnOnce(&mut Value)>,
            "RoPE scaling 'yarn'",
        ),
        (
            "old-dynamic",
            Box::new(|c: &mut Value| c["rope_scaling"] = json!({"type": "dynamic", "factor": 4.0})),
            "RoPE scaling 'dynamic'",
        ),
        (
            "llama3-no-bands",
            Box::new(|c: &mut Value| {
                c["rope_parameters"] =
                    json!({"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0})
            }),
            "low_freq_factor",
        ),
        (
            "linear-zero",
            Box::new(|c: &mut Value| {
                c["rope_parameters"] =
                    json!({"rope_type": "linear", "rope_theta": 5e5, "factor": 0.0})
            }),
            "not a positive number",
        ),
        (
            "bias",
            Box::new(|c: &mut Value| c["attention_bias"] = json!(true)),
            "attention biases",
        ),
        (
            "act",
            Box::new(|c: &mut Value| c["hidden_act"] = json!("gelu")),
            "activation 'gelu'",
        ),
        (
            "family",
            Box::new(|c: &mut Value| c["model_type"] = json!("falcon")),
            "model_type 'falcon' is not read by normlab's decoder",
        ),
        (
            "untied",
            Box::new(|c: &mut Value| c["tie_word_embeddings"] = json!(false)),
            "lm_head.weight",
        ),
        (
            "gpt2-layer-scaled",
            Box::new(|c: &mut Value| c["scale_attn_by_inverse_layer_idx"] = json!(true)),
            "scaled by the layer index",
        ),
        (
            "gpt2-relu",
            Box::new(|c: &mut Value| c["activation_function"] = json!("relu")),
            "activation 'relu'",
        ),
        (
            "gpt_neox-unbiased",
            Box::new(|c: &mut Value| c["attention_bias"] = json!(false)),
            "attention_bias false",
        ),
        (
            "gpt_neox-rotary",
            Box::new(|c: &mut Value| c["rope_parameters"]["partial_rotary_factor"] = json!(1.5)),
            "rotary share 1.5",
        ),
        // Malformed values are refused by name, never read as a default
        // (issue 74, class 6).
        (
            "rope-type-number",
            Box::new(|c: &mut Value| {
                c["rope_parameters"] = json!({"rope_type": 5, "rope_theta": 5e5})
            }),
            "'rope_type' is not a string",
        ),
        (
            "rope-in-a-list",
            Box::new(|c: &mut Value| {
                c["rope_scaling"] = json!([{"rope_type": "yarn", "factor": 4.0}])
            }),
            "'rope_scaling' is not an object",
        ),
        (
            "tied-yes",
            Box::new(|c: &mut Value| c["tie_word_embeddings"] = json!("yes")),
            "'tie_word_embeddings' is not true or false",
        ),
        (
            "act-number",
            Box::new(|c: &mut Value| c["hidden_act"] = json!(3)),
            "'hidden_act' is not a string",
        ),
        (
            "bias-text",
            Box::new(|c: &mut Value| c["attention_bias"] = json!("true")),
            "'attention_bias' is not true or false",
        ),
        (
            "types-text",
            Box::new(|c: &mut Value| c["layer_types"] = json!("full_attention")),
            "'layer_types' is not a list",
        ),
        (
            "gpt_neox-rotary-negative",
            Box::new(|c: &mut Value| c["rope_parameters"]["partial_rotary_factor"] = json!(-0.5)),
            "rotary share -0.5",
        ),
        (
            "gpt2-act-number",
            Box::new(|c: &mut Value| c["activation_function"] = json!(3)),
            "'activation_function' is not a string",
        ),
    ] {
        let src = match case.split_once('-') {
            Some((f @ ("gpt2" | "gpt_neox"), _)) => f,
            _ if case == "untied" => "qwen3",
            _ => "llama",
        };
        let d = edited(src, case, edit);
        let e = Decoder::load_hf(&d).err().expect("refused");
        assert!(e.is_bad_input(), "{case}: {e}");
        let e = e.to_string();
        assert!(e.contains(words) && !e.contains('\n'), "{case}: {e}");
        std::fs::remove_dir_all(&d).ok();
    }
}

/// A folder whose weights are split into shards by
/// `model.safetensors.index.json` loads as the one-file folder does (the
/// same logits, bit for bit); shard names outside the folder, a tensor in
/// two shards, a missing shard and a missing tensor are refused.
#[test]
fn sharded_folders_load_like_one_file() {
    let src = dir("llama");
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(String::from).collect();
    names.sort();
    let (a, b) = names.split_at(names.len() / 2);
    let shard = |part: &[String]| {
        let views: Vec<(String, safetensors::tensor::TensorView)> = part
            .iter()
            .map(|n| (n.clone(), st.tensor(n).unwrap()))
            .collect();
        safetensors::tensor::serialize(views, None).unwrap()
    };
    let make = |case: &str, index: Value, files: &[(&str, Vec<u8>)]| {
        let d = std::env::temp_dir().join(format!("normlab-shards-{}-{case}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(src.join("config.json"), d.join("config.json")).unwrap();
        for (f, b) in files {
            std::fs::write(d.join(f), b).unwrap();
        }
        std::fs::write(
            d.join("model.safetensors.index.json"),
            serde_json::to_vec(&index).unwrap(),
        )
        .unwrap();
        d
    };
    let (f1, f2) = (
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    );
    let map = |files: [&str; 2]| {
        let mut m = serde_json::Map::new();
        for (part, f) in [(a, files[0]), (b, files[1])] {
            for n in part {
                m.insert(n.clone(), Value::from(f));
            }
        }
        serde_json::json!({"metadata": {}, "weight_map": m})
    };
    let good = make("good", map([f1, f2]), &[(f1, shard(a)), (f2, shard(b))]);
    let ids: Vec<u32> = (3..23).collect();
    let one = Decoder::load_hf(&src).unwrap().logits(&ids).unwrap();
    let split = Decoder::load_hf(&good).unwrap().logits(&ids).unwrap();
    assert_eq!(one, split);
    let mut dirs = vec![good];
    for (case, index, files, words) in [
        (
            "outside",
            map(["../x.safetensors", f2]),
            vec![(f2, shard(b))],
            "is not a .safetensors file name in the folder",
        ),
        (
            "twice",
            map([f1, f2]),
            vec![(f1, shard(a)), (f2, shard(&names))],
            "in two shards",
        ),
        ("missing-shard", map([f1, f2]), vec![(f1, shard(a))], f2),
        (
            "missing-tensor",
            map([f1, f2]),
            vec![(f1, shard(a)), (f2, shard(&b[1..]))],
            "has no tensor",
        ),
    ] {
        let d = make(case, index, &files);
        let e = Decoder::load_hf(&d).err().expect("refused");
        assert!(e.is_bad_input(), "{case}: {e}");
        let e = e.to_string();
        assert!(e.contains(words) && !e.contains('\n'), "{case}: {e}");
        dirs.push(d);
    }
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}
