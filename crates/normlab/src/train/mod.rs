//! Training: configuration, data, optimiser, the step loop, run folders.

pub mod config;
pub mod data;
pub mod optim;
pub mod run;
pub mod toy_task;
pub mod trainer;

pub use config::TrainConfig;
pub use run::{run, RunOptions, RunOutcome, Status, Summary};
pub use trainer::{StepRecord, Trainer};
