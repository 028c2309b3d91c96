//! The residual stream, and how a sublayer is connected to it: what the
//! sublayer reads from the stream and how its branch's output `o` (InNorm,
//! S, OutNorm and gate: see [`Sublayer`](super::Sublayer)) is written back.
//! The model stack asks a sublayer's [`Residual`] only these two questions
//! (and their backward), so a residual design is a variant here:
//!
//! - [`Residual::Single`]: one stream of d values per token. It reads the
//!   stream x itself and writes `x' = PostNorm(skip * x + branch * o)`. Every
//!   placement, ReZero, LayerScale, LayerNorm Scaling and Mix-LN are this
//!   variant (their declarations are in `model::residual`).
//!
//! - [`Residual::Hyper`]: hyper-connections (`nn/hyper.rs`): n parallel
//!   streams per token, so the state is n x d ([`Residual::streams`] sizes
//!   the stream buffers); the read is a learned mix of the n streams into
//!   the d values the branch reads (kept in the sublayer's cache), the write
//!   a learned mix of the streams plus `o` spread over them. mHC
//!   (`nn/mhc.rs`) is this variant with per-token weights from a map of
//!   the streams (Sinkhorn-projected mixing).
//!
//! - [`Residual::Depth`]: Attention Residuals (`nn/attnres.rs`): the state
//!   is a bank of slots (the embedding, then each block's sum of sublayer
//!   outputs), the read a softmax mix of the slots over depth, the write
//!   `o` added into the sublayer's own slot.
//!
//! Backward mirrors it: [`Residual::write_backward`] takes dL/dx' to the
//! gradient the branch receives (single stream: that of the pre-norm sum h,
//! the identity path's before `skip`; `branch * dh` is what the branch
//! receives) and, for n streams, writes the identity path's part of dx;
//! [`Residual::read_backward`] adds the identity path to the gradient the
//! branch sends back: `dx = skip * dh + dx_branch` for the single stream.

use super::attnres::{DepthAttn, DepthCache};
use super::hyper::{Hyper, HyperCache};
use super::norm::{buf, Norm, NormCache};
use crate::kernels::act;
use crate::kernels::buf::AlignedBuf;
use crate::params::sum_squares;
use crate::precision::Dtype;

/// How a sublayer is connected to the residual stream.
#[derive(Clone, Debug)]
pub enum Residual {
    /// One stream of d values per token.
    Single(Single),
    /// n streams of d values per token (hyper-connections).
    Hyper(Hyper),
    /// A bank of slots read by attention over depth (AttnRes).
    Depth(DepthAttn),
}

/// The single stream's write: `x' = PostNorm(skip * x + branch * o)`.
#[derive(Clone, Debug)]
pub struct Single {
    /// Weight of the identity path (1; alpha for DeepNorm; 0 = residual off).
    pub skip: f32,
    /// Weight of the branch (1, or e.g. 1/sqrt(N)).
    pub branch: f32,
    /// Norm on the stream after the add (post-norm, DeepNorm).
    pub post_norm: Option<Norm>,
}

/// What a residual connection keeps between forward and backward.
#[derive(Clone, Debug)]
pub enum ResidualCache {
    /// The single stream's.
    Single(SingleCache),
    /// Hyper-connections'.
    Hyper(Box<HyperCache>),
    /// Attention Residuals'.
    Depth(Box<DepthCache>),
}

/// The single stream's buffers: the sum h, and with a post-norm its
/// output and cache.
#[derive(Clone, Debug)]
pub struct SingleCache {
    h: AlignedBuf,
    y: AlignedBuf,
    post_c: Option<NormCache>,
}

impl ResidualCache {
    /// The stream after the sublayer (x').
    pub fn output(&self) -> &[f32] {
        match self {
            ResidualCache::Single(c) if c.post_c.is_some() => &c.y,
            ResidualCache::Single(c) => &c.h,
            ResidualCache::Hyper(c) => c.output(),
            ResidualCache::Depth(c) => c.output(),
        }
    }

    /// The post-norm's cache, if any.
    pub fn post_cache(&self) -> Option<&NormCache> {
        match self {
            ResidualCache::Single(c) => c.post_c.as_ref(),
            ResidualCache::Hyper(_) | ResidualCache::Depth(_) => None,
        }
    }

    /// The stream norm's cache (dynamic hyper-connections), if any.
    pub fn stream_cache(&self) -> Option<&NormCache> {
        match self {
            ResidualCache::Hyper(c) => c.norm_cache(),
            ResidualCache::Single(_) | ResidualCache::Depth(_) => None,
        }
    }

