//! Fused LayerNorm forward and backward over a chunk of rows.
//!
//! Forward, per row x of length d (two sweeps over the row: one read of x
//! from memory and one write of y; at the AVX-512 levels the first sweep of
//! row r + 1 runs inside the second of row r, so that loads and stores
//! stream together, as in a copy, see `simd::x86::map_row_summing`):
//!
//! ```text
//! k          = x[0]                       (shift: keeps the variance exact)
//! s1, s2     = sum(x - k), sum((x - k)^2)  (f64, 16 accumulators; 16-bit
//!                                          rows: simd::shifted_sums)
//! mean       = k + s1/d ;  var = s2/d - (s1/d)^2   (biased)
//! rstd       = 1/sqrt(var + eps)
//! y          = ((x - mean_hi) - mean_lo) * rstd * gamma + beta
//! ```
//!
//! `mean` is kept as an f32 pair hi + lo, so `x - mean` is accurate to f32
//! precision of the *centred* value even when |mean| >> std (PyTorch rounds
//! the mean to f32 first and loses that).
//!
//! Backward, with xhat = (x - mean) * rstd and g = dy * gamma:
//!
//! ```text
//! dx      = rstd * (g - mean(g) - xhat * mean(g * xhat))
//! dgamma += dy * xhat ;  dbeta += dy
//! ```
//!
//! One sweep accumulates mean(g), mean(g*xhat) (f64) and the chunk's partial
//! dgamma/dbeta; a second sweep writes dx (at the AVX-512 levels with the
//! next row's first sweep inside it, `simd::x86::fold_row`). For 16-bit rows
//! ([`Elem::F32_SUMS`]) sum(g) and sum(g * xhat) run in f32 partials per
//! [`crate::simd::F32_CHUNK`] columns (explicit AVX-512 / AVX2 vector
//! instructions at those levels, the same operations lane by lane: LLVM
//! turned the portable sweep with two f32 accumulators into scalar code),
//! redone in f64 if a partial overflows.

use crate::norm::STATS;
use crate::norm::{GainForm, KindSpec, BETA, GAMMA};
use crate::simd::{
    ahead, ahead_from, f32_chunks, shifted_sums, stream_fence, tree_sum, Acc, Elem, LANES,
};

/// LayerNorm's description: gamma and beta per feature, eps 1e-5.
pub const SPEC: KindSpec = KindSpec {
    name: "layernorm",
    aliases: &["ln", "layer_norm"],
    formula: "y = gamma * (x - mean) / sqrt(var + eps) + beta",
    default_eps: 1e-5,
    params: &[GAMMA, BETA],
    gain: GainForm::PerFeature { offset: 0.0 },
    row_wise: true,
    elementwise: false,
};

/// Statistics of one row, (mean hi, mean lo, rstd), from its sums shifted
/// by `k` ([`shifted_sums`]).
#[inline(always)]
fn stats_of((s1, s2): (f64, f64), k: f32, d: usize, eps: f32) -> (f32, f32, f32) {
    let n = d as f64;
    let m1 = s1 / n;
    let mean = k as f64 + m1;
    let var = (s2 / n - m1 * m1).max(0.0);
    let denom = var + eps as f64;
    let rstd = if denom > 0.0 {
        (1.0 / denom.sqrt()) as f32
    } else if denom == 0.0 {
        0.0
    } else {
        f32::NAN
    };
    let hi = mean as f32;
    let lo = (mean - hi as f64) as f32;
    (hi, lo, rstd)
}

crate::multiversion! {
    /// Forward over whole rows: `x`, `y` are `[rows, d]`, `stats` `[rows,
    /// STATS]`. At the AVX-512 levels [`x86::forward_rows`]: the same
    /// operations, each row's sums folded into the previous row's output
    /// sweep.
    pub fn forward_rows<T: Elem>(d: usize, eps: f32, stream: bool, x: &[T], gamma: &[f32], beta: &[f32], y: &mut [T], stats: &mut [f32]) {
        let gamma = &gamma[..d];
        let beta = &beta[..d];
        #[cfg(target_arch = "x86_64")]
        if crate::simd::level().has_avx512() {
            // SAFETY: the level says AVX-512 F is present.
            unsafe { x86::forward_rows::<T, T::Sums>(d, eps, stream, x, (gamma, beta), y, stats) };
            if stream {
                stream_fence();
            }
            return;
        }
        for (r, ((xr, yr), st)) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).zip(stats.chunks_exact_mut(STATS)).enumerate() {
            let k = xr[0].get();
            let (hi, lo, rstd) = stats_of(shifted_sums(xr, k, ahead(x, r * d)), k, d, eps);
            st[..3].copy_from_slice(&[hi, lo, rstd]);
            crate::write_row!(yr, stream, (xr, gamma, beta) => ((xr - hi) - lo) * rstd * gamma + beta);
        }
        if stream {
            stream_fence();
        }
    }
}

