//! One sublayer struct for every placement of the norms: a branch
//! (InNorm, S, OutNorm, gate) connected to the residual stream by its
//! [`Residual`] (what the branch reads from the stream, how its output is
//! written back; `nn/residual.rs`). With the single stream:
//!
//! ```text
//! o  = Gate( OutNorm( S( in_scale * InNorm(read(x)) ) ) )
//! h  = skip * x + branch * o
//! x' = PostNorm(h)
//! ```
//!
//! `post`: PostNorm only · `pre`: InNorm only (+ final norm) · `sandwich` =
//! `peri`: InNorm + OutNorm (+ final norm) · `olmo2`: OutNorm only (+ final
//! norm) · `deepnorm`: PostNorm with skip = alpha and beta-scaled init ·
//! `none`: no norm · `mixln`: post in the first K blocks, pre after ·
//! residual off: skip = 0. Residual options: ReZero / LayerScale are the
//! [`Gate`] (a learnable scalar or per-channel scale), LayerNorm Scaling is
//! `in_scale` = 1/sqrt(l); each is declared once in `model::residual`. A
//! new paper's variant is a new preset or option, or a new [`Residual`].
//!
//! Backward makes the two paths of the residual stream explicit:
//! `dx = skip * dh  (identity path)  +  InNorm^T S^T OutNorm^T (branch * dh)`.

use super::attention::{Attention, AttentionCache};
use super::gate::Gate;
use super::linear::Linear;
use super::mixer::{ToyMixer, ToyMixerCache};
use super::mlp::{Mlp, MlpCache};
use super::norm::{buf, Norm, NormCache};
use super::placement::NormRole;
pub use super::placement::Placement;
use super::residual::{Residual, ResidualCache};
use super::scratch::Scratch;
use crate::kernels::act;
use crate::kernels::buf::AlignedBuf;
use crate::params::sum_squares;

/// The sublayer's function S.
#[derive(Clone, Debug)]
// One per sublayer, built once: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Op {
    /// Causal multi-head attention.
    Attention(Attention),
    /// Feed-forward.
    Mlp(Mlp),
    /// The toy net's causal-mean mixer.
    Mixer(ToyMixer),
}

impl Op {
    /// Floats per row of S's own scratch (`op1`, `op2`, `op3` of [`Scratch`]).
    pub(super) fn scratch_widths(&self) -> (usize, usize, usize) {
        match self {
            Op::Mlp(m) => m.scratch_widths(),
            Op::Mixer(m) => (m.d, 0, 0),
            Op::Attention(_) => (0, 0, 0),
        }
    }

    /// The Linear that reads S's input (the normalised stream, or the
    /// stream itself): attention's q|k|v projection, the MLP's first layer,
    /// the toy mixer's projection (after its causal mean, which is linear).
    pub fn reader(&self) -> &Linear {
        match self {
            Op::Attention(a) => &a.qkv,
            Op::Mlp(m) => &m.fc,
            Op::Mixer(m) => &m.proj,
        }
    }

    /// The Linear whose output S writes (into the stream, or into an
    /// output norm): every op's output projection.
    pub fn writer(&self) -> &Linear {
        match self {
            Op::Attention(a) => &a.proj,
            Op::Mlp(m) => &m.proj,
            Op::Mixer(m) => &m.proj,
        }
    }

    /// Every Linear of S.
    pub fn linears(&self) -> Vec<&Linear> {
        match self {
            Op::Attention(a) => {
                let mut v = vec![&a.qkv, &a.proj];
                v.extend(a.gate.as_ref().map(|(_, w)| w));
                v
            }
            Op::Mlp(m) => vec![&m.fc, &m.proj],
            Op::Mixer(m) => vec![&m.proj],
        }
    }

    /// QK-Norm's two norms (queries, keys), if S is attention with QK-Norm.
    pub fn qk_norms(&self) -> Option<(&Norm, &Norm)> {
        match self {
            Op::Attention(a) => a.qk_norm.as_ref().map(|(q, k)| (q, k)),
            _ => None,
        }
    }

    /// Whether S's backward reads S's input (for its weight gradients). The
    /// toy mixer's does not (its weight gradient reads the causal mean), so
    /// an input norm's output need not be kept for it.
    fn backward_reads_input(&self) -> bool {
        !matches!(self, Op::Mixer(_))
    }
}

/// S's activations.
#[derive(Clone, Debug)]
pub enum OpCache {
    /// Attention.
    Attention(Box<AttentionCache>),
    /// Feed-forward.
    Mlp(MlpCache),
    /// Mixer.
    Mixer(ToyMixerCache),
}

