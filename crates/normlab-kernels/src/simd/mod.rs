//! Instruction-set dispatch, prefetching and streaming stores, and the sweep
//! macros every kernel loops with ([`for_blocks!`](crate::for_blocks),
//! [`write_row!`](crate::write_row)); the storage types are in `elem`, the
//! fixed-order reductions in `sums`.
//!
//! Rust has no fast-math, so a float reduction written with one accumulator is
//! a serial dependency chain that LLVM will not vectorise. The helpers here
//! keep `LANES` independent accumulators (which LLVM packs into SIMD
//! registers) and combine them in a fixed tree order. Because the order is
//! fixed in the source, and Rust never contracts `a * b + c` into an FMA on its
//! own, the result is bit-identical whichever instruction set runs it:
//! the portable build, AVX2 or AVX-512.
//!
//! [`multiversion!`](crate::multiversion) compiles one kernel body three times
//! (baseline x86-64, AVX2+FMA, AVX-512; kernels generic over the storage type
//! a fourth, AVX-512 with BF16) and picks the best one the CPU has at
//! run time, so the library needs no `-C target-cpu` flag and its binaries
//! stay portable.

use std::sync::atomic::{AtomicU8, Ordering};

/// Number of independent accumulators in the reductions (a multiple of the
/// widest f64 vector, 8 lanes of AVX-512, times two to hide add latency).
pub const LANES: usize = 16;

mod elem;
pub(crate) mod sums;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

pub use elem::{hw_of, load_portable, Conv, Elem};
pub use sums::{
    ahead_from, dot, f32_chunks, f32_sum_ok, shifted_sums, sum_squares, tree_sum, Acc, F32_CHUNK,
};

/// The instruction-set level a multiversioned kernel runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Baseline for the target (SSE2 on x86-64); also every non-x86 target.
    Generic = 1,
    /// x86-64-v3: AVX2 + FMA.
    Avx2 = 2,
    /// x86-64-v4: AVX-512 F/VL/BW/DQ (F16C's conversions included).
    Avx512 = 3,
    /// x86-64-v4 plus AVX-512 BF16 (`vcvtneps2bf16`): only the kernels
    /// generic over the storage type get a copy for it.
    Avx512Bf16 = 4,
}

impl Level {
    /// Lower-case name as accepted by `NORMLAB_SIMD`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Generic => "generic",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
            Level::Avx512Bf16 => "avx512bf16",
        }
    }

    /// Whether AVX-512 F/VL/BW/DQ are present (both AVX-512 levels).
    pub fn has_avx512(self) -> bool {
        matches!(self, Level::Avx512 | Level::Avx512Bf16)
    }
}

static LEVEL: AtomicU8 = AtomicU8::new(0);

/// Best level this CPU supports.
pub fn detected_level() -> Level {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            if std::arch::is_x86_feature_detected!("avx512bf16") {
                return Level::Avx512Bf16;
            }
            return Level::Avx512;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return Level::Avx2;
        }
    }
    Level::Generic
}

/// The level kernels run at: the detected one, lowered by the environment
/// variable `NORMLAB_SIMD=generic|avx2|avx512|avx512bf16` or by [`set_level`]. A request
/// above what the CPU supports is clamped to what it supports.
#[inline]
pub fn level() -> Level {
    match LEVEL.load(Ordering::Relaxed) {
        1 => Level::Generic,
        2 => Level::Avx2,
        3 => Level::Avx512,
        4 => Level::Avx512Bf16,
        _ => init_level(),
    }
}

#[cold]
fn init_level() -> Level {
    let best = detected_level();
    let wanted = match std::env::var("NORMLAB_SIMD").ok().as_deref() {
        Some("generic") => Level::Generic,
        Some("avx2") => Level::Avx2,
        Some("avx512") => Level::Avx512,
        _ => best,
    };
    let lvl = wanted.min(best);
    LEVEL.store(lvl as u8, Ordering::Relaxed);
    lvl
}

