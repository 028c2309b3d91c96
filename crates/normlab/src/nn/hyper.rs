//! Hyper-connections (Zhu et al. 2024, arXiv 2409.19606): the residual
//! stream widened to n streams per token (state n x d), connected to a
//! sublayer by a learned (n+1) x (n+1) matrix. Per token, with X the n
//! streams (rows X_k), `alpha` an n x (n+1) matrix and `beta` an n-vector:
//!
//! ```text
//! read:   h   = sum_k alpha[k,0] X_k            (what the branch reads)
//! write:  X'_j = beta[j] o + sum_k alpha[k,1+j] X_k
//! ```
//!
//! so column 0 of alpha is the paper's A_m (the read), columns 1.. its A_r
//! (the streams' mixing) and beta its B (the write). Static: alpha and beta
//! are learned constants, initialised as the paper does so that the net
//! starts as a plain residual: alpha[:,0] = e_(l mod n) (sublayer l reads
//! stream l mod n), A_r = I, beta = 1. Dynamic adds input-dependent terms
//! from each stream's normalised row: `alpha += s_a tanh(norm(X_k) W_a)`
//! (row k), `beta_k += s_b tanh(norm(X_k) w_b)`, with W_a, w_b initialised
//! to 0 and s_a = s_b = 0.01, as the paper's code. The norm is the model's
//! norm kind, with its own parameters. mHC (`nn/mhc.rs`) computes alpha
//! and beta another way ([`Coefficients::Manifold`]); the read, the write
//! and their backward here are the same.
//!
//! Backward is explicit: given dL/dX' (`dy`) the write gives the branch's
//! gradient `do = sum_j beta[j] dy_j`, the identity path's
//! `dX_k = sum_j alpha[k,1+j] dy_j` and the coefficients' gradients; the
//! read adds `alpha[k,0] g` (g: what the branch sends back) and, for the
//! dynamic form, the coefficients' paths through tanh, W and the norm.
//! The static parameters' gradients are summed in row order (f64), the
//! dynamic projections' through the GEMM every linear layer uses (one
//! product over all (token, stream) rows), so none depends on the thread
//! count.

use super::hyper_rows::add_f64;
use super::hyper_rows::{read_backward_rows, read_rows, write_backward_rows, write_rows};
use super::mhc::{Manifold, ManifoldCache};
use super::norm::{buf, Norm, NormCache};
use crate::kernels::buf::AlignedBuf;
use crate::kernels::matmul;
use crate::params::{Init, ParamKind, ParamLayout, ParamRef};
use crate::precision::Dtype;

/// The dynamic form's parameters.
#[derive(Clone, Debug)]
pub struct HyperDynamic {
    /// The norm of each stream's row before the projection.
    pub norm: Norm,
    /// W_a, `[n+1, d]`.
    pub alpha_fn: ParamRef,
    /// s_a, `[1]`.
    pub alpha_scale: ParamRef,
    /// w_b, `[1, d]`.
    pub beta_fn: ParamRef,
    /// s_b, `[1]`.
    pub beta_scale: ParamRef,
}

/// Where a hyper-connection's read, write and mixing weights come from.
#[derive(Clone, Debug)]
pub enum Coefficients {
    /// Hyper-connections': learned constants, plus the dynamic form's
    /// input-dependent terms.
    Learned(Learned),
    /// mHC's per-token maps (`nn/mhc.rs`).
    Manifold(Manifold),
}

/// Hyper-connections' weights: learned constants (alpha `[n, n+1]`, beta
/// `[n]`), plus the dynamic form's input-dependent terms.
#[derive(Clone, Debug)]
pub struct Learned {
    /// The static alpha, `[n, n+1]`.
    pub static_alpha: ParamRef,
    /// The static beta, `[n]`.
    pub static_beta: ParamRef,
    /// The dynamic terms, if any.
    pub dynamic: Option<HyperDynamic>,
}

/// One sublayer's hyper-connection.
#[derive(Clone, Debug)]
pub struct Hyper {
    /// Streams n.
    pub n: usize,
    /// Width d of each stream.
    pub d: usize,
    /// Its weights' source.
    pub coef: Coefficients,
}

