//! The decoder's forward pass over new tokens, with a key/value cache: a
//! prompt is processed in one pass (all its positions at once, through the
//! matmul kernel), and generation then feeds one token at a time, attending
//! to the cached keys and values of every earlier position (within the
//! layer's window) instead of recomputing the whole sequence. Pre,
//! sandwich or output norms, QK-Norm, RoPE in either pairing with the
//! layer's base (on all or the first dimensions of each head) or learned
//! positions, grouped-query attention, a gated or plain MLP, biases, and a
//! sequential or parallel block. The pass hands its tensors to
//! an [`Observer`] at named hook points (`model/hooks.rs`) and applies the
//! [`Interventions`] it is given there (`model/intervene.rs`); it computes
//! nothing for inspection itself (`trace.rs` does, as an observer).

use super::heads::{apply_rope, head_view, rope_table};
use super::{Decoder, DecoderLayer, GatedAct};
use crate::error::Result;
use crate::kernels::act;
use crate::kernels::matmul::{gemm, Mat};
use crate::kernels::norm::{self, NormKind};
use crate::model::hooks::{AttentionPattern, Observer, Pass, QkGeometry};
use crate::model::intervene::{Interventions, Point};
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

/// One pass's working buffers (sized for its `t` tokens) and what every
/// block shares: the RoPE tables, the interventions, whether an observer
/// listens.
struct PassBuffers<'a> {
    t: usize,
    past: usize,
    iv: &'a Interventions,
    observed: bool,
    keep_probs: bool,
    /// One RoPE table per distinct base: (base, cos, sin).
    tables: Vec<(f64, Vec<f32>, Vec<f32>)>,
    a: Vec<f32>,
    stats: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    qk_tmp: Vec<f32>,
    att: Vec<f32>,
    o: Vec<f32>,
    /// The MLP's hidden layer, and a gated MLP's up projection.
    gb: Vec<f32>,
    ub: Vec<f32>,
    gelu: Vec<f32>,
    slope: Vec<f32>,
    /// A parallel block's input, which its MLP reads.
    block_in: Vec<f32>,
}

