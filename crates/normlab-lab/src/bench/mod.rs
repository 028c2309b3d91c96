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

use crate::error::Result;
use crate::kernels::buf::AlignedBuf;
use crate::kernels::half16::{bf16, f16};
use crate::kernels::norm::{self, NormKind};
use crate::kernels::rng::Rng;
use crate::kernels::simd;
use crate::kernels::simd::Elem;
use crate::precision::Dtype;
use rayon::prelude::*;
use serde::Serialize;
use std::time::Instant;

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

/// The smallest and largest of `v` (per-round ratios and fractions, shown
/// as a range next to their median).
pub fn range(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

/// Median of a sample (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Time `f` repeatedly: one warm-up call, then at least `min_reps` calls and
/// about `target_seconds` in all. Returns (median seconds, reps).
pub fn time_median<F: FnMut()>(mut f: F, target_seconds: f64, min_reps: usize) -> (f64, usize) {
    let t0 = Instant::now();
    f();
    let first = t0.elapsed().as_secs_f64().max(1e-9);
    let reps = ((target_seconds / first) as usize).clamp(min_reps, 10_000);
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64());
    }
    (median(&mut times), reps)
}

/// Copy bandwidth (GB/s, read + write bytes / time) for `n` f32 elements
/// with the current rayon pool: the better of `copy_from_slice` (memcpy,
/// normal stores) and a copy with streaming stores, since each wins at
/// different footprints (see `simd::STREAM_MIN_BYTES`).
pub fn copy_roofline_gbps(n: usize, target_seconds: f64, min_reps: usize) -> f64 {
    let src = AlignedBuf::from_slice(&vec![1.0f32; n]);
    let mut dst = AlignedBuf::from_slice(&vec![0.5f32; n]);
    // Chunks of whole 16-float blocks so streaming chunks stay aligned.
    let chunk = ((64 * 1024).max(n.div_ceil(rayon::current_num_threads() * 4))).div_ceil(16) * 16;
    let (t_memcpy, _) = time_median(
        || {
            dst.par_chunks_mut(chunk)
                .zip(src.par_chunks(chunk))
                .for_each(|(d, s)| d.copy_from_slice(s));
        },
        target_seconds,
        min_reps,
    );
    let (t_stream, _) = time_median(
        || {
            dst.par_chunks_mut(chunk)
                .zip(src.par_chunks(chunk))
                .for_each(|(d, s)| {
                    simd::stream_copy(d, s);
                    simd::stream_fence();
                });
        },
        target_seconds,
        min_reps,
    );
    std::hint::black_box(&*dst);
    (2 * n * 4) as f64 / t_memcpy.min(t_stream) / 1e9
}

