//! The decoder's forward pass over new tokens, with a key/value cache: a
//! prompt is processed in one pass (all its positions at once, through the
//! matmul kernel), and generation then feeds one token at a time, attending
//! to the cached keys and values of every earlier position (within the
//! layer's window) instead of recomputing the whole sequence. Pre,
//! sandwich or output norms, QK-Norm, RoPE in either pairing with the
//! layer's base (on all or the first dimensions of each head) or learned
//! positions, grouped-query attention, a gated or plain MLP, biases, and a
//! sequential or parallel block. The pass hands its tensors to
//! an [`Observer`] at named hook points (`model/hooks.rs`); it computes
//! nothing for inspection itself (`trace.rs` does, as an observer).

use super::heads::{apply_rope, head_view, rope_table};
use super::{Decoder, GatedAct};
use crate::error::Result;
use crate::kernels::act;
use crate::kernels::matmul::{gemm, Mat};
use crate::kernels::norm::{self, NormKind};
use crate::model::hooks::{AttentionPattern, Observer, Pass, QkGeometry};
use crate::nn::NormRole;
use rayon::prelude::*;

/// Keys (RoPE applied) and values of every position seen so far, per block.
#[derive(Clone, Debug, Default)]
pub struct KvCache {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    len: usize,
}

impl KvCache {
    /// An empty cache for `model`.
    pub fn new(model: &Decoder) -> KvCache {
        KvCache {
            k: vec![Vec::new(); model.layers.len()],
            v: vec![Vec::new(); model.layers.len()],
            len: 0,
        }
    }

