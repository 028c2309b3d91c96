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
    /// depth-sim: LayerNorm Scaling (pre-norm output of sublayer l times 1/sqrt(l)).
    pub lns: Option<bool>,
    /// depth-sim: DyT in the pre-norm's place.
    pub dyt: Option<bool>,
    /// depth-sim: ReZero's zero branch gate.
    pub rezero: Option<bool>,
    /// depth-sim: a LayerScale branch gate with this init.
    pub layerscale: Option<f64>,
    /// Model family (placements).
    pub model: Option<ModelKind>,
    /// Existing run folders to use instead of training (convert).
    pub runs: Option<Vec<PathBuf>>,
    /// Calibration steps (convert).
    pub calibrate: Option<usize>,
    /// A pretrained BERT folder to convert too (convert).
    pub bert: Option<PathBuf>,
    /// Weight initialisations (collapse).
    pub inits: Option<Vec<crate::model::InitScheme>>,
    /// Set by a signal handler: training stops after the current step of
    /// every run, with a checkpoint (not a flag).
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// A flag an experiment may take (besides --quick, --out and --json).
/// Each experiment lists the flags it takes in its registry row; any other
/// flag is refused, never silently ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpFlag {
    /// --seeds N
    Seeds,
    /// --seed S
    Seed,
    /// --steps N
    Steps,
    /// --jobs N
    Jobs,
    /// --threads T,T
    Threads,
    /// --layers L,L
    Layers,
    /// --norms K,K
    Norms,
    /// --placements P,P
    Placements,
    /// --lrs LR,LR
    Lrs,
    /// --warmups W,W
    Warmups,
    /// --scales S,S
    Scales,
    /// --d-model D
    DModel,
    /// --rows R
    Rows,
    /// --sublayers N
    Sublayers,
    /// --gain G
    Gain,
    /// --residual / --no-residual
    Residual,
    /// --pre-norm
    PreNorm,
    /// --scale-writeback
    ScaleWriteback,
    /// --lns (LayerNorm Scaling in the depth simulator)
    Lns,
    /// --dyt (DyT as the depth simulator's pre-norm)
    Dyt,
    /// --rezero (a zero branch gate in the depth simulator)
    Rezero,
    /// --layerscale INIT (a LayerScale branch gate in the depth simulator)
    Layerscale,
    /// --model toy|gpt
    Model,
    /// --runs DIR,DIR
    Runs,
    /// --calibrate STEPS
    Calibrate,
    /// --bert DIR
    Bert,
    /// --inits gpt2,torch
    Inits,
}

impl ExpFlag {
    /// Every flag.
    pub const ALL: [ExpFlag; 27] = [
        ExpFlag::Seeds,
        ExpFlag::Seed,
        ExpFlag::Steps,
        ExpFlag::Jobs,
        ExpFlag::Threads,
        ExpFlag::Layers,
        ExpFlag::Norms,
        ExpFlag::Placements,
        ExpFlag::Lrs,
        ExpFlag::Warmups,
        ExpFlag::Scales,
        ExpFlag::DModel,
        ExpFlag::Rows,
        ExpFlag::Sublayers,
        ExpFlag::Gain,
        ExpFlag::Residual,
        ExpFlag::PreNorm,
        ExpFlag::ScaleWriteback,
        ExpFlag::Lns,
        ExpFlag::Dyt,
        ExpFlag::Rezero,
        ExpFlag::Layerscale,
        ExpFlag::Model,
        ExpFlag::Runs,
        ExpFlag::Calibrate,
        ExpFlag::Bert,
        ExpFlag::Inits,
    ];

