//! mHC, manifold-constrained hyper-connections (DeepSeek, arXiv
//! 2512.24880), in the form Hugging Face transformers 5.x implements for
//! DeepSeek V4 (`DeepseekV4HyperConnection`, `DeepseekV4HyperHead`): the
//! read, write and mixing weights of a hyper-connection (`nn/hyper.rs`
//! applies them) computed per token by one linear map of the flattened n x
//! d streams after an unweighted RMSNorm, with a static bias and one scale
//! per map. Per token, with u = RMS(X flattened) and z = u W^T
//! (W `[(2+n)n, n d]`):
//!
//! ```text
//! pre  = sigmoid(z_pre  s0 + b_pre) + eps          (the read, n)
//! post = 2 sigmoid(z_post s1 + b_post)             (the write, in (0, 2))
//! comb = Sinkhorn(softmax_rows(z_comb s2 + b_comb) + eps)   (n x n)
//! ```
//!
//! Sinkhorn: a column normalisation, then t - 1 alternating row and column
//! normalisations (t = 20), each `c / (sum + eps)`. The update is
//! `X'_j = post_j o + sum_k comb[k, j] X_k` (transformers' comb^T X), so
//! comb is the hyper-connection's mixing block and pre its read column.
//! Initialisation as transformers': W ~ N(0, std), bias 0, scales 1, so
//! pre starts near 1/2, post near 1 and comb near uniform 1/n (not the
//! identity). The head (`nn/stream_head.rs`) collapses the streams by the same
//! kind of map (sigmoid + eps weights) before the final norm.
//!
//! Backward is explicit and runs through the unrolled Sinkhorn iterations
//! (`nn/sinkhorn.rs`), recomputed per group of tokens from the softmax the
//! forward stored (n x n per step, no storage across the batch). Parameter gradients of the biases and
//! scales are summed in row order (f64); the projections' go through the
//! same GEMM as every linear layer.

use super::hyper_rows::add_f64;
use super::norm::buf;
use super::sinkhorn::{sinkhorn, sinkhorn_backward, sinkhorn_traced, LANES};
use crate::kernels::buf::AlignedBuf;
use crate::kernels::matmul;
use crate::kernels::simd;
use crate::params::{Init, ParamKind, ParamLayout, ParamRef};

pub use super::sinkhorn::HC_EPS;
/// The unweighted RMSNorm's eps (transformers' `rms_norm_eps` for V4).
pub const RMS_EPS: f32 = 1e-6;
/// Sinkhorn iterations by default (transformers' `hc_sinkhorn_iters`).
pub const SINKHORN_ITERS: usize = 20;
/// Rows of the streams' gradient through the maps computed at a time in
/// the backward (64 rows x n d floats: in L2 at n d = 512).
pub(super) const DU_ROWS: usize = 64;

pub(super) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

crate::kernels::multiversion! {
    /// Each row of `x` (width `w`) divided by its RMS into `u`; `rinv` gets
    /// each row's 1 / sqrt(mean(x^2) + eps) (the squares summed in f64
    /// lanes, as the norm kernels sum theirs).
    pub(super) fn rms_rows(x: &[f32], w: usize, u: &mut [f32], rinv: &mut [f32]) {
        for ((xr, ur), ri) in x.chunks_exact(w).zip(u.chunks_exact_mut(w)).zip(rinv) {
            let ms = simd::sum_squares(xr, &[]) / w as f64;
            let r = (1.0 / (ms + f64::from(RMS_EPS)).sqrt()) as f32;
            *ri = r;
            ur.iter_mut().zip(xr).for_each(|(u, &x)| *u = x * r);
        }
    }
}

crate::kernels::multiversion! {
    /// The backward of [`rms_rows`]: adds `rinv (du - u mean(du u))` to `dx`.
    fn rms_rows_backward(u: &[f32], rinv: &[f32], du: &[f32], w: usize, dx: &mut [f32]) {
        let rows = u.chunks_exact(w).zip(du.chunks_exact(w));
        for (((ur, dur), dxr), &r) in rows.zip(dx.chunks_exact_mut(w)).zip(rinv) {
            let m = (simd::dot(ur, dur, &[], &[]) / w as f64) as f32;
            for (dx, (&u, &du)) in dxr.iter_mut().zip(ur.iter().zip(dur)) {
                *dx += r * (du - u * m);
            }
        }
    }
}

