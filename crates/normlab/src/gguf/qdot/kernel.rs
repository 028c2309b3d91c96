//! Which instructions the integer lane dots use ([`LaneKernel`]).

/// Which instructions [`lane_dots`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneKernel {
    /// Plain Rust.
    Portable,
    /// AVX2's `vpmaddubsw` then `vpmaddwd`.
    Avx2,
    /// AVX-512 VNNI's `vpdpbusd` (on 256-bit registers).
    Vnni,
}

impl LaneKernel {
    /// The best this CPU has at normlab's SIMD level (`NORMLAB_SIMD`
    /// lowers it).
    pub fn best() -> LaneKernel {
        #[cfg(target_arch = "x86_64")]
        {
            use crate::kernels::simd::{level, Level};
            static VNNI: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            let vnni = *VNNI.get_or_init(|| {
                std::arch::is_x86_feature_detected!("avx512vnni")
                    && std::arch::is_x86_feature_detected!("avx512vl")
            });
            if level() >= Level::Avx512 && vnni {
                return LaneKernel::Vnni;
            }
            if level() >= Level::Avx2 {
                return LaneKernel::Avx2;
            }
        }
        LaneKernel::Portable
    }
}
