//! The per-row arithmetic of n parallel streams (hyper-connections and
//! mHC, `nn/hyper.rs`): the read `h = sum_k alpha[k,0] X_k`, the write
//! `X'_j = beta_j o + sum_k alpha[k,1+j] X_k`, their backward, and the
//! copy into and sum over the streams, and the f64 sums added to a
//! parameter's gradient (shared by HC, mHC and AttnRes). One pass over d per term: a
//! version that gathered a row's terms in one pass measured no faster
//! (the n x d state's traffic, not the arithmetic, bounds these loops).

/// `sum(a * b)` over 8 lanes (so that it vectorises), tree-summed.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut s = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            s[i] += x[i] * y[i];
        }
    }
    let mut t = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (x, y) in ra.iter().zip(rb) {
        t += x * y;
    }
    t
}

#[inline(always)]
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y += a * x);
}

crate::kernels::multiversion! {
    /// The read of every row: `h = sum_k alpha[k,0] X_k`.
    pub fn read_rows(h: &mut [f32], x: &[f32], alpha: &[f32], n: usize, d: usize) {
        let m = n + 1;
        for ((hr, xr), a) in h
            .chunks_exact_mut(d)
            .zip(x.chunks_exact(n * d))
            .zip(alpha.chunks_exact(n * m))
        {
            hr.fill(0.0);
            for (k, xk) in xr.chunks_exact(d).enumerate() {
                axpy(hr, a[k * m], xk);
            }
        }
    }
}

crate::kernels::multiversion! {
    /// The write of every row: `X'_j = beta_j o + sum_k alpha[k,1+j] X_k`.
    pub fn write_rows(
        out: &mut [f32],
        x: &[f32],
        o: &[f32],
        alpha: &[f32],
        beta: &[f32],
        n: usize,
        d: usize,
    ) {
        let m = n + 1;
        for (((yr, xr), or), (a, b)) in out
            .chunks_exact_mut(n * d)
            .zip(x.chunks_exact(n * d))
            .zip(o.chunks_exact(d))
            .zip(alpha.chunks_exact(n * m).zip(beta.chunks_exact(n)))
        {
            for (j, yj) in yr.chunks_exact_mut(d).enumerate() {
                yj.iter_mut().zip(or).for_each(|(y, &o)| *y = b[j] * o);
                for (k, xk) in xr.chunks_exact(d).enumerate() {
                    axpy(yj, a[k * m + 1 + j], xk);
                }
            }
        }
    }
}

crate::kernels::multiversion! {
    /// The write's backward of every row: `do = sum_j beta_j dy_j`,
    /// `dX_k = sum_j alpha[k,1+j] dy_j` and the coefficients' gradients.
    pub fn write_backward_rows(
        x: &[f32],
        dy: &[f32],
        o: &[f32],
        alpha: &[f32],
        beta: &[f32],
        dout: &mut [f32],
        dx: &mut [f32],
        dalpha: &mut [f32],
        dbeta: &mut [f32],
        n: usize,
        d: usize,
    ) {
        let m = n + 1;
        let rows = x.chunks_exact(n * d).zip(dy.chunks_exact(n * d));
        let coefs = alpha.chunks_exact(n * m).zip(beta.chunks_exact(n));
        let grads = dalpha.chunks_exact_mut(n * m).zip(dbeta.chunks_exact_mut(n));
        let outs = dout.chunks_exact_mut(d).zip(o.chunks_exact(d));
        for ((((xr, dyr), (a, b)), (da, db)), ((dor, or), dxr)) in rows
            .zip(coefs)
            .zip(grads)
            .zip(outs.zip(dx.chunks_exact_mut(n * d)))
        {
            dor.fill(0.0);
            for (j, dyj) in dyr.chunks_exact(d).enumerate() {
                axpy(dor, b[j], dyj);
                db[j] = dot(or, dyj);
            }
            for (k, (dxk, xk)) in dxr.chunks_exact_mut(d).zip(xr.chunks_exact(d)).enumerate() {
                dxk.fill(0.0);
                for (j, dyj) in dyr.chunks_exact(d).enumerate() {
                    axpy(dxk, a[k * m + 1 + j], dyj);
                    da[k * m + 1 + j] = dot(xk, dyj);
                }
            }
        }
    }
}

crate::kernels::multiversion! {
    /// The read's backward of every row: adds `alpha[k,0] g` to `dX_k`
    /// and writes `dalpha[k,0] = X_k . g`.
    pub fn read_backward_rows(
        x: &[f32],
        g: &[f32],
        alpha: &[f32],
        dx: &mut [f32],
        dalpha: &mut [f32],
        n: usize,
        d: usize,
    ) {
        let m = n + 1;
        for (((xr, gr), dxr), (a, da)) in x
            .chunks_exact(n * d)
            .zip(g.chunks_exact(d))
            .zip(dx.chunks_exact_mut(n * d))
            .zip(alpha.chunks_exact(n * m).zip(dalpha.chunks_exact_mut(n * m)))
        {
            for (k, (dxk, xk)) in dxr.chunks_exact_mut(d).zip(xr.chunks_exact(d)).enumerate() {
                axpy(dxk, a[k * m], gr);
                da[k * m] = dot(xk, gr);
            }
        }
    }
}

/// Each row of `x` (rows x d) copied into its `n` streams (`out`: rows x n
/// x d): the embedding entering the streams, or a gradient leaving a sum.
pub fn expand(x: &[f32], n: usize, d: usize, out: &mut [f32]) {
    for (xr, yr) in x.chunks_exact(d).zip(out.chunks_exact_mut(n * d)) {
        yr.chunks_exact_mut(d).for_each(|y| y.copy_from_slice(xr));
    }
}

/// Each row's `n` streams summed (`x`: rows x n x d, `out`: rows x d): what
/// the final norm reads, or the gradient of a copy.
pub fn collapse(x: &[f32], n: usize, d: usize, out: &mut [f32]) {
    for (xr, yr) in x.chunks_exact(n * d).zip(out.chunks_exact_mut(d)) {
        yr.copy_from_slice(&xr[..d]);
        xr[d..].chunks_exact(d).for_each(|xk| axpy(yr, 1.0, xk));
    }
}

/// Adds f64 sums to a parameter's gradient.
pub fn add_f64(p: &crate::params::ParamRef, grads: &mut [f32], v: &[f64]) {
    p.get_mut(grads)
        .iter_mut()
        .zip(v)
        .for_each(|(g, &v)| *g += v as f32);
}
