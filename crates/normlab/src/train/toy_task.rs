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
//!    uniform token of 0..64 (label noise; the held-out set is noisy too,
//!    with the same probability unless `toy_eval_noise` sets its own: 0
//!    scores a model on the clean rule).
//!
//! Every step needs only the current token and counts over the prefix — what
//! the causal mean mixer can see — but step 3 counts over the z's, which
//! themselves need a count over the prefix, so the rule composes several
//! mix-then-process stages and depth helps. The loss floor is the entropy
//! of the label noise: `-(q ln q + 63 (p/64) ln(p/64))`, q = 1 - p + p/64;
//! with held-out noise e != p it is the held-out loss of a model that learned
//! the rule and the training noise p exactly, `-(q_e ln q_p + 63 (e/64) ln(p/64))`.

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
    eval_noise: f32,
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
    /// The task for a run seed, its held-out targets as noisy as its
    /// training ones.
    pub fn new(seed: u64, noise: f32) -> ToyTask {
        ToyTask::with_eval_noise(seed, noise, noise)
    }

    /// The task with held-out targets of their own label noise.
    pub fn with_eval_noise(seed: u64, noise: f32, eval_noise: f32) -> ToyTask {
        let mut task = ToyTask {
            seed,
            noise,
            eval_noise,
            unigram: 0.0,
        };
        task.unigram = task.estimate_unigram_entropy();
        task
    }

    /// Vocabulary.
    pub fn vocab(&self) -> usize {
        VOCAB
    }

    fn sequence(
        &self,
        mut rng: Rng,
        noise: f32,
        t: usize,
        tokens: &mut [u32],
        targets: &mut [u32],
    ) {
        for v in tokens[..t].iter_mut() {
            *v = rng.below(ALPHABET as u64) as u32;
        }
        clean_targets(&tokens[..t], &mut targets[..t]);
        for y in targets[..t].iter_mut() {
            if rng.uniform() < noise as f64 {
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
        self.sequence(rng, self.noise, t, tokens, targets);
    }

    /// Held-out sequence `index`: from a fixed stream independent of the run
    /// seed, so every run is evaluated on the same sequences.
    pub fn eval_sequence(&self, index: usize, t: usize, tokens: &mut [u32], targets: &mut [u32]) {
        let rng = Rng::new(0xE7A1_u64 ^ ((index as u64) << 20) ^ 0xD1B5_4A32_D192_ED03);
        self.sequence(rng, self.eval_noise, t, tokens, targets);
    }

    /// Unigram counts of 20 000 sequences of one generator at a label noise.
    fn unigram_counts(&self, noise: f32) -> [u64; VOCAB] {
        let mut counts = [0u64; VOCAB];
        let (mut x, mut y) = ([0u32; 16], [0u32; 16]);
        for i in 0..20_000 {
            let rng = Rng::new(0x51ED ^ ((i as u64) << 16));
            self.sequence(rng, noise, 16, &mut x, &mut y);
            for &v in &y {
                counts[v as usize] += 1;
            }
        }
        counts
    }

    /// The held-out loss (nats) of a model that ignores its input and
    /// predicts the training targets' unigram distribution: its entropy when
    /// the held-out targets are as noisy, else the cross-entropy of the
    /// held-out unigram against the training one.
    fn estimate_unigram_entropy(&self) -> f64 {
        let train = self.unigram_counts(self.noise);
        let held = if self.eval_noise == self.noise {
            train
        } else {
            self.unigram_counts(self.eval_noise)
        };
        let share = |c: u64, n: u64| c as f64 / n as f64;
        let (nt, nh): (u64, u64) = (train.iter().sum(), held.iter().sum());
        held.iter()
            .zip(&train)
            .filter(|(&h, _)| h > 0)
            .map(|(&h, &t)| -share(h, nh) * share(t.max(1), nt).ln())
            .sum()
    }

    /// Unigram entropy of the targets (nats).
    pub fn unigram_entropy(&self) -> f64 {
        self.unigram
    }

    /// Lowest held-out loss of a model that learned the training
    /// distribution: the entropy of the label noise (held-out targets as
    /// noisy as the training ones), else the cross-entropy of the held-out
    /// noise against the training noise (with clean held-out targets,
    /// `-ln(1 - p + p/64)`).
    pub fn loss_floor(&self) -> f64 {
        let (p, e) = (self.noise as f64, self.eval_noise as f64);
        let v = VOCAB as f64;
        let (q, o) = (1.0 - p + p / v, p / v);
        let (qe, oe) = (1.0 - e + e / v, e / v);
        if e == 0.0 {
            return if p == 0.0 { 0.0 } else { -q.ln() };
        }
        -(qe * q.ln()) - (v - 1.0) * oe * o.ln()
    }

    /// One line for reports.
    pub fn describe(&self) -> String {
        format!(
            "toy shift-rank task (alphabet 8, vocab 64, label noise {}{}): loss floor {:.3}, unigram entropy {:.3} nats",
            self.noise,
            if self.eval_noise == self.noise {
                String::new()
            } else {
                format!(", held-out targets' noise {}", self.eval_noise)
            },
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

    #[test]
    fn clean_held_out_targets_follow_the_rule_and_lower_the_floor() {
        let noisy = ToyTask::new(2, 0.5);
        let clean = ToyTask::with_eval_noise(2, 0.5, 0.0);
        let (mut x, mut y, mut want) = ([0u32; 16], [0u32; 16], [0u32; 16]);
        let mut moved = 0;
        for i in 0..50 {
            clean.eval_sequence(i, 16, &mut x, &mut y);
            clean_targets(&x, &mut want);
            assert_eq!(y, want);
            noisy.eval_sequence(i, 16, &mut x, &mut y);
            moved += y.iter().zip(&want).filter(|(a, b)| a != b).count();
        }
        // About half of the noisy targets are replaced (a few by themselves).
        assert!((300..500).contains(&moved), "{moved}");
        // Training data does not depend on the held-out noise.
        let (mut a, mut b, mut c, mut d) = ([0u32; 16], [0u32; 16], [0u32; 16], [0u32; 16]);
        noisy.train_sequence(4, 1, 16, &mut a, &mut b);
        clean.train_sequence(4, 1, 16, &mut c, &mut d);
        assert_eq!((a, b), (c, d));
        // A model that learned the rule and p = 0.5 gives the true token
        // q = 1 - p + p/64: its clean loss -ln q lies far under the noise's entropy.
        let q = 1.0 - 0.5 + 0.5 / 64.0;
        assert!((clean.loss_floor() + f64::ln(q)).abs() < 1e-12);
        assert!(noisy.loss_floor() > clean.loss_floor() + 1.5);
        // Ignoring the input: the noisy unigram's cross-entropy on clean targets.
        assert!(clean.unigram_entropy() > 3.0 && clean.unigram_entropy() < 64f64.ln() + 0.5);
    }
}
