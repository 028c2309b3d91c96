//! Causal multi-head self-attention with optional QK-Norm.
//!
//! ```text
//! [q | k | v] = c_attn(a)                     (Linear d -> 3d)
//! q, k <- RMSNorm_hd(q), RMSNorm_hd(k)        (QK-Norm, per head, optional)
//! P = causal_softmax(q k^T / sqrt(hd))        (per sequence and head)
//! out = c_proj(P v, heads merged)             (Linear d -> d)
//! ```
//!
//! Backward: dP = dctx v^T, dv = P^T dctx, dS = P (dP - rowsum(P dP)),
//! dq = dS k / sqrt(hd), dk = dS^T q / sqrt(hd).

use super::linear::Linear;
use super::norm::{buf, Norm, NormCache};
use crate::kernels::act;
use crate::kernels::buf::AlignedBuf;
use crate::kernels::matmul::{gemm, Mat};
use crate::kernels::norm::NormKind;
use crate::params::{Init, ParamLayout};

/// Attention parameters.
#[derive(Clone, Debug)]
pub struct Attention {
    /// Width.
    pub d: usize,
    /// Heads.
    pub heads: usize,
    /// `{name}.c_attn`: d -> 3d.
    pub qkv: Linear,
    /// `{name}.c_proj`: d -> d.
    pub proj: Linear,
    /// QK-Norm on q and k (RMSNorm over head_dim, gain shared by heads).
    pub qk_norm: Option<(Norm, Norm)>,
}

/// Activations of one attention sublayer in one shard.
#[derive(Clone, Debug)]
pub struct AttentionCache {
    batch: usize,
    t: usize,
    qkv: AlignedBuf,
    q_raw: AlignedBuf,
    k_raw: AlignedBuf,
    q: AlignedBuf,
    k: AlignedBuf,
    v: AlignedBuf,
    probs: AlignedBuf,
    ctx: AlignedBuf,
    merged: AlignedBuf,
    dmerged: AlignedBuf,
    dctx: AlignedBuf,
    dp: AlignedBuf,
    dq: AlignedBuf,
    dk: AlignedBuf,
    dv: AlignedBuf,
    dq_raw: AlignedBuf,
    dk_raw: AlignedBuf,
    dqkv: AlignedBuf,
    q_cache: Option<NormCache>,
    k_cache: Option<NormCache>,
    /// Largest pre-softmax logit of the last forward.
    pub max_logit: f32,
}

