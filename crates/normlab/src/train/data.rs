//! Training data: the toy task (synthetic, generated from a seed), byte-
//! level text, text read by a pretrained model's tokenizer (`--from`), and
//! Bigram-Backcopy (`backcopy.rs`). Every training sequence is a pure function of
//! (seed, step, index), so runs resume bit-identically and do not depend on
//! how sequences are spread over threads.

use crate::error::Result;
use crate::kernels::rng::Rng;
use crate::train::backcopy::Backcopy;
use crate::train::toy_task::ToyTask;
use std::path::Path;

/// Where batches come from.
#[derive(Clone, Debug)]
pub enum Data {
    /// The synthetic toy task.
    Toy(ToyTask),
    /// Byte-level text.
    Text(TextData),
    /// Bigram-Backcopy (bytes, BOS at position 0).
    Backcopy(Box<Backcopy>),
    /// Text as a pretrained model's tokenizer reads it.
    Tokens(TokenData),
}

impl Data {
    /// Vocabulary size the data needs.
    pub fn vocab(&self) -> usize {
        match self {
            Data::Toy(t) => t.vocab(),
            Data::Text(_) | Data::Backcopy(_) => 256,
            Data::Tokens(d) => d.vocab,
        }
    }

    /// Training sequence `index` of `step` (length `t`).
    pub fn train_sequence(
        &self,
        step: u64,
        index: usize,
        t: usize,
        tokens: &mut [u32],
        targets: &mut [u32],
    ) {
        match self {
            Data::Toy(d) => d.train_sequence(step, index, t, tokens, targets),
            Data::Text(d) => d.train_sequence(step, index, t, tokens, targets),
            Data::Backcopy(d) => d.train_sequence(step, index, &mut tokens[..t], &mut targets[..t]),
            Data::Tokens(d) => {
                let start = train_start(d.seed, step, index, d.train_end - t);
                d.window(start, t, tokens, targets);
            }
        }
    }

    /// Held-out sequence `index` (fixed for the run).
    pub fn eval_sequence(&self, index: usize, t: usize, tokens: &mut [u32], targets: &mut [u32]) {
        match self {
            Data::Toy(d) => d.eval_sequence(index, t, tokens, targets),
            Data::Text(d) => d.eval_sequence(index, t, tokens, targets),
            Data::Backcopy(d) => d.eval_sequence(index, &mut tokens[..t], &mut targets[..t]),
            Data::Tokens(d) => {
                let start = eval_start(d.train_end, d.ids.len(), index, t);
                d.window(start, t, tokens, targets);
            }
        }
    }

    /// Entropy (nats) of the targets' unigram distribution: the loss of a
    /// model that ignores its input. "Stalled" runs stay near it.
    pub fn unigram_entropy(&self) -> f64 {
        match self {
            Data::Toy(d) => d.unigram_entropy(),
            Data::Text(d) => d.unigram_entropy,
            Data::Backcopy(d) => d.unigram_entropy(),
            Data::Tokens(d) => d.unigram_entropy,
        }
    }

    /// The lowest achievable loss, where known.
    pub fn loss_floor(&self) -> Option<f64> {
        match self {
            Data::Toy(d) => Some(d.loss_floor()),
            Data::Text(_) | Data::Tokens(_) => None,
            Data::Backcopy(d) => Some(d.loss_floor()),
        }
    }

    /// One-line description.
    pub fn describe(&self) -> String {
        match self {
            Data::Toy(d) => d.describe(),
            Data::Backcopy(d) => d.describe(),
            Data::Tokens(d) => format!(
                "text {} read by {}'s tokenizer ({} tokens: {} train, {} held out)",
                d.name,
                d.model,
                d.ids.len(),
                d.train_end,
                d.ids.len() - d.train_end
            ),
            Data::Text(d) => format!(
                "text {} ({} bytes: {} train, {} held out){}",
                d.name,
                d.bytes.len(),
                d.train_end,
                d.bytes.len() - d.train_end,
                d.bos.map_or(String::new(), |b| format!(
                    "; every sequence starts with byte {b}"
                ))
            ),
        }
    }
}

