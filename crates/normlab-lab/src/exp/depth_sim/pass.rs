//! The simulator's pass: the forward through N sublayers and the exact
//! backward, for one stream and for n parallel streams. With n streams
//! (hyper-connections, mHC) the state of a row is n x d, each stream
//! starting as the input; sublayer l reads `a = sum_k pre_k X_k`, computes
//! its branch `o = branch * W_l In(a)` as the single stream does, and
//! writes `X'_j = sum_k comb[k, j] X_k + post_j o`. The loss reads the
//! head's collapse of the streams, `sum_k w_k X_k`.
//!
//! - Hyper-connections at the paper's init: pre = e_(l mod n), post = 1,
//!   comb = I, head w = 1 (the streams stay equal copies of a plain
//!   residual's, which the head sums).
//! - mHC at transformers' init: per row, z = W u with u the RMS-normalised
//!   flattened streams and W ~ N(0, 0.02^2) (the models' init std),
//!   pre = sigmoid + 1e-6, post = 2 sigmoid, comb = Sinkhorn(row softmax +
//!   1e-6) with 20 iterations, head w = sigmoid + 1e-6 from its own W.
//!
//! The stream RMS is over the whole n x d state; the gradient at each depth
//! is that of a change made to every stream alike. For hyper-connections
//! at init, whose streams stay equal, the RMS is the plain residual's, and
//! every gradient is n times the plain one (the head sums n copies), so
//! the bottom/top ratio is the plain residual's.
//! The backward holds the read, write, mixing and head weights at their
//! forward values: their own path (mHC's weights depend on the streams) is
//! left out, so the gradient is the one through the streams and the
//! branches. For hyper-connections, whose weights are constants, it is the
//! exact gradient.

use super::config::{finite, SimConfig, SimResult, DYT_ALPHA};
use normlab::kernels::rng::Rng;
use normlab::model::residual::{self, StreamSim};

/// mHC maps' init std (transformers' `initializer_range`, normlab's
/// `init_std`).
const MHC_STD: f64 = 0.02;
/// transformers' `hc_eps` and the unweighted RMSNorm's eps.
const HC_EPS: f64 = 1e-6;
/// Sinkhorn iterations (transformers' `hc_sinkhorn_iters`).
const SINKHORN: usize = 20;

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + libm::exp(-x))
}

/// One sublayer's per-row read (n), write (n) and mixing (n x n, comb[k, j]
/// row-major) weights.
struct Route {
    pre: Vec<f64>,
    post: Vec<f64>,
    comb: Vec<f64>,
}

/// A row's n x d streams RMS-normalised and projected by a fresh
/// `outs x n d` map drawn from `rng` (one map for every row).
fn project(x: &[f64], rows: usize, width: usize, outs: usize, rng: &mut Rng) -> Vec<f64> {
    let w: Vec<f64> = (0..outs * width)
        .map(|_| MHC_STD * rng.normal_portable())
        .collect();
    let mut z = vec![0.0; rows * outs];
    for (xr, zr) in x.chunks_exact(width).zip(z.chunks_exact_mut(outs)) {
        let ms = xr.iter().map(|v| v * v).sum::<f64>() / width as f64;
        let ri = 1.0 / (ms + HC_EPS).sqrt();
        for (o, zo) in zr.iter_mut().enumerate() {
            *zo = ri
                * w[o * width..(o + 1) * width]
                    .iter()
                    .zip(xr)
                    .map(|(a, b)| a * b)
                    .sum::<f64>();
        }
    }
    z
}

/// Row softmax + eps, then a column normalisation and `SINKHORN - 1`
/// alternating row and column normalisations (each `c / (sum + eps)`).
fn sinkhorn(z: &[f64], n: usize) -> Vec<f64> {
    let mut c = vec![0.0; n * n];
    for (zr, cr) in z.chunks_exact(n).zip(c.chunks_exact_mut(n)) {
        let m = zr.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
        let e: Vec<f64> = zr.iter().map(|v| libm::exp(v - m)).collect();
        let s: f64 = e.iter().sum();
        cr.iter_mut().zip(&e).for_each(|(c, v)| *c = v / s + HC_EPS);
    }
    for step in 0..2 * SINKHORN - 1 {
        let cols = step % 2 == 0;
        for a in 0..n {
            let at = |b: usize| if cols { b * n + a } else { a * n + b };
            let s: f64 = (0..n).map(|b| c[at(b)]).sum();
            (0..n).for_each(|b| c[at(b)] /= s + HC_EPS);
        }
    }
    c
}

