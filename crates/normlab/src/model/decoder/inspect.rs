//! What `normlab inspect` and `exp llm` report for a pretrained decoder
//! (SmolLM2, Gemma 3): per-block rows (residual stream, activations,
//! attention with and without QK-Norm, gains), every norm's gains (w and
//! 1 + w for zero-centred ones), the logit lens, the final norm's effect on
//! held-out loss, and the lesson's claims measured on the model.

use super::field::{sink_windows, FieldMetrics};
use super::report::{
    gain_stats, top_tokens, ChangedLosses, FinalNormSum, GainRow, Inspection, LensRow, ModelClaims,
    TraceSum, LENS_TOKENS,
};
use super::{Decoder, DecoderTrace};
use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::model::intervene::Interventions;

/// Per-layer diagnostics over `texts`, and the final norm's effect on
/// `held_out` (at most `max_tokens` tokens).
pub fn inspect(
    m: &mut Decoder,
    texts: &[String],
    held_out: &str,
    max_tokens: usize,
) -> Result<Inspection> {
    let ids_of = texts
        .iter()
        .map(|t| m.encode(t))
        .collect::<Result<Vec<_>>>()?;
    let mut ids = m.encode(held_out)?;
    ids.truncate(max_tokens.saturating_add(1));
    inspect_ids(m, &ids_of, &ids)
}

/// [`inspect`] on token ids: `texts` for the per-layer rows, `held_out`
/// (at least 2 tokens) for the final norm, the logit lens and the claims'
/// losses. Without a tokenizer a token is named by its id (`#17`).
pub fn inspect_ids(m: &mut Decoder, texts: &[Vec<u32>], held_out: &[u32]) -> Result<Inspection> {
    if let Some(&bad) = texts
        .iter()
        .flatten()
        .chain(held_out)
        .find(|&&i| i as usize >= m.cfg.vocab)
    {
        return Err(format!("token id {bad} is outside the vocabulary ({})", m.cfg.vocab).into());
    }
    let mut sum = TraceSum::new(m.cfg.layers);
    for (ti, ids) in texts.iter().enumerate() {
        if ids.is_empty() {
            continue;
        }
        let mut tr = DecoderTrace::default();
        m.observe(ids, &mut tr)?;
        sum.add(ti, &tr)?;
    }
    let rows = sum.rows(|i| {
        let b = &m.layers[i];
        (
            gain_stats(sublayer_gain(&b.attn_norm, &b.attn_out_norm)),
            gain_stats(sublayer_gain(&b.ffn_norm, &b.ffn_out_norm)),
        )
    })?;
    let ids = held_out;
    if ids.len() < 2 {
        return Err("the held-out text has fewer than 2 tokens"
            .to_string()
            .into());
    }
    // Windows of 256 tokens, or of the whole context when it is shorter.
    let window = 256.min(m.cfg.context);
    // One pass over the held-out windows: the loss with and without the
    // final norm from the same hidden states, and the logit change on the
    // first window.
    let mut fin = FinalNormSum::default();
    m.for_windows_with(ids, window, &m.interventions, |h, targets| {
        let (a, b) = (m.logits_from(h, true), m.logits_from(h, false));
        fin.add(&a, &b, m.cfg.vocab, targets);
    })?;
    // C21 and C8 as interventions on top of the model's own: every norm
    // swapped to the other kind, and eps taken out (1e-30).
    let own = m.interventions.norm_kind.unwrap_or(m.cfg.norm);
    let swapped = match own {
        NormKind::LayerNorm => NormKind::RmsNorm,
        _ => NormKind::LayerNorm,
    };
    let changed = ChangedLosses {
        swapped: m.nll_with(
            ids,
            window,
            &Interventions {
                norm_kind: Some(swapped),
                ..m.interventions.clone()
            },
        )?,
        swapped_norm: swapped.name().to_string(),
        without_eps: m.nll_with(
            ids,
            window,
            &Interventions {
                eps: Some(1e-30),
                ..m.interventions.clone()
            },
        )?,
    };
    let claims = ModelClaims::measure(
        &rows,
        |t, p| token_text(m, texts[t][p]),
        f64::from(m.interventions.eps.unwrap_or(m.cfg.eps)),
        changed,
    )?;
    // The field's measures on 64-token windows of the held-out text.
    let windows = sink_windows(held_out, m.bos, FIELD_WINDOWS);
    let mut fm = FieldMetrics::default();
    for w in &windows {
        m.observe(w, &mut fm)?;
    }
    let field = fm.report(|w, p| token_text(m, windows[w][p]))?;
    let position0 = texts
        .iter()
        .filter(|ids| !ids.is_empty())
        .map(|ids| token_text(m, ids[0]))
        .collect::<Result<Vec<_>>>()?;
    Ok(Inspection {
        position0,
        blocks: rows,
        final_norm: fin.finish(&m.final_norm),
        claims,
        gains: gain_rows(m),
        lens: logit_lens(m, &ids[..ids.len().min(LENS_TOKENS + 1)])?,
        sublayer_check: sum.sublayer_check(),
        field: Some(field),
    })
}

