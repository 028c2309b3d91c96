//! The one row sweep of the kernels' explicit AVX-512 paths (`sweep`)
//! and its forms: [`map_row`] (an element-wise output row),
//! [`for_row_out`] (read-modify-write rows and an output row),
//! [`row_sums`] (a row's statistics), [`map_row_summing`] (an output row
//! with the next row's statistics folded in) and [`fold_row`] (a
//! backward's first sweep over a row, alone or folded into the previous
//! row's dx sweep).

use super::row_acc::RowSums;
use super::{lanes, vec, wide_streams};
use crate::simd::columns::{ahead_from, column_chunks};
use crate::simd::elem::Elem;
use crate::simd::level::LANES;
use crate::simd::stream::prefetch_block;
use std::arch::x86_64::*;

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
    sweep(
        src,
        par,
        [&[]; N],
        [0.0; N],
        [],
        Some((out, stream)),
        Mapping(&f),
    );
}

/// A sweep over a row in 512-bit registers that reads `src` rows (storage
/// type `T`, widened as [`Elem::get`]; `src[i]` prefetched from
/// `ahead[i]`) and `par` rows (f32), reads and writes back f32 rows `dst`,
/// and writes a row `out` it does not read: for each block, `f(src blocks,
/// par blocks, dst blocks)` returns `(out block, new dst blocks)` (the
/// accumulators a closure carries see the blocks in order). The tail block
/// runs `f` on zero-padded blocks, as `for_blocks!` pads them, and writes
/// back only the row's lanes; `stream` as for [`map_row`].
///
/// # Safety
/// AVX-512 F must be present (call it from a function compiled for it);
/// with `stream`, `out` aligned as for [`map_row`].
#[inline(always)]
pub(crate) unsafe fn for_row_out<T: Elem, const N: usize, const P: usize, const M: usize>(
    src: [&[T]; N],
    par: [&[f32]; P],
    ahead: [&[T]; N],
    dst: [&mut [f32]; M],
    out: (&mut [T], bool),
    f: impl FnMut([__m512; N], [__m512; P], [__m512; M]) -> (__m512, [__m512; M]),
) {
    sweep(src, par, ahead, [0.0; N], dst, Some(out), f);
}

/// A row's sums ([`RowSums`]: f32 partials per
/// chunk or f64 lanes over the row) in one sweep, `x` prefetched from
/// `ahead`; the tail block padded as `sums` asks.
///
/// # Safety
/// As [`for_row_out`].
#[inline(always)]
pub(crate) unsafe fn row_sums<T: Elem, S: RowSums>(x: &[T], ahead: &[T], sums: &mut S) {
    for (c, e) in column_chunks(x.len(), S::CHUNK) {
        let pad = [sums.pad()];
        let a = [ahead_from(ahead, c)];
        sweep([&x[c..e]], [], a, pad, [], None, SumsOnly(&mut *sums));
        sums.end_chunk();
    }
}

/// [`map_row`] with the next row's sums folded in: the row norms' forward
/// writes row r while it sums row r + 1 (prefetched from `ahead`), so that
/// the loads of one row and the stores of the other overlap, as in a
/// copy, instead of alternating row by row. `src`'s last row is the next
/// row (its block goes to `sums`; `f` sees every block and writes `out`).
/// Each row's operations are those of [`row_sums`] and [`map_row`] in the
/// same order, so the same bits.
///
/// # Safety
/// As [`map_row`]; every `src` row at least as long as `out`.
#[inline(always)]
pub(crate) unsafe fn map_row_summing<T: Elem, S: RowSums, const N: usize, const P: usize>(
    src: [&[T]; N],
    par: [&[f32]; P],
    ahead: &[T],
    (out, stream): (&mut [T], bool),
    sums: &mut S,
    f: impl Fn([__m512; N], [__m512; P]) -> __m512,
) {
    for (c, e) in column_chunks(out.len(), S::CHUNK) {
        let pad: [f32; N] = std::array::from_fn(|i| if i + 1 == N { sums.pad() } else { 0.0 });
        let a: [&[T]; N] = std::array::from_fn(|i| {
            if i + 1 == N {
                ahead_from(ahead, c)
            } else {
                &[]
            }
        });
        let (sv, pv) = (src.map(|s| &s[c..e]), par.map(|p| &p[c..e]));
        let block = Summing {
            sums: &mut *sums,
            f: &f,
        };
        sweep(sv, pv, a, pad, [], Some((&mut out[c..e], stream)), block);
        sums.end_chunk();
    }
}

