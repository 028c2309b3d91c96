//! Per-head views of the attention activations, RoPE (its cos/sin table
//! and the rotation, in either pairing) and the largest causal logit of a
//! set of queries and keys: shared by the forward pass and the trace that
//! recomputes logits without QK-Norm.

use super::RopePairs;
use crate::kernels::matmul::{gemm, Mat};
use rayon::prelude::*;

/// The largest causal attention logit `scale * q.k` over every head of
/// this pass's `t` queries and keys (`q` `[t, heads * hd]`, `k` `[t,
/// kv_heads * hd]`), each query seeing at most `window` keys.
pub(super) fn max_logit(
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
pub(super) fn head_view(buf: &[f32], off: usize, rows: usize, cols: usize, rs: usize) -> Mat<'_> {
    Mat {
        data: &buf[off..],
        rows,
        cols,
        rs,
        cs: 1,
    }
}

/// cos/sin of position p times frequency i for positions `start ..
/// start + t`, `[t, hd/2]`, computed in f64 (`hd`: the rotated width).
pub(super) fn rope_table(
    start: usize,
    t: usize,
    hd: usize,
    base: f64,
    scaling: Option<super::RopeScaling>,
) -> (Vec<f32>, Vec<f32>) {
    let half = hd / 2;
    let mut cos = vec![0f32; t * half];
    let mut sin = vec![0f32; t * half];
    for r in 0..t {
        let p = start + r;
        for i in 0..half {
            // As Hugging Face computes it: the inverse frequency in f32.
            let inv = 1.0 / base.powf((2 * i) as f64 / hd as f64);
            let inv = scaling.map_or(inv, |s| s.apply(inv)) as f32;
            let ang = f64::from(p as f32 * inv);
            cos[r * half + i] = ang.cos() as f32;
            sin[r * half + i] = ang.sin() as f32;
        }
    }
    (cos, sin)
}

/// Rotate the first `rot` dimensions of each `hd`-wide head (all of them
/// but for GPT-NeoX's partial rotary; none: nothing to do) by their
/// angles: adjacent pairs (2i, 2i+1) (llama.cpp's row order) or halves
/// (i, i + rot/2) (rows as trained).
pub(super) fn apply_rope(
    x: &mut [f32],
    t: usize,
    heads: usize,
    (hd, rot): (usize, usize),
    cos: &[f32],
    sin: &[f32],
    pairs: RopePairs,
) {
    let half = rot / 2;
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
