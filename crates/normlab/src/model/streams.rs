//! Diagnostics of n parallel residual streams (hyper-connections, mHC;
//! Attention Residuals' bank of slots, see `depth_stats`) from the caches
//! of the last forward over one or more shards: per
//! sublayer, the read, write and mixing weights averaged over tokens and
//! each stream's RMS after it; and the gain of the composite mixing across
//! depth as the mHC paper measures it (arXiv 2512.24880, its "Amax gain
//! magnitude"). Per token the sublayers' n x n mixing matrices M_l
//! (`M[k][j]`: how much of stream k goes into stream j) compose to
//! C = M_1 M_2 ... M_L, and the last streams are `X_L[j] = sum_k C[k][j]
//! X_0[k]`: C's largest absolute column sum bounds how much the forward
//! signal can grow, its largest absolute row sum how much a gradient can
//! grow on its way back. A plain residual has C = I (gain 1); unconstrained
//! mixing can drift far from 1; mHC's doubly stochastic mixing keeps both
//! sums at 1.

use super::{Model, Workspace};
use crate::nn::HyperCache;
use serde::{Deserialize, Serialize};

/// One forward's stream diagnostics (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamStats {
    /// Per sublayer, bottom to top: each stream's mean read weight
    /// (alpha[k,0]; mHC's pre).
    #[serde(deserialize_with = "crate::nan_serde::vecs_or_nan")]
    pub read: Vec<Vec<f64>>,
    /// Per sublayer: each stream's mean write weight (beta; mHC's post).
    #[serde(deserialize_with = "crate::nan_serde::vecs_or_nan")]
    pub write: Vec<Vec<f64>>,
    /// Per sublayer: the mean mixing matrix, row-major n x n (empty for
    /// Attention Residuals, whose mixing is the identity).
    #[serde(deserialize_with = "crate::nan_serde::vecs_or_nan")]
    pub mix: Vec<Vec<f64>>,
    /// Per sublayer: each stream's RMS after it.
    #[serde(deserialize_with = "crate::nan_serde::vecs_or_nan")]
    pub stream_rms: Vec<Vec<f64>>,
    /// The composite mixing's largest absolute column sum (forward gain):
    /// max and median over tokens.
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
    pub gain_fwd_max: f64,
    /// Its median over tokens.
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
    pub gain_fwd_median: f64,
    /// The composite mixing's largest absolute row sum (backward gain):
    /// max over tokens.
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
    pub gain_bwd_max: f64,
    /// Its median over tokens.
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
    pub gain_bwd_median: f64,
}

/// The median of `v` (NaN when empty); sorts it.
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    }
}

