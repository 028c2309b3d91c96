//! The report `normlab inspect` writes for a decoder, and how it is put
//! together from measurements: the per-block rows summed over texts from
//! each text's [`DecoderTrace`] ([`TraceSum`]), the final norm's effect and
//! the logit lens from logits ([`FinalNormSum`], [`LensRow::measure`]), the
//! gains' statistics, and the lesson's claims from the rows
//! ([`ModelClaims::measure`]). `inspect.rs` feeds it from normlab's own
//! decoder; Python's `normlab.diagnose` feeds it from a PyTorch model's
//! forward hooks, so both write the same report.

pub use super::claims::{stream_growth, ChangedLosses, MassiveActivation, ModelClaims};
pub use super::row::DecoderLayerRow;
use super::DecoderTrace;
use crate::error::Result;

/// What the final RMSNorm does, measured on held-out text.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FinalNormEffect {
    /// Gain statistics: mean, std, min, max.
    pub gain: [f64; 4],
    /// Held-out tokens scored.
    pub tokens: usize,
    /// Held-out loss (nats/token) with the final norm.
    pub loss_with: f64,
    /// Without it (the head reads the raw residual stream).
    pub loss_without: f64,
    /// RMS of the logit change when it is removed, relative to the logits' RMS.
    pub logit_change: f64,
}

/// One kind of norm's gains over every block.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GainRow {
    /// Where the norm sits ("attention input", "QK-Norm on keys", ...).
    pub role: &'static str,
    /// The gain the model multiplies by: mean, std, min, max.
    pub gain: [f64; 4],
    /// For zero-centred gains (1 + w), w's mean, std, min, max.
    pub w: Option<[f64; 4]>,
}

/// The logit lens after one block: the block's output stream through the
/// final norm (its statistics recomputed on that stream) and the head.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LensRow {
    /// Block index.
    pub block: usize,
    /// Held-out loss (nats/token) read from this block's output.
    pub loss: f64,
    /// Share of positions whose top token is the model's final one.
    pub agrees: f64,
}

/// Everything [`inspect`] measures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Inspection {
    /// Per block.
    pub blocks: Vec<DecoderLayerRow>,
    /// What the final norm does.
    pub final_norm: FinalNormEffect,
    /// The lesson's claims on this model.
    pub claims: ModelClaims,
    /// Every kind of norm's gains.
    pub gains: Vec<GainRow>,
    /// The logit lens over the first [`LENS_TOKENS`] held-out predictions.
    pub lens: Vec<LensRow>,
    /// The largest |after - (before + write)| / max |after| over every
    /// sublayer and text: the write as added accounts for the change.
    pub sublayer_check: f64,
    /// The token at position 0 of each text (the attention sink's seat:
    /// BOS when the tokenizer adds one, else the text's first token).
    pub position0: Vec<String>,
    /// The field's measures as the papers define them (`field.rs`): Gu et
    /// al.'s Sink metric and Sun et al.'s massive activations, on 64-token
    /// windows of the held-out text (None: not measured).
    pub field: Option<super::field::FieldReport>,
}

impl Inspection {
    /// QK-Norm's effect over the blocks: the largest attention logit with
    /// the model's q/k norms, the largest from the same queries and keys
    /// without them (NaN for a model without QK-Norm), and in how many
    /// blocks the norms lower the block's largest logit.
    pub fn qk_norm_effect(&self) -> (f64, f64, usize) {
        let top = |g: fn(&DecoderLayerRow) -> f64| {
            self.blocks.iter().map(g).fold(f64::NEG_INFINITY, f64::max)
        };
        let raw = top(|r| r.attn_max_logit_raw);
        let lower = self
            .blocks
            .iter()
            .filter(|r| r.attn_max_logit < r.attn_max_logit_raw)
            .count();
        (
            top(|r| r.attn_max_logit),
            if raw.is_finite() { raw } else { f64::NAN },
            lower,
        )
    }
}

/// Held-out predictions the logit lens reads (each costs a vocabulary-wide
/// head per block).
pub const LENS_TOKENS: usize = 64;

/// Mean, std (population), min, max of a gain vector.
pub fn gain_stats(v: &[f32]) -> [f64; 4] {
    let n = v.len().max(1) as f64;
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    let std = (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
    let (mn, mx) = v
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x as f64), b.max(x as f64))
        });
    [mean, std, mn, mx]
}

/// Sum of the negative log-likelihoods of `targets` under `logits` (rows
/// of `vocab`, one per target).
pub fn nll_sum(logits: &[f32], vocab: usize, targets: &[u32]) -> f64 {
    let mut total = 0f64;
    add_nll(logits, vocab, targets, &mut total);
    total
}

