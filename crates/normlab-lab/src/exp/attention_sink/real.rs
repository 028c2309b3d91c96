//! attention-sink's pretrained models: SmolLM2's and Gemma 3's share of
//! attention on position 0 and their outliers, over lines of the bundled
//! text (when their files are present).

use super::cells::{mean, top};
use crate::exp::llm_models::{find, MODELS};
use normlab::error::Result;
use normlab::model::decoder::{Decoder, DecoderTrace};
use serde::Serialize;

/// A real model's sink and outliers over a few texts.
#[derive(Serialize)]
pub(super) struct RealSink {
    pub(super) model: &'static str,
    /// Position 0's share, mean over blocks (and texts).
    pub(super) sink: f64,
    /// The largest block's.
    pub(super) sink_max_block: f64,
    /// Uniform attention's share over the same queries.
    pub(super) uniform: f64,
    /// Largest |x| over the median |x| (largest block and text).
    pub(super) max_over_median: f64,
    /// The feed-forward's largest value.
    pub(super) ffn_max: f64,
    /// The tokens at position 0.
    pub(super) position0: Vec<String>,
}

/// Lines of the bundled text the pretrained models read.
pub(super) fn real_texts(quick: bool) -> usize {
    if quick {
        2
    } else {
        8
    }
}

pub(super) fn real_models(quick: bool) -> Result<Vec<RealSink>> {
    let texts = normlab::io::sample_sentences(real_texts(quick), 0, 53);
    let mut out = Vec::new();
    for rm in &MODELS {
        let Some(path) = find(rm.file) else { continue };
        let m = Decoder::load(&path)?;
        let l = m.cfg.layers;
        let (mut sink, mut uni) = (vec![0f64; l], vec![0f64; l]);
        let (mut ratio, mut ffn, mut n) = (0f64, 0f64, 0usize);
        let mut position0 = Vec::new();
        for t in &texts {
            let ids = m.encode(t)?;
            if ids.len() < 2 {
                continue;
            }
            let mut tr = DecoderTrace::default();
            m.observe(&ids, &mut tr)?;
            for b in 0..l {
                sink[b] += tr.attn_sink[b];
                uni[b] += tr.attn_sink_uniform[b];
                ratio = ratio.max(tr.max_abs[b] / tr.median_abs[b]);
            }
            ffn = normlab::train::nan_max([ffn, top(&tr.ffn_max)]);
            position0.push(m.decode(&ids[..1])?);
            n += 1;
        }
        if n == 0 {
            continue;
        }
        sink.iter_mut().for_each(|v| *v /= n as f64);
        position0.dedup();
        out.push(RealSink {
            model: rm.name,
            sink: mean(sink.iter().copied()),
            sink_max_block: top(&sink),
            uniform: mean(uni.iter().map(|v| v / n as f64)),
            max_over_median: ratio,
            ffn_max: ffn,
            position0,
        });
    }
    Ok(out)
}
