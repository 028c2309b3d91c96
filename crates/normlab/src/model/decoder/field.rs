//! The field's own measures of a decoder, as the papers define them, beside
//! normlab's older columns (which measure something close but not the
//! same; docs/own-model.md says how they differ):
//!
//! - **Sink metric** (Gu et al. 2024, "When Attention Sink Emerges",
//!   ICLR 2025; sail-sg/Attention-Sink's `eval_sink_open_source.py`): on
//!   sequences of T = 64 tokens, the first token's importance in head h of
//!   layer l is its attention averaged over every query, the first one
//!   (which sees only itself) included: a = (1/T) sum_t A[t, 0]. Each
//!   (sequence, layer, head) counts as a sink when a > eps = 0.3, and
//!   Sink^eps is the share of them, in percent. normlab's `attn_sink`
//!   column averages the queries t >= 1 over heads and texts of any length
//!   and thresholds nothing; the training runs' `sink_rate` thresholds
//!   the mean over a batch's sequences of the share over queries t >= 1.
//! - **Massive activations** (Sun et al. 2024, "Massive Activations in
//!   Large Language Models", COLM): per layer, the largest magnitudes of
//!   its output hidden states (top 1-3, with their position and channel)
//!   against the median magnitude; an activation is massive when it is
//!   above 100 and about 1000x the median (normlab counts 1000x). The
//!   older `max_over_median` column is the top value over the median of
//!   each inspect text, the largest over texts.
//!
//! Both are measured by [`FieldMetrics`], an observer, over the held-out
//! text in windows of 64 tokens each starting at position 0 (as Gu et al.'s
//! script truncates its texts to 64 tokens); Python's `normlab.diagnose`
//! feeds the same observer from a live model's hooks.

use crate::model::hooks::{AttentionPattern, Observer, Pass};
use serde::Serialize;

/// Gu et al.'s sequence length.
pub const SINK_TOKENS: usize = 64;
/// Gu et al.'s threshold.
pub const SINK_EPS: f64 = 0.3;
/// Sun et al.'s top values per layer.
pub const TOP_VALUES: usize = 3;
/// Sun et al.'s massive activation: above this magnitude ...
pub const MASSIVE_MIN: f64 = 100.0;
/// ... and this many times the median magnitude.
pub const MASSIVE_OVER_MEDIAN: f64 = 1000.0;

/// One large activation: its magnitude and where it is.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TopValue {
    /// |value|.
    pub value: f64,
    /// Which window (0-based).
    pub window: usize,
    /// Position in the window.
    pub position: usize,
    /// Channel.
    pub channel: usize,
    /// The token at that position (filled in by the report).
    pub token: String,
}

/// Collects both measures over passes that each start at position 0.
#[derive(Clone, Debug, Default)]
pub struct FieldMetrics {
    blocks: usize,
    tokens: usize,
    from_start: bool,
    windows: usize,
    /// Per block: (sink heads, heads counted).
    sinks: Vec<(usize, usize)>,
    /// Per block: the largest |x| over every window, largest first.
    top: Vec<Vec<TopValue>>,
    /// Per block: each window's median |x| of the block's output.
    medians: Vec<Vec<f64>>,
}

impl FieldMetrics {
    /// Windows measured.
    pub fn windows(&self) -> usize {
        self.windows
    }

    /// The measures, the tokens named by `token(window, position)`.
    pub fn report(
        &self,
        token: impl Fn(usize, usize) -> crate::error::Result<String>,
    ) -> crate::error::Result<FieldReport> {
        let per_block: Vec<f64> = self
            .sinks
            .iter()
            .map(|&(s, n)| 100.0 * s as f64 / n.max(1) as f64)
            .collect();
        let (s, n) = self
            .sinks
            .iter()
            .fold((0, 0), |(a, b), &(s, n)| (a + s, b + n));
        let mut massive = Vec::with_capacity(self.blocks);
        for (b, (top, medians)) in self.top.iter().zip(&self.medians).enumerate() {
            let median = median(&mut medians.clone());
            let mut top = top.clone();
            for t in &mut top {
                t.token = token(t.window, t.position)?;
            }
            let largest = top.first().map_or(0.0, |t| t.value);
            massive.push(MassiveRow {
                block: b,
                median,
                top_over_median: largest / median.max(1e-30),
                massive: top
                    .iter()
                    .filter(|t| t.value > MASSIVE_MIN && t.value > MASSIVE_OVER_MEDIAN * median)
                    .count(),
                top,
            });
        }
        Ok(FieldReport {
            sink_metric: SinkMetric {
                eps: SINK_EPS,
                tokens: SINK_TOKENS,
                windows: self.windows,
                percent: 100.0 * s as f64 / n.max(1) as f64,
                per_block_percent: per_block,
            },
            massive_activations: MassiveActivations {
                min: MASSIVE_MIN,
                over_median: MASSIVE_OVER_MEDIAN,
                first_block: massive.iter().find(|r| r.massive > 0).map(|r| r.block),
                per_block: massive,
            },
        })
    }
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

impl Observer for FieldMetrics {
    fn begin(&mut self, pass: Pass) {
        if self.sinks.len() != pass.blocks {
            self.blocks = pass.blocks;
            self.sinks = vec![(0, 0); pass.blocks];
            self.top = vec![Vec::new(); pass.blocks];
            self.medians = vec![Vec::new(); pass.blocks];
        }
        self.tokens = pass.tokens;
        self.from_start = pass.past == 0;
        if self.from_start {
            self.windows += 1;
        }
    }

