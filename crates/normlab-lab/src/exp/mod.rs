//! The built-in experiments. Each answers one question with numbers it
//! measures and lives in its own file, which defines its `EXPERIMENT` row
//! with the framework ([`framework`]: [`Experiment`], [`ExpResult`], the
//! report writer); [`registry`] lists them ([`EXPERIMENTS`]). Files of this
//! module import the file that owns what they use, never this one, so the
//! imports between them form no cycle; this file only declares the modules
//! and re-exports the public API. `--quick` runs a reduced setting.

pub mod args;
pub mod attention_sink;
pub mod batch_dependence;
pub mod claims;
pub mod collapse;
pub mod convert;
pub mod cross_check;
mod cross_defaults;
mod cross_routing;
mod cross_rules;
pub mod cross_train;
pub mod cure_all;
pub mod depth_sim;
pub mod depth_use;
pub mod drift;
pub mod dyt_recipe;
pub mod framework;
pub mod gain_decay;
pub mod identity_path;
pub mod lesson_block;
pub mod llm;
mod llm_models;
pub mod lr_sensitivity;
pub mod no_norm;
pub mod norm_kind;
pub mod norm_stats;
pub mod placements;
pub mod precision;
pub mod precision_train;
pub mod provenance;
pub mod qk_norm;
pub mod real_causes;
pub mod registry;
pub mod residual_growth;
pub mod residual_routing;
pub mod runs;
pub mod speed;
mod stream_sum;
pub mod swiglu_clamp;
pub mod warmup;

pub use args::{ExpArgs, ExpFlag};
pub use claims::{ClaimCheck, Verdict};
pub use framework::{
    num, report_markdown, write_outputs, ExpInfo, ExpResult, Experiment, GridFn, Progress,
    Unavailable,
};
pub use registry::{find, get, run, EXPERIMENTS};