/// A backward's first sweep over a row (`x`, `dy` blocks, f32 parameter
/// blocks `par`, read-modify-write f32 rows `dst`: the parameter
/// gradients), its sums in f32 partials per [`VecAcc::CHUNK`](super::VecAcc::CHUNK) or f64 lanes
/// as [`RowSums`] (the kinds' `backward_rows` at the AVX-512 levels).
pub(crate) trait RowFold<const P: usize, const M: usize> {
    /// Columns per partial.
    const CHUNK: usize;
    /// One block: add its terms to the sums, return the new `dst` blocks.
    ///
    /// # Safety
    /// AVX-512 F must be present.
    unsafe fn block(
        &mut self,
        x: __m512,
        dy: __m512,
        par: [__m512; P],
        dst: [__m512; M],
    ) -> [__m512; M];
    /// Join the partials into the f64 totals and restart them.
    ///
    /// # Safety
    /// As [`RowFold::block`].
    unsafe fn end_chunk(&mut self);
}

/// Whether a backward folds each row's first sweep into the previous row's
/// dx sweep ([`fold_row`] with `prev`): for 16-bit rows, and for f32 rows
/// whose `dx` goes out through streaming stores (rows from memory). f32 rows
/// in cache run the two sweeps one after the other: there the folded loop,
/// with its f64 lanes, was 0.82-0.97x as fast (RMSNorm and LayerNorm f32
/// fwd+bwd at 16384x128 to 2048x1024, 1 thread, 2026-12-01), and unfolding
/// it gave 1.12-1.25x at 8192x256 and 2048x1024, 1.14-1.20x at the gpt's
/// 2048x128 and level at the toy's 512x64 (medians over 10-30 rounds). The
/// same operations either way, so the same bits.
#[inline(always)]
pub(crate) fn fold_backward<T: Elem>(stream: bool) -> bool {
    T::F32_SUMS || stream
}

