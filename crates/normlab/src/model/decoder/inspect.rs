//! What `normlab inspect` and `exp llm` report for a pretrained decoder
//! (SmolLM2, Gemma 3): per-block rows (residual stream, activations,
//! attention with and without QK-Norm, gains), every norm's gains (w and
//! 1 + w for zero-centred ones), the logit lens, the final norm's effect on
//! held-out loss, and the lesson's claims measured on the model.

use super::{Decoder, DecoderTrace};
use crate::error::Result;
use crate::kernels::norm::NormKind;

/// One layer's row of `normlab inspect` for a decoder: means over the
/// texts (maxima for the maxima).
#[derive(Clone, Debug, serde::Serialize)]
pub struct DecoderLayerRow {
    /// Block index.
    pub layer: usize,
    /// RMS of the residual stream entering the block.
    pub rms_in: f64,
    /// After the attention write.
    pub rms_attn: f64,
    /// After the MLP write.
    pub rms_out: f64,
    /// Largest |activation| of the stream after the block (massive activations).
    pub max_abs: f64,
    /// Where it is: (text, position, channel).
    pub max_at: (usize, usize, usize),
    /// The lesson's metric entering the block: the mean over tokens of
    /// each token's L2 norm.
    pub row_norm_in: f64,
    /// The same after the block.
    pub row_norm_out: f64,
    /// The median over tokens of each token's norm after the block (mean
    /// over texts).
    pub row_norm_median_out: f64,
    /// ||attention write|| / ||stream||.
    pub attn_write: f64,
    /// ||MLP write|| / ||stream||.
    pub mlp_write: f64,
    /// Largest attention logit.
    pub attn_max_logit: f64,
    /// The largest logit the same queries and keys give without QK-Norm
    /// (NaN, null in JSON, for a model without it).
    pub attn_max_logit_raw: f64,
    /// Mean attention entropy (nats).
    pub attn_entropy: f64,
    /// The attention sink: position 0's share of attention over heads and
    /// the queries past it (mean over texts).
    pub attn_sink: f64,
    /// What uniform attention would give position 0 over the same queries.
    pub attn_sink_uniform: f64,
    /// The largest |x| after the block over the median |x| (the largest
    /// over texts; the massive-activation rule: above 1000 and |x| > 100).
    pub max_over_median: f64,
    /// The feed-forward's largest |act(gate) x up| (over texts).
    pub ffn_max: f64,
    /// The attention sublayer's norm gain (its input norm's; OLMo 2: its
    /// output norm's): mean, std, min, max.
    pub attn_gain: [f64; 4],
    /// The MLP sublayer's norm gain, likewise.
    pub mlp_gain: [f64; 4],
    /// Smallest mean square of a row entering any of the block's norms
    /// (the last block's includes the final norm).
    pub ms_min: f64,
    /// Mean over rows of |row mean of `x / rms(x)`| at the attention norm.
    pub xhat_mean: f64,
}

/// The lesson's claims measured on the model (not yet a
/// registered experiment).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ModelClaims {
    /// C3, on the lesson's metric (the mean over tokens of each token's
    /// norm): the stream after the last block over the stream entering
    /// block 1 (block 0 lifts the small embeddings and is left out).
    pub growth_total: f64,
    /// C3: the geometric mean growth per block over the same span.
    pub growth_per_block: f64,
    /// C3: blocks (of 1..L) after which the stream is larger.
    pub blocks_growing: usize,
    /// C3: the largest one-block growth factor, and its block.
    pub largest_jump: (f64, usize),
    /// The same four on the RMS over all elements of all tokens, which one
    /// token's massive activation dominates.
    pub rms_growth_total: f64,
    /// See `rms_growth_total`.
    pub rms_growth_per_block: f64,
    /// See `rms_growth_total`.
    pub rms_blocks_growing: usize,
    /// See `rms_growth_total`.
    pub rms_largest_jump: (f64, usize),
    /// The largest |activation| anywhere in the stream.
    pub massive: MassiveActivation,
    /// C6: the largest mean |row mean of x / rms(x)| over the blocks.
    pub xhat_mean_max_abs: f64,
    /// C8: the smallest row mean square entering any norm, over eps.
    pub ms_min_over_eps: f64,
    /// C21 reversed: held-out loss with every RMSNorm replaced by a
    /// LayerNorm keeping its gain (and the loss with the model's own); in
    /// a LayerNorm model (GPT-2, GPT-NeoX) the other way round, every
    /// LayerNorm replaced by an RMSNorm keeping gain and bias:
    /// [`ModelClaims::swapped_norm`] says which.
    pub loss_layernorm: f64,
    /// The norm every block and final norm became for
    /// [`ModelClaims::loss_layernorm`].
    pub swapped_norm: String,
    /// C8: held-out loss with every norm's eps taken out (1e-30 in its
    /// place), against the model's own loss.
    pub loss_without_eps: f64,
}

