//! The normalization-free, point-wise replacements for a norm: Dynamic Tanh
//! and Dynamic erf. Each output element depends on its own input only
//! (no statistics over the row):
//!
//! ```text
//! dyt:  y = gamma * tanh(alpha * x) + beta
//! derf: y = gamma * erf(alpha * x + s) + beta
//! ```
//!
//! with one learnable scalar `alpha` per norm (and Derf's scalar shift `s`)
//! and `gamma`, `beta` per feature.
//!
//! - DyT: Zhu, Chen, He, LeCun, Liu, "Transformers without Normalization"
//!   (CVPR 2025): alpha init 0.5 (its default; its LLM recipe uses other
//!   values per norm), gamma 1, beta 0.
//! - Derf: Chen, Lu, Zhu, Sun, Liu, "Stronger Normalization-Free
//!   Transformers" (arXiv 2512.10938); the reference code
//!   (github.com/zlab-princeton/Derf, `Dynamic_erf`) initialises alpha to
//!   0.5 (1.0 in its GPT configuration), the shift s to 0, gamma to 1 and
//!   beta to 0.
//!
//! Backward, with u = alpha x + s, t = f(u) and f' = 1 - t^2 (tanh) or
//! 2/sqrt(pi) exp(-u^2) (erf), g = dy * gamma * f'(u):
//!
//! ```text
//! dx      = alpha * g
//! dalpha += sum(g * x)      ds += sum(g)
//! dgamma += dy * t          dbeta += dy
//! ```
//!
//! Nothing is cached between the passes: backward recomputes f(u), so the
//! two passes read and write the same bytes as RMSNorm's.

use crate::act::exp;
pub use crate::norm::tanh::tanh;
use crate::norm::tanh::tanh4;
use crate::norm::{GainForm, KindSpec, ParamInit, ParamLen, ParamRole, ParamSpec, BETA, GAMMA};
use crate::simd::{ahead, prefetch_block, stream_block, tree_sum, LANES};

/// The scalar alpha, init 0.5 (a model may set another value).
pub const ALPHA: ParamSpec = ParamSpec {
    suffix: "alpha",
    role: ParamRole::Slope,
    len: ParamLen::Scalar,
    init: ParamInit::Const(0.5),
};

/// Derf's scalar shift s, init 0.
pub const SHIFT: ParamSpec = ParamSpec {
    suffix: "shift",
    role: ParamRole::Shift,
    len: ParamLen::Scalar,
    init: ParamInit::Const(0.0),
};

/// Dynamic Tanh's description: `[alpha, gamma(d), beta(d)]`.
pub const DYT_SPEC: KindSpec = KindSpec {
    name: "dyt",
    aliases: &["dynamic_tanh", "dynamic-tanh"],
    formula: "y = gamma * tanh(alpha * x) + beta (no statistics)",
    default_eps: 0.0,
    params: &[ALPHA, GAMMA, BETA],
    gain: GainForm::PerFeature { offset: 0.0 },
    row_wise: true,
    elementwise: true,
};

/// Dynamic erf's description: `[alpha, s, gamma(d), beta(d)]`.
pub const DERF_SPEC: KindSpec = KindSpec {
    name: "derf",
    aliases: &["dynamic_erf", "dynamic-erf"],
    formula: "y = gamma * erf(alpha * x + s) + beta (no statistics)",
    default_eps: 0.0,
    params: &[ALPHA, SHIFT, GAMMA, BETA],
    gain: GainForm::PerFeature { offset: 0.0 },
    row_wise: true,
    elementwise: true,
};

/// The squashing function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Squash {
    /// tanh (DyT).
    Tanh,
    /// erf (Derf).
    Erf,
}

/// The Taylor coefficients of erf(u) / (2u/sqrt(pi)) in powers of u^2:
/// (-1)^n / (n! (2n+1)).
const ERF_TAYLOR: [f32; 12] = [
    1.0,
    -1.0 / 3.0,
    1.0 / 10.0,
    -1.0 / 42.0,
    1.0 / 216.0,
    -1.0 / 1320.0,
    1.0 / 9360.0,
    -1.0 / 75_600.0,
    1.0 / 685_440.0,
    -1.0 / 6_894_720.0,
    1.0 / 76_204_800.0,
    -1.0 / 918_086_400.0,
];

