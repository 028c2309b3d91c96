//! `bench train`: the speed of whole training steps (toy net and GPT) next
//! to a matmul peak measured in the same run, and the matmul work of a
//! configuration (what sweeps and the book's estimates count).

use super::timing::{median, range, time_median};
use normlab::error::Result;
use rayon::prelude::*;
use serde::Serialize;
use std::time::Instant;

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
pub fn forward_gflop(cfg: &normlab::model::ModelConfig, batch: usize) -> f64 {
    let t = (batch * cfg.seq) as f64;
    let (d, h, v, l) = (
        cfg.d_model as f64,
        cfg.hidden as f64,
        cfg.vocab as f64,
        cfg.layers as f64,
    );
    let mlp = if cfg.act.gated() {
        2.0 * t * d * 2.0 * h + 2.0 * t * h * d
    } else {
        2.0 * t * d * h * 2.0
    };
    let mix = match cfg.kind {
        normlab::model::ModelKind::Toy => 2.0 * t * d * d,
        normlab::model::ModelKind::Gpt => {
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
                    use normlab::kernels::matmul::{gemm, Mat};
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
    cfg: &normlab::train::TrainConfig,
    threads: usize,
    steps: usize,
    rounds: usize,
) -> Result<TrainBenchRecord> {
    let mut recs = run_train_bench_interleaved(std::slice::from_ref(cfg), threads, steps, rounds)?;
    Ok(recs.remove(0))
}

/// [`run_train_bench`] for several configurations compared A/B: in each
/// round every configuration times its `steps` steps in turn, then the
/// matmul peak is measured once, so that a ratio of step times can be
/// taken round by round (`round_ms`) on the same machine state.
pub fn run_train_bench_interleaved(
    cfgs: &[normlab::train::TrainConfig],
    threads: usize,
    steps: usize,
    rounds: usize,
) -> Result<Vec<TrainBenchRecord>> {
    if steps == 0 || rounds == 0 {
        return Err("the train benchmark needs at least one step and one round".into());
    }
    let mut trainers = Vec::with_capacity(cfgs.len());
    for cfg in cfgs {
        let mut tr = normlab::train::Trainer::new(cfg, threads)?;
        for _ in 0..2 {
            tr.train_step(false);
        }
        trainers.push(tr);
    }
    let mut round_t = vec![Vec::with_capacity(rounds); cfgs.len()];
    let mut round_peak = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        for (tr, rt) in trainers.iter_mut().zip(round_t.iter_mut()) {
            let mut times = Vec::with_capacity(steps);
            for _ in 0..steps {
                let t0 = Instant::now();
                let (_, diverged) = tr.train_step(false);
                times.push(t0.elapsed().as_secs_f64());
                if diverged {
                    return Err("the benchmark run diverged".into());
                }
            }
            rt.push(median(&mut times));
        }
        round_peak.push(matmul_peak_gflops(threads, 0.3));
    }
    Ok(cfgs
        .iter()
        .zip(round_t)
        .map(|(cfg, rt)| record(cfg, threads, steps, rt, round_peak.clone()))
        .collect())
}

fn record(
    cfg: &normlab::train::TrainConfig,
    threads: usize,
    steps: usize,
    round_t: Vec<f64>,
    round_peak: Vec<f64>,
) -> TrainBenchRecord {
    let gflop = 3.0 * forward_gflop(&cfg.model, cfg.batch);
    let fractions: Vec<f64> = round_t
        .iter()
        .zip(&round_peak)
        .map(|(t, p)| gflop / t / p)
        .collect();
    let t = median(&mut round_t.clone());
    let peak = median(&mut round_peak.clone());
    let gflops = gflop / t;
    let options = normlab::model::residual::label(&cfg.model);
    TrainBenchRecord {
        model: cfg.model.kind.to_string(),
        config: format!(
            "L{} d{} {} seq{} batch{} {} {}{options} {}",
            cfg.model.layers,
            cfg.model.d_model,
            if cfg.model.kind == normlab::model::ModelKind::Gpt {
                format!("heads{}", cfg.model.heads)
            } else {
                "mean-mixer".into()
            },
            cfg.model.seq,
            cfg.batch,
            cfg.model.norm,
            cfg.model.placement,
            cfg.model.act.name()
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
    }
}

/// The two configurations of the engine issue's benchmark: toy L20 batch 32
/// and gpt d128 / 4 heads / L8 / seq 128 / batch 16 / MLP 4d GELU, pre-LN.
pub fn standard_train_configs() -> Vec<normlab::train::TrainConfig> {
    use normlab::model::ModelKind;
    use normlab::train::TrainConfig;
    let toy = TrainConfig::defaults(ModelKind::Toy).with(|c| {
        c.model.layers = 20;
        c.batch = 32;
    });
    vec![toy.expect("valid bench config"), standard_gpt()]
}

/// The benchmark GPT: d 128, 4 heads, 8 blocks, seq 128, batch 16, MLP 4d
/// GELU, pre-LN (also the speed experiment's model step).
pub fn standard_gpt() -> normlab::train::TrainConfig {
    use normlab::model::ModelKind;
    use normlab::train::TrainConfig;
    TrainConfig::defaults(ModelKind::Gpt)
        .with(|c| {
            c.model.layers = 8;
            c.model.d_model = 128;
            c.model.heads = 4;
            c.model.seq = 128;
            c.model.hidden = 512;
            c.batch = 16;
        })
        .expect("valid bench config")
}
