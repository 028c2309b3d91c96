//! The decoder's forward pass over new tokens, with a key/value cache: a
//! prompt is processed in one pass (all its positions at once, through the
//! matmul kernel), and generation then feeds one token at a time, attending
//! to the cached keys and values of every earlier position (within the
//! layer's window) instead of recomputing the whole sequence. Pre or
//! sandwich norms, QK-Norm, RoPE in either pairing with the layer's base,
//! grouped-query attention, a gated MLP, and the trace that `normlab
//! inspect` reads: per sublayer the stream before, the write as it is added
//! (after the output norm for sandwich) and the stream after, all from the
//! tensors this pass computes.

use super::{Decoder, DecoderTrace, GatedAct, RopePairs};
use crate::error::Result;
use crate::kernels::act;
use crate::kernels::matmul::{gemm, Mat};
use crate::kernels::norm::{self, NormKind};
use crate::model::SublayerTrace;
use crate::nn::norm::{mean_row_norm, rms};
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

/// Over the queries of a pass (positions `past..past + t`) that are past
/// position 0: how many there are (as f64; NaN when none, so that a share
/// over them is NaN) and the sum of what a uniform attention gives position
/// 0 (1/(t+1) for the query at t, 0 once its window has left position 0).
fn sink_baseline(past: usize, t: usize, window: Option<usize>) -> (f64, f64) {
    let (mut n, mut u) = (0usize, 0f64);
    for pos in (past..past + t).filter(|&p| p >= 1) {
        n += 1;
        if window.is_none_or(|w| pos < w) {
            u += 1.0 / (pos + 1) as f64;
        }
    }
    (if n == 0 { f64::NAN } else { n as f64 }, u)
}

/// The median of |x| (NaN when empty).
fn median_abs(x: &[f32]) -> f64 {
    if x.is_empty() {
        return f64::NAN;
    }
    let mut a: Vec<f32> = x.iter().map(|v| v.abs()).collect();
    let m = a.len() / 2;
    let (_, v, _) = a.select_nth_unstable_by(m, f32::total_cmp);
    f64::from(*v)
}

/// DeepSeek V4's clamp (transformers' `DeepseekV4MLP`) on a gated
/// feed-forward's projections: the gate to at most `lim`, the up to
/// [-lim, lim]; a NaN stays NaN.
pub fn clamp_gate_up(gate: &mut [f32], up: &mut [f32], lim: f32) {
    gate.iter_mut().filter(|g| **g > lim).for_each(|g| *g = lim);
    up.iter_mut().for_each(|u| *u = u.clamp(-lim, lim));
}

/// Median L2 norm of the rows of a `[rows, d]` matrix.
fn median_row_norm(x: &[f32], d: usize) -> f64 {
    let mut n: Vec<f64> = x
        .chunks_exact(d)
        .map(|r| crate::params::sum_squares(r).sqrt())
        .collect();
    n.sort_by(f64::total_cmp);
    match n.len() {
        0 => 0.0,
        k if k % 2 == 1 => n[k / 2],
        k => 0.5 * (n[k / 2 - 1] + n[k / 2]),
    }
}

/// Per row of `[rows, d]`: the smallest mean square, and the mean over rows
/// of |the row mean of `x / rms(x)`|.
fn row_stats(x: &[f32], d: usize) -> (f64, f64) {
    let (mut min, mut mean, mut n) = (f64::INFINITY, 0f64, 0usize);
    for r in x.chunks_exact(d) {
        let ms = r.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / d as f64;
        min = min.min(ms);
        if ms > 0.0 {
            mean += (r.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64 / ms.sqrt()).abs();
        }
        n += 1;
    }
    (min, mean / n.max(1) as f64)
}

