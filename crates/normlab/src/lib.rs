//! # normlab
//!
//! The normlab library: the norm calculator, modules with explicit
//! forward/backward passes ([`nn`]), models ([`model`]), training
//! ([`train`]) and benchmarks, built on [`normlab_kernels`].
//!
//! Data flows one way: kernels -> nn -> model -> train -> exp -> cli/web.

pub use error::{Error, Result};
pub use normlab_kernels as kernels;

pub mod bench;
pub mod calc;
pub mod convert;
pub mod error;
pub mod exp;
pub mod gguf;
pub mod gradcheck;
pub mod io;
pub mod limits;
pub mod model;
pub mod nn;
pub mod params;
pub mod precision;
pub mod present;
pub mod report;
pub mod settings;
pub mod sweep;
pub mod train;