/// The `sum(g)` and `sum(g * xhat)` terms of one block, g = dy * gamma.
#[inline(always)]
fn g_terms<A: Acc>(
    x: &[f32; LANES],
    dy: &[f32; LANES],
    gamma: &[f32; LANES],
    (hi, lo, rstd): (f32, f32, f32),
    sg: &mut [A; LANES],
    sgx: &mut [A; LANES],
) {
    for i in 0..LANES {
        let xhat = ((x[i] - hi) - lo) * rstd;
        let g = dy[i] * gamma[i];
        sg[i] += A::of(g);
        sgx[i] += A::of(g * xhat);
    }
}

/// The parameter gradient terms of one block: dy * xhat and dy.
#[inline(always)]
fn param_terms(
    x: &[f32; LANES],
    dy: &[f32; LANES],
    (hi, lo, rstd): (f32, f32, f32),
    pg: &mut [f32; LANES],
    pb: &mut [f32; LANES],
) {
    for i in 0..LANES {
        let xhat = ((x[i] - hi) - lo) * rstd;
        pg[i] += dy[i] * xhat;
        pb[i] += dy[i];
    }
}

/// Sweep 1 of the 16-bit backward over one [`crate::simd::F32_CHUNK`]:
/// [`g_sweep`] in f32 lanes, at the AVX2 level as explicit 8-lane
/// instructions (the same operations, so the same bits).
#[inline(always)]
fn g_sweep_f32<T: Elem>(
    x: &[T],
    dy: &[T],
    gamma: &[f32],
    pg: &mut [f32],
    pb: &mut [f32],
    (ax, ady): (&[T], &[T]),
    s: (f32, f32, f32),
) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::level() == crate::simd::Level::Avx2 {
        // SAFETY: the level says AVX2 and FMA are present.
        return unsafe { x86::g_sweep_f32_avx2(x, dy, gamma, pg, pb, (ax, ady), s) };
    }
    g_sweep::<T, f32>(x, dy, gamma, pg, pb, (ax, ady), s)
}

/// Sweep 1 of the backward: `(sum(g), sum(g * xhat))` in `A` lanes
/// ([`g_terms`]; f64 over a whole f32 row, f32 over one chunk of a 16-bit
/// row) and the parameter gradients ([`param_terms`]). At the AVX-512
/// levels [`x86::GSums`], the same operations as vector instructions.
#[inline(always)]
fn g_sweep<T: Elem, A: Acc>(
    x: &[T],
    dy: &[T],
    gamma: &[f32],
    pg: &mut [f32],
    pb: &mut [f32],
    (ax, ady): (&[T], &[T]),
    s: (f32, f32, f32),
) -> (A, A) {
    let mut sg = [A::default(); LANES];
    let mut sgx = [A::default(); LANES];
    crate::for_blocks!(pad: 0.0, ahead: [ax, ady], xb in x, dyb in dy, gb in gamma; mut pgb in pg, pbb in pb => {
        g_terms(xb, dyb, gb, s, &mut sg, &mut sgx);
        param_terms(xb, dyb, s, pgb, pbb);
    });
    (tree_sum(&sg), tree_sum(&sgx))
}

