//! Token embedding plus learned positions: `x[b, t] = wte[tok[b, t]] + wpe[t]`.

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
        }
    }

    /// `x[rows, d]` for `tokens` laid out `[batch, t_len]` (t_len <= seq).
    pub fn forward(&self, params: &[f32], tokens: &[u32], t_len: usize, x: &mut [f32]) {
        let (wte, wpe, d) = (self.wte.get(params), self.wpe.get(params), self.d);
        for (i, (&tok, xr)) in tokens.iter().zip(x.chunks_exact_mut(d)).enumerate() {
            let tok = tok as usize;
            assert!(
                tok < self.vocab,
                "token {tok} out of vocabulary {}",
                self.vocab
            );
            let t = i % t_len;
            let (e, p) = (&wte[tok * d..(tok + 1) * d], &wpe[t * d..(t + 1) * d]);
            for j in 0..d {
                xr[j] = e[j] + p[j];
            }
        }
    }

    /// Scatter-add `dx` into the table gradients (rows in order: deterministic).
    pub fn backward(&self, grads: &mut [f32], tokens: &[u32], t_len: usize, dx: &[f32]) {
        let d = self.d;
        for (i, (&tok, dr)) in tokens.iter().zip(dx.chunks_exact(d)).enumerate() {
            let tok = tok as usize;
            let t = i % t_len;
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
}
