//! x86-64 vector helpers for the kernels' explicit AVX-512 / AVX2 paths:
//! blocks of [`LANES`] floats as vectors and back, streaming stores, and
//! [`map_row`], an element-wise row sweep in 512-bit registers.
//!
//! Explicit vectors are used where LLVM compiled a sweep's `[f32; 16]`
//! blocks into 128-bit instructions (the f32 row norms' sweeps); each one
//! runs the same operations per element as the portable code, so every
//! SIMD level gives the same bits.

use super::{prefetch_block, LANES};
use std::arch::x86_64::*;

/// A vector's lanes as the array [`tree_sum`](super::tree_sum) reduces.
#[inline(always)]
pub(crate) fn lanes(v: __m512) -> [f32; LANES] {
    // SAFETY: __m512 and [f32; 16] have the same size and any bits are valid.
    unsafe { std::mem::transmute::<__m512, [f32; LANES]>(v) }
}

/// A block as a vector.
#[inline(always)]
pub(crate) fn vec(b: &[f32; LANES]) -> __m512 {
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[f32; LANES], __m512>(*b) }
}

/// A block as two 8-lane halves (lanes 0..8, 8..16).
#[inline(always)]
pub(crate) fn halves(b: &[f32; LANES]) -> (__m256, __m256) {
    // SAFETY: [f32; 16] is two [f32; 8], __m256 the size of one; any bits are valid.
    unsafe {
        let h = std::mem::transmute::<[f32; LANES], [[f32; 8]; 2]>(*b);
        (
            std::mem::transmute::<[f32; 8], __m256>(h[0]),
            std::mem::transmute::<[f32; 8], __m256>(h[1]),
        )
    }
}

/// Two halves back as the 16 lanes [`tree_sum`](super::tree_sum) reduces.
#[inline(always)]
pub(crate) fn join(lo: __m256, hi: __m256) -> [f32; LANES] {
    // SAFETY: as above.
    unsafe {
        std::mem::transmute::<[[f32; 8]; 2], [f32; LANES]>([
            std::mem::transmute::<__m256, [f32; 8]>(lo),
            std::mem::transmute::<__m256, [f32; 8]>(hi),
        ])
    }
}

/// Store a 16-lane vector at `p` with four 128-bit non-temporal stores.
/// (One 512-bit non-temporal store made the LayerNorm sweeps 10-40%
/// slower on the AMD EPYC development machine.)
///
/// # Safety
/// AVX-512 F must be present; `p` 16-byte aligned with 16 floats.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn stream16(p: *mut f32, v: __m512) {
    _mm_stream_ps(p, _mm512_castps512_ps128(v));
    _mm_stream_ps(p.add(4), _mm512_extractf32x4_ps::<1>(v));
    _mm_stream_ps(p.add(8), _mm512_extractf32x4_ps::<2>(v));
    _mm_stream_ps(p.add(12), _mm512_extractf32x4_ps::<3>(v));
}

/// `dst[j] = f(src[0][j], src[1][j], ..)` over a row of f32 values in
/// 512-bit registers (no prefetching: the row norms' output sweeps read
/// rows their first sweep brought into cache); the tail block runs `f` on
/// zero-padded inputs and keeps its first lanes (the same operations per
/// lane). With `stream`, the full blocks are written with [`stream16`].
///
/// # Safety
/// AVX-512 F must be present (call it from a function compiled for it, so
/// that `f` is inlined); with `stream`, `dst` must start 16-byte aligned.
#[inline(always)]
pub(crate) unsafe fn map_row<const N: usize>(
    src: [&[f32]; N],
    dst: &mut [f32],
    stream: bool,
    f: impl Fn([__m512; N]) -> __m512,
) {
    let d = dst.len();
    let src = src.map(|s| &s[..d]);
    let full = d - d % LANES;
    let p = dst.as_mut_ptr();
    // SAFETY (both loops): j + LANES <= full <= d, the length of every slice.
    let block = |j: usize| f(src.map(|s| unsafe { _mm512_loadu_ps(s.as_ptr().add(j)) }));
    if stream {
        for j in (0..full).step_by(LANES) {
            unsafe { stream16(p.add(j), block(j)) };
        }
    } else {
        for j in (0..full).step_by(LANES) {
            unsafe { _mm512_storeu_ps(p.add(j), block(j)) };
        }
    }
    if full < d {
        let t = d - full;
        let v = f(src.map(|s| {
            let mut b = [0f32; LANES];
            b[..t].copy_from_slice(&s[full..]);
            vec(&b)
        }));
        dst[full..].copy_from_slice(&lanes(v)[..t]);
    }
}