/// Add each target's negative log-likelihood to `total`, one by one (a
/// running sum: the same bits however the rows are batched).
pub fn add_nll(logits: &[f32], vocab: usize, targets: &[u32], total: &mut f64) {
    for (row, &target) in logits.chunks_exact(vocab).zip(targets) {
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let lse = f64::from(m)
            + row
                .iter()
                .map(|&x| f64::from(x - m).exp())
                .sum::<f64>()
                .ln();
        *total += lse - f64::from(row[target as usize]);
    }
}

/// The top token of each row of `logits` (rows of `vocab`).
pub fn top_tokens(logits: &[f32], vocab: usize) -> Vec<usize> {
    logits.chunks_exact(vocab).map(argmax).collect()
}

impl LensRow {
    /// The lens row of `block` from its logits (rows of `vocab`) on
    /// `targets`, against the model's own top tokens `final_top`.
    pub fn measure(
        block: usize,
        logits: &[f32],
        vocab: usize,
        targets: &[u32],
        final_top: &[usize],
    ) -> LensRow {
        let same = top_tokens(logits, vocab)
            .iter()
            .zip(final_top)
            .filter(|(a, b)| a == b)
            .count();
        LensRow {
            block,
            loss: nll_sum(logits, vocab, targets) / targets.len() as f64,
            agrees: same as f64 / targets.len() as f64,
        }
    }
}

impl GainRow {
    /// The row of the norms at `role` whose gains (pooled over the blocks)
    /// are `g`; `zero_centred`: the model stores w and multiplies by 1 + w.
    pub fn of(role: &'static str, g: &[f32], zero_centred: bool) -> GainRow {
        let w = zero_centred.then(|| {
            let w: Vec<f32> = g.iter().map(|x| x - 1.0).collect();
            gain_stats(&w)
        });
        GainRow {
            role,
            gain: gain_stats(g),
            w,
        }
    }
}

/// The final norm's effect summed over held-out windows: each window's
/// logits with the final norm and without it (the head reading the raw
/// stream), the change on the first window.
#[derive(Default)]
pub struct FinalNormSum {
    with: f64,
    without: f64,
    n: usize,
    diff: f64,
    base: f64,
}

impl FinalNormSum {
    /// One window: logits with (`a`) and without (`b`) the final norm.
    pub fn add(&mut self, a: &[f32], b: &[f32], vocab: usize, targets: &[u32]) {
        if self.n == 0 {
            self.diff = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
            self.base = a.iter().map(|&x| f64::from(x).powi(2)).sum();
        }
        add_nll(a, vocab, targets, &mut self.with);
        add_nll(b, vocab, targets, &mut self.without);
        self.n += targets.len();
    }

    /// The effect, with the final norm's gain `gain`.
    pub fn finish(&self, gain: &[f32]) -> FinalNormEffect {
        let n = self.n.max(1) as f64;
        FinalNormEffect {
            gain: gain_stats(gain),
            tokens: self.n,
            loss_with: self.with / n,
            loss_without: self.without / n,
            logit_change: (self.diff / self.base.max(1e-30)).sqrt(),
        }
    }
}

/// Each text's [`DecoderTrace`] summed into the per-block rows: means over
/// the texts, maxima for the maxima.
pub struct TraceSum {
    /// Per block: rms in, after attention, out, max |x|, attention write,
    /// MLP write, max logit, entropy, smallest mean square, |x̂ mean|, raw
    /// max logit.
    sum: Vec<[f64; 11]>,
    /// Per block: the lesson's metric in and out, the median token norm.
    norms: Vec<[f64; 3]>,
    max_at: Vec<(usize, usize, usize)>,
    /// Per block: sink share and its uniform baseline (sums over texts),
    /// the largest max/median ratio and FFN value (over texts).
    extra: Vec<[f64; 4]>,
    sink_texts: Vec<usize>,
    sublayer_check: f64,
    count: usize,
}

impl TraceSum {
    /// An empty sum over `layers` blocks.
    pub fn new(layers: usize) -> TraceSum {
        let mut sum = vec![[0f64; 11]; layers];
        for s in &mut sum {
            s[8] = f64::INFINITY;
            s[10] = f64::NAN;
        }
        TraceSum {
            sum,
            norms: vec![[0f64; 3]; layers],
            max_at: vec![(0, 0, 0); layers],
            extra: vec![[0f64; 4]; layers],
            sink_texts: vec![0; layers],
            sublayer_check: 0.0,
            count: 0,
        }
    }