impl Decoder {
    /// Hidden states `[t, d]` (before the final norm) of `ids`, the tokens
    /// at positions `cache.len() ..` after those already in `cache`, which
    /// gains their keys and values; every block norm applied as `kind`
    /// (QK-Norm stays the model's); fills `trace` when given.
    pub fn forward(
        &self,
        ids: &[u32],
        kind: NormKind,
        cache: &mut KvCache,
        mut trace: Option<&mut DecoderTrace>,
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
        if c.emb_scale != 1.0 {
            h.iter_mut().for_each(|v| *v *= c.emb_scale);
        }
        // One RoPE table per distinct base.
        let mut tables: Vec<(f64, Vec<f32>, Vec<f32>)> = Vec::new();
        for a in &c.attn {
            if !tables.iter().any(|(b, _, _)| *b == a.rope_base) {
                let (cos, sin) = rope_table(past, t, hd, a.rope_base);
                tables.push((a.rope_base, cos, sin));
            }
        }
        let mut a = vec![0f32; t * d];
        let mut stats = vec![0f32; norm::stats_len(t * c.heads.max(1))];
        let (mut q, mut k, mut v) = (vec![0f32; t * qw], vec![0f32; t * kvw], vec![0f32; t * kvw]);
        let mut qk_tmp = vec![0f32; t * qw];
        let mut att = vec![0f32; t * qw];
        let mut o = vec![0f32; t * d];
        let (mut gb, mut ub) = (vec![0f32; t * c.ffn], vec![0f32; t * c.ffn]);
        let gelu_len = if c.act == GatedAct::GeluTanh {
            t * c.ffn
        } else {
            0
        };
        let (mut gelu, mut slope) = (vec![0f32; gelu_len], vec![0f32; gelu_len]);
        let scale = c.attn_scale;
        let group = c.heads / c.kv_heads;
        // The trace's statistics cost passes over the stream: only when tracing.
        let tracing = trace.is_some();
        let mut before = if tracing {
            vec![0f32; t * d]
        } else {
            Vec::new()
        };
        let probe = |x: &[f32]| -> (f64, f64, f64) {
            if !tracing {
                return (0.0, 0.0, 0.0);
            }
            let (ms_min, xhat_mean) = row_stats(x, d);
            (rms(x), ms_min, xhat_mean)
        };
        // The smallest row mean square of rows of `n` entering a norm
        // (traced only).
        let ms_of = |x: &[f32], n: usize| {
            if tracing {
                row_stats(x, n).0
            } else {
                f64::INFINITY
            }
        };
        let write = |o: &[f32], read: f64| {
            if tracing {
                rms(o) / read.max(1e-30)
            } else {
                0.0
            }
        };
        for (l, layer) in self.layers.iter().enumerate() {
            let la = c.attn[l];
            let (_, cos, sin) = tables
                .iter()
                .find(|(b, _, _)| *b == la.rope_base)
                .expect("a table per base");
            if let Some(tr) = trace.as_deref_mut().filter(|tr| tr.keep_streams) {
                tr.streams.push(h.clone());
            }
            let (rms_in, ms_min_attn, xhat_mean) = probe(&h);
            // The smallest row mean square entering any of the block's norms
            // (input norms, QK-Norm's per-head rows, sandwich output norms).
            let mut ms_block = ms_min_attn;
            let row_norm_in = if tracing { mean_row_norm(&h, d) } else { 0.0 };
            self.apply_norm(kind, &h, &layer.attn_norm, &mut a, &mut stats);
            self.apply(&layer.wq, &a, t, &mut q);
            self.apply(&layer.wk, &a, t, &mut k);
            self.apply(&layer.wv, &a, t, &mut v);
            // QK-Norm's effect (traced): the same queries and keys without
            // it, rotated alike, give the largest logit it would have been.
            let mut raw = (tracing && layer.qk_norm.is_some()).then(|| (q.clone(), k.clone()));
            if let Some((gq, gk)) = &layer.qk_norm {
                for (x, g) in [(&mut q, gq), (&mut k, gk)] {
                    ms_block = ms_block.min(ms_of(x, hd));
                    let n = x.len();
                    self.apply_norm(NormKind::RmsNorm, x, g, &mut qk_tmp[..n], &mut stats);
                    x.copy_from_slice(&qk_tmp[..n]);
                }
            }
            apply_rope(&mut q, t, c.heads, hd, cos, sin, c.rope_pairs);
            apply_rope(&mut k, t, c.kv_heads, hd, cos, sin, c.rope_pairs);
            let raw_max_logit = match &mut raw {
                Some((rq, rk)) => {
                    apply_rope(rq, t, c.heads, hd, cos, sin, c.rope_pairs);
                    apply_rope(rk, t, c.kv_heads, hd, cos, sin, c.rope_pairs);
                    max_logit(rq, rk, t, (c.heads, c.kv_heads, hd), scale, la.window)
                }
                None => f64::NAN,
            };
            cache.k[l].extend_from_slice(&k);
            cache.v[l].extend_from_slice(&v);
            let (kc, vc) = (&cache.k[l], &cache.v[l]);
            // Each head on its own (in parallel): its output [t, hd], its
            // largest logit and its summed entropy; then scattered into att.
            let heads: Vec<(Vec<f32>, f64, f64, f64)> = (0..c.heads)
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
                    let (mut max_logit, mut entropy, mut sink) = (f64::NEG_INFINITY, 0f64, 0f64);
                    for i in 0..t {
                        let row = &mut p[i * total..(i + 1) * total];
                        let seen = past + i + 1;
                        let from = la.window.map_or(0, |w| seen.saturating_sub(w));
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
                        // The entropy costs a log per score: only for the trace.
                        if tracing {
                            for &pj in row[from..seen].iter().filter(|&&pj| pj > 0.0) {
                                entropy -= f64::from(pj) * f64::from(pj).ln();
                            }
                            // Position 0's share, for queries past it.
                            if seen > 1 && from == 0 {
                                sink += f64::from(row[0]);
                            }
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
                    (out, max_logit, entropy, sink)
                })
                .collect();
            let (mut max_logit, mut entropy, mut sink) = (f64::NEG_INFINITY, 0f64, 0f64);
            for (head, (out, m, e, s)) in heads.iter().enumerate() {
                sink += s;
                for i in 0..t {
                    att[i * qw + head * hd..i * qw + (head + 1) * hd]
                        .copy_from_slice(&out[i * hd..(i + 1) * hd]);
                }
                max_logit = max_logit.max(*m);
                entropy += e;
            }
            self.apply(&layer.wo, &att, t, &mut o);
            if layer.attn_out_norm.is_some() {
                ms_block = ms_block.min(ms_of(&o, d));
            }
            let w = self.add_write(
                kind,
                &mut h,
                &mut o,
                &layer.attn_out_norm,
                &mut a,
                &mut stats,
                &mut before,
            );
            let attn_write = write(w, rms_in);
            if let Some(tr) = trace.as_deref_mut() {
                tr.sublayers.push(SublayerTrace::of(l, 0, &before, w, &h));
            }
            let (rms_attn, ms_min_mlp, _) = probe(&h);
            ms_block = ms_block.min(ms_min_mlp);
            self.apply_norm(kind, &h, &layer.ffn_norm, &mut a, &mut stats);
            self.apply(&layer.gate, &a, t, &mut gb);
            self.apply(&layer.up, &a, t, &mut ub);
            if let Some(lim) = self.ffn_clamp {
                clamp_gate_up(&mut gb, &mut ub, lim);
            }
            match c.act {
                GatedAct::Silu => {
                    for (g, u) in gb.iter_mut().zip(&ub) {
                        *g = *g / (1.0 + (-*g).exp()) * u;
                    }
                }
                GatedAct::GeluTanh => {
                    // GELU(gate) into `gelu` (its slope, unused, into `slope`).
                    act::gelu_forward(&gb, &mut gelu, &mut slope);
                    for ((g, y), u) in gb.iter_mut().zip(&gelu).zip(&ub) {
                        *g = y * u;
                    }
                }
            }
            let ffn_max = if tracing {
                crate::params::nan_max(gb.iter().map(|v| f64::from(v.abs())))
            } else {
                0.0
            };
            self.apply(&layer.down, &gb, t, &mut o);
            if layer.ffn_out_norm.is_some() {
                ms_block = ms_block.min(ms_of(&o, d));
            }
            let w = self.add_write(
                kind,
                &mut h,
                &mut o,
                &layer.ffn_out_norm,
                &mut a,
                &mut stats,
                &mut before,
            );
            let mlp_write = write(w, rms_attn);
            if let Some(tr) = trace.as_deref_mut() {
                tr.sublayers.push(SublayerTrace::of(l, 1, &before, w, &h));
                let (at, _) = h.iter().enumerate().fold((0, 0f32), |(i, m), (j, &x)| {
                    if x.abs() > m {
                        (j, x.abs())
                    } else {
                        (i, m)
                    }
                });
                tr.max_at.push((past + at / d, at % d));
                tr.row_norm_in.push(row_norm_in);
                tr.row_norm_out.push(mean_row_norm(&h, d));
                tr.row_norm_median_out.push(median_row_norm(&h, d));
                tr.rms_in.push(rms_in);
                tr.rms_attn.push(rms_attn);
                tr.rms_out.push(rms(&h));
                tr.max_abs
                    .push(h.iter().fold(0f64, |m, &x| m.max(f64::from(x.abs()))));
                tr.attn_write.push(attn_write);
                tr.mlp_write.push(mlp_write);
                tr.attn_max_logit.push(max_logit);
                tr.attn_max_logit_raw.push(raw_max_logit);
                tr.attn_entropy.push(entropy / (c.heads * t) as f64);
                let (share, uniform) = sink_baseline(past, t, la.window);
                tr.attn_sink.push(sink / (c.heads as f64 * share));
                tr.attn_sink_uniform.push(uniform / share);
                tr.median_abs.push(median_abs(&h));
                tr.ffn_max.push(ffn_max);
                // The last block's includes the final norm's rows.
                if l + 1 == self.layers.len() {
                    ms_block = ms_block.min(ms_of(&h, d));
                }
                tr.ms_min.push(ms_block);
                tr.xhat_mean.push(xhat_mean);
            }
        }
        if let Some(tr) = trace.filter(|tr| tr.keep_streams) {
            tr.streams.push(h.clone());
        }
        cache.len = total;
        Ok(h)
    }

