//! Causal multi-head self-attention with optional QK-Norm, output gate and
//! a choice of score-to-weight map ([`AttnKind`], attn_fn.rs).
//!
//! ```text
//! [q | k | v] = c_attn(a)                     (Linear d -> 3d)
//! q, k <- RMSNorm_hd(q), RMSNorm_hd(k)        (QK-Norm, per head, optional)
//! P = causal_softmax(q k^T / sqrt(hd))        (per sequence and head; or
//!                                              sink-logit, sigmoid, relu)
//! ctx = P v, heads merged
//! ctx <- sigmoid(a W_g^T) * ctx               (output gate, optional)
//! out = c_proj(ctx)                           (Linear d -> d)
//! ```
//!
//! The output gate is Qiu et al. 2025's G1 (arXiv 2505.06708; Qwen3-Next):
//! `{name}.gate`, no bias, d -> d (elementwise: one gate per head
//! dimension) or d -> heads (headwise: one per head), from the sublayer's
//! normalised input a, initialised as c_attn.
//!
//! Backward: dP = dctx v^T, dv = P^T dctx, dS = P (dP - rowsum(P dP))
//! (softmax; the other kinds' in attn_fn.rs),
//! dq = dS k / sqrt(hd), dk = dS^T q / sqrt(hd); with the gate,
//! dctx = g dgated, dz = sum(dgated ctx) g (1 - g) (summed over the head's
//! dimensions when headwise), da += dz W_g.

use super::attn_fn::AttnKind;
use super::linear::Linear;
use super::norm::{buf, Norm, NormCache};
use crate::kernels::buf::AlignedBuf;
use crate::kernels::matmul::{gemm, Mat};
use crate::kernels::norm::NormKind;
use crate::params::{Init, ParamKind, ParamLayout, ParamRef};
use serde::{Deserialize, Serialize};

/// The attention output gate's form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputGate {
    /// One gate per head dimension (W_g d x d).
    Elementwise,
    /// One gate per head (W_g d x heads).
    Headwise,
}

impl OutputGate {
    /// Both forms.
    pub const ALL: [OutputGate; 2] = [OutputGate::Elementwise, OutputGate::Headwise];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            OutputGate::Elementwise => "elementwise",
            OutputGate::Headwise => "headwise",
        }
    }
}

/// The attention's options beyond its size.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttnOptions {
    /// QK-Norm on q and k.
    pub qk_norm: bool,
    /// The output gate.
    pub gate: Option<OutputGate>,
    /// How scores become weights.
    pub kind: AttnKind,
    /// No bias on c_attn and c_proj.
    pub no_bias: bool,
}

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
    /// The output gate: its form and `{name}.gate` (d -> d or heads).
    pub gate: Option<(OutputGate, Linear)>,
    /// How scores become weights.
    pub kind: AttnKind,
    /// `{name}.sinks`: one logit per head (`AttnKind::SinkLogit`).
    pub sinks: Option<ParamRef>,
}

/// Activations of one attention sublayer in one shard.
///
/// Heads are never copied out: q, k, v are strided views into the fused
/// `[rows, 3d]` projection (or, with QK-Norm, into the normalised `[rows, d]`
/// copies), and each head's output is written straight into its columns of
/// the merged `[rows, d]` buffer.
#[derive(Clone, Debug)]
pub struct AttentionCache {
    batch: usize,
    t: usize,
    qkv: AlignedBuf,
    q_raw: AlignedBuf,
    k_raw: AlignedBuf,
    q: AlignedBuf,
    k: AlignedBuf,
    probs: AlignedBuf,
    merged: AlignedBuf,
    dmerged: AlignedBuf,
    dp: AlignedBuf,
    dq: AlignedBuf,
    dk: AlignedBuf,
    dq_raw: AlignedBuf,
    dk_raw: AlignedBuf,
    dqkv: AlignedBuf,
    q_cache: Option<NormCache>,
    k_cache: Option<NormCache>,
    /// With the output gate: the gates, the gated context, dL/dz.
    g: AlignedBuf,
    gated: AlignedBuf,
    dz: AlignedBuf,
    /// With sink logits: per sequence, head and query, the share the
    /// head's sink logit took.
    absorbed: AlignedBuf,
    kind: AttnKind,
    /// Largest pre-softmax logit of the last forward.
    pub max_logit: f32,
}

mod stats;
pub use stats::uniform_sink_share;

/// Rows per causal block: a row block [i0, i1) only attends to columns
/// [0, i1), so score and value products skip the masked upper blocks.
const BLOCK: usize = 64;

