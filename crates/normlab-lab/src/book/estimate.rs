//! The book's time estimate, calibrated on the machine it runs on
//! (`book --dry-run`): every distinct training shape of the book (model,
//! batch, precision: what a step's time depends on, not the seed, the
//! learning rate or the step count) trains a few steps here, `jobs` copies
//! side by side as the book runs them, and a run's time is its steps and
//! held-out evaluations at that measured speed. A chapter's wall time is
//! its runs scheduled as the sweep engine schedules them (longest first
//! onto `jobs` workers); the chapters run one after another.

use crate::sweep::{self, RunSpec};
use normlab::error::Result;
use normlab::train::{TrainConfig, Trainer};
use std::collections::HashMap;
use std::time::Instant;

/// The matmul rate the estimate assumes per core, everything else of a
/// step included: measured on the 2-core development VM on 2026-12-01
/// with the direct GEMM kernel, as the chapters' estimated core time at 70
/// GFLOP/s over their runs' actual core time: no-norm 1.96, depth-use
/// 1.75, placements 2.03, warmup 2.11, collapse + lr-sensitivity 1.89
/// (466 estimated against 237 actual core-minutes in all: 138 GFLOP/s).
/// Until then 70, measured on 2026-11-30 through matrixmultiply.
pub const GFLOPS_PER_CORE: f64 = 135.0;

/// Estimated cost of a run in units of one core-second.
pub(super) fn run_cost(s: &RunSpec) -> f64 {
    sweep::matmul_gflop(&s.cfg, s.cfg.steps) / GFLOPS_PER_CORE
}

/// Estimated cost of an experiment that trains nothing.
pub(super) const FIXED_COST: f64 = 5.0;

/// Steps timed per shape (after one warm-up step).
const TIMED_STEPS: usize = 2;

/// Measured step times.
#[derive(Debug, Default)]
pub struct Calibration {
    /// Seconds per training step of each shape, with `jobs` runs side by side.
    step: HashMap<String, f64>,
    /// Runs side by side while measuring (and in the estimate).
    pub jobs: usize,
    /// Time the calibration took (s).
    pub seconds: f64,
}

/// What a step's time depends on: the config without its seed, learning
/// rate schedule, step count and logging.
fn shape(cfg: &TrainConfig) -> String {
    let mut v = serde_json::to_value(cfg).expect("config json");
    if let Some(o) = v.as_object_mut() {
        for k in [
            "seed",
            "lr",
            "steps",
            "warmup",
            "schedule",
            "min_lr_frac",
            "eval_every",
            "eval_sequences",
            "log_every",
            "checkpoint_every",
        ] {
            o.remove(k);
        }
    }
    v.to_string()
}

