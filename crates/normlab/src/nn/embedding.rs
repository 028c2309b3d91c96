//! Token embedding plus learned positions: `x[b, t] = wte[tok[b, t]] + wpe[t]`
//! (no position table for a model with RoPE), optionally times one
//! learnable scalar `s` (init sqrt(d): the DyT paper's LLaMA recipe, where
//! no norm lifts small-init embeddings to unit scale) and a constant
//! multiplier (Gemma's sqrt(d)).

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
    /// `transformer.wpe.weight` `[seq, d]` (None with RoPE).
    pub wpe: Option<ParamRef>,
    /// `transformer.emb_scale` `[1]`, if the embeddings are scaled.
    pub scale: Option<ParamRef>,
    /// A constant multiplier (1: none).
    pub mult: f32,
}

impl Embedding {
    /// Register the token table and, with `positions`, the position
    /// table, N(0, std^2).
    pub fn new(
        layout: &mut ParamLayout,
        (vocab, seq, d): (usize, usize, usize),
        std: f32,
        positions: bool,
    ) -> Embedding {
        let wte = layout.add(
            "transformer.wte.weight",
            &[vocab, d],
            ParamKind::Embedding,
            None,
            Init::Normal(std),
        );
        let wpe = positions.then(|| {
            layout.add(
                "transformer.wpe.weight",
                &[seq, d],
                ParamKind::Embedding,
                None,
                Init::Normal(std),
            )
        });
        Embedding {
            vocab,
            seq,
            d,
            wte,
            wpe,
            scale: None,
            mult: 1.0,
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

    /// Position `t`'s row (None without a position table).
    fn pos<'a>(&self, params: &'a [f32], t: usize) -> Option<&'a [f32]> {
        let d = self.d;
        self.wpe
            .as_ref()
            .map(|w| &w.get(params)[t * d..(t + 1) * d])
    }

    /// `x[rows, d]` for `tokens` laid out `[batch, t_len]` (t_len <= seq).
    pub fn forward(&self, params: &[f32], tokens: &[u32], t_len: usize, x: &mut [f32]) {
        let (wte, d) = (self.wte.get(params), self.d);
        let s = self.s(params);
        for (i, (&tok, xr)) in tokens.iter().zip(x.chunks_exact_mut(d)).enumerate() {
            let tok = tok as usize;
            assert!(
                tok < self.vocab,
                "token {tok} out of vocabulary {}",
                self.vocab
            );
            let e = &wte[tok * d..(tok + 1) * d];
            match self.pos(params, i % t_len) {
                Some(p) => {
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
                None => {
                    xr.copy_from_slice(e);
                    if self.scale.is_some() {
                        xr.iter_mut().for_each(|v| *v *= s);
                    }
                }
            }
            if self.mult != 1.0 {
                xr.iter_mut().for_each(|v| *v *= self.mult);
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
        // The constant multiplier's share first: dL/d(before it).
        let owned: Vec<f32>;
        let dx: &[f32] = if self.mult != 1.0 {
            owned = dx.iter().map(|v| v * self.mult).collect();
            &owned
        } else {
            dx
        };
        if let Some(sr) = &self.scale {
            let (wte, s) = (self.wte.get(params), self.s(params));
            let mut ds = 0f64;
            let mut scaled = vec![0f32; d];
            for (i, (&tok, dr)) in tokens.iter().zip(dx.chunks_exact(d)).enumerate() {
                let (tok, t) = (tok as usize, i % t_len);
                let e = &wte[tok * d..(tok + 1) * d];
                let p = self.pos(params, t);
                for j in 0..d {
                    ds += f64::from(dr[j] * (e[j] + p.map_or(0.0, |p| p[j])));
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
        if let Some(w) = &self.wpe {
            let g = &mut grads[w.0.start + t * d..w.0.start + (t + 1) * d];
            for j in 0..d {
                g[j] += dr[j];
            }
        }
    }
}
