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
}

/// Activations of one block in one shard.
#[derive(Clone, Debug)]
pub struct BlockCache {
    /// The mixing sublayer's.
    pub mix: SublayerCache,
    /// The feed-forward sublayer's (its output is the block's).
    pub mlp: SublayerCache,
}

impl BlockCache {
    /// The block's output from the last forward.
    pub fn output(&self) -> &[f32] {
        self.mlp.output()
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
        mlp.track_output = true;
        BlockCache {
            mix: self.mix.cache(batch, t),
            mlp,
        }
    }

    /// Forward: reads the stream `x`, leaves x' in `c.output()`.
    pub fn forward(&self, params: &[f32], x: &[f32], c: &mut BlockCache, scr: &mut Scratch) {
        let BlockCache { mix, mlp } = c;
        self.mix.forward(params, x, mix, scr);
        self.mlp.forward(params, mix.output(), mlp, scr);
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
        let BlockCache { mix, mlp } = c;
        self.mlp
            .backward(params, grads, mix.output(), dy, dmid, mlp, scr);
        self.mix.backward(params, grads, x, dmid, dx, mix, scr);
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