/// Held-out windows of 64 tokens the field's measures run on.
pub const FIELD_WINDOWS: usize = 16;

/// What the model is, at the head of `normlab inspect --json`'s report
/// ([`Inspection::to_json`]): `model` (its path), its family and shape, its
/// configuration and its one-line description (the norms' placement in the
/// lesson's terms), how many texts the rows cover, the MLP clamp used and,
/// when the model was changed, `interventions` (one line per change).
pub fn report_head(
    m: &Decoder,
    model: &str,
    texts: usize,
) -> serde_json::Map<String, serde_json::Value> {
    let ffn_clamp = m.interventions.ffn_clamp;
    let c = &m.cfg;
    let mut h = serde_json::Map::new();
    h.insert("model".into(), model.into());
    h.insert("architecture".into(), c.family.clone().into());
    h.insert("layers".into(), c.layers.into());
    h.insert("d".into(), c.d.into());
    h.insert("heads".into(), c.heads.into());
    h.insert("kv_heads".into(), c.kv_heads.into());
    h.insert("eps".into(), c.eps.into());
    h.insert("rope_base".into(), c.rope_base().into());
    h.insert("config".into(), serde_json::to_value(c).unwrap_or_default());
    // Where the norms sit, in the lesson's terms.
    h.insert("description".into(), c.describe().into());
    h.insert("texts".into(), texts.into());
    h.insert("ffn_clamp".into(), ffn_clamp.into());
    if !m.interventions.is_empty() {
        h.insert("interventions".into(), m.interventions.describe().into());
    }
    h
}

/// A token's text, or `#id` for a model without a tokenizer.
fn token_text(m: &Decoder, id: u32) -> Result<String> {
    if m.tokenizer.is_none() {
        return Ok(format!("#{id}"));
    }
    m.decode(&[id])
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
    let zc = m.cfg.gain.zero_centred();
    roles
        .into_iter()
        .filter_map(|(role, g)| Some(GainRow::of(role, &g?, zc)))
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
    let last = m.logits_from(&tr.streams[m.cfg.layers], true);
    let final_top = top_tokens(&last, v);
    Ok((0..m.cfg.layers)
        .map(|b| {
            let logits = if b + 1 == m.cfg.layers {
                last.clone()
            } else {
                m.logits_from(&tr.streams[b + 1], true)
            };
            LensRow::measure(b, &logits, v, targets, &final_top)
        })
        .collect())
}

/// The held-out text of `normlab inspect` and `exp llm`: the last tenth of
/// the bundled Shakespeare (plain ASCII).
pub fn held_out_text() -> &'static str {
    let all = std::str::from_utf8(crate::io::BUNDLED_TEXT).expect("the bundled text is UTF-8");
    &all[all.len() * 9 / 10..]
}