impl Model {
    /// The stream diagnostics of the last forward over `shards` (None with
    /// one stream).
    pub fn stream_stats(&self, shards: &[Workspace]) -> Option<StreamStats> {
        let n = self.streams();
        if n < 2 {
            return None;
        }
        if matches!(self.stream_head, Some(crate::nn::StreamHead::Depth(_))) {
            return self.depth_stats(shards);
        }
        let (d, m) = (self.cfg.d_model, n + 1);
        let subs = 2 * self.blocks.len();
        let zeros = |w: usize| vec![vec![0f64; w]; subs];
        let (mut read, mut write, mut mix, mut sq) = (zeros(n), zeros(n), zeros(n * n), zeros(n));
        let (mut fwd, mut bwd) = (Vec::new(), Vec::new());
        let mut rows_total = 0usize;
        for ws in shards {
            let caches: Vec<&HyperCache> = ws
                .blocks
                .iter()
                .flat_map(|b| [b.sublayer(0), b.sublayer(1)])
                .filter_map(|s| s.hyper())
                .collect();
            if caches.len() != subs {
                return None;
            }
            let rows = ws.rows();
            rows_total += rows;
            for (l, c) in caches.iter().enumerate() {
                let (a, b, out) = (c.alpha(), c.beta(), c.output());
                for r in 0..rows {
                    for k in 0..n {
                        let ak = &a[(r * n + k) * m..(r * n + k + 1) * m];
                        read[l][k] += f64::from(ak[0]);
                        write[l][k] += f64::from(b[r * n + k]);
                        for j in 0..n {
                            mix[l][k * n + j] += f64::from(ak[1 + j]);
                        }
                        let s = &out[(r * n + k) * d..(r * n + k + 1) * d];
                        sq[l][k] += s.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>();
                    }
                }
            }
            // Per token: C = M_1 ... M_L, then its column and row sums.
            let mut p = vec![0f64; n * n];
            let mut q = vec![0f64; n * n];
            for r in 0..rows {
                p.fill(0.0);
                (0..n).for_each(|i| p[i * n + i] = 1.0);
                for c in &caches {
                    let a = &c.alpha()[r * n * m..(r + 1) * n * m];
                    q.fill(0.0);
                    for i in 0..n {
                        for k in 0..n {
                            let pik = p[i * n + k];
                            for j in 0..n {
                                q[i * n + j] += pik * f64::from(a[k * m + 1 + j]);
                            }
                        }
                    }
                    std::mem::swap(&mut p, &mut q);
                }
                let col = (0..n).map(|j| (0..n).map(|k| p[k * n + j].abs()).sum::<f64>());
                let row = (0..n).map(|k| (0..n).map(|j| p[k * n + j].abs()).sum::<f64>());
                fwd.push(col.fold(f64::NEG_INFINITY, f64::max));
                bwd.push(row.fold(f64::NEG_INFINITY, f64::max));
            }
        }
        let t = rows_total as f64;
        let mean = |v: Vec<Vec<f64>>, per: f64| -> Vec<Vec<f64>> {
            v.into_iter()
                .map(|x| x.into_iter().map(|s| s / per).collect())
                .collect()
        };
        // A token whose gain is NaN (a diverged run) makes the max NaN.
        let max = |v: &[f64]| {
            v.iter().fold(f64::NEG_INFINITY, |m, &x| {
                if m.is_nan() || x.is_nan() {
                    f64::NAN
                } else {
                    m.max(x)
                }
            })
        };
        Some(StreamStats {
            read: mean(read, t),
            write: mean(write, t),
            mix: mean(mix, t),
            stream_rms: mean(sq, t * d as f64)
                .into_iter()
                .map(|x| x.into_iter().map(f64::sqrt).collect())
                .collect(),
            gain_fwd_max: max(&fwd),
            gain_fwd_median: median(&mut fwd),
            gain_bwd_max: max(&bwd),
            gain_bwd_median: median(&mut bwd),
        })
    }
}

