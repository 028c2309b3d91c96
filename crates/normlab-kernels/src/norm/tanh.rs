//! The division-free tanh of the DyT kernels: a degree-5 polynomial per
//! quarter of |u|, its coefficient table (fitted by `scripts/fit_tanh.py`),
//! the scalar evaluation the portable kernels use and the 16-lane one the
//! AVX-512 kernels use (the same operations, so the same bits).

/// |4u| is clamped here before [`tanh`]'s table lookup: tanh(9.25) =
/// 1 - 1.8e-8 is 1 in f32, so saturated inputs get exactly 1 (and the
/// derivative 1 - t^2 exactly 0, as in f64).
const TANH_VMAX: f32 = 37.0;

/// Intervals of [`tanh`]'s piecewise polynomial: width 1/4 in |u|, the last
/// one covering [7.75, 9.25].
const TANH_N: usize = 32;

/// [`tanh`]'s polynomials, `TANH_PW[i][k]` the coefficient of t^k on
/// interval i, from `scripts/fit_tanh.py` (minimax fits; relative on the
/// first interval, whose constant is 0; the f32 evaluation's largest
/// relative error 1.64e-7; no polynomial exceeds 1, the clamped end gives
/// exactly 1).
#[rustfmt::skip]
const TANH_PW: [[f32; 6]; 32] = [
    [0.0, 0.24999999, 8.4804276e-07, -0.0052145896, 1.543714e-05, 1.1700294e-04],
    [0.24491867, 0.23500311, -0.014382213, -0.0040448587, 6.0384424e-04, 1.860573e-05],
    [0.46211717, 0.19661172, -0.022711763, -0.0014840367, 6.688306e-04, -5.2950174e-05],
    [0.63514894, 0.14914656, -0.023683742, 6.580182e-04, 3.8150197e-04, -5.713327e-05],
    [0.7615942, 0.104993746, -0.019992493, 0.001626831, 9.2698276e-05, -3.1297262e-05],
    [0.84828365, 0.07010381, -0.014868099, 0.0016973403, -5.9130343e-05, -9.309081e-06],
    [0.90514827, 0.045176696, -0.010223333, 0.0013740781, -1.0150786e-04, 1.3512065e-06],
    [0.94137555, 0.02845303, -0.0066963215, 9.835074e-04, -9.266272e-05, 4.4886383e-06],
    [0.9640276, 0.017662702, -0.004256781, 6.577362e-04, -6.949695e-05, 4.374845e-06],
    [0.9780261, 0.010866223, -0.0026567876, 4.2291428e-04, -4.7504658e-05, 3.3381946e-06],
    [0.9866143, 0.006648051, -0.0016397022, 2.656747e-04, -3.0892355e-05, 2.295161e-06],
    [0.99185973, 0.0040535675, -0.0010050972, 1.6459035e-04, -1.9527712e-05, 1.4959172e-06],
    [0.9950548, 0.0024665066, -6.1354705e-04, 1.01116486e-04, -1.214084e-05, 9.465141e-07],
    [0.99699765, 0.001498927, -3.735873e-04, 6.180792e-05, -7.4742625e-06, 5.88735e-07],
    [0.9981779, 9.1022014e-04, -2.2712827e-04, 3.7665042e-05, -4.574308e-06, 3.6252447e-07],
    [0.99889445, 5.524724e-04, -1.379579e-04, 2.2910192e-05, -2.7895858e-06, 2.2189454e-07],
    [0.9993293, 3.3523727e-04, -8.3748506e-05, 1.391976e-05, -1.6975496e-06, 1.3532873e-07],
    [0.99959314, 2.0338535e-04, -5.082284e-05, 8.4516105e-06, -1.0316719e-06, 8.235482e-08],
    [0.99975324, 1.233792e-04, -3.083548e-05, 5.1294187e-06, -6.2649775e-07, 5.005158e-08],
    [0.99985033, 7.484054e-05, -1.8706292e-05, 3.1123486e-06, -3.8026863e-07, 3.0394883e-08],
    [0.9999092, 4.5395755e-05, -1.1347276e-05, 1.8881761e-06, -2.3074726e-07, 1.8449137e-08],
    [0.9999449, 2.75349e-05, -6.882962e-06, 1.145399e-06, -1.3999296e-07, 1.1194969e-08],
    [0.9999666, 1.6701122e-05, -4.1749086e-06, 6.947792e-07, -8.4923805e-08, 6.791901e-09],
    [0.99997973, 1.01298765e-05, -2.5322765e-06, 4.2142693e-07, -5.151406e-08, 4.1202037e-09],
    [0.9999877, 6.1441297e-06, -1.5359278e-06, 2.5561644e-07, -3.1246753e-08, 2.499286e-09],
    [0.99999255, 3.726621e-06, -9.315963e-07, 1.5504214e-07, -1.8952765e-08, 1.5159708e-09],
    [0.99999547, 2.2603165e-06, -5.65045e-07, 9.403896e-08, -1.149574e-08, 9.1953645e-10],
    [0.99999726, 1.3709537e-06, -3.4271835e-07, 5.7037866e-08, -6.9725554e-09, 5.577168e-10],
    [0.99999833, 8.3152634e-07, -2.0786963e-07, 3.459536e-08, -4.2291024e-09, 3.3827768e-10],
    [0.999999, 5.0434653e-07, -1.2607947e-07, 2.0983228e-08, -2.5651254e-09, 2.0519111e-10],
    [0.9999994, 3.0590178e-07, -7.647113e-08, 1.2726984e-08, -1.5558151e-09, 1.2444532e-10],
    [0.99999964, 1.8495888e-07, -4.5160032e-08, 6.7624475e-09, -6.007224e-10, 2.3978751e-11],
];

