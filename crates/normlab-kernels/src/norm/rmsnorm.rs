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
//! No mean is subtracted, which is why RMSNorm is invariant to x -> a*x but
//! not to x -> x + c, and why it needs one reduction fewer than LayerNorm.

use crate::norm::STATS;
use crate::norm::{GainForm, KindSpec, ParamInit, ParamLen, ParamRole, ParamSpec, GAMMA};
use crate::simd::{
    ahead, ahead_from, f32_chunks, stream_fence, sum_squares, sum_squares2, tree_sum, Acc, Elem,
    LANES,
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

crate::multiversion! {
    /// Forward over whole rows.
    pub fn forward_rows<T: Elem>(d: usize, eps: f32, offset: f32, stream: bool, x: &[T], w: &[f32], y: &mut [T], stats: &mut [f32]) {
        let w = &w[..d];
        let rows = x.len() / d;
        let mut r0 = 0;
        while r0 < rows {
            // 16-bit rows two at a time (sum_squares2: the same bits).
            let n = if T::F32_SUMS && r0 + 1 < rows { 2 } else { 1 };
            let sums = if n == 2 {
                sum_squares2([&x[r0 * d..(r0 + 1) * d], &x[(r0 + 1) * d..(r0 + 2) * d]], [ahead(x, r0 * d), ahead(x, (r0 + 1) * d)])
            } else {
                [sum_squares(&x[r0 * d..(r0 + 1) * d], ahead(x, r0 * d)), 0.0]
            };
            for (r, ss) in (r0..r0 + n).zip(sums) {
                let (xr, yr, st) = (&x[r * d..(r + 1) * d], &mut y[r * d..(r + 1) * d], &mut stats[r * STATS..(r + 1) * STATS]);
                let denom = ss / d as f64 + eps as f64;
                let rstd = if denom > 0.0 { (1.0 / denom.sqrt()) as f32 } else if denom == 0.0 { 0.0 } else { f32::NAN };
                st[0] = 0.0;
                st[1] = 0.0;
                st[2] = rstd;
                #[cfg(target_arch = "x86_64")]
                if crate::simd::level().has_avx512() {
                    // SAFETY: the level says AVX-512 F is present.
                    unsafe { x86::write_y(xr, w, yr, (offset, rstd), stream) };
                    continue;
                }
                crate::write_row!(yr, stream, (xr, w) => xr * rstd * (offset + w));
            }
            r0 += n;
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
/// [`x86::gx_sweep`], the same operations as vector instructions.
#[inline(always)]
fn gx_sweep<T: Elem, A: Acc>(
    x: &[T],
    dy: &[T],
    w: &[f32],
    pw: &mut [f32],
    (ax, ady): (&[T], &[T]),
    (offset, rstd): (f32, f32),
) -> A {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::level().has_avx512() {
        // SAFETY: the level says AVX-512 F is present.
        return unsafe { x86::gx_sweep::<T, A::Wide>(x, dy, w, pw, (ax, ady), (offset, rstd)) };
    }
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
    use crate::simd::x86::{avx512_fn, for_row, map_row, VecAcc};
    use crate::simd::{tree_sum, Elem};
    use std::arch::x86_64::*;

    avx512_fn! {
    /// `y = x * rstd * (offset + w)`.
    ///
    /// # Safety
    /// AVX-512 F must be present; with `stream`, `y` aligned as
    /// `simd::x86::map_row` asks.
    pub(super) unsafe fn write_y<T: Elem>(x: &[T], w: &[f32], y: &mut [T], c: (f32, f32), stream: bool) {
        let (ov, rv) = (_mm512_set1_ps(c.0), _mm512_set1_ps(c.1));
        map_row([x], [w], y, stream, |[xv], [wv]| {
            _mm512_mul_ps(_mm512_mul_ps(xv, rv), _mm512_add_ps(ov, wv))
        });
    }
    }

    /// [`super::gx_sweep`] in `V` lanes.
    ///
    /// # Safety
    /// AVX-512 F must be present.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
    pub(super) unsafe fn gx_sweep<T: Elem, V: VecAcc>(
        x: &[T],
        dy: &[T],
        w: &[f32],
        pw: &mut [f32],
        (ax, ady): (&[T], &[T]),
        (offset, rstd): (f32, f32),
    ) -> V::Lane {
        let (ov, rv) = (_mm512_set1_ps(offset), _mm512_set1_ps(rstd));
        let mut sgx = V::zero();
        for_row([x, dy], [w], [ax, ady], [pw], |[xv, dyv], [wv], [pwv]| {
            let xhat = _mm512_mul_ps(xv, rv);
            sgx.add(_mm512_mul_ps(
                _mm512_mul_ps(dyv, _mm512_add_ps(ov, wv)),
                xhat,
            ));
            [_mm512_add_ps(pwv, _mm512_mul_ps(dyv, xhat))]
        });
        tree_sum(&sgx.lanes())
    }

    avx512_fn! {
    /// `dx = rstd * (dy * (offset + w) - x * rstd * mgx)`.
    ///
    /// # Safety
    /// As [`write_y`].
    pub(super) unsafe fn write_dx<T: Elem>(x: &[T], dy: &[T], w: &[f32], dx: &mut [T], c: (f32, f32, f32), stream: bool) {
        let (offset, rstd, mgx) = c;
        let (ov, rv, mv) = (
            _mm512_set1_ps(offset),
            _mm512_set1_ps(rstd),
            _mm512_set1_ps(mgx),
        );
        map_row([x, dy], [w], dx, stream, |[xv, dyv], [wv]| {
            let g = _mm512_mul_ps(dyv, _mm512_add_ps(ov, wv));
            _mm512_mul_ps(
                rv,
                _mm512_sub_ps(g, _mm512_mul_ps(_mm512_mul_ps(xv, rv), mv)),
            )
        });
    }
    }
}

crate::multiversion! {
    /// Backward over whole rows: writes `dx`, accumulates the chunk's partial
    /// gain gradient into `pw`.
    pub fn backward_rows<T: Elem>(d: usize, offset: f32, stream: bool, x: &[T], dy: &[T], w: &[f32], stats: &[f32], dx: &mut [T], pw: &mut [f32]) {
        let w = &w[..d];
        let pw = &mut pw[..d];
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
                if !total.is_finite() {
                    // An f32 partial overflowed (or the row holds inf/NaN,
                    // which f64 keeps too): the sum again, in f64.
                    let mut sgx = [0f64; LANES];
                    crate::for_blocks!(pad: 0.0, ahead: [], xb in xr, dyb in dyr, wb in w => {
                        gx_terms(xb, dyb, wb, offset, rstd, &mut sgx);
                    });
                    total = tree_sum(&sgx);
                }
                total
            } else {
                gx_sweep::<T, f64>(xr, dyr, w, pw, (ax, ady), (offset, rstd))
            };
            let mgx = (total / n) as f32;
            #[cfg(target_arch = "x86_64")]
            if crate::simd::level().has_avx512() {
                // SAFETY: the level says AVX-512 F is present.
                unsafe { x86::write_dx(xr, dyr, w, dxr, (offset, rstd, mgx), stream) };
                continue;
            }
            crate::write_row!(dxr, stream, (xr, dyr, w) => rstd * (dyr * (offset + w) - xr * rstd * mgx));
        }
        if stream {
            stream_fence();
        }
    }
}
