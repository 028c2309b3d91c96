//! The registry: every experiment, in the order of the book, and lookup
//! by id. A new experiment is a file (its `EXPERIMENT` row, built with the
//! framework) plus one line in [`EXPERIMENTS`] and one `pub mod` in
//! `mod.rs`; dispatch, flag checking, `exp list`, `sweep <id>`, the book
//! and the tests iterate this list.

use super::args::ExpArgs;
use super::framework::{ExpResult, Experiment, Progress};
use super::{
    attention_sink, batch_dependence, collapse, convert, cross_check, cure_all, depth_sim,
    depth_use, drift, dyt_recipe, gain_decay, identity_path, llm, lr_sensitivity, no_norm,
    norm_kind, norm_stats, placements, precision, precision_train, qk_norm, real_causes,
    residual_growth, residual_routing, speed, swiglu_clamp, warmup,
};
use crate::sweep::RunSpec;
use normlab::error::{Error, Result};

/// Every experiment, in the book's order.
pub static EXPERIMENTS: &[&Experiment] = &[
    &drift::EXPERIMENT,
    &batch_dependence::EXPERIMENT,
    &norm_stats::EXPERIMENT,
    &identity_path::EXPERIMENT,
    &residual_growth::EXPERIMENT,
    &depth_sim::EXPERIMENT,
    &collapse::EXPERIMENT,
    &lr_sensitivity::EXPERIMENT,
    &warmup::EXPERIMENT,
    &speed::EXPERIMENT,
    &norm_kind::EXPERIMENT,
    &gain_decay::EXPERIMENT,
    &qk_norm::EXPERIMENT,
    &placements::EXPERIMENT,
    &convert::EXPERIMENT,
    &cure_all::EXPERIMENT,
    &no_norm::EXPERIMENT,
    &depth_use::EXPERIMENT,
    &residual_routing::EXPERIMENT,
    &attention_sink::EXPERIMENT,
    &swiglu_clamp::EXPERIMENT,
    &dyt_recipe::EXPERIMENT,
    &precision::EXPERIMENT,
    &precision_train::EXPERIMENT,
    &llm::EXPERIMENT,
    &real_causes::EXPERIMENT,
    &cross_check::EXPERIMENT,
];

/// Look an experiment up.
pub fn find(id: &str) -> Option<&'static Experiment> {
    EXPERIMENTS.iter().copied().find(|e| e.id == id)
}

/// Look an experiment up, or say which exist.
pub fn get(id: &str) -> Result<&'static Experiment> {
    find(id).ok_or_else(|| {
        let ids: Vec<&str> = EXPERIMENTS.iter().map(|e| e.id).collect();
        Error::bad(format!(
            "unknown experiment '{id}' (expected one of: {})",
            ids.join(", ")
        ))
    })
}

/// Run experiment `id`.
pub fn run(id: &str, args: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    get(id)?.run_with(args, progress)
}

impl Experiment {
    /// The runs `normlab sweep <id>` trains: the full setting's grid.
    pub fn sweep_specs(&self) -> Result<Vec<RunSpec>> {
        match self.grid {
            Some(g) => g(&ExpArgs::default()),
            None => Err(Error::bad(format!(
                "experiment {} trains no runs (experiments with a grid: {})",
                self.id,
                EXPERIMENTS
                    .iter()
                    .filter(|e| e.grid.is_some())
                    .map(|e| e.id)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }
}
