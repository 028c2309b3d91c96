//! Elementwise and row-wise kernels besides the norms: a fast, vectorisable
//! `exp`, GELU (tanh form), SiLU, causal softmax, and fused softmax +
//! cross-entropy. Plain loops over slices that LLVM vectorises; no libm
//! calls on hot paths (a libm `expf` per element would dominate a CPU step).

use crate::simd::LANES;

const LOG2E: f32 = std::f32::consts::LOG2_E;
// ln 2 split in a part with few mantissa bits (exact when multiplied by a
// small integer) and the remainder (Cody & Waite).
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
// 1.5 * 2^23: adding it rounds to the nearest integer, kept in the low
// mantissa bits.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// e^x for f32, max relative error about 2 ulp, vectorisable (no branches,
/// no libm). Inputs are clamped to [-87, 88] (outputs 1.6e-38 .. 1.65e38);
/// NaN stays NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let (em, scale) = exp_parts(x);
    let y = (em + 1.0) * scale;
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// The range reduction and polynomial of [`exp`]:
/// `(e^r - 1, 2^k)` with x = k ln 2 + r, |r| <= ln2/2.
#[inline(always)]
fn exp_parts(x: f32) -> (f32, f32) {
    let xc = x.clamp(-87.0, 88.0);
    let kf = xc * LOG2E + ROUND_MAGIC;
    let k_bits = kf.to_bits().wrapping_sub(ROUND_MAGIC.to_bits()) as i32;
    let k = kf - ROUND_MAGIC;
    let r = (xc - k * LN2_HI) - k * LN2_LO;
    // e^r on |r| <= ln2/2, degree-6 polynomial in Horner form.
    let p = 1.987_569_1e-4f32;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let em = (p * r) * r + r;
    let scale = f32::from_bits(((k_bits + 127) as u32) << 23);
    (em, scale)
}

/// tanh via exp: `sign(u) * (1 - 2 / (e^{2|u|} + 1))`.
#[inline(always)]
pub fn tanh(u: f32) -> f32 {
    let e = exp(2.0 * u.abs());
    let t = 1.0 - 2.0 / (e + 1.0);
    t.copysign(u)
}

const GELU_C: f32 = 0.797_884_6; // sqrt(2/pi)
const GELU_A: f32 = 0.044_715;

/// Below this u, `1 + tanh(u) < 2^-25` rounds to 0 in f32, so PyTorch's
/// tanh-form GELU (and its gradient) is exactly 0 there.
const GELU_U_ZERO: f32 = -9.0;

/// The GELU gate `s = sigmoid(2u) = 0.5 (1 + tanh u)`, exactly 0 below
/// [`GELU_U_ZERO`] as in PyTorch. Without that cut the tail keeps values
/// down to 1e-38 and below, and the matmuls that multiply them produce
/// subnormal numbers, each costing x86 a microcode assist: a 30-layer toy
/// net at lr 1e-2, whose pre-activations drift far negative, trained up to
/// 6x slower than at lr 1e-3 (5.7 vs 35.7 steps/s with the cut).
#[inline(always)]
fn gelu_gate(u: f32) -> f32 {
    let s = 1.0 / (1.0 + exp(-2.0 * u));
    if u < GELU_U_ZERO {
        0.0
    } else {
        s
    }
}

crate::multiversion! {
    /// GELU, tanh form (GPT-2; PyTorch `gelu(approximate='tanh')`):
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`. Also writes the
    /// derivative `gelu'(x)`, so that backward is one multiply
    /// `dx = dy * gelu'(x)` ([`mul`]) and needs neither `x` nor an exp: on
    /// the small layers normlab trains, one pass fewer over memory matters
    /// more than the few extra multiplies here.
    pub fn gelu_forward(x: &[f32], y: &mut [f32], dydx: &mut [f32]) {
        for ((yv, gv), &v) in y.iter_mut().zip(dydx.iter_mut()).zip(x) {
            // With s = sigmoid(2u) = 0.5 (1 + tanh u): gelu = x s,
            // gelu' = s + 2 x s (1 - s) u'.
            let u = GELU_C * (v + GELU_A * v * v * v);
            let s = gelu_gate(u);
            let du = GELU_C * (1.0 + 3.0 * GELU_A * v * v);
            *gv = s + 2.0 * v * s * (1.0 - s) * du;
            *yv = v * s;
        }
    }
}