/// One residual sublayer.
#[derive(Clone, Debug)]
pub struct Sublayer {
    /// Width.
    pub d: usize,
    /// Norm before S.
    pub in_norm: Option<Norm>,
    /// Norm after S, before the add.
    pub out_norm: Option<Norm>,
    /// How the branch is connected to the residual stream (for the single
    /// stream: skip and branch weights, and the norm after the add).
    pub res: Residual,
    /// Bias added after the output norm (only in converted checkpoints).
    pub out_bias: Option<crate::params::ParamRef>,
    /// Multiplier on the input norm's output (LayerNorm Scaling's
    /// 1/sqrt(l); 1 otherwise).
    pub in_scale: f32,
    /// Learnable gate on the branch (ReZero, LayerScale).
    pub gate: Option<Gate>,
    /// S.
    pub op: Op,
}

/// Activations of one sublayer in one shard: what its backward reads.
#[derive(Clone, Debug)]
pub struct SublayerCache {
    t: usize,
    /// The input norm's output; kept only when S's backward reads it (else
    /// it lives in [`Scratch`]).
    a: AlignedBuf,
    in_c: Option<NormCache>,
    /// S's output; kept only when an output norm's or a gate's backward
    /// reads it (else it lives in [`Scratch`]).
    s: AlignedBuf,
    op: OpCache,
    o: AlignedBuf,
    out_c: Option<NormCache>,
    res: ResidualCache,
    /// What the branch read (rows x d) when the stream has n > 1 streams
    /// (their learned mix); empty for the single stream, whose branch reads
    /// the stream itself.
    xin: AlignedBuf,
    /// Squared norm of the identity-path gradient `skip * dh` (last backward).
    pub identity_grad_sumsq: f64,
    /// Squared norm of the branch-path gradient (last backward).
    pub branch_grad_sumsq: f64,
    /// Squared norm of the total `dx` (last backward).
    pub total_grad_sumsq: f64,
    /// Compute the three squared norms above in backward (off by default:
    /// they cost a pass over the stream).
    pub track_paths: bool,
    /// Sum of squares of the output x' (last forward; 0 unless
    /// `track_output` is on).
    pub output_sumsq: f64,
    /// Compute `output_sumsq` in forward (without a post-norm, in the same
    /// pass as the residual add).
    pub track_output: bool,
    /// Keep what the sublayer wrote in `write` (for inspection; see
    /// [`SublayerCache::keep_write`]).
    keep_write: bool,
    write: AlignedBuf,
}

impl SublayerCache {
    /// The sublayer's output x' from the last forward.
    pub fn output(&self) -> &[f32] {
        self.res.output()
    }

    /// Every norm cache of the sublayer (In, Out, Post; QK-Norm's aside).
    pub fn norm_caches_mut(&mut self) -> impl Iterator<Item = &mut NormCache> {
        [
            self.in_c.as_mut(),
            self.out_c.as_mut(),
            self.res.norm_cache_mut(),
        ]
        .into_iter()
        .flatten()
    }

    /// The cache of the sublayer's norm at `role` (In, Out or Post).
    pub fn norm_cache(&self, role: NormRole) -> Option<&NormCache> {
        match role {
            NormRole::In => self.in_c.as_ref(),
            NormRole::Out => self.out_c.as_ref(),
            NormRole::Post => self.res.post_cache(),
            NormRole::Stream => self.res.stream_cache(),
            NormRole::Final | NormRole::QkNorm | NormRole::Embedding => None,
        }
    }

    /// Keep (or stop keeping) in each forward what the sublayer writes into
    /// the stream: `branch * Gate(OutNorm(S(..)))` as it is added (after
    /// the output norm for sandwich and OLMo 2); for a post-norm sublayer,
    /// or an identity path scaled away from 1 (DeepNorm, residual off), the
    /// change across the sublayer, x' - x.
    pub fn keep_write(&mut self, on: bool) {
        self.keep_write = on;
        self.write = buf(if on { self.res.state_len() } else { 0 });
    }

    /// What the last forward wrote (see [`keep_write`](Self::keep_write);
    /// empty when off).
    pub fn write(&self) -> &[f32] {
        &self.write
    }

    /// The hyper-connection's cache (n streams), if any.
    pub fn hyper(&self) -> Option<&super::HyperCache> {
        self.res.hyper()
    }

    /// Attention Residuals' cache, if any.
    pub fn depth(&self) -> Option<&super::DepthCache> {
        self.res.depth()
    }

    /// The attention cache, if S is attention.
    pub fn attention(&self) -> Option<&AttentionCache> {
        match &self.op {
            OpCache::Attention(a) => Some(a),
            _ => None,
        }
    }