    /// Positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// DeepSeek V4's clamp (transformers' `DeepseekV4MLP`) on a gated
/// feed-forward's projections: the gate to at most `lim`, the up to
/// [-lim, lim]; a NaN stays NaN.
pub fn clamp_gate_up(gate: &mut [f32], up: &mut [f32], lim: f32) {
    gate.iter_mut().filter(|g| **g > lim).for_each(|g| *g = lim);
    up.iter_mut().for_each(|u| *u = u.clamp(-lim, lim));
}

impl Decoder {
    /// Hidden states `[t, d]` (before the final norm) of `ids`, the tokens
    /// at positions `cache.len() ..` after those already in `cache`, which
    /// gains their keys and values; every block norm applied as `kind`
    /// (QK-Norm stays the model's). `obs` receives the pass's tensors at
    /// its hook points ([`NoObserver`](crate::model::hooks::NoObserver):
    /// none).
    pub fn forward<O: Observer + ?Sized>(
        &self,
        ids: &[u32],
        kind: NormKind,
        cache: &mut KvCache,
        obs: &mut O,
    ) -> Result<Vec<f32>> {
        let c = &self.cfg;
        let (d, t, hd) = (c.d, ids.len(), c.head_dim);
        let (past, qw, kvw) = (cache.len, c.q_width(), c.kv_width());
        let total = past + t;
        if t == 0 {
            return Err("no tokens".to_string().into());
        }
        if total > c.context {
            return Err(format!("{total} tokens exceed the context of {}", c.context).into());
        }
        if cache.k.len() != self.layers.len() {
            return Err("the key/value cache belongs to another model"
                .to_string()
                .into());
        }
        let observed = obs.active();
        if observed {
            obs.begin(Pass {
                past,
                tokens: t,
                d,
                blocks: self.layers.len(),
                heads: c.heads,
            });
        }
        let mut h = vec![0f32; t * d];
        for (r, &id) in ids.iter().enumerate() {
            let id = id as usize;
            if id >= c.vocab {
                return Err(
                    format!("token id {id} is outside the vocabulary ({})", c.vocab).into(),
                );
            }
            self.emb.row_into(id, &mut h[r * d..(r + 1) * d]);
        }
        if let Some(pos) = &self.pos {
            let mut row = vec![0f32; d];
            for (r, hr) in h.chunks_exact_mut(d).enumerate() {
                pos.row_into(past + r, &mut row);
                hr.iter_mut().zip(&row).for_each(|(x, p)| *x += p);
            }
        }
        if c.emb_scale != 1.0 {
            h.iter_mut().for_each(|v| *v *= c.emb_scale);
        }
        if observed {
            obs.embedded(&h);
        }
        // One RoPE table per distinct base, over the rotated dimensions.
        let rot = c.rotary_dims();
        let mut tables: Vec<(f64, Vec<f32>, Vec<f32>)> = Vec::new();
        for a in &c.attn {
            if !tables.iter().any(|(b, _, _)| *b == a.rope_base) {
                let (cos, sin) = rope_table(past, t, rot, a.rope_base, c.rope_scaling);
                tables.push((a.rope_base, cos, sin));
            }
        }
        let mut a = vec![0f32; t * d];
        let mut stats = vec![0f32; norm::stats_len(t * c.heads.max(1))];
        let (mut q, mut k, mut v) = (vec![0f32; t * qw], vec![0f32; t * kvw], vec![0f32; t * kvw]);
        let mut qk_tmp = vec![0f32; t * qw];
        let mut att = vec![0f32; t * qw];
        let mut o = vec![0f32; t * d];
        // The MLP's hidden layer, and a gated MLP's up projection.
        let up_len = if c.gpt.plain_mlp { 0 } else { t * c.ffn };
        let (mut gb, mut ub) = (vec![0f32; t * c.ffn], vec![0f32; up_len]);
        let gelu_len = if c.act != GatedAct::Silu {
            t * c.ffn
        } else {
            0
        };
        // A parallel block's input, which its MLP reads.
        let mut block_in = vec![0f32; if c.gpt.parallel { t * d } else { 0 }];
        let (mut gelu, mut slope) = (vec![0f32; gelu_len], vec![0f32; gelu_len]);
        let scale = c.attn_scale;
        let group = c.heads / c.kv_heads;
        let keep_probs = observed && obs.wants_attention();
        for (l, layer) in self.layers.iter().enumerate() {
            let la = c.attn[l];
            let (_, cos, sin) = tables
                .iter()
                .find(|(b, _, _)| *b == la.rope_base)
                .expect("a table per base");
            let rotate = |x: &mut [f32], heads: usize| {
                apply_rope(x, t, heads, (hd, rot), cos, sin, c.rope_pairs)
            };
            // The attention sublayer.
            if observed {
                obs.sublayer_in(l, 0, &h);
            }
            if c.gpt.parallel {
                block_in.copy_from_slice(&h);
            }
            self.input_norm(
                kind,
                &h,
                (layer.attn_norm.as_deref(), layer.bias.attn_norm.as_deref()),
                &mut a,
                &mut stats,
                l,
                obs,
            );
            self.apply(&layer.wq, &a, t, &mut q);
            self.apply(&layer.wk, &a, t, &mut k);
            self.apply(&layer.wv, &a, t, &mut v);
            if let Some((bq, bk, bv)) = &layer.qkv_bias {
                for (x, b) in [(&mut q, bq), (&mut k, bk), (&mut v, bv)] {
                    crate::kernels::matmul::add_bias_rows(x, b);
                }
            }
            if let Some((gq, gk)) = &layer.qk_norm {
                if observed {
                    let geom = QkGeometry {
                        tokens: t,
                        heads: c.heads,
                        kv_heads: c.kv_heads,
                        head_dim: hd,
                        scale,
                        window: la.window,
                        rotate: &rotate,
                    };
                    obs.queries_keys(l, &q, &k, &geom);
                }
                for (x, g) in [(&mut q, gq), (&mut k, gk)] {
                    if observed {
                        obs.norm_input(l, NormRole::QkNorm, x, g.len());
                    }
                    let n = x.len();
                    self.apply_norm(
                        NormKind::RmsNorm,
                        x,
                        (g, None),
                        &mut qk_tmp[..n],
                        &mut stats,
                    );
                    x.copy_from_slice(&qk_tmp[..n]);
                    if observed {
                        obs.norm_output(l, NormRole::QkNorm, x, g.len());
                    }
                }
            }
            rotate(&mut q, c.heads);
            rotate(&mut k, c.kv_heads);
            cache.k[l].extend_from_slice(&k);
            cache.v[l].extend_from_slice(&v);
            let (kc, vc) = (&cache.k[l], &cache.v[l]);
            // Each head on its own (in parallel): its output [t, hd] and its
            // largest logit (and its probabilities, when observed); then
            // scattered into att.
            let heads: Vec<(Vec<f32>, f64, Vec<f32>)> = (0..c.heads)
                .into_par_iter()
                .map(|head| {
                    let kh = head / group;
                    // Scores Q_h K_h^T (t x total; each row's causal tail
                    // and what lies before its window are masked below),
                    // then P V_h, both through the matmul kernel.
                    let mut p = vec![0f32; t * total];
                    gemm(
                        scale,
                        head_view(&q, head * hd, t, hd, qw),
                        head_view(kc, kh * hd, total, hd, kvw).t(),
                        0.0,
                        &mut p,
                        total,
                    );
                    let mut max_logit = f64::NEG_INFINITY;
                    for i in 0..t {
                        let row = &mut p[i * total..(i + 1) * total];
                        let seen = past + i + 1;
                        let from = la.window.map_or(0, |w| seen.saturating_sub(w));
                        if let Some(cap) = c.attn_softcap {
                            row[from..seen]
                                .iter_mut()
                                .for_each(|s| *s = cap * (*s / cap).tanh());
                        }
                        let m = row[from..seen]
                            .iter()
                            .fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                        max_logit = max_logit.max(f64::from(m));
                        let mut z = 0f32;
                        for pj in &mut row[from..seen] {
                            *pj = (*pj - m).exp();
                            z += *pj;
                        }
                        for pj in &mut row[from..seen] {
                            *pj /= z;
                        }
                        row[..from].fill(0.0);
                        row[seen..].fill(0.0);
                    }
                    let mut out = vec![0f32; t * hd];
                    gemm(
                        1.0,
                        Mat::rows(&p, t, total),
                        head_view(vc, kh * hd, total, hd, kvw),
                        0.0,
                        &mut out,
                        hd,
                    );
                    (out, max_logit, if keep_probs { p } else { Vec::new() })
                })
                .collect();
            for (head, (out, max_logit, probs)) in heads.iter().enumerate() {
                for i in 0..t {
                    att[i * qw + head * hd..i * qw + (head + 1) * hd]
                        .copy_from_slice(&out[i * hd..(i + 1) * hd]);
                }
                if keep_probs {
                    obs.attention(&AttentionPattern {
                        block: l,
                        head,
                        probs,
                        queries: t,
                        keys: total,
                        past,
                        window: la.window,
                        max_logit: *max_logit,
                    });
                }
            }
            self.apply(&layer.wo, &att, t, &mut o);
            if let Some(b) = &layer.bias.o {
                crate::kernels::matmul::add_bias_rows(&mut o, b);
            }
            self.add_write(
                kind,
                &mut h,
                &mut o,
                &layer.attn_out_norm,
                &mut a,
                &mut stats,
                (l, 0),
                obs,
            );
            if observed {
                obs.sublayer_out(l, 0, &h);
            }
            // The MLP sublayer: in a parallel block it reads the block's
            // input (the attention's write is already in `h`).
            if observed {
                obs.sublayer_in(l, 1, &h);
            }
            self.input_norm(
                kind,
                if c.gpt.parallel { &block_in } else { &h },
                (layer.ffn_norm.as_deref(), layer.bias.ffn_norm.as_deref()),
                &mut a,
                &mut stats,
                l,
                obs,
            );
            // The up projection (with its bias) into `ub` beside a gate,
            // or straight into the hidden layer `gb` of a plain MLP.
            let up = if layer.gate.is_some() {
                &mut ub
            } else {
                &mut gb
            };
            self.apply(&layer.up, &a, t, up);
            if let Some(b) = &layer.bias.up {
                crate::kernels::matmul::add_bias_rows(up, b);
            }
            if let Some(gate) = &layer.gate {
                self.apply(gate, &a, t, &mut gb);
                if let Some(lim) = self.ffn_clamp {
                    clamp_gate_up(&mut gb, &mut ub, lim);
                }
            }
            self.activate(&mut gb, &mut gelu, &mut slope);
            if layer.gate.is_some() {
                gb.iter_mut().zip(&ub).for_each(|(g, u)| *g *= u);
            }
            if observed {
                obs.mlp_hidden(l, &gb);
            }
            self.apply(&layer.down, &gb, t, &mut o);
            if let Some(b) = &layer.bias.down {
                crate::kernels::matmul::add_bias_rows(&mut o, b);
            }
            self.add_write(
                kind,
                &mut h,
                &mut o,
                &layer.ffn_out_norm,
                &mut a,
                &mut stats,
                (l, 1),
                obs,
            );
            if observed {
                obs.sublayer_out(l, 1, &h);
            }
        }
        if observed {
            obs.final_stream(&h);
        }
        cache.len = total;
        Ok(h)
    }