/// [`g_sweep`] and [`g_sweep_f32`] as AVX-512 and AVX2 vector instructions,
/// and the output sweeps in 512-bit registers.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{g_sums_checked, stats_of, STATS};
    use crate::simd::sums::shifted_sums_from;
    use crate::simd::x86::row_acc::{Partial, Shifted};
    use crate::simd::x86::{
        avx512_fn, dx_row, fold_backward, fold_row, halves, join, map_row, map_row_summing,
        RowFold, VecAcc,
    };
    use crate::simd::{ahead, shifted_sums, tree_sum, Elem};
    use std::arch::x86_64::*;

    /// [`super::g_sweep`] as a [`RowFold`]: `sum(g)` and `sum(g * xhat)` in
    /// `V` lanes, and the parameter gradients.
    struct GSums<V> {
        c: [__m512; 3],
        g: Partial<V>,
        gx: Partial<V>,
    }

    impl<V: VecAcc> GSums<V> {
        #[inline(always)]
        unsafe fn new(s: (f32, f32, f32)) -> Self {
            let (g, gx) = (Partial::new(), Partial::new());
            GSums {
                c: consts(s),
                g,
                gx,
            }
        }
    }

    impl<V: VecAcc> RowFold<1, 2> for GSums<V> {
        const CHUNK: usize = V::CHUNK;
        #[inline(always)]
        unsafe fn block(
            &mut self,
            xv: __m512,
            dyv: __m512,
            [gv]: [__m512; 1],
            [pgv, pbv]: [__m512; 2],
        ) -> [__m512; 2] {
            let [hv, lv, rv] = self.c;
            let xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_sub_ps(xv, hv), lv), rv);
            let g = _mm512_mul_ps(dyv, gv);
            self.g.add_f32(g);
            self.gx.add_f32(_mm512_mul_ps(g, xhat));
            [
                _mm512_add_ps(pgv, _mm512_mul_ps(dyv, xhat)),
                _mm512_add_ps(pbv, dyv),
            ]
        }
        #[inline(always)]
        unsafe fn end_chunk(&mut self) {
            self.g.end_chunk();
            self.gx.end_chunk();
        }
    }

    /// `(hi, lo, rstd)` broadcast.
    #[inline(always)]
    unsafe fn consts((hi, lo, rstd): (f32, f32, f32)) -> [__m512; 3] {
        [_mm512_set1_ps(hi), _mm512_set1_ps(lo), _mm512_set1_ps(rstd)]
    }

    avx512_fn! {
    /// [`super::forward_rows`]: the output sweep, `y = ((x - hi) - lo) *
    /// rstd * gamma + beta` as [`crate::write_row!`] computes it, in 512-bit
    /// registers, for row r while the shifted sums of row r + 1 build up in
    /// the same sweep ([`map_row_summing`]; the last row through
    /// [`map_row`]), in `V` lanes (the storage type's [`Elem::Sums`]: f32
    /// partials per chunk for 16-bit rows, f64 lanes for f32 rows), as
    /// [`shifted_sums`], which the first row and the 16-bit rows whose
    /// partials cannot stand use. LLVM compiled the macro's block for f32
    /// rows into four 128-bit chains, which left the output sweep issue-bound
    /// (LayerNorm's forward at 8192x1024 took 1.25-1.29x RMSNorm's time,
    /// 1.05-1.08x in 512-bit registers; 1 thread, 2026-12-01).
    ///
    /// # Safety
    /// AVX-512 F must be present; with `stream`, `y` must start 64-byte
    /// aligned and `d` be a multiple of 16 ([`crate::simd::should_stream`]).
    pub(super) unsafe fn forward_rows<T: Elem, V: VecAcc>(d: usize, eps: f32, stream: bool, x: &[T], params: (&[f32], &[f32]), y: &mut [T], stats: &mut [f32]) {
        let (gamma, beta) = params;
        // As many rows as every buffer holds (the portable loop's zip).
        let rows = (x.len() / d).min(y.len() / d).min(stats.len() / STATS);
        let mut next_sums = (0.0, 0.0);
        for (r, (yr, st)) in y.chunks_exact_mut(d).zip(stats.chunks_exact_mut(STATS)).enumerate().take(rows) {
            let xr = &x[r * d..(r + 1) * d];
            let k = xr[0].get();
            let sums = match r {
                0 => shifted_sums(xr, k, ahead(x, 0)),
                _ if T::F32_SUMS => shifted_sums_from(xr, k, ahead(x, r * d), Some(next_sums)),
                _ => next_sums,
            };
            let s = stats_of(sums, k, d, eps);
            st[..3].copy_from_slice(&[s.0, s.1, s.2]);
            let [hv, lv, rv] = consts(s);
            let out = |xv: __m512, gv: __m512, bv: __m512| {
                let c = _mm512_sub_ps(_mm512_sub_ps(xv, hv), lv);
                _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(c, rv), gv), bv)
            };
            if r + 1 < rows {
                let next = &x[(r + 1) * d..(r + 2) * d];
                let mut sums = Shifted::<V>::new(next[0].get());
                map_row_summing([xr, next], [gamma, beta], ahead(x, (r + 1) * d), (yr, stream), &mut sums, |[xv, _], [gv, bv]| out(xv, gv, bv));
                next_sums = sums.totals();
            } else {
                map_row([xr], [gamma, beta], yr, stream, |[xv], [gv, bv]| out(xv, gv, bv));
            }
        }
    }
    }

    avx512_fn! {
    /// [`super::backward_rows`]: the dx sweep, `dx = rstd * ((dy * gamma -
    /// mg) - ((x - hi) - lo) * rstd * mgx)` as [`crate::write_row!`]
    /// computes it, in 512-bit registers (see [`forward_rows`]), for row r
    /// while sweep 1 of row r + 1 ([`GSums`]) runs in the same sweep
    /// ([`fold_row`]) where [`fold_backward`] says so, else after it; the
    /// sums in `V` lanes ([`Elem::Sums`]).
    ///
    /// # Safety
    /// As [`forward_rows`], for `dx`.
    pub(super) unsafe fn backward_rows<T: Elem, V: VecAcc>(d: usize, stream: bool, xdy: [&[T]; 2], gamma: &[f32], stats: &[f32], dx: &mut [T], pgb: [&mut [f32]; 2]) {
        let [x, dy] = xdy;
        let [pg, pb] = pgb;
        // As many rows as every buffer holds (the portable loop's zip).
        let rows = (x.len() / d).min(dy.len() / d).min(dx.len() / d).min(stats.len() / STATS);
        let st = |r: usize| (stats[r * STATS], stats[r * STATS + 1], stats[r * STATS + 2]);
        let at = |r: usize| ([&x[r * d..(r + 1) * d], &dy[r * d..(r + 1) * d]], [ahead(x, r * d), ahead(dy, r * d)]);
        if rows == 0 {
            return;
        }
        let mut next = GSums::<V>::new(st(0));
        let (row, ah) = at(0);
        fold_row(row, ah, [gamma], [&mut *pg, &mut *pb], None, &mut next, |_, _| _mm512_setzero_ps());
        let fold = fold_backward::<T>(stream);
        for (r, dxr) in dx.chunks_exact_mut(d).enumerate().take(rows) {
            let [xr, dyr] = at(r).0;
            let s = st(r);
            let t = (next.g.t, next.gx.t);
            let (tg, tgx) = if T::F32_SUMS { g_sums_checked(xr, dyr, gamma, s, t) } else { t };
            let n = d as f64;
            let (mv, mxv) = (_mm512_set1_ps((tg / n) as f32), _mm512_set1_ps((tgx / n) as f32));
            let [hv, lv, rv] = consts(s);
            let f = |[xv, dyv]: [__m512; 2], [gv]: [__m512; 1]| {
                let g = _mm512_mul_ps(dyv, gv);
                let c = _mm512_sub_ps(_mm512_sub_ps(xv, hv), lv);
                let t = _mm512_mul_ps(_mm512_mul_ps(c, rv), mxv);
                _mm512_mul_ps(rv, _mm512_sub_ps(_mm512_sub_ps(g, mv), t))
            };
            let last = r + 1 == rows;
            let prev = dx_row(fold && !last, [xr, dyr], [gamma], dxr, stream, f);
            if !last {
                next = GSums::new(st(r + 1));
                let (row, ah) = at(r + 1);
                fold_row(row, ah, [gamma], [&mut *pg, &mut *pb], prev, &mut next, f);
            }
        }
    }
    }

    /// # Safety
    /// AVX2 and FMA must be present.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn g_sweep_f32_avx2<T: Elem>(
        x: &[T],
        dy: &[T],
        gamma: &[f32],
        pg: &mut [f32],
        pb: &mut [f32],
        (ax, ady): (&[T], &[T]),
        (hi, lo, rstd): (f32, f32, f32),
    ) -> (f32, f32) {
        let (hv, lv, rv) = (_mm256_set1_ps(hi), _mm256_set1_ps(lo), _mm256_set1_ps(rstd));
        let z = _mm256_setzero_ps();
        let (mut sg, mut sgx) = ([z, z], [z, z]);
        crate::for_blocks!(pad: 0.0, ahead: [ax, ady], xb in x, dyb in dy, gb in gamma; mut pgb in pg, pbb in pb => {
            let (xl, xh) = halves(xb);
            let (dl, dh) = halves(dyb);
            let (gl, gh) = halves(gb);
            let (pl, ph) = halves(pgb);
            let (bl, bh) = halves(pbb);
            let mut pgn = [z, z];
            let mut pbn = [z, z];
            for (h, (xv, dyv, gv, pv, bv)) in [(xl, dl, gl, pl, bl), (xh, dh, gh, ph, bh)].into_iter().enumerate() {
                let xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_sub_ps(xv, hv), lv), rv);
                let g = _mm256_mul_ps(dyv, gv);
                sg[h] = _mm256_add_ps(sg[h], g);
                sgx[h] = _mm256_add_ps(sgx[h], _mm256_mul_ps(g, xhat));
                pgn[h] = _mm256_add_ps(pv, _mm256_mul_ps(dyv, xhat));
                pbn[h] = _mm256_add_ps(bv, dyv);
            }
            *pgb = join(pgn[0], pgn[1]);
            *pbb = join(pbn[0], pbn[1]);
        });
        (
            tree_sum(&join(sg[0], sg[1])),
            tree_sum(&join(sgx[0], sgx[1])),
        )
    }
}