/// Byte-level text with a train / held-out split (last 10% held out).
#[derive(Clone, Debug)]
pub struct TextData {
    /// File name (for reports).
    pub name: String,
    /// All bytes.
    pub bytes: Vec<u8>,
    /// Bytes before this index are training data.
    pub train_end: usize,
    /// Seed of the sampling of training windows.
    pub seed: u64,
    /// Entropy of the training bytes' unigram distribution (nats).
    pub unigram_entropy: f64,
    /// A fixed first byte of every sequence (`bos_byte`), if any: it takes
    /// the place of the window's first byte, whose target (the next byte)
    /// is kept, so every target is the same as without it.
    pub bos: Option<u8>,
}

impl TextData {
    /// Load a text file; at least `min_len` bytes in each split.
    pub fn load(path: &Path, seed: u64, min_len: usize) -> Result<TextData> {
        let bytes = crate::io::read(path)?;
        TextData::from_bytes(
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            bytes,
            seed,
            min_len,
        )
    }

    /// From bytes in memory.
    pub fn from_bytes(name: String, bytes: Vec<u8>, seed: u64, min_len: usize) -> Result<TextData> {
        let train_end = bytes.len() - bytes.len() / 10;
        if bytes.len() - train_end < min_len + 1 || train_end < min_len + 1 {
            // 90% trains, 10% is held out, and each part needs one sequence
            // of min_len bytes plus its next-byte target.
            let needed = 10 * (min_len + 1);
            return Err(format!(
                "data file {name} is too short: {} bytes, and sequences of {min_len} need at least {needed} (90% to train, 10% held out, each at least {} bytes)",
                bytes.len(),
                min_len + 1
            )
            .into());
        }
        let mut counts = [0u64; 256];
        for &b in &bytes[..train_end] {
            counts[b as usize] += 1;
        }
        let n = train_end as f64;
        let unigram_entropy = counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| -(c as f64 / n) * (c as f64 / n).ln())
            .sum();
        Ok(TextData {
            name,
            bytes,
            train_end,
            seed,
            unigram_entropy,
            bos: None,
        })
    }

    fn window(&self, start: usize, t: usize, tokens: &mut [u32], targets: &mut [u32]) {
        match self.bos {
            None => {
                for i in 0..t {
                    tokens[i] = self.bytes[start + i] as u32;
                    targets[i] = self.bytes[start + i + 1] as u32;
                }
            }
            Some(b) => {
                tokens[0] = u32::from(b);
                for i in 0..t {
                    if i > 0 {
                        tokens[i] = self.bytes[start + i] as u32;
                    }
                    targets[i] = self.bytes[start + i + 1] as u32;
                }
            }
        }
    }

    fn train_sequence(
        &self,
        step: u64,
        index: usize,
        t: usize,
        tokens: &mut [u32],
        targets: &mut [u32],
    ) {
        let start = train_start(self.seed, step, index, self.train_end - t);
        self.window(start, t, tokens, targets);
    }

    fn eval_sequence(&self, index: usize, t: usize, tokens: &mut [u32], targets: &mut [u32]) {
        let start = eval_start(self.train_end, self.bytes.len(), index, t);
        self.window(start, t, tokens, targets);
    }
}

/// Where training window `index` of `step` starts: a pure function of
/// (seed, step, index), below `end`.
fn train_start(seed: u64, step: u64, index: usize, end: usize) -> usize {
    let mut rng = Rng::new(
        seed ^ (step.wrapping_mul(0x9E37_79B9_7F4A_7C15)) ^ ((index as u64) << 40) ^ 0x7e57,
    );
    rng.below(end as u64) as usize
}

/// Where held-out window `index` of `t` starts: spread evenly over the
/// held-out part `[train_end, len)`.
fn eval_start(train_end: usize, len: usize, index: usize, t: usize) -> usize {
    let span = len - train_end - t - 1;
    train_end + (index * 7919 * t) % span.max(1)
}

