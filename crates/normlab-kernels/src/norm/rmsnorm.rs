//! Fused RMSNorm and zero-centred RMSNorm forward and backward over a chunk
//! of rows. The two differ only in the gain: `gain = offset + w` with
//! offset 0 (RMSNorm, w init 1) or 1 (zero-centred, w init 0).
//!
//! Forward, per row: `rstd = 1/sqrt(mean(x^2) + eps)` (sum in f64; for
//! 16-bit rows f32 partials, see [`Elem::F32_SUMS`]),
//! `y = x * rstd * (offset + w)`.
//!
//! Backward, with xhat = x * rstd and g = dy * (offset + w):
//!
//! ```text
//! dx  = rstd * (g - xhat * mean(g * xhat))
//! dw += dy * xhat
//! ```
//!
//! Generic over the storage type of x, y, dy, dx ([`Elem`]: f32, bf16, f16;
//! values widened to f32 as they are loaded, rounded once as stored).
//!
//! Two sweeps per row, statistics then output; at the AVX-512 levels the
//! statistics sweep of row r + 1 runs inside the output sweep of row r
//! (`simd::x86::map_row_summing`, `simd::x86::fold_row`), the same
//! operations, so the same bits.
//!
//! No mean is subtracted, which is why RMSNorm is invariant to x -> a*x but
//! not to x -> x + c, and why it needs one reduction fewer than LayerNorm.

use crate::norm::STATS;
use crate::norm::{GainForm, KindSpec, ParamInit, ParamLen, ParamRole, ParamSpec, GAMMA};
use crate::simd::{
    ahead, ahead_from, f32_chunks, stream_fence, sum_squares, tree_sum, Acc, Elem, LANES,
};

/// RMSNorm's description: gamma per feature, eps 1e-6.
pub const SPEC: KindSpec = KindSpec {
    name: "rmsnorm",
    aliases: &["rms", "rms_norm"],
    formula: "y = gamma * x / sqrt(mean(x^2) + eps)",
    default_eps: 1e-6,
    params: &[GAMMA],
    gain: GainForm::PerFeature { offset: 0.0 },
    row_wise: true,
    elementwise: false,
};

/// Zero-centred RMSNorm's description: w per feature (init 0), gain 1 + w.
pub const ZERO_CENTRED_SPEC: KindSpec = KindSpec {
    name: "zrmsnorm",
    aliases: &["zrms", "zero_centered_rmsnorm", "zero-centred-rmsnorm"],
    formula: "y = (1 + w) * x / sqrt(mean(x^2) + eps)",
    default_eps: 1e-6,
    params: &[ParamSpec {
        suffix: "weight",
        role: ParamRole::Gain,
        len: ParamLen::PerFeature,
        init: ParamInit::Const(0.0),
    }],
    gain: GainForm::PerFeature { offset: 1.0 },
    row_wise: true,
    elementwise: false,
};

/// `1/sqrt(mean(x^2) + eps)` from a row's sum of squares (0 where that is
/// 0, NaN where it is NaN).
#[inline(always)]
fn rstd_of(ss: f64, d: usize, eps: f32) -> f32 {
    let denom = ss / d as f64 + eps as f64;
    if denom > 0.0 {
        (1.0 / denom.sqrt()) as f32
    } else if denom == 0.0 {
        0.0
    } else {
        f32::NAN
    }
}

crate::multiversion! {
    /// Forward over whole rows. At the AVX-512 levels [`x86::forward_rows`]:
    /// the same operations, each row's sums folded into the previous row's
    /// output sweep.
    pub fn forward_rows<T: Elem>(d: usize, eps: f32, offset: f32, stream: bool, x: &[T], w: &[f32], y: &mut [T], stats: &mut [f32]) {
        let w = &w[..d];
        #[cfg(target_arch = "x86_64")]
        if crate::simd::level().has_avx512() {
            // SAFETY: the level says AVX-512 F is present.
            unsafe { x86::forward_rows::<T, T::Sums>(d, eps, offset, stream, x, w, y, stats) };
            if stream {
                stream_fence();
            }
            return;
        }
        for (r, ((xr, yr), st)) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).zip(stats.chunks_exact_mut(STATS)).enumerate() {
            let rstd = rstd_of(sum_squares(xr, ahead(x, r * d)), d, eps);
            st[..3].copy_from_slice(&[0.0, 0.0, rstd]);
            crate::write_row!(yr, stream, (xr, w) => xr * rstd * (offset + w));
        }
        if stream {
            stream_fence();
        }
    }
}