    /// The cache of the connection's own norm, if any (mutable): the
    /// single stream's post-norm, or the n streams' norm.
    pub fn norm_cache_mut(&mut self) -> Option<&mut NormCache> {
        match self {
            ResidualCache::Hyper(c) => c.norm_cache_mut(),
            ResidualCache::Single(c) => c.post_c.as_mut(),
            ResidualCache::Depth(_) => None,
        }
    }

    /// Hyper-connections' (and mHC's) cache, if this is one.
    pub fn hyper(&self) -> Option<&HyperCache> {
        match self {
            ResidualCache::Hyper(c) => Some(c),
            ResidualCache::Single(_) | ResidualCache::Depth(_) => None,
        }
    }

    /// Attention Residuals' cache, if this is one.
    pub fn depth(&self) -> Option<&DepthCache> {
        match self {
            ResidualCache::Depth(c) => Some(c),
            _ => None,
        }
    }

    /// Floats of the stream state of the shard.
    pub fn state_len(&self) -> usize {
        match self {
            ResidualCache::Single(c) => c.h.len(),
            ResidualCache::Hyper(c) => c.output().len(),
            ResidualCache::Depth(c) => c.output().len(),
        }
    }
}

impl Residual {
    /// The single stream of d values per token.
    pub fn single(skip: f32, branch: f32, post_norm: Option<Norm>) -> Residual {
        Residual::Single(Single {
            skip,
            branch,
            post_norm,
        })
    }

    /// Parallel streams per token (the state is streams x d).
    pub fn streams(&self) -> usize {
        match self {
            Residual::Single(_) => 1,
            Residual::Hyper(h) => h.n,
            Residual::Depth(a) => a.at.slots,
        }
    }

    /// What the write's tracked sum of squares is divided by so that, over
    /// rows x d, it is a mean square: n for n streams (the mean over the
    /// n x d state), 1 for one stream and for Attention Residuals (whose
    /// write tracks the sum of its slots, what one plain stream would hold).
    pub fn rms_streams(&self) -> f64 {
        match self {
            Residual::Hyper(h) => h.n as f64,
            Residual::Single(_) | Residual::Depth(_) => 1.0,
        }
    }

    /// Weight of the identity path.
    pub fn skip(&self) -> f32 {
        match self {
            Residual::Single(s) => s.skip,
            Residual::Hyper(_) | Residual::Depth(_) => 1.0,
        }
    }

    /// Weight of the branch.
    pub fn branch(&self) -> f32 {
        match self {
            Residual::Single(s) => s.branch,
            Residual::Hyper(_) | Residual::Depth(_) => 1.0,
        }
    }

    /// The norm on the stream after the add, if any.
    pub fn post_norm(&self) -> Option<&Norm> {
        match self {
            Residual::Single(s) => s.post_norm.as_ref(),
            Residual::Hyper(_) | Residual::Depth(_) => None,
        }
    }

    /// The norm on each stream before the dynamic weights, if any.
    pub fn stream_norm(&self) -> Option<&Norm> {
        match self {
            Residual::Hyper(h) => h.dynamic().map(|x| &x.norm),
            Residual::Single(_) | Residual::Depth(_) => None,
        }
    }

    /// Buffers for `rows` tokens of width `d`.
    pub fn cache(&self, rows: usize, d: usize) -> ResidualCache {
        match self {
            Residual::Single(s) => ResidualCache::Single(SingleCache {
                h: buf(rows * d),
                y: buf(if s.post_norm.is_some() { rows * d } else { 0 }),
                post_c: s.post_norm.as_ref().map(|m| m.cache(rows)),
            }),
            Residual::Hyper(h) => ResidualCache::Hyper(Box::new(h.cache(rows))),
            Residual::Depth(a) => ResidualCache::Depth(Box::new(a.cache(rows))),
        }
    }