/// The maps' path back to the streams: `du = dz W` (dz rows x `m`, W
/// `[m, w]`) through [`rms_rows`]'s backward, added to `dx`. Computed
/// [`DU_ROWS`] rows at a time into `du` (at least `DU_ROWS.min(rows) x w`),
/// so that du stays in cache; the product rounds each element the same for
/// any number of rows, so the bits are those of one product over all rows.
#[allow(clippy::too_many_arguments)]
pub(super) fn du_rms_backward(
    dz: &[f32],
    weight: &[f32],
    m: usize,
    u: &[f32],
    rinv: &[f32],
    w: usize,
    du: &mut [f32],
    dx: &mut [f32],
) {
    for r0 in (0..rinv.len()).step_by(DU_ROWS) {
        let t = DU_ROWS.min(rinv.len() - r0);
        let du = &mut du[..t * w];
        let dzt = matmul::Mat::rows(&dz[r0 * m..(r0 + t) * m], t, m);
        matmul::gemm(1.0, dzt, matmul::Mat::rows(weight, m, w), 0.0, du, w);
        let (ut, rt) = (&u[r0 * w..(r0 + t) * w], &rinv[r0..r0 + t]);
        rms_rows_backward(ut, rt, du, w, &mut dx[r0 * w..(r0 + t) * w]);
    }
}

/// Each row of the n x n logits `w` (`z s + b`) through a softmax, into `p`.
fn softmax_rows(z: &[f32], b: &[f32], s: f32, n: usize, p: &mut [f32]) {
    for ((zr, br), pr) in z
        .chunks_exact(n)
        .zip(b.chunks_exact(n))
        .zip(p.chunks_exact_mut(n))
    {
        for ((p, &z), &b) in pr.iter_mut().zip(zr).zip(br) {
            *p = z * s + b;
        }
        let m = pr.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        pr.iter_mut().for_each(|v| *v = (*v - m).exp());
        let inv = 1.0 / pr.iter().sum::<f32>();
        pr.iter_mut().for_each(|v| *v *= inv);
    }
}

/// One sublayer's mHC coefficient maps.
#[derive(Clone, Debug)]
pub struct Manifold {
    /// Streams n.
    pub n: usize,
    /// Width d of each stream.
    pub d: usize,
    /// Sinkhorn iterations t.
    pub iters: usize,
    /// W (transformers' `fn`), `[(2+n)n, n d]`.
    pub proj: ParamRef,
    /// The static bias (`base`), `[(2+n)n]`.
    pub base: ParamRef,
    /// One scale per map (pre, post, comb), `[3]`.
    pub scale: ParamRef,
}

/// What the coefficient maps keep between forward and backward.
#[derive(Clone, Debug)]
pub struct ManifoldCache {
    u: AlignedBuf,
    /// Per row: sigmoid of the pre and post logits, then the softmax of
    /// the comb logits (what the backward reads instead of recomputing).
    act: AlignedBuf,
    rinv: AlignedBuf,
    z: AlignedBuf,
    dz: AlignedBuf,
    /// dL/du for [`DU_ROWS`] rows.
    du: AlignedBuf,
}

impl Manifold {
    /// Register under `name` (`fn`, `base`, `scale`), W drawn with `std`.
    pub fn new(
        layout: &mut ParamLayout,
        name: &str,
        n: usize,
        d: usize,
        iters: usize,
        std: f32,
        block: Option<usize>,
    ) -> Manifold {
        let m = (2 + n) * n;
        let mut add = |part: &str, shape: &[usize], kind, init| {
            layout.add(format!("{name}.{part}"), shape, kind, block, init)
        };
        Manifold {
            n,
            d,
            iters: iters.max(1),
            proj: add("fn", &[m, n * d], ParamKind::Weight, Init::Normal(std)),
            base: add("base", &[m], ParamKind::Gate, Init::Const(0.0)),
            scale: add("scale", &[3], ParamKind::Gate, Init::Const(1.0)),
        }
    }

    fn width(&self) -> usize {
        (2 + self.n) * self.n
    }

    /// Buffers for `rows` tokens.
    pub fn cache(&self, rows: usize) -> ManifoldCache {
        let (nd, m) = (self.n * self.d, self.width());
        ManifoldCache {
            u: buf(rows * nd),
            act: buf(rows * m),
            rinv: buf(rows),
            z: buf(rows * m),
            dz: buf(rows * m),
            du: buf(DU_ROWS.min(rows) * nd),
        }
    }