/// The Chebyshev-fitted polynomial in t = 1/(1 + |u|/2) of the exponent of
/// erfc(|u|) = t exp(-u^2 + P(t)) (Numerical Recipes' `erfcc`).
const ERFCC: [f32; 10] = [
    -1.265_512_2,
    1.000_023_7,
    0.374_091_96,
    0.096_784_18,
    -0.186_288_06,
    0.278_868_07,
    -1.135_204,
    1.488_515_9,
    -0.822_152_23,
    0.170_872_77,
];

/// c[0] + x (c[1] + x (c[2] + ...)), innermost first (unrolled by the
/// compiler: the coefficient arrays are constants).
#[inline(always)]
fn horner(x: f32, c: &[f32]) -> f32 {
    let (last, rest) = c.split_last().expect("coefficients");
    rest.iter().rev().fold(*last, |acc, &ci| ci + x * acc)
}

/// Below this |u| erf uses its Taylor series.
const SMALL_ERF: f32 = 1.0;

/// erf(u) to a few ulp, vectorisable: its Taylor series to u^23 for
/// |u| < 1 (truncation below 1e-9), and 1 - erfc(|u|) beyond, with erfc
/// from the Chebyshev-fitted exponential form of Numerical Recipes'
/// `erfcc` (fractional error below 1.2e-7, so below 2e-8 absolute here).
#[inline(always)]
pub fn erf(u: f32) -> f32 {
    let a = u.abs();
    let z = u * u;
    // 2/sqrt(pi) * sum (-1)^n u^(2n+1) / (n! (2n+1)), n = 0..=11
    let series = std::f32::consts::FRAC_2_SQRT_PI * u * horner(z, &ERF_TAYLOR);
    let t = 1.0 / (1.0 + 0.5 * a);
    let poly = horner(t, &ERFCC);
    let erfc = t * exp(-a * a + poly);
    let big = (1.0 - erfc).copysign(u);
    if a < SMALL_ERF {
        series
    } else {
        big
    }
}

/// A point-wise norm's per-element forward and backward, as a type (so
/// each kernel is compiled for one function, with nothing to decide per
/// element).
trait SquashFn {
    /// `y = gamma * f(u) + beta`.
    fn y(alpha: f32, s: f32, x: f32, gamma: f32, beta: f32) -> f32;
    /// Returns `dx`; adds this element's terms into the partial sums of
    /// `(sum(g x), sum(g), dgamma, dbeta)`.
    fn grads(
        alpha: f32,
        s: f32,
        x_dy_gamma: (f32, f32, f32),
        acc: (&mut f32, &mut f32, &mut f32, &mut f32),
    ) -> f32;
}

/// DyT, with fused multiply-adds (u = alpha x, so s = 0 is not added;
/// `x86` evaluates the same operations on 16 lanes).
struct TanhFn;
/// Derf.
struct ErfFn;

impl SquashFn for TanhFn {
    #[inline(always)]
    fn y(alpha: f32, _: f32, x: f32, gamma: f32, beta: f32) -> f32 {
        gamma.mul_add(tanh4((4.0 * alpha) * x), beta)
    }
    #[inline(always)]
    fn grads(
        alpha: f32,
        _: f32,
        (x, dy, gamma): (f32, f32, f32),
        (sa, _, pg, pb): (&mut f32, &mut f32, &mut f32, &mut f32),
    ) -> f32 {
        let t = tanh4((4.0 * alpha) * x);
        let g = dy * gamma * (-t).mul_add(t, 1.0);
        *sa = g.mul_add(x, *sa);
        *pg = dy.mul_add(t, *pg);
        *pb += dy;
        alpha * g
    }
}

impl SquashFn for ErfFn {
    #[inline(always)]
    fn y(alpha: f32, s: f32, x: f32, gamma: f32, beta: f32) -> f32 {
        gamma * erf(alpha * x + s) + beta
    }
    #[inline(always)]
    fn grads(
        alpha: f32,
        s: f32,
        (x, dy, gamma): (f32, f32, f32),
        (sa, ss, pg, pb): (&mut f32, &mut f32, &mut f32, &mut f32),
    ) -> f32 {
        let u = alpha * x + s;
        // exp clamps its input at -87: cut the derivative to exactly 0
        // there (f64 gives 0 too), which also keeps subnormal numbers out
        // of the gradients.
        let z = u * u;
        let e = std::f32::consts::FRAC_2_SQRT_PI * exp(-z);
        let fp = if z > 87.0 { 0.0 } else { e };
        let g = dy * gamma * fp;
        *sa += g * x;
        *ss += g;
        *pg += dy * erf(u);
        *pb += dy;
        alpha * g
    }
}