    /// The MLP's activation of `x` in place (`gelu` and `slope`: scratch
    /// for the GELUs).
    fn activate(&self, x: &mut [f32], gelu: &mut [f32], slope: &mut [f32]) {
        match self.cfg.act {
            GatedAct::Silu => x.iter_mut().for_each(|g| *g /= 1.0 + (-*g).exp()),
            GatedAct::GeluTanh => {
                act::gelu_forward(x, gelu, slope);
                x.copy_from_slice(gelu);
            }
            GatedAct::Gelu => {
                act::gelu_erf_forward(x, gelu);
                x.copy_from_slice(gelu);
            }
        }
    }

    /// A sublayer's input norm of the stream `h` into `a` (`obs` sees its
    /// input and output); without one (OLMo 2) the sublayer reads the
    /// stream itself.
    #[allow(clippy::too_many_arguments)]
    fn input_norm<O: Observer + ?Sized>(
        &self,
        kind: NormKind,
        h: &[f32],
        (gain, bias): (Option<&[f32]>, Option<&[f32]>),
        a: &mut [f32],
        stats: &mut [f32],
        block: usize,
        obs: &mut O,
    ) {
        let Some(g) = gain else {
            a.copy_from_slice(h);
            return;
        };
        let observed = obs.active();
        if observed {
            obs.norm_input(block, NormRole::In, h, g.len());
        }
        self.apply_norm(kind, h, (g, bias), a, stats);
        if observed {
            obs.norm_output(block, NormRole::In, a, g.len());
        }
    }

    /// Write a sublayer's output `o` into the stream `h`: through its output
    /// norm first when the block has one (sandwich; the result lands in
    /// `normed`), then added; `obs` sees the output norm's input and the
    /// write as added.
    #[allow(clippy::too_many_arguments)]
    fn add_write<O: Observer + ?Sized>(
        &self,
        kind: NormKind,
        h: &mut [f32],
        o: &mut [f32],
        out_norm: &Option<Vec<f32>>,
        normed: &mut [f32],
        stats: &mut [f32],
        (block, sub): (usize, usize),
        obs: &mut O,
    ) {
        let observed = obs.active();
        let w: &[f32] = match out_norm {
            Some(g) => {
                if observed {
                    obs.norm_input(block, NormRole::Out, o, g.len());
                }
                self.apply_norm(kind, o, (g, None), normed, stats);
                if observed {
                    obs.norm_output(block, NormRole::Out, normed, g.len());
                }
                normed
            }
            None => o,
        };
        if observed {
            obs.write(block, sub, w);
        }
        for (hh, ww) in h.iter_mut().zip(w) {
            *hh += ww;
        }
    }
}
