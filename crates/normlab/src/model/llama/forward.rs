//! The Llama forward pass over new tokens, with a key/value cache: a prompt
//! is processed in one pass (all its positions at once, through the matmul
//! kernel), and generation then feeds one token at a time, attending to the
//! cached keys and values of every earlier position instead of recomputing
//! the whole sequence. RoPE (llama.cpp's row order), grouped-query
//! attention, SwiGLU, and the trace that `normlab inspect` reads.

use super::{Llama, LlamaTrace};
use crate::error::Result;
use crate::kernels::matmul::{gemm, linear_forward, Mat};
use crate::kernels::norm::{self, NormKind};
use crate::kernels::simd;
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
    pub fn new(model: &Llama) -> KvCache {
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

/// Per row of `[rows, d]`: the smallest mean square, and the mean over rows
/// of |the row mean of `x / rms(x)`|.
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

impl Llama {
    /// Hidden states `[t, d]` (before the final norm) of `ids`, the tokens
    /// at positions `cache.len() ..` after those already in `cache`, which
    /// gains their keys and values; every block norm applied as `kind`;
    /// fills `trace` when given.
    pub fn forward(
        &self,
        ids: &[u32],
        kind: NormKind,
        cache: &mut KvCache,
        mut trace: Option<&mut LlamaTrace>,
    ) -> Result<Vec<f32>> {
        let c = &self.cfg;
        let (d, t, hd) = (c.d, ids.len(), c.head_dim());
        let (past, kvd) = (cache.len, c.kv_heads * hd);
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
            h[r * d..(r + 1) * d].copy_from_slice(&self.emb[id * d..(id + 1) * d]);
        }
        let (cos, sin) = rope_table(past, t, hd, c.rope_base);
        let mut a = vec![0f32; t * d];
        let mut stats = vec![0f32; norm::stats_len(t)];
        let (mut q, mut k, mut v) = (vec![0f32; t * d], vec![0f32; t * kvd], vec![0f32; t * kvd]);
        let mut att = vec![0f32; t * d];
        let mut o = vec![0f32; t * d];
        let (mut gb, mut ub) = (vec![0f32; t * c.ffn], vec![0f32; t * c.ffn]);
        let scale = 1.0 / (hd as f32).sqrt();
        let group = c.heads / c.kv_heads;
        // The trace's statistics cost passes over the stream: only when tracing.
        let tracing = trace.is_some();
        let probe = |x: &[f32]| -> (f64, f64, f64) {
            if !tracing {
                return (0.0, 0.0, 0.0);
            }
            let (ms_min, xhat_mean) = row_stats(x, d);
            (rms(x), ms_min, xhat_mean)
        };
        let write = |o: &[f32], read: f64| {
            if tracing {
                rms(o) / read.max(1e-30)
            } else {
                0.0
            }
        };
        for (l, layer) in self.layers.iter().enumerate() {
            let (rms_in, ms_min_attn, xhat_mean) = probe(&h);
            let row_norm_in = if tracing { mean_row_norm(&h, d) } else { 0.0 };
            self.apply_norm(kind, &h, &layer.attn_norm, &mut a, &mut stats);
            linear(&a, &layer.wq, t, d, d, &mut q);
            linear(&a, &layer.wk, t, d, kvd, &mut k);
            linear(&a, &layer.wv, t, d, kvd, &mut v);
            apply_rope(&mut q, t, c.heads, hd, &cos, &sin);
            apply_rope(&mut k, t, c.kv_heads, hd, &cos, &sin);
            cache.k[l].extend_from_slice(&k);
            cache.v[l].extend_from_slice(&v);
            let (kc, vc) = (&cache.k[l], &cache.v[l]);
            // Each head on its own (in parallel): its output [t, hd], its
            // largest logit and its summed entropy; then scattered into att.
            let heads: Vec<(Vec<f32>, f64, f64)> = (0..c.heads)
                .into_par_iter()
                .map(|head| {
                    let kh = head / group;
                    // Scores Q_h K_h^T (t x total; each row's causal tail is
                    // masked below), then P V_h, both through the matmul kernel.
                    let mut p = vec![0f32; t * total];
                    gemm(
                        scale,
                        head_view(&q, head * hd, t, hd, d),
                        head_view(kc, kh * hd, total, hd, kvd).t(),
                        0.0,
                        &mut p,
                        total,
                    );
                    let (mut max_logit, mut entropy) = (f64::NEG_INFINITY, 0f64);
                    for i in 0..t {
                        let row = &mut p[i * total..(i + 1) * total];
                        let seen = past + i + 1;
                        let m = row[..seen].iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                        max_logit = max_logit.max(f64::from(m));
                        let mut z = 0f32;
                        for pj in &mut row[..seen] {
                            *pj = (*pj - m).exp();
                            z += *pj;
                        }
                        for pj in &mut row[..seen] {
                            *pj /= z;
                        }
                        // The entropy costs a log per score: only for the trace.
                        if tracing {
                            for &pj in row[..seen].iter().filter(|&&pj| pj > 0.0) {
                                entropy -= f64::from(pj) * f64::from(pj).ln();
                            }
                        }
                        row[seen..].fill(0.0);
                    }
                    let mut out = vec![0f32; t * hd];
                    gemm(
                        1.0,
                        Mat::rows(&p, t, total),
                        head_view(vc, kh * hd, total, hd, kvd),
                        0.0,
                        &mut out,
                        hd,
                    );
                    (out, max_logit, entropy)
                })
                .collect();
            let (mut max_logit, mut entropy) = (f64::NEG_INFINITY, 0f64);
            for (head, (out, m, e)) in heads.iter().enumerate() {
                for i in 0..t {
                    att[i * d + head * hd..i * d + (head + 1) * hd]
                        .copy_from_slice(&out[i * hd..(i + 1) * hd]);
                }
                max_logit = max_logit.max(*m);
                entropy += e;
            }
            linear(&att, &layer.wo, t, d, d, &mut o);
            let attn_write = write(&o, rms_in);
            for (hh, oo) in h.iter_mut().zip(&o) {
                *hh += oo;
            }
            let (rms_attn, ms_min_mlp, _) = probe(&h);
            self.apply_norm(kind, &h, &layer.ffn_norm, &mut a, &mut stats);
            linear(&a, &layer.gate, t, d, c.ffn, &mut gb);
            linear(&a, &layer.up, t, d, c.ffn, &mut ub);
            for (g, u) in gb.iter_mut().zip(&ub) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
            linear(&gb, &layer.down, t, c.ffn, d, &mut o);
            let mlp_write = write(&o, rms_attn);
            for (hh, oo) in h.iter_mut().zip(&o) {
                *hh += oo;
            }
            if let Some(tr) = trace.as_deref_mut() {
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
                tr.attn_entropy.push(entropy / (c.heads * t) as f64);
                tr.ms_min.push(ms_min_attn.min(ms_min_mlp));
                tr.xhat_mean.push(xhat_mean);
            }
        }
        cache.len = total;
        Ok(h)
    }
}