/// |u| beyond which tanh and erf count as saturated (tanh'(2) = 0.07,
/// erf'(2) = 0.02). The kernels do not count it (a count in the forward
/// pass cost 20-30% of it); `normlab::nn::Norm` does, on the passes a
/// trainer diagnoses.
pub const SATURATED: f32 = 2.0;

/// The scalar gradients (alpha, s) sum over every element: in f32 lane
/// partials over chunks of this many columns (vectorised, at most 64 terms
/// per lane), then in f64 across chunks and rows. f64 lanes throughout cost
/// DyT's backward half its speed (14.9 vs 9.6 ms at 8192x1024).
const SUM_CHUNK: usize = 1024;

/// The layout of a point-wise norm's flat parameters: `(alpha, s, gamma,
/// beta)` offsets; Derf has the shift at 1, DyT none (s = 0).
fn layout(f: Squash, d: usize) -> (usize, Option<usize>, usize, usize) {
    match f {
        Squash::Tanh => (0, None, 1, 1 + d),
        Squash::Erf => (0, Some(1), 2, 2 + d),
    }
}

#[inline(always)]
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn forward_body<F: SquashFn>(
    d: usize,
    f: Squash,
    stream: bool,
    x: &[f32],
    params: &[f32],
    y: &mut [f32],
    stats: &mut [f32],
) {
    let (ia, is, ig, ib) = layout(f, d);
    let alpha = params[ia];
    let s = is.map_or(0.0, |i| params[i]);
    let (gamma, beta) = (&params[ig..ig + d], &params[ib..ib + d]);
    for (r, ((xr, yr), st)) in x
        .chunks_exact(d)
        .zip(y.chunks_exact_mut(d))
        .zip(stats.chunks_exact_mut(crate::norm::STATS))
        .enumerate()
    {
        st.copy_from_slice(&[0.0, 0.0, 1.0]);
        #[cfg(target_arch = "x86_64")]
        if f == Squash::Tanh && crate::simd::level().has_avx512() {
            let ax = ahead(x, r * d);
            // SAFETY: the level says AVX-512 F is present.
            unsafe { x86::write_y_tanh([xr, gamma, beta], ax, yr, alpha, stream) };
            continue;
        }
        crate::write_row!(yr, stream, (xr, gamma, beta) => F::y(alpha, s, xr, gamma, beta));
    }
    if stream {
        crate::simd::stream_fence();
    }
}

