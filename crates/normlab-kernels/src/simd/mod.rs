//! Instruction-set dispatch, prefetching and streaming stores, and the sweep
//! macros every kernel loops with ([`for_blocks!`](crate::for_blocks),
//! [`write_row!`](crate::write_row)); the storage types are in `elem`, the
//! fixed-order reductions in `sums`, the level in `level`, a row's column
//! chunks and the tree sum in `columns`, prefetching and streaming stores
//! in `stream`. This file only declares them, re-exports, and holds the
//! macros.
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

mod columns;
mod elem;
mod level;
mod stream;
pub(crate) mod sums;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

pub use columns::{ahead_from, f32_chunks, tree_sum, F32_CHUNK};
pub use elem::{hw_of, load_portable, Conv, Elem};
pub use level::{detected_level, level, set_level, Level, LANES};
pub use stream::{
    ahead, prefetch, prefetch_block, should_stream, stream_block, stream_copy, stream_fence,
    PREFETCH_DIST, STREAM_MIN_BYTES,
};
pub use sums::{dot, f32_sum_ok, shifted_sums, sum_squares, Acc};

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
