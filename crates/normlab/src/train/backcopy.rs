//! Bigram-Backcopy (Guo et al. 2024, arXiv 2410.13835, "Active-Dormant
//! Attention Heads"): a synthetic byte task on which small transformers
//! form attention sinks within about a thousand steps, because a head that
//! copies must do nothing on most tokens.
//!
//! A sequence is a fixed BOS (byte 0, which the corpus never holds), then a
//! first character drawn from the corpus's unigram distribution without the
//! triggers, then: after a trigger (one of the k most frequent characters)
//! the next character copies the one before the trigger; otherwise it is
//! drawn from the corpus's character-bigram table. The corpus is the
//! bundled Shakespeare. Training sequences are a pure function of (seed,
//! step, index); the held-out set is the same for every seed.
//!
//! The task's loss floor: a copy position costs nothing to a perfect model,
//! a bigram position the entropy of its row of the table, the first
//! character the entropy of the unigram without triggers. `loss_floor` is
//! that expected loss over the held-out set.

use crate::error::Result;
use crate::kernels::rng::Rng;

/// The fixed first token.
pub const BOS: u32 = 0;

/// The default number of triggers (Guo et al.'s k).
pub const DEFAULT_TRIGGERS: usize = 3;

/// Held-out sequences over which [`Backcopy::loss_floor`] is averaged.
const FLOOR_SEQUENCES: usize = 64;

/// One row of a sampling table: cumulative counts over the 256 bytes.
#[derive(Clone, Debug)]
struct Row {
    cum: Vec<u64>,
    entropy: f64,
}

impl Row {
    fn new(counts: &[u64]) -> Option<Row> {
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let mut acc = 0;
        let cum = counts
            .iter()
            .map(|&c| {
                acc += c;
                acc
            })
            .collect();
        let entropy = counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| {
                let p = c as f64 / total as f64;
                -p * p.ln()
            })
            .sum();
        Some(Row { cum, entropy })
    }

    fn sample(&self, rng: &mut Rng) -> u32 {
        let u = rng.below(*self.cum.last().unwrap());
        self.cum.partition_point(|&c| c <= u) as u32
    }
}

/// The task: its tables and triggers.
#[derive(Clone, Debug)]
pub struct Backcopy {
    /// The triggers, most frequent first.
    pub triggers: Vec<u32>,
    is_trigger: [bool; 256],
    /// The first character's distribution (the unigram without triggers).
    first: Row,
    /// Bigram rows; a character without successors falls back to `first`.
    bigram: Vec<Option<Row>>,
    /// Seed of the training sequences.
    pub seed: u64,
    /// Sequence length (for the floor).
    seq: usize,
    /// Entropy of the targets' unigram distribution over the held-out set.
    unigram_entropy: f64,
    /// Expected loss of the perfect model over the held-out set, and its
    /// parts: per copy target (0) and per bigram target.
    floor: (f64, f64),
}

/// Which kind of target a position holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The character after BOS (unigram without triggers).
    First,
    /// After a trigger: a copy of the character before the trigger.
    Copy,
    /// Drawn from the bigram table.
    Bigram,
}

