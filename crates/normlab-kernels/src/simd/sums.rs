//! The fixed-order reductions every kernel uses: a pairwise tree over the
//! `LANES` accumulators, the (shifted) sums of squares of a row in f64
//! lanes, and the f32 partial sums of 16-bit rows with their f64 fall-back;
//! at the AVX-512 levels the same sums as [`RowSums`](x86::RowSums) over one
//! [`Partial`](x86::Partial) accumulator, which the row sweeps fold in.

use super::columns::{ahead_from, f32_chunks, tree_sum};
use super::elem::Elem;
use super::level::LANES;

/// `(sum(x - k), sum((x - k)^2))` in f64, with `LANES` accumulators, for a
/// shift `k` taken from the row (`k` must be an f32 value).
/// Shifting (the "shifted data" algorithm) keeps `var = s2/n - (s1/n)^2`
/// accurate even when |mean| >> std: the cancellation error is bounded by
/// (|mean - k| / std)^2 * 2^-53, and |mean - k| <= std * sqrt(n).
///
/// For storage types with [`Elem::F32_SUMS`] the sums run in f32 partials,
/// redone in f64 where `sum((x - k)^2)` cannot stand ([`f32_sum_ok`]), and
/// redone around the f32 mean where the shift lies more than 4 standard
/// deviations from it (the cancellation would then cost more than f32's
/// partials can spare; a row whose first value is an outlier).
#[inline(always)]
pub fn shifted_sums<T: Elem>(x: &[T], k: f32, ahead: &[T]) -> (f64, f64) {
    let first = if T::F32_SUMS {
        Some(shifted_sums_f32(x, k, ahead))
    } else {
        None
    };
    shifted_sums_from(x, k, ahead, first)
}

