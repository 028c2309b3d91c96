//! The instruction-set level kernels run at ([`level`]: detected, lowered
//! by `NORMLAB_SIMD` or [`set_level`]) and the number of independent
//! accumulators every reduction keeps ([`LANES`]).

use std::sync::atomic::{AtomicU8, Ordering};

/// Number of independent accumulators in the reductions (a multiple of the
/// widest f64 vector, 8 lanes of AVX-512, times two to hide add latency).
pub const LANES: usize = 16;

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
