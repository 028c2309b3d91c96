//! The byte-level BPE tokenizer of a Llama-family GGUF file, built from its
//! `tokenizer.ggml.*` metadata with HF `tokenizers`.

use crate::error::Result;
use crate::gguf::Gguf;

/// The byte-level BPE tokenizer described by `tokenizer.ggml.*`: vocabulary,
/// merges, the GPT-2 byte-level pre-tokenizer, and control tokens as
/// special tokens.
pub(crate) fn tokenizer_from_gguf(g: &Gguf) -> Result<tokenizers::Tokenizer> {
    use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
    use tokenizers::models::bpe::BPE;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::{AddedToken, PreTokenizerWrapper};
    let model = g.get("tokenizer.ggml.model")?.as_str().unwrap_or("");
    if model != "gpt2" {
        return Err(format!(
            "tokenizer model '{model}' is not supported (gpt2 byte-level BPE only)"
        )
        .into());
    }
    let strings = |key: &str| -> Result<Vec<String>> {
        g.get(key)?
            .as_array()
            .ok_or_else(|| format!("{key} is not an array"))?
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{key} holds a non-string").into())
            })
            .collect()
    };
    let tokens = strings("tokenizer.ggml.tokens")?;
    let merges: Vec<(String, String)> = strings("tokenizer.ggml.merges")?
        .into_iter()
        .filter_map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
        })
        .collect();
    let types: Vec<u64> = g
        .get("tokenizer.ggml.token_type")
        .ok()
        .and_then(|v| v.as_array())
        .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(1)).collect())
        .unwrap_or_default();
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| format!("tokenizer: {e}"))?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    // transformers builds this tokenizer from the same metadata with the
    // plain GPT-2 byte-level pre-tokenizer, and normlab follows it (its
    // reference here). SmolLM2's own tokenizer.json, and llama.cpp's
    // "smollm" pre-tokenizer, also split digits one by one, so numbers may
    // tokenize differently there.
    tok.with_pre_tokenizer(Some(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
        false, true, true,
    ))));
    tok.with_decoder(Some(ByteLevelDecoder::default()));
    // Control tokens (type 3) match as whole strings, as in tokenizer.json.
    let special: Vec<AddedToken> = tokens
        .iter()
        .zip(&types)
        .filter(|(_, &ty)| ty == 3)
        .map(|(s, _)| AddedToken::from(s.clone(), true))
        .collect();
    tok.add_special_tokens(special)
        .map_err(|e| format!("tokenizer: {e}"))?;
    Ok(tok)
}
