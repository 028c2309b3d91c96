//! Settings an experiment can take from the command line. Each field is
//! optional (None: the experiment's SPEC default); an experiment refuses a
//! flag it does not use rather than silently ignoring it.

use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::model::ModelKind;
use crate::nn::Placement;
use std::path::PathBuf;

/// Experiment settings (all optional).
#[derive(Clone, Debug, Default)]
pub struct ExpArgs {
    /// Reduced setting (seconds to a minute).
    pub quick: bool,
    /// Folder for outputs; training grids keep their runs in `<out>/runs`
    /// (an interrupted experiment resumes without redoing finished runs).
    pub out: Option<PathBuf>,
    /// Number of seeds.
    pub seeds: Option<usize>,
    /// First seed.
    pub seed: Option<u64>,
    /// Training steps per run.
    pub steps: Option<usize>,
    /// Runs in parallel (each single-threaded).
    pub jobs: Option<usize>,
    /// Threads (speed experiment).
    pub threads: Option<Vec<usize>>,
    /// Depths.
    pub layers: Option<Vec<usize>>,
    /// Norm kinds.
    pub norms: Option<Vec<NormKind>>,
    /// Placements.
    pub placements: Option<Vec<Placement>>,
    /// Learning rates.
    pub lrs: Option<Vec<f32>>,
    /// Warm-up lengths.
    pub warmups: Option<Vec<usize>>,
    /// Weight scales (drift).
    pub scales: Option<Vec<f32>>,
    /// Width.
    pub d_model: Option<usize>,
    /// Rows (batch of vectors).
    pub rows: Option<usize>,
    /// Sublayers (depth-sim).
    pub sublayers: Option<usize>,
    /// Init gain (depth-sim).
    pub gain: Option<f32>,
    /// Residual connections on/off (depth-sim).
    pub residual: Option<bool>,
    /// Pre-norm on/off (depth-sim).
    pub pre_norm: Option<bool>,
    /// Write-back scaling 1/sqrt(N) (depth-sim).
    pub scale_writeback: Option<bool>,
    /// Model family (placements).
    pub model: Option<ModelKind>,
    /// Existing run folders to use instead of training (convert).
    pub runs: Option<Vec<PathBuf>>,
    /// Calibration steps (convert).
    pub calibrate: Option<usize>,
    /// A pretrained BERT folder to convert too (convert).
    pub bert: Option<PathBuf>,
}

impl ExpArgs {
    /// Names of the flags that are set.
    pub fn given(&self) -> Vec<&'static str> {
        let mut g = Vec::new();
        macro_rules! chk {
            ($($f:ident => $name:expr),*) => {$(if self.$f.is_some() { g.push($name); })*};
        }
        chk!(seeds => "seeds", seed => "seed", steps => "steps", jobs => "jobs", threads => "threads", layers => "layers",
             norms => "norms", placements => "placements", lrs => "lrs", warmups => "warmups", scales => "scales",
             d_model => "d-model", rows => "rows", sublayers => "sublayers", gain => "gain", residual => "residual",
             pre_norm => "pre-norm", scale_writeback => "scale-writeback", model => "model", runs => "runs", calibrate => "calibrate", bert => "bert");
        g
    }

    /// The flags each experiment takes (besides --quick, --out, --json).
    pub fn allowed(id: &str) -> &'static [&'static str] {
        match id {
            "drift" => &["layers", "d-model", "scales", "rows", "seed"],
            "batch-dependence" | "norm-stats" => &["d-model", "rows", "seed"],
            "identity-path" => &["d-model", "rows", "seed", "layers"],
            "depth-sim" => &[
                "sublayers",
                "gain",
                "residual",
                "pre-norm",
                "scale-writeback",
                "d-model",
                "rows",
                "seed",
            ],
            "residual-growth" => &["d-model", "layers", "steps", "seeds", "seed", "jobs", "lrs"],
            "collapse" => &["layers", "norms", "lrs", "steps", "seeds", "seed", "jobs"],
            "lr-sensitivity" => &[
                "layers",
                "placements",
                "lrs",
                "warmups",
                "steps",
                "seeds",
                "seed",
                "jobs",
                "norms",
            ],
            "warmup" => &[
                "placements",
                "lrs",
                "warmups",
                "steps",
                "seeds",
                "seed",
                "jobs",
                "layers",
            ],
            "speed" => &["threads", "d-model", "layers", "rows"],
            "norm-kind" => &["norms", "steps", "seeds", "seed", "jobs", "layers", "lrs"],
            "gain-decay" => &["steps", "lrs", "seeds", "seed", "jobs"],
            "qk-norm" => &["lrs", "steps", "seeds", "seed", "jobs", "layers"],
            "placements" => &[
                "placements",
                "lrs",
                "layers",
                "steps",
                "seeds",
                "seed",
                "jobs",
                "model",
            ],
            _ => &[],
        }
    }

    /// Error if a flag is given that experiment `id` does not use.
    pub fn check_allowed(&self, id: &str) -> Result<()> {
        let ok = ExpArgs::allowed(id);
        for g in self.given() {
            if !ok.contains(&g) {
                return Err(format!(
                    "exp {id} does not take --{g} (it takes: {})",
                    ok.iter()
                        .map(|s| format!("--{s}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                )
                .into());
            }
        }
        if let Some(0) = self.seeds {
            return Err("--seeds must be at least 1".into());
        }
        if let Some(0) = self.steps {
            return Err("--steps must be at least 1".into());
        }
        if let Some(0) = self.jobs {
            return Err("--jobs must be at least 1".into());
        }
        if let Some(l) = &self.lrs {
            if l.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
                return Err("--lrs must be positive numbers".into());
            }
        }
        if let Some(n) = self.sublayers {
            if n == 0 || n > 100_000 {
                return Err(format!("--sublayers must be in 1..=100000 (got {n})").into());
            }
        }
        if let Some(g) = self.gain {
            if !(g.is_finite() && g >= 0.0) {
                return Err(format!("--gain must be a number >= 0 (got {g})").into());
            }
        }
        if let Some(d) = self.d_model {
            if d == 0 || d > 1 << 16 {
                return Err(format!("--d-model must be in 1..=65536 (got {d})").into());
            }
        }
        if let Some(r) = self.rows {
            if r == 0 || r > 1 << 20 {
                return Err(format!("--rows must be in 1..=1048576 (got {r})").into());
            }
        }
        Ok(())
    }

    /// `seeds` seeds starting at `seed`, with defaults.
    pub fn seed_list(&self, default_count: usize) -> Vec<u64> {
        let n = self.seeds.unwrap_or(default_count);
        let s0 = self.seed.unwrap_or(0);
        (0..n as u64).map(|i| s0 + i).collect()
    }

    /// Parallel runs (default: all cores).
    pub fn jobs(&self) -> usize {
        self.jobs.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
    }
}
