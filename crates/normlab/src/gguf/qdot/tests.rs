//! [`super`]'s tests: each format against dequantise-then-dot, the lane
//! kernels against each other, the activations' rounding bound, NaN.

use super::*;
use crate::gguf::dequantize;
use crate::kernels::rng::Rng;

/// Random whole blocks of `ty` with scales in a sane range.
fn random_row(ty: GgmlType, blocks: usize, rng: &mut Rng) -> Vec<u8> {
    let (_, bs) = ty.block();
    let mut w: Vec<u8> = (0..blocks * bs)
        .map(|_| (rng.next_u64() >> 24) as u8)
        .collect();
    let scale = |w: &mut [u8], at: usize, v: f32| {
        w[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes())
    };
    for b in w.chunks_exact_mut(bs) {
        let v = 0.001 + 0.01 * rng.uniform() as f32;
        match ty {
            GgmlType::Q4_1 | GgmlType::Q4K => {
                scale(b, 0, v);
                scale(b, 2, 0.5 * v);
            }
            GgmlType::Q6K => scale(b, 208, v),
            _ => scale(b, 0, v),
        }
    }
    w
}

/// The lane kernels this CPU can run.
fn kernels() -> Vec<LaneKernel> {
    let mut k = vec![LaneKernel::Portable];
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            k.push(LaneKernel::Avx2);
        }
        if std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            k.push(LaneKernel::Vnni);
        }
    }
    k
}

/// Every lane kernel gives the same exact integers, extreme bytes
/// included (unsigned 0..127 and 255, signed -128..127).
#[test]
fn lane_kernels_agree_exactly() {
    let mut rng = Rng::new(1);
    let n = 32 * 9;
    for signed in [false, true] {
        let mut w: Vec<u8> = (0..n)
            .map(|_| {
                let b = (rng.next_u64() >> 40) as u8;
                if signed {
                    b
                } else {
                    b & 0x7f
                }
            })
            .collect();
        w[0] = if signed { 0x80 } else { 127 };
        let mut x: Vec<i8> = (0..n)
            .map(|_| ((rng.next_u64() % 255) as i32 - 127) as i8)
            .collect();
        x[0] = -127;
        let runs: Vec<Vec<i32>> = kernels()
            .into_iter()
            .map(|k| {
                let mut o = vec![0i32; n / 4];
                lane_dots(k, &w, &x, signed, &mut o);
                o
            })
            .collect();
        assert!(runs.windows(2).all(|p| p[0] == p[1]), "signed {signed}");
    }
}

const TYPES: [GgmlType; 6] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q6K,
];

/// The integer part is exact: with activations that are already 8-bit
/// integers times one scale, the quantised dot product equals the f64
/// dot product of the dequantised row, to f32 rounding of the scales.
#[test]
fn each_type_matches_dequantise_then_dot() {
    let mut rng = Rng::new(7);
    for (ty, bits) in TYPES
        .into_iter()
        .flat_map(|t| [(t, ActBits::Eight), (t, ActBits::Sixteen)])
    {
        let n = 512;
        let w = random_row(ty, n / ty.block().0, &mut rng);
        // Activations k * 0.5 with k integer in -127..=127 and one
        // value of 127 per block of 32: quantising them is exact.
        let mut x: Vec<f32> = (0..n)
            .map(|_| ((rng.next_u64() % 255) as i32 - 127) as f32 * 0.5)
            .collect();
        for b in x.chunks_exact_mut(32) {
            b[0] = 63.5;
        }
        // (16 bits: each value is 254 k + 0.)
        let a = QuantActs::new(ty, &x, bits).unwrap();
        assert!(
            a.q.iter().zip(&x).all(|(&q, &v)| q as f32 * 0.5 == v),
            "{ty:?} {bits:?}"
        );
        assert!(a.lo.iter().all(|&l| l == 0), "{ty:?} {bits:?}");
        // The same bits from every lane kernel this CPU has.
        let each: Vec<f32> = kernels()
            .into_iter()
            .map(|k| row_dot(k, ty, &w, &a, &mut RowScratch::default()))
            .collect();
        assert!(
            each.windows(2).all(|p| p[0].to_bits() == p[1].to_bits()),
            "{ty:?}: {each:?}"
        );
        let got = row_dot(LaneKernel::best(), ty, &w, &a, &mut RowScratch::default());
        let products: Vec<f64> = dequantize(ty, &w)
            .iter()
            .zip(&x)
            .map(|(&w, &x)| w as f64 * x as f64)
            .collect();
        let want: f64 = products.iter().sum();
        let mag: f64 = products.iter().map(|p| p.abs()).sum();
        assert!(
            (got as f64 - want).abs() <= 1e-5 * mag,
            "{ty:?}: {got} vs {want} (magnitude {mag})"
        );
    }
}

