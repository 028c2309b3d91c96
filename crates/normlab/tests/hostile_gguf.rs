//! GGUF files a user may download that lie about themselves: a Llama
//! file's metadata is checked against itself and against the tensors it
//! holds before anything is sized from it, so a flipped bit of a count or a
//! NaN eps is a one-line error (bad input), never an abort, a panic or
//! garbage text. Model-free: the files are built here.

use normlab::model::decoder::Decoder;

mod common;
use common::tiny_gguf::tiny_llama;

fn load_error(bytes: Vec<u8>) -> String {
    let dir = std::env::temp_dir().join(format!("normlab-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("{n}.gguf"));
    std::fs::write(&path, &bytes).unwrap();
    let r = Decoder::load(&path);
    let _ = std::fs::remove_file(&path);
    let e = r.err().expect("a hostile file must be refused");
    assert!(e.is_bad_input(), "{e}");
    e.to_string()
}

#[test]
fn block_counts_that_the_file_does_not_hold_are_refused_before_allocating() {
    // A flipped high bit: 4294967295 blocks would be terabytes of layers.
    let e = load_error(tiny_llama(u32::MAX, 1e-5, 1e4, 1.0));
    assert!(e.contains("block_count"), "{e}");
    let e = load_error(tiny_llama(0, 1e-5, 1e4, 1.0));
    assert!(e.contains("block_count 0"), "{e}");
    // Two blocks declared, one in the file.
    let e = load_error(tiny_llama(2, 1e-5, 1e4, 1.0));
    assert!(e.contains("blk.1.attn_norm.weight"), "{e}");
}

#[test]
fn nan_or_non_positive_eps_and_rope_base_are_refused() {
    for eps in [f32::NAN, 0.0, -1e-5, f32::INFINITY] {
        let e = load_error(tiny_llama(1, eps, 1e4, 1.0));
        assert!(e.contains("eps"), "{eps}: {e}");
    }
    for base in [f32::NAN, 0.0] {
        let e = load_error(tiny_llama(1, 1e-5, base, 1.0));
        assert!(e.contains("RoPE base"), "{base}: {e}");
    }
}

#[test]
fn a_nan_in_a_norm_gain_is_refused() {
    let e = load_error(tiny_llama(1, 1e-5, 1e4, f32::NAN));
    assert!(
        e.contains("blk.0.attn_norm.weight holds a non-finite value"),
        "{e}"
    );
}

// ---------------------------------------------------------------------
// Whole tiny models (every tensor, a working tokenizer) changed in one
// place: each change is refused with one line, before anything is sized
// from it (issue 61's model-file items).
// ---------------------------------------------------------------------

use common::gguf_writer::{tiny_gemma3, tiny_llama_bpe, GgufFile, Meta};
use normlab::model::decoder::WeightStorage;

/// Load `f` in every weight storage; the first error (all must agree on
/// refusing), or the model.
fn load_all(f: &GgufFile, name: &str) -> Result<Decoder, String> {
    let path = f.write(name);
    let mut out = None;
    for s in [WeightStorage::F32, WeightStorage::Quantised] {
        let r = Decoder::load_as(&path, s);
        match (&r, &out) {
            (Err(e), _) => {
                assert!(e.is_bad_input(), "{e}");
                let _ = std::fs::remove_file(&path);
                return Err(e.to_string());
            }
            (Ok(_), _) => out = Some(r.unwrap()),
        }
    }
    let _ = std::fs::remove_file(&path);
    Ok(out.unwrap())
}

fn refused(f: &GgufFile, name: &str) -> String {
    match load_all(f, name) {
        Err(e) => e,
        Ok(_) => panic!("{name}: a hostile file must be refused"),
    }
}

#[test]
fn the_tiny_models_load_tokenize_and_run() {
    for (f, text) in [(tiny_gemma3(), "ab c"), (tiny_llama_bpe(), "ab cab")] {
        let m = load_all(&f, "valid").unwrap();
        let ids = m.encode(text).unwrap();
        assert!(ids.len() >= 2, "{ids:?}");
        let logits = m.logits(&ids).unwrap();
        assert!(logits.iter().all(|v| v.is_finite()));
        assert!(m.greedy(&ids, 3).unwrap().len() <= 3);
    }
}

#[test]
fn a_huge_head_count_is_refused_not_wrapped() {
    // 2^58 + 4 heads of head_dim 4: heads x head_dim wraps to 16.
    let mut f = tiny_gemma3();
    f.set("gemma3.attention.head_count", Meta::U64((1 << 58) + 4));
    let e = refused(&f, "heads");
    assert!(e.contains("head_count"), "{e}");
    let mut f = tiny_gemma3();
    f.set("gemma3.attention.key_length", Meta::U64(1 << 40));
    f.set("gemma3.attention.value_length", Meta::U64(1 << 40));
    let e = refused(&f, "head_dim");
    assert!(e.contains("head_dim"), "{e}");
}

#[test]
fn a_header_announcing_millions_of_tensors_is_refused_before_allocating() {
    let mut f = tiny_gemma3();
    f.tensor_count = Some(400_000_000);
    let e = refused(&f, "count");
    assert!(e.contains("400000000"), "{e}");
    // A count the file could describe is still far more than any model.
    let mut f = tiny_gemma3();
    f.tensor_count = Some(2_000_000);
    let mut bytes = f.bytes();
    bytes.resize(bytes.len() + 60_000_000, 0);
    let path = std::env::temp_dir().join(format!("normlab-count-{}.gguf", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let e = Decoder::load(&path).err().unwrap().to_string();
    let _ = std::fs::remove_file(&path);
    assert!(e.contains("2000000 tensors"), "{e}");
}

#[test]
fn an_embedding_with_fewer_rows_than_the_tokenizer_has_tokens_is_refused() {
    // 6 rows: the vocabulary size comes from the embedding, the tokenizer
    // has 32 tokens whose ids would index past it.
    let mut f = tiny_gemma3();
    let t = f.tensor_mut("token_embd.weight");
    t.1 = vec![8, 6];
    t.2.truncate(48);
    let e = refused(&f, "rows");
    assert!(e.contains("32 tokens") && e.contains("6 rows"), "{e}");
}

#[test]
fn tensors_of_the_right_size_but_the_wrong_shape_are_refused() {
    // attn_k is [d, kv_width] = [8, 4] in GGUF order (fastest first).
    for (dims, what) in [
        (vec![4u64, 8], "transposed"),
        (vec![32], "flattened"),
        (vec![2, 2, 4, 2], "4-d"),
    ] {
        let mut f = tiny_gemma3();
        f.tensor_mut("blk.0.attn_k.weight").1 = dims;
        let e = refused(&f, what);
        assert!(e.contains("blk.0.attn_k.weight has shape"), "{what}: {e}");
    }
}

#[test]
fn a_bad_final_softcap_or_special_token_id_is_refused() {
    for cap in [f32::NAN, 0.0, -30.0, f32::INFINITY] {
        let mut f = tiny_gemma3();
        f.set("gemma3.final_logit_softcapping", Meta::F32(cap));
        let e = refused(&f, "cap");
        assert!(e.contains("final_logit_softcapping"), "{cap}: {e}");
    }
    let mut f = tiny_gemma3();
    f.set("tokenizer.ggml.bos_token_id", Meta::U64(1 << 40));
    let e = refused(&f, "bos");
    assert!(e.contains("bos_token_id 1099511627776"), "{e}");
    let mut f = tiny_llama_bpe();
    f.set("tokenizer.ggml.eos_token_id", Meta::U32(29));
    let e = refused(&f, "eos");
    assert!(e.contains("eos_token_id 29"), "{e}");
}

#[test]
fn tokenizer_metadata_built_to_be_slow_is_refused_at_once() {
    let started = std::time::Instant::now();
    // One token of 2 MB, in either tokenizer.
    for mut f in [tiny_gemma3(), tiny_llama_bpe()] {
        let Some((_, Meta::Strs(tokens))) = f
            .meta
            .iter_mut()
            .find(|(k, _)| k == "tokenizer.ggml.tokens")
        else {
            panic!()
        };
        tokens[5] = "x".repeat(2 << 20);
        let e = refused(&f, "long");
        assert!(e.contains("at most 1024 bytes"), "{e}");
    }
    // Tokens of repeated letters, each a merge of every split: the
    // recovered merges would grow as the cube of the length.
    let mut f = tiny_gemma3();
    let n = 600;
    let tokens: Vec<String> = (1..=n).map(|k| "a".repeat(k)).collect();
    let mut all: Vec<String> = ["<pad>", "<eos>", "<bos>", "<unk>"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    all.extend(tokens);
    let mut types = vec![3, 3, 3, 2];
    types.resize(all.len(), 1);
    let vocab = all.len() as u64;
    f.set("tokenizer.ggml.tokens", Meta::Strs(all));
    f.set("tokenizer.ggml.token_type", Meta::I32s(types));
    let t = f.tensor_mut("token_embd.weight");
    t.1 = vec![8, vocab];
    t.2 = vec![0.1; 8 * vocab as usize];
    let e = refused(&f, "letters");
    assert!(e.contains("characters") || e.contains("merges"), "{e}");
    assert!(
        // hang bound: 30 s (idle: 0.03 s)
        started.elapsed().as_secs() < 30,
        "refusing took {:?}",
        started.elapsed()
    );
}

#[test]
fn weights_that_cannot_fit_in_memory_are_refused_before_any_is_read() {
    // 16 blocks of d and an MLP of 2^17 (the widest normlab reads):
    // terabytes at f32, from a file of kilobytes.
    let mut f = tiny_gemma3();
    f.set("gemma3.block_count", Meta::U32(16));
    f.set("gemma3.embedding_length", Meta::U32(1 << 17));
    f.set("gemma3.feed_forward_length", Meta::U32(1 << 17));
    let path = f.write("memory");
    let e = Decoder::load_as(&path, WeightStorage::F32).err().unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(e.is_bad_input(), "{e}");
    let e = e.to_string();
    assert!(e.contains("needs about") && e.contains("TiB"), "{e}");
}

#[test]
fn a_block_count_one_short_is_refused_not_a_block_dropped() {
    // The file holds two blocks; metadata naming one would run a
    // different model without a word.
    let mut f = tiny_gemma3();
    f.set("gemma3.block_count", Meta::U32(1));
    let e = refused(&f, "one-short");
    assert!(
        e.contains("blk.1.") && e.contains("does not describe"),
        "{e}"
    );
}
