//! The accumulators of the AVX-512 row sums ([`RowSums`]: f32 partials
//! per chunk for 16-bit rows, f64 lanes for f32 rows), which the row
//! sweeps (`sweep.rs`) fill block by block: [`Partial`], and the two sums
//! the norms need, [`SumSq`] and [`Shifted`].

use super::VecAcc;
use std::arch::x86_64::*;

/// A row's sums as its sweeps build them block by block (alone in
/// [`row_sums`], or folded into the previous row's output sweep by
/// [`map_row_summing`](crate::simd::x86::map_row_summing)), in
/// [`VecAcc`] lanes: f32 lanes per [`F32_CHUNK`](super::F32_CHUNK)
/// columns joined in f64 (16-bit rows), or f64 lanes over the whole
/// row. The portable loops' operations lane by lane, so the same bits.
pub(crate) trait RowSums {
    /// Columns per partial ([`VecAcc::CHUNK`]).
    const CHUNK: usize;
    /// What the row's tail block is padded with (its lanes then add 0).
    fn pad(&self) -> f32;
    /// Add one block of the row.
    ///
    /// # Safety
    /// AVX-512 F must be present.
    unsafe fn block(&mut self, v: __m512);
    /// Join the partial into the f64 total and restart it.
    ///
    /// # Safety
    /// As [`RowSums::block`].
    unsafe fn end_chunk(&mut self);
}

/// A sum in `V` lanes over the current chunk of a row, and `t`, the
/// f64 total of the chunks before it (each joined as its lanes'
/// [`tree_sum`]): the accumulator of every [`RowSums`] and of the
/// backward's first sweeps.
#[derive(Clone, Copy)]
pub(crate) struct Partial<V> {
    s: V,
    pub(crate) t: f64,
}

impl<V: VecAcc> Partial<V> {
    /// Zero. The total starts at +0, as the portable loops' `0f64 +
    /// partial`; for the one chunk of f64 lanes `0 + sum` is the sum
    /// itself, since lanes that start at +0 never hold -0 (x + y is -0
    /// only when both are -0), and an empty row sums to +0 either way.
    ///
    /// # Safety
    /// AVX-512 F must be present.
    #[inline(always)]
    pub(crate) unsafe fn new() -> Self {
        Partial {
            s: V::zero(),
            t: 0.0,
        }
    }
    /// Add `v`, lane by lane.
    ///
    /// # Safety
    /// As [`Partial::new`].
    #[inline(always)]
    pub(crate) unsafe fn add(&mut self, v: V) {
        self.s = self.s.plus(v);
    }
    /// Add the 16 f32 terms of `v` ([`VecAcc::add`]).
    ///
    /// # Safety
    /// As [`Partial::new`].
    #[inline(always)]
    pub(crate) unsafe fn add_f32(&mut self, v: __m512) {
        self.s.add(v);
    }
    /// Join the chunk into the total and restart the lanes.
    ///
    /// # Safety
    /// As [`Partial::new`].
    #[inline(always)]
    pub(crate) unsafe fn end_chunk(&mut self) {
        self.t += self.s.total();
        self.s = V::zero();
    }
}

/// `sum(x^2)` ([`super::sum_squares`]); the total in `p.t`.
pub(crate) struct SumSq<V> {
    pub(crate) p: Partial<V>,
}

impl<V: VecAcc> SumSq<V> {
    /// # Safety
    /// AVX-512 F must be present.
    #[inline(always)]
    pub(crate) unsafe fn new() -> Self {
        SumSq { p: Partial::new() }
    }
}

impl<V: VecAcc> RowSums for SumSq<V> {
    const CHUNK: usize = V::CHUNK;
    #[inline(always)]
    fn pad(&self) -> f32 {
        0.0
    }
    #[inline(always)]
    unsafe fn block(&mut self, v: __m512) {
        let w = V::of(v);
        self.p.add(w.mul(w));
    }
    #[inline(always)]
    unsafe fn end_chunk(&mut self) {
        self.p.end_chunk();
    }
}

/// `(sum(x - k), sum((x - k)^2))` ([`super::shifted_sums`]); the totals
/// in `s1.t`, `s2.t`.
pub(crate) struct Shifted<V> {
    k: f32,
    kv: V,
    pub(crate) s1: Partial<V>,
    pub(crate) s2: Partial<V>,
}

impl<V: VecAcc> Shifted<V> {
    /// # Safety
    /// AVX-512 F must be present.
    #[inline(always)]
    pub(crate) unsafe fn new(k: f32) -> Self {
        let (s1, s2) = (Partial::new(), Partial::new());
        Shifted {
            k,
            kv: V::splat(k),
            s1,
            s2,
        }
    }
    /// The two totals.
    #[inline(always)]
    pub(crate) fn totals(&self) -> (f64, f64) {
        (self.s1.t, self.s2.t)
    }
}

impl<V: VecAcc> RowSums for Shifted<V> {
    const CHUNK: usize = V::CHUNK;
    #[inline(always)]
    fn pad(&self) -> f32 {
        self.k
    }
    #[inline(always)]
    unsafe fn block(&mut self, v: __m512) {
        let w = V::of(v).sub(self.kv);
        self.s1.add(w);
        self.s2.add(w.mul(w));
    }
    #[inline(always)]
    unsafe fn end_chunk(&mut self) {
        self.s1.end_chunk();
        self.s2.end_chunk();
    }
}
