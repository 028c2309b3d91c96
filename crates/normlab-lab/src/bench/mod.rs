//! Benchmarks of the norm kernels with a copy-bandwidth roofline measured in
//! the same run. Timings are medians of repeated runs over buffers that are
//! allocated and touched before timing starts (no page faults are timed).
//!
//! Effective bandwidth counts the bytes a fused kernel must move:
//! forward reads x and writes y (8 bytes per element in f32, 4 in bf16 or
//! f16); forward+backward also reads x and dy and writes dx (20 bytes in
//! all in f32, 10 in 16 bits). The roofline is the bandwidth of a parallel
//! copy (read + write; the better of memcpy and a streaming-store copy) at
//! the same memory footprint and thread count: the bytes of x for forward
//! (x -> y), of x and dy for forward+backward (x, dy, y, dx).

pub mod compare;
pub mod timing;
pub mod train;

pub use timing::{copy_roofline_gbps, median, range, time_median};
pub use train::{
    forward_gflop, matmul_peak_gflops, run_train_bench, run_train_bench_interleaved,
    standard_train_configs, TrainBenchRecord,
};

use normlab::kernels::buf::AlignedBuf;
use normlab::kernels::half16::{bf16, f16};
use normlab::kernels::norm::{self, NormKind};
use normlab::kernels::rng::Rng;
use normlab::kernels::simd::Elem;
use normlab::precision::Dtype;
use serde::Serialize;

/// Which passes a record timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pass {
    /// Forward only.
    Forward,
    /// Forward then backward.
    ForwardBackward,
}

impl Pass {
    /// Short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Pass::Forward => "fwd",
            Pass::ForwardBackward => "fwd+bwd",
        }
    }

    /// Bytes per element a fused implementation moves with `size`-byte
    /// storage.
    pub fn bytes_per_elem(self, size: usize) -> usize {
        match self {
            Pass::Forward => 2 * size,
            Pass::ForwardBackward => 5 * size,
        }
    }
}

/// One measured (kind, pass, shape, threads) point.
#[derive(Clone, Debug, Serialize)]
pub struct NormBenchRecord {
    /// Norm kind name.
    pub kind: String,
    /// Storage type of x, y, dy, dx (`f32`, `bf16`, `f16`).
    pub dtype: Dtype,
    /// `forward` or `forward_backward`.
    pub pass: Pass,
    /// Rows (tokens).
    pub rows: usize,
    /// Feature size.
    pub d: usize,
    /// Threads in the pool.
    pub threads: usize,
    /// Median wall time of one call (microseconds).
    pub median_us: f64,
    /// Effective bandwidth: bytes moved / median time (GB/s, 1e9).
    pub gbps: f64,
    /// Copy bandwidth at the same size and thread count (GB/s).
    pub roofline_gbps: f64,
    /// gbps / roofline_gbps.
    pub roofline_fraction: f64,
    /// Repetitions timed.
    pub reps: usize,
    /// Each round's median (us), in order (one with `rounds` 1).
    pub round_us: Vec<f64>,
}

/// Settings of a norm benchmark run.
#[derive(Clone, Debug)]
pub struct NormBenchConfig {
    /// Kinds to time.
    pub kinds: Vec<NormKind>,
    /// Storage types to time (each point in every type, one after another).
    pub dtypes: Vec<Dtype>,
    /// Shapes (rows, d).
    pub shapes: Vec<(usize, usize)>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Target seconds of timed repetitions per point.
    pub target_seconds: f64,
    /// Minimum repetitions per point (per round).
    pub min_reps: usize,
    /// Rounds: each point is timed once per round, every kind and storage
    /// type in turn (A and B interleaved, so a machine's slow minutes fall
    /// on all of them), for `target_seconds / rounds` each; `median_us` is
    /// the median of the rounds' medians.
    pub rounds: usize,
}