/// What a hyper-connection keeps between forward and backward.
#[derive(Clone, Debug)]
pub struct HyperCache {
    /// Each row's alpha (n x (n+1)) and beta (n).
    alpha: AlignedBuf,
    beta: AlignedBuf,
    /// The branch's output o (the write's gradient for beta reads it).
    o: AlignedBuf,
    /// The streams after the sublayer, X'.
    out: AlignedBuf,
    /// dL/d alpha and dL/d beta of each row (write's part, then read's).
    dalpha: AlignedBuf,
    dbeta: AlignedBuf,
    /// Dynamic: the normalised streams, the norm's cache, tanh of the
    /// projections, and two stream-sized gradient buffers.
    xn: AlignedBuf,
    norm_c: Option<NormCache>,
    ta: AlignedBuf,
    tb: AlignedBuf,
    /// Dynamic: both projections' weights side by side (`[n+2, d]`) and
    /// their outputs (`[rows n, n+2]`), for the forward's one product.
    wab: AlignedBuf,
    zab: AlignedBuf,
    dxn: AlignedBuf,
    dxt: AlignedBuf,
    /// mHC: the maps' buffers.
    mhc: Option<ManifoldCache>,
}

impl HyperCache {
    /// The streams after the sublayer.
    pub fn output(&self) -> &[f32] {
        &self.out
    }

    /// Each row's alpha (n x (n+1): column 0 the read, the rest the mixing)
    /// from the last forward.
    pub fn alpha(&self) -> &[f32] {
        &self.alpha
    }

    /// The stream norm's cache (dynamic form).
    pub fn norm_cache(&self) -> Option<&NormCache> {
        self.norm_c.as_ref()
    }

    /// The stream norm's cache (dynamic form), mutable.
    pub fn norm_cache_mut(&mut self) -> Option<&mut NormCache> {
        self.norm_c.as_mut()
    }

    /// Each row's beta (the write) from the last forward.
    pub fn beta(&self) -> &[f32] {
        &self.beta
    }
}