/// Force a level (clamped to what the CPU supports); returns the level set.
/// Results do not depend on the level, so this only changes speed; tests use
/// it to prove exactly that.
pub fn set_level(wanted: Level) -> Level {
    let lvl = wanted.min(detected_level());
    LEVEL.store(lvl as u8, Ordering::Relaxed);
    lvl
}

/// Define a function whose body is compiled for several instruction sets and
/// dispatched at run time on [`level()`]. Results must not depend on the
/// level: LLVM never fuses a multiply and an add by itself, and `mul_add`
/// is one rounding at every level (an instruction with FMA, a libm call on
/// the generic level, where it is slow: keep it out of generic hot loops).
#[macro_export]
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident<$g:ident: $bound:path>($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name<$g: $bound>($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn body<$g: $bound>($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,avx512bf16")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn v5<$g: $bound>($($arg: $ty),*) $(-> $ret)? { body::<$g>($($arg),*) }
                #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn v4<$g: $bound>($($arg: $ty),*) $(-> $ret)? { body::<$g>($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn v3<$g: $bound>($($arg: $ty),*) $(-> $ret)? { body::<$g>($($arg),*) }
                match $crate::simd::level() {
                    // SAFETY: level() never reports a level the CPU lacks.
                    $crate::simd::Level::Avx512Bf16 => return unsafe { v5::<$g>($($arg),*) },
                    $crate::simd::Level::Avx512 => return unsafe { v4::<$g>($($arg),*) },
                    $crate::simd::Level::Avx2 => return unsafe { v3::<$g>($($arg),*) },
                    $crate::simd::Level::Generic => {}
                }
            }
            body::<$g>($($arg),*)
        }
    };
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn v4($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn v3($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
                match $crate::simd::level() {
                    // SAFETY: level() never reports a level the CPU lacks.
                    $crate::simd::Level::Avx512 | $crate::simd::Level::Avx512Bf16 => return unsafe { v4($($arg),*) },
                    $crate::simd::Level::Avx2 => return unsafe { v3($($arg),*) },
                    $crate::simd::Level::Generic => {}
                }
            }
            body($($arg),*)
        }
    };
}

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

/// Write one output row `$dst` (all of it) as `$val`, an expression of the
/// elements of the equally long input rows `$src...` (inside `$val` each
/// `$src` names its element at the current index), with streaming stores
/// when `$stream` (see [`should_stream`]). Each element is computed by the
/// same expression either way, so the result does not depend on `$stream`.
#[macro_export]
macro_rules! write_row {
    ($dst:expr, $stream:expr, ($($src:ident),+) => $val:expr) => {{
        let dst = $dst;
        let d = dst.len();
        let stream: bool = $stream;
        $(let $src = &$src[..d];)+
        // The loop twice, with the conversion fixed in each (see Elem::hw).
        let hw = $crate::simd::hw_of(dst).hw() $(|| $crate::simd::hw_of($src).hw())+;
        let full = if hw {
            $crate::__write_blocks!($crate::simd::Conv::checked(true), dst, stream, ($($src),+) => $val)
        } else {
            $crate::__write_blocks!($crate::simd::Conv::PORTABLE, dst, stream, ($($src),+) => $val)
        };
        for j in full..d {
            $(let $src = $crate::simd::Elem::get($src[j]);)+
            dst[j] = $crate::simd::Elem::put($val);
        }
    }};
}

/// [`write_row!`]'s loop over full blocks, with the conversion `$conv`;
/// returns where the tail starts.
#[doc(hidden)]
#[macro_export]
macro_rules! __write_blocks {
    ($conv:expr, $dst:ident, $stream:ident, ($($src:ident),+) => $val:expr) => {{
        let conv: $crate::simd::Conv = $conv;
        let d = $dst.len();
        let mut j0 = 0;
        while j0 + $crate::simd::LANES <= d {
            let mut b = [0f32; $crate::simd::LANES];
            {
                $(let $src: [f32; $crate::simd::LANES] = $crate::simd::Elem::load(&$src[j0..], conv);)+
                for i in 0..$crate::simd::LANES {
                    $(let $src = $src[i];)+
                    b[i] = $val;
                }
            }
            $crate::simd::Elem::write(&mut $dst[j0..], &b, conv, $stream);
            j0 += $crate::simd::LANES;
        }
        j0
    }};
}

