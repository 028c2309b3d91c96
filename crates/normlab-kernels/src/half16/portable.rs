//! The portable slice conversions between f32 and the 16-bit storage
//! types ([`Elem::get`], [`Elem::put`] per value), compiled per level:
//! what the AVX-512 conversions fall back on for a slice's tail.

use crate::simd::Elem;

crate::multiversion! {
    /// 16-bit -> f32 with [`Elem::get`], prefetching `ahead` every 64 bytes.
    pub fn widen_portable<T: Elem>(src: &[T], dst: &mut [f32], ahead: &[T]) {
        for (k, (d, s)) in dst.chunks_mut(32).zip(src.chunks(32)).enumerate() {
            crate::simd::prefetch_block(ahead, 32 * k);
            for (d, s) in d.iter_mut().zip(s) {
                *d = s.get();
            }
        }
    }
}

crate::multiversion! {
    /// f32 -> 16-bit with [`Elem::put`] (LLVM vectorises it).
    pub fn narrow_portable<T: Elem>(src: &[f32], dst: &mut [T]) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = T::put(s);
        }
    }
}