/// Sublayer `l`'s weights for the state `x` (rows x n x d).
fn route(
    kind: StreamSim,
    n: usize,
    l: usize,
    x: &[f64],
    rows: usize,
    d: usize,
    rng: &mut Rng,
) -> Route {
    match kind {
        StreamSim::Hyper => {
            let mut pre = vec![0.0; rows * n];
            pre.chunks_exact_mut(n).for_each(|p| p[l % n] = 1.0);
            let eye: Vec<f64> = (0..n * n)
                .map(|e| if e / n == e % n { 1.0 } else { 0.0 })
                .collect();
            Route {
                pre,
                post: vec![1.0; rows * n],
                comb: eye.repeat(rows),
            }
        }
        StreamSim::Manifold => {
            let outs = 2 * n + n * n;
            let z = project(x, rows, n * d, outs, rng);
            let (mut pre, mut post, mut comb) = (Vec::new(), Vec::new(), Vec::new());
            for zr in z.chunks_exact(outs) {
                pre.extend(zr[..n].iter().map(|&v| sigmoid(v) + HC_EPS));
                post.extend(zr[n..2 * n].iter().map(|&v| 2.0 * sigmoid(v)));
                comb.extend(sinkhorn(&zr[2 * n..], n));
            }
            Route { pre, post, comb }
        }
    }
}

/// The head's weights over the streams (rows x n).
fn head(kind: StreamSim, n: usize, x: &[f64], rows: usize, d: usize, rng: &mut Rng) -> Vec<f64> {
    match kind {
        StreamSim::Hyper => vec![1.0; rows * n],
        StreamSim::Manifold => project(x, rows, n * d, n, rng)
            .into_iter()
            .map(|v| sigmoid(v) + HC_EPS)
            .collect(),
    }
}

/// What the forward and the backward pass share: the sizes, the stream
/// design, the weights' std, the skip and write-back multipliers and the
/// residual options.
struct Pass<'a> {
    c: &'a SimConfig,
    layers: usize,
    d: usize,
    rows: usize,
    streams: Option<(StreamSim, usize)>,
    n: usize,
    std: f64,
    skip: f64,
    writeback: f64,
    options: Vec<(&'static residual::ResidualOption, f64)>,
}

