//! The Sinkhorn projection of mHC's mixing matrices (`nn/mhc.rs`) and its
//! backward through the unrolled iterations, on groups of [`LANES`]
//! tokens: element e of the n x n matrix of token t is `c[e][t]`, so every
//! step is one vector operation across tokens, and each token's arithmetic
//! (so its bits) is what it would be alone, whatever the lane count or the
//! instruction set (add, multiply and divide only; nothing is fused).
//!
//! Sinkhorn (transformers' `DeepseekV4HyperConnection`): a column
//! normalisation, then t - 1 alternating row and column normalisations,
//! each `c / (sum + eps)` with the line summed in order.

/// transformers' `hc_eps` (mHC's epsilon, also Sinkhorn's).
pub const HC_EPS: f32 = 1e-6;

/// Tokens per group.
pub const LANES: usize = 16;
/// One matrix element across a group's tokens.
pub type Lane = [f32; LANES];

#[inline(always)]
fn lane_add(a: &mut Lane, b: &Lane) {
    a.iter_mut().zip(b).for_each(|(a, &b)| *a += b);
}

/// 1 / (s + eps), lane by lane.
#[inline(always)]
fn lane_inv(s: &Lane) -> Lane {
    s.map(|v| 1.0 / (v + HC_EPS))
}

/// Step `i` of the Sinkhorn sequence normalises columns when even.
#[inline(always)]
fn step_is_cols(i: usize) -> bool {
    i.is_multiple_of(2)
}

/// Element (a, b) of the line `a` of a step: row a's b-th element, or
/// (columns) column a's b-th.
#[inline(always)]
fn at(n: usize, cols: bool, a: usize, b: usize) -> usize {
    if cols {
        b * n + a
    } else {
        a * n + b
    }
}

/// One Sinkhorn step on the n x n matrices `c`: each row (`cols ==
/// false`) or column divided by its sum + eps, summed in order.
#[inline(always)]
fn normalise(c: &mut [Lane], n: usize, cols: bool) {
    for a in 0..n {
        let mut s = [0f32; LANES];
        (0..n).for_each(|b| lane_add(&mut s, &c[at(n, cols, a, b)]));
        let inv = lane_inv(&s);
        for b in 0..n {
            c[at(n, cols, a, b)]
                .iter_mut()
                .zip(&inv)
                .for_each(|(v, &i)| *v *= i);
        }
    }
}

crate::kernels::multiversion! {
    /// The Sinkhorn projection of `c` (n x n lanes) in place: 2 iters - 1
    /// steps.
    pub fn sinkhorn(c: &mut [Lane], n: usize, iters: usize) {
        for i in 0..2 * iters - 1 {
            normalise(c, n, step_is_cols(i));
        }
    }
}

crate::kernels::multiversion! {
    /// [`sinkhorn`] that also records each step's input and the result,
    /// in order, into `trace` (its length set here).
    pub fn sinkhorn_traced(c: &mut [Lane], n: usize, iters: usize, trace: &mut Vec<Lane>) {
        let nn = n * n;
        trace.resize(2 * iters * nn, [0.0; LANES]);
        for i in 0..2 * iters - 1 {
            trace[i * nn..(i + 1) * nn].copy_from_slice(c);
            normalise(c, n, step_is_cols(i));
        }
        trace[(2 * iters - 1) * nn..].copy_from_slice(c);
    }
}

crate::kernels::multiversion! {
    /// The projection's backward: `dc` holds dL/d(output) and gets
    /// dL/d(input); `trace` is [`sinkhorn_traced`]'s. A step
    /// `y = s / (S + eps)` (S: the row's or column's sum) sends back
    /// `(dy - sum(dy y)) / (S + eps)`.
    pub fn sinkhorn_backward(dc: &mut [Lane], n: usize, iters: usize, trace: &[Lane]) {
        let nn = n * n;
        for i in (0..2 * iters - 1).rev() {
            let (s, y) = (
                &trace[i * nn..(i + 1) * nn],
                &trace[(i + 1) * nn..(i + 2) * nn],
            );
            let cols = step_is_cols(i);
            for a in 0..n {
                let (mut sum, mut dot) = ([0f32; LANES], [0f32; LANES]);
                for b in 0..n {
                    let e = at(n, cols, a, b);
                    lane_add(&mut sum, &s[e]);
                    for t in 0..LANES {
                        dot[t] += dc[e][t] * y[e][t];
                    }
                }
                let inv = lane_inv(&sum);
                for b in 0..n {
                    let e = at(n, cols, a, b);
                    for t in 0..LANES {
                        dc[e][t] = (dc[e][t] - dot[t]) * inv[t];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each token's matrix projected alone (a scalar loop) gives the bits
    /// of the grouped, vectorised projection.
    #[test]
    fn lanes_match_one_token_at_a_time() {
        let n = 4;
        let mut c = vec![[0f32; LANES]; n * n];
        for (e, l) in c.iter_mut().enumerate() {
            for (t, v) in l.iter_mut().enumerate() {
                *v = 0.01 + ((e * 7 + t * 13) % 17) as f32 / 17.0;
            }
        }
        let mut alone: Vec<Vec<f32>> = (0..LANES)
            .map(|t| c.iter().map(|l| l[t]).collect())
            .collect();
        sinkhorn(&mut c, n, 20);
        for (t, m) in alone.iter_mut().enumerate() {
            for i in 0..39 {
                let cols = i % 2 == 0;
                for a in 0..n {
                    let s: f32 = (0..n).map(|b| m[at(n, cols, a, b)]).sum();
                    for b in 0..n {
                        m[at(n, cols, a, b)] *= 1.0 / (s + HC_EPS);
                    }
                }
            }
            for (e, &v) in m.iter().enumerate() {
                assert_eq!(v.to_bits(), c[e][t].to_bits(), "token {t} element {e}");
            }
        }
        // Doubly stochastic to float precision.
        for a in 0..n {
            let row = (0..n).fold([0f32; LANES], |mut s, b| {
                lane_add(&mut s, &c[a * n + b]);
                s
            });
            assert!(row.iter().all(|r| (r - 1.0).abs() < 1e-4), "{row:?}");
        }
    }
}