crate::multiversion! {
    /// SwiGLU forward over rows of `2h` values `[a | b]`: `y = silu(a) * b`,
    /// `silu(a) = a / (1 + e^-a)`. `ab` is `[rows, 2h]`, `y` `[rows, h]`.
    pub fn swiglu_forward(ab: &[f32], h: usize, y: &mut [f32]) {
        for (row, yr) in ab.chunks_exact(2 * h).zip(y.chunks_exact_mut(h)) {
            let (a, b) = row.split_at(h);
            for ((yv, &av), &bv) in yr.iter_mut().zip(a).zip(b) {
                let s = 1.0 / (1.0 + exp(-av));
                *yv = av * s * bv;
            }
        }
    }
}

crate::multiversion! {
    /// SwiGLU backward: writes `dab = [da | db]`.
    pub fn swiglu_backward(ab: &[f32], dy: &[f32], h: usize, dab: &mut [f32]) {
        for ((row, dyr), drow) in ab.chunks_exact(2 * h).zip(dy.chunks_exact(h)).zip(dab.chunks_exact_mut(2 * h)) {
            let (a, b) = row.split_at(h);
            let (da, db) = drow.split_at_mut(h);
            for j in 0..h {
                let s = 1.0 / (1.0 + exp(-a[j]));
                let silu = a[j] * s;
                db[j] = dyr[j] * silu;
                da[j] = dyr[j] * b[j] * (s * (1.0 + a[j] * (1.0 - s)));
            }
        }
    }
}

crate::multiversion! {
    /// SwiGLU with DeepSeek V4's clamp (transformers' `DeepseekV4MLP`):
    /// `y = silu(min(a, limit)) * clamp(b, -limit, limit)`.
    pub fn swiglu_clamped_forward(ab: &[f32], h: usize, limit: f32, y: &mut [f32]) {
        for (row, yr) in ab.chunks_exact(2 * h).zip(y.chunks_exact_mut(h)) {
            let (a, b) = row.split_at(h);
            for ((yv, &av), &bv) in yr.iter_mut().zip(a).zip(b) {
                // NaN stays NaN (f32::min would give the limit), as torch's clamp.
                let av = if av > limit { limit } else { av };
                let s = 1.0 / (1.0 + exp(-av));
                *yv = av * s * bv.clamp(-limit, limit);
            }
        }
    }
}

crate::multiversion! {
    /// The clamped SwiGLU's backward: writes `dab = [da | db]`, zero where
    /// a value was clamped and passing at the limit itself (as torch's
    /// clamp does).
    pub fn swiglu_clamped_backward(ab: &[f32], dy: &[f32], h: usize, limit: f32, dab: &mut [f32]) {
        for ((row, dyr), drow) in ab.chunks_exact(2 * h).zip(dy.chunks_exact(h)).zip(dab.chunks_exact_mut(2 * h)) {
            let (a, b) = row.split_at(h);
            let (da, db) = drow.split_at_mut(h);
            for j in 0..h {
                let av = if a[j] > limit { limit } else { a[j] };
                let bv = b[j].clamp(-limit, limit);
                let s = 1.0 / (1.0 + exp(-av));
                let silu = av * s;
                db[j] = if b[j].abs() <= limit { dyr[j] * silu } else { 0.0 };
                da[j] = if a[j] <= limit {
                    dyr[j] * bv * (s * (1.0 + av * (1.0 - s)))
                } else {
                    0.0
                };
            }
        }
    }
}

