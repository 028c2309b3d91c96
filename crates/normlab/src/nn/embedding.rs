//! Token embedding plus learned positions: `x[b, t] = wte[tok[b, t]] + wpe[t]`,
//! optionally times one learnable scalar `s` (init sqrt(d): the DyT paper's
//! LLaMA recipe, where no norm lifts small-init embeddings to unit scale).

use crate::params::{Init, ParamKind, ParamLayout, ParamRef};

/// Token and position tables.
#[derive(Clone, Debug)]
pub struct Embedding {
    /// Vocabulary size.
    pub vocab: usize,
    /// Maximum sequence length.
    pub seq: usize,
    /// Width.
    pub d: usize,
    /// `transformer.wte.weight` `[vocab, d]`.
    pub wte: ParamRef,
    /// `transformer.wpe.weight` `[seq, d]`.
    pub wpe: ParamRef,
    /// `transformer.emb_scale` `[1]`, if the embeddings are scaled.
    pub scale: Option<ParamRef>,
}

impl Embedding {
    /// Register both tables, N(0, std^2).
    pub fn new(
        layout: &mut ParamLayout,
        vocab: usize,
        seq: usize,
        d: usize,
        std: f32,
    ) -> Embedding {
        let wte = layout.add(
            "transformer.wte.weight",
            &[vocab, d],
            ParamKind::Embedding,
            None,
            Init::Normal(std),
        );
        let wpe = layout.add(
            "transformer.wpe.weight",
            &[seq, d],
            ParamKind::Embedding,
            None,
            Init::Normal(std),
        );
        Embedding {
            vocab,
            seq,
            d,
            wte,
            wpe,
            scale: None,
        }
    }

    /// Add the learnable scalar on the output, initialised to sqrt(d).
    pub fn with_scale(mut self, layout: &mut ParamLayout) -> Embedding {
        self.scale = Some(layout.add(
            "transformer.emb_scale",
            &[1],
            ParamKind::Gate,
            None,
            Init::Const((self.d as f32).sqrt()),
        ));
        self
    }

    /// The output scale (1 without one).
    fn s(&self, params: &[f32]) -> f32 {
        self.scale.as_ref().map_or(1.0, |r| r.get(params)[0])
    }

    /// `x[rows, d]` for `tokens` laid out `[batch, t_len]` (t_len <= seq).
    pub fn forward(&self, params: &[f32], tokens: &[u32], t_len: usize, x: &mut [f32]) {
        let (wte, wpe, d) = (self.wte.get(params), self.wpe.get(params), self.d);
        let s = self.s(params);
        for (i, (&tok, xr)) in tokens.iter().zip(x.chunks_exact_mut(d)).enumerate() {
            let tok = tok as usize;
            assert!(
                tok < self.vocab,
                "token {tok} out of vocabulary {}",
                self.vocab
            );
            let t = i % t_len;
            let (e, p) = (&wte[tok * d..(tok + 1) * d], &wpe[t * d..(t + 1) * d]);
            if self.scale.is_some() {
                for j in 0..d {
                    xr[j] = s * (e[j] + p[j]);
                }
            } else {
                for j in 0..d {
                    xr[j] = e[j] + p[j];
                }
            }
        }
    }

    /// Scatter-add `dx` into the table gradients (rows in order: deterministic);
    /// with a scale, `s * dx` into the tables and `sum(dx * (e + p))` into
    /// the scale's gradient.
    pub fn backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        tokens: &[u32],
        t_len: usize,
        dx: &[f32],
    ) {
        let d = self.d;
        if let Some(sr) = &self.scale {
            let (wte, wpe, s) = (self.wte.get(params), self.wpe.get(params), self.s(params));
            let mut ds = 0f64;
            let mut scaled = vec![0f32; d];
            for (i, (&tok, dr)) in tokens.iter().zip(dx.chunks_exact(d)).enumerate() {
                let (tok, t) = (tok as usize, i % t_len);
                let (e, p) = (&wte[tok * d..(tok + 1) * d], &wpe[t * d..(t + 1) * d]);
                for j in 0..d {
                    ds += f64::from(dr[j] * (e[j] + p[j]));
                    scaled[j] = s * dr[j];
                }
                self.scatter(grads, tok, t, &scaled);
            }
            sr.get_mut(grads)[0] += ds as f32;
            return;
        }
        for (i, (&tok, dr)) in tokens.iter().zip(dx.chunks_exact(d)).enumerate() {
            self.scatter(grads, tok as usize, i % t_len, dr);
        }
    }

    /// Add `dr` to the gradient rows of token `tok` and position `t`.
    fn scatter(&self, grads: &mut [f32], tok: usize, t: usize, dr: &[f32]) {
        let d = self.d;
        let g = &mut grads[self.wte.0.start + tok * d..self.wte.0.start + (tok + 1) * d];
        for j in 0..d {
            g[j] += dr[j];
        }
        let g = &mut grads[self.wpe.0.start + t * d..self.wpe.0.start + (t + 1) * d];
        for j in 0..d {
            g[j] += dr[j];
        }
    }
}
