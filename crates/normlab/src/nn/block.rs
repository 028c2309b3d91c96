//! One Transformer block: a token-mixing sublayer (attention, or the toy
//! net's causal-mean mixer) followed by a feed-forward sublayer, each a
//! [`Sublayer`] carrying its own norms and residual settings.
//!
//! ```text
//! x_mid = MixSublayer(x)        (reads the stream, writes into it)
//! x'    = MlpSublayer(x_mid)
//! ```
//!
//! Backward runs the two in reverse; the gradient between them lives in a
//! caller-provided buffer.
//!
//! A parallel block (GPT-NeoX) has both sublayers read the block's input:
//!
//! ```text
//! x_mid = MixSublayer(x)        (x + attn(n1(x)))
//! x'    = x_mid + Mlp(n2(x))    (the MLP sublayer built without a skip path)
//! ```
//!
//! so dL/dx' reaches x through both: dx = dMix(dx') + dMlp(dx').

use super::norm::Norm;
use super::placement::NormRole;
use super::scratch::Scratch;
use super::sublayer::{Sublayer, SublayerCache};

/// A norm of a model, with where it sits.
#[derive(Clone, Copy, Debug)]
pub struct NormSite<'a> {
    /// Block index (None for the final norm).
    pub block: Option<usize>,
    /// The sublayer it belongs to (None for the final norm).
    pub sublayer: Option<&'a Sublayer>,
    /// That sublayer's index in its block (0 mixing, 1 feed-forward).
    pub sub: Option<usize>,
    /// Where it sits.
    pub role: NormRole,
    /// The norm.
    pub norm: &'a Norm,
}

/// A block's two sublayers.
#[derive(Clone, Debug)]
pub struct Block {
    /// Attention or the toy mixer.
    pub mix: Sublayer,
    /// Feed-forward.
    pub mlp: Sublayer,
    /// Both read the block's input (the MLP then has no skip path).
    pub parallel: bool,
}

/// Activations of one block in one shard.
#[derive(Clone, Debug)]
pub struct BlockCache {
    /// The mixing sublayer's.
    pub mix: SublayerCache,
    /// The feed-forward sublayer's (its output is the block's).
    pub mlp: SublayerCache,
    /// A parallel block's output (the mixing output plus the MLP's), and
    /// dL/dx from the MLP during backward.
    par: crate::kernels::buf::AlignedBuf,
    par_dx: crate::kernels::buf::AlignedBuf,
}

impl BlockCache {
    /// The block's output from the last forward.
    pub fn output(&self) -> &[f32] {
        if self.par.is_empty() {
            self.mlp.output()
        } else {
            &self.par
        }
    }

    /// The cache of sublayer `j` (0 mixing, 1 feed-forward).
    pub fn sublayer(&self, j: usize) -> &SublayerCache {
        if j == 0 {
            &self.mix
        } else {
            &self.mlp
        }
    }

    /// The two sublayer caches, in order.
    pub fn sublayers_mut(&mut self) -> [&mut SublayerCache; 2] {
        [&mut self.mix, &mut self.mlp]
    }
}

impl Block {
    /// The two sublayers, in order.
    pub fn sublayers(&self) -> [&Sublayer; 2] {
        [&self.mix, &self.mlp]
    }

    /// Buffers for `batch` sequences of `t` positions. The block output's
    /// sum of squares (the residual-stream statistic) is tracked.
    pub fn cache(&self, batch: usize, t: usize) -> BlockCache {
        let mut mlp = self.mlp.cache(batch, t);
        mlp.track_output = !self.parallel;
        let n = if self.parallel {
            batch * t * self.mlp.d
        } else {
            0
        };
        BlockCache {
            mix: self.mix.cache(batch, t),
            mlp,
            par: super::norm::buf(n),
            par_dx: super::norm::buf(n),
        }
    }

    /// Forward: reads the stream `x`, leaves x' in `c.output()`.
    pub fn forward(&self, params: &[f32], x: &[f32], c: &mut BlockCache, scr: &mut Scratch) {
        let BlockCache { mix, mlp, par, .. } = c;
        self.mix.forward(params, x, mix, scr);
        if !self.parallel {
            self.mlp.forward(params, mix.output(), mlp, scr);
            return;
        }
        self.mlp.forward(params, x, mlp, scr);
        let mut sumsq = 0f64;
        for ((o, &a), &m) in par.iter_mut().zip(mix.output()).zip(mlp.output()) {
            *o = a + m;
            sumsq += f64::from(*o) * f64::from(*o);
        }
        mlp.output_sumsq = sumsq;
    }

    /// Backward: given dL/dx' (`dy`), write dL/dx into `dx` (using `dmid`
    /// for the gradient between the sublayers) and accumulate parameter
    /// gradients. `x` is the stream the forward read.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        x: &[f32],
        dy: &[f32],
        dx: &mut [f32],
        dmid: &mut [f32],
        c: &mut BlockCache,
        scr: &mut Scratch,
    ) {
        let BlockCache {
            mix, mlp, par_dx, ..
        } = c;
        if !self.parallel {
            self.mlp
                .backward(params, grads, mix.output(), dy, dmid, mlp, scr);
            self.mix.backward(params, grads, x, dmid, dx, mix, scr);
            return;
        }
        // Both sublayers' outputs are added: each gets dy.
        self.mlp.backward(params, grads, x, dy, par_dx, mlp, scr);
        self.mix.backward(params, grads, x, dy, dx, mix, scr);
        dx.iter_mut().zip(par_dx.iter()).for_each(|(a, b)| *a += b);
    }

    /// Every norm of the block, in parameter order (`block` is its index).
    pub fn norms(&self, block: usize) -> Vec<NormSite<'_>> {
        let mut out = Vec::new();
        for (j, sub) in self.sublayers().into_iter().enumerate() {
            let site = |role, norm| NormSite {
                block: Some(block),
                sublayer: Some(sub),
                sub: Some(j),
                role,
                norm,
            };
            out.extend(sub.in_norm.as_ref().map(|n| site(NormRole::In, n)));
            if let Some((q, k)) = sub.op.qk_norms() {
                out.push(site(NormRole::QkNorm, q));
                out.push(site(NormRole::QkNorm, k));
            }
            out.extend(sub.out_norm.as_ref().map(|n| site(NormRole::Out, n)));
            out.extend(sub.res.post_norm().map(|n| site(NormRole::Post, n)));
            out.extend(sub.res.stream_norm().map(|n| site(NormRole::Stream, n)));
        }
        out
    }
}
