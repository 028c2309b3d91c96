//! Training: configuration, data, optimiser, the step loop, run folders.

pub mod backcopy;
pub mod config;
pub mod data;
pub mod folder;
pub mod loss_scale;
pub mod metrics_file;
pub mod optim;
mod outliers;
pub mod record;
pub mod run;
pub mod status;
pub mod toy_task;
pub mod trainer;

pub use crate::params::nan_max;
pub use config::TrainConfig;
pub use folder::{RunLock, Spike, Status, Summary};
pub use loss_scale::LossScaler;
pub use record::StepRecord;
pub use run::{run, RunOptions, RunOutcome};
pub use trainer::Trainer;
