//! The seeds of one setting, summarised: how many runs ended in each
//! status, the majority status, the held-out loss over seeds (mean, std,
//! best) and the earliest divergence; and grouping runs by a typed key.
//! Experiments and `normlab report` tabulate grids of these.

use super::spec::RunResult;
use normlab::train::{Status, Summary};
use serde::Serialize;

/// What the seeds of one setting did: how many runs ended in each status,
/// the majority status (diverged if more than half diverged, else stalled if
/// more than half stalled, else converged), the final held-out loss over the
/// runs that have one (mean and population std), the best held-out loss of
/// any evaluation, and the earliest divergence.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SeedGroup {
    /// Runs in the group.
    pub runs: usize,
    /// Runs that converged.
    pub converged: usize,
    /// Runs that stalled.
    pub stalled: usize,
    /// Runs that diverged.
    pub diverged: usize,
    /// Majority status.
    pub status: Status,
    /// Mean final held-out loss (runs with a finite one).
    pub mean: Option<f64>,
    /// Its population std over those runs.
    pub std: Option<f64>,
    /// Lowest held-out loss of any evaluation of any run.
    pub best: Option<f64>,
    /// Earliest divergence step.
    pub diverged_at: Option<usize>,
}

impl SeedGroup {
    /// The group of these runs' summaries.
    pub fn of<'a>(summaries: impl IntoIterator<Item = &'a Summary>) -> SeedGroup {
        let v: Vec<&Summary> = summaries.into_iter().collect();
        let count = |st: Status| v.iter().filter(|s| s.status == st).count();
        let (converged, stalled, diverged) = (
            count(Status::Converged),
            count(Status::Stalled),
            count(Status::Diverged),
        );
        let status = if diverged * 2 > v.len() {
            Status::Diverged
        } else if stalled * 2 > v.len() {
            Status::Stalled
        } else {
            Status::Converged
        };
        let losses: Vec<f64> = v
            .iter()
            .filter_map(|s| s.final_eval_loss)
            .filter(|x| x.is_finite())
            .collect();
        let (mean, std) = mean_std(&losses);
        let best = v
            .iter()
            .filter_map(|s| s.best_eval_loss)
            .filter(|x| x.is_finite())
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
        SeedGroup {
            runs: v.len(),
            converged,
            stalled,
            diverged,
            status,
            mean,
            std,
            best,
            diverged_at: v.iter().filter_map(|s| s.diverged_at_step).min(),
        }
    }

    /// The group of these runs.
    pub fn of_runs<'a>(runs: impl IntoIterator<Item = &'a RunResult>) -> SeedGroup {
        SeedGroup::of(runs.into_iter().map(|r| &r.summary))
    }

    /// `converged` for one run; `2 converged, 1 diverged` for several.
    pub fn label(&self) -> String {
        let parts = [
            (self.converged, Status::Converged),
            (self.diverged, Status::Diverged),
            (self.stalled, Status::Stalled),
        ];
        parts
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, st)| {
                if self.runs == 1 {
                    st.name().to_string()
                } else {
                    format!("{n} {}", st.name())
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The heat-map mark: D (diverged), S (stalled) or nothing.
    pub fn mark(&self) -> &'static str {
        match self.status {
            Status::Diverged => "D",
            Status::Stalled => "S",
            Status::Converged => "",
        }
    }

    /// The heat-map value: the mean loss, unless the group diverged.
    pub fn heat_value(&self) -> Option<f64> {
        if self.status == Status::Diverged {
            None
        } else {
            self.mean
        }
    }
}

/// Mean and population standard deviation (None for no values).
pub fn mean_std(v: &[f64]) -> (Option<f64>, Option<f64>) {
    if v.is_empty() {
        return (None, None);
    }
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let s = (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n).sqrt();
    (Some(m), Some(s))
}

/// Items grouped by a key, groups in first-seen order.
pub fn group_by<T, K: PartialEq>(items: &[T], key: impl Fn(&T) -> K) -> Vec<(K, Vec<&T>)> {
    let mut out: Vec<(K, Vec<&T>)> = Vec::new();
    for it in items {
        let k = key(it);
        match out.iter_mut().find(|(kk, _)| *kk == k) {
            Some((_, v)) => v.push(it),
            None => out.push((k, vec![it])),
        }
    }
    out
}
