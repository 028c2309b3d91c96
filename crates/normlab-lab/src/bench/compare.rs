//! Comparing the speed of alternatives on a noisy machine (these VMs drift
//! 10-40% between runs). The candidates are timed in interleaved rounds,
//! their order rotating from round to round, so a slow phase of the machine
//! hits all of them alike; each round yields one ratio per pair. A
//! difference is called only when the interquartile range of the per-round
//! ratios lies wholly on one side of 1; otherwise the answer is "no
//! measurable difference".

use super::timing::median;
use serde::Serialize;
use std::time::Instant;

/// Per-round times of each candidate (seconds per call).
#[derive(Clone, Debug)]
pub struct Rounds {
    /// Candidate names, in the order given.
    pub names: Vec<String>,
    /// `times[c][r]`: candidate c in round r.
    pub times: Vec<Vec<f64>>,
}

/// Quartiles (q1, median, q3) of a sample.
pub fn quartiles(v: &[f64]) -> (f64, f64, f64) {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let at = |p: f64| {
        let i = p * (s.len() - 1) as f64;
        let (lo, hi) = (i.floor() as usize, i.ceil() as usize);
        s[lo] + (s[hi] - s[lo]) * (i - lo as f64)
    };
    (at(0.25), median(&mut s.clone()), at(0.75))
}

/// How `b` compares with `a`: the speed-up t_a / t_b per round.
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// The reference.
    pub a: String,
    /// The candidate.
    pub b: String,
    /// Median over rounds of t_a / t_b (> 1: b is faster).
    pub median: f64,
    /// Lower quartile of the per-round speed-ups.
    pub q1: f64,
    /// Upper quartile.
    pub q3: f64,
    /// Rounds.
    pub rounds: usize,
}

/// The direction a comparison found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// b is faster in more than three quarters of the rounds.
    Faster,
    /// b is slower in more than three quarters of the rounds.
    Slower,
    /// The interquartile range of the ratios spans 1.
    NoDifference,
}

impl Ratio {
    /// Faster, slower, or no measurable difference.
    pub fn direction(&self) -> Direction {
        if self.q1 > 1.0 {
            Direction::Faster
        } else if self.q3 < 1.0 {
            Direction::Slower
        } else {
            Direction::NoDifference
        }
    }

    /// `rmsnorm 1.12x as fast as layernorm (per-round 1.08-1.15)`, or `no
    /// measurable difference between ...`.
    pub fn describe(&self) -> String {
        let spread = format!(
            "per-round speed-up {:.2}-{:.2}, {} rounds",
            self.q1, self.q3, self.rounds
        );
        match self.direction() {
            Direction::NoDifference => format!(
                "no measurable difference between {} and {} ({:.2}x, {spread})",
                self.b, self.a, self.median
            ),
            _ => format!(
                "{} {:.2}x as fast as {} ({spread})",
                self.b, self.median, self.a
            ),
        }
    }
}

impl Rounds {
    /// Median seconds per call of candidate `c`.
    pub fn median(&self, c: usize) -> f64 {
        quartiles(&self.times[c]).1
    }

    /// Candidate `b` against candidate `a`.
    pub fn ratio(&self, a: usize, b: usize) -> Ratio {
        let r: Vec<f64> = self.times[a]
            .iter()
            .zip(&self.times[b])
            .map(|(ta, tb)| ta / tb)
            .collect();
        let (q1, med, q3) = quartiles(&r);
        Ratio {
            a: self.names[a].clone(),
            b: self.names[b].clone(),
            median: med,
            q1,
            q3,
            rounds: r.len(),
        }
    }
}

/// Time the candidates in `rounds` interleaved rounds. Within a round each
/// candidate runs as many calls as fill about `min_seconds` (calibrated
/// once, the same count every round), and its time per call is recorded;
/// the order of the candidates rotates by one each round. One warm-up
/// round is not recorded.
pub fn interleaved(
    candidates: &mut [(&str, &mut dyn FnMut())],
    rounds: usize,
    min_seconds: f64,
) -> Rounds {
    let n = candidates.len();
    let mut reps = vec![1usize; n];
    for (c, (_, f)) in candidates.iter_mut().enumerate() {
        f();
        let t0 = Instant::now();
        f();
        let one = t0.elapsed().as_secs_f64().max(1e-9);
        reps[c] = ((min_seconds / one).ceil() as usize).clamp(1, 100_000);
    }
    let mut times = vec![Vec::with_capacity(rounds); n];
    for r in 0..rounds {
        for k in 0..n {
            let c = (r + k) % n;
            let f = &mut candidates[c].1;
            let t0 = Instant::now();
            for _ in 0..reps[c] {
                f();
            }
            times[c].push(t0.elapsed().as_secs_f64() / reps[c] as f64);
        }
    }
    Rounds {
        names: candidates
            .iter()
            .map(|(name, _)| name.to_string())
            .collect(),
        times,
    }
}

/// Training step times of several configs, interleaved step by step
/// (`rounds` steps of each after two warm-up steps), on `threads` threads.
pub fn train_steps(
    cfgs: &[(&str, normlab::train::TrainConfig)],
    threads: usize,
    rounds: usize,
) -> normlab::Result<Rounds> {
    let mut trainers = Vec::with_capacity(cfgs.len());
    for (_, c) in cfgs {
        let mut tr = normlab::train::Trainer::new(c, threads)?;
        for _ in 0..2 {
            tr.train_step(false);
        }
        trainers.push(tr);
    }
    let mut steps: Vec<Box<dyn FnMut() + '_>> = trainers
        .iter_mut()
        .map(|t| {
            Box::new(move || {
                t.train_step(false);
            }) as Box<dyn FnMut()>
        })
        .collect();
    let mut cands: Vec<(&str, &mut dyn FnMut())> = cfgs
        .iter()
        .zip(steps.iter_mut())
        .map(|((name, _), f)| (*name, &mut **f as &mut dyn FnMut()))
        .collect();
    Ok(interleaved(&mut cands, rounds, 0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clear_difference_is_called_and_equal_work_is_not() {
        let work = |n: usize| {
            let mut x = 0u64;
            for i in 0..n {
                x = x.wrapping_mul(31).wrapping_add(i as u64);
            }
            std::hint::black_box(x);
        };
        let (mut small, mut big, mut same) = (|| work(20_000), || work(200_000), || work(20_000));
        let r = interleaved(
            &mut [
                ("small", &mut small),
                ("big", &mut big),
                ("same", &mut same),
            ],
            15,
            0.002,
        );
        assert_eq!(
            r.ratio(1, 0).direction(),
            Direction::Faster,
            "{:?}",
            r.ratio(1, 0)
        );
        assert!(r.ratio(1, 0).median > 3.0);
        assert_eq!(r.ratio(0, 1).direction(), Direction::Slower);
        assert!(r.ratio(0, 1).describe().contains("as fast as"));
        let (q1, m, q3) = quartiles(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!((q1, m, q3), (2.0, 3.0, 4.0));
    }
}