    /// Write a sublayer's output `o` into the stream `h`: through its output
    /// norm first when the block has one (sandwich; the result lands in
    /// `normed`), then added. Returns the write as added. When `before` is
    /// not empty (tracing) it receives the stream as it was.
    #[allow(clippy::too_many_arguments)]
    fn add_write<'a>(
        &self,
        kind: NormKind,
        h: &mut [f32],
        o: &'a mut [f32],
        out_norm: &Option<Vec<f32>>,
        normed: &'a mut [f32],
        stats: &mut [f32],
        before: &mut [f32],
    ) -> &'a [f32] {
        let w: &[f32] = match out_norm {
            Some(g) => {
                self.apply_norm(kind, o, g, normed, stats);
                normed
            }
            None => o,
        };
        if !before.is_empty() {
            before.copy_from_slice(h);
        }
        for (hh, ww) in h.iter_mut().zip(w) {
            *hh += ww;
        }
        w
    }
}

/// The largest causal attention logit `scale * q.k` over every head of
/// this pass's `t` queries and keys (`q` `[t, heads * hd]`, `k` `[t,
/// kv_heads * hd]`), each query seeing at most `window` keys.
fn max_logit(
    q: &[f32],
    k: &[f32],
    t: usize,
    (heads, kv_heads, hd): (usize, usize, usize),
    scale: f32,
    window: Option<usize>,
) -> f64 {
    let (qw, kvw) = (heads * hd, kv_heads * hd);
    (0..heads)
        .into_par_iter()
        .map(|head| {
            let kh = head / (heads / kv_heads);
            let mut p = vec![0f32; t * t];
            gemm(
                scale,
                head_view(q, head * hd, t, hd, qw),
                head_view(k, kh * hd, t, hd, kvw).t(),
                0.0,
                &mut p,
                t,
            );
            (0..t)
                .map(|i| {
                    let from = window.map_or(0, |w| (i + 1).saturating_sub(w));
                    p[i * t + from..=i * t + i]
                        .iter()
                        .fold(f64::NEG_INFINITY, |m, &x| m.max(f64::from(x)))
                })
                .fold(f64::NEG_INFINITY, f64::max)
        })
        .reduce(|| f64::NEG_INFINITY, f64::max)
}

