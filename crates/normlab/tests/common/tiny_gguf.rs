//! A tiny Llama GGUF file built byte by byte, for the tests that feed
//! normlab's GGUF reader files that lie about themselves.

/// GGUF value types used here.
const U32: u32 = 4;
const F32: u32 = 6;
const STRING: u32 = 8;

fn key(f: &mut Vec<u8>, k: &str) {
    f.extend((k.len() as u64).to_le_bytes());
    f.extend(k.as_bytes());
}

/// A tiny Llama GGUF (d 4, vocab 8, ffn 8, one block's worth of the tensors
/// the checks look at, all F32) with `block_count`, `eps` and `rope_base`;
/// the first norm's gains are `gain` (the other tensors are zeros).
pub fn tiny_llama(block_count: u32, eps: f32, rope_base: f32, gain: f32) -> Vec<u8> {
    let (d, vocab, ffn) = (4u64, 8u64, 8u64);
    let tensors: [(&str, Vec<u64>); 3] = [
        ("blk.0.attn_norm.weight", vec![d]),
        ("token_embd.weight", vec![d, vocab]),
        ("blk.0.ffn_up.weight", vec![d, ffn]),
    ];
    let nums: [(&str, u32); 7] = [
        ("llama.vocab_size", vocab as u32),
        ("llama.embedding_length", d as u32),
        ("llama.block_count", block_count),
        ("llama.attention.head_count", 2),
        ("llama.attention.head_count_kv", 1),
        ("llama.feed_forward_length", ffn as u32),
        ("llama.context_length", 64),
    ];
    let mut f = b"GGUF".to_vec();
    f.extend(3u32.to_le_bytes());
    f.extend((tensors.len() as u64).to_le_bytes());
    f.extend((1 + nums.len() as u64 + 2).to_le_bytes());
    key(&mut f, "general.architecture");
    f.extend(STRING.to_le_bytes());
    f.extend(5u64.to_le_bytes());
    f.extend(b"llama");
    for (k, v) in nums {
        key(&mut f, k);
        f.extend(U32.to_le_bytes());
        f.extend(v.to_le_bytes());
    }
    for (k, v) in [
        ("llama.attention.layer_norm_rms_epsilon", eps),
        ("llama.rope.freq_base", rope_base),
    ] {
        key(&mut f, k);
        f.extend(F32.to_le_bytes());
        f.extend(v.to_le_bytes());
    }
    let mut offset = 0u64;
    for (name, dims) in &tensors {
        key(&mut f, name);
        f.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            f.extend(d.to_le_bytes());
        }
        f.extend(0u32.to_le_bytes()); // F32
        f.extend(offset.to_le_bytes());
        offset += 4 * dims.iter().product::<u64>();
        offset = offset.div_ceil(32) * 32;
    }
    while !f.len().is_multiple_of(32) {
        f.push(0);
    }
    let data_start = f.len();
    f.resize(data_start + offset as usize, 0);
    // blk.0.attn_norm.weight's values are the first of the data.
    for i in 0..d as usize {
        f[data_start + 4 * i..data_start + 4 * i + 4].copy_from_slice(&gain.to_le_bytes());
    }
    f
}
