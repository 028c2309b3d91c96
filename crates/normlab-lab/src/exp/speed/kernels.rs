//! speed's kernel timings: LayerNorm's and RMSNorm's fused kernels and an
//! unfused RMSNorm (one pass over memory per elementary operation) at one
//! shape, thread count and pass, timed in interleaved rounds.

use crate::bench::compare::{self, Ratio};
use crate::bench::Pass;
use normlab::kernels::buf::AlignedBuf;
use normlab::kernels::norm::{self, NormKind};
use normlab::kernels::rng::Rng;
use rayon::prelude::*;
use serde::Serialize;

/// One kernel comparison: LayerNorm against RMSNorm (and the unfused
/// RMSNorm) at one shape, thread count and pass.
#[derive(Clone, Debug, Serialize)]
pub(super) struct KernelPoint {
    pub(super) rows: usize,
    pub(super) d: usize,
    pub(super) threads: usize,
    pub(super) pass: Pass,
    pub(super) layernorm_us: f64,
    pub(super) rmsnorm_us: f64,
    pub(super) unfused_rmsnorm_us: f64,
    /// RMSNorm's speed-up over LayerNorm (t_ln / t_rms, per round).
    pub(super) rms_vs_ln: Ratio,
    /// The fused LayerNorm's speed-up over the unfused RMSNorm.
    pub(super) ln_vs_unfused_rms: Ratio,
}

/// RMSNorm as a framework without a fused kernel computes it: one pass over
/// memory per elementary operation (square, row mean, add eps and rsqrt,
/// scale by the row factor, multiply by the gain), each writing a temporary.
struct Unfused {
    sq: Vec<f32>,
    rstd: Vec<f32>,
    tmp: Vec<f32>,
    g: Vec<f32>,
}

impl Unfused {
    fn new(n: usize, rows: usize) -> Unfused {
        Unfused {
            sq: vec![0.0; n],
            rstd: vec![0.0; rows],
            tmp: vec![0.0; n],
            g: vec![0.0; n],
        }
    }

    fn forward(&mut self, d: usize, x: &[f32], gamma: &[f32], y: &mut [f32]) {
        let eps = 1e-6;
        self.sq
            .par_iter_mut()
            .zip(x.par_iter())
            .for_each(|(s, v)| *s = v * v);
        self.rstd
            .par_iter_mut()
            .zip(self.sq.par_chunks(d))
            .for_each(|(r, row)| *r = row.iter().sum::<f32>() / d as f32);
        self.rstd
            .par_iter_mut()
            .for_each(|r| *r = 1.0 / (*r + eps).sqrt());
        let rstd = &self.rstd;
        self.tmp
            .par_chunks_mut(d)
            .zip(x.par_chunks(d))
            .zip(rstd.par_iter())
            .for_each(|((t, xr), r)| t.iter_mut().zip(xr).for_each(|(o, v)| *o = v * r));
        y.par_chunks_mut(d)
            .zip(self.tmp.par_chunks(d))
            .for_each(|(yr, tr)| {
                yr.iter_mut()
                    .zip(tr)
                    .zip(gamma)
                    .for_each(|((o, v), g)| *o = v * g)
            });
    }

    /// Backward as autograd runs it: g = dy * gamma; xhat (recomputed);
    /// mean(g * xhat) per row; dx = rstd * (g - xhat * mean), one pass each.
    fn backward(&mut self, d: usize, x: &[f32], dy: &[f32], gamma: &[f32], dx: &mut [f32]) {
        self.g
            .par_chunks_mut(d)
            .zip(dy.par_chunks(d))
            .for_each(|(gr, dr)| {
                gr.iter_mut()
                    .zip(dr)
                    .zip(gamma)
                    .for_each(|((o, v), w)| *o = v * w)
            });
        let rstd = &self.rstd;
        self.tmp
            .par_chunks_mut(d)
            .zip(x.par_chunks(d))
            .zip(rstd.par_iter())
            .for_each(|((t, xr), r)| t.iter_mut().zip(xr).for_each(|(o, v)| *o = v * r));
        self.sq
            .par_iter_mut()
            .zip(self.g.par_iter().zip(self.tmp.par_iter()))
            .for_each(|(o, (a, b))| *o = a * b);
        let means: Vec<f32> = self
            .sq
            .par_chunks(d)
            .map(|r| r.iter().sum::<f32>() / d as f32)
            .collect();
        dx.par_chunks_mut(d)
            .zip(self.g.par_chunks(d).zip(self.tmp.par_chunks(d)))
            .zip(rstd.par_iter().zip(means.par_iter()))
            .for_each(|((o, (gr, hr)), (r, m))| {
                for ((ov, gv), hv) in o.iter_mut().zip(gr).zip(hr) {
                    *ov = r * (gv - hv * m);
                }
            });
    }
}