/// The largest activation of the residual stream over the texts: its size,
/// where it sits, and from which block on it is there.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MassiveActivation {
    /// |value|.
    pub value: f64,
    /// The block after which it is largest.
    pub block: usize,
    /// The first block after which the stream holds a value of at least
    /// half of it.
    pub from_block: usize,
    /// Text index, position and channel.
    pub text: usize,
    /// Position in the text (0 = its first token).
    pub position: usize,
    /// The token there.
    pub token: String,
    /// Channel.
    pub channel: usize,
    /// Its size over f16's largest finite value (65504).
    pub of_f16_max: f64,
    /// Its size over the mean token norm after that block.
    pub over_mean_token_norm: f64,
}

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

/// Mean, std, min, max of a gain vector (the statistics `bert::stats` computes).
fn gain_stats(g: &[f32]) -> [f64; 4] {
    let s = crate::model::bert::stats(g);
    [s["mean"], s["std"], s["min"], s["max"]]
}

/// Per-layer diagnostics over `texts`, and the final norm's effect on
/// `held_out` (at most `max_tokens` tokens).
pub fn inspect(
    m: &mut Decoder,
    texts: &[String],
    held_out: &str,
    max_tokens: usize,
) -> Result<Inspection> {
    let l = m.cfg.layers;
    let mut sum = vec![[0f64; 11]; l];
    for s in &mut sum {
        s[8] = f64::INFINITY;
        s[10] = f64::NAN;
    }
    let mut sublayer_check = 0f64;
    let mut count = 0usize;
    let (mut row_in, mut row_out, mut row_med) = (vec![0f64; l], vec![0f64; l], vec![0f64; l]);
    let mut max_at = vec![(0usize, 0usize, 0usize); l];
    let mut ids_of = Vec::new();
    // Per block: sink share, its uniform baseline (sums over texts), the
    // largest max/median ratio and FFN value (over texts).
    let mut extra = vec![[0f64; 4]; l];
    let mut sink_texts = vec![0usize; l];
    for (ti, text) in texts.iter().enumerate() {
        let ids = m.encode(text)?;
        ids_of.push(ids.clone());
        if ids.is_empty() {
            continue;
        }
        let mut tr = DecoderTrace::default();
        m.observe(&ids, &mut tr)?;
        for (i, e) in extra.iter_mut().enumerate() {
            // A text with no query past position 0 has no sink share.
            if tr.attn_sink[i].is_finite() {
                e[0] += tr.attn_sink[i];
                e[1] += tr.attn_sink_uniform[i];
                sink_texts[i] += 1;
            }
            e[2] = e[2].max(tr.max_abs[i] / tr.median_abs[i]);
            e[3] = crate::params::nan_max([e[3], tr.ffn_max[i]]);
        }
        for (i, s) in sum.iter_mut().enumerate() {
            s[0] += tr.rms_in[i];
            s[1] += tr.rms_attn[i];
            s[2] += tr.rms_out[i];
            if tr.max_abs[i] > s[3] {
                max_at[i] = (ti, tr.max_at[i].0, tr.max_at[i].1);
            }
            row_in[i] += tr.row_norm_in[i];
            row_out[i] += tr.row_norm_out[i];
            row_med[i] += tr.row_norm_median_out[i];
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
            sublayer_check = sublayer_check.max(st.check);
        }
        count += 1;
    }
    if count == 0 {
        return Err("no text produced any token".to_string().into());
    }
    let c = count as f64;
    let rows = sum
        .iter()
        .enumerate()
        .map(|(i, s)| DecoderLayerRow {
            layer: i,
            rms_in: s[0] / c,
            rms_attn: s[1] / c,
            rms_out: s[2] / c,
            max_abs: s[3],
            max_at: max_at[i],
            row_norm_in: row_in[i] / c,
            row_norm_out: row_out[i] / c,
            row_norm_median_out: row_med[i] / c,
            attn_write: s[4] / c,
            mlp_write: s[5] / c,
            attn_max_logit: s[6],
            attn_max_logit_raw: s[10],
            attn_entropy: s[7] / c,
            attn_sink: extra[i][0] / sink_texts[i] as f64,
            attn_sink_uniform: extra[i][1] / sink_texts[i] as f64,
            max_over_median: extra[i][2],
            ffn_max: extra[i][3],
            attn_gain: gain_stats(sublayer_gain(
                &m.layers[i].attn_norm,
                &m.layers[i].attn_out_norm,
            )),
            mlp_gain: gain_stats(sublayer_gain(
                &m.layers[i].ffn_norm,
                &m.layers[i].ffn_out_norm,
            )),
            ms_min: s[8],
            xhat_mean: s[9] / c,
        })
        .collect::<Vec<_>>();
    let mut ids = m.encode(held_out)?;
    ids.truncate(max_tokens.saturating_add(1));
    if ids.len() < 2 {
        return Err("the held-out text has fewer than 2 tokens"
            .to_string()
            .into());
    }
    let window = 256;
    // One pass over the held-out windows: the loss with and without the
    // final norm from the same hidden states, and the logit change on the
    // first window.
    let (mut with, mut without, mut n) = (0f64, 0f64, 0usize);
    let (mut diff, mut base) = (0f64, 0f64);
    m.for_windows(&ids, window, m.cfg.norm, |h, targets| {
        let (a, b) = (m.logits_from(h, true), m.logits_from(h, false));
        if n == 0 {
            diff = a
                .iter()
                .zip(&b)
                .map(|(x, y)| f64::from(x - y).powi(2))
                .sum();
            base = a.iter().map(|&x| f64::from(x).powi(2)).sum();
        }
        m.add_nll(&a, targets, &mut with);
        m.add_nll(&b, targets, &mut without);
        n += targets.len();
    })?;
    let (loss_with, loss_without) = (with / n as f64, without / n as f64);
    let swapped = match m.cfg.norm {
        NormKind::LayerNorm => NormKind::RmsNorm,
        _ => NormKind::LayerNorm,
    };
    let span = &rows[1.min(rows.len() - 1)..];
    // Growth by a metric: (total, per block, blocks growing, largest jump).
    let growth = |inn: &dyn Fn(&DecoderLayerRow) -> f64, out: &dyn Fn(&DecoderLayerRow) -> f64| {
        let sizes: Vec<f64> = std::iter::once(inn(&span[0]))
            .chain(span.iter().map(out))
            .collect();
        let (total, per, growing) = stream_growth(&sizes);
        let jump = span
            .iter()
            .map(|r| (out(r) / inn(r).max(1e-30), r.layer))
            .fold((0.0, 0), |a, b| if b.0 > a.0 { b } else { a });
        (total, per, growing, jump)
    };
    let (growth_total, growth_per_block, blocks_growing, largest_jump) =
        growth(&|r| r.row_norm_in, &|r| r.row_norm_out);
    let (rms_growth_total, rms_growth_per_block, rms_blocks_growing, rms_largest_jump) =
        growth(&|r| r.rms_in, &|r| r.rms_out);
    let top = rows
        .iter()
        .fold(&rows[0], |a, r| if r.max_abs > a.max_abs { r } else { a });
    let (text, position, channel) = top.max_at;
    let massive = MassiveActivation {
        value: top.max_abs,
        block: top.layer,
        from_block: rows
            .iter()
            .find(|r| r.max_abs >= 0.5 * top.max_abs)
            .map_or(top.layer, |r| r.layer),
        text,
        position,
        token: m.decode(&ids_of[text][position..=position])?,
        channel,
        of_f16_max: top.max_abs / 65504.0,
        over_mean_token_norm: top.max_abs / top.row_norm_out.max(1e-30),
    };
    let claims = ModelClaims {
        growth_total,
        growth_per_block,
        blocks_growing,
        largest_jump,
        rms_growth_total,
        rms_growth_per_block,
        rms_blocks_growing,
        rms_largest_jump,
        massive,
        xhat_mean_max_abs: rows.iter().fold(0f64, |a, r| a.max(r.xhat_mean.abs())),
        ms_min_over_eps: rows.iter().fold(f64::INFINITY, |a, r| a.min(r.ms_min))
            / f64::from(m.cfg.eps),
        loss_layernorm: m.nll_kind(&ids, window, swapped, true)?,
        swapped_norm: swapped.name().to_string(),
        loss_without_eps: {
            // The model itself with eps taken out for one pass, then put back.
            let eps = std::mem::replace(&mut m.cfg.eps, 1e-30);
            let loss = m.nll_kind(&ids, window, m.cfg.norm, true);
            m.cfg.eps = eps;
            loss?
        },
    };
    let position0 = ids_of
        .iter()
        .filter(|ids| !ids.is_empty())
        .map(|ids| m.decode(&ids[..1]))
        .collect::<Result<Vec<_>>>()?;
    Ok(Inspection {
        position0,
        blocks: rows,
        final_norm: FinalNormEffect {
            gain: gain_stats(&m.final_norm),
            tokens: ids.len() - 1,
            loss_with,
            loss_without,
            logit_change: (diff / base.max(1e-30)).sqrt(),
        },
        claims,
        gains: gain_rows(m),
        lens: logit_lens(m, &ids[..ids.len().min(LENS_TOKENS + 1)])?,
        sublayer_check,
    })
}