/// Rows per parallel task of [`linear`]: fixed, so results do not depend on
/// the thread count.
const ROWS_PER_TASK: usize = 128;

/// Outputs per parallel task of the one-row case (fixed for the same reason).
const OUTS_PER_TASK: usize = 64;

/// `y = x W^T` in row blocks over rayon's current pool. One row (a
/// generation step) is a matrix-vector product: each output is one dot
/// product with a row of W, read once and straight from memory, where the
/// matmul kernel would first copy (pack) all of W.
pub(super) fn linear(x: &[f32], w: &[f32], rows: usize, d_in: usize, d_out: usize, y: &mut [f32]) {
    debug_assert_eq!(x.len(), rows * d_in);
    if rows == 1 {
        y.par_chunks_mut(OUTS_PER_TASK)
            .zip(w.par_chunks(OUTS_PER_TASK * d_in))
            .for_each(|(yc, wc)| dot_rows(x, wc, yc));
        return;
    }
    y.par_chunks_mut(ROWS_PER_TASK * d_out)
        .zip(x.par_chunks(ROWS_PER_TASK * d_in))
        .for_each(|(yc, xc)| linear_forward(xc, w, None, xc.len() / d_in, d_in, d_out, yc));
}

crate::kernels::multiversion! {
    /// `y[j] = x . w[j]` for the rows of `w` (accumulated in f64), the
    /// next row prefetched while one is summed.
    fn dot_rows(x: &[f32], w: &[f32], y: &mut [f32]) {
        let d = x.len();
        for (j, yj) in y.iter_mut().enumerate() {
            let row = &w[j * d..(j + 1) * d];
            let next = w.get((j + 1) * d..(j + 2) * d).unwrap_or(&[]);
            *yj = simd::dot(x, row, &[], next) as f32;
        }
    }
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

/// Rotate adjacent pairs (2i, 2i+1) of each head (llama.cpp's row order).
fn apply_rope(x: &mut [f32], t: usize, heads: usize, hd: usize, cos: &[f32], sin: &[f32]) {
    let half = hd / 2;
    for p in 0..t {
        for h in 0..heads {
            let row = &mut x[(p * heads + h) * hd..(p * heads + h + 1) * hd];
            for i in 0..half {
                let (c, s) = (cos[p * half + i], sin[p * half + i]);
                let (a, b) = (row[2 * i], row[2 * i + 1]);
                row[2 * i] = a * c - b * s;
                row[2 * i + 1] = a * s + b * c;
            }
        }
    }
}
