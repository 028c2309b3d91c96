//! The toy net's token mixer: a causal mean over positions `s <= t`, then a
//! Linear(d, d). It sees the bag of earlier tokens but not their order.
//!
//! Forward: `m[t] = (1/(t+1)) sum_{s<=t} a[s]`, `out = Linear(m)`.
//! Backward: `da[s] = sum_{t>=s} dm[t] / (t+1)` (a reverse cumulative sum).

use super::linear::Linear;
use super::norm::buf;
use crate::kernels::buf::AlignedBuf;
use crate::kernels::simd::LANES;
use crate::params::{Init, ParamLayout};

/// Causal mean + Linear.
#[derive(Clone, Debug)]
pub struct ToyMixer {
    /// Width.
    pub d: usize,
    /// The Linear after the mean.
    pub proj: Linear,
}

/// Activations of one mixer in one shard.
#[derive(Clone, Debug)]
pub struct ToyMixerCache {
    m: AlignedBuf,
    run: Vec<f32>,
}

impl ToyMixer {
    /// Register `{name}.proj` (with its bias unless `no_bias`).
    pub fn new(
        layout: &mut ParamLayout,
        name: &str,
        d: usize,
        no_bias: bool,
        block: Option<usize>,
        init: Init,
    ) -> ToyMixer {
        ToyMixer {
            d,
            proj: Linear::new(layout, &format!("{name}.proj"), d, d, !no_bias, block, init),
        }
    }

    /// Buffers for `rows` rows.
    pub fn cache(&self, rows: usize) -> ToyMixerCache {
        ToyMixerCache {
            m: buf(rows * self.d),
            run: vec![0.0; self.d],
        }
    }

    /// `out = Linear(causal_mean(a))` for `a` laid out `[batch, t_len, d]`.
    pub fn forward(
        &self,
        params: &[f32],
        a: &[f32],
        t_len: usize,
        out: &mut [f32],
        c: &mut ToyMixerCache,
    ) {
        let d = self.d;
        let rows = a.len() / d;
        cumulative_mean(a, t_len, d, &mut c.run, &mut c.m);
        self.proj.forward(params, &c.m, rows, out);
    }

    /// Write `da`, accumulate the Linear's gradients; `dm` is scratch of at
    /// least `rows x d` floats.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        dout: &[f32],
        t_len: usize,
        da: &mut [f32],
        c: &mut ToyMixerCache,
        dm: &mut [f32],
    ) {
        let d = self.d;
        let rows = dout.len() / d;
        let dm = &mut dm[..rows * d];
        self.proj
            .backward(params, grads, &c.m, dout, rows, Some(dm), false);
        reverse_cumulative_mean(dm, t_len, d, &mut c.run, da);
    }
}

crate::kernels::multiversion! {
    /// `da[s] = sum_{t >= s} dm[t] / (t + 1)` per sequence of `t_len` rows
    /// (running sums in registers per 16-column block, as in
    /// `cumulative_mean`).
    fn reverse_cumulative_mean(dm: &[f32], t_len: usize, d: usize, acc: &mut [f32], da: &mut [f32]) {
        let acc = &mut acc[..d];
        let full = d - d % LANES;
        for (dmseq, daseq) in dm.chunks_exact(t_len * d).zip(da.chunks_exact_mut(t_len * d)) {
            for j0 in (0..full).step_by(LANES) {
                let mut s = [0f32; LANES];
                for t in (0..t_len).rev() {
                    let inv = 1.0 / (t + 1) as f32;
                    let g: &[f32; LANES] = dmseq[t * d + j0..t * d + j0 + LANES].try_into().unwrap();
                    let dv: &mut [f32; LANES] = (&mut daseq[t * d + j0..t * d + j0 + LANES]).try_into().unwrap();
                    for ((sv, &gv), dvv) in s.iter_mut().zip(g).zip(dv.iter_mut()) {
                        *sv += gv * inv;
                        *dvv = *sv;
                    }
                }
            }
            if full < d {
                acc[full..].fill(0.0);
                for t in (0..t_len).rev() {
                    let inv = 1.0 / (t + 1) as f32;
                    for j in full..d {
                        acc[j] += dmseq[t * d + j] * inv;
                        daseq[t * d + j] = acc[j];
                    }
                }
            }
        }
    }
}

crate::kernels::multiversion! {
    /// `m[t] = (1/(t+1)) sum_{s<=t} a[s]` per sequence of `t_len` rows.
    /// Columns go in blocks of `LANES` whose running sums stay in registers
    /// (same additions in the same order as a row-by-row sweep).
    fn cumulative_mean(a: &[f32], t_len: usize, d: usize, sum: &mut [f32], m: &mut [f32]) {
        let sum = &mut sum[..d];
        let full = d - d % LANES;
        for (aseq, mseq) in a.chunks_exact(t_len * d).zip(m.chunks_exact_mut(t_len * d)) {
            for j0 in (0..full).step_by(LANES) {
                let mut acc = [0f32; LANES];
                for t in 0..t_len {
                    let inv = 1.0 / (t + 1) as f32;
                    let ar: &[f32; LANES] = aseq[t * d + j0..t * d + j0 + LANES].try_into().unwrap();
                    let mr: &mut [f32; LANES] = (&mut mseq[t * d + j0..t * d + j0 + LANES]).try_into().unwrap();
                    for i in 0..LANES {
                        acc[i] += ar[i];
                        mr[i] = acc[i] * inv;
                    }
                }
            }
            if full < d {
                sum[full..].fill(0.0);
                for t in 0..t_len {
                    let inv = 1.0 / (t + 1) as f32;
                    for j in full..d {
                        sum[j] += aseq[t * d + j];
                        mseq[t * d + j] = sum[j] * inv;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_means_match_the_definition() {
        // Widths with whole 16-column blocks, a tail, and both.
        for d in [3, 16, 21, 64] {
            let (t_len, seqs) = (5, 2);
            let n = seqs * t_len * d;
            let a: Vec<f32> = (0..n)
                .map(|i| ((i * 29 % 17) as f32 - 8.0) * 0.25)
                .collect();
            let (mut m, mut da, mut run) = (vec![0.0; n], vec![0.0; n], vec![0.0; d]);
            cumulative_mean(&a, t_len, d, &mut run, &mut m);
            reverse_cumulative_mean(&a, t_len, d, &mut run, &mut da);
            for q in 0..seqs {
                for t in 0..t_len {
                    for j in 0..d {
                        let at = |s: usize| a[(q * t_len + s) * d + j] as f64;
                        let mean = (0..=t).map(at).sum::<f64>() / (t + 1) as f64;
                        let rev = (t..t_len).map(|s| at(s) / (s + 1) as f64).sum::<f64>();
                        let k = (q * t_len + t) * d + j;
                        assert!((m[k] as f64 - mean).abs() < 1e-6, "d {d} t {t} j {j}");
                        assert!((da[k] as f64 - rev).abs() < 1e-6, "d {d} t {t} j {j}");
                    }
                }
            }
        }
    }
}
