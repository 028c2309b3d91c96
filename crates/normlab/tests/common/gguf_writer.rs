//! GGUF files written from a list of metadata values and tensors, for the
//! tests that feed normlab's reader hostile files: complete tiny Gemma 3
//! and Llama models (every tensor, a working tokenizer) that load and run,
//! which a test then changes in one place.

/// A metadata value.
#[derive(Clone, Debug)]
pub enum Meta {
    U32(u32),
    U64(u64),
    F32(f32),
    Bool(bool),
    Str(String),
    Strs(Vec<String>),
    I32s(Vec<i32>),
    F32s(Vec<f32>),
}

/// A GGUF file's contents: metadata in order, then tensors (name, GGUF
/// dimensions fastest first, f32 values).
#[derive(Clone, Debug, Default)]
pub struct GgufFile {
    pub meta: Vec<(String, Meta)>,
    pub tensors: Vec<(String, Vec<u64>, Vec<f32>)>,
    /// Announce this many tensors in the header instead of the true count.
    pub tensor_count: Option<u64>,
}

fn put_str(f: &mut Vec<u8>, s: &str) {
    f.extend((s.len() as u64).to_le_bytes());
    f.extend(s.as_bytes());
}

impl GgufFile {
    /// Set (or add) a metadata value.
    pub fn set(&mut self, key: &str, v: Meta) -> &mut Self {
        match self.meta.iter_mut().find(|(k, _)| k == key) {
            Some(e) => e.1 = v,
            None => self.meta.push((key.to_string(), v)),
        }
        self
    }

    /// Remove a metadata value.
    pub fn unset(&mut self, key: &str) -> &mut Self {
        self.meta.retain(|(k, _)| k != key);
        self
    }

    /// A tensor by name.
    pub fn tensor_mut(&mut self, name: &str) -> &mut (String, Vec<u64>, Vec<f32>) {
        self.tensors
            .iter_mut()
            .find(|t| t.0 == name)
            .unwrap_or_else(|| panic!("no tensor {name}"))
    }