/// Max over a slice with `LANES` accumulators (the tail is padded with
/// -inf). A NaN anywhere still makes the softmax NaN (through the sum).
#[inline(always)]
fn max_of(x: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; LANES];
    crate::for_blocks!(pad: f32::NEG_INFINITY, ahead: [], c in x => {
        for i in 0..LANES {
            m[i] = m[i].max(c[i]);
        }
    });
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            m[i] = m[i].max(m[i + w]);
        }
    }
    m[0]
}

/// In-place softmax of one row (subtracting the max), with the sum taken in
/// a fixed order and the ragged tail handled as a padded block (so every
/// element goes through the vectorised exp). Returns `(max, sum of exp)`;
/// the row's log-sum-exp is `max + ln(sum)`.
#[inline(always)]
pub fn softmax_row(row: &mut [f32]) -> (f32, f32) {
    let m = max_of(row);
    let mut s = [0f32; LANES];
    let n = row.len();
    let full = n - n % LANES;
    for c in row[..full].chunks_exact_mut(LANES) {
        for i in 0..LANES {
            c[i] = exp(c[i] - m);
            s[i] += c[i];
        }
    }
    if full < n {
        let mut t = [f32::NEG_INFINITY; LANES];
        t[..n - full].copy_from_slice(&row[full..]);
        for i in 0..LANES {
            // exp(-inf) is clamped, not 0: mask the padding explicitly.
            let e = exp(t[i] - m);
            t[i] = if i < n - full { e } else { 0.0 };
            s[i] += t[i];
        }
        row[full..].copy_from_slice(&t[..n - full]);
    }
    let total = crate::simd::tree_sum(&s);
    let inv = 1.0 / total;
    for v in row.iter_mut() {
        *v *= inv;
    }
    (m, total)
}

crate::multiversion! {
    /// Fused softmax + cross-entropy over `[rows, v]` logits, in place:
    /// `logits` holds the probabilities afterwards. Returns the **sum** of
    /// `-log p[target]` over rows (f64). Targets outside `0..v` panic.
    pub fn softmax_cross_entropy(logits: &mut [f32], targets: &[u32], v: usize) -> f64 {
        assert_eq!(logits.len(), targets.len() * v);
        let mut loss = 0f64;
        for (row, &t) in logits.chunks_exact_mut(v).zip(targets) {
            let t = t as usize;
            assert!(t < v, "target {t} out of range {v}");
            let logit_t = row[t];
            let (m, total) = softmax_row(row);
            loss += ((m - logit_t) as f64) + (total as f64).ln();
        }
        loss
    }
}

crate::multiversion! {
    /// Backward of mean cross-entropy: `dlogits = (probs - onehot) * scale`.
    pub fn cross_entropy_backward(probs: &[f32], targets: &[u32], v: usize, scale: f32, dlogits: &mut [f32]) {
        for ((d, p), &t) in dlogits.chunks_exact_mut(v).zip(probs.chunks_exact(v)).zip(targets) {
            for (dv, &pv) in d.iter_mut().zip(p) {
                *dv = pv * scale;
            }
            d[t as usize] -= scale;
        }
    }
}

