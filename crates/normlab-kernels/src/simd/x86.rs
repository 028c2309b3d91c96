//! x86-64 vector helpers for the kernels' explicit AVX-512 / AVX2 paths:
//! blocks of [`LANES`] floats as vectors and back, streaming stores, and
//! [`map_row`], an element-wise row sweep in 512-bit registers.
//!
//! Explicit vectors are used where LLVM compiled a sweep's `[f32; 16]`
//! blocks into 128-bit instructions (the f32 row norms' sweeps); each one
//! runs the same operations per element as the portable code, so every
//! SIMD level gives the same bits.

use super::{prefetch_block, Elem, LANES};
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

/// Store a 16-lane vector at `p` with non-temporal stores: one 512-bit
/// store when `wide` (see [`wide_streams`]), else four 128-bit ones.
///
/// # Safety
/// AVX-512 F must be present; `p` holds 16 floats and is 16-byte aligned,
/// 64-byte aligned when `wide`.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn stream16(p: *mut f32, v: __m512, wide: bool) {
    if wide {
        _mm512_stream_ps(p, v);
    } else {
        _mm_stream_ps(p, _mm512_castps512_ps128(v));
        _mm_stream_ps(p.add(4), _mm512_extractf32x4_ps::<1>(v));
        _mm_stream_ps(p.add(8), _mm512_extractf32x4_ps::<2>(v));
        _mm_stream_ps(p.add(12), _mm512_extractf32x4_ps::<3>(v));
    }
}

/// Whether a row starting at `p` streams its blocks with one 512-bit store
/// each: where `p` is 64-byte aligned and the processor is not AMD's. On
/// the AMD EPYC machine one 512-bit streaming store made the LayerNorm
/// sweeps 10-40% slower than four 128-bit ones; on the Intel Xeon
/// (Sapphire Rapids class) machine it made the RMSNorm forward 12-16%
/// faster (8192x1024, 1 thread, 2026-12-01), the 128-bit stores' three
/// extractions competing with the arithmetic for the shuffle port.
/// Only speed depends on it: the stored bits are the same.
#[inline]
pub(crate) fn wide_streams(p: *const f32) -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    static WIDE: AtomicU8 = AtomicU8::new(0);
    let wide = match WIDE.load(Ordering::Relaxed) {
        0 => {
            let id = __cpuid(0);
            let amd = (id.ebx, id.edx, id.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
            WIDE.store(if amd { 1 } else { 2 }, Ordering::Relaxed);
            !amd
        }
        w => w == 2,
    };
    wide && (p as usize).is_multiple_of(64)
}

/// `out[j] = f(src[..][j], par[..][j])` over a row in 512-bit registers:
/// `src` rows of the storage type `T` (widened as [`Elem::get`]), `par`
/// rows of f32 (the parameters), `out` rounded as [`Elem::put`]. No
/// prefetching (the row norms' output sweeps read rows their first sweep
/// brought into cache). With `stream`, `out`'s full blocks are written
/// with non-temporal stores ([`Elem::store16`]).
///
/// # Safety
/// AVX-512 F must be present (call it from a function compiled for it, so
/// that `f` is inlined); with `stream`, `out` must start 16-byte aligned
/// (f32) or 32-byte aligned (16 bits; [`super::should_stream`] asks 64).
#[inline(always)]
pub(crate) unsafe fn map_row<T: Elem, const N: usize, const P: usize>(
    src: [&[T]; N],
    par: [&[f32]; P],
    out: &mut [T],
    stream: bool,
    f: impl Fn([__m512; N], [__m512; P]) -> __m512,
) {
    sweep(src, par, [&[]; N], [], Some((out, stream)), |s, p, []| {
        (f(s, p), [])
    });
}