    /// The file's bytes (GGUF v3, tensors F32, aligned to 32).
    pub fn bytes(&self) -> Vec<u8> {
        let mut f = b"GGUF".to_vec();
        f.extend(3u32.to_le_bytes());
        let n = self.tensor_count.unwrap_or(self.tensors.len() as u64);
        f.extend(n.to_le_bytes());
        f.extend((self.meta.len() as u64).to_le_bytes());
        for (k, v) in &self.meta {
            put_str(&mut f, k);
            match v {
                Meta::U32(x) => {
                    f.extend(4u32.to_le_bytes());
                    f.extend(x.to_le_bytes());
                }
                Meta::U64(x) => {
                    f.extend(10u32.to_le_bytes());
                    f.extend(x.to_le_bytes());
                }
                Meta::F32(x) => {
                    f.extend(6u32.to_le_bytes());
                    f.extend(x.to_le_bytes());
                }
                Meta::Bool(x) => {
                    f.extend(7u32.to_le_bytes());
                    f.push(*x as u8);
                }
                Meta::Str(s) => {
                    f.extend(8u32.to_le_bytes());
                    put_str(&mut f, s);
                }
                Meta::Strs(a) => {
                    f.extend(9u32.to_le_bytes());
                    f.extend(8u32.to_le_bytes());
                    f.extend((a.len() as u64).to_le_bytes());
                    for s in a {
                        put_str(&mut f, s);
                    }
                }
                Meta::I32s(a) => {
                    f.extend(9u32.to_le_bytes());
                    f.extend(5u32.to_le_bytes());
                    f.extend((a.len() as u64).to_le_bytes());
                    a.iter().for_each(|x| f.extend(x.to_le_bytes()));
                }
                Meta::F32s(a) => {
                    f.extend(9u32.to_le_bytes());
                    f.extend(6u32.to_le_bytes());
                    f.extend((a.len() as u64).to_le_bytes());
                    a.iter().for_each(|x| f.extend(x.to_le_bytes()));
                }
            }
        }
        let mut offset = 0u64;
        let mut offsets = Vec::new();
        for (name, dims, vals) in &self.tensors {
            put_str(&mut f, name);
            f.extend((dims.len() as u32).to_le_bytes());
            dims.iter().for_each(|d| f.extend(d.to_le_bytes()));
            f.extend(0u32.to_le_bytes()); // F32
            f.extend(offset.to_le_bytes());
            offsets.push(offset);
            offset += 4 * vals.len() as u64;
            offset = offset.div_ceil(32) * 32;
        }
        while !f.len().is_multiple_of(32) {
            f.push(0);
        }
        let start = f.len();
        f.resize(start + offset as usize, 0);
        for ((_, _, vals), off) in self.tensors.iter().zip(offsets) {
            for (i, v) in vals.iter().enumerate() {
                let at = start + off as usize + 4 * i;
                f[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        f
    }

    /// Write to a fresh file under the temp folder; returns its path.
    pub fn write(&self, name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("normlab-gguf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("{name}.gguf"));
        std::fs::write(&p, self.bytes()).unwrap();
        p
    }
}

/// Small deterministic values (a fixed LCG), scaled.
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
        })
        .collect()
}

/// The block tensors every family has, GGUF-named, for `layers` blocks.
fn blocks(
    t: &mut Vec<(String, Vec<u64>, Vec<f32>)>,
    layers: usize,
    (d, qw, kvw, ffn): (u64, u64, u64, u64),
    extra: &[(&str, u64)],
) {
    for i in 0..layers {
        let mut add = |name: &str, dims: Vec<u64>, scale: f32| {
            let n = dims.iter().product::<u64>() as usize;
            let seed = t.len() as u64 + 1;
            let v = if dims.len() == 1 {
                vec![1.0 + scale; n]
            } else {
                values(n, seed, scale)
            };
            t.push((format!("blk.{i}.{name}.weight"), dims, v));
        };
        add("attn_norm", vec![d], 0.0);
        add("attn_q", vec![d, qw], 0.3);
        add("attn_k", vec![d, kvw], 0.3);
        add("attn_v", vec![d, kvw], 0.3);
        add("attn_output", vec![qw, d], 0.3);
        add("ffn_norm", vec![d], 0.0);
        add("ffn_gate", vec![d, ffn], 0.3);
        add("ffn_up", vec![d, ffn], 0.3);
        add("ffn_down", vec![ffn, d], 0.3);
        for (name, len) in extra {
            add(name, vec![*len], 0.1);
        }
    }
}

/// A complete tiny Gemma 3 file: 2 blocks, d 8, 2 heads of head_dim 4, 1
/// key/value head, feed-forward 16, window 4, a SentencePiece vocabulary of
/// 32 tokens (`<pad>`, `<eos>`, `<bos>`, `<unk>`, U+2581, a-z, `ab`).
pub fn tiny_gemma3() -> GgufFile {
    let (d, hd, heads, kv, ffn) = (8u64, 4u64, 2u64, 1u64, 16u64);
    let mut tokens: Vec<String> = ["<pad>", "<eos>", "<bos>", "<unk>", "\u{2581}"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    tokens.extend((b'a'..=b'z').map(|c| (c as char).to_string()));
    tokens.push("ab".into());
    let mut types = vec![3, 3, 3, 2];
    types.resize(tokens.len(), 1);
    let vocab = tokens.len() as u64;
    let mut f = GgufFile::default();
    f.set("general.architecture", Meta::Str("gemma3".into()));
    for (k, v) in [
        ("block_count", 2),
        ("embedding_length", d as u32),
        ("attention.head_count", heads as u32),
        ("attention.head_count_kv", kv as u32),
        ("attention.key_length", hd as u32),
        ("attention.value_length", hd as u32),
        ("feed_forward_length", ffn as u32),
        ("context_length", 64),
        ("attention.sliding_window", 4),
    ] {
        f.set(&format!("gemma3.{k}"), Meta::U32(v));
    }
    f.set("gemma3.attention.layer_norm_rms_epsilon", Meta::F32(1e-6));
    f.set("gemma3.rope.freq_base", Meta::F32(1e6));
    f.set("tokenizer.ggml.model", Meta::Str("llama".into()));
    f.set("tokenizer.ggml.tokens", Meta::Strs(tokens));
    f.set("tokenizer.ggml.token_type", Meta::I32s(types));
    f.set("tokenizer.ggml.bos_token_id", Meta::U32(2));
    f.set("tokenizer.ggml.eos_token_id", Meta::U32(1));
    f.tensors.push((
        "token_embd.weight".into(),
        vec![d, vocab],
        values((d * vocab) as usize, 99, 0.5),
    ));
    f.tensors
        .push(("output_norm.weight".into(), vec![d], vec![1.0; d as usize]));
    blocks(
        &mut f.tensors,
        2,
        (d, heads * hd, kv * hd, ffn),
        &[
            ("post_attention_norm", d),
            ("post_ffw_norm", d),
            ("attn_q_norm", hd),
            ("attn_k_norm", hd),
        ],
    );
    f
}

/// A complete tiny Llama file with a byte-level BPE tokenizer: 1 block, d
/// 8, 2 heads, 1 key/value head, feed-forward 16, vocabulary of the 26
/// lower-case letters, `Ġ` (a space), `ab` (merge `a b`) and
/// `<|endoftext|>`.
pub fn tiny_llama_bpe() -> GgufFile {
    let (d, heads, kv, ffn) = (8u64, 2u64, 1u64, 16u64);
    let mut tokens: Vec<String> = (b'a'..=b'z').map(|c| (c as char).to_string()).collect();
    tokens.push("\u{120}".into());
    tokens.push("ab".into());
    tokens.push("<|endoftext|>".into());
    let mut types = vec![1; tokens.len()];
    *types.last_mut().unwrap() = 3;
    let vocab = tokens.len() as u64;
    let mut f = GgufFile::default();
    f.set("general.architecture", Meta::Str("llama".into()));
    for (k, v) in [
        ("block_count", 1),
        ("embedding_length", d as u32),
        ("attention.head_count", heads as u32),
        ("attention.head_count_kv", kv as u32),
        ("feed_forward_length", ffn as u32),
        ("context_length", 64),
    ] {
        f.set(&format!("llama.{k}"), Meta::U32(v));
    }
    f.set("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5));
    f.set("llama.rope.freq_base", Meta::F32(1e4));
    f.set("tokenizer.ggml.model", Meta::Str("gpt2".into()));
    f.set("tokenizer.ggml.tokens", Meta::Strs(tokens));
    f.set("tokenizer.ggml.merges", Meta::Strs(vec!["a b".into()]));
    f.set("tokenizer.ggml.token_type", Meta::I32s(types));
    f.set("tokenizer.ggml.eos_token_id", Meta::U32(vocab as u32 - 1));
    f.tensors.push((
        "token_embd.weight".into(),
        vec![d, vocab],
        values((d * vocab) as usize, 7, 0.5),
    ));
    f.tensors
        .push(("output_norm.weight".into(), vec![d], vec![1.0; d as usize]));
    blocks(
        &mut f.tensors,
        1,
        (d, heads * d / heads, kv * d / heads, ffn),
        &[],
    );
    f
}