crate::multiversion! {
    /// Backward of cross-entropy against soft targets `q` (distillation):
    /// `dlogits = (probs - q) * scale`, all `[rows, vocab]`.
    pub fn soft_cross_entropy_backward(probs: &[f32], q: &[f32], scale: f32, dlogits: &mut [f32]) {
        assert_eq!(q.len(), probs.len(), "soft targets shape");
        for ((d, &p), &qv) in dlogits.iter_mut().zip(probs).zip(q) {
            *d = (p - qv) * scale;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_accurate() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let got = exp(x) as f64;
            let want = (x as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            x += 0.0137;
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(-1000.0), exp(-87.0));
        assert!(exp(1000.0).is_finite());
    }

    #[test]
    fn fused_residual_add_matches_separate_passes_bit_for_bit() {
        for n in [0, 1, 15, 16, 17, 64, 1000, 32768 + 5] {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
                .collect();
            let y: Vec<f32> = (0..n)
                .map(|i| ((i * 11 % 53) as f32 - 26.0) * 0.7)
                .collect();
            let (mut o1, mut o2) = (vec![0.0; n], vec![0.0; n]);
            axpby(&mut o1, 0.9, &x, 1.3, &y);
            let s = axpby_sum_squares(&mut o2, 0.9, &x, 1.3, &y);
            assert_eq!(o1, o2, "n {n}");
            assert_eq!(s.to_bits(), sum_squares(&o1).to_bits(), "n {n}");
        }
    }

    #[test]
    fn tanh_and_gelu() {
        for i in -400..400 {
            let u = i as f32 * 0.025;
            assert!((tanh(u) as f64 - (u as f64).tanh()).abs() < 2e-7, "{u}");
        }
        let x: Vec<f32> = (-50..50).map(|i| i as f32 * 0.1).collect();
        let mut y = vec![0.0; x.len()];
        let mut dx = vec![0.0; x.len()];
        gelu_forward(&x, &mut y, &mut dx);
        for i in 0..x.len() {
            let v = x[i] as f64;
            let g = |v: f64| {
                0.5 * v
                    * (1.0
                        + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())
            };
            assert!((y[i] as f64 - g(v)).abs() < 1e-6);
            let fd = (g(v + 1e-5) - g(v - 1e-5)) / 2e-5;
            assert!((dx[i] as f64 - fd).abs() < 1e-5, "{v}: {} vs {fd}", dx[i]);
        }
    }

    #[test]
    fn gelu_tail_is_exact_zero_and_never_subnormal() {
        // PyTorch's tanh form is exactly 0 (value and gradient) once 1 + tanh(u)
        // rounds to 0; and no output may be subnormal (x86 pays a microcode
        // assist per subnormal in the matmuls downstream).
        let x: Vec<f32> = (0..21000).map(|i| -100.0 + i as f32 * 0.005).collect();
        let mut y = vec![1.0; x.len()];
        let mut dy = vec![1.0; x.len()];
        gelu_forward(&x, &mut y, &mut dy);
        for ((&v, &a), &b) in x.iter().zip(&y).zip(&dy) {
            assert!(!a.is_subnormal() && !b.is_subnormal(), "{v}: {a} {b}");
            let t = ((2.0 / std::f64::consts::PI).sqrt()
                * (v as f64 + 0.044715 * (v as f64).powi(3)))
            .tanh() as f32;
            if 1.0 + t == 0.0 {
                assert_eq!((a, b), (0.0, 0.0), "{v}");
            }
        }
        assert!(y[x.len() - 1] > 0.0);
    }

    #[test]
    fn swiglu_gradients() {
        let h = 3;
        let ab = [0.3f32, -1.2, 2.0, 0.7, 1.1, -0.4];
        let dy = [0.5f32, -0.3, 0.8];
        let mut dab = [0.0; 6];
        swiglu_backward(&ab, &dy, h, &mut dab);
        let f = |ab: &[f32]| {
            let mut y = [0.0; 3];
            swiglu_forward(ab, h, &mut y);
            y.iter()
                .zip(&dy)
                .map(|(a, b)| (*a as f64) * (*b as f64))
                .sum::<f64>()
        };
        for i in 0..6 {
            let (mut p, mut m) = (ab, ab);
            p[i] += 1e-3;
            m[i] -= 1e-3;
            let fd = (f(&p) - f(&m)) / ((p[i] - m[i]) as f64);
            assert!((fd - dab[i] as f64).abs() < 1e-3, "{i}: {fd} vs {}", dab[i]);
        }
    }

    #[test]
    fn cross_entropy_matches_definition() {
        let logits = [1.0f32, 2.0, 0.5, -1.0, 3.0, 0.0];
        let targets = [1u32, 0];
        let mut p = logits;
        let loss = softmax_cross_entropy(&mut p, &targets, 3);
        let lse = |a: &[f32]| a.iter().map(|&v| (v as f64).exp()).sum::<f64>().ln();
        let want = (lse(&logits[..3]) - 2.0) + (lse(&logits[3..]) + 1.0);
        assert!((loss - want).abs() < 1e-5);
        let mut d = [0.0; 6];
        cross_entropy_backward(&p, &targets, 3, 0.5, &mut d);
        assert!((d.iter().map(|&v| v as f64).sum::<f64>()).abs() < 1e-6);
        assert!(d[1] < 0.0 && d[3] < 0.0);
    }
}

crate::multiversion! {
    /// Causal softmax of a `[t, t]` score matrix in place: row i is a
    /// softmax over columns `0..=i` and zero beyond. Returns the largest
    /// score seen (the max attention logit, for diagnostics).
    pub fn causal_softmax(s: &mut [f32], t: usize) -> f32 {
        let mut max_logit = f32::NEG_INFINITY;
        for (i, row) in s.chunks_exact_mut(t).enumerate() {
            let (valid, masked) = row.split_at_mut(i + 1);
            max_logit = max_logit.max(max_of(valid));
            softmax_row(valid);
            masked.fill(0.0);
        }
        max_logit
    }
}

crate::multiversion! {
    /// Softmax backward for a causal `[t, t]` block: `dp` holds dL/dP on
    /// entry and dL/dS on exit, `dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik)`.
    pub fn causal_softmax_backward(p: &[f32], dp: &mut [f32], t: usize) {
        for (i, (pr, dr)) in p.chunks_exact(t).zip(dp.chunks_exact_mut(t)).enumerate() {
            let n = i + 1;
            let (pv, dv) = (&pr[..n], &mut dr[..n]);
            let mut acc = [0f32; LANES];
            let full = n - n % LANES;
            for j0 in (0..full).step_by(LANES) {
                for i in 0..LANES {
                    acc[i] += pv[j0 + i] * dv[j0 + i];
                }
            }
            for j in full..n {
                acc[j - full] += pv[j] * dv[j];
            }
            let dot = crate::simd::tree_sum(&acc.map(|v| v as f64)) as f32;
            for j in 0..n {
                dv[j] = pv[j] * (dv[j] - dot);
            }
            dr[n..].fill(0.0);
        }
    }
}

/// Sum of `-p ln p` over a probability row (entropy in nats; zeros skipped).
pub fn entropy(p: &[f32]) -> f64 {
    p.iter()
        .filter(|&&v| v > 0.0)
        .map(|&v| -(v as f64) * (v as f64).ln())
        .sum()
}

crate::multiversion! {
    /// `out = a * x + b * y` elementwise (the residual add `skip * x + branch * o`).
    pub fn axpby(out: &mut [f32], a: f32, x: &[f32], b: f32, y: &[f32]) {
        for ((o, &xv), &yv) in out.iter_mut().zip(x).zip(y) {
            *o = a * xv + b * yv;
        }
    }
}

crate::multiversion! {
    /// [`axpby`] that also returns the sum of squares of `out` in f64,
    /// accumulated in exactly the order of [`sum_squares`] (same bits): the
    /// residual add and the residual stream's statistic in one pass.
    pub fn axpby_sum_squares(out: &mut [f32], a: f32, x: &[f32], b: f32, y: &[f32]) -> f64 {
        let n = out.len();
        let (x, y) = (&x[..n], &y[..n]);
        let mut s = [0f64; LANES];
        let full = n - n % LANES;
        let (oh, ot) = out.split_at_mut(full);
        for ((ob, xb), yb) in oh.chunks_exact_mut(LANES).zip(x.chunks_exact(LANES)).zip(y.chunks_exact(LANES)) {
            for i in 0..LANES {
                let v = a * xb[i] + b * yb[i];
                ob[i] = v;
                s[i] += v as f64 * v as f64;
            }
        }
        // The tail (sum_squares pads it with zeros, which add nothing).
        for (i, o) in ot.iter_mut().enumerate() {
            let v = a * x[full + i] + b * y[full + i];
            *o = v;
            s[i] += v as f64 * v as f64;
        }
        crate::simd::tree_sum(&s)
    }
}

crate::multiversion! {
    /// `out = x * y` elementwise (e.g. GELU's backward `dy * gelu'(x)`).
    pub fn mul(out: &mut [f32], x: &[f32], y: &[f32]) {
        for ((o, &xv), &yv) in out.iter_mut().zip(x).zip(y) {
            *o = xv * yv;
        }
    }
}

crate::multiversion! {
    /// Sum of squares in f64 (16 accumulators, fixed order).
    pub fn sum_squares(x: &[f32]) -> f64 {
        crate::simd::sum_squares(x, &[])
    }
}

/// erf(x) (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7), vectorisable.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    let y = 1.0 - poly * exp(-a * a);
    y.copysign(x)
}

