//! The row-wise norms with 16-bit storage (bf16 or f16): `x`, `y`, `dy` and
//! `dx` are 16-bit, parameters, their gradients and the per-row statistics
//! stay f32. No kernel is written again per type: each chunk of rows (the
//! same chunks as the f32 path, so results do not depend on the thread
//! count) is processed in sub-blocks of about [`SUB_ELEMS`] values that are
//! widened into f32 buffers small enough to stay in the L1 cache, run
//! through the kind's f32 kernel, and rounded back. So every statistic is
//! computed in f32 (sums in f64) from the exactly widened inputs, and the
//! 16-bit result is the f32 kernel's result rounded once: what PyTorch's
//! CPU kernels do for these types ("upcast"), as opposed to the naive mode
//! of [`crate`]'s users that rounds every intermediate.

use super::{
    check_shapes, for_chunks, for_chunks_backward, with_backward_rows, with_forward_rows, NormKind,
    STATS,
};
use crate::half16::{Half, AHEAD};

/// Values per sub-block: x and y (forward) or x, dy and dx (backward) as f32
/// take 32-48 KiB, the size of a level-1 data cache.
pub const SUB_ELEMS: usize = 4096;

/// The part of `buf` [`AHEAD`] values after `start` (empty near its end).
fn ahead<T>(buf: &[T], start: usize) -> &[T] {
    buf.get(start + AHEAD..).unwrap_or(&[])
}

/// Rows per sub-block for feature size `d` (at least one).
fn sub_rows(d: usize) -> usize {
    (SUB_ELEMS / d).max(1)
}

/// Forward of a row-wise norm on 16-bit rows: writes `y` and the f32 `stats`
/// (the same contract as [`super::forward`]).
pub fn forward<T: Half>(
    kind: NormKind,
    d: usize,
    eps: f32,
    x: &[T],
    params: &[f32],
    y: &mut [T],
    stats: &mut [f32],
) {
    check_shapes(kind, d, x, params, y, stats);
    let sub = sub_rows(d) * d;
    with_forward_rows(kind, d, eps, params, false, &mut |rows| {
        for_chunks(d, x, y, stats, |x, y, st| {
            let n = sub.min(x.len());
            let (mut xs, mut ys) = (vec![0f32; n], vec![0f32; n]);
            for (k, ((xb, yb), sb)) in x
                .chunks(sub)
                .zip(y.chunks_mut(sub))
                .zip(st.chunks_mut(sub / d * STATS))
                .enumerate()
            {
                let m = xb.len();
                T::widen(xb, &mut xs[..m], ahead(x, k * sub));
                rows(&xs[..m], &mut ys[..m], sb);
                T::narrow(&ys[..m], yb);
            }
        })
    });
}

/// Backward of a row-wise norm on 16-bit rows: writes `dx`, accumulates the
/// f32 `dparams` (the same contract as [`super::backward`], with the same
/// scratch length).
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Half>(
    kind: NormKind,
    d: usize,
    x: &[T],
    dy: &[T],
    params: &[f32],
    stats: &[f32],
    dx: &mut [T],
    dparams: &mut [f32],
    scratch: &mut [f32],
) {
    check_shapes(kind, d, x, params, dx, stats);
    assert_eq!(dy.len(), x.len(), "dy length");
    let np = kind.num_params(d);
    let sub = sub_rows(d) * d;
    with_backward_rows(kind, d, params, false, &mut |rows| {
        for_chunks_backward(
            d,
            np,
            x,
            dy,
            stats,
            dx,
            dparams,
            scratch,
            |x, dy, st, dx, p| {
                let n = sub.min(x.len());
                let (mut xs, mut dys, mut dxs) = (vec![0f32; n], vec![0f32; n], vec![0f32; n]);
                for (k, (((xb, dyb), sb), dxb)) in x
                    .chunks(sub)
                    .zip(dy.chunks(sub))
                    .zip(st.chunks(sub / d * STATS))
                    .zip(dx.chunks_mut(sub))
                    .enumerate()
                {
                    let m = xb.len();
                    T::widen(xb, &mut xs[..m], ahead(x, k * sub));
                    T::widen(dyb, &mut dys[..m], ahead(dy, k * sub));
                    rows(&xs[..m], &dys[..m], sb, &mut dxs[..m], p);
                    T::narrow(&dxs[..m], dxb);
                }
            },
        )
    });
}