impl NormBenchConfig {
    /// The shapes of the kernels issue, with 1 thread and all threads.
    pub fn standard() -> NormBenchConfig {
        let all = rayon::current_num_threads().max(1);
        let mut threads = vec![1];
        if all > 1 {
            threads.push(all);
        }
        NormBenchConfig {
            kinds: vec![NormKind::LayerNorm, NormKind::RmsNorm, NormKind::ZRmsNorm],
            dtypes: vec![Dtype::F32],
            shapes: vec![
                (512, 64),
                (8192, 256),
                (8192, 768),
                (8192, 1024),
                (2048, 4096),
                (256, 8192),
            ],
            threads,
            target_seconds: 0.3,
            min_reps: 11,
            rounds: 1,
        }
    }
}

impl NormBenchConfig {
    /// Refuse shapes this machine cannot hold (x, y, dy, dx, the copy
    /// buffers: about 6 floats per element) and bad thread counts.
    pub fn check(&self) -> normlab::Result<()> {
        for &(rows, d) in &self.shapes {
            normlab::limits::check_memory(
                normlab::limits::f32_bytes(6.0 * rows as f64 * d as f64),
                &format!("bench shape {rows}x{d}"),
            )?;
        }
        for &t in &self.threads {
            normlab::limits::check_threads("--threads", t)?;
        }
        Ok(())
    }
}

/// The buffers of one shape in one storage type (f32, bf16, f16), 64-byte
/// aligned so the kernels stream their output the same way in each.
struct Bufs<T> {
    x: AlignedBuf,
    dy: AlignedBuf,
    y: AlignedBuf,
    dx: AlignedBuf,
    n: usize,
    t: std::marker::PhantomData<T>,
}

impl<T: Elem> Bufs<T> {
    fn from(x: &[f32], dy: &[f32]) -> Bufs<T> {
        let n = x.len();
        let round = |v: &[f32]| {
            let mut b = AlignedBuf::zeros((n * std::mem::size_of::<T>()).div_ceil(4));
            T::narrow(v, b.as_elems_mut(n));
            b
        };
        Bufs {
            x: round(x),
            dy: round(dy),
            y: round(x),
            dx: round(dy),
            n,
            t: std::marker::PhantomData,
        }
    }
}

/// The state one timed point works on: parameters, their gradients,
/// statistics and backward scratch.
struct Work {
    kind: NormKind,
    d: usize,
    eps: f32,
    params: Vec<f32>,
    dparams: Vec<f32>,
    stats: Vec<f32>,
    scratch: Vec<f32>,
}

impl Work {
    /// One forward (and backward) call on the buffers of one storage type.
    fn run<T: Elem>(&mut self, b: &mut Bufs<T>, pass: Pass) {
        let (kind, d, n) = (self.kind, self.d, b.n);
        let (x, dy) = (b.x.as_elems::<T>(n), b.dy.as_elems::<T>(n));
        let y = b.y.as_elems_mut::<T>(n);
        norm::forward(kind, d, self.eps, x, &self.params, y, &mut self.stats);
        if pass == Pass::ForwardBackward {
            let dx = b.dx.as_elems_mut::<T>(n);
            norm::backward(
                kind,
                d,
                x,
                dy,
                &self.params,
                &self.stats,
                dx,
                &mut self.dparams,
                &mut self.scratch,
            );
        }
    }
}

