//! Settings an experiment can take from the command line, each declared
//! once in [`exp_flags!`]: its field of [`ExpArgs`] (None: the
//! experiment's default), its [`ExpFlag`], its flag name, help text, value
//! shape and the example value the tests pass. The `normlab exp` command
//! line is built from that table, and every value is parsed by
//! [`ExpFlag::set`]; a new flag is one line of the table. An experiment
//! refuses a flag it does not use rather than silently ignoring it.

use normlab::error::{Error, Result};
use normlab::kernels::norm::NormKind;
use normlab::limits::check_count;
use normlab::model::residual::{ResidualOption, SimKnob, OPTIONS};
use normlab::model::{InitScheme, ModelKind};
use normlab::nn::Placement;
use normlab::settings::{Field, Flag};
use std::path::PathBuf;

/// How a flag is written on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagShape {
    /// `--name VALUE`.
    Value,
    /// `--name A,B,C` (a non-empty comma-separated list).
    List,
    /// `--name` alone sets it.
    Switch,
    /// `--name` sets it on, `--no-name` off.
    OnOff,
}

/// A value a flag's text parses into, with one-line errors that name it by
/// `label` (`--gain` on the command line, `gain` in the web lab's API).
pub trait FlagValue: Sized {
    /// Parse `text`, the value given to the flag called `label`.
    fn parse_flag(label: &str, text: &str) -> Result<Self>;
}

macro_rules! flag_value_by_from_str {
    ($($t:ty),*) => {$(
        impl FlagValue for $t {
            fn parse_flag(label: &str, text: &str) -> Result<Self> {
                text.trim()
                    .parse::<$t>()
                    .map_err(|e| Error::bad(format!("{label}: '{text}': {e}")))
            }
        }
    )*};
}
flag_value_by_from_str!(usize, u64, f32, f64, PathBuf, NormKind, Placement, ModelKind, InitScheme);

impl FlagValue for bool {
    fn parse_flag(label: &str, text: &str) -> Result<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "true" | "on" | "yes" | "1" => Ok(true),
            "false" | "off" | "no" | "0" => Ok(false),
            _ => Err(Error::bad(format!(
                "{label} must be true or false (got '{text}')"
            ))),
        }
    }
}

impl<T: FlagValue> FlagValue for Vec<T> {
    fn parse_flag(label: &str, text: &str) -> Result<Self> {
        let v = text
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| T::parse_flag(label, p))
            .collect::<Result<Vec<T>>>()?;
        if v.is_empty() {
            return Err(Error::bad(format!("{label} is empty")));
        }
        Ok(v)
    }
}