    fn attention(&mut self, p: &AttentionPattern) {
        if !self.from_start || p.block >= self.blocks {
            return;
        }
        let t = p.queries;
        let a: f64 = (0..t).map(|i| f64::from(p.probs[i * p.keys])).sum::<f64>() / t as f64;
        let s = &mut self.sinks[p.block];
        s.0 += usize::from(a > SINK_EPS);
        s.1 += 1;
    }

    fn sublayer_out(&mut self, block: usize, sub: usize, x: &[f32]) {
        if sub != 1 || !self.from_start || block >= self.blocks {
            return;
        }
        let d = x.len() / self.tokens.max(1);
        let mut mags: Vec<f64> = x.iter().map(|v| f64::from(v.abs())).collect();
        // The largest, largest first, ties to the earlier entry.
        let mut idx: Vec<usize> = (0..x.len()).collect();
        idx.sort_by(|&i, &j| mags[j].total_cmp(&mags[i]).then(i.cmp(&j)));
        let window = self.windows - 1;
        let top = &mut self.top[block];
        for &i in idx.iter().take(TOP_VALUES) {
            top.push(TopValue {
                value: mags[i],
                window,
                position: i / d.max(1),
                channel: i % d.max(1),
                token: String::new(),
            });
        }
        top.sort_by(|a, b| b.value.total_cmp(&a.value));
        top.truncate(TOP_VALUES);
        self.medians[block].push(median(&mut mags));
    }
}

/// Gu et al.'s Sink metric.
#[derive(Clone, Debug, Serialize)]
pub struct SinkMetric {
    /// The threshold on the first token's importance.
    pub eps: f64,
    /// The window length (a shorter held-out text gives shorter windows).
    pub tokens: usize,
    /// Windows measured.
    pub windows: usize,
    /// Sink^eps: the share of (window, layer, head) whose first-token
    /// importance exceeds eps, in percent.
    pub percent: f64,
    /// The same per block.
    pub per_block_percent: Vec<f64>,
}

/// Sun et al.'s measure of one layer's output.
#[derive(Clone, Debug, Serialize)]
pub struct MassiveRow {
    /// Block.
    pub block: usize,
    /// The largest magnitudes over every window, largest first.
    pub top: Vec<TopValue>,
    /// The median magnitude (the median over windows of each window's).
    pub median: f64,
    /// The largest over the median.
    pub top_over_median: f64,
    /// How many of the top values are massive (above 100 and 1000x the
    /// median).
    pub massive: usize,
}

/// Sun et al.'s massive activations.
#[derive(Clone, Debug, Serialize)]
pub struct MassiveActivations {
    /// The rule: above this magnitude ...
    pub min: f64,
    /// ... and this many times the median.
    pub over_median: f64,
    /// The first block whose output holds one (None: no block).
    pub first_block: Option<usize>,
    /// Per block.
    pub per_block: Vec<MassiveRow>,
}

/// The field's measures, as `inspect --json` writes them
/// (`field_metrics`).
#[derive(Clone, Debug, Serialize)]
pub struct FieldReport {
    /// Gu et al.
    pub sink_metric: SinkMetric,
    /// Sun et al.
    pub massive_activations: MassiveActivations,
}

/// The windows of `ids` the measures run on: [`SINK_TOKENS`] tokens each,
/// at most `max` of them (a shorter text: one window of all of it). When
/// `ids` begins with the model's `bos`, every window begins with it (as
/// each of Gu et al.'s texts does, tokenised on its own), followed by the
/// next 63 tokens.
pub fn sink_windows(ids: &[u32], bos: Option<u32>, max: usize) -> Vec<Vec<u32>> {
    bos_windows(ids, bos, SINK_TOKENS, max)
}

/// `ids` cut into at most `max` windows of `len` tokens (a text shorter
/// than `len`: one window of all of it), each beginning with `bos` when
/// `ids` does (then `bos` and `len - 1` tokens of the text).
pub fn bos_windows(ids: &[u32], bos: Option<u32>, len: usize, max: usize) -> Vec<Vec<u32>> {
    if ids.len() < len || len < 2 {
        return if ids.is_empty() {
            Vec::new()
        } else {
            vec![ids.to_vec()]
        };
    }
    match bos.filter(|b| ids.first() == Some(b)) {
        Some(b) => ids[1..]
            .chunks_exact(len - 1)
            .take(max)
            .map(|c| std::iter::once(b).chain(c.iter().copied()).collect())
            .collect(),
        None => ids
            .chunks_exact(len)
            .take(max)
            .map(<[u32]>::to_vec)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand computation on a 2-block, 2-head pattern of 4 queries.
    #[test]
    fn the_sink_metric_and_top_values_by_hand() {
        let mut f = FieldMetrics::default();
        f.begin(Pass {
            past: 0,
            tokens: 4,
            d: 2,
            blocks: 2,
            heads: 2,
        });
        // Head 0 of block 0: column 0 holds 1, 0.5, 0.1, 0.1: a = 1.7 / 4
        // = 0.425 > 0.3 (normlab's t >= 1 share: 0.233). Head 1: 1, 0, 0,
        // 0: a = 0.25, no sink.
        let p0 = [
            1.0f32, 0.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.1, 0.45, 0.45, 0.0, 0.1, 0.3, 0.3, 0.3,
        ];
        let mut p1 = [0f32; 16];
        for i in 0..4 {
            p1[i * 4 + i] = 1.0;
        }
        for (head, probs) in [(0, &p0[..]), (1, &p1[..])] {
            f.attention(&AttentionPattern {
                block: 0,
                head,
                probs,
                queries: 4,
                keys: 4,
                past: 0,
                window: None,
                max_logit: 0.0,
            });
        }
        // Block 1: both heads on position 0 everywhere.
        let mut p2 = [0f32; 16];
        for i in 0..4 {
            p2[i * 4] = 1.0;
        }
        for head in 0..2 {
            f.attention(&AttentionPattern {
                block: 1,
                head,
                probs: &p2,
                queries: 4,
                keys: 4,
                past: 0,
                window: None,
                max_logit: 0.0,
            });
        }
        let x = [1.0f32, -2.0, 300.0, 0.5, 0.25, -0.75, 1.5, 2.5];
        f.sublayer_out(0, 1, &x);
        f.sublayer_out(1, 1, &x);
        let r = f.report(|w, p| Ok(format!("{w}:{p}"))).unwrap();
        assert_eq!(r.sink_metric.per_block_percent, [50.0, 100.0]);
        assert_eq!(r.sink_metric.percent, 75.0);
        let m = &r.massive_activations.per_block[0];
        let tops: Vec<(f64, usize, usize)> = m
            .top
            .iter()
            .map(|t| (t.value, t.position, t.channel))
            .collect();
        assert_eq!(tops, [(300.0, 1, 0), (2.5, 3, 1), (2.0, 0, 1)]);
        assert_eq!(m.top[0].token, "0:1");
        // Median of the 8 magnitudes: (1 + 1.5) / 2.
        assert_eq!(m.median, 1.25);
        assert_eq!(m.massive, 0, "300 is not 1000x the median");
        assert_eq!(r.massive_activations.first_block, None);
    }

    #[test]
    fn windows_are_64_tokens_from_the_start() {
        let ids: Vec<u32> = (0..200).collect();
        let w = sink_windows(&ids, None, 10);
        assert_eq!(w.len(), 3);
        assert_eq!(w[1][0], 64);
        assert_eq!(sink_windows(&ids[..10], None, 10).len(), 1);
        assert!(sink_windows(&[], None, 10).is_empty());
        // Beginning with the BOS: each window does, then 63 tokens.
        let w = sink_windows(&ids, Some(0), 2);
        assert_eq!(w.len(), 2);
        assert_eq!((w[1][0], w[1][1], w[1].len()), (0, 64, 64));
        // A BOS the text does not begin with changes nothing.
        assert_eq!(sink_windows(&ids, Some(7), 10)[1][0], 64);
    }
}