/// A backward's dx sweep of one row: written now through [`map_row`]
/// (`fold` false: the last row, or [`fold_backward`] said no), or handed
/// back as the `prev` of the next row's [`fold_row`].
///
/// # Safety
/// As [`map_row`].
#[inline(always)]
#[allow(clippy::type_complexity)]
pub(crate) unsafe fn dx_row<'a, T: Elem, const P: usize>(
    fold: bool,
    src: [&'a [T]; 2],
    par: [&[f32]; P],
    dx: &'a mut [T],
    stream: bool,
    f: impl Fn([__m512; 2], [__m512; P]) -> __m512,
) -> Option<([&'a [T]; 2], &'a mut [T], bool)> {
    if fold {
        return Some((src, dx, stream));
    }
    map_row(src, par, dx, stream, f);
    None
}

/// A [`RowFold`] over one row (`x`, `dy` prefetched from `ahead`), alone
/// (`prev` None: a chunk's first row, and every row where
/// [`fold_backward`] says no) or folded into the output sweep of
/// the row before it (`prev`: its `x`, `dy`, the `dx` row, `stream` and
/// `f`, which writes a `dx` block from the previous row's `x`, `dy` and
/// `par` blocks), as [`map_row_summing`] does for the forward. The same
/// operations per row, so the same bits. Zero-padded tail blocks (`dy` 0
/// adds nothing).
///
/// # Safety
/// As [`for_row_out`]; every row as long as `dst[0]`.
#[inline(always)]
#[allow(clippy::type_complexity)]
pub(crate) unsafe fn fold_row<T: Elem, S: RowFold<P, M>, const P: usize, const M: usize>(
    [x, dy]: [&[T]; 2],
    [ax, ady]: [&[T]; 2],
    par: [&[f32]; P],
    mut dst: [&mut [f32]; M],
    mut prev: Option<([&[T]; 2], &mut [T], bool)>,
    fold: &mut S,
    f: impl Fn([__m512; 2], [__m512; P]) -> __m512,
) {
    let d = dst[0].len();
    for (c, e) in column_chunks(d, S::CHUNK) {
        let a = [ahead_from(ax, c), ahead_from(ady, c)];
        let pv = par.map(|p| &p[c..e]);
        let dv = dst.each_mut().map(|r| &mut r[c..e]);
        let block = Folding {
            fold: &mut *fold,
            f: &f,
        };
        match &mut prev {
            None => sweep([&x[c..e], &dy[c..e]], pv, a, [0.0; 2], dv, None, block),
            Some(([px, pdy], out, stream)) => {
                let src = [&px[c..e], &pdy[c..e], &x[c..e], &dy[c..e]];
                let a = [&[][..], &[], a[0], a[1]];
                sweep(
                    src,
                    pv,
                    a,
                    [0.0; 4],
                    dv,
                    Some((&mut out[c..e], *stream)),
                    block,
                )
            }
        }
        fold.end_chunk();
    }
}

/// What a row sweep does with each block: `(out block, new dst blocks)`
/// from the `src`, `par` and `dst` blocks. Closures are one (the sweeps'
/// callers define them in functions compiled for AVX-512, so they inline
/// with the intrinsics); [`map_row_summing`] and [`fold_row`] add their
/// row sums through structs whose method is always inlined, not through a
/// closure of their own (which would not carry the target features, and
/// when LLVM did not inline it, ran every intrinsic as a call: 35x slower).
trait Block<const N: usize, const P: usize, const M: usize> {
    /// One block.
    ///
    /// # Safety
    /// AVX-512 F must be present.
    unsafe fn call(
        &mut self,
        s: [__m512; N],
        p: [__m512; P],
        d: [__m512; M],
    ) -> (__m512, [__m512; M]);
}

impl<F, const N: usize, const P: usize, const M: usize> Block<N, P, M> for F
where
    F: FnMut([__m512; N], [__m512; P], [__m512; M]) -> (__m512, [__m512; M]),
{
    #[inline(always)]
    unsafe fn call(
        &mut self,
        s: [__m512; N],
        p: [__m512; P],
        d: [__m512; M],
    ) -> (__m512, [__m512; M]) {
        self(s, p, d)
    }
}

/// [`map_row`]'s block.
struct Mapping<'a, F>(&'a F);

impl<F: Fn([__m512; N], [__m512; P]) -> __m512, const N: usize, const P: usize> Block<N, P, 0>
    for Mapping<'_, F>
{
    #[inline(always)]
    unsafe fn call(
        &mut self,
        s: [__m512; N],
        p: [__m512; P],
        _: [__m512; 0],
    ) -> (__m512, [__m512; 0]) {
        ((self.0)(s, p), [])
    }
}

/// [`map_row_summing`]'s block: the last source's block into the sums,
/// `f` for the output.
struct Summing<'a, S, F> {
    sums: &'a mut S,
    f: &'a F,
}

impl<S: RowSums, F: Fn([__m512; N], [__m512; P]) -> __m512, const N: usize, const P: usize>
    Block<N, P, 0> for Summing<'_, S, F>
{
    #[inline(always)]
    unsafe fn call(
        &mut self,
        s: [__m512; N],
        p: [__m512; P],
        _: [__m512; 0],
    ) -> (__m512, [__m512; 0]) {
        self.sums.block(s[N - 1]);
        ((self.f)(s, p), [])
    }
}

/// [`row_sums`]' block.
struct SumsOnly<'a, S>(&'a mut S);

