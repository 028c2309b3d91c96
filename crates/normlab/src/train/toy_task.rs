//! The toy deep net's synthetic next-token task (docs/toy-task.md).
//!
//! Rule ("shift-rank"), over inputs drawn iid uniform from an alphabet of
//! A = 8 tokens, for each position t of a sequence x[0..16):
//!
//! 1. `occ_t` = how many times x_t occurs in x[0..=t] (1 for a first
//!    occurrence);
//! 2. `z_t = (x_t + occ_t - 1) mod 8` — each repeat of a token shifts it;
//! 3. `r_t` = the number of distinct z-values whose first occurrence in
//!    z[0..=t] comes before that of z_t (0-based first-appearance rank);
//! 4. target `y_t = z_t + 8 r_t` (so targets use all 64 tokens);
//! 5. with probability `noise` (default 0.1) the target is replaced by a
//!    uniform token of 0..64 (label noise; the held-out set is noisy too).
//!
//! Every step needs only the current token and counts over the prefix — what
//! the causal mean mixer can see — but step 3 counts over the z's, which
//! themselves need a count over the prefix, so the rule composes several
//! mix-then-process stages and depth helps. The loss floor is the entropy
//! of the label noise: `-(q ln q + 63 (p/64) ln(p/64))`, q = 1 - p + p/64.

use crate::kernels::rng::Rng;

/// Input alphabet size.
pub const ALPHABET: usize = 8;
/// Vocabulary (targets).
pub const VOCAB: usize = 64;

/// The toy task with its seed and label noise.
#[derive(Clone, Debug)]
pub struct ToyTask {
    seed: u64,
    noise: f32,
    unigram: f64,
}

/// Clean targets of one sequence.
pub fn clean_targets(x: &[u32], y: &mut [u32]) {
    let mut count = [0u32; ALPHABET];
    let mut rank_of = [u32::MAX; ALPHABET];
    let mut distinct = 0u32;
    for (t, &xt) in x.iter().enumerate() {
        let xt = xt as usize;
        count[xt] += 1;
        let z = (xt + count[xt] as usize - 1) % ALPHABET;
        if rank_of[z] == u32::MAX {
            rank_of[z] = distinct;
            distinct += 1;
        }
        y[t] = z as u32 + ALPHABET as u32 * rank_of[z];
    }
}

impl ToyTask {
    /// The task for a run seed.
    pub fn new(seed: u64, noise: f32) -> ToyTask {
        let mut task = ToyTask {
            seed,
            noise,
            unigram: 0.0,
        };
        task.unigram = task.estimate_unigram_entropy();
        task
    }

    /// Vocabulary.
    pub fn vocab(&self) -> usize {
        VOCAB
    }

    fn sequence(&self, mut rng: Rng, t: usize, tokens: &mut [u32], targets: &mut [u32]) {
        for v in tokens[..t].iter_mut() {
            *v = rng.below(ALPHABET as u64) as u32;
        }
        clean_targets(&tokens[..t], &mut targets[..t]);
        for y in targets[..t].iter_mut() {
            if rng.uniform() < self.noise as f64 {
                *y = rng.below(VOCAB as u64) as u32;
            }
        }
    }

    /// Training sequence `index` of `step`.
    pub fn train_sequence(
        &self,
        step: u64,
        index: usize,
        t: usize,
        tokens: &mut [u32],
        targets: &mut [u32],
    ) {
        let rng = Rng::new(
            self.seed.wrapping_mul(0x2545_F491_4F6C_DD1D)
                ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ^ ((index as u64) << 44),
        );
        self.sequence(rng, t, tokens, targets);
    }

    /// Held-out sequence `index`: from a fixed stream independent of the run
    /// seed, so every run is evaluated on the same sequences.
    pub fn eval_sequence(&self, index: usize, t: usize, tokens: &mut [u32], targets: &mut [u32]) {
        let rng = Rng::new(0xE7A1_u64 ^ ((index as u64) << 20) ^ 0xD1B5_4A32_D192_ED03);
        self.sequence(rng, t, tokens, targets);
    }

    /// Entropy (nats) of the noisy targets' unigram distribution, estimated
    /// from 20 000 sequences of the held-out stream's generator.
    fn estimate_unigram_entropy(&self) -> f64 {
        let mut counts = [0u64; VOCAB];
        let (mut x, mut y) = ([0u32; 16], [0u32; 16]);
        for i in 0..20_000 {
            self.sequence(Rng::new(0x51ED ^ ((i as u64) << 16)), 16, &mut x, &mut y);
            for &v in &y {
                counts[v as usize] += 1;
            }
        }
        let n: u64 = counts.iter().sum();
        counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| -(c as f64 / n as f64) * (c as f64 / n as f64).ln())
            .sum()
    }

    /// Unigram entropy of the targets (nats).
    pub fn unigram_entropy(&self) -> f64 {
        self.unigram
    }

    /// Lowest achievable mean loss: the entropy of the label noise.
    pub fn loss_floor(&self) -> f64 {
        let p = self.noise as f64;
        if p == 0.0 {
            return 0.0;
        }
        let q = 1.0 - p + p / VOCAB as f64;
        let o = p / VOCAB as f64;
        -(q * q.ln()) - (VOCAB as f64 - 1.0) * o * o.ln()
    }

    /// One line for reports.
    pub fn describe(&self) -> String {
        format!(
            "toy shift-rank task (alphabet 8, vocab 64, label noise {}): loss floor {:.3}, unigram entropy {:.3} nats",
            self.noise,
            self.loss_floor(),
            self.unigram
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_on_a_worked_example() {
        // x = 3 3 5 3 0
        // occ = 1 2 1 3 1 -> z = 3 4 5 5 0 -> first ranks: 3->0, 4->1, 5->2, 0->3
        let x = [3u32, 3, 5, 3, 0];
        let mut y = [0u32; 5];
        clean_targets(&x, &mut y);
        assert_eq!(y, [3, 4 + 8, 5 + 16, 5 + 16, 24]);
    }

    #[test]
    fn rule_matches_the_reference_vector() {
        // From the PyTorch reference used to choose the rule (plain loops).
        let x = [0u32, 1, 0, 2, 0, 1, 3, 7, 7, 7, 5, 5, 5, 5, 5, 5];
        let want = [0u32, 9, 9, 18, 18, 18, 27, 39, 0, 9, 45, 54, 39, 0, 9, 18];
        let mut y = [0u32; 16];
        clean_targets(&x, &mut y);
        assert_eq!(y, want);
    }

    #[test]
    fn floor_and_determinism() {
        let t = ToyTask::new(1, 0.1);
        // q = 0.9015625: 0.9015625 * ln(1/q) + 63 * (0.1/64) * ln(640) = 0.0934 + 0.6361
        assert!((t.loss_floor() - 0.7295).abs() < 1e-3, "{}", t.loss_floor());
        assert!(t.unigram_entropy() > 3.0 && t.unigram_entropy() < 64f64.ln());
        let (mut a, mut b, mut c, mut d) = ([0u32; 16], [0u32; 16], [0u32; 16], [0u32; 16]);
        t.train_sequence(5, 3, 16, &mut a, &mut b);
        t.train_sequence(5, 3, 16, &mut c, &mut d);
        assert_eq!((a, b), (c, d));
        t.train_sequence(6, 3, 16, &mut c, &mut d);
        assert_ne!(a, c);
    }
}