impl<'a> Pass<'a> {
    fn new(c: &'a SimConfig) -> Pass<'a> {
        let (layers, d, rows) = (c.sublayers, c.d, c.rows);
        let streams = c.streams();
        let n = streams.map_or(1, |s| s.1);
        let std = c.gain / (d as f64).sqrt();
        let skip = if c.residual { 1.0 } else { 0.0 };
        let writeback = if c.scale_writeback {
            1.0 / (layers as f64).sqrt()
        } else {
            1.0
        };
        // The residual options' multipliers at init, from their declarations.
        let options = c.residual_options();
        Pass {
            c,
            layers,
            d,
            rows,
            streams,
            n,
            std,
            skip,
            writeback,
            options,
        }
    }

    /// A layer's d x d weights, drawn from `state`.
    fn draw(&self, state: &mut Rng) -> Vec<f64> {
        (0..self.d * self.d)
            .map(|_| self.std * state.normal_portable())
            .collect()
    }

    /// The residual options' effect at init on sublayer `l`.
    fn effect(&self, l: usize) -> residual::InitEffect {
        residual::at_init(&self.options, l, self.c.pre_norm)
    }

    /// A state's gradient summed over its streams (per row, d values).
    fn summed(&self, g: &[f64]) -> Vec<f64> {
        let (n, d) = (self.n, self.d);
        if n == 1 {
            return g.to_vec();
        }
        g.chunks_exact(n * d)
            .flat_map(|gr| (0..d).map(move |j| (0..n).map(|m| gr[m * d + j]).sum::<f64>()))
            .collect()
    }

    /// A gradient's norm per row.
    fn norm(&self, g: &[f64]) -> f64 {
        (g.iter().map(|v| v * v).sum::<f64>() / self.rows as f64).sqrt()
    }
}

/// What the forward pass leaves: the last state, the stream RMS at each
/// depth, and what the backward reads (each layer's read before its
/// pre-norm, its routing, its rows' 1/rms, its generator state).
struct Forward {
    x: Vec<f64>,
    residual: Vec<f64>,
    xs: Vec<Vec<f64>>,
    routes: Vec<Option<Route>>,
    inv_rms: Vec<Vec<f64>>,
    states: Vec<Rng>,
}

/// The pass from the inputs `x0` and the loss weights `r` (L = <r, the
/// head's output>), the layers' weights drawn from `rng`: the result, the
/// head's output and dL/dx_0.
pub(super) fn simulate_from(
    c: &SimConfig,
    x0: Vec<f64>,
    r: &[f64],
    mut rng: Rng,
) -> (SimResult, Vec<f64>, Vec<f64>) {
    let p = Pass::new(c);
    let fwd = forward(&p, x0, &mut rng);
    let (out, g) = top(&p, &fwd.x, r, &mut rng);
    let (grads, g) = backward(&p, &fwd, g);
    let layers = p.layers;
    // dL/dx_0: the copies' gradients summed.
    let g0 = p.summed(&g);
    let residual_rms: Vec<Option<f64>> = fwd.residual.into_iter().map(finite).collect();
    let grad_norm: Vec<Option<f64>> = grads.iter().map(|&v| finite(v)).collect();
    let ratio = match (grad_norm[0], grad_norm[layers]) {
        (Some(b), Some(t)) if t > 0.0 => finite(b / t),
        _ => None,
    };
    let res = SimResult {
        config: c.clone(),
        final_residual_rms: residual_rms[layers],
        residual_rms,
        grad_norm,
        grad_ratio_bottom_top: ratio,
    };
    (res, out, g0)
}

/// The forward through the N sublayers from `x0`, each layer's weights
/// drawn from `rng`.
fn forward(p: &Pass, x0: Vec<f64>, rng: &mut Rng) -> Forward {
    let (c, layers, d, rows, streams, n) = (p.c, p.layers, p.d, p.rows, p.streams, p.n);
    let (skip, writeback) = (p.skip, p.writeback);
    let mut states = Vec::with_capacity(layers);
    let rms = |v: &[f64]| (v.iter().map(|a| a * a).sum::<f64>() / v.len() as f64).sqrt();
    // The state: each stream a copy of the input.
    let mut x = if n == 1 {
        x0
    } else {
        x0.chunks_exact(d).flat_map(|row| row.repeat(n)).collect()
    };
    let mut residual = vec![rms(&x)];
    // Each layer's read before its pre-norm, kept only for the backward.
    let mut xs = Vec::new();
    let mut routes = Vec::new();
    let mut inv_rms = Vec::with_capacity(layers); // per layer, per row (pre-norm)
    let lns = |l: usize| p.effect(l).read;
    for l in 0..layers {
        let branch = writeback * p.effect(l).write;
        states.push(rng.clone());
        let w = p.draw(rng);
        let rt = streams.map(|(kind, n)| route(kind, n, l, &x, rows, d, rng));
        let mut a = match &rt {
            None => x.clone(),
            Some(rt) => x
                .chunks_exact(n * d)
                .zip(rt.pre.chunks_exact(n))
                .flat_map(|(xr, p)| {
                    (0..d).map(move |j| (0..n).map(|k| p[k] * xr[k * d + j]).sum::<f64>())
                })
                .collect(),
        };
        let read = (c.pre_norm && n > 1).then(|| a.clone());
        let mut ir = vec![1.0; rows];
        if c.pre_norm && c.dyt {
            a.iter_mut()
                .for_each(|v| *v = libm::tanh(DYT_ALPHA * *v) * lns(l));
        } else if c.pre_norm {
            for (row, irr) in a.chunks_exact_mut(d).zip(ir.iter_mut()) {
                let ms = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
                *irr = 1.0 / (ms + 1e-6).sqrt();
                let s = *irr * lns(l);
                row.iter_mut().for_each(|v| *v *= s);
            }
        }
        let mut next = vec![0.0; rows * n * d];
        for (i, (nrow, arow)) in next
            .chunks_exact_mut(n * d)
            .zip(a.chunks_exact(d))
            .enumerate()
        {
            let xr = &x[i * n * d..(i + 1) * n * d];
            for j in 0..d {
                let wj = &w[j * d..(j + 1) * d];
                let s: f64 = wj.iter().zip(arow).map(|(p, q)| p * q).sum();
                match &rt {
                    None => nrow[j] = skip * xr[j] + branch * s,
                    Some(rt) => {
                        let (cm, post) = (&rt.comb[i * n * n..], &rt.post[i * n..]);
                        for m in 0..n {
                            let mix: f64 = (0..n).map(|k| cm[k * n + m] * xr[k * d + j]).sum();
                            nrow[m * d + j] = mix + post[m] * (branch * s);
                        }
                    }
                }
            }
        }
        inv_rms.push(ir);
        residual.push(rms(&next));
        routes.push(rt);
        match read {
            Some(read) => {
                xs.push(read);
                x = next;
            }
            None if c.pre_norm => xs.push(std::mem::replace(&mut x, next)),
            None => x = next,
        }
    }
    Forward {
        x,
        residual,
        xs,
        routes,
        inv_rms,
        states,
    }
}

/// The head's output from the last state `x`, and the gradient at the top.
fn top(p: &Pass, x: &[f64], r: &[f64], rng: &mut Rng) -> (Vec<f64>, Vec<f64>) {
    let (d, rows) = (p.d, p.rows);
    // The head's output and the gradient at the top.
    let (out, g) = match p.streams {
        None => (x.to_vec(), r.to_vec()),
        Some((kind, n)) => {
            let hw = head(kind, n, x, rows, d, rng);
            let mut out = vec![0.0; rows * d];
            let mut g = vec![0.0; rows * n * d];
            for i in 0..rows {
                for k in 0..n {
                    let wk = hw[i * n + k];
                    for j in 0..d {
                        out[i * d + j] += wk * x[(i * n + k) * d + j];
                        g[(i * n + k) * d + j] = wk * r[i * d + j];
                    }
                }
            }
            (out, g)
        }
    };
    (out, g)
}

/// The backward from the gradient at the top `g`, exact through the
/// streams and the branches: the gradient norm at each depth (bottom
/// first) and dL/dx_0 per stream.
fn backward(p: &Pass, fwd: &Forward, mut g: Vec<f64>) -> (Vec<f64>, Vec<f64>) {
    let (c, layers, d, rows, n) = (p.c, p.layers, p.d, p.rows, p.n);
    let (skip, writeback) = (p.skip, p.writeback);
    let Forward {
        xs,
        routes,
        inv_rms,
        states,
        ..
    } = fwd;
    let lns = |l: usize| p.effect(l).read;
    // Backward: through the mixing, and through each branch from its
    // write to its read: g_l = comb g_{l+1} + pre In^T(W^T (branch post . g_{l+1})).
    // The gradient reported at each depth is that of a change made to
    // every stream alike (the streams' gradients summed): the one stream's
    // for n = 1, and for hyper-connections at init the plain residual's.
    let summed = |g: &[f64]| p.summed(g);
    let norm = |g: &[f64]| p.norm(g);
    let mut grads = vec![norm(&summed(&g))];
    for l in (0..layers).rev() {
        let branch = writeback * p.effect(l).write;
        let w = p.draw(&mut states[l].clone());
        let mut next = vec![0.0; rows * n * d];
        for i in 0..rows {
            let grow = &g[i * n * d..(i + 1) * n * d];
            // dL/do: the write's gradient summed over the streams it enters.
            let dout: Vec<f64> = match &routes[l] {
                None => grow.to_vec(),
                Some(rt) => (0..d)
                    .map(|j| (0..n).map(|m| rt.post[i * n + m] * grow[m * d + j]).sum())
                    .collect(),
            };
            let mut da = vec![0.0; d];
            for (j, &gj) in dout.iter().enumerate() {
                let bj = branch * gj;
                for (k, dk) in da.iter_mut().enumerate() {
                    *dk += w[j * d + k] * bj;
                }
            }
            if c.pre_norm && c.dyt {
                // d/dx of c * tanh(alpha x): c alpha (1 - tanh^2).
                let xr = &xs[l][i * d..(i + 1) * d];
                for (dk, &xk) in da.iter_mut().zip(xr) {
                    let t = libm::tanh(DYT_ALPHA * xk);
                    *dk *= lns(l) * DYT_ALPHA * (1.0 - t * t);
                }
            } else if c.pre_norm {
                // d/dx of c * x * rstd: c rstd (da - xhat mean(da * xhat)).
                da.iter_mut().for_each(|v| *v *= lns(l));
                let xr = &xs[l][i * d..(i + 1) * d];
                let ir = inv_rms[l][i];
                let m: f64 = da.iter().zip(xr).map(|(a, b)| a * b * ir).sum::<f64>() / d as f64;
                for k in 0..d {
                    da[k] = ir * (da[k] - xr[k] * ir * m);
                }
            }
            let nrow = &mut next[i * n * d..(i + 1) * n * d];
            match &routes[l] {
                None => {
                    for k in 0..d {
                        nrow[k] = skip * grow[k] + da[k];
                    }
                }
                Some(rt) => {
                    let (cm, pre) = (&rt.comb[i * n * n..], &rt.pre[i * n..]);
                    for s in 0..n {
                        for k in 0..d {
                            let mix: f64 = (0..n).map(|m| cm[s * n + m] * grow[m * d + k]).sum();
                            nrow[s * d + k] = mix + pre[s] * da[k];
                        }
                    }
                }
            }
        }
        g = next;
        grads.push(if n == 1 { norm(&g) } else { norm(&summed(&g)) });
    }
    grads.reverse();
    (grads, g)
}
