//! C25 for the residual-routing chapter: the stream is the sum of all
//! writes, `x_L = x_0 + sum_l F_l`. First the lesson's arithmetic, measured:
//! 128 independent unit-variance writes on a unit-variance embedding give
//! a stream of std sqrt(129) = 11.36. Then, in trained models, whether the
//! writes are independent: by depth k, the stream's mean square against
//! the embedding's plus the sum of the writes' mean squares so far (1 when
//! the writes are uncorrelated with each other and with the embedding,
//! above 1 when they pile up in a common direction, below when they cancel).
//! Read from each model's own per-sublayer trace (before + write = after):
//! normlab's trained Pre-LN GPT and toy net, SmolLM2 and Gemma 3 (when
//! their files are here).

use super::args::ExpArgs;
use super::claims::{ClaimCheck, Verdict};
use super::depth_use::eval_workspace;
use super::llm_models::{find, MODELS};
use super::runs::final_params;
use crate::present::{f, LineChart, Panel, Series, Table};
use crate::sweep::RunResult;
use normlab::error::Result;
use normlab::io::sample_sentences;
use normlab::kernels::rng::Rng;
use normlab::model::decoder::{Decoder, DecoderTrace};
use normlab::model::{Model, SublayerTrace};
use normlab::train::Status;
use serde::Serialize;

/// The lesson's count of writes: 64 layers x 2 sublayers.
const WRITES: usize = 128;

/// Elements per write in the arithmetic check.
const ELEMENTS: usize = 1 << 18;

/// The variance ratio by depth of one model.
#[derive(Clone, Debug, Serialize)]
pub(super) struct SumTrace {
    model: String,
    /// Per sublayer k: ms(x_k) / (ms(x_0) + sum_{l<=k} ms(w_l)).
    ratio: Vec<f64>,
    /// The largest |after - (before + write)| / max |after|.
    check: f64,
}

/// What C25's part of the chapter measured.
#[derive(Clone, Debug, Serialize)]
pub(super) struct StreamSum {
    writes: usize,
    expected_std: f64,
    measured_std: f64,
    models: Vec<SumTrace>,
    absent: Vec<String>,
}

/// The std of a unit-variance embedding plus [`WRITES`] independent
/// unit-variance writes ([`ELEMENTS`] elements each), measured.
pub(super) fn sum_of_writes(seed: u64) -> f64 {
    let mut rng = Rng::derive(seed, "stream-sum");
    let mut acc = vec![0f64; ELEMENTS];
    let mut w = vec![0f32; ELEMENTS];
    for _ in 0..=WRITES {
        rng.fill_normal(&mut w, 0.0, 1.0);
        acc.iter_mut()
            .zip(&w)
            .for_each(|(a, &v)| *a += f64::from(v));
    }
    let n = ELEMENTS as f64;
    let mean = acc.iter().sum::<f64>() / n;
    (acc.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n).sqrt()
}

/// Per-sublayer mean squares (before of the first, writes, afters), with
/// a weight (tokens): summed over passes, then turned into the ratio.
#[derive(Default)]
struct Acc {
    x0: f64,
    writes: Vec<f64>,
    afters: Vec<f64>,
    weight: f64,
    check: f64,
}

impl Acc {
    fn add(&mut self, tr: &[SublayerTrace], weight: f64) {
        if tr.is_empty() {
            return;
        }
        self.writes.resize(tr.len(), 0.0);
        self.afters.resize(tr.len(), 0.0);
        self.x0 += weight * tr[0].before_rms.powi(2);
        for (i, t) in tr.iter().enumerate() {
            self.writes[i] += weight * t.write_rms.powi(2);
            self.afters[i] += weight * t.after_rms.powi(2);
            self.check = self.check.max(t.check);
        }
        self.weight += weight;
    }

    fn trace(self, model: String) -> SumTrace {
        let mut sum = self.x0;
        let ratio = self
            .writes
            .iter()
            .zip(&self.afters)
            .map(|(w, a)| {
                sum += w;
                a / sum
            })
            .collect();
        SumTrace {
            model,
            ratio,
            check: self.check,
        }
    }
}

/// The trained model's trace on held-out sequences.
fn trained(a: &ExpArgs, r: &RunResult) -> Result<SumTrace> {
    let model = Model::new(&r.cfg.model)?;
    let mut ws = eval_workspace(&model, &r.cfg, 16)?;
    ws.keep_writes(true);
    model.forward(&final_params(a, r)?, &mut ws);
    let mut acc = Acc::default();
    acc.add(&model.sublayer_traces(&ws), 1.0);
    Ok(acc.trace(format!(
        "{} pre-ln ({} blocks, trained)",
        r.cfg.model.kind, r.cfg.model.layers
    )))
}

/// A pretrained model's trace over sample sentences.
fn pretrained(path: &std::path::Path, name: &str, texts: &[String]) -> Result<SumTrace> {
    let m = Decoder::load(path)?;
    let mut acc = Acc::default();
    for text in texts {
        let ids = m.encode(text)?;
        if ids.is_empty() {
            continue;
        }
        let mut tr = DecoderTrace::default();
        m.observe(&ids, &mut tr)?;
        acc.add(&tr.sublayers, ids.len() as f64);
    }
    Ok(acc.trace(name.to_string()))
}