impl Decoder {
    /// Hidden states `[t, d]` (before the final norm) of `ids`, the tokens
    /// at positions `cache.len() ..` after those already in `cache`, which
    /// gains their keys and values, with the interventions `iv` applied at
    /// their hook points. `obs` receives the pass's tensors at its hook
    /// points ([`NoObserver`](crate::model::hooks::NoObserver): none).
    pub fn forward<O: Observer + ?Sized>(
        &self,
        ids: &[u32],
        iv: &Interventions,
        cache: &mut KvCache,
        obs: &mut O,
    ) -> Result<Vec<f32>> {
        let c = &self.cfg;
        let (d, t) = (c.d, ids.len());
        let past = cache.len;
        if t == 0 {
            return Err("no tokens".to_string().into());
        }
        if past + t > c.context {
            return Err(format!("{} tokens exceed the context of {}", past + t, c.context).into());
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
        let mut h = self.embed(ids, past)?;
        iv.edit(Point::Embed, 0, past, d, &mut h);
        if observed {
            obs.embedded(&h);
        }
        let mut p = self.pass_buffers(t, past, iv, observed && obs.wants_attention());
        p.observed = observed;
        for (l, layer) in self.layers.iter().enumerate() {
            self.attention_sublayer(l, layer, &mut h, cache, &mut p, obs);
            self.mlp_sublayer(l, layer, &mut h, &mut p, obs);
        }
        if observed {
            obs.final_stream(&h);
        }
        cache.len = past + t;
        Ok(h)
    }

    /// The embeddings of `ids` at positions `past ..`: scaled, learned
    /// positions added.
    fn embed(&self, ids: &[u32], past: usize) -> Result<Vec<f32>> {
        let c = &self.cfg;
        let (d, t) = (c.d, ids.len());
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
        Ok(h)
    }

    /// The buffers of a pass over `t` tokens after `past`.
    fn pass_buffers<'a>(
        &self,
        t: usize,
        past: usize,
        iv: &'a Interventions,
        keep_probs: bool,
    ) -> PassBuffers<'a> {
        let c = &self.cfg;
        let (d, qw, kvw) = (c.d, c.q_width(), c.kv_width());
        let rot = c.rotary_dims();
        let mut tables: Vec<(f64, Vec<f32>, Vec<f32>)> = Vec::new();
        for a in &c.attn {
            if !tables.iter().any(|(b, _, _)| *b == a.rope_base) {
                let (cos, sin) = rope_table(past, t, rot, a.rope_base, c.rope_scaling);
                tables.push((a.rope_base, cos, sin));
            }
        }
        let up_len = if c.gpt.plain_mlp { 0 } else { t * c.ffn };
        let gelu_len = if c.act != GatedAct::Silu {
            t * c.ffn
        } else {
            0
        };
        PassBuffers {
            t,
            past,
            iv,
            observed: false,
            keep_probs,
            tables,
            a: vec![0f32; t * d],
            stats: vec![0f32; norm::stats_len(t * c.heads.max(1))],
            q: vec![0f32; t * qw],
            k: vec![0f32; t * kvw],
            v: vec![0f32; t * kvw],
            qk_tmp: vec![0f32; t * qw],
            att: vec![0f32; t * qw],
            o: vec![0f32; t * d],
            gb: vec![0f32; t * c.ffn],
            ub: vec![0f32; up_len],
            gelu: vec![0f32; gelu_len],
            slope: vec![0f32; gelu_len],
            block_in: vec![0f32; if c.gpt.parallel { t * d } else { 0 }],
        }
    }

    /// Block `l`'s attention sublayer on the stream `h`: its input norm,
    /// q/k/v (biases, QK-Norm, RoPE), the heads over the cache, the output
    /// projection, written into `h`.
    fn attention_sublayer<O: Observer + ?Sized>(
        &self,
        l: usize,
        layer: &DecoderLayer,
        h: &mut [f32],
        cache: &mut KvCache,
        p: &mut PassBuffers,
        obs: &mut O,
    ) {
        let c = &self.cfg;
        let (d, t, past, hd) = (c.d, p.t, p.past, c.head_dim);
        let la = c.attn[l];
        let (_, cos, sin) = p
            .tables
            .iter()
            .find(|(b, _, _)| *b == la.rope_base)
            .expect("a table per base");
        let rot = c.rotary_dims();
        let rotate = |x: &mut [f32], heads: usize| {
            apply_rope(x, t, heads, (hd, rot), cos, sin, c.rope_pairs)
        };
        p.iv.edit(Point::ResidPre, l, past, d, h);
        if p.observed {
            obs.sublayer_in(l, 0, h);
        }
        if c.gpt.parallel {
            p.block_in.copy_from_slice(h);
        }
        let norm_in = (layer.attn_norm.as_deref(), layer.bias.attn_norm.as_deref());
        self.input_norm(p.iv, h, norm_in, &mut p.a, &mut p.stats, l, obs);
        self.apply(&layer.wq, &p.a, t, &mut p.q);
        self.apply(&layer.wk, &p.a, t, &mut p.k);
        self.apply(&layer.wv, &p.a, t, &mut p.v);
        if let Some((bq, bk, bv)) = &layer.qkv_bias {
            for (x, b) in [(&mut p.q, bq), (&mut p.k, bk), (&mut p.v, bv)] {
                crate::kernels::matmul::add_bias_rows(x, b);
            }
        }
        if let Some((gq, gk)) = &layer.qk_norm {
            if p.observed {
                let geom = QkGeometry {
                    tokens: t,
                    heads: c.heads,
                    kv_heads: c.kv_heads,
                    head_dim: hd,
                    scale: c.attn_scale,
                    window: la.window,
                    rotate: &rotate,
                };
                obs.queries_keys(l, &p.q, &p.k, &geom);
            }
            for (x, g) in [(&mut p.q, gq), (&mut p.k, gk)] {
                if p.observed {
                    obs.norm_input(l, NormRole::QkNorm, x, g.len());
                }
                let n = x.len();
                let eps = p.iv.eps.unwrap_or(c.eps);
                self.apply_norm(
                    NormKind::RmsNorm,
                    eps,
                    x,
                    (g, None),
                    &mut p.qk_tmp[..n],
                    &mut p.stats,
                );
                x.copy_from_slice(&p.qk_tmp[..n]);
                if p.observed {
                    obs.norm_output(l, NormRole::QkNorm, x, g.len());
                }
            }
        }
        rotate(&mut p.q, c.heads);
        rotate(&mut p.k, c.kv_heads);
        cache.k[l].extend_from_slice(&p.k);
        cache.v[l].extend_from_slice(&p.v);
        self.heads(l, (&cache.k[l], &cache.v[l]), p, obs);
        self.apply(&layer.wo, &p.att, t, &mut p.o);
        if let Some(b) = &layer.bias.o {
            crate::kernels::matmul::add_bias_rows(&mut p.o, b);
        }
        let out_norm = &layer.attn_out_norm;
        self.add_write(h, out_norm, p, (l, 0), obs);
        p.iv.edit(Point::ResidMid, l, past, d, h);
        if p.observed {
            obs.sublayer_out(l, 0, h);
        }
    }

    /// Block `l`'s heads, each on its own (in parallel): scores over the
    /// cached keys `kc` (soft-capped, within the window), softmax, any
    /// knockout, times the cached values `vc`; gathered into `p.att`, and
    /// each head's pattern handed to `obs`.
    fn heads<O: Observer + ?Sized>(
        &self,
        l: usize,
        (kc, vc): (&[f32], &[f32]),
        p: &mut PassBuffers,
        obs: &mut O,
    ) {
        let c = &self.cfg;
        let (t, past, hd) = (p.t, p.past, c.head_dim);
        let (qw, kvw) = (c.q_width(), c.kv_width());
        let total = past + t;
        let la = c.attn[l];
        let group = c.heads / c.kv_heads;
        let (q, iv, keep_probs) = (&p.q, p.iv, p.keep_probs);
        let knocked = iv.knocks(l);
        // Each head: its output [t, hd] and its largest logit (and its
        // probabilities, when observed).
        let heads: Vec<(Vec<f32>, f64, Vec<f32>)> = (0..c.heads)
            .into_par_iter()
            .map(|head| {
                let kh = head / group;
                // Scores Q_h K_h^T (t x total; each row's causal tail and
                // what lies before its window are masked below), then P
                // V_h, both through the matmul kernel.
                let mut pr = vec![0f32; t * total];
                gemm(
                    c.attn_scale,
                    head_view(q, head * hd, t, hd, qw),
                    head_view(kc, kh * hd, total, hd, kvw).t(),
                    0.0,
                    &mut pr,
                    total,
                );
                let mut max_logit = f64::NEG_INFINITY;
                for i in 0..t {
                    let row = &mut pr[i * total..(i + 1) * total];
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
                    if knocked {
                        iv.knock_out(l, row, from, seen);
                    }
                }
                let mut out = vec![0f32; t * hd];
                gemm(
                    1.0,
                    Mat::rows(&pr, t, total),
                    head_view(vc, kh * hd, total, hd, kvw),
                    0.0,
                    &mut out,
                    hd,
                );
                (out, max_logit, if keep_probs { pr } else { Vec::new() })
            })
            .collect();
        for (head, (out, max_logit, probs)) in heads.iter().enumerate() {
            for i in 0..t {
                p.att[i * qw + head * hd..i * qw + (head + 1) * hd]
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
    }

    /// Block `l`'s MLP sublayer: in a parallel block it reads the block's
    /// input (the attention's write is already in `h`).
    fn mlp_sublayer<O: Observer + ?Sized>(
        &self,
        l: usize,
        layer: &DecoderLayer,
        h: &mut [f32],
        p: &mut PassBuffers,
        obs: &mut O,
    ) {
        let c = &self.cfg;
        let (t, past) = (p.t, p.past);
        if p.observed {
            obs.sublayer_in(l, 1, h);
        }
        let norm_in = (layer.ffn_norm.as_deref(), layer.bias.ffn_norm.as_deref());
        let x: &[f32] = if c.gpt.parallel { &p.block_in } else { h };
        self.input_norm(p.iv, x, norm_in, &mut p.a, &mut p.stats, l, obs);
        // The up projection (with its bias) into `ub` beside a gate, or
        // straight into the hidden layer `gb` of a plain MLP.
        let up = if layer.gate.is_some() {
            &mut p.ub
        } else {
            &mut p.gb
        };
        self.apply(&layer.up, &p.a, t, up);
        if let Some(b) = &layer.bias.up {
            crate::kernels::matmul::add_bias_rows(up, b);
        }
        if let Some(gate) = &layer.gate {
            self.apply(gate, &p.a, t, &mut p.gb);
            if let Some(lim) = p.iv.ffn_clamp {
                clamp_gate_up(&mut p.gb, &mut p.ub, lim);
            }
        }
        self.activate(&mut p.gb, &mut p.gelu, &mut p.slope);
        if layer.gate.is_some() {
            p.gb.iter_mut().zip(&p.ub).for_each(|(g, u)| *g *= u);
        }
        p.iv.edit(Point::MlpPost, l, past, c.ffn, &mut p.gb);
        if p.observed {
            obs.mlp_hidden(l, &p.gb);
        }
        self.apply(&layer.down, &p.gb, t, &mut p.o);
        if let Some(b) = &layer.bias.down {
            crate::kernels::matmul::add_bias_rows(&mut p.o, b);
        }
        self.add_write(h, &layer.ffn_out_norm, p, (l, 1), obs);
        p.iv.edit(Point::ResidPost, l, past, c.d, h);
        if p.observed {
            obs.sublayer_out(l, 1, h);
        }
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
    /// input and output), as the interventions `iv` run it; without one
    /// (OLMo 2) the sublayer reads the stream itself.
    #[allow(clippy::too_many_arguments)]
    fn input_norm<O: Observer + ?Sized>(
        &self,
        iv: &Interventions,
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
        let (kind, eps) = self.norm_as(iv);
        self.apply_norm(kind, eps, h, (g, bias), a, stats);
        if observed {
            obs.norm_output(block, NormRole::In, a, g.len());
        }
    }

    /// Write a sublayer's output `p.o` into the stream `h`: through its
    /// output norm first when the block has one (sandwich; the result
    /// lands in `p.a`), then edited at the sublayer's write point and
    /// added; `obs` sees the output norm's input and the write as added.
    fn add_write<O: Observer + ?Sized>(
        &self,
        h: &mut [f32],
        out_norm: &Option<Vec<f32>>,
        p: &mut PassBuffers,
        (block, sub): (usize, usize),
        obs: &mut O,
    ) {
        let observed = p.observed;
        let (kind, eps) = self.norm_as(p.iv);
        let w: &mut [f32] = match out_norm {
            Some(g) => {
                if observed {
                    obs.norm_input(block, NormRole::Out, &p.o, g.len());
                }
                self.apply_norm(kind, eps, &p.o, (g, None), &mut p.a, &mut p.stats);
                if observed {
                    obs.norm_output(block, NormRole::Out, &p.a, g.len());
                }
                &mut p.a
            }
            None => &mut p.o,
        };
        let point = if sub == 0 {
            Point::AttnOut
        } else {
            Point::MlpOut
        };
        p.iv.edit(point, block, p.past, self.cfg.d, w);
        if observed {
            obs.write(block, sub, w);
        }
        for (hh, ww) in h.iter_mut().zip(w.iter()) {
            *hh += ww;
        }
    }
}