/// Define an AVX-512 row kernel generic over the storage type `T`, compiled
/// twice: with AVX-512 BF16 (run where the kernels' level has it, so that a
/// bf16 row's stores inline `vcvtneps2bf16`) and without (bf16 rounding in
/// integer instructions, [`Elem::store16`]). Both copies carry the body
/// itself, so the closures it hands to the row sweeps inherit the features
/// and inline. The two round bf16 the same way, bit for bit.
///
/// Calling the function is unsafe: AVX-512 F must be present.
macro_rules! avx512_fn {
    ($(#[$meta:meta])* $vis:vis unsafe fn $name:ident<T: Elem>($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        #[allow(clippy::too_many_arguments)]
        #[inline]
        $vis unsafe fn $name<T: Elem>($($arg: $ty),*) $(-> $ret)? {
            #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,avx512bf16")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn with_bf16<T: Elem>($($arg: $ty),*) $(-> $ret)? $body
            #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn plain<T: Elem>($($arg: $ty),*) $(-> $ret)? $body
            if $crate::simd::level() == $crate::simd::Level::Avx512Bf16 {
                with_bf16::<T>($($arg),*)
            } else {
                plain::<T>($($arg),*)
            }
        }
    };
}
pub(crate) use avx512_fn;

/// [`super::stream_copy`] in 512-bit registers.
///
/// # Safety
/// AVX-512 F must be present; `dst` must start 16-byte aligned.
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
pub(crate) unsafe fn stream_copy(dst: &mut [f32], src: &[f32]) {
    assert!(
        (dst.as_ptr() as usize).is_multiple_of(16),
        "stream_copy needs 16-byte alignment"
    );
    map_row([src], [], dst, true, |[v], []| v);
}

/// A sweep over a row in 512-bit registers: for each block, `f(src
/// blocks, par blocks, dst blocks)` returns the new `dst` blocks (f32 rows
/// read, modified, written back; the accumulators a closure carries see
/// the blocks in order). `src[i]` (storage type `T`) is prefetched from
/// `ahead[i]`; `par` are f32 rows. The tail block runs `f` on zero-padded
/// blocks, as `for_blocks!` pads them, and writes back only the row's
/// lanes.
///
/// # Safety
/// AVX-512 F must be present (call it from a function compiled for it).
#[inline(always)]
pub(crate) unsafe fn for_row<T: Elem, const N: usize, const P: usize, const M: usize>(
    src: [&[T]; N],
    par: [&[f32]; P],
    ahead: [&[T]; N],
    dst: [&mut [f32]; M],
    mut f: impl FnMut([__m512; N], [__m512; P], [__m512; M]) -> [__m512; M],
) {
    sweep(src, par, ahead, dst, None, |s, p, d| {
        (_mm512_setzero_ps(), f(s, p, d))
    });
}

/// [`for_row`] that also writes a row `out` it does not read (the one row
/// sweep under [`map_row`], [`for_row`] and this): `f` returns
/// `(out block, new dst blocks)`; `stream` as for [`map_row`].
///
/// # Safety
/// As [`for_row`]; with `stream`, `out` aligned as for [`map_row`].
#[inline(always)]
pub(crate) unsafe fn for_row_out<T: Elem, const N: usize, const P: usize, const M: usize>(
    src: [&[T]; N],
    par: [&[f32]; P],
    ahead: [&[T]; N],
    dst: [&mut [f32]; M],
    out: (&mut [T], bool),
    f: impl FnMut([__m512; N], [__m512; P], [__m512; M]) -> (__m512, [__m512; M]),
) {
    sweep(src, par, ahead, dst, Some(out), f);
}

#[inline(always)]
unsafe fn sweep<T: Elem, const N: usize, const P: usize, const M: usize>(
    src: [&[T]; N],
    par: [&[f32]; P],
    ahead: [&[T]; N],
    dst: [&mut [f32]; M],
    mut out: Option<(&mut [T], bool)>,
    mut f: impl FnMut([__m512; N], [__m512; P], [__m512; M]) -> (__m512, [__m512; M]),
) {
    // `wide` as [`wide_streams`] says (f32 rows only).
    let stream = match &out {
        Some((o, true)) => Some(wide_streams(o.as_ptr() as *const f32)),
        _ => None,
    };
    // The row's length: the output's where there is one (`map_row`'s
    // sources may be longer), else the first source's.
    let d = match (&out, src.first(), par.first()) {
        (Some((o, _)), _, _) => o.len(),
        (None, Some(s), _) => s.len(),
        (None, None, Some(p)) => p.len(),
        (None, None, None) => dst.first().map_or(0, |r| r.len()),
    };
    let src = src.map(|s| &s[..d]);
    let par = par.map(|s| &s[..d]);
    let dst = dst.map(|s| &mut s[..d]);
    let full = d - d % LANES;
    let z = _mm512_setzero_ps();
    let hw = T::hw();
    for j in (0..full).step_by(LANES) {
        ahead.iter().for_each(|a| prefetch_block(a, j));
        // Plain loops, not `array::map`: its closure was not inlined for
        // the 16-bit loads, which then ran as calls (5x slower sweeps).
        let (mut sv, mut pv, mut dv) = ([z; N], [z; P], [z; M]);
        for i in 0..N {
            sv[i] = T::load16(&src[i][j..j + LANES]);
        }
        for i in 0..P {
            pv[i] = f32::load16(&par[i][j..j + LANES]);
        }
        for i in 0..M {
            dv[i] = f32::load16(&dst[i][j..j + LANES]);
        }
        let (o, new) = f(sv, pv, dv);
        for (m, v) in new.into_iter().enumerate() {
            dst[m][j..j + LANES].copy_from_slice(&lanes(v));
        }
        if let Some((o_row, _)) = &mut out {
            // SAFETY: the block lies in the row; with `stream` the caller
            // aligned it.
            T::store16(&mut o_row[j..j + LANES], o, stream, hw);
        }
    }
    if full < d {
        let t = d - full;
        let (o, new) = f(
            src.map(|s| tail_block(&s[full..], 0.0)),
            par.map(|s| tail_block(&s[full..], 0.0)),
            std::array::from_fn(|m| tail_block(&dst[m][full..], 0.0)),
        );
        for (m, v) in new.into_iter().enumerate() {
            dst[m][full..].copy_from_slice(&lanes(v)[..t]);
        }
        if let Some((o_row, _)) = out {
            for (oi, v) in o_row[full..d].iter_mut().zip(lanes(o)) {
                *oi = T::put(v);
            }
        }
    }
}

/// A row's last, partial block (`tail`, fewer than 16 values) widened as
/// [`Elem::get`], the missing lanes set to `pad` (0 in the sweeps; the
/// shift k in the shifted sums, so that those lanes add zeros).
#[inline(always)]
pub(crate) fn tail_block<T: Elem>(tail: &[T], pad: f32) -> __m512 {
    let mut b = [pad; LANES];
    for (bi, v) in b.iter_mut().zip(tail) {
        *bi = v.get();
    }
    vec(&b)
}

/// A sweep's 16-lane accumulator in registers ([`super::Acc::Wide`]): f32
/// lanes in one `__m512`, or f64 lanes in two `__m512d` (each f32 term
/// widened exactly, lanes 0..8 in the first); the same per-lane additions
/// as the portable `[A; 16]` accumulators.
pub(crate) trait VecAcc: Copy {
    /// The lane type (f32 or f64).
    type Lane: Copy + std::ops::AddAssign;
    /// All lanes zero.
    ///
    /// # Safety
    /// AVX-512 F must be present.
    unsafe fn zero() -> Self;
    /// Add the 16 f32 terms of `v`, lane by lane.
    ///
    /// # Safety
    /// As [`VecAcc::zero`].
    unsafe fn add(&mut self, v: __m512);
    /// The lanes, as [`tree_sum`](super::tree_sum) reduces them.
    fn lanes(self) -> [Self::Lane; LANES];
}

impl VecAcc for __m512 {
    type Lane = f32;
    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn add(&mut self, v: __m512) {
        *self = _mm512_add_ps(*self, v);
    }
    #[inline(always)]
    fn lanes(self) -> [f32; LANES] {
        lanes(self)
    }
}

impl VecAcc for [__m512d; 2] {
    type Lane = f64;
    #[inline(always)]
    unsafe fn zero() -> [__m512d; 2] {
        [_mm512_setzero_pd(); 2]
    }
    #[inline(always)]
    unsafe fn add(&mut self, v: __m512) {
        add_wide(self, v);
    }
    #[inline(always)]
    fn lanes(self) -> [f64; LANES] {
        wide_lanes(self)
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

    /// `map_row`, `for_row` and `for_row_out` (streaming or not) against
    /// plain loops, bit for bit, at row lengths with and without a tail
    /// block (skipped without AVX-512).
    #[test]
    fn row_sweeps_match_plain_loops() {
        if !super::super::detected_level().has_avx512() {
            eprintln!("no AVX-512: skipped");
            return;
        }
        #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
        unsafe fn sweeps(a: &[f32], b: &[f32], y: &mut [f32], acc: &mut [f32]) -> [f64; LANES] {
            map_row([a, b], [], y, false, |[av, bv], []| {
                _mm512_add_ps(_mm512_mul_ps(av, bv), av)
            });
            let mut s = [_mm512_setzero_pd(); 2];
            for_row([a], [b], [&[]], [acc], |[av], [bv], [cv]| {
                add_wide(&mut s, _mm512_sub_ps(av, bv));
                [_mm512_add_ps(cv, _mm512_mul_ps(av, bv))]
            });
            wide_lanes(s)
        }
        #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
        unsafe fn with_out(a: &[f32], b: &[f32], acc: &mut [f32], out: &mut [f32], stream: bool) {
            for_row_out(
                [a, b],
                [],
                [&[], &[]],
                [acc],
                (out, stream),
                |[av, bv], [], [cv]| (_mm512_sub_ps(av, bv), [_mm512_add_ps(cv, av)]),
            );
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
            for stream in [false, true] {
                let mut acc2 = acc.clone();
                let mut out = crate::buf::AlignedBuf::zeros(d);
                // SAFETY: AVX-512 is present; AlignedBuf is 64-byte aligned.
                unsafe { with_out(&a, &b, &mut acc2, &mut out, stream) };
                super::super::stream_fence();
                for j in 0..d {
                    assert_eq!(
                        out[j].to_bits(),
                        (a[j] - b[j]).to_bits(),
                        "for_row_out d {d}"
                    );
                    assert_eq!(
                        acc2[j].to_bits(),
                        (acc[j] + a[j]).to_bits(),
                        "for_row_out d {d}"
                    );
                }
            }
        }
    }
}