    /// The feed-forward's cache, if this is a feed-forward sublayer.
    pub fn mlp(&self) -> Option<&MlpCache> {
        match &self.op {
            OpCache::Mlp(m) => Some(m),
            _ => None,
        }
    }
}

impl Sublayer {
    /// Whether the input norm's output lives in [`Scratch`] (S's backward
    /// does not read it) rather than in the cache.
    pub(super) fn norm_out_in_scratch(&self) -> bool {
        self.in_norm.is_some() && !self.op.backward_reads_input()
    }

    /// Whether S's output is kept in the cache (an output norm's backward,
    /// or without one a gate's, reads it).
    fn keeps_s(&self) -> bool {
        self.out_norm.is_some() || self.gate.is_some()
    }

    /// Buffers for `batch` sequences of `t` positions.
    pub fn cache(&self, batch: usize, t: usize) -> SublayerCache {
        let rows = batch * t;
        let n = rows * self.d;
        let sized = |on: bool| buf(if on { n } else { 0 });
        let (has_in, has_out) = (self.in_norm.is_some(), self.out_norm.is_some());
        SublayerCache {
            t,
            a: sized(has_in && !self.norm_out_in_scratch()),
            in_c: self.in_norm.as_ref().map(|m| m.cache(rows)),
            s: sized(self.keeps_s()),
            op: match &self.op {
                Op::Attention(a) => OpCache::Attention(Box::new(a.cache(batch, t))),
                Op::Mlp(m) => OpCache::Mlp(m.cache(rows)),
                Op::Mixer(m) => OpCache::Mixer(m.cache(rows)),
            },
            o: sized(has_out),
            out_c: self.out_norm.as_ref().map(|m| m.cache(rows)),
            res: self.res.cache(rows, self.d),
            xin: buf(if self.res.streams() > 1 { n } else { 0 }),
            identity_grad_sumsq: 0.0,
            branch_grad_sumsq: 0.0,
            total_grad_sumsq: 0.0,
            track_paths: false,
            output_sumsq: 0.0,
            track_output: false,
            keep_write: false,
            write: buf(0),
        }
    }

    /// Forward: reads the stream `x`, leaves x' in `c.output()`.
    pub fn forward(&self, params: &[f32], x: &[f32], c: &mut SublayerCache, scr: &mut Scratch) {
        let SublayerCache {
            t,
            a,
            in_c,
            s,
            op,
            o,
            out_c,
            res,
            output_sumsq,
            track_output,
            keep_write,
            write,
            xin,
            ..
        } = c;
        // `stream`: the residual state (n x d per token); `x`: what the
        // branch reads from it.
        let stream = x;
        let x = self.res.read(params, stream, xin, res);
        let rows = x.len() / self.d;
        // Activations are rounded to the storage type where a
        // mixed-precision framework keeps them (f32: no-op).
        let r = scr.round;
        let a: &[f32] = match &self.in_norm {
            Some(n) => {
                let a: &mut [f32] = if self.norm_out_in_scratch() {
                    &mut scr.a[..rows * self.d]
                } else {
                    a
                };
                n.forward(params, x, a, in_c.as_mut().unwrap());
                if self.in_scale != 1.0 {
                    let c = self.in_scale;
                    a.iter_mut().for_each(|v| *v *= c);
                }
                r.round_in_place(a);
                a
            }
            None => x,
        };
        let s: &mut [f32] = if self.keeps_s() {
            s
        } else {
            &mut scr.s[..rows * self.d]
        };
        match (&self.op, op) {
            (Op::Attention(m), OpCache::Attention(mc)) => m.forward(params, a, s, mc),
            (Op::Mlp(m), OpCache::Mlp(mc)) => m.forward(params, a, s, mc, &mut scr.op1),
            (Op::Mixer(m), OpCache::Mixer(mc)) => m.forward(params, a, *t, s, mc),
            _ => unreachable!("cache does not match op"),
        }
        r.round_in_place(s);
        let o: &[f32] = match &self.out_norm {
            Some(n) => {
                n.forward(params, s, o, out_c.as_mut().unwrap());
                if let Some(b) = &self.out_bias {
                    crate::kernels::matmul::add_bias_rows(o, b.get(params));
                }
                r.round_in_place(o);
                o
            }
            None => s,
        };
        let o: &[f32] = match &self.gate {
            Some(g) => {
                let y = &mut scr.dbr[..rows * self.d];
                g.forward(params, o, y);
                y
            }
            None => o,
        };
        if let Some(v) = self.res.write(params, stream, o, res, r, *track_output) {
            *output_sumsq = v;
        }
        if *keep_write {
            self.res.written(stream, o, res, write);
        }
    }