impl Hyper {
    /// Register the hyper-connection of sublayer `l` (0-based over the
    /// model's sublayers) under `name`, with `n` streams of width `d`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        layout: &mut ParamLayout,
        name: &str,
        n: usize,
        d: usize,
        l: usize,
        dynamic_norm: Option<(crate::kernels::norm::NormKind, f32)>,
        block: Option<usize>,
    ) -> Hyper {
        let static_alpha = layout.add(
            format!("{name}.static_alpha"),
            &[n, n + 1],
            ParamKind::Gate,
            block,
            Init::Const(0.0),
        );
        let mut a0 = vec![0f32; n * (n + 1)];
        a0[(l % n) * (n + 1)] = 1.0;
        for k in 0..n {
            a0[k * (n + 1) + 1 + k] = 1.0;
        }
        layout.set_init(&static_alpha, Init::Values(a0));
        let static_beta = layout.add(
            format!("{name}.static_beta"),
            &[n],
            ParamKind::Gate,
            block,
            Init::Const(1.0),
        );
        let dynamic = dynamic_norm.map(|(kind, eps)| {
            let norm = Norm::new(layout, &format!("{name}.norm"), kind, d, eps, block);
            let mut add = |part: &str, shape: &[usize], kind, v| {
                layout.add(format!("{name}.{part}"), shape, kind, block, Init::Const(v))
            };
            HyperDynamic {
                norm,
                alpha_fn: add("dynamic_alpha_fn", &[n + 1, d], ParamKind::Weight, 0.0),
                alpha_scale: add("dynamic_alpha_scale", &[1], ParamKind::Gate, 0.01),
                beta_fn: add("dynamic_beta_fn", &[1, d], ParamKind::Weight, 0.0),
                beta_scale: add("dynamic_beta_scale", &[1], ParamKind::Gate, 0.01),
            }
        });
        Hyper {
            n,
            d,
            coef: Coefficients::Learned(Learned {
                static_alpha,
                static_beta,
                dynamic,
            }),
        }
    }

    /// mHC's connection of a sublayer, registered under `name` (`fn`,
    /// `base`, `scale`): `iters` Sinkhorn iterations, W drawn with `std`.
    pub fn manifold(
        layout: &mut ParamLayout,
        name: &str,
        n: usize,
        d: usize,
        iters: usize,
        std: f32,
        block: Option<usize>,
    ) -> Hyper {
        let m = Manifold::new(layout, name, n, d, iters, std, block);
        Hyper {
            n,
            d,
            coef: Coefficients::Manifold(m),
        }
    }

    /// The dynamic form's terms, if any.
    pub fn dynamic(&self) -> Option<&HyperDynamic> {
        match &self.coef {
            Coefficients::Learned(l) => l.dynamic.as_ref(),
            Coefficients::Manifold(_) => None,
        }
    }

    /// Buffers for `rows` tokens.
    pub fn cache(&self, rows: usize) -> HyperCache {
        let (n, d) = (self.n, self.d);
        let dy = self.dynamic().is_some();
        let sized = |len: usize| buf(if dy { len } else { 0 });
        HyperCache {
            alpha: buf(rows * n * (n + 1)),
            beta: buf(rows * n),
            o: buf(rows * d),
            out: buf(rows * n * d),
            dalpha: buf(rows * n * (n + 1)),
            dbeta: buf(rows * n),
            xn: sized(rows * n * d),
            norm_c: self.dynamic().map(|h| h.norm.cache(rows * n)),
            ta: sized(rows * n * (n + 1)),
            tb: sized(rows * n),
            wab: sized((n + 2) * d),
            zab: sized(rows * n * (n + 2)),
            dxn: sized(rows * n * d),
            dxt: sized(rows * n * d),
            mhc: match &self.coef {
                Coefficients::Manifold(m) => Some(m.cache(rows)),
                Coefficients::Learned(_) => None,
            },
        }
    }

    /// Each row's coefficients from the streams `x` (static, plus the
    /// dynamic terms), into the cache.
    fn coefficients(&self, params: &[f32], x: &[f32], c: &mut HyperCache) {
        let (n, d) = (self.n, self.d);
        let m = n + 1;
        let l = match &self.coef {
            Coefficients::Learned(l) => l,
            Coefficients::Manifold(mh) => {
                let mc = c.mhc.as_mut().expect("mHC cache");
                return mh.coefficients(params, x, &mut c.alpha, &mut c.beta, mc);
            }
        };
        let sa = l.static_alpha.get(params);
        let sb = l.static_beta.get(params);
        for (a, b) in c
            .alpha
            .chunks_exact_mut(n * m)
            .zip(c.beta.chunks_exact_mut(n))
        {
            a.copy_from_slice(sa);
            b.copy_from_slice(sb);
        }
        let Some(h) = &l.dynamic else { return };
        h.norm
            .forward(params, x, &mut c.xn, c.norm_c.as_mut().unwrap());
        let (wa, wb) = (h.alpha_fn.get(params), h.beta_fn.get(params));
        let (s_a, s_b) = (h.alpha_scale.get(params)[0], h.beta_scale.get(params)[0]);
        // r runs over (token, stream) rows: one GEMM for both projections,
        // W_a's rows then w_b's (each output rounds as in a product of its
        // own; the kernel's tiles are 32 outputs wide, so two products of
        // n+1 and 1 outputs would cost twice one of n+2).
        let rn = c.tb.len();
        c.wab[..m * d].copy_from_slice(wa);
        c.wab[m * d..].copy_from_slice(wb);
        matmul::linear_forward(&c.xn, &c.wab, None, rn, d, m + 1, &mut c.zab);
        let rows = c.zab.chunks_exact(m + 1).zip(c.ta.chunks_exact_mut(m));
        for (((z, ta), tb), (a, b)) in rows
            .zip(c.tb.iter_mut())
            .zip(c.alpha.chunks_exact_mut(m).zip(c.beta.iter_mut()))
        {
            for ((t, a), &z) in ta.iter_mut().zip(a.iter_mut()).zip(z) {
                *t = z.tanh();
                *a += s_a * *t;
            }
            *tb = z[m].tanh();
            *b += s_b * *tb;
        }
    }

    /// The read: each row's mix of its streams `x` into `h` (rows x d).
    pub fn read(&self, params: &[f32], x: &[f32], h: &mut [f32], c: &mut HyperCache) {
        self.coefficients(params, x, c);
        read_rows(h, x, &c.alpha, self.n, self.d);
    }

    /// The write: X' into the cache from the streams `x` and the branch's
    /// output `o`; with `track`, returns X''s sum of squares.
    pub fn write(
        &self,
        x: &[f32],
        o: &[f32],
        c: &mut HyperCache,
        r: Dtype,
        track: bool,
    ) -> Option<f64> {
        c.o.copy_from_slice(o);
        write_rows(&mut c.out, x, o, &c.alpha, &c.beta, self.n, self.d);
        r.round_in_place(&mut c.out);
        track.then(|| crate::params::sum_squares(&c.out))
    }

    /// The write's backward: from dL/dX' (`dy`), the branch's gradient
    /// into `dout` (rows x d), the identity path's into `dx` (the streams'),
    /// and the coefficients' gradients into the cache.
    pub fn write_backward(
        &self,
        x: &[f32],
        dy: &[f32],
        dout: &mut [f32],
        dx: &mut [f32],
        c: &mut HyperCache,
    ) {
        let c = &mut *c;
        write_backward_rows(
            x,
            dy,
            &c.o,
            &c.alpha,
            &c.beta,
            dout,
            dx,
            &mut c.dalpha,
            &mut c.dbeta,
            self.n,
            self.d,
        );
    }

    /// The read's backward: adds `alpha[k,0] g` to `dx` (g: dL/dh, what
    /// the branch sent back) and, for the dynamic form, the coefficients'
    /// paths; accumulates the parameters' gradients.
    #[allow(clippy::too_many_arguments)]
    pub fn read_backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        x: &[f32],
        g: &[f32],
        dx: &mut [f32],
        c: &mut HyperCache,
        r: Dtype,
    ) {
        let (n, d, m) = (self.n, self.d, self.n + 1);
        read_backward_rows(x, g, &c.alpha, dx, &mut c.dalpha, n, d);
        let l = match &self.coef {
            Coefficients::Learned(l) => l,
            Coefficients::Manifold(mh) => {
                let mc = c.mhc.as_mut().expect("mHC cache");
                mh.backward(params, grads, &c.dalpha, &c.dbeta, dx, mc);
                r.round_in_place(dx);
                return;
            }
        };
        let mut ga = vec![0f64; n * m];
        let mut gb = vec![0f64; n];
        for (da, db) in c.dalpha.chunks_exact(n * m).zip(c.dbeta.chunks_exact(n)) {
            ga.iter_mut().zip(da).for_each(|(s, &v)| *s += f64::from(v));
            gb.iter_mut().zip(db).for_each(|(s, &v)| *s += f64::from(v));
        }
        let add = add_f64;
        add(&l.static_alpha, grads, &ga);
        add(&l.static_beta, grads, &gb);
        if let Some(h) = &l.dynamic {
            let (s_a, s_b) = (h.alpha_scale.get(params)[0], h.beta_scale.get(params)[0]);
            let (mut gsa, mut gsb) = (0f64, 0f64);
            // dL/d alpha and dL/d beta become, in place, the gradients of
            // the projections' outputs (through tanh and the scales).
            for (da, &t) in c.dalpha.iter_mut().zip(c.ta.iter()) {
                gsa += f64::from(*da * t);
                *da *= s_a * (1.0 - t * t);
            }
            for (db, &t) in c.dbeta.iter_mut().zip(c.tb.iter()) {
                gsb += f64::from(*db * t);
                *db *= s_b * (1.0 - t * t);
            }
            add(&h.alpha_scale, grads, &[gsa]);
            add(&h.beta_scale, grads, &[gsb]);
            let rn = c.tb.len();
            let (wa, wb) = (&h.alpha_fn, &h.beta_fn);
            matmul::linear_backward(
                &c.xn,
                wa.get(params),
                &c.dalpha,
                rn,
                d,
                m,
                wa.get_mut(grads),
                None,
                Some(&mut c.dxn),
                false,
            );
            matmul::linear_backward(
                &c.xn,
                wb.get(params),
                &c.dbeta,
                rn,
                d,
                1,
                wb.get_mut(grads),
                None,
                Some(&mut c.dxn),
                true,
            );
            h.norm.backward(
                params,
                grads,
                x,
                &c.dxn,
                &mut c.dxt,
                c.norm_c.as_mut().unwrap(),
            );
            dx.iter_mut().zip(c.dxt.iter()).for_each(|(g, &v)| *g += v);
        }
        r.round_in_place(dx);
    }
}
