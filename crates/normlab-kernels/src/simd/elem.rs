//! The storage types the kernels read and write ([`Elem`]: f32 here, the
//! 16-bit types in [`crate::half16`]) and their block conversions
//! ([`Conv`]: the processor's instructions or the portable path).

use super::level::LANES;
use super::stream::stream_block;

/// A storage type the kernels read and write: f32, or a 16-bit type
/// ([`crate::half16`]) widened to f32 on load and rounded on store. Every
/// kernel computes in f32 (sums in f64) whatever the storage.
#[allow(private_bounds)]
pub trait Elem: Copy + Default + Send + Sync + 'static {
    /// `"f32"`, `"bf16"` or `"f16"`.
    const NAME: &'static str;
    /// Whether the kernels' row sums run in f32 partials over
    /// [`F32_CHUNK`](super::F32_CHUNK) columns (joined in f64) instead of f64 lanes: true for
    /// the 16-bit types, whose values carry 8 or 11 significant bits, so
    /// that f32 partials are far inside their rounding (each partial's
    /// relative error is at most 64 x 2^-24 = 3.8e-6, against 2^-9 and 2^-12
    /// for the output); out of f32's safe range the sums fall back to f64
    /// (see [`f32_sum_ok`](super::f32_sum_ok)). False for f32, whose sums stay f64.
    const F32_SUMS: bool = false;
    /// The lanes the AVX-512 sweeps sum this type's rows in, as
    /// [`Elem::F32_SUMS`] says: f32 lanes per chunk (`__m512`) or f64 lanes
    /// (`[__m512d; 2]`).
    #[cfg(target_arch = "x86_64")]
    type Sums: super::x86::VecAcc;
    /// The value as f32 (exact).
    fn get(self) -> f32;
    /// `v` rounded to this type.
    fn put(v: f32) -> Self;
    /// [`Elem::store`], or with non-temporal stores when `stream` (see
    /// [`stream_block`]; `dst` must then start 16-byte aligned). Only f32
    /// streams here (the 16-bit types stream through [`Elem::store16`]):
    /// the default ignores `stream`.
    #[inline(always)]
    fn write(dst: &mut [Self], b: &[f32; LANES], hw: Conv, stream: bool) {
        let _ = stream;
        Self::store(dst, b, hw)
    }
    /// The slice itself when the type is f32 (kernels written for f32 only
    /// then run on it in place); `None` for a 16-bit type.
    fn as_f32(s: &[Self]) -> Option<&[f32]>;
    /// [`Elem::as_f32`] for a mutable slice.
    fn as_f32_mut(s: &mut [Self]) -> Option<&mut [f32]>;
    /// `dst[i] = src[i]` as f32, prefetching `ahead` (see [`ahead`](super::ahead)).
    fn widen(src: &[Self], dst: &mut [f32], ahead: &[Self]);
    /// `dst[i] = src[i]` rounded to this type, exactly as [`Elem::put`].
    fn narrow(src: &[f32], dst: &mut [Self]);
    /// How this type's block conversions ([`Elem::load`], [`Elem::store`])
    /// run at the kernels' current [`level`](super::level). The sweeps ask once, before
    /// their loop over blocks, so that LLVM splits the loop instead of
    /// checking per block.
    #[inline(always)]
    fn hw() -> Conv {
        Conv::PORTABLE
    }
    /// The first `LANES` values of `src` as f32, exactly as [`Elem::get`]
    /// (with the processor's conversion where `hw` allows).
    #[inline(always)]
    fn load(src: &[Self], hw: Conv) -> [f32; LANES] {
        let _ = hw;
        load_portable(src)
    }
    /// Round one block into the first `LANES` values of `dst`, exactly as
    /// [`Elem::put`] (`hw` as for [`Elem::load`]).
    #[inline(always)]
    fn store(dst: &mut [Self], b: &[f32; LANES], hw: Conv) {
        let _ = hw;
        let dst = &mut dst[..LANES];
        for i in 0..LANES {
            dst[i] = Self::put(b[i]);
        }
    }
    /// The first `LANES` values of `src` widened to f32 in a 512-bit
    /// register, exactly as [`Elem::get`], with the type's instructions (the
    /// AVX-512 row sweeps, `simd::x86::for_row_out`).
    ///
    /// # Safety
    /// AVX-512 F must be present (call it from a function compiled for it).
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(src: &[Self]) -> std::arch::x86_64::__m512;
    /// Round a 512-bit register into the first `LANES` values of `dst`,
    /// exactly as [`Elem::put`]; `stream` is `Some(wide)` to write with
    /// non-temporal stores (f32: `simd::x86::stream16`, `dst` aligned as it
    /// asks; 16 bits: one 32-byte store, `dst` 32-byte aligned); `hw` is
    /// [`Elem::hw`] (bf16: whether `vcvtneps2bf16` may run).
    ///
    /// # Safety
    /// As [`Elem::load16`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn store16(
        dst: &mut [Self],
        v: std::arch::x86_64::__m512,
        stream: Option<bool>,
        hw: Conv,
    );
}