impl Attention {
    /// Register `{name}.c_attn`, `{name}.c_proj` and, with QK-Norm,
    /// `{name}.q_norm`, `{name}.k_norm`; with the gate `{name}.gate`; with
    /// sink logits `{name}.sinks`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        layout: &mut ParamLayout,
        name: &str,
        d: usize,
        heads: usize,
        opts: AttnOptions,
        block: Option<usize>,
        qkv_init: Init,
        proj_init: Init,
    ) -> Attention {
        assert!(heads > 0 && d.is_multiple_of(heads), "heads must divide d");
        let qkv = Linear::new(
            layout,
            &format!("{name}.c_attn"),
            d,
            3 * d,
            !opts.no_bias,
            block,
            qkv_init.clone(),
        );
        let proj = Linear::new(
            layout,
            &format!("{name}.c_proj"),
            d,
            d,
            !opts.no_bias,
            block,
            proj_init,
        );
        let hd = d / heads;
        let AttnOptions {
            qk_norm,
            gate,
            kind,
            no_bias: _,
        } = opts;
        let qk_norm = qk_norm.then(|| {
            let kind = NormKind::RmsNorm;
            let eps = kind.default_eps();
            (
                Norm::new(layout, &format!("{name}.q_norm"), kind, hd, eps, block),
                Norm::new(layout, &format!("{name}.k_norm"), kind, hd, eps, block),
            )
        });
        let gate = gate.map(|g| {
            let out = match g {
                OutputGate::Elementwise => d,
                OutputGate::Headwise => heads,
            };
            // c_attn's init; Xavier with the queries' gain where c_attn's
            // is per block of q | k | v (DeepNorm).
            let init = match qkv_init {
                Init::XavierBlocks(g) => Init::XavierNormal(g[0]),
                i => i,
            };
            let w = Linear::new(layout, &format!("{name}.gate"), d, out, false, block, init);
            (g, w)
        });
        let sinks = (kind == AttnKind::SinkLogit).then(|| {
            layout.add(
                format!("{name}.sinks"),
                &[heads],
                ParamKind::Gate,
                block,
                Init::Const(0.0),
            )
        });
        Attention {
            d,
            heads,
            qkv,
            proj,
            qk_norm,
            gate,
            kind,
            sinks,
        }
    }

    /// Where the sink logit's shares of (sequence, head) block `bh` lie
    /// in the cache (empty without sink logits).
    fn absorbed_rows(&self, bh: usize, t: usize) -> std::ops::Range<usize> {
        if self.sinks.is_some() {
            bh * t..(bh + 1) * t
        } else {
            0..0
        }
    }

    /// Gates per row (0 without the gate).
    fn gate_width(&self) -> usize {
        self.gate.as_ref().map_or(0, |(_, w)| w.d_out)
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
            q: opt(rows * d),
            k: opt(rows * d),
            probs: buf(batch * h * t * t),
            merged: buf(rows * d),
            dmerged: buf(rows * d),
            dp: buf(t * t),
            dq: opt(rows * d),
            dk: opt(rows * d),
            dq_raw: opt(rows * d),
            dk_raw: opt(rows * d),
            dqkv: buf(rows * 3 * d),
            q_cache: self.qk_norm.as_ref().map(|(n, _)| n.cache(rows * h)),
            k_cache: self.qk_norm.as_ref().map(|(_, n)| n.cache(rows * h)),
            g: buf(rows * self.gate_width()),
            gated: buf(if self.gate.is_some() { rows * d } else { 0 }),
            dz: buf(rows * self.gate_width()),
            absorbed: buf(if self.sinks.is_some() {
                batch * h * t
            } else {
                0
            }),
            kind: self.kind,
            max_logit: 0.0,
        }
    }

    /// `out = Attention(a)`; `a` is `[batch * t, d]`.
    pub fn forward(&self, params: &[f32], a: &[f32], out: &mut [f32], c: &mut AttentionCache) {
        let (d, h, hd, t, batch) = (self.d, self.heads, self.hd(), c.t, c.batch);
        let rows = batch * t;
        self.qkv.forward(params, a, rows, &mut c.qkv);
        if let Some((qn, kn)) = &self.qk_norm {
            copy_columns(&c.qkv, 3 * d, 0, d, &mut c.q_raw);
            copy_columns(&c.qkv, 3 * d, d, d, &mut c.k_raw);
            qn.forward(params, &c.q_raw, &mut c.q, c.q_cache.as_mut().unwrap());
            kn.forward(params, &c.k_raw, &mut c.k, c.k_cache.as_mut().unwrap());
        }
        // (buffer, row stride, column offset) of q and k.
        let (qs, ks) = if self.qk_norm.is_some() {
            ((&c.q[..], d, 0), (&c.k[..], d, 0))
        } else {
            ((&c.qkv[..], 3 * d, 0), (&c.qkv[..], 3 * d, d))
        };
        let scale = 1.0 / (hd as f32).sqrt();
        let mut max_logit = f32::NEG_INFINITY;
        for b in 0..batch {
            for hh in 0..h {
                let view = |src, r0: usize, n: usize| head(src, b * t + r0, hh * hd, n, hd);
                let vv =
                    |r0: usize, n: usize| head((&c.qkv, 3 * d, 2 * d), b * t + r0, hh * hd, n, hd);
                let pb = &mut c.probs[(b * h + hh) * t * t..(b * h + hh + 1) * t * t];
                for i0 in (0..t).step_by(BLOCK) {
                    let i1 = (i0 + BLOCK).min(t);
                    gemm(
                        scale,
                        view(qs, i0, i1 - i0),
                        view(ks, 0, i1).t(),
                        0.0,
                        &mut pb[i0 * t..],
                        t,
                    );
                }
                let sink = self.sinks.as_ref().map_or(0.0, |s| s.get(params)[hh]);
                let ab = &mut c.absorbed[self.absorbed_rows(b * h + hh, t)];
                max_logit = max_logit.max(self.kind.forward(pb, t, sink, ab));
                for i0 in (0..t).step_by(BLOCK) {
                    let i1 = (i0 + BLOCK).min(t);
                    let p = square_block(pb, t, i0, i1 - i0, 0, i1);
                    gemm(
                        1.0,
                        p,
                        vv(0, i1),
                        0.0,
                        &mut c.merged[(b * t + i0) * d + hh * hd..],
                        d,
                    );
                }
            }
        }
        c.max_logit = max_logit;
        match &self.gate {
            None => self.proj.forward(params, &c.merged, rows, out),
            Some((_, w)) => {
                w.forward(params, a, rows, &mut c.g);
                c.g.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-*v).exp()));
                let (gw, per) = (w.d_out, d / w.d_out);
                for ((o, x), g) in c
                    .gated
                    .chunks_exact_mut(d)
                    .zip(c.merged.chunks_exact(d))
                    .zip(c.g.chunks_exact(gw))
                {
                    for (j, (o, &x)) in o.iter_mut().zip(x).enumerate() {
                        *o = g[j / per] * x;
                    }
                }
                self.proj.forward(params, &c.gated, rows, out);
            }
        }
    }

    /// The gate's backward on the proj's input gradient `dmerged`: dL/dz
    /// into `dz`, and `dmerged` times the gates (the context's gradient).
    fn gate_backward(&self, c: &mut AttentionCache) {
        let Some((_, w)) = &self.gate else {
            return;
        };
        let (d, gw) = (self.d, w.d_out);
        let per = d / gw;
        let rows = c.merged.chunks_exact(d).zip(c.dmerged.chunks_exact_mut(d));
        for ((x, dg), (g, dz)) in rows.zip(c.g.chunks_exact(gw).zip(c.dz.chunks_exact_mut(gw))) {
            dz.fill(0.0);
            for (j, (dv, &xv)) in dg.iter_mut().zip(x).enumerate() {
                dz[j / per] += *dv * xv;
                *dv *= g[j / per];
            }
            dz.iter_mut()
                .zip(g)
                .for_each(|(z, &gv)| *z *= gv * (1.0 - gv));
        }
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
        let proj_in = if self.gate.is_some() {
            &c.gated
        } else {
            &c.merged
        };
        self.proj.backward(
            params,
            grads,
            proj_in,
            dout,
            rows,
            Some(&mut c.dmerged),
            false,
        );
        self.gate_backward(c);
        let qk = self.qk_norm.is_some();
        let scale = 1.0 / (hd as f32).sqrt();
        let AttentionCache {
            qkv,
            q,
            k,
            probs,
            dmerged,
            dp,
            dq,
            dk,
            dqkv,
            absorbed,
            ..
        } = c;
        let mut dsinks = vec![0f64; if self.sinks.is_some() { h } else { 0 }];
        let (qs, ks) = if qk {
            ((&q[..], d, 0), (&k[..], d, 0))
        } else {
            ((&qkv[..], 3 * d, 0), (&qkv[..], 3 * d, d))
        };
        for b in 0..batch {
            for hh in 0..h {
                let view = |src, r0: usize, n: usize| head(src, b * t + r0, hh * hd, n, hd);
                let vv =
                    |r0: usize, n: usize| head((qkv, 3 * d, 2 * d), b * t + r0, hh * hd, n, hd);
                let dctx = |r0: usize, n: usize| head((dmerged, d, 0), b * t + r0, hh * hd, n, hd);
                let pb = &probs[(b * h + hh) * t * t..(b * h + hh + 1) * t * t];
                let p_block = |i0, n_rows, c0, n_cols| square_block(pb, t, i0, n_rows, c0, n_cols);
                // Where dq, dk, dv of this head go: straight into dqkv, or into
                // the [rows, d] buffers that QK-Norm's backward reads.
                let (dq_base, dq_rs) = if qk {
                    (((b * t) * d + hh * hd), d)
                } else {
                    ((b * t) * 3 * d + hh * hd, 3 * d)
                };
                let (dk_base, dk_rs) = if qk {
                    (((b * t) * d + hh * hd), d)
                } else {
                    ((b * t) * 3 * d + d + hh * hd, 3 * d)
                };
                let dv_base = (b * t) * 3 * d + 2 * d + hh * hd;
                for i0 in (0..t).step_by(BLOCK) {
                    let i1 = (i0 + BLOCK).min(t);
                    // dP = dctx v^T ; dV[j-block] = P[j0.., j-block]^T dctx[j0..]
                    gemm(
                        1.0,
                        dctx(i0, i1 - i0),
                        vv(0, i1).t(),
                        0.0,
                        &mut dp[i0 * t..],
                        t,
                    );
                    gemm(
                        1.0,
                        p_block(i0, t - i0, i0, i1 - i0).t(),
                        dctx(i0, t - i0),
                        0.0,
                        &mut dqkv[dv_base + i0 * 3 * d..],
                        3 * d,
                    );
                }
                let ab = &absorbed[self.absorbed_rows(b * h + hh, t)];
                let ds = self.kind.backward(pb, dp, t, ab);
                if let Some(v) = dsinks.get_mut(hh) {
                    *v += ds;
                }
                for i0 in (0..t).step_by(BLOCK) {
                    let i1 = (i0 + BLOCK).min(t);
                    let ds_rows = square_block(dp, t, i0, i1 - i0, 0, i1);
                    let ds_cols = square_block(dp, t, i0, t - i0, i0, i1 - i0);
                    let dq_out: &mut [f32] = if qk {
                        &mut dq[dq_base + i0 * dq_rs..]
                    } else {
                        &mut dqkv[dq_base + i0 * dq_rs..]
                    };
                    gemm(scale, ds_rows, view(ks, 0, i1), 0.0, dq_out, dq_rs);
                    let dk_out: &mut [f32] = if qk {
                        &mut dk[dk_base + i0 * dk_rs..]
                    } else {
                        &mut dqkv[dk_base + i0 * dk_rs..]
                    };
                    gemm(scale, ds_cols.t(), view(qs, i0, t - i0), 0.0, dk_out, dk_rs);
                }
            }
        }
        if let Some(s) = &self.sinks {
            for (g, v) in s.get_mut(grads).iter_mut().zip(&dsinks) {
                *g += *v as f32;
            }
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
            put_columns(&c.dq_raw, d, &mut c.dqkv, 3 * d, 0);
            put_columns(&c.dk_raw, d, &mut c.dqkv, 3 * d, d);
        }
        self.qkv
            .backward(params, grads, a, &c.dqkv, rows, Some(da), false);
        if let Some((_, w)) = &self.gate {
            w.backward(params, grads, a, &c.dz, rows, Some(da), true);
        }
    }
}