impl NormBenchConfig {
    /// Refuse shapes this machine cannot hold (x, y, dy, dx, the copy
    /// buffers: about 6 floats per element) and bad thread counts.
    pub fn check(&self) -> crate::Result<()> {
        for &(rows, d) in &self.shapes {
            crate::limits::check_memory(
                crate::limits::f32_bytes(6.0 * rows as f64 * d as f64),
                &format!("bench shape {rows}x{d}"),
            )?;
        }
        for &t in &self.threads {
            crate::limits::check_threads("--threads", t)?;
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

/// One `bench train` measurement.
#[derive(Clone, Debug, Serialize)]
pub struct TrainBenchRecord {
    /// toy or gpt.
    pub model: String,
    /// Short description of the configuration.
    pub config: String,
    /// Threads.
    pub threads: usize,
    /// Median milliseconds per optimisation step.
    pub ms_per_step: f64,
    /// 1000 / ms_per_step.
    pub steps_per_sec: f64,
    /// Tokens per second.
    pub tokens_per_sec: f64,
    /// Matmul FLOP per step (forward x 3).
    pub gflop_per_step: f64,
    /// Achieved GFLOP/s.
    pub gflops: f64,
    /// Matmul peak measured in the same run with the same threads.
    pub matmul_peak_gflops: f64,
    /// gflops / matmul_peak_gflops.
    pub peak_fraction: f64,
    /// Steps timed per round.
    pub steps: usize,
    /// Each round's median step time (ms); `ms_per_step` is their median.
    pub round_ms: Vec<f64>,
    /// Each round's matmul peak (GFLOP/s), measured right after its steps;
    /// `matmul_peak_gflops` is their median.
    pub round_peak_gflops: Vec<f64>,
    /// The smallest and largest per-round fraction of the peak (each
    /// round's GFLOP/s over its own peak).
    pub peak_fraction_range: (f64, f64),
}

/// Matmul FLOP of one forward pass of a model config on `batch` sequences
/// (backward is counted as twice the forward).
pub fn forward_gflop(cfg: &crate::model::ModelConfig, batch: usize) -> f64 {
    let t = (batch * cfg.seq) as f64;
    let (d, h, v, l) = (
        cfg.d_model as f64,
        cfg.hidden as f64,
        cfg.vocab as f64,
        cfg.layers as f64,
    );
    let mlp = match cfg.act {
        crate::nn::Activation::Gelu => 2.0 * t * d * h * 2.0,
        crate::nn::Activation::Swiglu => 2.0 * t * d * 2.0 * h + 2.0 * t * h * d,
    };
    let mix = match cfg.kind {
        crate::model::ModelKind::Toy => 2.0 * t * d * d,
        crate::model::ModelKind::Gpt => {
            let attn = 2.0 * 2.0 * t * cfg.seq as f64 * d; // q k^T and P v over all heads
            2.0 * t * d * 3.0 * d + attn + 2.0 * t * d * d
        }
    };
    (l * (mlp + mix) + 2.0 * t * d * v) / 1e9
}

/// Peak sgemm GFLOP/s with `threads` threads, each multiplying its own
/// 512x512 matrices (the shapes a well-blocked GEMM runs at full speed).
pub fn matmul_peak_gflops(threads: usize, target_seconds: f64) -> f64 {
    let n = 512;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    let a = vec![0.5f32; n * n];
    let b = vec![0.25f32; n * n];
    let mut cs: Vec<Vec<f32>> = (0..threads).map(|_| vec![0.0; n * n]).collect();
    let (t, _) = pool.install(|| {
        time_median(
            || {
                cs.par_iter_mut().for_each(|c| {
                    use crate::kernels::matmul::{gemm, Mat};
                    gemm(1.0, Mat::rows(&a, n, n), Mat::rows(&b, n, n), 0.0, c, n);
                })
            },
            target_seconds,
            7,
        )
    });
    threads as f64 * 2.0 * (n * n * n) as f64 / t / 1e9
}

/// Time `cfg`'s optimisation steps with `threads` threads in `rounds`
/// rounds (after 2 warm-up steps): each round times `steps` steps (their
/// median) and then measures the matmul peak, so that the step and the
/// peak it is compared with run minutes apart at most (A/B interleaved:
/// these VMs drift 10-40%). Reported: the medians over the rounds, and the
/// range of the per-round fractions of the peak.
pub fn run_train_bench(
    cfg: &crate::train::TrainConfig,
    threads: usize,
    steps: usize,
    rounds: usize,
) -> Result<TrainBenchRecord> {
    if steps == 0 || rounds == 0 {
        return Err("the train benchmark needs at least one step and one round".into());
    }
    let mut tr = crate::train::Trainer::new(cfg, threads)?;
    for _ in 0..2 {
        tr.train_step(false);
    }
    let gflop = 3.0 * forward_gflop(&cfg.model, cfg.batch);
    let (mut round_t, mut round_peak) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let mut times = Vec::with_capacity(steps);
        for _ in 0..steps {
            let t0 = Instant::now();
            let (_, diverged) = tr.train_step(false);
            times.push(t0.elapsed().as_secs_f64());
            if diverged {
                return Err("the benchmark run diverged".into());
            }
        }
        round_t.push(median(&mut times));
        round_peak.push(matmul_peak_gflops(threads, 0.3));
    }
    let fractions: Vec<f64> = round_t
        .iter()
        .zip(&round_peak)
        .map(|(t, p)| gflop / t / p)
        .collect();
    let t = median(&mut round_t.clone());
    let peak = median(&mut round_peak.clone());
    let gflops = gflop / t;
    Ok(TrainBenchRecord {
        model: cfg.model.kind.to_string(),
        config: format!(
            "L{} d{} {} seq{} batch{} {} {} {}",
            cfg.model.layers,
            cfg.model.d_model,
            if cfg.model.kind == crate::model::ModelKind::Gpt {
                format!("heads{}", cfg.model.heads)
            } else {
                "mean-mixer".into()
            },
            cfg.model.seq,
            cfg.batch,
            cfg.model.norm,
            cfg.model.placement,
            match cfg.model.act {
                crate::nn::Activation::Gelu => "gelu",
                crate::nn::Activation::Swiglu => "swiglu",
            }
        ),
        threads,
        ms_per_step: t * 1e3,
        steps_per_sec: 1.0 / t,
        tokens_per_sec: (cfg.batch * cfg.model.seq) as f64 / t,
        gflop_per_step: gflop,
        gflops,
        matmul_peak_gflops: peak,
        peak_fraction: gflops / peak,
        steps,
        round_ms: round_t.iter().map(|t| t * 1e3).collect(),
        round_peak_gflops: round_peak,
        peak_fraction_range: range(&fractions),
    })
}

/// The two configurations of the engine issue's benchmark: toy L20 batch 32
/// and gpt d128 / 4 heads / L8 / seq 128 / batch 16 / MLP 4d GELU, pre-LN.
pub fn standard_train_configs() -> Vec<crate::train::TrainConfig> {
    use serde_json::json;
    let toy = json!({"model": "toy", "layers": 20, "batch": 32});
    let gpt = json!({"model": "gpt", "layers": 8, "d_model": 128, "heads": 4, "seq": 128, "hidden": 512, "batch": 16});
    [toy, gpt]
        .iter()
        .map(|v| {
            crate::train::TrainConfig::from_overrides(v.as_object().unwrap())
                .expect("valid bench config")
        })
        .collect()
}
