//! The toy net's token mixer: a causal mean over positions `s <= t`, then a
//! Linear(d, d). It sees the bag of earlier tokens but not their order.
//!
//! Forward: `m[t] = (1/(t+1)) sum_{s<=t} a[s]`, `out = Linear(m)`.
//! Backward: `da[s] = sum_{t>=s} dm[t] / (t+1)` (a reverse cumulative sum).

use super::linear::Linear;
use super::norm::buf;
use crate::kernels::buf::AlignedBuf;
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
    dm: AlignedBuf,
}

impl ToyMixer {
    /// Register `{name}.proj`.
    pub fn new(
        layout: &mut ParamLayout,
        name: &str,
        d: usize,
        block: Option<usize>,
        init: Init,
    ) -> ToyMixer {
        ToyMixer {
            d,
            proj: Linear::new(layout, &format!("{name}.proj"), d, d, true, block, init),
        }
    }

    /// Buffers for `rows` rows.
    pub fn cache(&self, rows: usize) -> ToyMixerCache {
        ToyMixerCache {
            m: buf(rows * self.d),
            dm: buf(rows * self.d),
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
        for (aseq, mseq) in a
            .chunks_exact(t_len * d)
            .zip(c.m.chunks_exact_mut(t_len * d))
        {
            let mut sum = vec_zero::<256>(d);
            for t in 0..t_len {
                let inv = 1.0 / (t + 1) as f32;
                let (ar, mr) = (&aseq[t * d..(t + 1) * d], &mut mseq[t * d..(t + 1) * d]);
                for j in 0..d {
                    sum[j] += ar[j];
                    mr[j] = sum[j] * inv;
                }
            }
        }
        self.proj.forward(params, &c.m, rows, out);
    }

    /// Write `da`, accumulate the Linear's gradients.
    pub fn backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        dout: &[f32],
        t_len: usize,
        da: &mut [f32],
        c: &mut ToyMixerCache,
    ) {
        let d = self.d;
        let rows = dout.len() / d;
        self.proj
            .backward(params, grads, &c.m, dout, rows, Some(&mut c.dm), false);
        for (dmseq, daseq) in
            c.dm.chunks_exact(t_len * d)
                .zip(da.chunks_exact_mut(t_len * d))
        {
            let mut acc = vec_zero::<256>(d);
            for t in (0..t_len).rev() {
                let inv = 1.0 / (t + 1) as f32;
                let (dmr, dar) = (&dmseq[t * d..(t + 1) * d], &mut daseq[t * d..(t + 1) * d]);
                for j in 0..d {
                    acc[j] += dmr[j] * inv;
                    dar[j] = acc[j];
                }
            }
        }
    }
}

/// A zeroed running-sum buffer: on the stack for d <= N, else on the heap.
fn vec_zero<const N: usize>(d: usize) -> SmallBuf<N> {
    if d <= N {
        SmallBuf::Stack([0.0; N], d)
    } else {
        SmallBuf::Heap(vec![0.0; d])
    }
}

enum SmallBuf<const N: usize> {
    Stack([f32; N], usize),
    Heap(Vec<f32>),
}

impl<const N: usize> std::ops::Deref for SmallBuf<N> {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        match self {
            SmallBuf::Stack(a, n) => &a[..*n],
            SmallBuf::Heap(v) => v,
        }
    }
}

impl<const N: usize> std::ops::DerefMut for SmallBuf<N> {
    fn deref_mut(&mut self) -> &mut [f32] {
        match self {
            SmallBuf::Stack(a, n) => &mut a[..*n],
            SmallBuf::Heap(v) => v,
        }
    }
}
