//! How a model's residual streams become the d values the final norm
//! reads, and how the embedding enters them: summed (hyper-connections),
//! collapsed by mHC's learned map (transformers' `DeepseekV4HyperHead`:
//! `sum_k pre_k X_k` with `pre = sigmoid(z s + b) + eps`, z = RMS(X
//! flattened) W^T), or mixed over depth (Attention Residuals). Shared by
//! the three residual designs, so it sits in its own file beside them.

use super::attnres::{DepthHead, MixCache};
use super::hyper_rows::{add_f64, collapse, dot, expand};
use super::mhc::{du_rms_backward, rms_rows, sigmoid, DU_ROWS, HC_EPS};
use super::norm::buf;
use crate::kernels::buf::AlignedBuf;
use crate::kernels::matmul;
use crate::params::{Init, ParamKind, ParamLayout, ParamRef};

/// mHC's head: the streams collapsed by `sum_k pre_k X_k` with
/// `pre = sigmoid(z s + b) + eps`, z = RMS(X flattened) W^T (W `[n, n d]`),
/// before the final norm (transformers' `DeepseekV4HyperHead`).
#[derive(Clone, Debug)]
pub struct HyperHead {
    /// Streams n.
    pub n: usize,
    /// Width d.
    pub d: usize,
    /// W (`hc_fn`), `[n, n d]`.
    pub proj: ParamRef,
    /// Bias (`hc_base`), `[n]`.
    pub base: ParamRef,
    /// Scale (`hc_scale`), `[1]`.
    pub scale: ParamRef,
}

/// How the n streams become the d values the final norm reads.
#[derive(Clone, Debug)]
pub enum StreamHead {
    /// Their sum (hyper-connections).
    Sum {
        /// Streams n.
        n: usize,
        /// Width d.
        d: usize,
    },
    /// mHC's learned collapse.
    Learned(HyperHead),
    /// Attention Residuals' depth mix of every slot.
    Depth(DepthHead),
}

/// What the head keeps between forward and backward.
#[derive(Clone, Debug)]
pub struct HeadCache {
    out: AlignedBuf,
    mix: Option<MixCache>,
    u: AlignedBuf,
    rinv: AlignedBuf,
    z: AlignedBuf,
    dz: AlignedBuf,
    du: AlignedBuf,
}

impl HeadCache {
    /// The collapse of the last forward (what the final norm read).
    pub fn output(&self) -> &[f32] {
        &self.out
    }
}

impl StreamHead {
    /// The embedding `x0` (rows x d) entering the streams `xs` (rows x n x
    /// d): copied into each (hyper-connections, mHC), or into the bank's
    /// slot 0, the others empty (AttnRes).
    pub fn enter(&self, x0: &[f32], xs: &mut [f32]) {
        match self {
            StreamHead::Depth(h) => {
                let (n, d) = (h.at.slots, h.d);
                for (xr, yr) in x0.chunks_exact(d).zip(xs.chunks_exact_mut(n * d)) {
                    yr[..d].copy_from_slice(xr);
                    yr[d..].fill(0.0);
                }
            }
            StreamHead::Sum { n, d } => expand(x0, *n, *d, xs),
            StreamHead::Learned(h) => expand(x0, h.n, h.d, xs),
        }
    }

    /// [`enter`](Self::enter)'s backward: the embedding's gradient from
    /// the streams' `dxs` into `dx0` (the copies' sum, or slot 0's).
    pub fn enter_backward(&self, dxs: &[f32], dx0: &mut [f32]) {
        match self {
            StreamHead::Depth(h) => {
                let (n, d) = (h.at.slots, h.d);
                for (yr, xr) in dxs.chunks_exact(n * d).zip(dx0.chunks_exact_mut(d)) {
                    xr.copy_from_slice(&yr[..d]);
                }
            }
            StreamHead::Sum { n, d } => collapse(dxs, *n, *d, dx0),
            StreamHead::Learned(h) => collapse(dxs, h.n, h.d, dx0),
        }
    }

    /// mHC's learned head, registered under `name`.
    pub fn learned(
        layout: &mut ParamLayout,
        name: &str,
        n: usize,
        d: usize,
        std: f32,
    ) -> StreamHead {
        let mut add = |part: &str, shape: &[usize], kind, init| {
            layout.add(format!("{name}.{part}"), shape, kind, None, init)
        };
        StreamHead::Learned(HyperHead {
            n,
            d,
            proj: add("fn", &[n, n * d], ParamKind::Weight, Init::Normal(std)),
            base: add("base", &[n], ParamKind::Gate, Init::Const(0.0)),
            scale: add("scale", &[1], ParamKind::Gate, Init::Const(1.0)),
        })
    }

