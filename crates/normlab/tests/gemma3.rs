//! The one decoder configured as Gemma 3 against Hugging Face transformers'
//! own `Gemma3ForCausalLM`, built with random weights at a tiny size
//! (fixture written by scripts/gen_gemma3_fixture.py): sandwich norms with
//! 1 + w gains, QK-Norm, GeGLU, the embedding scale, a sliding window of 8
//! on three layers and full attention on one, with two RoPE bases, over a
//! sequence of 24 (longer than the window). Always runs (the fixture is in
//! the repository).

mod common;

use normlab::model::decoder::{Decoder, DecoderTrace, GainStore, KvCache};
use normlab::nn::Placement;
use serde_json::Value;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gemma3_tiny")
}

fn fixture() -> (Vec<u32>, Vec<Vec<f64>>) {
    let v: Value =
        serde_json::from_slice(&std::fs::read(dir().join("logits.json")).unwrap()).unwrap();
    let ids = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    let logits = v["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect();
    (ids, logits)
}

/// Largest |a - b| over the largest |b|.
fn rel(a: &[f32], b: &[Vec<f64>]) -> f64 {
    let b: Vec<f64> = b.iter().flatten().copied().collect();
    assert_eq!(a.len(), b.len());
    let top = b.iter().fold(0f64, |m, x| m.max(x.abs()));
    a.iter()
        .zip(&b)
        .fold(0f64, |m, (x, y)| m.max((f64::from(*x) - y).abs()))
        / top
}

#[test]
fn tiny_gemma3_matches_transformers() {
    let m = Decoder::load_hf(&dir()).unwrap();
    assert_eq!(m.cfg.placement, Placement::Sandwich);
    assert_eq!(m.cfg.gain, GainStore::OnePlus);
    assert!(m.cfg.qk_norm);
    let windows: Vec<_> = m.cfg.attn.iter().map(|a| a.window).collect();
    assert_eq!(windows, [Some(8), Some(8), None, Some(8)]);
    let (ids, want) = fixture();
    assert!(ids.len() > 8, "the sequence must be longer than the window");
    let got = m.logits(&ids).unwrap();
    let r = rel(&got, &want);
    eprintln!("tiny Gemma 3: logits within {r:e} of transformers (relative to the largest)");
    assert!(
        r < 1e-5,
        "logits differ from transformers by {r:e} (relative)"
    );
}

#[test]
fn tiny_gemma3_cache_matches_full_pass() {
    // The prompt in one pass, then one token at a time over the key/value
    // cache (crossing the window): the same logits as one full pass.
    let m = Decoder::load_hf(&dir()).unwrap();
    let (ids, want) = fixture();
    let mut cache = KvCache::new(&m);
    let mut h = m
        .forward(
            &ids[..5],
            &m.interventions,
            &mut cache,
            &mut normlab::model::hooks::NoObserver,
        )
        .unwrap();
    for &id in &ids[5..] {
        h.extend(
            m.forward(
                &[id],
                &m.interventions,
                &mut cache,
                &mut normlab::model::hooks::NoObserver,
            )
            .unwrap(),
        );
    }
    let r = rel(&m.logits_from(&h, true), &want);
    assert!(r < 1e-5, "cached logits differ by {r:e}");
}

#[test]
fn tiny_gemma3_window_and_gains_matter() {
    // Each feature is live: changing it changes the logits well beyond the
    // tolerance (so the match above cannot hold by accident).
    let (ids, want) = fixture();
    let mut m = Decoder::load_hf(&dir()).unwrap();
    m.cfg.attn.iter_mut().for_each(|a| a.window = None);
    assert!(rel(&m.logits(&ids).unwrap(), &want) > 1e-3);
    let mut m = Decoder::load_hf(&dir()).unwrap();
    for l in &mut m.layers {
        l.attn_out_norm
            .as_mut()
            .unwrap()
            .iter_mut()
            .for_each(|g| *g -= 1.0);
    }
    assert!(rel(&m.logits(&ids).unwrap(), &want) > 1e-3);
    let mut m = Decoder::load_hf(&dir()).unwrap();
    m.cfg.rope_pairs = normlab::model::decoder::RopePairs::Adjacent;
    assert!(rel(&m.logits(&ids).unwrap(), &want) > 1e-3);
}

#[test]
fn tiny_gemma3_trace_is_exact_per_sublayer() {
    // Per sublayer, before + write = after, from the decoder's own tensors;
    // the write is what the output norm leaves (sandwich).
    let m = Decoder::load_hf(&dir()).unwrap();
    let (ids, _) = fixture();
    let mut tr = DecoderTrace::default();
    m.observe(&ids, &mut tr).unwrap();
    assert_eq!(tr.sublayers.len(), 2 * m.cfg.layers);
    for s in &tr.sublayers {
        assert!(s.check < 1e-6, "{s:?}");
        assert!(s.write_rms > 0.0 && s.before_rms > 0.0);
    }
}

#[test]
fn tiny_gemma3_sink_and_ffn_clamp() {
    // The sink share is a share (in [0, 1]); its uniform baseline is the
    // mean of 1/(t+1) over the queries past position 0, counting 0 where a
    // window of 8 has left position 0 behind (layers 0, 1, 3).
    let m = Decoder::load_hf(&dir()).unwrap();
    let (ids, _) = fixture();
    let t = ids.len();
    let mut tr = DecoderTrace::default();
    m.observe(&ids, &mut tr).unwrap();
    let full: f64 = (1..t).map(|p| 1.0 / (p + 1) as f64).sum::<f64>() / (t - 1) as f64;
    let windowed: f64 = (1..8).map(|p| 1.0 / (p + 1) as f64).sum::<f64>() / (t - 1) as f64;
    for (l, a) in m.cfg.attn.iter().enumerate() {
        let want = if a.window.is_some() { windowed } else { full };
        assert!((tr.attn_sink_uniform[l] - want).abs() < 1e-12, "layer {l}");
        assert!(
            (0.0..=1.0).contains(&tr.attn_sink[l]),
            "{}",
            tr.attn_sink[l]
        );
        assert!(tr.median_abs[l] > 0.0 && tr.median_abs[l] <= tr.max_abs[l]);
    }
    // Clamping the GeGLU's gate and up at LIMIT bounds |gelu(g) u| by
    // gelu(LIMIT) LIMIT, lowers the largest value and changes the output.
    let lim = 0.5
        * tr.ffn_max
            .iter()
            .fold(f64::INFINITY, |m, &v| m.min(v))
            .sqrt() as f32;
    let mut c = Decoder::load_hf(&dir()).unwrap();
    c.interventions.ffn_clamp = Some(lim);
    let mut tc = DecoderTrace::default();
    let hc = c.observe(&ids, &mut tc).unwrap();
    let gelu = |x: f64| {
        0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
    };
    // (GELU is at least -0.17 below the gate.)
    let bound = gelu(f64::from(lim)).max(0.17) * f64::from(lim) * (1.0 + 1e-5);
    for l in 0..m.cfg.layers {
        assert!(
            tc.ffn_max[l] <= bound,
            "layer {l}: {} > {bound}",
            tc.ffn_max[l]
        );
        assert!(tc.ffn_max[l] < tr.ffn_max[l], "layer {l}");
    }
    assert_ne!(hc, m.hidden(&ids).unwrap());
}

#[test]
fn bad_folders_are_one_line_errors() {
    let tmp = std::env::temp_dir().join(format!("normlab-gemma3-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let cfg: Value =
        serde_json::from_slice(&std::fs::read(dir().join("config.json")).unwrap()).unwrap();
    let st = std::fs::read(dir().join("model.safetensors")).unwrap();
    std::fs::write(tmp.join("model.safetensors"), &st).unwrap();
    for (key, val, want) in [
        ("num_hidden_layers", Value::from(5), "no tensor"),
        ("num_hidden_layers", Value::from(0), "block_count 0"),
        ("hidden_size", Value::from(1u64 << 40), "not a count"),
        ("model_type", Value::from("mamba"), "is not read"),
        ("hidden_activation", Value::from("relu"), "not supported"),
        ("rms_norm_eps", Value::from(-1.0), "eps"),
        ("intermediate_size", Value::from(47), "has shape"),
        // Gemma 3 4B's form (transformers 4.x): not run as plain RoPE.
        (
            "rope_scaling",
            serde_json::json!({"rope_type": "linear", "factor": 8.0}),
            "RoPE scaling 'linear'",
        ),
    ] {
        let mut c = cfg.clone();
        c[key] = val;
        if key == "num_hidden_layers" {
            let n = c[key].as_u64().unwrap() as usize;
            c["layer_types"] = Value::from(vec!["full_attention"; n]);
        }
        std::fs::write(tmp.join("config.json"), serde_json::to_vec(&c).unwrap()).unwrap();
        let e = Decoder::load_hf(&tmp).err().expect("refused").to_string();
        assert!(e.contains(want) && !e.contains('\n'), "{key}: {e}");
    }
    std::fs::remove_dir_all(&tmp).ok();
}

/// A fresh folder holding the fixture's config.json with `edit` applied
/// and its model.safetensors (or `weights` in its place).
fn hostile_folder(name: &str, edit: impl FnOnce(&mut Value), weights: Option<&[u8]>) -> PathBuf {
    let tmp = std::env::temp_dir().join(format!("normlab-gemma3-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let mut cfg: Value =
        serde_json::from_slice(&std::fs::read(dir().join("config.json")).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(tmp.join("config.json"), serde_json::to_vec(&cfg).unwrap()).unwrap();
    let st = std::fs::read(dir().join("model.safetensors")).unwrap();
    std::fs::write(tmp.join("model.safetensors"), weights.unwrap_or(&st)).unwrap();
    tmp
}

/// The load's one-line error, or what went wrong instead.
fn refusal(dir: &std::path::Path) -> Result<String, String> {
    let d = dir.to_path_buf();
    common::refusal::refusal(move || Decoder::load_hf(&d).map(|_| ()))
}

/// Every size the folder's config.json implies is checked before the
/// weights are read: the config's own values first (a missing weights file
/// is not what is reported), the files' sizes against the config and the
/// memory available, the tensor table (an extra tensor too), the EOS id
/// against the vocabulary, and tokenizer.json's size and kind (a FIFO is
/// refused, not waited on).
#[test]
fn hostile_folders_are_refused_before_the_weights_are_read() {
    let mut failed = Vec::new();
    // The words in the message, not in the folder's name.
    let mut expect = |case: &str, d: &std::path::Path, words: &[&str]| {
        common::refusal::judge(case, d, refusal(d), words, &mut failed)
    };
    // The config is checked before model.safetensors is looked at.
    let d = hostile_folder("eps", |c| c["rms_norm_eps"] = Value::from(-1.0), None);
    std::fs::remove_file(d.join("model.safetensors")).unwrap();
    expect("eps", &d, &["RMSNorm eps"]);
    // A config.json past its cap (valid JSON, padded) is not read.
    let d = hostile_folder("big-config", |_| {}, None);
    let mut text = std::fs::read(d.join("config.json")).unwrap();
    text.resize(text.len() + (2 << 20), b' ');
    std::fs::write(d.join("config.json"), text).unwrap();
    expect("big config.json", &d, &["config.json", "more than"]);
    // A weights file far larger than the config's tensors is not read.
    let d = hostile_folder("big-weights", |_| {}, None);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("model.safetensors"))
        .unwrap();
    f.set_len(256 << 20).unwrap();
    expect(
        "big weights",
        &d,
        &["model.safetensors", "config.json implies"],
    );
    // A config whose weights cannot fit in memory (2 TiB at f32).
    let d = hostile_folder(
        "huge",
        |c| {
            c["vocab_size"] = Value::from(1u64 << 22);
            c["hidden_size"] = Value::from(1u64 << 17);
        },
        None,
    );
    expect("huge config", &d, &["needs about", "TiB"]);
    // An extra tensor (a fifth block's) is refused.
    let st = std::fs::read(dir().join("model.safetensors")).unwrap();
    let parsed = safetensors::SafeTensors::deserialize(&st).unwrap();
    let extra = vec![0u8; 4 * 32];
    let mut views = parsed.tensors();
    views.push((
        "model.layers.4.input_layernorm.weight".into(),
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![32], &extra).unwrap(),
    ));
    let with_extra = safetensors::tensor::serialize(views, None).unwrap();
    let d = hostile_folder("extra", |_| {}, Some(&with_extra));
    expect(
        "extra tensor",
        &d,
        &["model.layers.4.input_layernorm.weight"],
    );
    // An EOS id outside the vocabulary, truncated or not.
    for eos in [
        Value::from((1u64 << 32) + 1),
        Value::from(96),
        Value::from(vec![-1]),
    ] {
        let case = format!("eos {eos}");
        let d = hostile_folder("eos", |c| c["eos_token_id"] = eos, None);
        expect(&case, &d, &["eos_token_id"]);
    }
    // tokenizer.json: past its cap, or a FIFO.
    let d = hostile_folder("tok", |_| {}, None);
    let f = std::fs::File::create(d.join("tokenizer.json")).unwrap();
    f.set_len((256 << 20) + 1).unwrap();
    expect("big tokenizer.json", &d, &["tokenizer.json", "more than"]);
    std::fs::remove_file(d.join("tokenizer.json")).unwrap();
    let fifo = std::ffi::CString::new(d.join("tokenizer.json").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    if unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) } == 0 {
        expect("tokenizer.json FIFO", &d, &["not a regular file"]);
    }
    // A shard index without a weight map is refused.
    let d = hostile_folder("sharded", |_| {}, None);
    std::fs::remove_file(d.join("model.safetensors")).unwrap();
    std::fs::write(d.join("model.safetensors.index.json"), b"{}").unwrap();
    expect("sharded without a weight_map", &d, &["weight_map"]);
    for n in [
        "eps",
        "big-config",
        "big-weights",
        "huge",
        "extra",
        "eos",
        "tok",
        "sharded",
    ] {
        let _ = std::fs::remove_dir_all(
            std::env::temp_dir().join(format!("normlab-gemma3-{}-{n}", std::process::id())),
        );
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