/// The buffers of one fused kernel at one shape.
struct Fused {
    kind: NormKind,
    params: Vec<f32>,
    y: AlignedBuf,
    dx: AlignedBuf,
    stats: Vec<f32>,
    dparams: Vec<f32>,
    scratch: Vec<f32>,
}

impl Fused {
    fn new(kind: NormKind, rows: usize, d: usize) -> Fused {
        let mut params = vec![0.0; kind.num_params(d)];
        kind.init_params(d, &mut params);
        Fused {
            kind,
            dparams: vec![0.0; params.len()],
            params,
            y: AlignedBuf::zeros(rows * d),
            dx: AlignedBuf::zeros(rows * d),
            stats: vec![0.0; norm::stats_len(rows)],
            scratch: vec![0.0; norm::backward_scratch_len(kind, rows, d)],
        }
    }

    fn run(&mut self, pass: Pass, d: usize, x: &[f32], dy: &[f32]) {
        let k = self.kind;
        norm::forward(
            k,
            d,
            k.default_eps(),
            x,
            &self.params,
            &mut self.y,
            &mut self.stats,
        );
        if pass == Pass::ForwardBackward {
            norm::backward(
                k,
                d,
                x,
                dy,
                &self.params,
                &self.stats,
                &mut self.dx,
                &mut self.dparams,
                &mut self.scratch,
            );
        }
    }
}

/// Time LayerNorm, RMSNorm and the unfused RMSNorm at one shape.
pub(super) fn kernel_point(
    rows: usize,
    d: usize,
    threads: usize,
    rounds: usize,
    secs: f64,
) -> Vec<KernelPoint> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool");
    pool.install(|| {
        let n = rows * d;
        let mut rng = Rng::new(1);
        let x = AlignedBuf::from_slice(&rng.normal_vec(n, 0.5, 2.0));
        let dy = AlignedBuf::from_slice(&rng.normal_vec(n, 0.0, 1.0));
        let mut ln = Fused::new(NormKind::LayerNorm, rows, d);
        let mut rms = Fused::new(NormKind::RmsNorm, rows, d);
        let gamma = vec![1.0f32; d];
        let mut unfused = Unfused::new(n, rows);
        let (mut uy, mut udx) = (vec![0.0f32; n], vec![0.0f32; n]);
        let mut out = Vec::new();
        for pass in [Pass::Forward, Pass::ForwardBackward] {
            let rounds_of = {
                let mut a = || ln.run(pass, d, &x, &dy);
                let mut b = || rms.run(pass, d, &x, &dy);
                let mut c = || {
                    unfused.forward(d, &x, &gamma, &mut uy);
                    if pass == Pass::ForwardBackward {
                        unfused.backward(d, &x, &dy, &gamma, &mut udx);
                    }
                };
                compare::interleaved(
                    &mut [
                        ("layernorm", &mut a),
                        ("rmsnorm", &mut b),
                        ("unfused rmsnorm", &mut c),
                    ],
                    rounds,
                    secs,
                )
            };
            out.push(KernelPoint {
                rows,
                d,
                threads,
                pass,
                layernorm_us: rounds_of.median(0) * 1e6,
                rmsnorm_us: rounds_of.median(1) * 1e6,
                unfused_rmsnorm_us: rounds_of.median(2) * 1e6,
                rms_vs_ln: rounds_of.ratio(0, 1),
                ln_vs_unfused_rms: rounds_of.ratio(2, 0),
            });
        }
        std::hint::black_box((&uy, &udx, &ln.y, &rms.y));
        out
    })
}