/// The `sum(g * xhat)` terms of one block, g = dy * (offset + w).
#[inline(always)]
fn gx_terms<A: Acc>(
    x: &[f32; LANES],
    dy: &[f32; LANES],
    w: &[f32; LANES],
    offset: f32,
    rstd: f32,
    sgx: &mut [A; LANES],
) {
    for i in 0..LANES {
        sgx[i] += A::of(dy[i] * (offset + w[i]) * (x[i] * rstd));
    }
}

/// The gain gradient terms of one block, dy * xhat.
#[inline(always)]
fn dw_terms(x: &[f32; LANES], dy: &[f32; LANES], rstd: f32, pw: &mut [f32; LANES]) {
    for i in 0..LANES {
        pw[i] += dy[i] * (x[i] * rstd);
    }
}

/// Sweep 1 of the backward: `sum(g * xhat)` in `A` lanes ([`gx_terms`];
/// f64 over a whole f32 row, f32 over one [`crate::simd::F32_CHUNK`] of a
/// 16-bit row) and the gain gradient ([`dw_terms`]). At the AVX-512 levels
/// [`x86::GxSums`], the same operations as vector instructions.
#[inline(always)]
fn gx_sweep<T: Elem, A: Acc>(
    x: &[T],
    dy: &[T],
    w: &[f32],
    pw: &mut [f32],
    (ax, ady): (&[T], &[T]),
    (offset, rstd): (f32, f32),
) -> A {
    let mut sgx = [A::default(); LANES];
    crate::for_blocks!(pad: 0.0, ahead: [ax, ady], xb in x, dyb in dy, wb in w; mut pwb in pw => {
        gx_terms(xb, dyb, wb, offset, rstd, &mut sgx);
        dw_terms(xb, dyb, rstd, pwb);
    });
    tree_sum(&sgx)
}

