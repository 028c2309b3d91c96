//! The divergence rule and the classification of a finished run
//! (converged / stalled / diverged), written once: the trainer and the
//! Python package's run logger (through its native module) both call these.

use crate::train::folder::{Spike, Status};

/// Consecutive steps a run may spend above the divergence bound (2 ln V,
/// twice the loss of a uniform guess) before it counts as diverged. A
/// non-finite loss or gradient is divergence at once. Measured: the spikes
/// normlab's grids produce last one or two steps (the 8-layer GPT at lr
/// 1e-2 without warm-up, seed 0: one step at 12.8 > 11.09, then it trains
/// to 2.67 held-out, as PyTorch trains the same setting to 2.61), while no
/// run that rose above the bound and stayed there for 50 steps came back.
pub const DIVERGENCE_WINDOW: usize = 50;

/// Follow the loss against the divergence bound: a non-finite loss
/// diverges at its step; above the bound, a spike (`excursion`) while it
/// lasts, and the step it began once it has lasted [`DIVERGENCE_WINDOW`]
/// steps (the run diverged there); back below, the spike joins `spikes`.
pub fn track_excursion(
    excursion: &mut Option<Spike>,
    spikes: &mut Vec<Spike>,
    step: usize,
    loss: f64,
    bound: f64,
) -> Option<usize> {
    if !loss.is_finite() {
        return Some(step);
    }
    if loss > bound {
        let e = excursion.get_or_insert(Spike {
            step,
            peak_loss: loss,
            steps: 0,
        });
        e.steps += 1;
        e.peak_loss = e.peak_loss.max(loss);
        (e.steps >= DIVERGENCE_WINDOW).then_some(e.step)
    } else {
        if let Some(e) = excursion.take() {
            spikes.push(e);
        }
        None
    }
}

/// At the end of a run: one that ends above the bound has not recovered,
/// and diverged where its last excursion began.
pub fn unrecovered(excursion: Option<&Spike>) -> Option<usize> {
    excursion.map(|e| e.step)
}

/// Classify a finished run: diverged (the rule above, or a non-finite final
/// held-out loss); stalled when the final held-out loss is still within
/// 10% of the way from the unigram entropy down to the loss floor (0 when
/// unknown); else converged. When the unigram entropy is unknown (a
/// PyTorch run that logged no targets), stalled means not below the first
/// loss.
pub fn classify(
    diverged: bool,
    final_eval: f64,
    unigram: f64,
    floor: Option<f64>,
    first_loss: f64,
) -> Status {
    if diverged || !final_eval.is_finite() {
        return Status::Diverged;
    }
    if !unigram.is_finite() {
        return if final_eval < first_loss {
            Status::Converged
        } else {
            Status::Stalled
        };
    }
    let floor = floor.unwrap_or(0.0);
    if final_eval >= unigram - 0.1 * (unigram - floor) {
        Status::Stalled
    } else {
        Status::Converged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spikes_that_come_back_are_events_and_sustained_ones_divergence() {
        let (mut ex, mut spikes) = (None, Vec::new());
        let bound = 10.0;
        // A two-step spike, then recovery.
        for (step, loss) in [(1, 5.0), (2, 12.0), (3, 15.0), (4, 6.0)] {
            assert_eq!(
                track_excursion(&mut ex, &mut spikes, step, loss, bound),
                None
            );
        }
        assert_eq!(spikes.len(), 1);
        assert_eq!(
            (spikes[0].step, spikes[0].steps, spikes[0].peak_loss),
            (2, 2, 15.0)
        );
        // An excursion one step short of the window has not diverged (and
        // would be unrecovered if the run ended there); one that lasts the
        // window diverges at its first step.
        let mut got = None;
        for k in 0..DIVERGENCE_WINDOW {
            got = track_excursion(&mut ex, &mut spikes, 10 + k, 11.0, bound);
            if k + 1 < DIVERGENCE_WINDOW {
                assert_eq!(got, None);
                assert_eq!(unrecovered(ex.as_ref()), Some(10));
            }
        }
        assert_eq!(got, Some(10));
        // A non-finite loss diverges at its own step.
        let (mut ex, mut spikes) = (None, Vec::new());
        assert_eq!(
            track_excursion(&mut ex, &mut spikes, 7, f64::NAN, bound),
            Some(7)
        );
    }

    #[test]
    fn classification_by_the_unigram_entropy_or_the_first_loss() {
        let c = |d, e, u, f| classify(d, e, u, f, 5.0);
        assert_eq!(c(true, 1.0, 4.0, None), Status::Diverged);
        assert_eq!(c(false, f64::NAN, 4.0, None), Status::Diverged);
        // 10% of the way from 4.0 down to 0: stalled at or above 3.6.
        assert_eq!(c(false, 3.6, 4.0, None), Status::Stalled);
        assert_eq!(c(false, 3.59, 4.0, None), Status::Converged);
        // With a floor of 2: stalled at or above 3.8.
        assert_eq!(c(false, 3.7, 4.0, Some(2.0)), Status::Converged);
        // Unknown unigram entropy: compared with the first loss (5.0).
        assert_eq!(c(false, 4.9, f64::NAN, None), Status::Converged);
        assert_eq!(c(false, 5.0, f64::NAN, None), Status::Stalled);
    }
}
