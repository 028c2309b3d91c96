//! The attention's forward (the maths is in `mod.rs`).

use super::{copy_columns, head, square_block, Attention, AttentionCache, BLOCK};
use crate::kernels::matmul::gemm;
use crate::nn::rope::apply_rope;

impl Attention {
    /// q and k as the scores read them: QK-Norm'd and rotated copies (when
    /// the attention has either), from the fused projection.
    fn queries_keys(&self, params: &[f32], c: &mut AttentionCache) {
        if !self.separate_qk() {
            return;
        }
        let (w, qw, kvw, t) = (self.qkv_width(), self.q_width(), self.kv_width(), c.t);
        match &self.qk_norm {
            Some((qn, kn)) => {
                copy_columns(&c.qkv, w, 0, qw, &mut c.q_raw);
                copy_columns(&c.qkv, w, qw, kvw, &mut c.k_raw);
                qn.forward(params, &c.q_raw, &mut c.q, c.q_cache.as_mut().unwrap());
                kn.forward(params, &c.k_raw, &mut c.k, c.k_cache.as_mut().unwrap());
            }
            None => {
                copy_columns(&c.qkv, w, 0, qw, &mut c.q);
                copy_columns(&c.qkv, w, qw, kvw, &mut c.k);
            }
        }
        if let Some(r) = self.rope {
            let rot = (self.hd, self.rot());
            for (x, heads, width) in [(&mut c.q, self.heads, qw), (&mut c.k, self.kv_heads, kvw)] {
                for seq in x.chunks_exact_mut(t * width) {
                    apply_rope(seq, t, heads, rot, &c.cos, &c.sin, r.pairs);
                }
            }
        }
    }

    /// One head's raw scores `pb` (`t x t`, causal), capped and windowed as
    /// the attention says; the capped scores kept for the backward.
    fn head_scores(&self, pb: &mut [f32], t: usize, capped: &mut [f32]) {
        if let Some(cap) = self.softcap {
            for (i, row) in pb.chunks_exact_mut(t).enumerate() {
                row[..=i]
                    .iter_mut()
                    .for_each(|s| *s = cap * (*s / cap).tanh());
            }
            capped.copy_from_slice(pb);
        }
        if let Some(w) = self.window {
            for (i, row) in pb.chunks_exact_mut(t).enumerate() {
                let from = (i + 1).saturating_sub(w);
                row[..from].fill(f32::NEG_INFINITY);
            }
        }
    }

    /// `out = Attention(a)`; `a` is `[batch * t, d]`.
    pub fn forward(&self, params: &[f32], a: &[f32], out: &mut [f32], c: &mut AttentionCache) {
        let (h, hd, t, batch) = (self.heads, self.hd, c.t, c.batch);
        let (w, qw, kvw) = (self.qkv_width(), self.q_width(), self.kv_width());
        let group = h / self.kv_heads;
        let rows = batch * t;
        self.qkv.forward(params, a, rows, &mut c.qkv);
        self.queries_keys(params, c);
        // (buffer, row stride, column offset) of q and k.
        let (qs, ks) = if self.separate_qk() {
            ((&c.q[..], qw, 0), (&c.k[..], kvw, 0))
        } else {
            ((&c.qkv[..], w, 0), (&c.qkv[..], w, qw))
        };
        let capped = self.softcap.is_some();
        let mut max_logit = f32::NEG_INFINITY;
        for b in 0..batch {
            for hh in 0..h {
                let kh = hh / group;
                let qv = |r0: usize, n: usize| head(qs, b * t + r0, hh * hd, n, hd);
                let kv = |n: usize| head(ks, b * t, kh * hd, n, hd);
                let vv = |n: usize| head((&c.qkv, w, qw + kvw), b * t, kh * hd, n, hd);
                let bh = (b * h + hh) * t * t..(b * h + hh + 1) * t * t;
                let pb = &mut c.probs[bh.clone()];
                for i0 in (0..t).step_by(BLOCK) {
                    let i1 = (i0 + BLOCK).min(t);
                    gemm(
                        self.scale,
                        qv(i0, i1 - i0),
                        kv(i1).t(),
                        0.0,
                        &mut pb[i0 * t..],
                        t,
                    );
                }
                if capped || self.window.is_some() {
                    let sc = if capped {
                        &mut c.scores[bh]
                    } else {
                        &mut [][..]
                    };
                    self.head_scores(pb, t, sc);
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
                        vv(i1),
                        0.0,
                        &mut c.merged[(b * t + i0) * qw + hh * hd..],
                        qw,
                    );
                }
            }
        }
        c.max_logit = max_logit;
        match &self.gate {
            None => self.proj.forward(params, &c.merged, rows, out),
            Some((_, gw)) => {
                gw.forward(params, a, rows, &mut c.g);
                c.g.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-*v).exp()));
                let (n, per) = (gw.d_out, qw / gw.d_out);
                for ((o, x), g) in c
                    .gated
                    .chunks_exact_mut(qw)
                    .zip(c.merged.chunks_exact(qw))
                    .zip(c.g.chunks_exact(n))
                {
                    for (j, (o, &x)) in o.iter_mut().zip(x).enumerate() {
                        *o = g[j / per] * x;
                    }
                }
                self.proj.forward(params, &c.gated, rows, out);
            }
        }
    }
}
