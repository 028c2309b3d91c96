//! What the attention's last forward says about itself: position 0's
//! share (the sink), the rows' mean entropy, and views of its weights and
//! projections for the sink measures (`model::sinks`).

use super::{AttentionCache, AttnKind};
use crate::kernels::act;

impl AttentionCache {
    /// Share of attention on position 0 (the sink), averaged over every
    /// sequence, head and query position t >= 1 (query 0 sees only itself)
    /// of the last forward (unnormalised kinds: of each row's sum, as
    /// [`first_share`](crate::model::sinks::first_share)); uniform
    /// attention would give [`uniform_sink_share`].
    pub fn sink_share(&self) -> f64 {
        let t = self.t;
        if !self.kind.normalised() {
            // Each row's weight over its sum (model::sinks::first_share).
            let blocks = self.probs.chunks_exact(t * t);
            let n = blocks.len().max(1) as f64;
            return blocks
                .map(|p| crate::model::sinks::first_share(p, t, false))
                .sum::<f64>()
                / n;
        }
        let (mut total, mut n) = (0f64, 0usize);
        for p in self.probs.chunks_exact(t * t) {
            for i in 1..t {
                total += f64::from(p[i * t]);
                n += 1;
            }
        }
        total / n.max(1) as f64
    }

    /// Mean entropy (nats) of the attention rows of the last forward, over
    /// every sequence, head and query position. Rows that do not sum to 1
    /// (kinds other than the softmax) are first divided by their sum; a
    /// row of zeros counts as 0.
    pub fn mean_entropy(&self) -> f64 {
        let t = self.t;
        let mut total = 0f64;
        let mut n = 0usize;
        let mut row_n = Vec::new();
        for p in self.probs.chunks_exact(t * t) {
            for (i, row) in p.chunks_exact(t).enumerate() {
                let row = &row[..=i];
                total += if self.kind.normalised() {
                    act::entropy(row)
                } else {
                    let sum: f32 = row.iter().sum();
                    row_n.clear();
                    row_n.extend(row.iter().map(|&v| if sum > 0.0 { v / sum } else { 0.0 }));
                    act::entropy(&row_n)
                };
                n += 1;
            }
        }
        total / n.max(1) as f64
    }

    /// The last forward's weights: `[batch, heads, t, t]`, causal.
    pub fn probs(&self) -> &[f32] {
        &self.probs
    }

    /// The last forward's fused `[batch * t, qw + 2 kvw]` projection (q |
    /// k | v).
    pub fn qkv(&self) -> &[f32] {
        &self.qkv
    }

    /// The value vector query head `head` reads at `row` (`b * t + j`): its
    /// key/value head's slice of the fused projection.
    pub fn value(&self, row: usize, head: usize) -> &[f32] {
        let (w, _, v_off, hd, group) = self.layout;
        let col = v_off + (head / group) * hd;
        &self.qkv[row * w + col..row * w + col + hd]
    }

    /// How the weights were made.
    pub fn kind(&self) -> AttnKind {
        self.kind
    }

    /// Sequences and positions of the last forward.
    pub fn shape(&self) -> (usize, usize) {
        (self.batch, self.t)
    }
}

/// Position 0's share under uniform causal attention over queries
/// t = 1..T-1: the mean of 1 / (t + 1).
pub fn uniform_sink_share(t: usize) -> f64 {
    (1..t).map(|i| 1.0 / (i + 1) as f64).sum::<f64>() / (t.max(2) - 1) as f64
}