/// Run the benchmark; `progress` is called after each record.
pub fn run_norm_bench(
    cfg: &NormBenchConfig,
    mut progress: impl FnMut(&NormBenchRecord),
) -> Vec<NormBenchRecord> {
    let mut out = Vec::new();
    let size = |t: Dtype| if t == Dtype::F32 { 4 } else { 2 };
    for &threads in &cfg.threads {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("thread pool");
        for &(rows, d) in &cfg.shapes {
            let n = rows * d;
            // Rooflines at the same memory footprint, per storage size:
            // forward touches x and y (a copy of x's bytes); forward+backward
            // touches x, y, dy and dx (a copy of x's and dy's bytes).
            let mut roofs = Vec::new();
            for &t in &cfg.dtypes {
                let floats = n * size(t) / 4;
                if !roofs.iter().any(|(s, _, _)| *s == size(t)) {
                    let f = pool
                        .install(|| copy_roofline_gbps(floats, cfg.target_seconds, cfg.min_reps));
                    let fb = pool.install(|| {
                        copy_roofline_gbps(2 * floats, cfg.target_seconds, cfg.min_reps)
                    });
                    roofs.push((size(t), f, fb));
                }
            }
            let mut rng = Rng::new(1);
            let xs = rng.normal_vec(n, 0.5, 2.0);
            let dys = rng.normal_vec(n, 0.0, 1.0);
            let has = |t| cfg.dtypes.contains(&t);
            let mut b32 = has(Dtype::F32).then(|| Bufs::<f32>::from(&xs, &dys));
            let mut b16 = has(Dtype::Bf16).then(|| Bufs::<bf16>::from(&xs, &dys));
            let mut h16 = has(Dtype::F16).then(|| Bufs::<f16>::from(&xs, &dys));
            let mut works: Vec<Work> = cfg
                .kinds
                .iter()
                .map(|&kind| {
                    let mut params = vec![0.0; kind.num_params(d)];
                    kind.init_params(d, &mut params);
                    Work {
                        kind,
                        d,
                        eps: kind.default_eps(),
                        dparams: vec![0.0; params.len()],
                        params,
                        stats: vec![0.0f32; norm::stats_len(rows)],
                        scratch: vec![0.0; norm::backward_scratch_len(kind, rows, d)],
                    }
                })
                .collect();
            let passes = [Pass::Forward, Pass::ForwardBackward];
            let points: Vec<(usize, Pass, Dtype)> = (0..works.len())
                .flat_map(|k| passes.into_iter().map(move |p| (k, p)))
                .flat_map(|(k, p)| cfg.dtypes.iter().map(move |&t| (k, p, t)))
                .collect();
            let rounds = cfg.rounds.max(1);
            let mut timed: Vec<(Vec<f64>, usize)> = vec![(Vec::new(), 0); points.len()];
            for _ in 0..rounds {
                for (i, &(k, pass, dtype)) in points.iter().enumerate() {
                    let w = &mut works[k];
                    let (t, reps) = pool.install(|| {
                        time_median(
                            || match dtype {
                                Dtype::F32 => w.run(b32.as_mut().expect("f32 buffers"), pass),
                                Dtype::Bf16 => w.run(b16.as_mut().expect("bf16 buffers"), pass),
                                Dtype::F16 => w.run(h16.as_mut().expect("f16 buffers"), pass),
                            },
                            cfg.target_seconds / rounds as f64,
                            cfg.min_reps,
                        )
                    });
                    timed[i].0.push(t);
                    timed[i].1 += reps;
                }
            }
            for (&(k, pass, dtype), (ts, reps)) in points.iter().zip(timed) {
                let t = median(&mut ts.clone());
                let gbps = (n * pass.bytes_per_elem(size(dtype))) as f64 / t / 1e9;
                let (_, rf, rfb) = roofs
                    .iter()
                    .find(|(s, _, _)| *s == size(dtype))
                    .copied()
                    .expect("roofline measured");
                let roof = if pass == Pass::Forward { rf } else { rfb };
                let rec = NormBenchRecord {
                    kind: works[k].kind.name().to_string(),
                    dtype,
                    pass,
                    rows,
                    d,
                    threads,
                    median_us: t * 1e6,
                    gbps,
                    roofline_gbps: roof,
                    roofline_fraction: gbps / roof,
                    reps,
                    round_us: ts.iter().map(|t| t * 1e6).collect(),
                };
                progress(&rec);
                out.push(rec);
            }
            std::hint::black_box((&b32, &b16, &h16));
        }
    }
    out
}
