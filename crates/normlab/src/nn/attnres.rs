//! Attention Residuals (Kimi team, Moonshot AI 2026, arXiv 2603.15031):
//! each sublayer (the paper's "layer": an attention or an MLP) reads a
//! softmax-weighted mixture of earlier representations instead of one
//! running sum. Block AttnRes, with blocks of S sublayers: the stream
//! state of a token is a bank of slots, slot 0 the embedding and slot j
//! the sum of the outputs of block j's sublayers (the last one partial).
//! Sublayer l (0-based) belongs to block j = l / S + 1 and reads
//!
//! ```text
//! h_l = sum_i alpha_i X_i,  alpha = softmax_i(w_l . RMSNorm(X_i))
//! ```
//!
//! over slots 0..j-1 and, unless it is the block's first sublayer, its own
//! partial slot j; its output o (what the branch computes from h_l, its
//! pre-norm included) is added into slot j. S = 1 is full AttnRes: every
//! sublayer's output is a source of its own. The keys' RMSNorm has no gain
//! (a gain would only rescale w) and eps 1e-6; the pseudo-queries w_l
//! start at 0, so every mix starts as the plain average of its sources,
//! as the paper prescribes. The head mixes every slot with its own query
//! ([`StreamHead`](super::StreamHead)'s depth variant) before the final
//! norm. The paper's block boundaries fall before attention sublayers when
//! S is even (its pseudocode's convention, which Kimi's code follows).
//!
//! Backward is explicit: with `dalpha_i = X_i . g` (g: dL/dh),
//! `ds_i = alpha_i (dalpha_i - sum_j alpha_j dalpha_j)`, and
//! `dX_i += alpha_i g + ds_i r_i (w - s_i khat_i / d)` (r_i = 1 / RMS(X_i),
//! khat_i = r_i X_i, s_i = w . khat_i); `dw += sum_i ds_i khat_i`, summed in
//! row order (f64), so it does not depend on the thread count.

use super::hyper_rows::dot;
use super::norm::buf;
use crate::kernels::buf::AlignedBuf;
use crate::params::{Init, ParamKind, ParamLayout, ParamRef};
use crate::precision::Dtype;

/// The keys' RMSNorm eps.
pub const KEY_EPS: f64 = 1e-6;

/// Where a sublayer sits in the bank of slots.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DepthSlots {
    /// Slots per token (1 + blocks).
    pub slots: usize,
    /// The slot its output is added into.
    pub own: usize,
    /// Slots it reads: 0..reads.
    pub reads: usize,
    /// Slots below `reads` that hold no source and are left out of the
    /// softmax (bit i: slot i; 0 in a trained model). Set when blocks are
    /// removed from a trained model (`Model::without_block`), so that a
    /// removed block is no source rather than an empty one with score 0.
    pub absent: u128,
}

impl DepthSlots {
    /// Sublayer `l` (0-based) of `sublayers`, blocks of `size` sublayers.
    pub fn of(l: usize, sublayers: usize, size: usize) -> DepthSlots {
        let own = l / size + 1;
        DepthSlots {
            slots: 1 + sublayers.div_ceil(size),
            own,
            reads: if l.is_multiple_of(size) { own } else { own + 1 },
            absent: 0,
        }
    }

    /// Whether slot `i` is left out of the mix.
    pub fn is_absent(&self, i: usize) -> bool {
        i < 128 && (self.absent >> i) & 1 == 1
    }
}

/// One sublayer's depth attention.
#[derive(Clone, Debug)]
pub struct DepthAttn {
    /// Its place in the bank.
    pub at: DepthSlots,
    /// Width d.
    pub d: usize,
    /// The pseudo-query w_l, `[d]`.
    pub query: ParamRef,
}

/// One depth mix's per-row values (alpha, scores, inverse RMS of each
/// slot read, `rows x slots`).
#[derive(Clone, Debug)]
pub struct MixCache {
    alpha: AlignedBuf,
    s: AlignedBuf,
    rinv: AlignedBuf,
}

impl MixCache {
    fn new(rows: usize, slots: usize) -> MixCache {
        MixCache {
            alpha: buf(rows * slots),
            s: buf(rows * slots),
            rinv: buf(rows * slots),
        }
    }

    /// Each row's weights over the slots (0 for a slot not read).
    pub fn alpha(&self) -> &[f32] {
        &self.alpha
    }
}

/// What a sublayer's depth attention keeps between forward and backward.
#[derive(Clone, Debug)]
pub struct DepthCache {
    mix: MixCache,
    out: AlignedBuf,
}

impl DepthCache {
    /// The bank after the sublayer.
    pub fn output(&self) -> &[f32] {
        &self.out
    }

    /// The read's weights (rows x slots).
    pub fn alpha(&self) -> &[f32] {
        self.mix.alpha()
    }
}