crate::multiversion! {
    /// GELU, exact (erf) form as in BERT: `0.5 x (1 + erf(x / sqrt(2)))`.
    pub fn gelu_erf_forward(x: &[f32], y: &mut [f32]) {
        for (yv, &v) in y.iter_mut().zip(x) {
            *yv = 0.5 * v * (1.0 + erf(v * std::f32::consts::FRAC_1_SQRT_2));
        }
    }
}

crate::multiversion! {
    /// GELU, exact (erf) form, with its derivative `gelu'(x) = Phi(x) + x
    /// phi(x)` (so that backward is one multiply, as [`gelu_forward`]).
    pub fn gelu_erf_forward_grad(x: &[f32], y: &mut [f32], dydx: &mut [f32]) {
        const INV_SQRT_2PI: f32 = 0.398_942_3;
        for ((yv, gv), &v) in y.iter_mut().zip(dydx.iter_mut()).zip(x) {
            let cdf = 0.5 * (1.0 + erf(v * std::f32::consts::FRAC_1_SQRT_2));
            *yv = v * cdf;
            *gv = cdf + v * INV_SQRT_2PI * exp(-0.5 * v * v);
        }
    }
}

crate::multiversion! {
    /// GeGLU forward over rows of `2h` values `[a | b]` (Gemma's gated
    /// MLP): `y = gelu_tanh(a) * b`. `ab` is `[rows, 2h]`, `y` `[rows, h]`.
    pub fn geglu_forward(ab: &[f32], h: usize, y: &mut [f32]) {
        for (row, yr) in ab.chunks_exact(2 * h).zip(y.chunks_exact_mut(h)) {
            let (a, b) = row.split_at(h);
            for ((yv, &av), &bv) in yr.iter_mut().zip(a).zip(b) {
                let u = GELU_C * (av + GELU_A * av * av * av);
                *yv = av * gelu_gate(u) * bv;
            }
        }
    }
}

crate::multiversion! {
    /// GeGLU backward: writes `dab = [da | db]`, `da = dy b gelu'(a)`,
    /// `db = dy gelu(a)`.
    pub fn geglu_backward(ab: &[f32], dy: &[f32], h: usize, dab: &mut [f32]) {
        for ((row, dyr), drow) in ab.chunks_exact(2 * h).zip(dy.chunks_exact(h)).zip(dab.chunks_exact_mut(2 * h)) {
            let (a, b) = row.split_at(h);
            let (da, db) = drow.split_at_mut(h);
            for j in 0..h {
                let v = a[j];
                let u = GELU_C * (v + GELU_A * v * v * v);
                let s = gelu_gate(u);
                let du = GELU_C * (1.0 + 3.0 * GELU_A * v * v);
                let g = s + 2.0 * v * s * (1.0 - s) * du;
                db[j] = dyr[j] * v * s;
                da[j] = dyr[j] * b[j] * g;
            }
        }
    }
}