/// `TANH_PW` by coefficient: `TANH_COLS[k][i] = TANH_PW[i][k]` (the vector
/// code's lookup tables).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const TANH_COLS: [[f32; TANH_N]; 6] = {
    let mut c = [[0f32; TANH_N]; 6];
    let mut i = 0;
    while i < TANH_N {
        let mut k = 0;
        while k < 6 {
            c[k][i] = TANH_PW[i][k];
            k += 1;
        }
        i += 1;
    }
    c
};

/// tanh(u) within 1.7e-7 relative everywhere (also near 0, where it is u
/// itself), without a division (which made the DyT kernels compute-bound):
/// `tanh4(4 u)`.
#[inline(always)]
pub fn tanh(u: f32) -> f32 {
    tanh4(4.0 * u)
}

/// tanh(w / 4), the kernels' form (DyT scales x by 4 alpha, exactly 4 times
/// alpha x): a degree-5 polynomial per quarter of |u| = |w| / 4, chosen by
/// table lookup,
///
/// ```text
/// v = min(|w|, 37); i = min(trunc(v), 31); t = v - i   (exact)
/// tanh(w / 4) = copysign(P_i(t), w)   (Horner, fused multiply-adds)
/// ```
///
/// NaN stays NaN. The AVX-512 kernels evaluate the same operations with the
/// table in registers (`x86::Tanh`), so the same bits.
#[inline(always)]
pub fn tanh4(w: f32) -> f32 {
    let v = w.abs();
    let v = if TANH_VMAX < v { TANH_VMAX } else { v };
    // NaN casts to 0 here; the vector code's conversion gives i32::MIN,
    // whose low five bits also pick interval 0 (t is NaN either way).
    let i = (v as i32).min(TANH_N as i32 - 1);
    let t = v - i as f32;
    let c = &TANH_PW[i as usize & (TANH_N - 1)];
    let p = c[5];
    let p = p.mul_add(t, c[4]);
    let p = p.mul_add(t, c[3]);
    let p = p.mul_add(t, c[2]);
    let p = p.mul_add(t, c[1]);
    let p = p.mul_add(t, c[0]);
    p.copysign(w)
}

/// The 16-lane evaluation.
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::{TANH_COLS, TANH_N, TANH_VMAX};
    use crate::simd::LANES;
    use std::arch::x86_64::*;

    /// [`super::tanh4`] on 16 lanes, its table in registers: coefficient k
    /// of intervals 0..16 in `lo[k]`, of 16..32 in `hi[k]`.
    pub(crate) struct Tanh {
        lo: [__m512; 6],
        hi: [__m512; 6],
    }

    impl Tanh {
        #[inline(always)]
        pub(crate) unsafe fn new() -> Self {
            let col = |k: usize, from: usize| _mm512_loadu_ps(TANH_COLS[k][from..].as_ptr());
            Tanh {
                lo: std::array::from_fn(|k| col(k, 0)),
                hi: std::array::from_fn(|k| col(k, LANES)),
            }
        }

        #[inline(always)]
        pub(crate) unsafe fn eval(&self, w: __m512) -> __m512 {
            // min(|w|, VMAX) with the sign cleared, NaN w passing through.
            let v = _mm512_range_ps::<0b1010>(w, _mm512_set1_ps(TANH_VMAX));
            let i = _mm512_min_epi32(_mm512_cvttps_epi32(v), _mm512_set1_epi32(TANH_N as i32 - 1));
            let t = _mm512_sub_ps(v, _mm512_cvtepi32_ps(i));
            let c = |k: usize| _mm512_permutex2var_ps(self.lo[k], i, self.hi[k]);
            let p = c(5);
            let p = _mm512_fmadd_ps(p, t, c(4));
            let p = _mm512_fmadd_ps(p, t, c(3));
            let p = _mm512_fmadd_ps(p, t, c(2));
            let p = _mm512_fmadd_ps(p, t, c(1));
            let p = _mm512_fmadd_ps(p, t, c(0));
            // copysign: the sign bit from w, the rest from p.
            _mm512_castsi512_ps(_mm512_ternarylogic_epi32::<0xCA>(
                _mm512_set1_epi32(i32::MIN),
                _mm512_castps_si512(w),
                _mm512_castps_si512(p),
            ))
        }
    }
}