    /// The flag's name (without `--`).
    pub fn name(self) -> &'static str {
        match self {
            ExpFlag::Seeds => "seeds",
            ExpFlag::Seed => "seed",
            ExpFlag::Steps => "steps",
            ExpFlag::Jobs => "jobs",
            ExpFlag::Threads => "threads",
            ExpFlag::Layers => "layers",
            ExpFlag::Norms => "norms",
            ExpFlag::Placements => "placements",
            ExpFlag::Lrs => "lrs",
            ExpFlag::Warmups => "warmups",
            ExpFlag::Scales => "scales",
            ExpFlag::DModel => "d-model",
            ExpFlag::Rows => "rows",
            ExpFlag::Sublayers => "sublayers",
            ExpFlag::Gain => "gain",
            ExpFlag::Residual => "residual",
            ExpFlag::PreNorm => "pre-norm",
            ExpFlag::ScaleWriteback => "scale-writeback",
            ExpFlag::Lns => "lns",
            ExpFlag::Dyt => "dyt",
            ExpFlag::Rezero => "rezero",
            ExpFlag::Layerscale => "layerscale",
            ExpFlag::Model => "model",
            ExpFlag::Runs => "runs",
            ExpFlag::Calibrate => "calibrate",
            ExpFlag::Bert => "bert",
            ExpFlag::Inits => "inits",
        }
    }

    /// A small example value (None for switches and for paths, which a
    /// caller must supply): what the tests pass to check that every
    /// documented flag is accepted.
    pub fn example(self) -> Option<&'static str> {
        match self {
            ExpFlag::Seeds => Some("1"),
            ExpFlag::Seed => Some("0"),
            ExpFlag::Steps => Some("10"),
            ExpFlag::Jobs => Some("1"),
            ExpFlag::Threads => Some("1"),
            ExpFlag::Layers => Some("2"),
            ExpFlag::Norms => Some("layernorm"),
            ExpFlag::Placements => Some("pre"),
            ExpFlag::Lrs => Some("0.001"),
            ExpFlag::Warmups => Some("0"),
            ExpFlag::Scales => Some("0.3"),
            ExpFlag::DModel => Some("16"),
            ExpFlag::Rows => Some("8"),
            ExpFlag::Sublayers => Some("4"),
            ExpFlag::Gain => Some("1"),
            ExpFlag::Model => Some("toy"),
            ExpFlag::Calibrate => Some("5"),
            ExpFlag::Inits => Some("torch"),
            ExpFlag::Layerscale => Some("0.0001"),
            ExpFlag::Residual
            | ExpFlag::PreNorm
            | ExpFlag::ScaleWriteback
            | ExpFlag::Lns
            | ExpFlag::Dyt
            | ExpFlag::Rezero
            | ExpFlag::Runs
            | ExpFlag::Bert => None,
        }
    }

    /// Whether `a` sets this flag.
    pub fn is_set(self, a: &ExpArgs) -> bool {
        match self {
            ExpFlag::Seeds => a.seeds.is_some(),
            ExpFlag::Seed => a.seed.is_some(),
            ExpFlag::Steps => a.steps.is_some(),
            ExpFlag::Jobs => a.jobs.is_some(),
            ExpFlag::Threads => a.threads.is_some(),
            ExpFlag::Layers => a.layers.is_some(),
            ExpFlag::Norms => a.norms.is_some(),
            ExpFlag::Placements => a.placements.is_some(),
            ExpFlag::Lrs => a.lrs.is_some(),
            ExpFlag::Warmups => a.warmups.is_some(),
            ExpFlag::Scales => a.scales.is_some(),
            ExpFlag::DModel => a.d_model.is_some(),
            ExpFlag::Rows => a.rows.is_some(),
            ExpFlag::Sublayers => a.sublayers.is_some(),
            ExpFlag::Gain => a.gain.is_some(),
            ExpFlag::Residual => a.residual.is_some(),
            ExpFlag::PreNorm => a.pre_norm.is_some(),
            ExpFlag::ScaleWriteback => a.scale_writeback.is_some(),
            ExpFlag::Lns => a.lns.is_some(),
            ExpFlag::Dyt => a.dyt.is_some(),
            ExpFlag::Rezero => a.rezero.is_some(),
            ExpFlag::Layerscale => a.layerscale.is_some(),
            ExpFlag::Model => a.model.is_some(),
            ExpFlag::Runs => a.runs.is_some(),
            ExpFlag::Calibrate => a.calibrate.is_some(),
            ExpFlag::Bert => a.bert.is_some(),
            ExpFlag::Inits => a.inits.is_some(),
        }
    }
}

/// The flags every training experiment takes (its grid and how it runs).
pub const GRID_FLAGS: [ExpFlag; 4] = [ExpFlag::Steps, ExpFlag::Seeds, ExpFlag::Seed, ExpFlag::Jobs];

impl ExpArgs {
    /// Error if a flag is given that experiment `id` (taking `allowed`)
    /// does not use, or a value is out of range.
    pub fn check(&self, id: &str, allowed: &[ExpFlag]) -> Result<()> {
        for flag in ExpFlag::ALL {
            if flag.is_set(self) && !allowed.contains(&flag) {
                return Err(format!(
                    "exp {id} does not take --{} (it takes: {})",
                    flag.name(),
                    allowed
                        .iter()
                        .map(|f| format!("--{}", f.name()))
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
        if let Some(j) = self.jobs {
            crate::limits::check_threads("--jobs", j)?;
        }
        for &t in self.threads.iter().flatten() {
            crate::limits::check_threads("--threads", t)?;
        }
        if let Some(&l) = self
            .layers
            .iter()
            .flatten()
            .find(|&&l| l == 0 || l > 10_000)
        {
            return Err(format!("--layers must be in 1..=10000 (got {l})").into());
        }
        if let Some(n) = self.seeds.filter(|&n| n > 1000) {
            return Err(format!("--seeds must be at most 1000 (got {n})").into());
        }
        if let Some(n) = self.calibrate.filter(|&n| n > 1_000_000) {
            return Err(format!("--calibrate must be at most 1000000 steps (got {n})").into());
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

    /// `--steps`, or the quick or full default.
    pub fn steps_or(&self, quick: usize, full: usize) -> usize {
        self.steps.unwrap_or(if self.quick { quick } else { full })
    }

    /// The seeds: `--seeds` of them from `--seed`, or the quick or full
    /// default count from seed 0.
    pub fn seeds_or(&self, quick: usize, full: usize) -> Vec<u64> {
        self.seed_list(if self.quick { quick } else { full })
    }

    /// The first of `--lrs`, or `default` (experiments with one learning rate).
    pub fn lr_or(&self, default: f32) -> f32 {
        self.lrs
            .as_ref()
            .and_then(|l| l.first().copied())
            .unwrap_or(default)
    }

    /// The first of `--layers`, if given (experiments with one depth).
    pub fn first_layers(&self) -> Option<usize> {
        self.layers.as_ref().and_then(|l| l.first().copied())
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