impl Backcopy {
    /// The task on `corpus` with `k` triggers, for sequences of `seq`.
    pub fn new(corpus: &[u8], k: usize, seed: u64, seq: usize) -> Result<Backcopy> {
        let mut uni = [0u64; 256];
        for &b in corpus {
            uni[b as usize] += 1;
        }
        if uni[BOS as usize] > 0 {
            return Err("the bigram-backcopy corpus holds byte 0, which is its BOS".into());
        }
        let chars = uni.iter().filter(|&&c| c > 0).count();
        if k == 0 || k >= chars {
            return Err(format!(
                "backcopy_triggers must be 1 to {} (the corpus has {chars} characters; got {k})",
                chars.saturating_sub(1)
            )
            .into());
        }
        let mut order: Vec<usize> = (0..256).filter(|&b| uni[b] > 0).collect();
        // Most frequent first; ties by byte value, so the choice is fixed.
        order.sort_by_key(|&b| (std::cmp::Reverse(uni[b]), b));
        let triggers: Vec<u32> = order[..k].iter().map(|&b| b as u32).collect();
        let mut is_trigger = [false; 256];
        for &t in &triggers {
            is_trigger[t as usize] = true;
        }
        let mut first = uni;
        for &t in &triggers {
            first[t as usize] = 0;
        }
        let mut pairs = vec![0u64; 256 * 256];
        for w in corpus.windows(2) {
            pairs[w[0] as usize * 256 + w[1] as usize] += 1;
        }
        let mut task = Backcopy {
            triggers,
            is_trigger,
            first: Row::new(&first).expect("a character that is not a trigger"),
            bigram: pairs.chunks_exact(256).map(Row::new).collect(),
            seed,
            seq,
            unigram_entropy: 0.0,
            floor: (0.0, 0.0),
        };
        task.measure_held_out();
        Ok(task)
    }

    /// The task on the bundled corpus.
    pub fn bundled(k: usize, seed: u64, seq: usize) -> Result<Backcopy> {
        Backcopy::new(crate::io::BUNDLED_TEXT, k, seed, seq)
    }

    /// Whether byte `b` is a trigger.
    pub fn is_trigger(&self, b: u32) -> bool {
        self.is_trigger.get(b as usize).copied().unwrap_or(false)
    }

    /// The kind of the target at position `i` of `tokens` (the target is
    /// the token at `i + 1`).
    pub fn target_kind(&self, tokens: &[u32], i: usize) -> Target {
        if i == 0 {
            Target::First
        } else if self.is_trigger(tokens[i]) {
            Target::Copy
        } else {
            Target::Bigram
        }
    }

    /// One sequence of `t` tokens and their targets from `rng`.
    fn generate(&self, rng: &mut Rng, tokens: &mut [u32], targets: &mut [u32]) {
        let t = tokens.len();
        let mut prev2 = BOS;
        let mut prev = BOS;
        for i in 0..=t {
            let x = if i == 0 {
                BOS
            } else if i == 1 {
                self.first.sample(rng)
            } else if self.is_trigger(prev) {
                prev2
            } else {
                self.bigram[prev as usize]
                    .as_ref()
                    .unwrap_or(&self.first)
                    .sample(rng)
            };
            if i < t {
                tokens[i] = x;
            }
            if i > 0 {
                targets[i - 1] = x;
            }
            prev2 = prev;
            prev = x;
        }
    }

    /// Training sequence `index` of `step`.
    pub fn train_sequence(&self, step: u64, index: usize, tokens: &mut [u32], targets: &mut [u32]) {
        let mut rng = Rng::new(
            self.seed
                ^ (step.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                ^ ((index as u64) << 40)
                ^ 0xb1c0,
        );
        self.generate(&mut rng, tokens, targets);
    }

    /// Held-out sequence `index`: the same for every seed.
    pub fn eval_sequence(&self, index: usize, tokens: &mut [u32], targets: &mut [u32]) {
        let mut rng = Rng::derive(index as u64, "bigram-backcopy held out");
        self.generate(&mut rng, tokens, targets);
    }

    /// The perfect model's loss on the target at `i` (given its tokens).
    fn target_floor(&self, tokens: &[u32], i: usize) -> f64 {
        match self.target_kind(tokens, i) {
            Target::First => self.first.entropy,
            Target::Copy => 0.0,
            Target::Bigram => {
                self.bigram[tokens[i] as usize]
                    .as_ref()
                    .unwrap_or(&self.first)
                    .entropy
            }
        }
    }

    /// The floor and the targets' unigram entropy over the first
    /// [`FLOOR_SEQUENCES`] held-out sequences.
    fn measure_held_out(&mut self) {
        let t = self.seq.max(1);
        let (mut tokens, mut targets) = (vec![0u32; t], vec![0u32; t]);
        let mut counts = [0u64; 256];
        let (mut all, mut bigram, mut n_bigram) = (0f64, 0f64, 0usize);
        for s in 0..FLOOR_SEQUENCES {
            self.eval_sequence(s, &mut tokens, &mut targets);
            for i in 0..t {
                counts[targets[i] as usize] += 1;
                let f = self.target_floor(&tokens, i);
                all += f;
                if self.target_kind(&tokens, i) == Target::Bigram {
                    bigram += f;
                    n_bigram += 1;
                }
            }
        }
        let n = (FLOOR_SEQUENCES * t) as f64;
        self.floor = (all / n, bigram / n_bigram.max(1) as f64);
        self.unigram_entropy = counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| -(c as f64 / n) * (c as f64 / n).ln())
            .sum();
    }