impl Model {
    /// Attention Residuals' diagnostics: per sublayer the mean depth
    /// weight of each slot (`read`, 0 for slots it does not read) and each
    /// slot's RMS after it; the write is one-hot (its own slot); the mixing
    /// is the identity by construction, so it is not logged (`mix` empty)
    /// and the composite gain is 1.
    fn depth_stats(&self, shards: &[Workspace]) -> Option<StreamStats> {
        let (n, d) = (self.streams(), self.cfg.d_model);
        let subs: Vec<_> = self.sublayers().collect();
        let zeros = |w: usize| vec![vec![0f64; w]; subs.len()];
        let (mut read, mut sq) = (zeros(n), zeros(n));
        let mut rows_total = 0usize;
        for ws in shards {
            let caches: Vec<_> = ws
                .blocks
                .iter()
                .flat_map(|b| [b.sublayer(0), b.sublayer(1)])
                .filter_map(|s| s.depth())
                .collect();
            if caches.len() != subs.len() {
                return None;
            }
            rows_total += ws.rows();
            for (l, c) in caches.iter().enumerate() {
                for (a, x) in c
                    .alpha()
                    .chunks_exact(n)
                    .zip(c.output().chunks_exact(n * d))
                {
                    for k in 0..n {
                        read[l][k] += f64::from(a[k]);
                        let s = &x[k * d..(k + 1) * d];
                        sq[l][k] += s.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>();
                    }
                }
            }
        }
        let t = rows_total as f64;
        let write = subs
            .iter()
            .map(|s| match &s.res {
                crate::nn::Residual::Depth(a) => (0..n).map(|k| f64::from(k == a.at.own)).collect(),
                _ => vec![f64::NAN; n],
            })
            .collect();
        Some(StreamStats {
            read: read
                .into_iter()
                .map(|v| v.into_iter().map(|x| x / t).collect())
                .collect(),
            write,
            mix: vec![Vec::new(); subs.len()],
            stream_rms: sq
                .into_iter()
                .map(|v| v.into_iter().map(|x| (x / (t * d as f64)).sqrt()).collect())
                .collect(),
            gain_fwd_max: 1.0,
            gain_fwd_median: 1.0,
            gain_bwd_max: 1.0,
            gain_bwd_median: 1.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelConfig;

    /// Hyper-connections start as a plain residual: identity mixing, gain
    /// exactly 1, and mixing doubled in each of 6 sublayers gives 2^6;
    /// mHC's mixing is doubly stochastic (gain 1 up to Sinkhorn's
    /// convergence), its reads in (0, 1] and writes in (0, 2).
    #[test]
    fn composite_gain_of_hc_and_mhc() {
        let mut c = ModelConfig::toy(3);
        c.hc = Some(4);
        let model = Model::new(&c).unwrap();
        let mut params = model.init_params(0);
        let mut ws = model.workspace(2, c.seq);
        model.forward(&params, &mut ws);
        let st = model.stream_stats(std::slice::from_ref(&ws)).unwrap();
        assert_eq!(st.gain_fwd_max, 1.0);
        assert_eq!(st.gain_bwd_median, 1.0);
        assert_eq!(st.mix[0][0], 1.0);
        assert_eq!(st.read.len(), 6);
        for t in &model.layout.tensors {
            if t.name.ends_with("hc.static_alpha") {
                for k in 0..4 {
                    params[t.range.start + k * 5 + 1 + k] = 2.0;
                }
            }
        }
        model.forward(&params, &mut ws);
        let st = model.stream_stats(std::slice::from_ref(&ws)).unwrap();
        assert_eq!(st.gain_fwd_max, 64.0);
        assert_eq!(st.gain_bwd_median, 64.0);
        let mut c = ModelConfig::toy(3);
        c.mhc = Some(4);
        let model = Model::new(&c).unwrap();
        let params = model.init_params(0);
        let mut ws = model.workspace(2, c.seq);
        for (i, t) in ws.tokens.iter_mut().enumerate() {
            *t = (i % c.vocab) as u32;
        }
        model.forward(&params, &mut ws);
        let st = model.stream_stats(&[ws.clone(), ws]).unwrap();
        assert!((st.gain_fwd_max - 1.0).abs() < 1e-3, "{st:?}");
        assert!((st.gain_bwd_max - 1.0).abs() < 1e-3, "{st:?}");
        for l in 0..6 {
            let row: f64 = st.mix[l][4..8].iter().sum();
            assert!((row - 1.0).abs() < 1e-3, "{st:?}");
            assert!(st.read[l].iter().all(|&v| v > 0.0 && v <= 1.0), "{st:?}");
            assert!(st.write[l].iter().all(|&v| v > 0.0 && v < 2.0), "{st:?}");
        }
        assert!(st.stream_rms[5].iter().all(|v| v.is_finite() && *v > 0.0));
        // AttnRes (blocks of 2 of 6 sublayers): the first reads only the
        // embedding; zero queries give every slot read the same weight.
        let mut c = ModelConfig::toy(3);
        c.attnres = Some(2);
        let model = Model::new(&c).unwrap();
        let params = model.init_params(0);
        let mut ws = model.workspace(2, c.seq);
        model.forward(&params, &mut ws);
        let st = model.stream_stats(std::slice::from_ref(&ws)).unwrap();
        assert_eq!(st.read[0], vec![1.0, 0.0, 0.0, 0.0]);
        let third = f64::from(1f32 / 3.0);
        assert_eq!(st.read[3], vec![third, third, third, 0.0]);
        assert_eq!(st.write[5], vec![0.0, 0.0, 0.0, 1.0]);
        // One stream: nothing to report.
        let model = Model::new(&ModelConfig::toy(2)).unwrap();
        let ws = model.workspace(1, 4);
        assert!(model.stream_stats(&[ws]).is_none());
    }
}
