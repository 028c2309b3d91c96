//! How attention turns scores into weights: the softmax, and the three
//! forms that the attention-sink literature offers instead of it (the
//! attention options that may remove a sink, declared once here). Each
//! works on one causal `[t, t]` block of scores `S` (row i sees columns
//! 0..=i) and has its explicit backward:
//!
//! ```text
//! softmax     P_ij = exp(S_ij) / sum_k exp(S_ik)
//!             dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik)
//! sink-logit  P_ij = exp(S_ij) / (sum_k exp(S_ik) + exp(s_h))      (gpt-oss;
//!             s_h a learned logit per head, "softmax off by one" at s_h = 0)
//!             dS_ij as softmax; ds_h = -sum_i p_i (sum_k P_ik dP_ik),
//!             p_i = exp(s_h) / (...) the share the sink absorbs
//! sigmoid     P_ij = sigmoid(S_ij), no normalisation (Gu et al. 2024)
//!             dS_ij = dP_ij P_ij (1 - P_ij)
//! relu        P_ij = relu(S_ij) / (i + 1), no normalisation (Guo et al.
//!             2024: ReLU attention scaled by the number of keys)
//!             dS_ij = dP_ij / (i + 1) where S_ij > 0, else 0
//! ```

use crate::kernels::act;
use serde::{Deserialize, Serialize};

/// How scores become attention weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum AttnKind {
    /// The softmax over the keys.
    #[default]
    #[serde(rename = "softmax")]
    Softmax,
    /// The softmax with one learned logit per head in its denominator
    /// (`{name}.sinks`, initialised to 0: softmax "off by one"; gpt-oss's
    /// learned sinks): a query can give its attention to no key at all.
    #[serde(rename = "sink-logit")]
    SinkLogit,
    /// The elementwise sigmoid of the scores, without normalisation.
    #[serde(rename = "sigmoid")]
    Sigmoid,
    /// ReLU of the scores divided by the query's number of keys, without
    /// normalisation.
    #[serde(rename = "relu")]
    Relu,
}

impl AttnKind {
    /// Every kind.
    pub const ALL: [AttnKind; 4] = [
        AttnKind::Softmax,
        AttnKind::SinkLogit,
        AttnKind::Sigmoid,
        AttnKind::Relu,
    ];

    /// The name in files and flags.
    pub fn name(self) -> &'static str {
        match self {
            AttnKind::Softmax => "softmax",
            AttnKind::SinkLogit => "sink-logit",
            AttnKind::Sigmoid => "sigmoid",
            AttnKind::Relu => "relu",
        }
    }

    /// Every name.
    pub fn names() -> Vec<&'static str> {
        AttnKind::ALL.iter().map(|k| k.name()).collect()
    }

    /// Whether this is the default (config files leave it out).
    pub fn is_softmax(&self) -> bool {
        *self == AttnKind::Softmax
    }

    /// Whether a row's weights sum to 1 (entropy is defined).
    pub fn normalised(self) -> bool {
        self == AttnKind::Softmax
    }

    /// Scores to weights in place on a causal `[t, t]` block (the masked
    /// upper part set to 0); `sink` is the head's logit (SinkLogit), and
    /// `absorbed` receives per row the share the sink logit takes (SinkLogit
    /// only; length t). Returns the largest score.
    pub fn forward(self, s: &mut [f32], t: usize, sink: f32, absorbed: &mut [f32]) -> f32 {
        if self == AttnKind::Softmax {
            return act::causal_softmax(s, t);
        }
        let mut max_logit = f32::NEG_INFINITY;
        for (i, row) in s.chunks_exact_mut(t).enumerate() {
            let (valid, masked) = row.split_at_mut(i + 1);
            max_logit = valid.iter().fold(max_logit, |m, &v| m.max(v));
            match self {
                AttnKind::Softmax => unreachable!(),
                AttnKind::SinkLogit => {
                    let m = valid.iter().fold(sink, |m, &v| m.max(v));
                    let mut z = (sink - m).exp();
                    let e_sink = z;
                    for v in valid.iter_mut() {
                        *v = (*v - m).exp();
                        z += *v;
                    }
                    valid.iter_mut().for_each(|v| *v /= z);
                    absorbed[i] = e_sink / z;
                }
                AttnKind::Sigmoid => valid
                    .iter_mut()
                    .for_each(|v| *v = 1.0 / (1.0 + (-*v).exp())),
                AttnKind::Relu => {
                    let n = (i + 1) as f32;
                    valid.iter_mut().for_each(|v| *v = v.max(0.0) / n);
                }
            }
            masked.fill(0.0);
        }
        max_logit
    }

    /// Backward of [`AttnKind::forward`]: `dp` holds dL/dP on entry and
    /// dL/dS on exit; returns dL/d(sink logit) (0 but for SinkLogit).
    pub fn backward(self, p: &[f32], dp: &mut [f32], t: usize, absorbed: &[f32]) -> f64 {
        match self {
            AttnKind::Softmax => {
                act::causal_softmax_backward(p, dp, t);
                0.0
            }
            AttnKind::SinkLogit => {
                let mut dsink = 0f64;
                for (i, (pr, dr)) in p.chunks_exact(t).zip(dp.chunks_exact_mut(t)).enumerate() {
                    let n = i + 1;
                    let dot: f64 = pr[..n]
                        .iter()
                        .zip(&dr[..n])
                        .map(|(&a, &b)| f64::from(a) * f64::from(b))
                        .sum();
                    for j in 0..n {
                        dr[j] = pr[j] * (dr[j] - dot as f32);
                    }
                    dr[n..].fill(0.0);
                    dsink -= f64::from(absorbed[i]) * dot;
                }
                dsink
            }
            AttnKind::Sigmoid | AttnKind::Relu => {
                for (i, (pr, dr)) in p.chunks_exact(t).zip(dp.chunks_exact_mut(t)).enumerate() {
                    let n = i + 1;
                    for j in 0..n {
                        dr[j] *= if self == AttnKind::Sigmoid {
                            pr[j] * (1.0 - pr[j])
                        } else if pr[j] > 0.0 {
                            1.0 / n as f32
                        } else {
                            0.0
                        };
                    }
                    dr[n..].fill(0.0);
                }
                0.0
            }
        }
    }
}

