//! 16-bit storage (bf16, f16) for the row-wise norms. `x`, `y`, `dy` and
//! `dx` are 16-bit; parameters, their gradients and the per-row statistics
//! stay f32. No kernel is written again per type:
//!
//! - layernorm, rmsnorm and zrmsnorm are generic over the storage type
//!   ([`crate::simd::Elem`]): each value is widened to f32 as it is loaded
//!   and rounded once as it is stored, in the same fused sweeps as f32, so
//!   they move half the bytes;
//! - the other kinds' kernels are f32 only; [`via_f32`] runs them on 16-bit
//!   rows by widening sub-blocks of about [`SUB_ELEMS`] values into f32
//!   buffers small enough to stay in the level-1 cache and rounding the
//!   result back (the same values, with two extra passes over cached data).
//!
//! Either way every statistic is computed in f32 from exactly widened
//! inputs and each 16-bit output is an f32 computation rounded once: what
//! PyTorch's CPU kernels do for these types ("upcast"), as opposed to the
//! naive mode of `normlab calc --naive` and `exp precision`, which rounds
//! every intermediate. The fused kernels sum 16-bit rows in f32 partials
//! joined in f64 ([`crate::simd::Elem::F32_SUMS`]; f64 where f32 cannot
//! hold the sums), the sub-block path in f64 as f32 does. Chunks are the
//! f32 path's, so results do
//! not depend on the thread count.

use super::STATS;
use crate::simd::{ahead, Elem};

/// Values per sub-block of [`via_f32`]: x and y (forward) or x, dy and dx
/// (backward) as f32 take 32-48 KiB, the size of a level-1 data cache.
pub const SUB_ELEMS: usize = 4096;

/// An f32-only forward over rows: `(x, y, stats, in_place)`.
type F32Forward<'a> = dyn Fn(&[f32], &mut [f32], &mut [f32], bool) + 'a;

/// An f32-only backward over rows: `(x, dy, stats, dx, partial dparams,
/// in_place)`.
type F32Backward<'a> = dyn Fn(&[f32], &[f32], &[f32], &mut [f32], &mut [f32], bool) + 'a;

/// Rows per sub-block for feature size `d` (at least one).
fn sub_rows(d: usize) -> usize {
    (SUB_ELEMS / d).max(1)
}

/// An f32-only forward `f(x, y, stats, in_place)` over rows of any storage
/// type: in place for f32 (`in_place` true), else through widened
/// sub-blocks.
pub(crate) fn via_f32<T: Elem>(d: usize, x: &[T], y: &mut [T], st: &mut [f32], f: &F32Forward) {
    if let (Some(x32), Some(y32)) = (T::as_f32(x), T::as_f32_mut(y)) {
        return f(x32, y32, st, true);
    }
    let sub = sub_rows(d) * d;
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
        f(&xs[..m], &mut ys[..m], sb, false);
        T::narrow(&ys[..m], yb);
    }
}

/// An f32-only backward `f(x, dy, stats, dx, partial dparams, in_place)` over rows of
/// any storage type, as [`via_f32`] (the partials accumulate across
/// sub-blocks in row order, as they do across the rows of one call).
pub(crate) fn via_f32_backward<T: Elem>(
    d: usize,
    x: &[T],
    dy: &[T],
    st: &[f32],
    dx: &mut [T],
    p: &mut [f32],
    f: &F32Backward,
) {
    if let (Some(x32), Some(dy32), Some(dx32)) = (T::as_f32(x), T::as_f32(dy), T::as_f32_mut(dx)) {
        return f(x32, dy32, st, dx32, p, true);
    }
    let sub = sub_rows(d) * d;
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
        f(&xs[..m], &dys[..m], sb, &mut dxs[..m], p, false);
        T::narrow(&dxs[..m], dxb);
    }
}
