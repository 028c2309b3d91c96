//! Per-head views of the attention activations, RoPE (its cos/sin table
//! and the rotation, in either pairing) and the largest causal logit of a
//! set of queries and keys: shared by the forward pass and the trace that
//! recomputes logits without QK-Norm.

use crate::kernels::matmul::{gemm, Mat};
pub(super) use crate::nn::rope::{apply_rope, rope_table};
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
