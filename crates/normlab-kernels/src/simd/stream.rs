//! Prefetching ahead of the row sweeps and non-temporal (streaming)
//! stores of large outputs.

#[cfg(target_arch = "x86_64")]
use super::level::level;
use super::level::LANES;
#[cfg(target_arch = "x86_64")]
use super::x86;

/// Hint the CPU to bring the cache line at `p` into L1 (a no-op where
/// unsupported). Never faults, whatever `p` is; changes no result.
#[inline(always)]
pub fn prefetch(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch instructions do not fault on any address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// How far ahead (in f32 elements, 3 KiB) the reduction sweeps prefetch.
/// Rows are swept twice (statistics, then output), which breaks the
/// hardware prefetcher's stream at every row; prefetching a fixed distance
/// ahead in the flat buffer restores it. Measured on the 2-core AVX-512
/// development machine: 768 was the best of {256, 384, 512, 768, 1024,
/// 2048, next row} for d = 256 .. 8192 (e.g. 8192x1024 rmsnorm forward
/// 2.75 ms -> 2.50 ms, copy roofline 2.43 ms).
pub const PREFETCH_DIST: usize = 768;

/// The part of `buf` that lies [`PREFETCH_DIST`] elements after `start`
/// (empty near the end): pass it as an `ahead` slice to [`for_blocks!`](crate::for_blocks).
/// For a 16-bit buffer the distance is the same in bytes (twice the values).
#[inline(always)]
pub fn ahead<T>(buf: &[T], start: usize) -> &[T] {
    buf.get(start + PREFETCH_DIST * 4 / std::mem::size_of::<T>()..)
        .unwrap_or(&[])
}

/// Prefetch the `LANES`-block of `ahead` at offset `j0` (no-op past its end).
#[inline(always)]
pub fn prefetch_block<T>(ahead: &[T], j0: usize) {
    if j0 < ahead.len() {
        prefetch(ahead[j0..].as_ptr() as *const f32);
    }
}

/// Outputs at least this large (bytes) are written with non-temporal
/// (streaming) stores, which skip the read-for-ownership of each output
/// line and do not evict the caller's working set from cache. Measured on the
/// development machine (whose caches hold about 64 MiB for one core): with
/// a 96 MiB footprint, two 32 MiB rmsnorm forwards took 8.1-9.2 ms with
/// normal stores and 5.2 ms streaming; a lone 32 MiB forward repeated on
/// cache-hot buffers was 10% slower streaming (2.64 vs 2.41 ms). Real use
/// (forward then backward, or a model step) has the large footprint.
pub const STREAM_MIN_BYTES: usize = 16 << 20;

/// Whether a kernel writing `out` (rows of `d` values) should stream: large
/// enough, 64-byte aligned and whole 16-value blocks per row. f32 outputs
/// stream at every level ([`stream_block`]); 16-bit outputs only through
/// the AVX-512 row sweeps (`simd::x86::for_row_out`; 32 bytes per block).
/// For 16 bits, measured on the Intel Xeon VM (2026-12-01, 1 thread, the
/// speed-up over f32 in the same run, two runs each): forward+backward at
/// 8192x1024 1.64-1.88x streaming against 1.24-1.37x not (rmsnorm bf16 and
/// f16), at 2048x4096 1.96-2.19x against 1.54-1.57x; a lone forward
/// repeated on cache-hot buffers was within the noise (1.16-1.58x against
/// 1.35-1.68x). Earlier, on the AMD EPYC machine with the 16-bit stores
/// through `write_row!`, streaming was slower (bf16 rmsnorm forward at
/// 8192x1024 1.13 ms against 0.96 ms).
#[inline]
pub fn should_stream<T>(out: &[T], d: usize) -> bool {
    cfg!(target_arch = "x86_64")
        && std::mem::size_of_val(out) >= STREAM_MIN_BYTES
        && d.is_multiple_of(LANES)
        && (out.as_ptr() as usize).is_multiple_of(64)
}

/// Copy `src` into `dst` (same length, `dst` 16-byte aligned) with
/// non-temporal stores, as the f32 kernels stream their outputs (at the
/// AVX-512 levels: whole 512-bit stores where the processor favours them,
/// see `x86::wide_streams`): the streaming half of the benchmarks' copy
/// roofline.
pub fn stream_copy(dst: &mut [f32], src: &[f32]) {
    assert_eq!(dst.len(), src.len(), "stream_copy lengths");
    #[cfg(target_arch = "x86_64")]
    if level().has_avx512() {
        // SAFETY: the level says AVX-512 F is present.
        unsafe { x86::stream_copy(dst, src) };
        return;
    }
    let full = dst.len() - dst.len() % LANES;
    for j in (0..full).step_by(LANES) {
        stream_block(
            &mut dst[j..],
            src[j..j + LANES].try_into().expect("a block"),
        );
    }
    dst[full..].copy_from_slice(&src[full..]);
}

/// Store one block with non-temporal stores. `dst` must start 16-byte
/// aligned (checked) and hold at least `LANES` floats.
#[inline(always)]
pub fn stream_block(dst: &mut [f32], b: &[f32; LANES]) {
    let dst = &mut dst[..LANES];
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_loadu_ps, _mm_stream_ps};
        assert!(
            (dst.as_ptr() as usize).is_multiple_of(16),
            "stream_block needs 16-byte alignment"
        );
        let p = dst.as_mut_ptr();
        // SAFETY: dst holds LANES floats and is 16-byte aligned (checked);
        // SSE is part of the x86-64 baseline.
        unsafe {
            for k in 0..LANES / 4 {
                _mm_stream_ps(p.add(4 * k), _mm_loadu_ps(b.as_ptr().add(4 * k)));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(b);
}

/// Order earlier streaming stores before later stores (call once after a
/// kernel that streamed, before its output is handed on).
#[inline(always)]
pub fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence();
    }
}