/// Run `$body` for each `LANES`-block of the equally long slices `$x...`,
/// binding each block as `&[f32; LANES]` (and each block of the slices
/// after `; mut` as `&mut [f32; LANES]`); a last partial block is copied
/// into zero-padded (`$pad` for the first slice, 0 for the others) arrays,
/// and the `mut` ones are copied back after the body. Element `j` always
/// lands in lane `j % LANES`, so the accumulation order is the same for
/// every length and instruction set, and the body sees only fixed-size
/// arrays, which LLVM keeps in vector registers. Each full block also
/// prefetches the block at the same offset of every `ahead` slice (see
/// [`ahead`]). A macro rather than a closure so the body is always inlined
/// into the multiversioned caller.
#[macro_export]
macro_rules! for_blocks {
    (pad: $pad:expr, ahead: [$($ahead:expr),*], $($x:ident in $src:expr),+ $(; mut $($y:ident in $dst:expr),+)? => $body:block) => {{
        let n = $crate::__first_len!($($src),+);
        let full = n - n % $crate::simd::LANES;
        // The loop twice, with the conversion fixed in each, so that each
        // copy has no per-block check (see Elem::hw). A sweep's 16-bit
        // slices are all of one type, so one answer holds for each; f32
        // ignores it.
        let hw = false $(|| $crate::simd::hw_of(&$src).hw())+;
        if hw {
            $crate::__full_blocks!($crate::simd::Conv::checked(true), full, [$($ahead),*], $($x in $src),+ $(; mut $($y in $dst),+)? => $body);
        } else {
            $crate::__full_blocks!($crate::simd::Conv::PORTABLE, full, [$($ahead),*], $($x in $src),+ $(; mut $($y in $dst),+)? => $body);
        }
        if full < n {
            let t = n - full;
            let mut first = true;
            $(
                let mut pad_block = [if first { $pad } else { 0.0 }; $crate::simd::LANES];
                #[allow(unused_assignments)]
                {
                    first = false;
                }
                for i in 0..t {
                    pad_block[i] = $crate::simd::Elem::get($src[full + i]);
                }
                let $x: &[f32; $crate::simd::LANES] = &pad_block;
            )+
            let _ = first;
            $($(
                let mut $y = [0f32; $crate::simd::LANES];
                $y[..t].copy_from_slice(&$dst[full..n]);
            )+)?
            {
                $($(let $y: &mut [f32; $crate::simd::LANES] = &mut $y;)+)?
                $body
            }
            $($($dst[full..n].copy_from_slice(&$y[..t]);)+)?
        }
    }};
}

/// [`for_blocks!`]'s loop over full blocks, with the conversion `$conv`
/// (for the storage-type slices; f32 ignores it).
#[doc(hidden)]
#[macro_export]
macro_rules! __full_blocks {
    ($conv:expr, $full:expr, [$($ahead:expr),*], $($x:ident in $src:expr),+ $(; mut $($y:ident in $dst:expr),+)? => $body:block) => {{
        let conv: $crate::simd::Conv = $conv;
        let mut j0 = 0;
        while j0 < $full {
            $($crate::simd::prefetch_block($ahead, j0);)*
            $(let $x: &[f32; $crate::simd::LANES] = &$crate::simd::Elem::load(&$src[j0..], conv);)+
            $($(let $y: &mut [f32; $crate::simd::LANES] = (&mut $dst[j0..j0 + $crate::simd::LANES]).try_into().unwrap();)+)?
            $body
            j0 += $crate::simd::LANES;
        }
    }};
}

#[doc(hidden)]
#[macro_export]
macro_rules! __first_len {
    ($a:expr $(, $rest:expr)*) => {
        $a.len()
    };
}
