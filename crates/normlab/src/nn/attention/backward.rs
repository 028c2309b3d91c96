//! The attention's backward (the maths is in `mod.rs`).

use super::{head, put_columns, square_block, Attention, AttentionCache, BLOCK};
use crate::kernels::matmul::gemm;
use crate::nn::rope::apply_rope_inverse;

impl Attention {
    /// The gate's backward on the proj's input gradient `dmerged`: dL/dz
    /// into `dz`, and `dmerged` times the gates (the context's gradient).
    fn gate_backward(&self, c: &mut AttentionCache) {
        let Some((_, w)) = &self.gate else {
            return;
        };
        let (qw, gw) = (self.q_width(), w.d_out);
        let per = qw / gw;
        let rows = c
            .merged
            .chunks_exact(qw)
            .zip(c.dmerged.chunks_exact_mut(qw));
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

    /// dL/d(raw score) from dL/d(capped score) in `dp` (the soft-cap's
    /// derivative 1 - (S / cap)^2 on the seen entries).
    fn softcap_backward(&self, dp: &mut [f32], capped: &[f32], t: usize) {
        let Some(cap) = self.softcap else {
            return;
        };
        for (i, (dr, sr)) in dp
            .chunks_exact_mut(t)
            .zip(capped.chunks_exact(t))
            .enumerate()
        {
            for (g, &s) in dr[..=i].iter_mut().zip(&sr[..=i]) {
                let u = s / cap;
                *g *= 1.0 - u * u;
            }
        }
    }

    /// From dL/d(q, k as the scores read them) in `dq`, `dk`: RoPE's
    /// inverse, QK-Norm's backward, into the fused gradient `dqkv`.
    fn queries_keys_backward(&self, params: &[f32], grads: &mut [f32], c: &mut AttentionCache) {
        if !self.separate_qk() {
            return;
        }
        let (w, qw, kvw, t) = (self.qkv_width(), self.q_width(), self.kv_width(), c.t);
        if let Some(r) = self.rope {
            let rot = (self.hd, self.rot());
            for (x, heads, width) in [(&mut c.dq, self.heads, qw), (&mut c.dk, self.kv_heads, kvw)]
            {
                for seq in x.chunks_exact_mut(t * width) {
                    apply_rope_inverse(seq, t, heads, rot, &c.cos, &c.sin, r.pairs);
                }
            }
        }
        match &self.qk_norm {
            Some((qn, kn)) => {
                let qc = c.q_cache.as_mut().unwrap();
                qn.backward(params, grads, &c.q_raw, &c.dq, &mut c.dq_raw, qc);
                let kc = c.k_cache.as_mut().unwrap();
                kn.backward(params, grads, &c.k_raw, &c.dk, &mut c.dk_raw, kc);
                put_columns(&c.dq_raw, qw, &mut c.dqkv, w, 0);
                put_columns(&c.dk_raw, kvw, &mut c.dqkv, w, qw);
            }
            None => {
                put_columns(&c.dq, qw, &mut c.dqkv, w, 0);
                put_columns(&c.dk, kvw, &mut c.dqkv, w, qw);
            }
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
        let (h, hd, t, batch) = (self.heads, self.hd, c.t, c.batch);
        let (w, qw, kvw) = (self.qkv_width(), self.q_width(), self.kv_width());
        let group = h / self.kv_heads;
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
        let sep = self.separate_qk();
        let AttentionCache {
            qkv,
            q,
            k,
            scores,
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
        let (qs, ks) = if sep {
            ((&q[..], qw, 0), (&k[..], kvw, 0))
        } else {
            ((&qkv[..], w, 0), (&qkv[..], w, qw))
        };
        for b in 0..batch {
            for hh in 0..h {
                let kh = hh / group;
                // The heads of a group share k and v: the first writes their
                // gradients, the others add to them.
                let beta = if hh % group == 0 { 0.0 } else { 1.0 };
                let qv = |r0: usize, n: usize| head(qs, b * t + r0, hh * hd, n, hd);
                let kv = |n: usize| head(ks, b * t, kh * hd, n, hd);
                let vv = |n: usize| head((qkv, w, qw + kvw), b * t, kh * hd, n, hd);
                let dctx = |r0: usize, n: usize| head((dmerged, qw, 0), b * t + r0, hh * hd, n, hd);
                let bh = (b * h + hh) * t * t..(b * h + hh + 1) * t * t;
                let pb = &probs[bh.clone()];
                let p_block = |i0, n_rows, c0, n_cols| square_block(pb, t, i0, n_rows, c0, n_cols);
                // Where dq and dk of this head go: straight into dqkv, or
                // into the copies' buffers that RoPE and QK-Norm read back.
                let (dq_base, dq_rs) = if sep {
                    ((b * t) * qw + hh * hd, qw)
                } else {
                    ((b * t) * w + hh * hd, w)
                };
                let (dk_base, dk_rs) = if sep {
                    ((b * t) * kvw + kh * hd, kvw)
                } else {
                    ((b * t) * w + qw + kh * hd, w)
                };
                let dv_base = (b * t) * w + qw + kvw + kh * hd;
                for i0 in (0..t).step_by(BLOCK) {
                    let i1 = (i0 + BLOCK).min(t);
                    // dP = dctx v^T ; dV[j-block] = P[j0.., j-block]^T dctx[j0..]
                    gemm(
                        1.0,
                        dctx(i0, i1 - i0),
                        vv(i1).t(),
                        0.0,
                        &mut dp[i0 * t..],
                        t,
                    );
                    gemm(
                        1.0,
                        p_block(i0, t - i0, i0, i1 - i0).t(),
                        dctx(i0, t - i0),
                        beta,
                        &mut dqkv[dv_base + i0 * w..],
                        w,
                    );
                }
                let ab = &absorbed[self.absorbed_rows(b * h + hh, t)];
                let ds = self.kind.backward(pb, dp, t, ab);
                if let Some(v) = dsinks.get_mut(hh) {
                    *v += ds;
                }
                if self.softcap.is_some() {
                    self.softcap_backward(dp, &scores[bh], t);
                }
                for i0 in (0..t).step_by(BLOCK) {
                    let i1 = (i0 + BLOCK).min(t);
                    let ds_rows = square_block(dp, t, i0, i1 - i0, 0, i1);
                    let ds_cols = square_block(dp, t, i0, t - i0, i0, i1 - i0);
                    let dq_out: &mut [f32] = if sep {
                        &mut dq[dq_base + i0 * dq_rs..]
                    } else {
                        &mut dqkv[dq_base + i0 * dq_rs..]
                    };
                    gemm(self.scale, ds_rows, kv(i1), 0.0, dq_out, dq_rs);
                    let dk_out: &mut [f32] = if sep {
                        &mut dk[dk_base + i0 * dk_rs..]
                    } else {
                        &mut dqkv[dk_base + i0 * dk_rs..]
                    };
                    gemm(self.scale, ds_cols.t(), qv(i0, t - i0), beta, dk_out, dk_rs);
                }
            }
        }
        if let Some(s) = &self.sinks {
            for (g, v) in s.get_mut(grads).iter_mut().zip(&dsinks) {
                *g += *v as f32;
            }
        }
        self.queries_keys_backward(params, grads, c);
        self.qkv
            .backward(params, grads, a, &c.dqkv, rows, Some(da), false);
        if let Some((_, w)) = &self.gate {
            w.backward(params, grads, a, &c.dz, rows, Some(da), true);
        }
    }
}
