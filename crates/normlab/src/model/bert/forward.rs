//! The encoder's forward pass (Post-LN, bidirectional multi-head
//! attention, exact GELU) with any norms (the model's own or converted
//! ones), recording what `inspect.rs` and the conversion read.

use super::{Bert, NormParams, Trace};
use crate::error::Result;
use crate::kernels::act;
use crate::kernels::matmul::{gemm, linear_forward, Mat};
use crate::model::SublayerTrace;

/// Head `hh` of a `[t, heads * hd]` row-major matrix, as a `t x hd` view.
fn head(m: &[f32], hh: usize, t: usize, hd: usize) -> Mat<'_> {
    Mat {
        data: &m[hh * hd..],
        rows: t,
        cols: hd,
        rs: m.len() / t,
        cs: 1,
    }
}

impl Bert {
    /// Last hidden state `[T, d]` of `ids`, using `norms` (the model's own,
    /// or converted ones); fills `trace` when given.
    pub fn forward(
        &self,
        ids: &[u32],
        norms: &[NormParams],
        mut trace: Option<&mut Trace>,
    ) -> Vec<f32> {
        let (d, t) = (self.cfg.hidden_size, ids.len());
        let h = self.cfg.num_attention_heads;
        let hd = d / h;
        let mut x = vec![0.0f32; t * d];
        for (i, &id) in ids.iter().enumerate() {
            let id = (id as usize).min(self.cfg.vocab_size - 1);
            for j in 0..d {
                x[i * d + j] = self.word[id * d + j] + self.pos[i * d + j] + self.types[j];
            }
        }
        let apply_norm = |k: usize, input: &[f32], tr: &mut Option<&mut Trace>| -> Vec<f32> {
            let mut y = vec![0.0; input.len()];
            norms[k].apply(input, &mut y);
            if let Some(tr) = tr.as_deref_mut() {
                tr.norm_in.push(input.to_vec());
                tr.norm_out.push(y.clone());
            }
            y
        };
        x = apply_norm(0, &x, &mut trace);
        let scale = 1.0 / (hd as f32).sqrt();
        for (li, l) in self.layers.iter().enumerate() {
            let lin = |w: &(Vec<f32>, Vec<f32>), inp: &[f32], din: usize, dout: usize| {
                let mut y = vec![0.0; t * dout];
                linear_forward(inp, &w.0, Some(&w.1), t, din, dout, &mut y);
                y
            };
            let (q, k, v) = (
                lin(&l.q, &x, d, d),
                lin(&l.k, &x, d, d),
                lin(&l.v, &x, d, d),
            );
            // Per head: scores = scale * Q_h K_h^T, softmax by row, ctx_h = P V_h
            // (strided views into q, k, v and ctx; no copies).
            let mut ctx = vec![0.0f32; t * d];
            let mut scores = vec![0.0f32; t * t];
            for hh in 0..h {
                gemm(
                    scale,
                    head(&q, hh, t, hd),
                    head(&k, hh, t, hd).t(),
                    0.0,
                    &mut scores,
                    t,
                );
                for row in scores.chunks_exact_mut(t) {
                    act::softmax_row(row);
                }
                gemm(
                    1.0,
                    Mat::rows(&scores, t, t),
                    head(&v, hh, t, hd),
                    0.0,
                    &mut ctx[hh * hd..],
                    d,
                );
            }
            let attn = lin(&l.o, &ctx, d, d);
            if let Some(tr) = trace.as_deref_mut() {
                tr.stream_in.push(x.clone());
                tr.writes.push(attn.clone());
            }
            let sum: Vec<f32> = x.iter().zip(&attn).map(|(a, b)| a + b).collect();
            let y = apply_norm(1 + 2 * li, &sum, &mut trace);
            record(&mut trace, li, 0, &x, &y);
            x = y;
            let pre = lin(&l.fc, &x, d, self.cfg.intermediate_size);
            let mut g = vec![0.0; pre.len()];
            act::gelu_erf_forward(&pre, &mut g);
            let out = lin(&l.out, &g, self.cfg.intermediate_size, d);
            if let Some(tr) = trace.as_deref_mut() {
                tr.stream_in.push(x.clone());
                tr.writes.push(out.clone());
            }
            let sum: Vec<f32> = x.iter().zip(&out).map(|(a, b)| a + b).collect();
            let y = apply_norm(2 + 2 * li, &sum, &mut trace);
            record(&mut trace, li, 1, &x, &y);
            x = y;
        }
        x
    }

    /// Sentence embedding: mean of the last hidden state over tokens, L2-normalised.
    pub fn embed_ids(&self, ids: &[u32], norms: &[NormParams]) -> Vec<f32> {
        let d = self.cfg.hidden_size;
        let hs = self.forward(ids, norms, None);
        let mut e = vec![0f64; d];
        for row in hs.chunks_exact(d) {
            for (a, &b) in e.iter_mut().zip(row) {
                *a += b as f64;
            }
        }
        let n = e.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
        e.iter().map(|v| (v / n) as f32).collect()
    }

    /// Sentence embedding of `text` with the model's own norms.
    pub fn embed(&self, text: &str) -> Result<Vec<f32>> {
        Ok(self.embed_ids(&self.encode(text)?, &self.norms))
    }
}

/// A Post-LN sublayer's trace: the write is the change across it.
fn record(trace: &mut Option<&mut Trace>, block: usize, sub: usize, before: &[f32], after: &[f32]) {
    if let Some(tr) = trace.as_deref_mut() {
        let change: Vec<f32> = after.iter().zip(before).map(|(a, b)| a - b).collect();
        tr.sublayers
            .push(SublayerTrace::of(block, sub, before, &change, after));
    }
}
