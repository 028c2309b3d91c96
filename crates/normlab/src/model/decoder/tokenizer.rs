//! The tokenizers of GGUF files, built from their `tokenizer.ggml.*`
//! metadata with HF `tokenizers`: the byte-level BPE of Llama-family files
//! (vocabulary and merges), and the SentencePiece tokenizer of Gemma files
//! (vocabulary and scores, no merges), both as transformers builds them
//! from the same metadata (normlab's reference for token ids).

use crate::error::Result;
use crate::gguf::Gguf;
use tokenizers::AddedToken;

/// Longest token or merge string normlab reads, in bytes (SmolLM2's
/// longest token has 81 characters, Gemma 3's 31): a longer one is refused,
/// so that no work on the vocabulary grows faster than its size.
pub const MAX_TOKEN_BYTES: usize = 1024;

/// Longest SentencePiece token whose merges are recovered, in characters:
/// recovering them tries every split, so a token of n characters costs
/// about n^2; Gemma 3's longest has 31.
pub const MAX_MERGE_TOKEN_CHARS: usize = 256;

/// The merges recovered from a SentencePiece vocabulary may hold at most
/// this many times the bytes of its tokens, plus 1 MiB (Gemma 3: 3.1 MB of
/// merges from 2.3 MB of tokens): the bound keeps the recovery's memory
/// linear in the metadata.
pub const MERGE_BYTES_PER_TOKEN_BYTE: usize = 8;

/// The strings of the array `key`, each at most [`MAX_TOKEN_BYTES`].
fn strings(g: &Gguf, key: &str) -> Result<Vec<String>> {
    g.get(key)?
        .as_array()
        .ok_or_else(|| format!("{key} is not an array"))?
        .iter()
        .enumerate()
        .map(|(i, v)| match v.as_str() {
            Some(s) if s.len() <= MAX_TOKEN_BYTES => Ok(s.to_string()),
            Some(s) => Err(format!(
                "{key}[{i}] is {} bytes long; normlab reads tokens of at most {MAX_TOKEN_BYTES} bytes",
                s.len()
            )
            .into()),
            None => Err(format!("{key} holds a non-string").into()),
        })
        .collect()
}

/// Each token's type (1 normal, 3 control, 4 user-defined, 6 byte); 1
/// where the file gives none.
fn token_types(g: &Gguf, n: usize) -> Vec<u64> {
    let mut t: Vec<u64> = g
        .get("tokenizer.ggml.token_type")
        .ok()
        .and_then(|v| v.as_array())
        .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(1)).collect())
        .unwrap_or_default();
    t.resize(n, 1);
    t
}

/// Control tokens (type 3) as special tokens, matched whole as in a
/// `tokenizer.json`.
fn control_tokens(tokens: &[String], types: &[u64]) -> Vec<AddedToken> {
    tokens
        .iter()
        .zip(types)
        .filter(|(_, &ty)| ty == 3)
        .map(|(s, _)| AddedToken::from(s.clone(), true).normalized(false))
        .collect()
}

/// The byte-level BPE tokenizer described by `tokenizer.ggml.*`: vocabulary,
/// merges, the GPT-2 byte-level pre-tokenizer, and control tokens as
/// special tokens.
pub(crate) fn tokenizer_from_gguf(g: &Gguf) -> Result<tokenizers::Tokenizer> {
    use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
    use tokenizers::models::bpe::BPE;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::PreTokenizerWrapper;
    let model = g.get("tokenizer.ggml.model")?.as_str().unwrap_or("");
    if model != "gpt2" {
        return Err(format!(
            "tokenizer model '{model}' is not supported (gpt2 byte-level BPE only)"
        )
        .into());
    }
    let tokens = strings(g, "tokenizer.ggml.tokens")?;
    let merges: Vec<(String, String)> = strings(g, "tokenizer.ggml.merges")?
        .into_iter()
        .filter_map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
        })
        .collect();
    let types = token_types(g, tokens.len());
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
    tok.add_special_tokens(control_tokens(&tokens, &types))
        .map_err(|e| format!("tokenizer: {e}"))?;
    Ok(tok)
}

