//! # normlab
//!
//! The normlab library: the norm calculator, modules with explicit
//! forward/backward passes ([`nn`]), models ([`model`]: trainable and
//! pretrained), training ([`train`]), checkpoints ([`io`], [`gguf`]) and
//! conversion ([`convert`]), built on [`normlab_kernels`]. The study built
//! on it (experiments, sweeps, the book, reports, benchmarks) is the
//! `normlab-lab` crate, which this crate never imports.
//!
//! Data flows one way: kernels -> nn -> model -> train -> (lab: sweep ->
//! exp) -> cli/web.

pub use error::{Error, Result};
pub use normlab_kernels as kernels;

pub mod calc;
pub mod calc_options;
pub mod convert;
pub mod error;
pub mod gguf;
pub mod gradcheck;
pub mod io;
pub mod limits;
pub mod model;
pub mod nan_serde;
pub mod nn;
pub mod params;
pub mod precision;
pub mod settings;
pub mod train;