/// Declare the experiment flags: per flag its doc comment (the help text),
/// `Variant field: Type = "name", Shape, example`. Generates [`ExpArgs`]
/// and [`ExpFlag`] with its table methods.
macro_rules! exp_flags {
    ($(
        $(#[doc = $doc:literal])+
        $variant:ident $field:ident : $ty:ty = $name:literal, $shape:ident, $example:expr;
    )*) => {
        /// Experiment settings: `quick`, `out` and a stop flag, then every
        /// declared flag as an optional field (None: the default).
        #[derive(Clone, Debug, Default)]
        pub struct ExpArgs {
            /// Reduced setting (seconds to a minute).
            pub quick: bool,
            /// Folder for outputs; training grids keep their runs in
            /// `<out>/runs` (an interrupted experiment resumes without
            /// redoing finished runs).
            pub out: Option<PathBuf>,
            /// Set by a signal handler: training stops after the current
            /// step of every run, with a checkpoint (not a flag).
            pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
            /// depth-sim: the residual options given (index into
            /// `model::residual::OPTIONS`, setting), in `OPTIONS`' order.
            pub res_options: Vec<(usize, f64)>,
            $($(#[doc = $doc])+ pub $field: Option<$ty>,)*
        }

        /// A flag an experiment may take (besides --quick, --out and
        /// --json). Each experiment lists the flags it takes in its
        /// registry row; any other flag is refused, never silently ignored.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum ExpFlag {
            $($(#[doc = $doc])+ $variant,)*
            /// depth-sim: a residual option the simulator models (index
            /// into `model::residual::OPTIONS`): its flag is its name, its
            /// help and shape come from its declaration's `SimKnob`.
            ResOption(usize),
            /// In an experiment's flag list: every option of
            /// `model::residual::OPTIONS` that the simulator models, one
            /// [`ExpFlag::ResOption`] flag each (not a flag itself).
            ResOptions,
            /// In an experiment's flag list: the flags every training
            /// experiment's grid takes, [`GRID_FLAGS`] (not a flag itself).
            Grid,
        }

        impl ExpFlag {
            /// The declared flags, in declaration order.
            const DECLARED: &'static [ExpFlag] = &[$(ExpFlag::$variant),*];

            /// Every flag: the declared ones, then one per simulated
            /// residual option.
            pub fn all() -> Vec<ExpFlag> {
                Self::DECLARED.iter().copied().chain(Self::residual_flags()).collect()
            }

            /// One [`ExpFlag::ResOption`] per option the simulator models.
            fn residual_flags() -> impl Iterator<Item = ExpFlag> {
                OPTIONS
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| o.sim.is_some())
                    .map(|(i, _)| ExpFlag::ResOption(i))
            }

            /// An experiment's flag list with [`ExpFlag::ResOptions`] and
            /// [`ExpFlag::Grid`]
            /// replaced by the flags it stands for.
            pub fn expand(flags: &[ExpFlag]) -> Vec<ExpFlag> {
                flags
                    .iter()
                    .flat_map(|&f| match f {
                        ExpFlag::ResOptions => Self::residual_flags().collect(),
                        ExpFlag::Grid => GRID_FLAGS.to_vec(),
                        f => vec![f],
                    })
                    .collect()
            }

            /// The residual option and its simulator knob of a
            /// [`ExpFlag::ResOption`] flag.
            fn knob(i: usize) -> (&'static ResidualOption, &'static SimKnob) {
                let o = OPTIONS[i];
                (o, o.sim.as_ref().expect("a ResOption flag's option is simulated"))
            }

            /// The flag's name (without `--`).
            pub fn name(self) -> &'static str {
                match self {
                    $(ExpFlag::$variant => $name,)*
                    ExpFlag::ResOption(i) => Self::knob(i).0.name,
                    ExpFlag::ResOptions => "residual-options",
                    ExpFlag::Grid => "grid",
                }
            }

            /// Its help text (the declaration's doc comment).
            pub fn help(self) -> &'static str {
                match self {
                    $(ExpFlag::$variant => concat!($($doc),+).trim_ascii(),)*
                    ExpFlag::ResOption(i) => Self::knob(i).1.help,
                    ExpFlag::ResOptions => "the residual options the depth simulator models",
                    ExpFlag::Grid => "the grid flags of a training experiment",
                }
            }

            /// The flag as an option declaration ([`Field`]): what the
            /// binary's one flag generator reads (the key is the flag's
            /// name; values are parsed by [`ExpFlag::set`]).
            pub fn field(self) -> Field {
                Field {
                    key: self.name(),
                    doc: self.help(),
                    flag: match self.shape() {
                        FlagShape::Value => Flag::Text,
                        FlagShape::List => Flag::List,
                        FlagShape::Switch => Flag::On,
                        FlagShape::OnOff => Flag::OnOff,
                    },
                }
            }

            /// How it is written on the command line.
            pub fn shape(self) -> FlagShape {
                match self {
                    $(ExpFlag::$variant => FlagShape::$shape,)*
                    ExpFlag::ResOption(i) => match Self::knob(i).1.switch {
                        Some(_) => FlagShape::Switch,
                        None => FlagShape::Value,
                    },
                    ExpFlag::ResOptions | ExpFlag::Grid => FlagShape::Switch,
                }
            }

            /// A small example value (None for switches and for paths,
            /// which a caller must supply): what the tests pass to check
            /// that every documented flag is accepted.
            pub fn example(self) -> Option<String> {
                match self {
                    $(ExpFlag::$variant => {
                        let e: Option<&'static str> = $example;
                        e.map(String::from)
                    })*
                    ExpFlag::ResOption(i) => {
                        let k = Self::knob(i).1;
                        k.switch.is_none().then(|| k.example.to_string())
                    }
                    ExpFlag::ResOptions | ExpFlag::Grid => None,
                }
            }

            /// Whether `a` sets this flag.
            pub fn is_set(self, a: &ExpArgs) -> bool {
                match self {
                    $(ExpFlag::$variant => a.$field.is_some(),)*
                    ExpFlag::ResOption(i) => a.res_options.iter().any(|(j, _)| *j == i),
                    ExpFlag::ResOptions | ExpFlag::Grid => false,
                }
            }

            /// Set this flag in `a` from its command-line text
            /// (`true`/`false` for a switch).
            pub fn set(self, a: &mut ExpArgs, text: &str) -> Result<()> {
                self.set_as(a, text, &format!("--{}", self.name()))
            }

            /// Set this flag in `a` from `text`, naming it `label` in an
            /// error (the web lab's API names its query parameters).
            pub fn set_as(self, a: &mut ExpArgs, text: &str, label: &str) -> Result<()> {
                match self {
                    $(ExpFlag::$variant => {
                        a.$field = Some(<$ty as FlagValue>::parse_flag(label, text)?)
                    })*
                    ExpFlag::ResOption(i) => {
                        let k = Self::knob(i).1;
                        let value = match k.switch {
                            Some(on) => <bool as FlagValue>::parse_flag(label, text)?.then_some(on),
                            None => {
                                let v = <f64 as FlagValue>::parse_flag(label, text)?;
                                (k.check)(v).map_err(|e| Error::bad(format!("{label}: {e}")))?;
                                Some(v)
                            }
                        };
                        a.res_options.retain(|(j, _)| *j != i);
                        if let Some(v) = value {
                            a.res_options.push((i, v));
                            a.res_options.sort_by_key(|(j, _)| *j);
                        }
                    }
                    ExpFlag::ResOptions | ExpFlag::Grid => {
                        return Err(Error::bad(format!("{label} is not a flag")));
                    }
                }
                Ok(())
            }

            /// The flag called `name` (`d-model` or `d_model`).
            pub fn find(name: &str) -> Option<ExpFlag> {
                let name = name.replace('_', "-");
                Self::all().into_iter().find(|f| f.name() == name)
            }
        }
    };
}

exp_flags! {
    /// Number of seeds.
    Seeds seeds: usize = "seeds", Value, Some("1");
    /// First seed.
    Seed seed: u64 = "seed", Value, Some("0");
    /// Training steps per run.
    Steps steps: usize = "steps", Value, Some("10");
    /// Runs in parallel (each single-threaded; default: all cores).
    Jobs jobs: usize = "jobs", Value, Some("1");
    /// Thread counts (speed).
    Threads threads: Vec<usize> = "threads", List, Some("1");
    /// Depths.
    Layers layers: Vec<usize> = "layers", List, Some("2");
    /// Norm kinds.
    Norms norms: Vec<NormKind> = "norms", List, Some("layernorm");
    /// Placements.
    Placements placements: Vec<Placement> = "placements", List, Some("pre");
    /// Learning rates.
    Lrs lrs: Vec<f32> = "lrs", List, Some("0.001");
    /// Warm-up lengths.
    Warmups warmups: Vec<usize> = "warmups", List, Some("0");
    /// Weight scales (drift).
    Scales scales: Vec<f32> = "scales", List, Some("0.3");
    /// Width.
    DModel d_model: usize = "d-model", Value, Some("16");
    /// Rows of random inputs.
    Rows rows: usize = "rows", Value, Some("8");
    /// depth-sim: number of sublayers N.
    Sublayers sublayers: usize = "sublayers", Value, Some("4");
    /// depth-sim: init gain g.
    Gain gain: f64 = "gain", Value, Some("1");
    /// depth-sim: residual connections on (default) or off (--no-residual).
    Residual residual: bool = "residual", OnOff, None;
    /// depth-sim: RMSNorm before each sublayer.
    PreNorm pre_norm: bool = "pre-norm", Switch, None;
    /// depth-sim: scale each write-back by 1/sqrt(N).
    ScaleWriteback scale_writeback: bool = "scale-writeback", Switch, None;
    /// depth-sim: DyT's tanh(0.5 x) in the pre-norm's place (with --pre-norm).
    Dyt dyt: bool = "dyt", Switch, None;
    /// placements: toy or gpt (default both).
    Model model: ModelKind = "model", Value, Some("toy");
    /// convert: existing run folders to convert instead of training.
    Runs runs: Vec<PathBuf> = "runs", List, None;
    /// convert: calibration (distillation) steps.
    Calibrate calibrate: usize = "calibrate", Value, Some("5");
    /// convert: a pretrained BERT folder to convert too (default: models/all-MiniLM-L6-v2 if present).
    Bert bert: PathBuf = "bert", Value, None;
    /// Weight initialisations: gpt2, torch (collapse).
    Inits inits: Vec<InitScheme> = "inits", List, Some("torch");
}

/// The flags every training experiment takes (its grid and how it runs):
/// its registry row names them all as [`ExpFlag::Grid`].
pub const GRID_FLAGS: [ExpFlag; 4] = [ExpFlag::Steps, ExpFlag::Seeds, ExpFlag::Seed, ExpFlag::Jobs];

impl ExpArgs {
    /// Error if a flag is given that experiment `id` (taking `allowed`)
    /// does not use, or a value is out of range.
    pub fn check(&self, id: &str, allowed: &[ExpFlag]) -> Result<()> {
        let allowed = ExpFlag::expand(allowed);
        for flag in ExpFlag::all() {
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
            normlab::limits::check_threads("--jobs", j)?;
        }
        for &t in self.threads.iter().flatten() {
            normlab::limits::check_threads("--threads", t)?;
        }
        for &l in self.layers.iter().flatten() {
            check_count("--layers", l, 1, 10_000)?;
        }
        if let Some(n) = self.seeds.filter(|&n| n > 1000) {
            return Err(format!("--seeds must be at most 1000 (got {n})").into());
        }
        if let Some(n) = self.calibrate {
            check_count("--calibrate", n, 0, normlab::limits::MAX_CALIBRATION_STEPS)?;
        }
        if let Some(l) = &self.lrs {
            if l.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
                return Err("--lrs must be positive numbers".into());
            }
        }
        if let Some(n) = self.sublayers {
            check_count("--sublayers", n, 1, 100_000)?;
        }
        if let Some(g) = self.gain {
            if !(g.is_finite() && g >= 0.0) {
                return Err(format!("--gain must be a number >= 0 (got {g})").into());
            }
        }
        if let Some(d) = self.d_model {
            check_count("--d-model", d, 1, 1 << 16)?;
        }
        if let Some(r) = self.rows {
            check_count("--rows", r, 1, 1 << 20)?;
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