/// Measure: the arithmetic, the plain runs of `rs` (the first learning
/// rate's first seed that did not diverge, per model), the real models.
pub(super) fn measure(a: &ExpArgs, rs: &[RunResult]) -> Result<StreamSum> {
    let mut models = Vec::new();
    let mut kinds = Vec::new();
    let plain = |r: &&RunResult| {
        let m = &r.cfg.model;
        m.hc.is_none() && m.mhc.is_none() && m.attnres.is_none()
    };
    for r in rs.iter().filter(plain) {
        if r.summary.status != Status::Diverged && !kinds.contains(&r.cfg.model.kind) {
            kinds.push(r.cfg.model.kind);
            models.push(trained(a, r)?);
        }
    }
    let texts = sample_sentences(if a.quick { 2 } else { 8 }, 0, 53);
    let mut absent = Vec::new();
    for rm in &MODELS {
        match find(rm.file) {
            Some(p) => models.push(pretrained(&p, rm.name, &texts)?),
            None => absent.push(format!(
                "{} ({} absent: run {})",
                rm.name, rm.file, rm.fetch
            )),
        }
    }
    Ok(StreamSum {
        writes: WRITES,
        expected_std: ((WRITES + 1) as f64).sqrt(),
        measured_std: sum_of_writes(a.seed_list(1)[0]),
        models,
        absent,
    })
}

/// The ratio at the top of a model's stack, and its range over depth.
fn top_and_range(t: &SumTrace) -> (f64, f64, f64) {
    let top = t.ratio.last().copied().unwrap_or(f64::NAN);
    let (lo, hi) = t
        .ratio
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
            (l.min(v), h.max(v))
        });
    (top, lo, hi)
}

/// Writes count as independent when the ratio stays within this factor of 1.
const INDEPENDENT: f64 = 1.25;

impl StreamSum {
    /// Its tables.
    pub fn tables(&self) -> Vec<Table> {
        let mut t = Table::new(
            format!("C25: the stream as the sum of its writes. Arithmetic: {} independent unit-variance writes on a unit-variance embedding ({} elements each)", self.writes, ELEMENTS),
            &["model", "stream ms / sum of ms, top of the stack", "range over depth", "before + write = after (largest error)"],
        );
        t.row(vec![
            "arithmetic (std)".into(),
            format!(
                "measured {} (lesson: sqrt(129) = {})",
                f(self.measured_std, 3),
                f(self.expected_std, 2)
            ),
            "-".into(),
            "-".into(),
        ]);
        for m in &self.models {
            let (top, lo, hi) = top_and_range(m);
            t.row(vec![
                m.model.clone(),
                f(top, 3),
                format!("{} - {}", f(lo, 3), f(hi, 3)),
                format!("{:.1e}", m.check),
            ]);
        }
        vec![t]
    }

    /// The ratio by depth, one series per model.
    pub fn panel(&self) -> Panel {
        LineChart::new(
            "C25: stream ms / (embedding ms + sum of writes' ms)",
            "sublayer",
            "ratio (1 = independent writes)",
            self.models
                .iter()
                .map(|m| Series::indexed(m.model.clone(), &m.ratio))
                .collect(),
        )
        .log_y()
        .panel()
    }

    /// C25's verdict: the arithmetic, the identity in every model, and
    /// whether trained writes are independent.
    pub fn check(&self) -> ClaimCheck {
        let arith = (self.measured_std / self.expected_std - 1.0).abs() < 0.01;
        let sums = self.models.iter().all(|m| m.check < 1e-4);
        let dependent: Vec<String> = self
            .models
            .iter()
            .filter(|m| {
                let (_, lo, hi) = top_and_range(m);
                hi > INDEPENDENT || lo < 1.0 / INDEPENDENT
            })
            .map(|m| m.model.clone())
            .collect();
        let verdict = if !arith || !sums {
            Verdict::DoesNotHold
        } else if self.models.is_empty() {
            Verdict::Inconclusive
        } else if dependent.is_empty() {
            Verdict::Holds
        } else {
            Verdict::Partly
        };
        let per: Vec<String> = self
            .models
            .iter()
            .map(|m| {
                let (top, lo, hi) = top_and_range(m);
                format!(
                    "{} {} (range {}-{})",
                    m.model,
                    f(top, 2),
                    f(lo, 2),
                    f(hi, 2)
                )
            })
            .collect();
        ClaimCheck::new(
            "C25",
            verdict,
            format!(
                "{} unit-variance writes gave std {} (lesson: sqrt(129) = 11.36); before + write = after held in every model (largest error {:.1e}). Trained writes independent? Stream mean square over the embedding's plus the writes' at the top of the stack (1 if independent): {}{}{}.",
                self.writes,
                f(self.measured_std, 3),
                self.models.iter().map(|m| m.check).fold(0.0, f64::max),
                per.join(", "),
                if dependent.is_empty() {
                    String::new()
                } else {
                    format!("; beyond a factor {INDEPENDENT} somewhere in depth: {}", dependent.join(", "))
                },
                if self.absent.is_empty() {
                    String::new()
                } else {
                    format!(" (not measured: {})", self.absent.join("; "))
                }
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn independent_writes_add_their_variances_and_aligned_ones_do_not() {
        let s = sum_of_writes(3);
        assert!((s / 129f64.sqrt() - 1.0).abs() < 0.01, "{s}");
        // Two writes equal to the embedding: ms 1, then 4 and 9 against sums 2, 3.
        let tr = |b: f64, w: f64, a: f64| SublayerTrace {
            before_rms: b,
            write_rms: w,
            after_rms: a,
            ..SublayerTrace::default()
        };
        let mut acc = Acc::default();
        acc.add(&[tr(1.0, 1.0, 2.0), tr(2.0, 1.0, 3.0)], 1.0);
        let t = acc.trace("aligned".into());
        assert!((t.ratio[0] - 2.0).abs() < 1e-12 && (t.ratio[1] - 3.0).abs() < 1e-12);
    }
}