/// The sweeps as AVX-512 intrinsics for every storage type, the same
/// operations per element as the portable code (so the same bits): LLVM
/// compiled `write_row!`'s and `for_blocks!`'s `[f32; 16]` blocks into
/// 128-bit instructions, and for 16-bit rows into per-block conversions
/// through memory.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{gx_sum_checked, rstd_of, STATS};
    use crate::simd::sums::sum_squares_from;
    use crate::simd::x86::row_acc::{Partial, SumSq};
    use crate::simd::x86::{
        avx512_fn, dx_row, fold_backward, fold_row, map_row, map_row_summing, RowFold, VecAcc,
    };
    use crate::simd::{ahead, sum_squares, Elem};
    use std::arch::x86_64::*;

    avx512_fn! {
    /// [`super::forward_rows`]: `y = x * rstd * (offset + w)` for row r
    /// while the sum of squares of row r + 1 builds up in the same sweep
    /// ([`map_row_summing`]; the last row through [`map_row`]), in `V`
    /// lanes (the storage type's [`Elem::Sums`]: f32 partials per chunk for
    /// 16-bit rows, f64 lanes for f32 rows), as [`sum_squares`], which the first row and the 16-bit rows whose
    /// partials cannot stand use.
    ///
    /// # Safety
    /// AVX-512 F must be present; with `stream`, `y` aligned as
    /// `simd::x86::map_row` asks.
    pub(super) unsafe fn forward_rows<T: Elem, V: VecAcc>(d: usize, eps: f32, offset: f32, stream: bool, x: &[T], w: &[f32], y: &mut [T], stats: &mut [f32]) {
        let ov = _mm512_set1_ps(offset);
        // As many rows as every buffer holds (the portable loop's zip).
        let rows = (x.len() / d).min(y.len() / d).min(stats.len() / STATS);
        let mut next_sum = 0.0;
        for (r, (yr, st)) in y.chunks_exact_mut(d).zip(stats.chunks_exact_mut(STATS)).enumerate().take(rows) {
            let xr = &x[r * d..(r + 1) * d];
            let ss = match r {
                0 => sum_squares(xr, ahead(x, 0)),
                _ if T::F32_SUMS => sum_squares_from(xr, ahead(x, r * d), Some(next_sum)),
                _ => next_sum,
            };
            let rstd = rstd_of(ss, d, eps);
            st[..3].copy_from_slice(&[0.0, 0.0, rstd]);
            let rv = _mm512_set1_ps(rstd);
            let out = |xv: __m512, wv: __m512| _mm512_mul_ps(_mm512_mul_ps(xv, rv), _mm512_add_ps(ov, wv));
            if r + 1 < rows {
                let next = &x[(r + 1) * d..(r + 2) * d];
                let mut s = SumSq::<V>::new();
                map_row_summing([xr, next], [w], ahead(x, (r + 1) * d), (yr, stream), &mut s, |[xv, _], [wv]| out(xv, wv));
                next_sum = s.p.t;
            } else {
                map_row([xr], [w], yr, stream, |[xv], [wv]| out(xv, wv));
            }
        }
    }
    }

    /// [`super::gx_sweep`] as a [`RowFold`]: `sum(g * xhat)` in `V` lanes,
    /// and the gain gradient.
    struct GxSums<V> {
        c: [__m512; 2],
        p: Partial<V>,
    }

    impl<V: VecAcc> GxSums<V> {
        #[inline(always)]
        unsafe fn new(offset: f32, rstd: f32) -> Self {
            let c = [_mm512_set1_ps(offset), _mm512_set1_ps(rstd)];
            GxSums {
                c,
                p: Partial::new(),
            }
        }
    }

    impl<V: VecAcc> RowFold<1, 1> for GxSums<V> {
        const CHUNK: usize = V::CHUNK;
        #[inline(always)]
        unsafe fn block(
            &mut self,
            xv: __m512,
            dyv: __m512,
            [wv]: [__m512; 1],
            [pwv]: [__m512; 1],
        ) -> [__m512; 1] {
            let [ov, rv] = self.c;
            let xhat = _mm512_mul_ps(xv, rv);
            self.p.add_f32(_mm512_mul_ps(
                _mm512_mul_ps(dyv, _mm512_add_ps(ov, wv)),
                xhat,
            ));
            [_mm512_add_ps(pwv, _mm512_mul_ps(dyv, xhat))]
        }
        #[inline(always)]
        unsafe fn end_chunk(&mut self) {
            self.p.end_chunk();
        }
    }

    avx512_fn! {
    /// [`super::backward_rows`]: the dx sweep, `dx = rstd * (dy * (offset
    /// + w) - x * rstd * mgx)`, for row r while sweep 1 of row r + 1
    /// ([`GxSums`]) runs in the same sweep ([`fold_row`]) where
    /// [`fold_backward`] says so, else after it; the sums in `V` lanes
    /// ([`Elem::Sums`]).
    ///
    /// # Safety
    /// As [`forward_rows`], for `dx`.
    pub(super) unsafe fn backward_rows<T: Elem, V: VecAcc>(d: usize, offset: f32, stream: bool, xdy: [&[T]; 2], w: &[f32], stats: &[f32], dx: &mut [T], pw: &mut [f32]) {
        let [x, dy] = xdy;
        // As many rows as every buffer holds (the portable loop's zip).
        let rows = (x.len() / d).min(dy.len() / d).min(dx.len() / d).min(stats.len() / STATS);
        let rstd = |r: usize| stats[r * STATS + 2];
        let at = |r: usize| ([&x[r * d..(r + 1) * d], &dy[r * d..(r + 1) * d]], [ahead(x, r * d), ahead(dy, r * d)]);
        if rows == 0 {
            return;
        }
        let mut next = GxSums::<V>::new(offset, rstd(0));
        let (row, ah) = at(0);
        fold_row(row, ah, [w], [&mut *pw], None, &mut next, |_, _| _mm512_setzero_ps());
        let ov = _mm512_set1_ps(offset);
        let fold = fold_backward::<T>(stream);
        for (r, dxr) in dx.chunks_exact_mut(d).enumerate().take(rows) {
            let [xr, dyr] = at(r).0;
            let total = if T::F32_SUMS { gx_sum_checked(xr, dyr, w, (offset, rstd(r)), next.p.t) } else { next.p.t };
            let (rv, mv) = (_mm512_set1_ps(rstd(r)), _mm512_set1_ps((total / d as f64) as f32));
            let f = |[xv, dyv]: [__m512; 2], [wv]: [__m512; 1]| {
                let g = _mm512_mul_ps(dyv, _mm512_add_ps(ov, wv));
                _mm512_mul_ps(rv, _mm512_sub_ps(g, _mm512_mul_ps(_mm512_mul_ps(xv, rv), mv)))
            };
            let last = r + 1 == rows;
            let prev = dx_row(fold && !last, [xr, dyr], [w], dxr, stream, f);
            if !last {
                next = GxSums::new(offset, rstd(r + 1));
                let (row, ah) = at(r + 1);
                fold_row(row, ah, [w], [&mut *pw], prev, &mut next, f);
            }
        }
    }
    }
}