impl std::str::FromStr for AttnKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        AttnKind::ALL
            .into_iter()
            .find(|k| k.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                format!(
                    "unknown attention '{s}' (expected {})",
                    AttnKind::names().join(", ")
                )
            })
    }
}

impl std::fmt::Display for AttnKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind's backward against central differences of
    /// L = sum(P * W) (and of the sink logit).
    #[test]
    fn backward_matches_finite_differences() {
        let t = 5;
        let mut rng = crate::kernels::rng::Rng::new(3);
        let s0: Vec<f32> = rng.normal_vec(t * t, 0.0, 1.0);
        let w: Vec<f32> = rng.normal_vec(t * t, 0.0, 1.0);
        let sink0 = 0.3f32;
        let loss = |k: AttnKind, s: &[f32], sink: f32| -> f64 {
            let mut p = s.to_vec();
            let mut a = vec![0.0; t];
            k.forward(&mut p, t, sink, &mut a);
            p.iter().zip(&w).map(|(&a, &b)| f64::from(a * b)).sum()
        };
        for k in AttnKind::ALL {
            let mut p = s0.clone();
            let mut a = vec![0.0; t];
            k.forward(&mut p, t, sink0, &mut a);
            let mut dp = w.clone();
            let dsink = k.backward(&p, &mut dp, t, &a);
            let h = 1e-2f32;
            for i in 0..t {
                for j in 0..=i {
                    let idx = i * t + j;
                    if k == AttnKind::Relu && s0[idx].abs() < 2.0 * h {
                        continue;
                    }
                    let (mut up, mut dn) = (s0.clone(), s0.clone());
                    up[idx] += h;
                    dn[idx] -= h;
                    let fd = (loss(k, &up, sink0) - loss(k, &dn, sink0)) / (2.0 * f64::from(h));
                    assert!(
                        (fd - f64::from(dp[idx])).abs() < 2e-3,
                        "{k} S[{i},{j}]: {fd} vs {}",
                        dp[idx]
                    );
                }
                for j in i + 1..t {
                    assert_eq!(dp[i * t + j], 0.0);
                }
            }
            let fd = (loss(k, &s0, sink0 + h) - loss(k, &s0, sink0 - h)) / (2.0 * f64::from(h));
            assert!((fd - dsink).abs() < 2e-3, "{k} sink: {fd} vs {dsink}");
        }
    }

    /// The sink logit at -inf is the softmax; a large one takes everything.
    #[test]
    fn the_sink_logit_absorbs_attention() {
        let t = 4;
        let s: Vec<f32> = (0..t * t).map(|i| (i % 5) as f32 * 0.3).collect();
        let (mut a, mut b) = (s.clone(), s.clone());
        let mut ab = vec![0.0; t];
        AttnKind::Softmax.forward(&mut a, t, 0.0, &mut ab);
        AttnKind::SinkLogit.forward(&mut b, t, -1e4, &mut ab);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-6);
        }
        let mut b = s.clone();
        AttnKind::SinkLogit.forward(&mut b, t, 30.0, &mut ab);
        assert!(b.iter().all(|&v| v < 1e-9) && ab.iter().all(|&v| v > 0.999));
        assert_eq!("sink-logit".parse::<AttnKind>(), Ok(AttnKind::SinkLogit));
        assert!("tanh".parse::<AttnKind>().is_err());
    }
}