/// The mix of each row of the bank `x` (rows x slots x d) over slots
/// `0..reads` with query `q`, into `h` (rows x d).
pub fn mix_forward(
    q: &[f32],
    x: &[f32],
    at: DepthSlots,
    d: usize,
    h: &mut [f32],
    c: &mut MixCache,
) {
    mix_rows(q, x, at, d, h, &mut c.alpha, &mut c.s, &mut c.rinv);
}

crate::kernels::multiversion! {
    /// [`mix_forward`] on the cache's buffers (multiversioned).
    fn mix_rows(
        q: &[f32],
        x: &[f32],
        at: DepthSlots,
        d: usize,
        h: &mut [f32],
        alpha: &mut [f32],
        scores: &mut [f32],
        rinvs: &mut [f32],
    ) {
    let (n, k) = (at.slots, at.reads);
    let rows = x.chunks_exact(n * d).zip(h.chunks_exact_mut(d));
    for (r, (xr, hr)) in rows.enumerate() {
        let (a, s, ri) = (
            &mut alpha[r * n..(r + 1) * n],
            &mut scores[r * n..(r + 1) * n],
            &mut rinvs[r * n..(r + 1) * n],
        );
        for (i, xi) in xr.chunks_exact(d).take(k).enumerate() {
            let ms = crate::kernels::simd::sum_squares(xi, &[]) / d as f64;
            ri[i] = (1.0 / (ms + KEY_EPS).sqrt()) as f32;
            s[i] = if at.is_absent(i) {
                f32::NEG_INFINITY
            } else {
                dot(q, xi) * ri[i]
            };
        }
        let m = s[..k].iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let mut z = 0f32;
        for i in 0..k {
            a[i] = if at.is_absent(i) {
                0.0
            } else {
                (s[i] - m).exp()
            };
            z += a[i];
        }
        a[..k].iter_mut().for_each(|v| *v /= z);
        a[k..].fill(0.0);
        hr.fill(0.0);
        for (xi, &ai) in xr.chunks_exact(d).zip(a.iter()).take(k) {
            hr.iter_mut().zip(xi).for_each(|(h, &x)| *h += ai * x);
        }
    }
    }
}

/// The mix's backward: adds dL/dx to `dx` (rows x slots x d) from
/// dL/dh `g`, and the query's gradient to `dq` (f64, row order).
#[allow(clippy::too_many_arguments)]
pub fn mix_backward(
    q: &[f32],
    x: &[f32],
    g: &[f32],
    at: DepthSlots,
    d: usize,
    dx: &mut [f32],
    dq: &mut [f64],
    c: &MixCache,
) {
    mix_back_rows(q, x, g, at, d, dx, dq, &c.alpha, &c.s, &c.rinv);
}

crate::kernels::multiversion! {
    /// [`mix_backward`] on the cache's buffers (multiversioned).
    fn mix_back_rows(
        q: &[f32],
        x: &[f32],
        g: &[f32],
        at: DepthSlots,
        d: usize,
        dx: &mut [f32],
        dq: &mut [f64],
        alpha: &[f32],
        scores: &[f32],
        rinvs: &[f32],
    ) {
    let (n, k) = (at.slots, at.reads);
    let mut da = vec![0f32; k];
    let rows = x.chunks_exact(n * d).zip(g.chunks_exact(d));
    for (r, ((xr, gr), dxr)) in rows.zip(dx.chunks_exact_mut(n * d)).enumerate() {
        let (a, s, ri) = (
            &alpha[r * n..(r + 1) * n],
            &scores[r * n..(r + 1) * n],
            &rinvs[r * n..(r + 1) * n],
        );
        for (i, xi) in xr.chunks_exact(d).take(k).enumerate() {
            da[i] = dot(xi, gr);
        }
        let mean: f32 = (0..k).map(|i| a[i] * da[i]).sum();
        for (i, (xi, dxi)) in xr
            .chunks_exact(d)
            .zip(dxr.chunks_exact_mut(d))
            .take(k)
            .enumerate()
            .filter(|(i, _)| !at.is_absent(*i))
        {
            let ds = a[i] * (da[i] - mean);
            // ds r_i (w - s_i khat_i / d), khat_i = r_i x_i.
            let cq = ds * ri[i];
            let cx = cq * s[i] * ri[i] / d as f32;
            for (((dv, &gv), &qv), &xv) in dxi.iter_mut().zip(gr).zip(q).zip(xi) {
                *dv += a[i] * gv + cq * qv - cx * xv;
            }
            let w = ds * ri[i];
            dq.iter_mut()
                .zip(xi)
                .for_each(|(s, &xv)| *s += f64::from(w * xv));
        }
    }
    }
}

/// A pseudo-query `name.query`, `[d]`, at 0 (every mix starts as the
/// plain average of its sources).
fn add_query(layout: &mut ParamLayout, name: &str, d: usize, block: Option<usize>) -> ParamRef {
    layout.add(
        format!("{name}.query"),
        &[d],
        ParamKind::Gate,
        block,
        Init::Const(0.0),
    )
}

