//! Dynamic loss scaling for f16 training ([`LossScaler`]).

use serde::{Deserialize, Serialize};

/// Dynamic loss scaling for f16 training, with PyTorch GradScaler's
/// defaults: the loss (so every gradient) is multiplied by `scale` before
/// backward and the weight gradients divided by it after; a step whose
/// gradients hold an inf or NaN is skipped (no optimizer update) and the
/// scale halved; after [`LossScaler::GROWTH_INTERVAL`] good steps in a row
/// it doubles. Powers of two, so scaling and unscaling are exact.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossScaler {
    /// The current scale.
    pub scale: f64,
    /// Good steps since the scale last changed.
    pub good: u64,
    /// Steps skipped so far.
    pub skipped: u64,
}

impl LossScaler {
    /// The first scale (2^16).
    pub const INIT: f64 = 65536.0;
    /// Good steps before the scale doubles.
    pub const GROWTH_INTERVAL: u64 = 2000;

    /// A fresh scaler.
    pub fn new() -> LossScaler {
        LossScaler {
            scale: LossScaler::INIT,
            good: 0,
            skipped: 0,
        }
    }

    /// After a backward: unscale `grads` if finite (returns true) or
    /// zero them and back off (returns false: skip the step).
    pub fn update(&mut self, grads: &mut [f32]) -> bool {
        use rayon::prelude::*;
        let finite = grads
            .par_chunks(16 * 1024)
            .all(|c| c.iter().all(|g| g.is_finite()));
        if finite {
            let inv = (1.0 / self.scale) as f32;
            grads
                .par_chunks_mut(16 * 1024)
                .for_each(|c| c.iter_mut().for_each(|g| *g *= inv));
            self.good += 1;
            if self.good == LossScaler::GROWTH_INTERVAL {
                self.scale *= 2.0;
                self.good = 0;
            }
        } else {
            grads.fill(0.0);
            self.scale *= 0.5;
            self.good = 0;
            self.skipped += 1;
        }
        finite
    }
}

impl Default for LossScaler {
    fn default() -> LossScaler {
        LossScaler::new()
    }
}