/// The 16-bit backward's `sum(g * xhat)` from its f32 partials `t`, or
/// again in f64 where a partial overflowed (or the row holds inf/NaN, which
/// f64 keeps too).
#[inline(always)]
fn gx_sum_checked<T: Elem>(
    x: &[T],
    dy: &[T],
    w: &[f32],
    (offset, rstd): (f32, f32),
    t: f64,
) -> f64 {
    if t.is_finite() {
        return t;
    }
    let mut sgx = [0f64; LANES];
    crate::for_blocks!(pad: 0.0, ahead: [], xb in x, dyb in dy, wb in w => {
        gx_terms(xb, dyb, wb, offset, rstd, &mut sgx);
    });
    tree_sum(&sgx)
}

crate::multiversion! {
    /// Backward over whole rows: writes `dx`, accumulates the chunk's partial
    /// gain gradient into `pw`. At the AVX-512 levels [`x86::backward_rows`]:
    /// the same operations, each row's sweep 1 folded into the previous
    /// row's dx sweep.
    pub fn backward_rows<T: Elem>(d: usize, offset: f32, stream: bool, x: &[T], dy: &[T], w: &[f32], stats: &[f32], dx: &mut [T], pw: &mut [f32]) {
        let w = &w[..d];
        let pw = &mut pw[..d];
        #[cfg(target_arch = "x86_64")]
        if crate::simd::level().has_avx512() {
            // SAFETY: the level says AVX-512 F is present.
            unsafe { x86::backward_rows::<T, T::Sums>(d, offset, stream, [x, dy], w, stats, dx, pw) };
            if stream {
                stream_fence();
            }
            return;
        }
        let n = d as f64;
        for (r, (((xr, dyr), st), dxr)) in x.chunks_exact(d).zip(dy.chunks_exact(d)).zip(stats.chunks_exact(STATS)).zip(dx.chunks_exact_mut(d)).enumerate() {
            let rstd = st[2];
            let (ax, ady) = (ahead(x, r * d), ahead(dy, r * d));
            // Sweep 1: sum(g * xhat) and the partial gain gradient.
            let total = if T::F32_SUMS {
                let mut total = 0.0;
                for (c, e) in f32_chunks(d) {
                    let (xc, dyc, wc, pwc) = (&xr[c..e], &dyr[c..e], &w[c..e], &mut pw[c..e]);
                    let (axc, adyc) = (ahead_from(ax, c), ahead_from(ady, c));
                    total += gx_sweep::<T, f32>(xc, dyc, wc, pwc, (axc, adyc), (offset, rstd)) as f64;
                }
                gx_sum_checked(xr, dyr, w, (offset, rstd), total)
            } else {
                gx_sweep::<T, f64>(xr, dyr, w, pw, (ax, ady), (offset, rstd))
            };
            let mgx = (total / n) as f32;
            crate::write_row!(dxr, stream, (xr, dyr, w) => rstd * (dyr * (offset + w) - xr * rstd * mgx));
        }
        if stream {
            stream_fence();
        }
    }
}