/// The `rows x cols` view starting at `off` with row stride `rs` (one
/// head's slice of a `[t, heads * hd]` activation).
fn head_view(buf: &[f32], off: usize, rows: usize, cols: usize, rs: usize) -> Mat<'_> {
    Mat {
        data: &buf[off..],
        rows,
        cols,
        rs,
        cs: 1,
    }
}

/// cos/sin of position p times frequency i for positions `start ..
/// start + t`, `[t, hd/2]`, computed in f64.
fn rope_table(start: usize, t: usize, hd: usize, base: f64) -> (Vec<f32>, Vec<f32>) {
    let half = hd / 2;
    let mut cos = vec![0f32; t * half];
    let mut sin = vec![0f32; t * half];
    for r in 0..t {
        let p = start + r;
        for i in 0..half {
            // As Hugging Face computes it: the inverse frequency in f32.
            let inv = (1.0 / base.powf((2 * i) as f64 / hd as f64)) as f32;
            let ang = f64::from(p as f32 * inv);
            cos[r * half + i] = ang.cos() as f32;
            sin[r * half + i] = ang.sin() as f32;
        }
    }
    (cos, sin)
}

/// Rotate each head's pairs by their angles: adjacent pairs (2i, 2i+1)
/// (llama.cpp's row order) or halves (i, i + hd/2) (rows as trained).
fn apply_rope(
    x: &mut [f32],
    t: usize,
    heads: usize,
    hd: usize,
    cos: &[f32],
    sin: &[f32],
    pairs: RopePairs,
) {
    let half = hd / 2;
    let (stride, offset) = match pairs {
        RopePairs::Adjacent => (2, 1),
        RopePairs::Halves => (1, half),
    };
    for p in 0..t {
        for h in 0..heads {
            let row = &mut x[(p * heads + h) * hd..(p * heads + h + 1) * hd];
            for i in 0..half {
                let (c, s) = (cos[p * half + i], sin[p * half + i]);
                let (ia, ib) = (stride * i, stride * i + offset);
                let (a, b) = (row[ia], row[ib]);
                row[ia] = a * c - b * s;
                row[ib] = a * s + b * c;
            }
        }
    }
}
