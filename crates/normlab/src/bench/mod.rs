//! Benchmarks of the norm kernels with a copy-bandwidth roofline measured in
//! the same run. Timings are medians of repeated runs over buffers that are
//! allocated and touched before timing starts (no page faults are timed).
//!
//! Effective bandwidth counts the bytes a fused kernel must move:
//! forward reads x and writes y (8 bytes per element);
//! forward+backward also reads x and dy and writes dx (20 bytes in all).
//! The roofline is the bandwidth of a parallel copy (read + write; the
//! better of memcpy and a streaming-store copy) at the same memory footprint
//! and thread count: n floats for forward (x -> y), 2n floats for
//! forward+backward (x, dy, y, dx).

pub mod compare;

use crate::error::Result;
use crate::kernels::buf::AlignedBuf;
use crate::kernels::norm::{self, NormKind};
use crate::kernels::rng::Rng;
use crate::kernels::simd;
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

    /// Bytes per element a fused implementation moves.
    pub fn bytes_per_elem(self) -> usize {
        match self {
            Pass::Forward => 8,
            Pass::ForwardBackward => 20,
        }
    }
}

/// One measured (kind, pass, shape, threads) point.
#[derive(Clone, Debug, Serialize)]
pub struct NormBenchRecord {
    /// Norm kind name.
    pub kind: String,
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
}

/// Settings of a norm benchmark run.
#[derive(Clone, Debug)]
pub struct NormBenchConfig {
    /// Kinds to time.
    pub kinds: Vec<NormKind>,
    /// Shapes (rows, d).
    pub shapes: Vec<(usize, usize)>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Target seconds of timed repetitions per point.
    pub target_seconds: f64,
    /// Minimum repetitions per point.
    pub min_reps: usize,
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
        }
    }
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
                    let full = d.len() - d.len() % simd::LANES;
                    for j in (0..full).step_by(simd::LANES) {
                        simd::stream_block(&mut d[j..], s[j..j + simd::LANES].try_into().unwrap());
                    }
                    d[full..].copy_from_slice(&s[full..]);
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

/// Run the benchmark; `progress` is called after each record.
pub fn run_norm_bench(
    cfg: &NormBenchConfig,
    mut progress: impl FnMut(&NormBenchRecord),
) -> Vec<NormBenchRecord> {
    let mut out = Vec::new();
    for &threads in &cfg.threads {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("thread pool");
        for &(rows, d) in &cfg.shapes {
            let n = rows * d;
            // Rooflines at the same memory footprint: forward touches x and y
            // (a copy of n floats); forward+backward touches x, y, dy and dx
            // (a copy of 2n floats).
            let roof_fwd = pool.install(|| copy_roofline_gbps(n, cfg.target_seconds, cfg.min_reps));
            let roof_fwd_bwd =
                pool.install(|| copy_roofline_gbps(2 * n, cfg.target_seconds, cfg.min_reps));
            let mut rng = Rng::new(1);
            let x = AlignedBuf::from_slice(&rng.normal_vec(n, 0.5, 2.0));
            let dy = AlignedBuf::from_slice(&rng.normal_vec(n, 0.0, 1.0));
            let mut y = AlignedBuf::from_slice(&vec![0.5f32; n]);
            let mut dx = AlignedBuf::from_slice(&vec![0.5f32; n]);
            let mut stats = vec![0.0f32; norm::stats_len(rows)];
            for &kind in &cfg.kinds {
                let eps = kind.default_eps();
                let mut params = vec![0.0; kind.num_params(d)];
                kind.init_params(d, &mut params);
                let mut dparams = vec![0.0; params.len()];
                let mut scratch = vec![0.0; norm::backward_scratch_len(kind, rows, d)];
                for pass in [Pass::Forward, Pass::ForwardBackward] {
                    let (t, reps) = pool.install(|| {
                        time_median(
                            || {
                                norm::forward(kind, d, eps, &x, &params, &mut y, &mut stats);
                                if pass == Pass::ForwardBackward {
                                    norm::backward(
                                        kind,
                                        d,
                                        &x,
                                        &dy,
                                        &params,
                                        &stats,
                                        &mut dx,
                                        &mut dparams,
                                        &mut scratch,
                                    );
                                }
                            },
                            cfg.target_seconds,
                            cfg.min_reps,
                        )
                    });
                    let gbps = (n * pass.bytes_per_elem()) as f64 / t / 1e9;
                    let roof = if pass == Pass::Forward {
                        roof_fwd
                    } else {
                        roof_fwd_bwd
                    };
                    let rec = NormBenchRecord {
                        kind: kind.name().to_string(),
                        pass,
                        rows,
                        d,
                        threads,
                        median_us: t * 1e6,
                        gbps,
                        roofline_gbps: roof,
                        roofline_fraction: gbps / roof,
                        reps,
                    };
                    progress(&rec);
                    out.push(rec);
                }
            }
            std::hint::black_box((&*y, &*dx));
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
    /// Steps timed.
    pub steps: usize,
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

/// Time `steps` optimisation steps (after 2 warm-up steps) of `cfg` with
/// `threads` threads; median step time.
pub fn run_train_bench(
    cfg: &crate::train::TrainConfig,
    threads: usize,
    steps: usize,
) -> Result<TrainBenchRecord> {
    let mut tr = crate::train::Trainer::new(cfg, threads)?;
    for _ in 0..2 {
        tr.train_step(false);
    }
    let mut times = Vec::with_capacity(steps);
    for _ in 0..steps {
        let t0 = Instant::now();
        let (_, diverged) = tr.train_step(false);
        times.push(t0.elapsed().as_secs_f64());
        if diverged {
            return Err("the benchmark run diverged".into());
        }
    }
    let t = median(&mut times);
    let gflop = 3.0 * forward_gflop(&cfg.model, cfg.batch);
    let peak = matmul_peak_gflops(threads, 0.3);
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