/// Text as a pretrained model's tokenizer reads it, split as byte-level
/// text is (the last tenth of the tokens held out).
#[derive(Clone, Debug)]
pub struct TokenData {
    /// File name (for reports).
    pub name: String,
    /// The model whose tokenizer read it.
    pub model: String,
    /// The token ids.
    pub ids: Vec<u32>,
    /// Tokens before this index are training data.
    pub train_end: usize,
    /// The model's vocabulary.
    pub vocab: usize,
    /// Seed of the sampling of training windows.
    pub seed: u64,
    /// Entropy of the training tokens' unigram distribution (nats).
    pub unigram_entropy: f64,
    /// The model's BOS, when its tokenizer puts one first: it takes the
    /// first place of every window, as in the text the model was trained
    /// on (Gemma's loss without it is far from its own).
    pub bos: Option<u32>,
}

impl TokenData {
    /// `ids` (of a `vocab`-token vocabulary), each split with at least one
    /// window of `min_len` tokens and its targets.
    pub fn new(
        (name, model): (String, String),
        ids: Vec<u32>,
        vocab: usize,
        seed: u64,
        min_len: usize,
    ) -> Result<TokenData> {
        let train_end = ids.len() - ids.len() / 10;
        if ids.len() - train_end < min_len + 1 || train_end < min_len + 1 {
            return Err(format!(
                "{name} gives {} tokens: too few for sequences of {min_len} (each of the 90% to train and the 10% held out needs {} tokens)",
                ids.len(),
                min_len + 1
            )
            .into());
        }
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= vocab) {
            return Err(format!(
                "the tokenizer gives id {bad}, outside the model's {vocab}-token vocabulary"
            )
            .into());
        }
        let mut counts = std::collections::HashMap::<u32, u64>::new();
        for &i in &ids[..train_end] {
            *counts.entry(i).or_default() += 1;
        }
        let n = train_end as f64;
        let mut c: Vec<u64> = counts.into_values().collect();
        c.sort_unstable();
        let unigram_entropy = c
            .iter()
            .map(|&c| -(c as f64 / n) * (c as f64 / n).ln())
            .sum();
        Ok(TokenData {
            name,
            model,
            ids,
            train_end,
            vocab,
            seed,
            unigram_entropy,
            bos: None,
        })
    }

    fn window(&self, start: usize, t: usize, tokens: &mut [u32], targets: &mut [u32]) {
        tokens[..t].copy_from_slice(&self.ids[start..start + t]);
        targets[..t].copy_from_slice(&self.ids[start + 1..start + t + 1]);
        if let Some(b) = self.bos {
            tokens[0] = b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bos` reads as `plain` with its BOS (id 1) in the first place of
    /// every training and held-out window, every target kept.
    fn bos_takes_the_first_place(plain: &Data, bos: &Data) {
        let (mut a, mut ta, mut b, mut tb) = ([0u32; 16], [0u32; 16], [0u32; 16], [0u32; 16]);
        for step in 0..5 {
            plain.train_sequence(step, 2, 16, &mut a, &mut ta);
            bos.train_sequence(step, 2, 16, &mut b, &mut tb);
            assert_eq!((b[0], &b[1..], ta), (1, &a[1..], tb));
            assert_ne!(a[0], 1);
        }
        plain.eval_sequence(3, 16, &mut a, &mut ta);
        bos.eval_sequence(3, 16, &mut b, &mut tb);
        assert_eq!((b[0], &b[1..], ta), (1, &a[1..], tb));
    }

    #[test]
    fn a_models_bos_takes_the_first_place_of_every_token_window() {
        let ids: Vec<u32> = (0..4000u32).map(|i| 2 + i * 7 % 97).collect();
        let plain = TokenData::new(("t".into(), "m".into()), ids, 100, 3, 16).unwrap();
        let bos = TokenData {
            bos: Some(1),
            ..plain.clone()
        };
        bos_takes_the_first_place(&Data::Tokens(plain), &Data::Tokens(bos));
    }

    #[test]
    fn bos_byte_takes_the_first_place_and_keeps_every_target() {
        let bytes: Vec<u8> = (0..4000u32).map(|i| (i * 7 % 251) as u8).collect();
        let plain = TextData::from_bytes("t".into(), bytes, 3, 16).unwrap();
        let bos = TextData {
            bos: Some(1),
            ..plain.clone()
        };
        bos_takes_the_first_place(&Data::Text(plain), &Data::Text(bos));
    }
}