/// A sublayer's norm gains for its row: the input norm's, or the output
/// norm's when it has no input norm (OLMo 2).
fn sublayer_gain<'a>(input: &'a Option<Vec<f32>>, output: &'a Option<Vec<f32>>) -> &'a [f32] {
    input.as_deref().or(output.as_deref()).unwrap_or(&[])
}

/// Every kind of norm's gains, pooled over the blocks.
fn gain_rows(m: &Decoder) -> Vec<GainRow> {
    let pooled = |f: &dyn Fn(&super::DecoderLayer) -> Option<&[f32]>| -> Option<Vec<f32>> {
        let v: Vec<f32> = m.layers.iter().filter_map(f).flatten().copied().collect();
        (!v.is_empty()).then_some(v)
    };
    let roles: [(&'static str, Option<Vec<f32>>); 7] = [
        ("attention input", pooled(&|b| b.attn_norm.as_deref())),
        ("attention output", pooled(&|b| b.attn_out_norm.as_deref())),
        (
            "QK-Norm on queries",
            pooled(&|b| b.qk_norm.as_ref().map(|q| &q.0[..])),
        ),
        (
            "QK-Norm on keys",
            pooled(&|b| b.qk_norm.as_ref().map(|q| &q.1[..])),
        ),
        ("MLP input", pooled(&|b| b.ffn_norm.as_deref())),
        ("MLP output", pooled(&|b| b.ffn_out_norm.as_deref())),
        ("final", Some(m.final_norm.clone())),
    ];
    roles
        .into_iter()
        .filter_map(|(role, g)| {
            let g = g?;
            let w = m.cfg.gain.zero_centred().then(|| {
                let w: Vec<f32> = g.iter().map(|x| x - 1.0).collect();
                gain_stats(&w)
            });
            Some(GainRow {
                role,
                gain: gain_stats(&g),
                w,
            })
        })
        .collect()
}

/// The logit lens on `ids`: each block's output stream through the final
/// norm, recomputed on that stream, and the head; the loss on the next
/// tokens and how often the top token is the model's final one.
fn logit_lens(m: &Decoder, ids: &[u32]) -> Result<Vec<LensRow>> {
    if ids.len() < 2 {
        return Ok(Vec::new());
    }
    let (inputs, targets) = (&ids[..ids.len() - 1], &ids[1..]);
    let mut tr = DecoderTrace::keeping_streams();
    m.observe(inputs, &mut tr)?;
    let v = m.cfg.vocab;
    let top =
        |logits: &[f32]| -> Vec<usize> { logits.chunks_exact(v).map(super::argmax).collect() };
    let last = m.logits_from(&tr.streams[m.cfg.layers], true);
    let final_top = top(&last);
    (0..m.cfg.layers)
        .map(|b| {
            let logits = if b + 1 == m.cfg.layers {
                last.clone()
            } else {
                m.logits_from(&tr.streams[b + 1], true)
            };
            let mut total = 0f64;
            m.add_nll(&logits, targets, &mut total);
            let same = top(&logits)
                .iter()
                .zip(&final_top)
                .filter(|(a, b)| a == b)
                .count();
            Ok(LensRow {
                block: b,
                loss: total / targets.len() as f64,
                agrees: same as f64 / targets.len() as f64,
            })
        })
        .collect()
}

/// How a residual stream grows over consecutive blocks, from `sizes` (its
/// size entering the first block, then after each block): the total factor,
/// its geometric mean per block, and how many blocks grow it.
pub fn stream_growth(sizes: &[f64]) -> (f64, f64, usize) {
    let blocks = sizes.len().saturating_sub(1).max(1);
    let total = sizes[sizes.len() - 1] / sizes[0].max(1e-30);
    let growing = sizes.windows(2).filter(|w| w[1] > w[0]).count();
    (total, total.powf(1.0 / blocks as f64), growing)
}

/// The held-out text of `normlab inspect` and `exp llm`: the last tenth of
/// the bundled Shakespeare (plain ASCII).
pub fn held_out_text() -> &'static str {
    let all = std::str::from_utf8(crate::io::BUNDLED_TEXT).expect("the bundled text is UTF-8");
    &all[all.len() * 9 / 10..]
}
