//! `AlignedBuf`: an f32 buffer whose start is aligned to a 64-byte cache
//! line. A `Vec<f32>` is only 16-byte aligned, which makes every 64-byte
//! AVX-512 store straddle two cache lines; measured on the development
//! machine that alone cost ~25% on memory-bound norm kernels. normlab's
//! modules allocate their activations with this type (PyTorch's allocator
//! also aligns to 64 bytes).

use std::fmt;
use std::ops::{Deref, DerefMut};

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// A fixed-length, zero-initialised, 64-byte-aligned `[f32]`.
#[derive(Clone)]
pub struct AlignedBuf {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedBuf {
    /// `n` zeros.
    pub fn zeros(n: usize) -> AlignedBuf {
        AlignedBuf {
            lines: vec![Line([0.0; 16]); n.div_ceil(16)],
            len: n,
        }
    }

    /// A copy of `v`.
    pub fn from_slice(v: &[f32]) -> AlignedBuf {
        let mut b = AlignedBuf::zeros(v.len());
        b.copy_from_slice(v);
        b
    }
}

impl AlignedBuf {
    /// The first `n` values of the buffer as storage type `T` (f32 or a
    /// 16-bit type: plain data, valid for any bits), 64-byte aligned.
    /// Panics if they do not fit.
    pub fn as_elems<T: crate::simd::Elem>(&self, n: usize) -> &[T] {
        assert!(
            n * std::mem::size_of::<T>() <= self.len * 4,
            "as_elems: {n} do not fit"
        );
        // SAFETY: in bounds (checked); T is f32, bf16 or f16, whose every bit
        // pattern is a value, with alignment at most 4 (lines are 64-aligned).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr() as *const T, n) }
    }

    /// [`AlignedBuf::as_elems`], mutable.
    pub fn as_elems_mut<T: crate::simd::Elem>(&mut self, n: usize) -> &mut [T] {
        assert!(
            n * std::mem::size_of::<T>() <= self.len * 4,
            "as_elems: {n} do not fit"
        );
        // SAFETY: as in as_elems, and the borrow is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr() as *mut T, n) }
    }
}

impl Deref for AlignedBuf {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // SAFETY: `lines` holds at least `len` contiguous, initialised f32s
        // (Line is repr(C) over [f32; 16], so there is no padding).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr() as *const f32, self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as in `deref`, and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr() as *mut f32, self.len) }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for AlignedBuf {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

#[cfg(test)]
mod tests {
    use super::AlignedBuf;

    #[test]
    fn aligned_and_sized() {
        for n in [0, 1, 15, 16, 17, 1000] {
            let mut b = AlignedBuf::zeros(n);
            assert_eq!(b.len(), n);
            assert_eq!(b.as_ptr() as usize % 64, 0);
            b.iter_mut().enumerate().for_each(|(i, v)| *v = i as f32);
            let c = b.clone();
            assert_eq!(b, c);
            assert_eq!(AlignedBuf::from_slice(&c), b);
        }
    }
}
