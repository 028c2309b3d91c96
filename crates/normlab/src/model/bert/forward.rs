//! The encoder's forward pass (Post-LN, bidirectional multi-head
//! attention, exact GELU) with any norms (the model's own or converted
//! ones), handing its tensors to an observer at the hook points of
//! `model/hooks.rs`; the [`Trace`] that `inspect.rs` and the conversion
//! read is one.

use super::{Bert, NormParams, Trace};
use crate::error::Result;
use crate::kernels::act;
use crate::kernels::matmul::{gemm, linear_forward, Mat};
use crate::model::hooks::{NoObserver, Observer, Pass};
use crate::model::SublayerTrace;
use crate::nn::NormRole;

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
    /// or converted ones); `obs` receives the pass's tensors at its hook
    /// points ([`NoObserver`]: none).
    pub fn forward<O: Observer + ?Sized>(
        &self,
        ids: &[u32],
        norms: &[NormParams],
        obs: &mut O,
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
        let observed = obs.active();
        if observed {
            obs.begin(Pass {
                past: 0,
                tokens: t,
                d,
                blocks: self.layers.len(),
                heads: h,
            });
            obs.embedded(&x);
        }
        // Norm k (0: the embeddings', then two per block) over `input`.
        let apply_norm = |k: usize, input: &[f32], obs: &mut O| -> Vec<f32> {
            let (block, role) = match k {
                0 => (0, NormRole::Embedding),
                k => ((k - 1) / 2, NormRole::Post),
            };
            if observed {
                obs.norm_input(block, role, input, d);
            }
            let mut y = vec![0.0; input.len()];
            norms[k].apply(input, &mut y);
            if observed {
                obs.norm_output(block, role, &y, d);
            }
            y
        };
        x = apply_norm(0, &x, obs);
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
            if observed {
                obs.sublayer_in(li, 0, &x);
                obs.write(li, 0, &attn);
            }
            let sum: Vec<f32> = x.iter().zip(&attn).map(|(a, b)| a + b).collect();
            let y = apply_norm(1 + 2 * li, &sum, obs);
            if observed {
                obs.sublayer_out(li, 0, &y);
            }
            x = y;
            let pre = lin(&l.fc, &x, d, self.cfg.intermediate_size);
            let mut g = vec![0.0; pre.len()];
            act::gelu_erf_forward(&pre, &mut g);
            let out = lin(&l.out, &g, self.cfg.intermediate_size, d);
            if observed {
                obs.sublayer_in(li, 1, &x);
                obs.mlp_hidden(li, &g);
                obs.write(li, 1, &out);
            }
            let sum: Vec<f32> = x.iter().zip(&out).map(|(a, b)| a + b).collect();
            let y = apply_norm(2 + 2 * li, &sum, obs);
            if observed {
                obs.sublayer_out(li, 1, &y);
            }
            x = y;
        }
        if observed {
            obs.final_stream(&x);
        }
        x
    }

    /// Sentence embedding: mean of the last hidden state over tokens, L2-normalised.
    pub fn embed_ids(&self, ids: &[u32], norms: &[NormParams]) -> Vec<f32> {
        let d = self.cfg.hidden_size;
        let hs = self.forward(ids, norms, &mut NoObserver);
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

/// The trace is an observer: each norm's input and output, each
/// sublayer's stream and write, and per sublayer the stream before, the
/// change across it (a Post-LN sublayer's write is not added as is) and the
/// stream after.
impl Observer for Trace {
    fn norm_input(&mut self, _block: usize, _role: NormRole, x: &[f32], _width: usize) {
        self.norm_in.push(x.to_vec());
    }

    fn norm_output(&mut self, _block: usize, _role: NormRole, y: &[f32], _width: usize) {
        self.norm_out.push(y.to_vec());
    }

    fn sublayer_in(&mut self, _block: usize, _sub: usize, x: &[f32]) {
        self.stream_in.push(x.to_vec());
    }

    fn write(&mut self, _block: usize, _sub: usize, w: &[f32]) {
        self.writes.push(w.to_vec());
    }

    fn sublayer_out(&mut self, block: usize, sub: usize, after: &[f32]) {
        let before = self.stream_in.last().expect("sublayer_in came first");
        let change: Vec<f32> = after.iter().zip(before).map(|(a, b)| a - b).collect();
        self.sublayers
            .push(SublayerTrace::of(block, sub, before, &change, after));
    }
}