    /// Backward: given dL/dx' (`dy`), write dL/dx into `dx` and accumulate
    /// parameter gradients. `x` is the same stream (state) the forward read.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        x: &[f32],
        dy: &[f32],
        dx: &mut [f32],
        c: &mut SublayerCache,
        scr: &mut Scratch,
    ) {
        let SublayerCache {
            t,
            a,
            in_c,
            s,
            op,
            o,
            out_c,
            res,
            xin,
            ..
        } = c;
        let streams = self.res.streams();
        let n = x.len() / streams;
        let (dh, dbr, ds, da, dxb) = (
            &mut scr.dh[..n],
            &mut scr.dbr[..n],
            &mut scr.ds[..n],
            &mut scr.da[..n],
            &mut scr.dxb[..n],
        );
        // Through the write-back (the post-norm): dh = dL/dh.
        let r = scr.round;
        let dh: &[f32] = self
            .res
            .write_backward(params, grads, x, dy, dh, dx, res, r);
        // n streams: the identity path's gradient is what the write left in dx.
        let id2_streams = (c.track_paths && streams > 1).then(|| sum_squares(dx));
        // What the branch read: the stream, or the streams' mix.
        let stream = x;
        let x: &[f32] = if streams > 1 { xin } else { stream };
        // Branch path: branch * dh -> Gate^T -> OutNorm^T -> S^T -> InNorm^T.
        let branch = self.res.branch();
        let dbranch: &[f32] = if branch != 1.0 || self.gate.is_some() {
            act::axpby(dbr, branch, dh, 0.0, dh);
            if let Some(g) = &self.gate {
                let gated_in: &[f32] = if self.out_norm.is_some() { o } else { s };
                g.backward_in_place(params, grads, gated_in, dbr);
            }
            dbr
        } else {
            dh
        };
        let ds: &[f32] = match &self.out_norm {
            Some(n) => {
                if let Some(b) = &self.out_bias {
                    crate::kernels::matmul::add_column_sums(dbranch, self.d, b.get_mut(grads));
                }
                n.backward(params, grads, s, dbranch, ds, out_c.as_mut().unwrap());
                r.round_in_place(ds);
                ds
            }
            None => dbranch,
        };
        // S's input (only read when `backward_reads_input`).
        let a_in: &[f32] = if self.in_norm.is_some() { a } else { x };
        match (&self.op, op) {
            (Op::Attention(m), OpCache::Attention(mc)) => {
                m.backward(params, grads, a_in, ds, da, mc)
            }
            (Op::Mlp(m), OpCache::Mlp(mc)) => m.backward(
                params,
                grads,
                a_in,
                ds,
                da,
                mc,
                &mut scr.op1,
                &mut scr.op2,
                &mut scr.op3,
            ),
            (Op::Mixer(m), OpCache::Mixer(mc)) => {
                m.backward(params, grads, ds, *t, da, mc, &mut scr.op1)
            }
            _ => unreachable!("cache does not match op"),
        }
        r.round_in_place(da);
        let dx_branch: &[f32] = match &self.in_norm {
            Some(n) => {
                if self.in_scale != 1.0 {
                    let c = self.in_scale;
                    da.iter_mut().for_each(|v| *v *= c);
                }
                n.backward(params, grads, x, da, dxb, in_c.as_mut().unwrap());
                r.round_in_place(dxb);
                dxb
            }
            None => da,
        };
        // The residual stream's gradient is the sum of the two paths:
        // dx = skip * dh (identity path) + dx_branch (through S).
        let skip = self.res.skip();
        self.res
            .read_backward(params, grads, stream, dx, dh, dx_branch, res, r);
        if c.track_paths {
            let (id2, br2) = (
                id2_streams.unwrap_or_else(|| (skip as f64) * (skip as f64) * sum_squares(dh)),
                sum_squares(dx_branch),
            );
            c.identity_grad_sumsq = id2;
            c.branch_grad_sumsq = br2;
            c.total_grad_sumsq = sum_squares(dx);
        }
    }
}

impl Scratch {
    /// Scratch for `rows` rows of any of `subs`.
    pub fn new<'a>(subs: impl IntoIterator<Item = &'a Sublayer>, rows: usize) -> Scratch {
        let subs: Vec<&Sublayer> = subs.into_iter().collect();
        let d = subs.first().map_or(0, |s| s.d);
        let (mut w1, mut w2, mut w3) = (0, 0, 0);
        for sub in &subs {
            let (a, b, c) = sub.op.scratch_widths();
            w1 = w1.max(a);
            w2 = w2.max(b);
            w3 = w3.max(c);
        }
        let any_norm_out = subs.iter().any(|s| s.norm_out_in_scratch());
        Scratch::sized(rows, d, (w1, w2, w3), any_norm_out)
    }
}
