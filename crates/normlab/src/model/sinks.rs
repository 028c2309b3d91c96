//! The attention-sink measures, stated once (SPEC 2c; claim C26). Training
//! logs them ([`SinkStats`] in metrics.jsonl, runs whose position 0 always
//! holds the same token), and the experiments, `report` and the dashboard
//! read them from there.
//!
//! - **first-token share** of a head: the mean over queries t >= 1 of the
//!   attention weight on position 0 (query 0 sees only itself), over the
//!   sequences of the batch; for attention whose rows need not sum to 1
//!   (sigmoid, ReLU), of the weight over the row's sum; a learned sink
//!   logit's share is not a token's and is left out. Uniform causal
//!   attention gives
//!   [`uniform_sink_share`](crate::nn::uniform_sink_share).
//! - **sink rate**: the share of (layer, head) pairs whose first-token
//!   share exceeds [`SINK_EPS`] = 0.3 (after Gu et al. 2024's Sink metric,
//!   arXiv 2410.10781, epsilon 0.3, but on normlab's share: queries t >= 1,
//!   averaged over the batch's sequences before the threshold).
//! - **Sink metric** in Gu et al.'s own form: each (sequence, layer, head)
//!   whose first-token importance, the weight on position 0 averaged over
//!   every query *including query 0* ((1/T) sum_t A[t, 0]), exceeds 0.3
//!   counts; the metric is their share (`decoder/field.rs` measures it on
//!   pretrained models' 64-token windows).
//! - **top over median** (Sun et al. 2024's massive activations): per
//!   block, the stream's largest |x| anywhere over its median |x|.
//! - **massive activation at position 0**: the stream's largest |x| at
//!   position 0 (over the batch's sequences and channels) over the median
//!   |x| of the whole stream, per block.
//! - **value drain**: per head, the norm of the value vector at position 0
//!   over the median norm of the values at positions 1 and on, the mean of
//!   that ratio over sequences (Guo et al. 2024, arXiv 2410.13835: a sink's
//!   value shrinks, so attending to it writes almost nothing).

use serde::{Deserialize, Serialize};

/// Gu et al.'s threshold: a head with a larger first-token share is a sink.
pub const SINK_EPS: f64 = 0.3;

/// Position 0's mean weight over queries 1..t of one causal `[t, t]` block
/// of attention weights (NaN for t < 2). Rows of an unnormalised attention
/// (`normalised` false: sigmoid, ReLU) are first divided by their sum, so
/// that the share is of what the query hands out (a row of zeros hands out
/// nothing and counts 0).
pub fn first_share(probs: &[f32], t: usize, normalised: bool) -> f64 {
    if t < 2 {
        return f64::NAN;
    }
    let share = |i: usize| {
        let p0 = f64::from(probs[i * t]);
        if normalised {
            return p0;
        }
        let sum: f64 = probs[i * t..=i * t + i].iter().map(|&v| f64::from(v)).sum();
        if sum > 0.0 {
            p0 / sum
        } else {
            0.0
        }
    };
    (1..t).map(share).sum::<f64>() / (t - 1) as f64
}

/// Gu et al.'s first-token importance of one `[t, t]` block of attention
/// weights: the weight on position 0 averaged over every query, query 0
/// (which sees only itself) included; rows of an unnormalised attention
/// divided by their sum first (a row of zeros counts 0).
pub fn first_importance(probs: &[f32], t: usize, normalised: bool) -> f64 {
    if t == 0 {
        return f64::NAN;
    }
    let share = |i: usize| {
        let p0 = f64::from(probs[i * t]);
        if normalised {
            return p0;
        }
        let sum: f64 = probs[i * t..=i * t + i].iter().map(|&v| f64::from(v)).sum();
        if sum > 0.0 {
            p0 / sum
        } else {
            0.0
        }
    };
    (0..t).map(share).sum::<f64>() / t as f64
}

/// The share of heads whose first-token share exceeds [`SINK_EPS`].
pub fn sink_rate<'a>(shares: impl IntoIterator<Item = &'a f64>) -> f64 {
    let (mut over, mut n) = (0usize, 0usize);
    for &s in shares {
        over += usize::from(s > SINK_EPS);
        n += 1;
    }
    over as f64 / n.max(1) as f64
}

/// The median of `v` (NaN when empty); reorders `v`.
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mid = v.len() / 2;
    *v.select_nth_unstable_by(mid, f64::total_cmp).1
}

/// The largest |x| anywhere in a stream over its median |x| (Sun et al.'s
/// ratio; parts as in [`position0_ratio`]).
pub fn top_ratio<'a>(parts: impl IntoIterator<Item = (&'a [f32], usize, usize)>) -> f64 {
    let mut all = Vec::new();
    let mut top = 0f64;
    for (x, _, _) in parts {
        for &v in x {
            let a = f64::from(v.abs());
            top = if a.is_nan() || top.is_nan() {
                f64::NAN
            } else {
                top.max(a)
            };
            all.push(a);
        }
    }
    top / median(&mut all)
}