/// A sweep over a row of f32 values in 512-bit registers: for each block,
/// `f(src blocks, dst blocks)` returns the new `dst` blocks (read, modified,
/// written back; the accumulators a closure carries see the blocks in
/// order). `src[i][j]` is prefetched from `ahead[i]`. The tail block runs
/// `f` on zero-padded blocks, as `for_blocks!` pads them, and writes back
/// only the row's lanes.
///
/// # Safety
/// AVX-512 F must be present (call it from a function compiled for it).
#[inline(always)]
pub(crate) unsafe fn for_row<const N: usize, const M: usize>(
    src: [&[f32]; N],
    ahead: [&[f32]; N],
    dst: [&mut [f32]; M],
    mut f: impl FnMut([__m512; N], [__m512; M]) -> [__m512; M],
) {
    let d = src[0].len();
    let src = src.map(|s| &s[..d]);
    let dst = dst.map(|s| &mut s[..d]);
    let full = d - d % LANES;
    let load = |s: &[f32], j: usize| {
        let b: &[f32; LANES] = s[j..j + LANES].try_into().expect("a block");
        vec(b)
    };
    for j in (0..full).step_by(LANES) {
        ahead.iter().for_each(|a| prefetch_block(a, j));
        let out = f(
            src.map(|s| load(s, j)),
            std::array::from_fn(|m| load(dst[m], j)),
        );
        for (m, v) in out.into_iter().enumerate() {
            dst[m][j..j + LANES].copy_from_slice(&lanes(v));
        }
    }
    if full < d {
        let t = d - full;
        let pad = |s: &[f32]| {
            let mut b = [0f32; LANES];
            b[..t].copy_from_slice(&s[full..]);
            vec(&b)
        };
        let out = f(src.map(pad), std::array::from_fn(|m| pad(dst[m])));
        for (m, v) in out.into_iter().enumerate() {
            dst[m][full..].copy_from_slice(&lanes(v)[..t]);
        }
    }
}

/// The 16 f32 lanes of `v` widened to f64 and added to the two 8-lane
/// halves of an f64 accumulator (lanes 0..8 into `acc[0]`).
#[inline(always)]
pub(crate) unsafe fn add_wide(acc: &mut [__m512d; 2], v: __m512) {
    acc[0] = _mm512_add_pd(acc[0], _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    acc[1] = _mm512_add_pd(acc[1], _mm512_cvtps_pd(hi));
}

/// An f64 accumulator's 16 lanes as the array [`tree_sum`](super::tree_sum) reduces.
#[inline(always)]
pub(crate) fn wide_lanes(acc: [__m512d; 2]) -> [f64; LANES] {
    // SAFETY: two __m512d are 16 f64 lanes; any bits are valid.
    unsafe { std::mem::transmute::<[__m512d; 2], [f64; LANES]>(acc) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `map_row` and `for_row` against plain loops, bit for bit, at row
    /// lengths with and without a tail block (skipped without AVX-512).
    #[test]
    fn row_sweeps_match_plain_loops() {
        if !super::super::detected_level().has_avx512() {
            eprintln!("no AVX-512: skipped");
            return;
        }
        #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
        unsafe fn sweeps(a: &[f32], b: &[f32], y: &mut [f32], acc: &mut [f32]) -> [f64; LANES] {
            map_row([a, b], y, false, |[av, bv]| {
                _mm512_add_ps(_mm512_mul_ps(av, bv), av)
            });
            let mut s = [_mm512_setzero_pd(); 2];
            for_row([a, b], [&[], &[]], [acc], |[av, bv], [cv]| {
                add_wide(&mut s, _mm512_sub_ps(av, bv));
                [_mm512_add_ps(cv, _mm512_mul_ps(av, bv))]
            });
            wide_lanes(s)
        }
        for d in [1usize, 15, 16, 17, 33, 64, 100] {
            let a: Vec<f32> = (0..d).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
            let b: Vec<f32> = (0..d).map(|i| (i as f32 * 1.3).cos() + 0.1).collect();
            let mut y = vec![0f32; d];
            let mut acc: Vec<f32> = (0..d).map(|i| i as f32 * 0.01).collect();
            let mut want_acc = acc.clone();
            // SAFETY: AVX-512 is present (checked above).
            let lanes_got = unsafe { sweeps(&a, &b, &mut y, &mut acc) };
            let mut lanes_want = [0f64; LANES];
            for j in 0..d {
                assert_eq!(
                    y[j].to_bits(),
                    (a[j] * b[j] + a[j]).to_bits(),
                    "map_row d {d} j {j}"
                );
                want_acc[j] += a[j] * b[j];
                lanes_want[j % LANES] += (a[j] - b[j]) as f64;
            }
            assert_eq!(acc, want_acc, "for_row d {d}");
            assert_eq!(lanes_got, lanes_want, "for_row sums d {d}");
        }
    }
}