impl<S: RowSums> Block<1, 0, 0> for SumsOnly<'_, S> {
    #[inline(always)]
    unsafe fn call(
        &mut self,
        [v]: [__m512; 1],
        _: [__m512; 0],
        _: [__m512; 0],
    ) -> (__m512, [__m512; 0]) {
        self.0.block(v);
        (v, [])
    }
}

/// [`fold_row`]'s block: alone (two sources, `x` and `dy`), or with the
/// previous row's output (four: its `x`, `dy`, then this row's).
struct Folding<'a, S, F> {
    fold: &'a mut S,
    f: &'a F,
}

impl<S: RowFold<P, M>, F, const P: usize, const M: usize> Block<2, P, M> for Folding<'_, S, F> {
    #[inline(always)]
    unsafe fn call(
        &mut self,
        [x, dy]: [__m512; 2],
        p: [__m512; P],
        d: [__m512; M],
    ) -> (__m512, [__m512; M]) {
        (_mm512_setzero_ps(), self.fold.block(x, dy, p, d))
    }
}

impl<
        S: RowFold<P, M>,
        F: Fn([__m512; 2], [__m512; P]) -> __m512,
        const P: usize,
        const M: usize,
    > Block<4, P, M> for Folding<'_, S, F>
{
    #[inline(always)]
    unsafe fn call(
        &mut self,
        [px, pdy, x, dy]: [__m512; 4],
        p: [__m512; P],
        d: [__m512; M],
    ) -> (__m512, [__m512; M]) {
        ((self.f)([px, pdy], p), self.fold.block(x, dy, p, d))
    }
}

#[inline(always)]
unsafe fn sweep<T: Elem, const N: usize, const P: usize, const M: usize>(
    src: [&[T]; N],
    par: [&[f32]; P],
    ahead: [&[T]; N],
    pad: [f32; N],
    dst: [&mut [f32]; M],
    mut out: Option<(&mut [T], bool)>,
    mut f: impl Block<N, P, M>,
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
        let (o, new) = f.call(sv, pv, dv);
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
        let (o, new) = f.call(
            std::array::from_fn(|i| tail_block(&src[i][full..], pad[i])),
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
fn tail_block<T: Elem>(tail: &[T], pad: f32) -> __m512 {
    let mut b = [pad; LANES];
    for (bi, v) in b.iter_mut().zip(tail) {
        *bi = v.get();
    }
    vec(&b)
}

#[cfg(test)]
mod tests {
    use super::super::{wide_lanes, VecAcc};
    use super::*;

    /// `map_row` and `for_row_out` (streaming or not) against
    /// plain loops, bit for bit, at row lengths with and without a tail
    /// block (skipped without AVX-512).
    #[test]
    fn row_sweeps_match_plain_loops() {
        if !crate::simd::detected_level().has_avx512() {
            eprintln!("no AVX-512: skipped");
            return;
        }
        #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
        unsafe fn sweeps(a: &[f32], b: &[f32], y: &mut [f32], acc: &mut [f32]) -> [f64; LANES] {
            map_row([a, b], [], y, false, |[av, bv], []| {
                _mm512_add_ps(_mm512_mul_ps(av, bv), av)
            });
            let mut s = [_mm512_setzero_pd(); 2];
            let mut unused = vec![0f32; a.len()];
            let f = |[av]: [__m512; 1], [bv]: [__m512; 1], [cv]: [__m512; 1]| {
                s.add(_mm512_sub_ps(av, bv));
                (av, [_mm512_add_ps(cv, _mm512_mul_ps(av, bv))])
            };
            for_row_out([a], [b], [&[]], [acc], (&mut unused, false), f);
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
            assert_eq!(acc, want_acc, "for_row_out d {d}");
            assert_eq!(lanes_got, lanes_want, "for_row_out sums d {d}");
            for stream in [false, true] {
                let mut acc2 = acc.clone();
                let mut out = crate::buf::AlignedBuf::zeros(d);
                // SAFETY: AVX-512 is present; AlignedBuf is 64-byte aligned.
                unsafe { with_out(&a, &b, &mut acc2, &mut out, stream) };
                crate::simd::stream_fence();
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