    /// Text `ti`'s trace (a pass over all its tokens).
    pub fn add(&mut self, ti: usize, tr: &DecoderTrace) -> Result<()> {
        if tr.rms_out.len() != self.sum.len() {
            return Err(format!(
                "the pass recorded {} blocks, the model has {}",
                tr.rms_out.len(),
                self.sum.len()
            )
            .into());
        }
        for (i, e) in self.extra.iter_mut().enumerate() {
            // A text with no query past position 0 has no sink share.
            if tr.attn_sink[i].is_finite() {
                e[0] += tr.attn_sink[i];
                e[1] += tr.attn_sink_uniform[i];
                self.sink_texts[i] += 1;
            }
            e[2] = e[2].max(tr.max_abs[i] / tr.median_abs[i]);
            e[3] = crate::params::nan_max([e[3], tr.ffn_max[i]]);
        }
        for (i, s) in self.sum.iter_mut().enumerate() {
            s[0] += tr.rms_in[i];
            s[1] += tr.rms_attn[i];
            s[2] += tr.rms_out[i];
            if tr.max_abs[i] > s[3] {
                self.max_at[i] = (ti, tr.max_at[i].0, tr.max_at[i].1);
            }
            let n = &mut self.norms[i];
            n[0] += tr.row_norm_in[i];
            n[1] += tr.row_norm_out[i];
            n[2] += tr.row_norm_median_out[i];
            s[3] = s[3].max(tr.max_abs[i]);
            s[4] += tr.attn_write[i];
            s[5] += tr.mlp_write[i];
            s[6] = s[6].max(tr.attn_max_logit[i]);
            s[7] += tr.attn_entropy[i];
            s[8] = s[8].min(tr.ms_min[i]);
            s[9] += tr.xhat_mean[i];
            // (NaN without QK-Norm: f64::max keeps the number when there is one)
            s[10] = s[10].max(tr.attn_max_logit_raw[i]);
        }
        for st in &tr.sublayers {
            self.sublayer_check = self.sublayer_check.max(st.check);
        }
        self.count += 1;
        Ok(())
    }

    /// The largest |after - (before + write)| / max |after| over every
    /// sublayer and text.
    pub fn sublayer_check(&self) -> f64 {
        self.sublayer_check
    }

    /// The rows, with each block's attention and MLP gain statistics from
    /// `gains`.
    pub fn rows(
        &self,
        gains: impl Fn(usize) -> ([f64; 4], [f64; 4]),
    ) -> Result<Vec<DecoderLayerRow>> {
        if self.count == 0 {
            return Err("no text produced any token".to_string().into());
        }
        let c = self.count as f64;
        Ok(self
            .sum
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let (attn_gain, mlp_gain) = gains(i);
                let (n, e, texts) = (self.norms[i], self.extra[i], self.sink_texts[i] as f64);
                DecoderLayerRow {
                    layer: i,
                    rms_in: s[0] / c,
                    rms_attn: s[1] / c,
                    rms_out: s[2] / c,
                    max_abs: s[3],
                    max_at: self.max_at[i],
                    row_norm_in: n[0] / c,
                    row_norm_out: n[1] / c,
                    row_norm_median_out: n[2] / c,
                    attn_write: s[4] / c,
                    mlp_write: s[5] / c,
                    attn_max_logit: s[6],
                    attn_max_logit_raw: s[10],
                    attn_entropy: s[7] / c,
                    attn_sink: e[0] / texts,
                    attn_sink_uniform: e[1] / texts,
                    max_over_median: e[2],
                    ffn_max: e[3],
                    attn_gain,
                    mlp_gain,
                    ms_min: s[8],
                    xhat_mean: s[9] / c,
                }
            })
            .collect())
    }
}

impl Inspection {
    /// The report `normlab inspect --json` writes: `head`'s fields (what
    /// the model is) and the inspection's.
    pub fn to_json(
        &self,
        mut head: serde_json::Map<String, serde_json::Value>,
    ) -> Result<serde_json::Value> {
        let to = |v: serde_json::Result<serde_json::Value>| v.map_err(|e| e.to_string());
        head.insert("blocks".into(), to(serde_json::to_value(&self.blocks))?);
        head.insert(
            "final_norm".into(),
            to(serde_json::to_value(&self.final_norm))?,
        );
        head.insert("claims".into(), to(serde_json::to_value(&self.claims))?);
        head.insert("gains".into(), to(serde_json::to_value(&self.gains))?);
        head.insert("logit_lens".into(), to(serde_json::to_value(&self.lens))?);
        head.insert("sublayer_check".into(), self.sublayer_check.into());
        head.insert(
            "position0".into(),
            to(serde_json::to_value(&self.position0))?,
        );
        if let Some(f) = &self.field {
            head.insert("field_metrics".into(), to(serde_json::to_value(f))?);
        }
        Ok(serde_json::Value::Object(head))
    }
}

/// Index of the largest value (the first on ties).
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}