    /// Expected loss of the perfect model (nats per token, held-out set).
    pub fn loss_floor(&self) -> f64 {
        self.floor.0
    }

    /// The perfect model's loss per bigram target (the copy targets' is 0).
    pub fn bigram_floor(&self) -> f64 {
        self.floor.1
    }

    /// Entropy of the held-out targets' unigram distribution.
    pub fn unigram_entropy(&self) -> f64 {
        self.unigram_entropy
    }

    /// One-line description.
    pub fn describe(&self) -> String {
        let shown: Vec<String> = self
            .triggers
            .iter()
            .map(|&b| format!("{:?}", char::from(b as u8)))
            .collect();
        format!(
            "bigram-backcopy on the bundled Shakespeare (BOS byte {BOS}; triggers {}; floor {:.4} nats per token, {:.4} per bigram target, 0 per copy)",
            shown.join(" "),
            self.loss_floor(),
            self.bigram_floor()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_follow_the_rule() {
        let task = Backcopy::bundled(3, 7, 64).unwrap();
        assert_eq!(
            task.triggers,
            vec![u32::from(b' '), u32::from(b'e'), u32::from(b't')]
        );
        let (mut x, mut y) = ([0u32; 64], [0u32; 64]);
        let mut copies = 0;
        for step in 0..20 {
            task.train_sequence(step, 3, &mut x, &mut y);
            assert_eq!(x[0], BOS);
            assert!(!task.is_trigger(x[1]) && x[1] != BOS);
            assert_eq!(&x[1..], &y[..63]);
            for i in 1..64 {
                assert_ne!(y[i], BOS);
                if task.target_kind(&x, i) == Target::Copy {
                    assert_eq!(y[i], x[i - 1]);
                    copies += 1;
                }
            }
        }
        assert!(copies > 100, "{copies}");
        // Deterministic, and the held-out set does not depend on the seed.
        let (mut a, mut b, mut ya, mut yb) = ([0u32; 64], [0u32; 64], [0u32; 64], [0u32; 64]);
        task.train_sequence(5, 1, &mut a, &mut ya);
        task.train_sequence(5, 1, &mut b, &mut yb);
        assert_eq!(a, b);
        task.train_sequence(5, 2, &mut b, &mut yb);
        assert_ne!(a, b);
        let other = Backcopy::bundled(3, 8, 64).unwrap();
        task.eval_sequence(4, &mut a, &mut ya);
        other.eval_sequence(4, &mut b, &mut yb);
        assert_eq!(a, b);
    }

    /// The floor lies between 0 and the bigram floor (copies cost nothing),
    /// which lies below the unigram entropy.
    #[test]
    fn the_floor_is_below_the_bigram_rows_and_the_unigram() {
        let task = Backcopy::bundled(3, 0, 128).unwrap();
        let (f, b, u) = (
            task.loss_floor(),
            task.bigram_floor(),
            task.unigram_entropy(),
        );
        assert!(0.0 < f && f < b && b < u, "{f} {b} {u}");
        assert!(Backcopy::bundled(0, 0, 16).is_err());
        assert!(Backcopy::new(b"ab\0", 1, 0, 16).is_err());
    }
}
