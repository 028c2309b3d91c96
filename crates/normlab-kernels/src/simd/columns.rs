//! How the reductions split and join a row: the column chunks summed in
//! f32 lanes before joining the f64 total ([`F32_CHUNK`]), the part of a
//! prefetch slice for a chunk, and the fixed pairwise tree that joins
//! [`LANES`] accumulators.

use super::level::LANES;

/// Sum accumulators (f64 or f32) in a fixed pairwise tree.
#[inline(always)]
pub fn tree_sum<T: Copy + std::ops::AddAssign>(acc: &[T; LANES]) -> T {
    let mut a = *acc;
    let mut n = LANES;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            a[i] += a[i + n];
        }
    }
    a[0]
}

/// Columns summed in f32 lanes before the partial joins the f64 total
/// (storage types with [`Elem::F32_SUMS`]).
pub const F32_CHUNK: usize = 1024;

/// The `[start, end)` column ranges of [`F32_CHUNK`] columns of a row of `d`.
#[inline(always)]
pub fn f32_chunks(d: usize) -> impl Iterator<Item = (usize, usize)> {
    column_chunks(d, F32_CHUNK)
}

/// The `[start, end)` column ranges of `chunk` columns of a row of `d`
/// (`usize::MAX`: the whole row).
#[inline(always)]
pub(crate) fn column_chunks(d: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..d)
        .step_by(chunk)
        .map(move |c| (c, c.saturating_add(chunk).min(d)))
}

/// The part of an `ahead` slice (see [`ahead`](super::ahead)) for columns from `c` on.
#[inline(always)]
pub fn ahead_from<T>(ahead: &[T], c: usize) -> &[T] {
    ahead.get(c..).unwrap_or(&[])
}