/// One block of the backward: `dx` into `out`, the scalar-gradient terms
/// into `sa`/`ss`, the per-feature ones into `pg`/`pb`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn backward_block<F: SquashFn>(
    (alpha, s): (f32, f32),
    x: &[f32; LANES],
    dy: &[f32; LANES],
    gamma: &[f32; LANES],
    out: &mut [f32; LANES],
    (sa, ss): (&mut [f32; LANES], &mut [f32; LANES]),
    pg: &mut [f32; LANES],
    pb: &mut [f32; LANES],
) {
    for i in 0..LANES {
        let acc = (&mut sa[i], &mut ss[i], &mut pg[i], &mut pb[i]);
        out[i] = F::grads(alpha, s, (x[i], dy[i], gamma[i]), acc);
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn backward_body<F: SquashFn>(
    d: usize,
    f: Squash,
    stream: bool,
    x: &[f32],
    dy: &[f32],
    params: &[f32],
    dx: &mut [f32],
    p: &mut [f32],
) {
    let (ia, is, ig, _) = layout(f, d);
    let alpha = params[ia];
    let s = is.map_or(0.0, |i| params[i]);
    let gamma = &params[ig..ig + d];
    let (mut dalpha, mut ds) = (0f64, 0f64);
    let (head, rest) = p.split_at_mut(ig);
    let (pg, pb) = rest.split_at_mut(d);
    let pb = &mut pb[..d];
    for (r, ((xr, dyr), dxr)) in x
        .chunks_exact(d)
        .zip(dy.chunks_exact(d))
        .zip(dx.chunks_exact_mut(d))
        .enumerate()
    {
        for c0 in (0..d).step_by(SUM_CHUNK) {
            let c1 = (c0 + SUM_CHUNK).min(d);
            let (ax, ady) = (ahead(x, r * d + c0), ahead(dy, r * d + c0));
            #[cfg(target_arch = "x86_64")]
            if f == Squash::Tanh && crate::simd::level().has_avx512() {
                // SAFETY: the level says AVX-512 F is present.
                let sa = unsafe {
                    x86::tanh_backward(
                        [&xr[c0..c1], &dyr[c0..c1], &gamma[c0..c1]],
                        [ax, ady],
                        [&mut pg[c0..c1], &mut pb[c0..c1]],
                        (&mut dxr[c0..c1], stream),
                        alpha,
                    )
                };
                dalpha += f64::from(tree_sum(&sa));
                continue;
            }
            let mut sa = [0f32; LANES];
            let mut ss = [0f32; LANES];
            // Full blocks write dx whole (streaming when asked, as the row
            // norms do: dx is as large as x), the tail through a padded
            // block; the order of every sum is the same either way.
            let full = c0 + (c1 - c0) / LANES * LANES;
            let mut step = |xb: &[f32; LANES],
                            dyb: &[f32; LANES],
                            gb: &[f32; LANES],
                            pgb: &mut [f32; LANES],
                            pbb: &mut [f32; LANES]| {
                let mut out = [0f32; LANES];
                backward_block::<F>(
                    (alpha, s),
                    xb,
                    dyb,
                    gb,
                    &mut out,
                    (&mut sa, &mut ss),
                    pgb,
                    pbb,
                );
                out
            };
            let mut j = c0;
            while j < full {
                prefetch_block(ax, j - c0);
                prefetch_block(ady, j - c0);
                let block = |v: &[f32]| -> [f32; LANES] { v[j..j + LANES].try_into().unwrap() };
                let (xb, dyb, gb) = (block(xr), block(dyr), block(gamma));
                let pgb: &mut [f32; LANES] = (&mut pg[j..j + LANES]).try_into().unwrap();
                let pbb: &mut [f32; LANES] = (&mut pb[j..j + LANES]).try_into().unwrap();
                let out = step(&xb, &dyb, &gb, pgb, pbb);
                if stream {
                    stream_block(&mut dxr[j..], &out);
                } else {
                    dxr[j..j + LANES].copy_from_slice(&out);
                }
                j += LANES;
            }
            if full < c1 {
                let t = c1 - full;
                let pad = |v: &[f32]| {
                    let mut b = [0f32; LANES];
                    b[..t].copy_from_slice(&v[full..c1]);
                    b
                };
                let (xb, dyb, gb) = (pad(xr), pad(dyr), pad(gamma));
                let (mut pgb, mut pbb) = (pad(pg), pad(pb));
                let out = step(&xb, &dyb, &gb, &mut pgb, &mut pbb);
                dxr[full..c1].copy_from_slice(&out[..t]);
                pg[full..c1].copy_from_slice(&pgb[..t]);
                pb[full..c1].copy_from_slice(&pbb[..t]);
            }
            dalpha += f64::from(tree_sum(&sa));
            ds += f64::from(tree_sum(&ss));
        }
    }
    if stream {
        crate::simd::stream_fence();
    }
    head[ia] += dalpha as f32;
    if let Some(i) = is {
        head[i] += ds as f32;
    }
}

/// DyT's sweeps as AVX-512 intrinsics, the portable code's operations per
/// element (so the same bits): the tanh table lookup as `vpermt2ps`.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use crate::norm::tanh::x86::Tanh;
    use crate::simd::x86::{for_row_out, lanes};
    use crate::simd::LANES;
    use std::arch::x86_64::*;

    /// DyT's forward row: `y = gamma * tanh(alpha * x) + beta`, `x`
    /// prefetched from `ax` (the row is read once, unlike the row norms').
    ///
    /// # Safety
    /// AVX-512 F must be present; with `stream`, `y` must start 16-byte aligned.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
    pub(super) unsafe fn write_y_tanh(
        [x, gamma, beta]: [&[f32]; 3],
        ax: &[f32],
        y: &mut [f32],
        alpha: f32,
        stream: bool,
    ) {
        let (th, a4) = (Tanh::new(), _mm512_set1_ps(4.0 * alpha));
        for_row_out(
            [x],
            [gamma, beta],
            [ax],
            [],
            (y, stream),
            |[xv], [gv, bv], []| (_mm512_fmadd_ps(gv, th.eval(_mm512_mul_ps(a4, xv)), bv), []),
        );
    }

    /// DyT's backward over one chunk of a row (`super::backward_block`'s
    /// operations): writes `dx`, adds into `pg`, `pb`, and returns the lane
    /// partials of `sum(g * x)`.
    ///
    /// # Safety
    /// As [`write_y_tanh`], for `dx`.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
    pub(super) unsafe fn tanh_backward(
        [x, dy, gamma]: [&[f32]; 3],
        [ax, ady]: [&[f32]; 2],
        [pg, pb]: [&mut [f32]; 2],
        dx: (&mut [f32], bool),
        alpha: f32,
    ) -> [f32; LANES] {
        let (th, av, one) = (Tanh::new(), _mm512_set1_ps(alpha), _mm512_set1_ps(1.0));
        let a4 = _mm512_set1_ps(4.0 * alpha);
        let mut sa = _mm512_setzero_ps();
        for_row_out(
            [x, dy],
            [gamma],
            [ax, ady],
            [pg, pb],
            dx,
            |[xv, dyv], [gv], [pgv, pbv]| {
                let t = th.eval(_mm512_mul_ps(a4, xv));
                let g = _mm512_mul_ps(_mm512_mul_ps(dyv, gv), _mm512_fnmadd_ps(t, t, one));
                sa = _mm512_fmadd_ps(g, xv, sa);
                (
                    _mm512_mul_ps(av, g),
                    [_mm512_fmadd_ps(dyv, t, pgv), _mm512_add_ps(pbv, dyv)],
                )
            },
        );
        lanes(sa)
    }
}

crate::multiversion! {
    /// Forward over whole rows. `stats` rows are written as `[share of the
    /// row's inputs with |alpha x + s| > 2, 0, 1]` (backward reads none).
    pub fn forward_rows(d: usize, f: Squash, stream: bool, x: &[f32], params: &[f32], y: &mut [f32], stats: &mut [f32]) {
        match f {
            Squash::Tanh => forward_body::<TanhFn>(d, f, stream, x, params, y, stats),
            Squash::Erf => forward_body::<ErfFn>(d, f, stream, x, params, y, stats),
        }
    }
}

crate::multiversion! {
    /// Backward over whole rows: writes `dx`, accumulates the chunk's
    /// partial parameter gradients into `p` (same layout as the parameters).
    pub fn backward_rows(d: usize, f: Squash, stream: bool, x: &[f32], dy: &[f32], params: &[f32], dx: &mut [f32], p: &mut [f32]) {
        match f {
            Squash::Tanh => backward_body::<TanhFn>(d, f, stream, x, dy, params, dx, p),
            Squash::Erf => backward_body::<ErfFn>(d, f, stream, x, dy, params, dx, p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tanh_and_erf_are_accurate_near_zero_and_beyond() {
        assert!(tanh(f32::NAN).is_nan());
        assert_eq!(tanh(-0.0).to_bits(), (-0f32).to_bits());
        for big in [8.0f32, 9.0, 9.25, 1e30, f32::INFINITY] {
            let t = tanh(big);
            assert!(
                (t as f64 - (big as f64).tanh()).abs() < 1.7e-7,
                "tanh({big}) = {t}"
            );
            assert_eq!(tanh(-big), -t);
        }
        assert_eq!(tanh(9.25), 1.0);
        for k in -4000..=4000 {
            let u = k as f32 * 1e-3;
            for &v in &[u, u * 1e-4, u * 3.0] {
                let t = tanh(v) as f64;
                let want = (v as f64).tanh();
                assert!(
                    (t - want).abs() <= 1.7e-7 * want.abs().max(1e-30) + 1e-37,
                    "tanh({v}) = {t}, want {want}"
                );
                let e = erf(v) as f64;
                let want = libm::erf(v as f64);
                assert!(
                    (e - want).abs() <= 3e-7 * want.abs() + 1e-37,
                    "erf({v}) = {e}, want {want}"
                );
            }
        }
    }
}