impl Attention {
    /// Register `{name}.c_attn`, `{name}.c_proj` and, with QK-Norm,
    /// `{name}.q_norm`, `{name}.k_norm`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        layout: &mut ParamLayout,
        name: &str,
        d: usize,
        heads: usize,
        qk_norm: bool,
        block: Option<usize>,
        qkv_init: Init,
        proj_init: Init,
    ) -> Attention {
        assert!(heads > 0 && d % heads == 0, "heads must divide d");
        let qkv = Linear::new(
            layout,
            &format!("{name}.c_attn"),
            d,
            3 * d,
            true,
            block,
            qkv_init,
        );
        let proj = Linear::new(
            layout,
            &format!("{name}.c_proj"),
            d,
            d,
            true,
            block,
            proj_init,
        );
        let hd = d / heads;
        let qk_norm = qk_norm.then(|| {
            let kind = NormKind::RmsNorm;
            let eps = kind.default_eps();
            (
                Norm::new(layout, &format!("{name}.q_norm"), kind, hd, eps, block),
                Norm::new(layout, &format!("{name}.k_norm"), kind, hd, eps, block),
            )
        });
        Attention {
            d,
            heads,
            qkv,
            proj,
            qk_norm,
        }
    }

    fn hd(&self) -> usize {
        self.d / self.heads
    }

    /// Buffers for `batch` sequences of `t` positions.
    pub fn cache(&self, batch: usize, t: usize) -> AttentionCache {
        let (rows, d, h) = (batch * t, self.d, self.heads);
        let qk = self.qk_norm.is_some();
        let opt = |n: usize| buf(if qk { n } else { 0 });
        AttentionCache {
            batch,
            t,
            qkv: buf(rows * 3 * d),
            q_raw: opt(rows * d),
            k_raw: opt(rows * d),
            q: buf(rows * d),
            k: buf(rows * d),
            v: buf(rows * d),
            probs: buf(batch * h * t * t),
            ctx: buf(rows * d),
            merged: buf(rows * d),
            dmerged: buf(rows * d),
            dctx: buf(rows * d),
            dp: buf(t * t),
            dq: buf(rows * d),
            dk: buf(rows * d),
            dv: buf(rows * d),
            dq_raw: opt(rows * d),
            dk_raw: opt(rows * d),
            dqkv: buf(rows * 3 * d),
            q_cache: self.qk_norm.as_ref().map(|(n, _)| n.cache(rows * h)),
            k_cache: self.qk_norm.as_ref().map(|(_, n)| n.cache(rows * h)),
            max_logit: 0.0,
        }
    }

    /// `out = Attention(a)`; `a` is `[batch * t, d]`.
    pub fn forward(&self, params: &[f32], a: &[f32], out: &mut [f32], c: &mut AttentionCache) {
        let (d, h, hd, t, batch) = (self.d, self.heads, self.hd(), c.t, c.batch);
        let rows = batch * t;
        self.qkv.forward(params, a, rows, &mut c.qkv);
        // Split [rows, 3d] into head-major [batch, heads, t, hd] blocks.
        {
            let (qd, kd) = if self.qk_norm.is_some() {
                (&mut c.q_raw, &mut c.k_raw)
            } else {
                (&mut c.q, &mut c.k)
            };
            split_heads(&c.qkv, 3 * d, 0, batch, t, h, hd, qd);
            split_heads(&c.qkv, 3 * d, d, batch, t, h, hd, kd);
            split_heads(&c.qkv, 3 * d, 2 * d, batch, t, h, hd, &mut c.v);
        }
        if let Some((qn, kn)) = &self.qk_norm {
            qn.forward(params, &c.q_raw, &mut c.q, c.q_cache.as_mut().unwrap());
            kn.forward(params, &c.k_raw, &mut c.k, c.k_cache.as_mut().unwrap());
        }
        let scale = 1.0 / (hd as f32).sqrt();
        let mut max_logit = f32::NEG_INFINITY;
        for bh in 0..batch * h {
            let blk = bh * t * hd..(bh + 1) * t * hd;
            let pb = &mut c.probs[bh * t * t..(bh + 1) * t * t];
            gemm(
                scale,
                Mat::rows(&c.q[blk.clone()], t, hd),
                Mat::rows(&c.k[blk.clone()], t, hd).t(),
                0.0,
                pb,
                t,
            );
            max_logit = max_logit.max(act::causal_softmax(pb, t));
            gemm(
                1.0,
                Mat::rows(pb, t, t),
                Mat::rows(&c.v[blk.clone()], t, hd),
                0.0,
                &mut c.ctx[blk],
                hd,
            );
        }
        c.max_logit = max_logit;
        merge_heads(&c.ctx, batch, t, h, hd, &mut c.merged);
        self.proj.forward(params, &c.merged, rows, out);
    }

    /// Write `da`, accumulate all gradients.
    pub fn backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        a: &[f32],
        dout: &[f32],
        da: &mut [f32],
        c: &mut AttentionCache,
    ) {
        let (d, h, hd, t, batch) = (self.d, self.heads, self.hd(), c.t, c.batch);
        let rows = batch * t;
        self.proj.backward(
            params,
            grads,
            &c.merged,
            dout,
            rows,
            Some(&mut c.dmerged),
            false,
        );
        split_heads(&c.dmerged, d, 0, batch, t, h, hd, &mut c.dctx);
        let scale = 1.0 / (hd as f32).sqrt();
        for bh in 0..batch * h {
            let blk = bh * t * hd..(bh + 1) * t * hd;
            let pb = &c.probs[bh * t * t..(bh + 1) * t * t];
            let dctx = Mat::rows(&c.dctx[blk.clone()], t, hd);
            // dP = dctx v^T ; dv = P^T dctx
            gemm(
                1.0,
                dctx,
                Mat::rows(&c.v[blk.clone()], t, hd).t(),
                0.0,
                &mut c.dp,
                t,
            );
            gemm(
                1.0,
                Mat::rows(pb, t, t).t(),
                dctx,
                0.0,
                &mut c.dv[blk.clone()],
                hd,
            );
            act::causal_softmax_backward(pb, &mut c.dp, t);
            // dq = scale dS k ; dk = scale dS^T q
            gemm(
                scale,
                Mat::rows(&c.dp, t, t),
                Mat::rows(&c.k[blk.clone()], t, hd),
                0.0,
                &mut c.dq[blk.clone()],
                hd,
            );
            gemm(
                scale,
                Mat::rows(&c.dp, t, t).t(),
                Mat::rows(&c.q[blk.clone()], t, hd),
                0.0,
                &mut c.dk[blk],
                hd,
            );
        }
        if let Some((qn, kn)) = &self.qk_norm {
            qn.backward(
                params,
                grads,
                &c.q_raw,
                &c.dq,
                &mut c.dq_raw,
                c.q_cache.as_mut().unwrap(),
            );
            kn.backward(
                params,
                grads,
                &c.k_raw,
                &c.dk,
                &mut c.dk_raw,
                c.k_cache.as_mut().unwrap(),
            );
            merge_heads_into(&c.dq_raw, batch, t, h, hd, &mut c.dqkv, 3 * d, 0);
            merge_heads_into(&c.dk_raw, batch, t, h, hd, &mut c.dqkv, 3 * d, d);
        } else {
            merge_heads_into(&c.dq, batch, t, h, hd, &mut c.dqkv, 3 * d, 0);
            merge_heads_into(&c.dk, batch, t, h, hd, &mut c.dqkv, 3 * d, d);
        }
        merge_heads_into(&c.dv, batch, t, h, hd, &mut c.dqkv, 3 * d, 2 * d);
        self.qkv
            .backward(params, grads, a, &c.dqkv, rows, Some(da), false);
    }
}