/// [`shifted_sums`] given the f32 partial sums `first` of a 16-bit row
/// (`None` for f32 rows): kept where they can stand, else redone.
#[inline(always)]
pub(crate) fn shifted_sums_from<T: Elem>(
    x: &[T],
    k: f32,
    ahead: &[T],
    first: Option<(f64, f64)>,
) -> (f64, f64) {
    if let Some((s1, s2)) = first {
        let n = x.len() as f64;
        let m1 = s1 / n;
        if f32_sum_ok(s2) {
            if m1 * m1 <= 16.0 * (s2 / n - m1 * m1) {
                return (s1, s2);
            }
            // Around the mean; the caller shifted by k, so hand back sums
            // shifted by k: sum(x - k) = sum(x - m) + n (m - k), and
            // sum((x - k)^2) = sum((x - m)^2) + 2 (m - k) sum(x - m) + n (m - k)^2.
            let m = (k as f64 + m1) as f32;
            let (r1, r2) = shifted_sums_f32(x, m, ahead);
            if f32_sum_ok(r2) {
                let dm = m as f64 - k as f64;
                return (r1 + n * dm, r2 + 2.0 * dm * r1 + n * dm * dm);
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    if super::level().has_avx512() {
        // SAFETY: the level says AVX-512 F is present.
        return unsafe { x86::shifted::<T, [std::arch::x86_64::__m512d; 2]>(x, k, ahead) };
    }
    let mut s1 = [0f64; LANES];
    let mut s2 = [0f64; LANES];
    let kd = k as f64;
    crate::for_blocks!(pad: k, ahead: [ahead], c in x => {
        for i in 0..LANES {
            let v = c[i] as f64 - kd;
            s1[i] += v;
            s2[i] += v * v;
        }
    });
    (tree_sum(&s1), tree_sum(&s2))
}

/// Whether a sum of squares accumulated in f32 partials can stand: finite
/// (no partial overflowed) and at least 2^-60, so that the squares f32
/// lost to underflow (each below 2^-126, at most 2^20 of them) are below
/// 2^-46 of it. Otherwise the kernels redo the sum in f64.
#[inline(always)]
pub fn f32_sum_ok(s: f64) -> bool {
    s.is_finite() && s >= f64::from_bits(0x3c30_0000_0000_0000)
}

/// A lane accumulator of the backward sweeps: f64, or f32 for storage types
/// with [`Elem::F32_SUMS`] (then joined in f64 per [`F32_CHUNK`]).
/// (The AVX-512 sweeps hold the same lanes in
/// [`VecAcc`](super::x86::VecAcc) registers.)
pub trait Acc: Copy + Default + std::ops::AddAssign + 'static {
    /// An f32 term as the accumulator's type.
    fn of(v: f32) -> Self;
}

impl Acc for f32 {
    #[inline(always)]
    fn of(v: f32) -> f32 {
        v
    }
}

impl Acc for f64 {
    #[inline(always)]
    fn of(v: f32) -> f64 {
        v as f64
    }
}

/// `(sum(x - k), sum((x - k)^2))` for a 16-bit row: both in f32 lanes per
/// [`F32_CHUNK`] columns, the chunks joined in f64. Each lane adds
/// `w = x - k` and `w * w` in block order, then [`tree_sum`]; the AVX-512
/// levels run the same operations as explicit vector instructions (LLVM
/// turned the portable loop with two f32 accumulators into scalar code:
/// 3.4 ms instead of 1.3 for bf16 at 8192x1024), so every level gives the
/// same bits, and so do the AVX2 levels with two 8-lane halves.
#[inline(always)]
fn shifted_sums_f32<T: Elem>(x: &[T], k: f32, ahead: &[T]) -> (f64, f64) {
    #[cfg(target_arch = "x86_64")]
    match super::level() {
        // SAFETY: the level says the instructions are present.
        super::Level::Avx512 | super::Level::Avx512Bf16 => {
            return unsafe { x86::shifted::<T, std::arch::x86_64::__m512>(x, k, ahead) };
        }
        super::Level::Avx2 => return unsafe { x86::shifted_sums_f32_avx2(x, k, ahead) },
        super::Level::Generic => {}
    }
    let (mut t1, mut t2) = (0f64, 0f64);
    for (c, e) in f32_chunks(x.len()) {
        let (xc, ac) = (&x[c..e], ahead_from(ahead, c));
        let mut s1 = [0f32; LANES];
        let mut s2 = [0f32; LANES];
        crate::for_blocks!(pad: k, ahead: [ac], v in xc => {
            for i in 0..LANES {
                let w = v[i] - k;
                s1[i] += w;
                s2[i] += w * w;
            }
        });
        t1 += tree_sum(&s1) as f64;
        t2 += tree_sum(&s2) as f64;
    }
    (t1, t2)
}

/// The AVX-512 row sums ([`RowSums`](x86::RowSums): f32 partials for
/// 16-bit rows, f64 lanes for f32 rows, alone or folded into the row
/// sweeps) and the AVX2 form of the 16-bit shifted sums.
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use crate::simd::columns::{ahead_from, f32_chunks, tree_sum};
    use crate::simd::elem::Elem;
    use crate::simd::x86::row_acc::{Shifted, SumSq};
    use crate::simd::x86::row_sums;
    use crate::simd::x86::{halves, join, VecAcc};
    use std::arch::x86_64::*;

    /// A row's [`Shifted`] sums in `V` lanes (one [`row_sums`] sweep).
    ///
    /// # Safety
    /// AVX-512 F must be present.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
    pub(crate) unsafe fn shifted<T: Elem, V: VecAcc>(x: &[T], k: f32, ahead: &[T]) -> (f64, f64) {
        let mut s = Shifted::<V>::new(k);
        row_sums(x, ahead, &mut s);
        s.totals()
    }

    /// A row's [`SumSq`] in `V` lanes (one [`row_sums`] sweep).
    ///
    /// # Safety
    /// AVX-512 F must be present.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
    pub(crate) unsafe fn sum_sq<T: Elem, V: VecAcc>(x: &[T], ahead: &[T]) -> f64 {
        let mut s = SumSq::<V>::new();
        row_sums(x, ahead, &mut s);
        s.p.t
    }

    /// [`super::shifted_sums_f32`] with AVX2: each 16-lane accumulator as
    /// two 8-lane halves, the same operations lane by lane.
    ///
    /// # Safety
    /// AVX2 and FMA must be present.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn shifted_sums_f32_avx2<T: Elem>(
        x: &[T],
        k: f32,
        ahead: &[T],
    ) -> (f64, f64) {
        let kv = _mm256_set1_ps(k);
        let (mut t1, mut t2) = (0f64, 0f64);
        for (c, e) in f32_chunks(x.len()) {
            let (xc, ac) = (&x[c..e], ahead_from(ahead, c));
            let z = _mm256_setzero_ps();
            let (mut s1l, mut s1h, mut s2l, mut s2h) = (z, z, z, z);
            crate::for_blocks!(pad: k, ahead: [ac], v in xc => {
                let (lo, hi) = halves(v);
                let (wl, wh) = (_mm256_sub_ps(lo, kv), _mm256_sub_ps(hi, kv));
                s1l = _mm256_add_ps(s1l, wl);
                s1h = _mm256_add_ps(s1h, wh);
                s2l = _mm256_add_ps(s2l, _mm256_mul_ps(wl, wl));
                s2h = _mm256_add_ps(s2h, _mm256_mul_ps(wh, wh));
            });
            t1 += tree_sum(&join(s1l, s1h)) as f64;
            t2 += tree_sum(&join(s2l, s2h)) as f64;
        }
        (t1, t2)
    }
}

