//! How the row-wise kernels split their work: rows are cut into chunks
//! whose size depends only on the shape (never on the thread count), run in
//! parallel, and per-chunk partial parameter gradients are added in chunk
//! order, so results are bit-identical for any number of threads. Also the
//! shape checks and buffer lengths every caller needs.

use super::{NormKind, STATS};
use rayon::prelude::*;

/// Target number of elements of x per chunk of rows.
const CHUNK_ELEMS: usize = 64 * 1024;

thread_local! {
    /// Set by [`sequential`]: run the chunks in order on this thread.
    static SEQUENTIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` with every norm kernel it calls on this thread processing its
/// chunks one after another on the calling thread instead of on rayon's
/// pool. The chunks and the order their partial sums are added are the
/// same, so the results are the same bits; what it saves is handing small
/// work to pool threads, whose wake-up can cost more than the work (the
/// Python bridge measured about 28 us per call on the 2-core VM).
pub fn sequential<R>(f: impl FnOnce() -> R) -> R {
    let old = SEQUENTIAL.with(|s| s.replace(true));
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SEQUENTIAL.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(old);
    f()
}

fn is_sequential() -> bool {
    SEQUENTIAL.with(|s| s.get())
}

/// How `rows` rows of size `d` are cut into chunks. Depends only on the
/// shape, so reductions over chunks are thread-count independent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunks {
    /// Rows per chunk (the last chunk may be shorter).
    pub rows_per_chunk: usize,
    /// Number of chunks.
    pub count: usize,
}

impl Chunks {
    /// The chunking for a `[rows, d]` input.
    pub fn new(rows: usize, d: usize) -> Chunks {
        let rows_per_chunk = (CHUNK_ELEMS / d.max(1)).clamp(32, 256).min(rows.max(1));
        Chunks {
            rows_per_chunk,
            count: rows.div_ceil(rows_per_chunk),
        }
    }
}

/// Length of the scratch buffer [`backward`] needs for per-chunk partial
/// parameter gradients (0 when the kind has none).
pub fn backward_scratch_len(kind: NormKind, rows: usize, d: usize) -> usize {
    Chunks::new(rows, d).count * kind.num_params(d)
}

/// Length of the per-row statistics buffer for `rows` rows.
pub fn stats_len(rows: usize) -> usize {
    rows * STATS
}

pub(super) fn check_shapes<T>(
    kind: NormKind,
    d: usize,
    x: &[T],
    params: &[f32],
    out: &[T],
    stats: &[f32],
) -> usize {
    assert!(d > 0, "feature size d must be positive");
    assert_eq!(
        x.len() % d,
        0,
        "x length {} is not a multiple of d = {}",
        x.len(),
        d
    );
    let rows = x.len() / d;
    assert_eq!(out.len(), x.len(), "output length");
    assert_eq!(
        params.len(),
        kind.num_params(d),
        "{} params length",
        kind.name()
    );
    assert_eq!(stats.len(), stats_len(rows), "stats length");
    rows
}

/// Run `f(x_chunk, out_chunk, stats_chunk)` over the row chunks, in
/// parallel when there is more than one chunk.
pub(super) fn for_chunks<T: Send + Sync, F>(
    d: usize,
    x: &[T],
    out: &mut [T],
    stats: &mut [f32],
    f: F,
) where
    F: Fn(&[T], &mut [T], &mut [f32]) + Sync,
{
    let rows = x.len() / d;
    if rows == 0 {
        return;
    }
    let ch = Chunks::new(rows, d);
    let e = ch.rows_per_chunk * d;
    let s = ch.rows_per_chunk * STATS;
    if ch.count == 1 {
        f(x, out, stats);
    } else if is_sequential() {
        for ((x, o), st) in x.chunks(e).zip(out.chunks_mut(e)).zip(stats.chunks_mut(s)) {
            f(x, o, st);
        }
    } else {
        x.par_chunks(e)
            .zip(out.par_chunks_mut(e))
            .zip(stats.par_chunks_mut(s))
            .for_each(|((x, o), st)| f(x, o, st));
    }
}

/// Run `f(x_chunk, dy_chunk, stats_chunk, dx_chunk, partial)` over the row
/// chunks (in parallel when there is more than one), where `partial` is the
/// chunk's zeroed slice of `scratch` of length `np`, then add the partials in
/// chunk order (in f64) into `dparams`.
#[allow(clippy::too_many_arguments)]
pub(super) fn for_chunks_backward<T: Send + Sync, F>(
    d: usize,
    np: usize,
    x: &[T],
    dy: &[T],
    stats: &[f32],
    dx: &mut [T],
    dparams: &mut [f32],
    scratch: &mut [f32],
    f: F,
) where
    F: Fn(&[T], &[T], &[f32], &mut [T], &mut [f32]) + Sync,
{
    let rows = x.len() / d;
    if rows == 0 {
        return;
    }
    let ch = Chunks::new(rows, d);
    assert!(
        scratch.len() >= ch.count * np,
        "scratch too short: {} < {}",
        scratch.len(),
        ch.count * np
    );
    assert_eq!(dparams.len(), np, "dparams length");
    let scratch = &mut scratch[..ch.count * np];
    scratch.fill(0.0);
    let e = ch.rows_per_chunk * d;
    let s = ch.rows_per_chunk * STATS;
    if ch.count == 1 {
        f(x, dy, stats, dx, scratch);
    } else if is_sequential() {
        let parts = x.chunks(e).zip(dy.chunks(e)).zip(stats.chunks(s));
        for (c, (((x, dy), st), dx)) in parts.zip(dx.chunks_mut(e)).enumerate() {
            f(x, dy, st, dx, &mut scratch[c * np..(c + 1) * np]);
        }
    } else if np == 0 {
        x.par_chunks(e)
            .zip(dy.par_chunks(e))
            .zip(stats.par_chunks(s))
            .zip(dx.par_chunks_mut(e))
            .for_each(|(((x, dy), st), dx)| f(x, dy, st, dx, &mut []));
    } else {
        x.par_chunks(e)
            .zip(dy.par_chunks(e))
            .zip(stats.par_chunks(s))
            .zip(dx.par_chunks_mut(e))
            .zip(scratch.par_chunks_mut(np))
            .for_each(|((((x, dy), st), dx), p)| f(x, dy, st, dx, p));
    }
    if np > 0 {
        if ch.count == 1 {
            for (g, p) in dparams.iter_mut().zip(scratch.iter()) {
                *g += *p;
            }
        } else {
            for (j, g) in dparams.iter_mut().enumerate() {
                let mut acc = 0f64;
                for c in 0..ch.count {
                    acc += scratch[c * np + j] as f64;
                }
                *g += acc as f32;
            }
        }
    }
}