/// Python's `str.isspace` (Rust's `char::is_whitespace` leaves out the
/// separators U+001C..U+001F).
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// The SentencePiece tokenizer of a Gemma GGUF file (`tokenizer.ggml.model`
/// "llama": tokens and scores, no merges), built as transformers builds it
/// from the same metadata:
/// - a token made only of whitespace that contains a space is respelled
///   with one U+2581 per character (the file stores Gemma's space runs as
///   real spaces, its vocabulary spells them with U+2581);
/// - the merges are recovered from the vocabulary: every split of a token
///   into two tokens, best first by the merged token's position in the file
///   (Gemma's scores do not follow its merge order), then by the longer
///   left piece;
/// - BPE with byte fallback and `<unk>`, spaces normalised to U+2581, no
///   space prefix; decoding maps U+2581 back and fuses byte tokens;
/// - control tokens (type 3) are special and user-defined tokens (type 4:
///   newline runs, tabs, `<start_of_image>`) are matched whole, neither
///   normalised.
///
/// BOS is not added here: [`Decoder::encode`](super::Decoder::encode)
/// prepends it.
pub(crate) fn sentencepiece_from_gguf(g: &Gguf) -> Result<tokenizers::Tokenizer> {
    use tokenizers::decoders::byte_fallback::ByteFallback;
    use tokenizers::decoders::fuse::Fuse;
    use tokenizers::decoders::sequence::Sequence;
    use tokenizers::models::bpe::BPE;
    use tokenizers::normalizers::replace::Replace;
    use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
    use tokenizers::{
        DecoderWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior,
    };
    let model = g.get("tokenizer.ggml.model")?.as_str().unwrap_or("");
    if model != "llama" {
        return Err(format!(
            "tokenizer model '{model}' is not supported for this architecture (llama: SentencePiece)"
        )
        .into());
    }
    let err = |e: tokenizers::Error| -> crate::error::Error { format!("tokenizer: {e}").into() };
    let raw = strings(g, "tokenizer.ggml.tokens")?;
    let types = token_types(g, raw.len());
    let tokens: Vec<String> = raw
        .iter()
        .map(|t| {
            if t.contains(' ') && t.chars().all(py_space) {
                "\u{2581}".repeat(t.chars().count())
            } else {
                t.clone()
            }
        })
        .collect();
    // Token -> its last index (a repeated spelling keeps the later one),
    // iterated in the order of first appearance.
    let mut vocab = tokenizers::models::bpe::Vocab::default();
    let mut order: Vec<&str> = Vec::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        if vocab.insert(t.clone(), i as u32).is_none() {
            order.push(t);
        }
    }
    // (left, right, merged token's index, left's and right's lengths).
    let budget =
        MERGE_BYTES_PER_TOKEN_BYTE * raw.iter().map(String::len).sum::<usize>() + (1 << 20);
    let mut merge_bytes = 0usize;
    let mut merges: Vec<(&str, &str, u32, usize, usize)> = Vec::new();
    for t in order {
        let n = t.chars().count();
        if n > MAX_MERGE_TOKEN_CHARS {
            return Err(format!(
                "token '{}...' has {n} characters; normlab recovers SentencePiece merges for tokens of at most {MAX_MERGE_TOKEN_CHARS}",
                t.chars().take(16).collect::<String>()
            )
            .into());
        }
        for (k, (at, _)) in t.char_indices().enumerate().skip(1) {
            let (l, r) = t.split_at(at);
            if vocab.contains_key(l) && vocab.contains_key(r) {
                merges.push((l, r, vocab[t], k, n - k));
                merge_bytes += t.len();
            }
        }
        if merge_bytes > budget {
            return Err(format!(
                "the vocabulary's merges would take more than {MERGE_BYTES_PER_TOKEN_BYTE} times its {} bytes (a vocabulary built to be slow to read?)",
                raw.iter().map(String::len).sum::<usize>()
            )
            .into());
        }
    }
    merges.sort_by(|a, b| {
        (a.2, std::cmp::Reverse(a.3), std::cmp::Reverse(a.4)).cmp(&(
            b.2,
            std::cmp::Reverse(b.3),
            std::cmp::Reverse(b.4),
        ))
    });
    let merges: Vec<(String, String)> = merges
        .into_iter()
        .map(|(l, r, ..)| (l.to_string(), r.to_string()))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .unk_token("<unk>".into())
        .fuse_unk(true)
        .byte_fallback(true)
        .build()
        .map_err(|e| format!("tokenizer: {e}"))?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_normalizer(Some(NormalizerWrapper::Replace(
        Replace::new(" ", "\u{2581}").map_err(err)?,
    )))
    .map_err(err)?;
    tok.with_pre_tokenizer(Some(PreTokenizerWrapper::Split(
        Split::new(
            SplitPattern::String(" ".into()),
            SplitDelimiterBehavior::MergedWithPrevious,
            false,
        )
        .map_err(err)?,
    )));
    tok.with_decoder(Some(DecoderWrapper::Sequence(Sequence::new(vec![
        DecoderWrapper::Replace(Replace::new("\u{2581}", " ").map_err(err)?),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ]))));
    tok.add_special_tokens(control_tokens(&raw, &types))
        .map_err(|e| format!("tokenizer: {e}"))?;
    let known = tok.get_vocab(true);
    let user: Vec<AddedToken> = raw
        .iter()
        .zip(&types)
        .filter(|(t, &ty)| ty == 4 && known.contains_key(t.as_str()))
        .map(|(t, _)| AddedToken::from(t.clone(), false).normalized(false))
        .collect();
    tok.add_tokens(user).map_err(err)?;
    Ok(tok)
}
