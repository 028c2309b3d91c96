//! The per-shard [`Workspace`]'s accessors and switches (its buffers are
//! declared with the model in `model/mod.rs`).

use super::Workspace;
use crate::nn::{NormCache, NormRole, NormSite};

impl Workspace {
    /// Round activations and their gradients to `t` between layers (see
    /// `TrainConfig::dtype`; f32, the default: no rounding).
    pub fn set_storage(&mut self, t: crate::precision::Dtype) {
        self.scratch.round = t;
    }

    /// Rows (tokens) in the shard.
    pub fn rows(&self) -> usize {
        self.batch * self.t
    }

    /// Softmax probabilities of the last forward, `[rows, vocab]`.
    pub fn probs(&self) -> &[f32] {
        &self.probs
    }

    /// The cache of the norm at `site` from the last forward (None for
    /// QK-Norm, whose caches live in attention).
    pub fn norm_cache(&self, site: &NormSite) -> Option<&NormCache> {
        match (site.role, site.block, site.sub) {
            (NormRole::Final, _, _) => self.fin_c.as_ref(),
            (role, Some(b), Some(j)) => self.blocks[b].sublayer(j).norm_cache(role),
            _ => None,
        }
    }

    /// Turn on/off the norms' diagnostics (point-wise kinds' saturated
    /// share, see [`NormCache::diagnose`]) for the next forwards.
    pub fn diagnose_norms(&mut self, on: bool) {
        for b in &mut self.blocks {
            for s in b.sublayers_mut() {
                for c in s.norm_caches_mut() {
                    c.diagnose = on;
                }
            }
        }
        if let Some(c) = &mut self.fin_c {
            c.diagnose = on;
        }
    }

    /// Turn on/off the identity/branch gradient split in every sublayer.
    pub fn track_paths(&mut self, on: bool) {
        for b in &mut self.blocks {
            for s in b.sublayers_mut() {
                s.track_paths = on;
            }
        }
    }
}