/// `sum(x^2)` (no overflow for |x| up to f32::MAX, no underflow for |x|
/// down to 1e-38): f64 lanes, or for storage types with
/// [`Elem::F32_SUMS`] f32 partials with an f64 redo where they cannot
/// stand ([`f32_sum_ok`]).
#[inline(always)]
pub fn sum_squares<T: Elem>(x: &[T], ahead: &[T]) -> f64 {
    let first = if T::F32_SUMS {
        Some(sum_squares_f32(x, ahead))
    } else {
        None
    };
    sum_squares_from(x, ahead, first)
}

/// [`sum_squares`] given the f32 partial sum `first` of a 16-bit row
/// (`None` for f32 rows): kept where it can stand, else redone in f64.
#[inline(always)]
pub(crate) fn sum_squares_from<T: Elem>(x: &[T], ahead: &[T], first: Option<f64>) -> f64 {
    if let Some(t) = first {
        if f32_sum_ok(t) {
            return t;
        }
    }
    #[cfg(target_arch = "x86_64")]
    if super::level().has_avx512() {
        // SAFETY: the level says AVX-512 F is present.
        return unsafe { x86::sum_sq::<T, [std::arch::x86_64::__m512d; 2]>(x, ahead) };
    }
    let mut s = [0f64; LANES];
    crate::for_blocks!(pad: 0.0, ahead: [ahead], c in x => {
        for i in 0..LANES {
            let v = c[i] as f64;
            s[i] += v * v;
        }
    });
    tree_sum(&s)
}

/// The f32 partials of [`sum_squares`] for a 16-bit row, joined in f64.
#[inline(always)]
fn sum_squares_f32<T: Elem>(x: &[T], ahead: &[T]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if super::level().has_avx512() {
        // SAFETY: the level says AVX-512 F is present.
        return unsafe { x86::sum_sq::<T, std::arch::x86_64::__m512>(x, ahead) };
    }
    let mut t = 0f64;
    for (c, e) in f32_chunks(x.len()) {
        let (xc, ac) = (&x[c..e], ahead_from(ahead, c));
        let mut s = [0f32; LANES];
        crate::for_blocks!(pad: 0.0, ahead: [ac], v in xc => {
            for i in 0..LANES {
                s[i] += v[i] * v[i];
            }
        });
        t += tree_sum(&s) as f64;
    }
    t
}

/// `sum(a * b)` in f64.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32], ahead_a: &[f32], ahead_b: &[f32]) -> f64 {
    let mut s = [0f64; LANES];
    crate::for_blocks!(pad: 0.0, ahead: [ahead_a, ahead_b], x in a, y in b => {
        for i in 0..LANES {
            s[i] += x[i] as f64 * y[i] as f64;
        }
    });
    tree_sum(&s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_sum_is_plain_sum_for_integers() {
        let mut a = [0f64; LANES];
        for (i, v) in a.iter_mut().enumerate() {
            *v = i as f64;
        }
        assert_eq!(tree_sum(&a), (0..LANES).sum::<usize>() as f64);
    }

    #[test]
    fn shifted_sums_handle_offset_rows() {
        // 1e4 + tiny alternating noise: mean 1e4, var exactly 1e-6 in f64.
        let x: Vec<f32> = (0..1000)
            .map(|i| if i % 2 == 0 { 10000.0 } else { 10000.001 })
            .collect();
        let (s1, s2) = shifted_sums(&x, x[0], &[]);
        let n = x.len() as f64;
        let var = s2 / n - (s1 / n) * (s1 / n);
        let d = 10000.001f32 as f64 - 10000.0;
        assert!((var - d * d / 4.0).abs() < 1e-12 * d * d, "{var}");
    }
}