/// Quantising the activations costs at most half a step per value:
/// |dot - exact| <= sum |w| * scale / 2, 254 times less with 16 bits; every
/// lane kernel (and Q8_0's one-pass kernels) gives the same bits.
#[test]
fn activation_rounding_is_bounded() {
    let mut rng = Rng::new(11);
    for (ty, bits) in TYPES
        .into_iter()
        .flat_map(|t| [(t, ActBits::Eight), (t, ActBits::Sixteen)])
    {
        let n = 768;
        let w = random_row(ty, n / ty.block().0, &mut rng);
        let x: Vec<f32> = (0..n).map(|_| rng.normal() as f32).collect();
        let a = QuantActs::new(ty, &x, bits).unwrap();
        let each: Vec<u32> = kernels()
            .into_iter()
            .map(|k| row_dot(k, ty, &w, &a, &mut RowScratch::default()).to_bits())
            .collect();
        assert!(each.windows(2).all(|p| p[0] == p[1]), "{ty:?} {bits:?}");
        let got = row_dot(LaneKernel::best(), ty, &w, &a, &mut RowScratch::default()) as f64;
        let wd = dequantize(ty, &w);
        let exact: f64 = wd.iter().zip(&x).map(|(&w, &x)| w as f64 * x as f64).sum();
        let block = ACTS_BLOCK;
        let bound: f64 = wd
            .chunks_exact(block)
            .zip(&a.d)
            .map(|(w, &d)| w.iter().map(|v| v.abs() as f64).sum::<f64>() * d as f64 * 0.5)
            .sum();
        assert!(
            (got - exact).abs() <= bound * 1.001 + 1e-6,
            "{ty:?} {bits:?}: {got} vs {exact}, bound {bound}"
        );
    }
}

/// The limbs' extremes: values at +-the block's largest (hi = +-127, lo =
/// 0), just below a limb boundary (lo = -127 and 126), and Q8_0's weight
/// -128, give the same bits from every kernel, and 16-bit values split
/// back exactly (`254 hi + lo`).
#[test]
fn limb_extremes_agree() {
    let mut x = vec![0f32; 64];
    for (i, v) in x.iter_mut().enumerate() {
        *v = match i % 4 {
            0 => 1.0,
            1 => -1.0,
            2 => 127.0 / 32258.0,
            _ => -128.0 / 32258.0,
        };
    }
    let a = QuantActs::new(GgmlType::Q8_0, &x, ActBits::Sixteen).unwrap();
    let v: Vec<i32> =
        a.q.iter()
            .zip(&a.lo)
            .map(|(&h, &l)| 254 * i32::from(h) + i32::from(l))
            .collect();
    assert_eq!(&v[..4], &[32258, -32258, 127, -128]);
    assert_eq!((a.q[2], a.lo[2], a.q[3], a.lo[3]), (1, -127, -1, 126));
    let mut w = random_row(GgmlType::Q8_0, 2, &mut Rng::new(2));
    for b in w.chunks_exact_mut(34) {
        b[2..].fill(0x80);
    }
    for bits in [ActBits::Eight, ActBits::Sixteen] {
        let a = QuantActs::new(GgmlType::Q8_0, &x, bits).unwrap();
        let each: Vec<u32> = kernels()
            .into_iter()
            .map(|k| row_dot(k, GgmlType::Q8_0, &w, &a, &mut RowScratch::default()).to_bits())
            .collect();
        assert!(each.windows(2).all(|p| p[0] == p[1]), "{bits:?}: {each:?}");
    }
}

/// A NaN activation makes the product NaN, not a silent number.
#[test]
fn nan_propagates() {
    let mut rng = Rng::new(3);
    let w = random_row(GgmlType::Q8_0, 2, &mut rng);
    let mut x = vec![1.0f32; 64];
    x[40] = f32::NAN;
    let a = QuantActs::new(GgmlType::Q8_0, &x, ActBits::Sixteen).unwrap();
    assert!(row_dot(
        LaneKernel::Portable,
        GgmlType::Q8_0,
        &w,
        &a,
        &mut RowScratch::default()
    )
    .is_nan());
    assert!(QuantActs::new(GgmlType::F16, &x, ActBits::Eight).is_none() && !has_dot(GgmlType::F16));
    assert!(
        QuantActs::new(GgmlType::Q4K, &x[..48], ActBits::Eight).is_none(),
        "48 is not whole blocks"
    );
}
