//! # normlab
//!
//! The normlab library: the norm calculator, benchmarks, and (in later
//! layers) modules, models, training and experiments built on
//! [`normlab_kernels`].

pub use normlab_kernels as kernels;

pub mod bench;
pub mod calc;