    /// Buffers for `rows` tokens.
    pub fn cache(&self, rows: usize) -> HeadCache {
        let (n, d, learned) = match self {
            StreamHead::Sum { n, d } => (*n, *d, false),
            StreamHead::Learned(h) => (h.n, h.d, true),
            StreamHead::Depth(h) => (h.at.slots, h.d, false),
        };
        let sized = |len: usize| buf(if learned { len } else { 0 });
        HeadCache {
            out: buf(rows * d),
            mix: match self {
                StreamHead::Depth(h) => Some(h.cache(rows)),
                _ => None,
            },
            u: sized(rows * n * d),
            rinv: sized(rows),
            z: sized(rows * n),
            dz: sized(rows * n),
            du: sized(DU_ROWS.min(rows) * n * d),
        }
    }

    /// The streams `x` (rows x n x d) collapsed into the cache; returns it.
    pub fn forward<'a>(&self, params: &[f32], x: &[f32], c: &'a mut HeadCache) -> &'a mut [f32] {
        let h = match self {
            StreamHead::Sum { n, d } => {
                collapse(x, *n, *d, &mut c.out);
                return &mut c.out;
            }
            StreamHead::Depth(h) => {
                h.forward(params, x, &mut c.out, c.mix.as_mut().unwrap());
                return &mut c.out;
            }
            StreamHead::Learned(h) => h,
        };
        let (n, d) = (h.n, h.d);
        let rows = c.rinv.len();
        rms_rows(x, n * d, &mut c.u, &mut c.rinv);
        matmul::linear_forward(&c.u, h.proj.get(params), None, rows, n * d, n, &mut c.z);
        let (b, s) = (h.base.get(params), h.scale.get(params)[0]);
        for ((xr, z), yr) in x
            .chunks_exact(n * d)
            .zip(c.z.chunks_exact(n))
            .zip(c.out.chunks_exact_mut(d))
        {
            yr.fill(0.0);
            for (k, xk) in xr.chunks_exact(d).enumerate() {
                let pre = sigmoid(z[k] * s + b[k]) + HC_EPS;
                yr.iter_mut().zip(xk).for_each(|(y, &x)| *y += pre * x);
            }
        }
        &mut c.out
    }

    /// Backward: from dL/d(collapse) `dout` (rows x d), dL/dx into `dx`
    /// (rows x n x d, written), the parameters' gradients accumulated.
    pub fn backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        x: &[f32],
        dout: &[f32],
        dx: &mut [f32],
        c: &mut HeadCache,
    ) {
        let h = match self {
            StreamHead::Sum { n, d } => return expand(dout, *n, *d, dx),
            StreamHead::Depth(h) => {
                return h.backward(params, grads, x, dout, dx, c.mix.as_ref().unwrap())
            }
            StreamHead::Learned(h) => h,
        };
        let (n, d) = (h.n, h.d);
        let rows = c.rinv.len();
        let (b, s) = (h.base.get(params), h.scale.get(params)[0]);
        let (mut gs, mut gb) = (0f64, vec![0f64; n]);
        for r in 0..rows {
            let (xr, g) = (&x[r * n * d..(r + 1) * n * d], &dout[r * d..(r + 1) * d]);
            let z = &c.z[r * n..(r + 1) * n];
            let dxr = &mut dx[r * n * d..(r + 1) * n * d];
            for (k, (xk, dxk)) in xr.chunks_exact(d).zip(dxr.chunks_exact_mut(d)).enumerate() {
                let sg = sigmoid(z[k] * s + b[k]);
                let pre = sg + HC_EPS;
                dxk.iter_mut().zip(g).for_each(|(dx, &g)| *dx = pre * g);
                let dpre = dot(xk, g);
                let dv = dpre * sg * (1.0 - sg);
                c.dz[r * n + k] = dv * s;
                gs += f64::from(dv * z[k]);
                gb[k] += f64::from(dv);
            }
        }
        let proj = h.proj.get(params);
        matmul::linear_backward(
            &c.u,
            proj,
            &c.dz,
            rows,
            n * d,
            n,
            h.proj.get_mut(grads),
            None,
            None,
            false,
        );
        du_rms_backward(&c.dz, proj, n, &c.u, &c.rinv, n * d, &mut c.du, dx);
        add_f64(&h.scale, grads, &[gs]);
        add_f64(&h.base, grads, &gb);
    }
}