    /// Each row's alpha (`[n, n+1]`: column 0 pre, the rest comb) and beta
    /// (post) from the streams `x` (rows x n x d).
    pub fn coefficients(
        &self,
        params: &[f32],
        x: &[f32],
        alpha: &mut [f32],
        beta: &mut [f32],
        c: &mut ManifoldCache,
    ) {
        let (n, nd, m) = (self.n, self.n * self.d, self.width());
        let rows = c.rinv.len();
        rms_rows(x, nd, &mut c.u, &mut c.rinv);
        matmul::linear_forward(&c.u, self.proj.get(params), None, rows, nd, m, &mut c.z);
        let (b, s) = (self.base.get(params), self.scale.get(params));
        let mut comb = vec![[0f32; LANES]; n * n];
        for r0 in (0..rows).step_by(LANES) {
            let group = r0..(r0 + LANES).min(rows);
            for (t, r) in group.clone().enumerate() {
                let z = &c.z[r * m..(r + 1) * m];
                let (act, a) = (
                    &mut c.act[r * m..(r + 1) * m],
                    &mut alpha[r * n * (n + 1)..],
                );
                for k in 0..n {
                    act[k] = sigmoid(z[k] * s[0] + b[k]);
                    a[k * (n + 1)] = act[k] + HC_EPS;
                    act[n + k] = sigmoid(z[n + k] * s[1] + b[n + k]);
                    beta[r * n + k] = 2.0 * act[n + k];
                }
                let p = &mut act[2 * n..];
                softmax_rows(&z[2 * n..], &b[2 * n..], s[2], n, p);
                comb.iter_mut()
                    .zip(p.iter())
                    .for_each(|(c, &p)| c[t] = p + HC_EPS);
            }
            sinkhorn(&mut comb, n, self.iters);
            for (t, r) in group.enumerate() {
                let a = &mut alpha[r * n * (n + 1)..(r + 1) * n * (n + 1)];
                for (e, ce) in comb.iter().enumerate() {
                    a[(e / n) * (n + 1) + 1 + e % n] = ce[t];
                }
            }
        }
    }

    /// The maps' backward: from dL/d alpha and dL/d beta of each row, the
    /// parameters' gradients (accumulated) and the streams' (added to `dx`).
    pub fn backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        dalpha: &[f32],
        dbeta: &[f32],
        dx: &mut [f32],
        c: &mut ManifoldCache,
    ) {
        let (n, nd, m) = (self.n, self.n * self.d, self.width());
        let rows = c.rinv.len();
        let s = self.scale.get(params);
        let mut gs = [0f64; 3];
        let mut gb = vec![0f64; m];
        let (mut c0, mut dc) = (vec![[0f32; LANES]; n * n], vec![[0f32; LANES]; n * n]);
        let mut trace = Vec::new();
        for r0 in (0..rows).step_by(LANES) {
            let group = r0..(r0 + LANES).min(rows);
            for (t, r) in group.clone().enumerate() {
                let (z, act) = (&c.z[r * m..(r + 1) * m], &c.act[r * m..(r + 1) * m]);
                let da = &dalpha[r * n * (n + 1)..(r + 1) * n * (n + 1)];
                let db = &dbeta[r * n..(r + 1) * n];
                let dz = &mut c.dz[r * m..(r + 1) * m];
                for k in 0..n {
                    let sg = act[k];
                    let dv = da[k * (n + 1)] * sg * (1.0 - sg);
                    dz[k] = dv * s[0];
                    gs[0] += f64::from(dv * z[k]);
                    gb[k] += f64::from(dv);
                    let sg = act[n + k];
                    let dv = db[k] * 2.0 * sg * (1.0 - sg);
                    dz[n + k] = dv * s[1];
                    gs[1] += f64::from(dv * z[n + k]);
                    gb[n + k] += f64::from(dv);
                }
                for (e, &pe) in act[2 * n..].iter().enumerate() {
                    c0[e][t] = pe + HC_EPS;
                    dc[e][t] = da[(e / n) * (n + 1) + 1 + e % n];
                }
            }
            sinkhorn_traced(&mut c0, n, self.iters, &mut trace);
            sinkhorn_backward(&mut dc, n, self.iters, &trace);
            // Through the softmax of each row i: p (dc - sum_j p dc).
            for (t, r) in group.enumerate() {
                let z = &c.z[r * m..(r + 1) * m];
                let pt = &c.act[r * m + 2 * n..(r + 1) * m];
                for i in 0..n {
                    let dot: f32 = (0..n).map(|j| pt[i * n + j] * dc[i * n + j][t]).sum();
                    for j in 0..n {
                        let e = 2 * n + i * n + j;
                        let dv = pt[i * n + j] * (dc[i * n + j][t] - dot);
                        c.dz[r * m + e] = dv * s[2];
                        gs[2] += f64::from(dv * z[e]);
                        gb[e] += f64::from(dv);
                    }
                }
            }
        }
        let proj = self.proj.get(params);
        matmul::linear_backward(
            &c.u,
            proj,
            &c.dz,
            rows,
            nd,
            m,
            self.proj.get_mut(grads),
            None,
            None,
            false,
        );
        du_rms_backward(&c.dz, proj, m, &c.u, &c.rinv, nd, &mut c.du, dx);
        add_f64(&self.scale, grads, &gs);
        add_f64(&self.base, grads, &gb);
    }
}