/// The `[n_rows, n_cols]` block at (`r0`, `c0`) of a row-major `t x t`
/// matrix (a head's scores or probabilities).
#[inline]
fn square_block(
    m: &[f32],
    t: usize,
    r0: usize,
    n_rows: usize,
    c0: usize,
    n_cols: usize,
) -> Mat<'_> {
    Mat {
        data: &m[r0 * t + c0..],
        rows: n_rows,
        cols: n_cols,
        rs: t,
        cs: 1,
    }
}

/// The `[n, hd]` block of head columns `col..col + hd` starting at `row`, in
/// a buffer `(data, row stride, column offset)`.
#[inline]
fn head(src: (&[f32], usize, usize), row: usize, col: usize, n: usize, hd: usize) -> Mat<'_> {
    let (buf, rs, off) = src;
    Mat {
        data: &buf[row * rs + off + col..],
        rows: n,
        cols: hd,
        rs,
        cs: 1,
    }
}

/// Copy columns `[off, off + n)` of a `[rows, stride]` matrix into `[rows, n]`.
fn copy_columns(src: &[f32], stride: usize, off: usize, n: usize, dst: &mut [f32]) {
    for (row, out) in src.chunks_exact(stride).zip(dst.chunks_exact_mut(n)) {
        out.copy_from_slice(&row[off..off + n]);
    }
}

/// Write a `[rows, n]` matrix into columns `[off, off + n)` of a `[rows, stride]` one.
fn put_columns(src: &[f32], n: usize, dst: &mut [f32], stride: usize, off: usize) {
    for (row, out) in src.chunks_exact(n).zip(dst.chunks_exact_mut(stride)) {
        out[off..off + n].copy_from_slice(row);
    }
}
