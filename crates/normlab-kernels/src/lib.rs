//! # normlab-kernels
//!
//! The hot paths of normlab as plain functions over `f32` slices, with no
//! allocation per call: fused normalization kernels (LayerNorm, RMSNorm,
//! zero-centred RMSNorm, ScaleNorm, BatchNorm, identity), forward and
//! backward, parallel over rows and bit-identical for any thread count.
//!
//! ```
//! use normlab_kernels::norm::{self, NormKind};
//! let d = 4;
//! let x = [1.0f32, 2.0, 3.0, 6.0];
//! let mut params = vec![0.0; NormKind::LayerNorm.num_params(d)];
//! NormKind::LayerNorm.init_params(d, &mut params);
//! let mut y = [0.0f32; 4];
//! let mut stats = vec![0.0; norm::stats_len(1)];
//! norm::forward(NormKind::LayerNorm, d, 1e-5, &x, &params, &mut y, &mut stats);
//! assert!((y[0] + 1.069).abs() < 1e-3 && (y[3] - 1.604).abs() < 1e-3);
//! ```
//!
//! Modules: [`norm`] (the kernels and their contract), [`simd`]
//! (instruction-set dispatch and fixed-order reductions), [`reference`]
//! (slow f64 twins used by tests).

// Kernels index with explicit ranges on purpose: fixed-lane loops are what
// LLVM turns into SIMD with a fixed reduction order.
#![allow(clippy::needless_range_loop)]

pub mod act;
pub mod buf;
pub mod half16;
pub mod matmul;
pub mod norm;
pub mod reference;
pub mod rng;
pub mod simd;