/// Time every distinct shape of `specs`: `jobs` trainers of it, one
/// thread each, stepping side by side; the median step of the slowest.
pub fn calibrate(specs: &[&RunSpec], jobs: usize) -> Result<Calibration> {
    let t0 = Instant::now();
    let jobs = jobs.max(1);
    let mut first: Vec<(String, &TrainConfig)> = Vec::new();
    for s in specs {
        let k = shape(&s.cfg);
        if !first.iter().any(|(x, _)| *x == k) {
            first.push((k, &s.cfg));
        }
    }
    let mut step = HashMap::new();
    for (k, cfg) in &first {
        let times: Vec<Result<f64>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..jobs)
                .map(|_| {
                    sc.spawn(|| -> Result<f64> {
                        let mut tr = Trainer::new(cfg, 1)?;
                        tr.train_step(false);
                        let mut ts = Vec::with_capacity(TIMED_STEPS);
                        for _ in 0..TIMED_STEPS {
                            let t = Instant::now();
                            tr.train_step(false);
                            ts.push(t.elapsed().as_secs_f64());
                        }
                        Ok(crate::bench::timing::median(&mut ts))
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("calibration thread"))
                .collect()
        });
        let mut worst: f64 = 0.0;
        for t in times {
            worst = worst.max(t?);
        }
        step.insert(k.clone(), worst);
    }
    Ok(Calibration {
        step,
        jobs,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

impl Calibration {
    /// Distinct shapes measured.
    pub fn shapes(&self) -> usize {
        self.step.len()
    }

    /// Estimated seconds of run `s` (one worker): its steps, and its
    /// held-out evaluations (a forward pass is a third of a step's work,
    /// scaled from the batch to the evaluation's sequences).
    pub fn run_seconds(&self, s: &RunSpec) -> f64 {
        let c = &s.cfg;
        let Some(&t) = self.step.get(&shape(c)) else {
            return run_cost(s);
        };
        let evals = c.steps.checked_div(c.eval_every).map_or(1, |n| n + 1);
        let eval = t / 3.0 * c.eval_sequences as f64 / c.batch.max(1) as f64;
        c.steps as f64 * t + evals as f64 * eval
    }

    /// Wall time of a chapter's runs (those in `left`) on `jobs` workers,
    /// longest first, each to the worker that frees first (the sweep
    /// engine's order), plus the chapter's own work.
    pub fn chapter_wall(&self, left: &[&RunSpec]) -> f64 {
        let mut t: Vec<f64> = left.iter().map(|s| self.run_seconds(s)).collect();
        t.sort_by(|a, b| b.total_cmp(a));
        let mut workers = vec![0.0f64; self.jobs];
        for x in t {
            let w = workers
                .iter_mut()
                .min_by(|a, b| a.total_cmp(b))
                .expect("a worker");
            *w += x;
        }
        FIXED_COST + workers.into_iter().fold(0.0, f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_and_shapes() {
        let cfg = |steps: usize, seed: u64, layers: usize| {
            let mut c = crate::exp::runs::tiny_gpt();
            c.steps = steps;
            c.seed = seed;
            c.model.layers = layers;
            RunSpec {
                id: crate::sweep::run_id(&c),
                cfg: c,
            }
        };
        let (a, b, c) = (cfg(10, 0, 1), cfg(20, 1, 1), cfg(10, 0, 2));
        // The seed and the step count do not change the shape; depth does.
        assert_eq!(shape(&a.cfg), shape(&b.cfg));
        assert_ne!(shape(&a.cfg), shape(&c.cfg));
        let cal = calibrate(&[&a, &b, &c], 2).unwrap();
        assert_eq!(cal.shapes(), 2);
        // Twice the steps, about twice the time (the evaluations aside).
        let (ta, tb) = (cal.run_seconds(&a), cal.run_seconds(&b));
        assert!(tb > 1.5 * ta && tb < 2.5 * ta, "{ta} {tb}");
        // Two workers, longest first, each run to the worker that frees
        // first: the longest alone, the other two on the second worker.
        let mut t = [
            cal.run_seconds(&a),
            cal.run_seconds(&b),
            cal.run_seconds(&c),
        ];
        t.sort_by(|x, y| y.total_cmp(x));
        let wall = cal.chapter_wall(&[&a, &b, &c]) - FIXED_COST;
        assert!((wall - t[0].max(t[1] + t[2])).abs() < 1e-9, "{wall} {t:?}");
    }

    /// A chapter's training outside its grid (the cross-check's: its
    /// normlab runs side by side, the PyTorch side one after another)
    /// counts until the chapter is written.
    #[test]
    fn training_outside_the_grid_counts_until_written() {
        let out = std::env::temp_dir().join(format!("normlab-estimate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let opts = super::super::run::BookOptions {
            out: out.clone(),
            quick: true,
            only: Some(vec!["cross-check".into()]),
            ..Default::default()
        };
        let wall = |o| super::super::run::estimate(o, 2).unwrap().0[0].1;
        let hidden = (crate::exp::cross_train::hidden_training)(&crate::exp::args::ExpArgs {
            quick: true,
            ..Default::default()
        })
        .unwrap();
        assert!(!hidden.serial.is_empty() && hidden.serial.len() == hidden.parallel.len());
        let before = wall(&opts);
        assert!(before > FIXED_COST + 1.0, "{before}");
        std::fs::create_dir_all(out.join("cross-check")).unwrap();
        std::fs::write(out.join("cross-check/result.json"), "{}").unwrap();
        assert_eq!(wall(&opts), FIXED_COST);
        let _ = std::fs::remove_dir_all(&out);
    }
}
