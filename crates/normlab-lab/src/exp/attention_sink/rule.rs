//! C26's rule for one setting (claims.rs `DECISION_RULES`): whether the
//! ungated model has a sink, and what a design did to it. The verdict
//! (verdict.rs) and the recipe sensitivity (recipes.rs) both apply it.

use super::cells::Cell;
use normlab::model::sinks::SINK_EPS;
use normlab::train::Status;

/// What one design did to a setting's sink (C26's decision rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Effect {
    /// At most twice the uniform share, below the ungated share by more
    /// than the seed spread.
    Removed,
    /// Only below by more than the seed spread.
    Lowered,
    /// Neither.
    Kept,
    /// Diverged or no finite share.
    Unusable,
}

pub(super) fn effect(base: &Cell, c: &Cell, uniform: f64) -> Effect {
    let (Some(s0), Some(s1)) = (base.share, c.share) else {
        return Effect::Unusable;
    };
    if c.status == Status::Diverged.name() || !s1.is_finite() {
        return Effect::Unusable;
    }
    let spread = 2.0
        * base
            .share_std
            .unwrap_or(0.0)
            .max(c.share_std.unwrap_or(0.0));
    match (s0 - s1 > spread, s1 <= 2.0 * uniform) {
        (true, true) => Effect::Removed,
        (true, false) => Effect::Lowered,
        _ => Effect::Kept,
    }
}

/// Whether the ungated model of a setting has a sink: a first-token share
/// of at least 0.3 in some (layer, head) at the end, on every seed.
pub(super) fn has_sink(base: &Cell) -> bool {
    base.status != Status::Diverged.name()
        && !base.share_by_seed.is_empty()
        && base.share_by_seed.len() == base.seeds
        && base.share_by_seed.iter().all(|&v| v >= SINK_EPS)
}