impl DepthAttn {
    /// Register sublayer `l`'s pseudo-query under `name` (`.query`, at 0).
    pub fn new(
        layout: &mut ParamLayout,
        name: &str,
        at: DepthSlots,
        d: usize,
        block: Option<usize>,
    ) -> DepthAttn {
        let query = add_query(layout, name, d, block);
        DepthAttn { at, d, query }
    }

    /// Buffers for `rows` tokens.
    pub fn cache(&self, rows: usize) -> DepthCache {
        DepthCache {
            mix: MixCache::new(rows, self.at.slots),
            out: buf(rows * self.at.slots * self.d),
        }
    }

    /// The read: each row's depth mix into `h` (rows x d).
    pub fn read(&self, params: &[f32], x: &[f32], h: &mut [f32], c: &mut DepthCache) {
        mix_forward(self.query.get(params), x, self.at, self.d, h, &mut c.mix);
    }

    /// The write: the bank with `o` added into this sublayer's slot; with
    /// `track`, returns the sum of squares of each row's sum of slots (the
    /// embedding plus every output so far: what one plain residual stream
    /// would hold, so that the stream's RMS compares across designs).
    pub fn write(
        &self,
        x: &[f32],
        o: &[f32],
        c: &mut DepthCache,
        r: Dtype,
        track: bool,
    ) -> Option<f64> {
        let (n, d, j) = (self.at.slots, self.d, self.at.own);
        c.out.copy_from_slice(x);
        for (yr, or) in c.out.chunks_exact_mut(n * d).zip(o.chunks_exact(d)) {
            let y = &mut yr[j * d..(j + 1) * d];
            y.iter_mut().zip(or).for_each(|(y, &o)| *y += o);
        }
        r.round_in_place(&mut c.out);
        track.then(|| {
            let mut sum = vec![0f32; d];
            let mut t = 0f64;
            for yr in c.out.chunks_exact(n * d) {
                sum.copy_from_slice(&yr[..d]);
                for y in yr[d..].chunks_exact(d) {
                    sum.iter_mut().zip(y).for_each(|(s, &v)| *s += v);
                }
                t += crate::params::sum_squares(&sum);
            }
            t
        })
    }

    /// The write's backward: the branch's gradient (this slot's) into
    /// `dout`, the identity path's (every slot's) into `dx`.
    pub fn write_backward(&self, dy: &[f32], dout: &mut [f32], dx: &mut [f32]) {
        let (n, d, j) = (self.at.slots, self.d, self.at.own);
        dx.copy_from_slice(dy);
        for (dyr, dor) in dy.chunks_exact(n * d).zip(dout.chunks_exact_mut(d)) {
            dor.copy_from_slice(&dyr[j * d..(j + 1) * d]);
        }
    }

    /// The read's backward: adds the mix's gradient to `dx` (given dL/dh
    /// `g`) and accumulates the query's.
    #[allow(clippy::too_many_arguments)]
    pub fn read_backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        x: &[f32],
        g: &[f32],
        dx: &mut [f32],
        c: &mut DepthCache,
        r: Dtype,
    ) {
        let mut dq = vec![0f64; self.d];
        let q = self.query.get(params);
        mix_backward(q, x, g, self.at, self.d, dx, &mut dq, &c.mix);
        super::hyper_rows::add_f64(&self.query, grads, &dq);
        r.round_in_place(dx);
    }
}

/// The head's depth mix over every slot (its own query, at 0).
#[derive(Clone, Debug)]
pub struct DepthHead {
    /// The bank's slots (all read).
    pub at: DepthSlots,
    /// Width d.
    pub d: usize,
    /// The output's pseudo-query, `[d]`.
    pub query: ParamRef,
}

impl DepthHead {
    /// Register under `name` (`.query`).
    pub fn new(layout: &mut ParamLayout, name: &str, slots: usize, d: usize) -> DepthHead {
        let at = DepthSlots {
            slots,
            own: 0,
            reads: slots,
            absent: 0,
        };
        let query = add_query(layout, name, d, None);
        DepthHead { at, d, query }
    }

    /// Its cache for `rows` tokens.
    pub fn cache(&self, rows: usize) -> MixCache {
        MixCache::new(rows, self.at.slots)
    }

    /// Each row's mix of every slot into `out` (rows x d).
    pub fn forward(&self, params: &[f32], x: &[f32], out: &mut [f32], c: &mut MixCache) {
        mix_forward(self.query.get(params), x, self.at, self.d, out, c);
    }

    /// Backward: dL/dx written into `dx`.
    pub fn backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        x: &[f32],
        g: &[f32],
        dx: &mut [f32],
        c: &MixCache,
    ) {
        dx.fill(0.0);
        let mut dq = vec![0f64; self.d];
        mix_backward(
            self.query.get(params),
            x,
            g,
            self.at,
            self.d,
            dx,
            &mut dq,
            c,
        );
        super::hyper_rows::add_f64(&self.query, grads, &dq);
    }
}