/// The largest |x| at position 0 of a stream over the median |x| of the
/// whole stream. The stream comes in parts (one per shard), each
/// `(values, width per token, tokens per sequence)`.
pub fn position0_ratio<'a>(parts: impl IntoIterator<Item = (&'a [f32], usize, usize)>) -> f64 {
    let (mut top, mut all) = (0f64, Vec::new());
    for (x, width, t) in parts {
        all.extend(x.iter().map(|v| f64::from(v.abs())));
        for v in x
            .chunks_exact(width * t)
            .flat_map(|seq| seq[..width].iter())
        {
            top = if v.is_nan() || top.is_nan() {
                f64::NAN
            } else {
                top.max(f64::from(v.abs()))
            };
        }
    }
    top / median(&mut all)
}

/// One sequence's value drain for one head: `values(j)` is the value
/// vector at position j of `t`.
pub fn value_drain<'a>(values: impl Fn(usize) -> &'a [f32], t: usize) -> f64 {
    let norm = |v: &[f32]| {
        v.iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt()
    };
    let mut rest: Vec<f64> = (1..t).map(|j| norm(values(j))).collect();
    norm(values(0)) / median(&mut rest)
}

/// The measures at one logged step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SinkStats {
    /// First-token share per block and head.
    #[serde(deserialize_with = "crate::nan_serde::vecs_or_nan")]
    pub head_share: Vec<Vec<f64>>,
    /// Uniform attention's share over the same queries.
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
    pub uniform: f64,
    /// The share of (block, head) pairs whose first-token share exceeds 0.3.
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
    pub sink_rate: f64,
    /// Massive activation at position 0, per block.
    #[serde(deserialize_with = "crate::nan_serde::vec_or_nan")]
    pub massive0: Vec<f64>,
    /// Value drain per block and head.
    #[serde(deserialize_with = "crate::nan_serde::vecs_or_nan")]
    pub value_drain: Vec<Vec<f64>>,
    /// Gu et al.'s Sink metric in its own form (module doc): the share of
    /// (sequence, block, head) whose first-token importance over every
    /// query exceeds 0.3 (NaN in runs logged before it was).
    #[serde(
        default = "crate::nan_serde::nan",
        deserialize_with = "crate::nan_serde::f64_or_nan"
    )]
    pub sink_metric: f64,
    /// Sun et al.'s ratio per block: the stream's largest |x| over its
    /// median |x| (empty in runs logged before it was).
    #[serde(default, deserialize_with = "crate::nan_serde::vec_or_nan")]
    pub top_over_median: Vec<f64>,
}

impl SinkStats {
    /// The largest head's first-token share per block.
    pub fn top_share(&self) -> Vec<f64> {
        self.head_share
            .iter()
            .map(|h| crate::params::nan_max(h.iter().copied()))
            .collect()
    }

    /// The smallest value drain per block (the head that drains most).
    pub fn min_drain(&self) -> Vec<f64> {
        self.value_drain
            .iter()
            .map(|h| h.iter().copied().fold(f64::INFINITY, f64::min))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_on_hand_made_inputs() {
        // Uniform causal weights: the first-token share is the uniform one.
        let t = 6;
        let mut p = vec![0f32; t * t];
        for i in 0..t {
            for j in 0..=i {
                p[i * t + j] = 1.0 / (i + 1) as f32;
            }
        }
        let u = crate::nn::uniform_sink_share(t);
        assert!((first_share(&p, t, true) - u).abs() < 1e-7);
        // Unnormalised rows are divided by their sum: halving them changes
        // nothing; a row of zeros gives 0.
        let mut half: Vec<f32> = p.iter().map(|v| v / 2.0).collect();
        assert!((first_share(&half, t, false) - u).abs() < 1e-7);
        half[t..2 * t].fill(0.0);
        let want = (u * (t - 1) as f64 - 0.5) / (t - 1) as f64;
        assert!((first_share(&half, t, false) - want).abs() < 1e-7);
        assert_eq!(sink_rate(&[0.1, 0.31, 0.5, 0.3]), 0.5);
        // Gu et al.'s importance counts query 0's weight on itself: uniform
        // weights give (1 + sum_{i>=1} 1/(i+1)) / t.
        let gu: f64 = (0..t).map(|i| 1.0 / (i + 1) as f64).sum::<f64>() / t as f64;
        assert!((first_importance(&p, t, true) - gu).abs() < 1e-7);
        assert!(
            (first_importance(&p, t, true) - (1.0 + (t - 1) as f64 * u) / t as f64).abs() < 1e-7
        );
        // Position 0 of the second sequence holds the 50; the median is 1.
        let mut x = [1f32; 2 * 3 * 2];
        x[6] = -50.0;
        x[3] = 70.0;
        assert_eq!(position0_ratio([(&x[..], 2, 3)]), 50.0);
        assert_eq!(position0_ratio([(&x[..6], 2, 3), (&x[6..], 2, 3)]), 50.0);
        assert_eq!(top_ratio([(&x[..], 2, 3)]), 70.0);
        // Values: position 0 has norm 0.5, the others 1, 2, 4: median 2.
        let v = [[0.3f32, 0.4], [1.0, 0.0], [0.0, 2.0], [4.0, 0.0]];
        assert!((value_drain(|j| &v[j][..], 4) - 0.25).abs() < 1e-6);
    }
}