    /// What the branch reads from the stream `x`: the stream itself, or
    /// (n streams) their learned mix, computed into `xin` (rows x d).
    pub fn read<'a>(
        &self,
        params: &[f32],
        x: &'a [f32],
        xin: &'a mut [f32],
        c: &mut ResidualCache,
    ) -> &'a [f32] {
        match (self, c) {
            (Residual::Hyper(h), ResidualCache::Hyper(hc)) => {
                h.read(params, x, xin, hc);
                xin
            }
            (Residual::Depth(a), ResidualCache::Depth(ac)) => {
                a.read(params, x, xin, ac);
                xin
            }
            _ => x,
        }
    }

    /// Write the branch's output `o` into the stream `x`; the result is
    /// `c.output()`. With `track`, returns the output's sum of squares
    /// (without a post-norm in f32, in the same pass as the add).
    pub fn write(
        &self,
        params: &[f32],
        x: &[f32],
        o: &[f32],
        c: &mut ResidualCache,
        r: Dtype,
        track: bool,
    ) -> Option<f64> {
        let (s, h, y, post_c) = match (self, c) {
            (Residual::Single(s), ResidualCache::Single(SingleCache { h, y, post_c })) => {
                (s, h, y, post_c)
            }
            (Residual::Hyper(hy), ResidualCache::Hyper(hc)) => return hy.write(x, o, hc, r, track),
            (Residual::Depth(a), ResidualCache::Depth(ac)) => return a.write(x, o, ac, r, track),
            _ => unreachable!("cache does not match residual"),
        };
        let mut sumsq = None;
        match (&s.post_norm, track, r.is_f32()) {
            (None, true, true) => sumsq = Some(act::axpby_sum_squares(h, s.skip, x, s.branch, o)),
            _ => act::axpby(h, s.skip, x, s.branch, o),
        }
        r.round_in_place(h);
        if s.post_norm.is_none() && track && !r.is_f32() {
            sumsq = Some(sum_squares(h));
        }
        if let Some(n) = &s.post_norm {
            n.forward(params, h, y, post_c.as_mut().unwrap());
            r.round_in_place(y);
            if track {
                sumsq = Some(sum_squares(y));
            }
        }
        sumsq
    }

    /// What the last [`write`](Self::write) put into the stream, into
    /// `out`: `branch * o` as it is added; for a post-norm, or an identity
    /// path scaled away from 1 (DeepNorm, residual off), the change across
    /// the sublayer, x' - x.
    pub fn written(&self, x: &[f32], o: &[f32], c: &ResidualCache, out: &mut [f32]) {
        match self {
            Residual::Single(s) if s.post_norm.is_none() && s.skip == 1.0 => {
                let b = s.branch;
                out.iter_mut().zip(o).for_each(|(w, &o)| *w = b * o);
            }
            _ => {
                for ((w, &a), &v) in out.iter_mut().zip(c.output()).zip(x) {
                    *w = a - v;
                }
            }
        }
    }

    /// Given dL/dx' (`dy`), the gradient the branch receives (before the
    /// single stream's `branch` weight): for the single stream that of the
    /// sum h, through the post-norm into `dh` (accumulating its parameter
    /// gradients), or `dy` itself without one; for n streams it is written
    /// into `dh`, and the identity path's part of dL/dx into `dx` (`x`: the
    /// streams the forward read).
    #[allow(clippy::too_many_arguments)]
    pub fn write_backward<'a>(
        &self,
        params: &[f32],
        grads: &mut [f32],
        x: &[f32],
        dy: &'a [f32],
        dh: &'a mut [f32],
        dx: &mut [f32],
        c: &mut ResidualCache,
        r: Dtype,
    ) -> &'a [f32] {
        match (self, c) {
            (Residual::Single(s), ResidualCache::Single(SingleCache { h, post_c, .. })) => {
                match &s.post_norm {
                    Some(n) => {
                        n.backward(params, grads, h, dy, dh, post_c.as_mut().unwrap());
                        r.round_in_place(dh);
                        dh
                    }
                    None => dy,
                }
            }
            (Residual::Hyper(hy), ResidualCache::Hyper(hc)) => {
                hy.write_backward(x, dy, dh, dx, hc);
                r.round_in_place(dh);
                dh
            }
            (Residual::Depth(a), ResidualCache::Depth(_)) => {
                a.write_backward(dy, dh, dx);
                dh
            }
            _ => unreachable!("cache does not match residual"),
        }
    }

    /// dL/dx: the identity path plus the branch's gradient with respect to
    /// what it read (`dx_branch`). Single stream: `skip * dh + dx_branch`,
    /// into `dx`; n streams: the read's backward added to the identity
    /// path's part already in `dx` (and the coefficients' gradients).
    #[allow(clippy::too_many_arguments)]
    pub fn read_backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        x: &[f32],
        dx: &mut [f32],
        dh: &[f32],
        dx_branch: &[f32],
        c: &mut ResidualCache,
        r: Dtype,
    ) {
        match (self, c) {
            (Residual::Hyper(hy), ResidualCache::Hyper(hc)) => {
                hy.read_backward(params, grads, x, dx_branch, dx, hc, r)
            }
            (Residual::Depth(a), ResidualCache::Depth(ac)) => {
                a.read_backward(params, grads, x, dx_branch, dx, ac, r)
            }
            _ => {
                act::axpby(dx, self.skip(), dh, 1.0, dx_branch);
                r.round_in_place(dx);
            }
        }
    }
}
