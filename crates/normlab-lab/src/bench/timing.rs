//! Timing helpers every benchmark uses: medians of repeated runs, the range
//! over rounds, and the copy-bandwidth roofline measured in the same run.

use normlab::kernels::buf::AlignedBuf;
use normlab::kernels::simd;
use rayon::prelude::*;
use std::time::Instant;

/// The smallest and largest of `v` (per-round ratios and fractions, shown
/// as a range next to their median).
pub fn range(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

/// Median of a sample (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Time `f` repeatedly: one warm-up call, then at least `min_reps` calls and
/// about `target_seconds` in all. Returns (median seconds, reps).
pub fn time_median<F: FnMut()>(mut f: F, target_seconds: f64, min_reps: usize) -> (f64, usize) {
    let t0 = Instant::now();
    f();
    let first = t0.elapsed().as_secs_f64().max(1e-9);
    let reps = ((target_seconds / first) as usize).clamp(min_reps, 10_000);
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64());
    }
    (median(&mut times), reps)
}

/// Copy bandwidth (GB/s, read + write bytes / time) for `n` f32 elements
/// with the current rayon pool: the better of `copy_from_slice` (memcpy,
/// normal stores) and a copy with streaming stores, since each wins at
/// different footprints (see `simd::STREAM_MIN_BYTES`).
pub fn copy_roofline_gbps(n: usize, target_seconds: f64, min_reps: usize) -> f64 {
    let src = AlignedBuf::from_slice(&vec![1.0f32; n]);
    let mut dst = AlignedBuf::from_slice(&vec![0.5f32; n]);
    // Chunks of whole 16-float blocks so streaming chunks stay aligned.
    let chunk = ((64 * 1024).max(n.div_ceil(rayon::current_num_threads() * 4))).div_ceil(16) * 16;
    let (t_memcpy, _) = time_median(
        || {
            dst.par_chunks_mut(chunk)
                .zip(src.par_chunks(chunk))
                .for_each(|(d, s)| d.copy_from_slice(s));
        },
        target_seconds,
        min_reps,
    );
    let (t_stream, _) = time_median(
        || {
            dst.par_chunks_mut(chunk)
                .zip(src.par_chunks(chunk))
                .for_each(|(d, s)| {
                    simd::stream_copy(d, s);
                    simd::stream_fence();
                });
        },
        target_seconds,
        min_reps,
    );
    std::hint::black_box(&*dst);
    (2 * n * 4) as f64 / t_memcpy.min(t_stream) / 1e9
}