/// The 16-bit backward's `(sum(g), sum(g * xhat))` from its f32 partials
/// `t`, or again in f64 where a partial overflowed (or the row holds
/// inf/NaN, which f64 keeps too).
#[inline(always)]
fn g_sums_checked<T: Elem>(
    x: &[T],
    dy: &[T],
    gamma: &[f32],
    s: (f32, f32, f32),
    t: (f64, f64),
) -> (f64, f64) {
    if t.0.is_finite() && t.1.is_finite() {
        return t;
    }
    let mut sg = [0f64; LANES];
    let mut sgx = [0f64; LANES];
    crate::for_blocks!(pad: 0.0, ahead: [], xb in x, dyb in dy, gb in gamma => {
        g_terms(xb, dyb, gb, s, &mut sg, &mut sgx);
    });
    (tree_sum(&sg), tree_sum(&sgx))
}

crate::multiversion! {
    /// Backward over whole rows: writes `dx`, accumulates this chunk's
    /// dgamma/dbeta into `pg`/`pb`. At the AVX-512 levels
    /// [`x86::backward_rows`]: the same operations, each row's sweep 1
    /// folded into the previous row's dx sweep.
    pub fn backward_rows<T: Elem>(d: usize, stream: bool, x: &[T], dy: &[T], gamma: &[f32], stats: &[f32], dx: &mut [T], pg: &mut [f32], pb: &mut [f32]) {
        let gamma = &gamma[..d];
        let pg = &mut pg[..d];
        let pb = &mut pb[..d];
        #[cfg(target_arch = "x86_64")]
        if crate::simd::level().has_avx512() {
            // SAFETY: the level says AVX-512 F is present.
            unsafe { x86::backward_rows::<T, T::Sums>(d, stream, [x, dy], gamma, stats, dx, [pg, pb]) };
            if stream {
                stream_fence();
            }
            return;
        }
        let n = d as f64;
        for (r, (((xr, dyr), st), dxr)) in x.chunks_exact(d).zip(dy.chunks_exact(d)).zip(stats.chunks_exact(STATS)).zip(dx.chunks_exact_mut(d)).enumerate() {
            let s = (st[0], st[1], st[2]);
            let (ax, ady) = (ahead(x, r * d), ahead(dy, r * d));
            // Sweep 1: sum(g), sum(g * xhat), partial parameter gradients
            // (a zero-padded tail block has dy = 0 and adds nothing).
            let (tg, tgx) = if T::F32_SUMS {
                let (mut tg, mut tgx) = (0f64, 0f64);
                for (c, e) in f32_chunks(d) {
                    let (xc, dyc, gc) = (&xr[c..e], &dyr[c..e], &gamma[c..e]);
                    let (pgc, pbc) = (&mut pg[c..e], &mut pb[c..e]);
                    let (axc, adyc) = (ahead_from(ax, c), ahead_from(ady, c));
                    let (sg, sgx) = g_sweep_f32(xc, dyc, gc, pgc, pbc, (axc, adyc), s);
                    tg += sg as f64;
                    tgx += sgx as f64;
                }
                g_sums_checked(xr, dyr, gamma, s, (tg, tgx))
            } else {
                g_sweep::<T, f64>(xr, dyr, gamma, pg, pb, (ax, ady), s)
            };
            let mg = (tg / n) as f32;
            let mgx = (tgx / n) as f32;
            // Sweep 2: dx.
            let (hi, lo, rstd) = s;
            crate::write_row!(dxr, stream, (xr, dyr, gamma) => rstd * ((dyr * gamma - mg) - ((xr - hi) - lo) * rstd * mgx));
        }
        if stream {
            stream_fence();
        }
    }
}