/// Copy columns `[offset, offset + h*hd)` of a `[batch*t, stride]` matrix
/// into head-major `[batch, h, t, hd]`.
#[allow(clippy::too_many_arguments)]
fn split_heads(
    src: &[f32],
    stride: usize,
    offset: usize,
    batch: usize,
    t: usize,
    h: usize,
    hd: usize,
    dst: &mut [f32],
) {
    for b in 0..batch {
        for hh in 0..h {
            for tt in 0..t {
                let s = (b * t + tt) * stride + offset + hh * hd;
                let o = ((b * h + hh) * t + tt) * hd;
                dst[o..o + hd].copy_from_slice(&src[s..s + hd]);
            }
        }
    }
}

/// Inverse of [`split_heads`] into a `[batch*t, h*hd]` matrix.
fn merge_heads(src: &[f32], batch: usize, t: usize, h: usize, hd: usize, dst: &mut [f32]) {
    merge_heads_into(src, batch, t, h, hd, dst, h * hd, 0)
}

#[allow(clippy::too_many_arguments)]
fn merge_heads_into(
    src: &[f32],
    batch: usize,
    t: usize,
    h: usize,
    hd: usize,
    dst: &mut [f32],
    stride: usize,
    offset: usize,
) {
    for b in 0..batch {
        for hh in 0..h {
            for tt in 0..t {
                let s = ((b * h + hh) * t + tt) * hd;
                let o = (b * t + tt) * stride + offset + hh * hd;
                dst[o..o + hd].copy_from_slice(&src[s..s + hd]);
            }
        }
    }
}