impl Elem for f32 {
    const NAME: &'static str = "f32";
    #[cfg(target_arch = "x86_64")]
    type Sums = [std::arch::x86_64::__m512d; 2];
    #[inline(always)]
    fn get(self) -> f32 {
        self
    }
    #[inline(always)]
    fn put(v: f32) -> f32 {
        v
    }
    #[inline(always)]
    fn write(dst: &mut [f32], b: &[f32; LANES], hw: Conv, stream: bool) {
        if stream {
            stream_block(dst, b)
        } else {
            Self::store(dst, b, hw)
        }
    }
    fn as_f32(s: &[f32]) -> Option<&[f32]> {
        Some(s)
    }
    fn as_f32_mut(s: &mut [f32]) -> Option<&mut [f32]> {
        Some(s)
    }
    fn widen(src: &[f32], dst: &mut [f32], _ahead: &[f32]) {
        dst.copy_from_slice(src)
    }
    fn narrow(src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(src: &[f32]) -> std::arch::x86_64::__m512 {
        super::x86::vec(src[..LANES].try_into().expect("a block"))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn store16(
        dst: &mut [f32],
        v: std::arch::x86_64::__m512,
        stream: Option<bool>,
        _hw: Conv,
    ) {
        let dst = &mut dst[..LANES];
        match stream {
            // SAFETY: dst holds 16 floats, aligned as the caller promised.
            Some(wide) => unsafe { super::x86::stream16(dst.as_mut_ptr(), v, wide) },
            None => dst.copy_from_slice(&super::x86::lanes(v)),
        }
    }
}

/// The first `LANES` values of `src` as f32 through [`Elem::get`] (the
/// portable [`Elem::load`]).
#[inline(always)]
pub fn load_portable<T: Elem>(src: &[T]) -> [f32; LANES] {
    let src = &src[..LANES];
    let mut b = [0f32; LANES];
    for i in 0..LANES {
        b[i] = src[i].get();
    }
    b
}

/// Whether a block conversion may use the processor's conversion
/// instructions: only [`Elem::hw`] makes one that says yes, and only when
/// the CPU has them.
#[derive(Clone, Copy, Debug)]
pub struct Conv(bool);

impl Conv {
    /// The portable conversion.
    pub const PORTABLE: Conv = Conv(false);
    /// `hw` when the CPU has the instructions the caller checked for.
    pub(crate) fn checked(hw: bool) -> Conv {
        Conv(hw)
    }
    /// Whether the instructions may run.
    #[inline(always)]
    pub fn hw(self) -> bool {
        self.0
    }
}

/// [`Elem::hw`] of a slice's element type (for the sweep macros, which
/// know their slices but not their types).
#[inline(always)]
pub fn hw_of<T: Elem>(_: &[T]) -> Conv {
    T::hw()
}
