//! Sink and outlier diagnostics of a training step (logged steps): per
//! block, the share of attention on position 0 (the attention sink, gpt),
//! the largest |x| in the stream after the block with its ratio to the
//! median |x| and its position in the sequence (massive activations: the
//! usual rule is above 100 and above 1000x the median), and the
//! feed-forward's largest |activation| (SwiGLU's gate times up, or GELU's
//! output), over every shard of the step's batch. With n streams the
//! stream is the whole n x d state; with Attention Residuals the sum of
//! each row's slots. A NaN anywhere makes the maximum NaN.

use super::record::StepRecord;
use crate::model::sinks::{self, SinkStats};
use crate::model::{Model, ModelKind, Workspace};
use crate::nn::{Op, Residual};
use crate::params::nan_max;
use std::borrow::Cow;

/// The stream after `block` from its output: with Attention Residuals the
/// sum of each row's slots (what one plain stream would hold; the bank's
/// unwritten slots are zero), otherwise the output itself (n streams: the
/// whole n x d state).
fn stream<'a>(block: &crate::nn::Block, out: &'a [f32], d: usize) -> Cow<'a, [f32]> {
    match &block.mlp.res {
        Residual::Depth(a) => Cow::Owned(
            out.chunks_exact(a.at.slots * d)
                .flat_map(|row| (0..d).map(move |j| row.chunks_exact(d).map(|s| s[j]).sum::<f32>()))
                .collect(),
        ),
        _ => Cow::Borrowed(out),
    }
}

/// Fill `rec`'s sink and outlier fields from the step's forward.
pub(super) fn fill(model: &Model, shards: &[Workspace], seq: usize, rec: &mut StepRecord) {
    let gpt = model.cfg.kind == ModelKind::Gpt;
    for (b, block) in model.blocks.iter().enumerate() {
        if gpt {
            let sinks: Vec<f64> = shards
                .iter()
                .filter_map(|w| w.blocks[b].mix.attention())
                .map(|c| c.sink_share())
                .collect();
            rec.attn_sink
                .push(sinks.iter().sum::<f64>() / sinks.len().max(1) as f64);
        }
        let mut over = 0u64;
        if let Op::Mlp(m) = &block.mlp.op {
            let ext: Vec<(f64, u64)> = shards
                .iter()
                .filter_map(|w| w.blocks[b].mlp.mlp())
                .map(|c| m.activation_extremes(c))
                .collect();
            rec.ffn_max.push(nan_max(ext.iter().map(|e| e.0)));
            over += ext.iter().map(|e| e.1).sum::<u64>();
        }
        let mut all: Vec<f32> = Vec::new();
        let (mut top, mut at) = (0f32, 0usize);
        for w in shards {
            let x = stream(block, w.blocks[b].output(), model.cfg.d_model);
            let per_token = x.len() / (w.tokens.len().max(1));
            for (i, v) in x.iter().enumerate() {
                if v.abs() > top || v.is_nan() {
                    top = v.abs();
                    at = (i / per_token.max(1)) % seq;
                }
            }
            all.extend(x.iter().map(|v| v.abs()));
            over += crate::precision::beyond_f16(&x);
        }
        rec.f16_overflow.push(over);
        let median = if all.is_empty() {
            f64::NAN
        } else {
            let mid = all.len() / 2;
            f64::from(*all.select_nth_unstable_by(mid, f32::total_cmp).1)
        };
        rec.stream_max.push(f64::from(top));
        rec.stream_max_ratio.push(f64::from(top) / median);
        rec.stream_max_position.push(at);
    }
}

/// The sink measures ([`SinkStats`]) of the step's forward, over every
/// shard's sequences; each block's stream as in [`fill`].
pub(super) fn sinks(model: &Model, shards: &[Workspace]) -> SinkStats {
    let (d, heads) = (model.cfg.d_model, model.cfg.heads);
    let mut st = SinkStats::default();
    let mut t_seen = 0;
    let (mut gu_over, mut gu_n) = (0usize, 0usize);
    for (b, block) in model.blocks.iter().enumerate() {
        let (mut share, mut drain, mut n) = (vec![0f64; heads], vec![0f64; heads], 0usize);
        for c in shards.iter().filter_map(|w| w.blocks[b].mix.attention()) {
            let (batch, t) = c.shape();
            t_seen = t;
            let probs = c.probs();
            for s in 0..batch {
                for h in 0..heads {
                    let p = &probs[(s * heads + h) * t * t..(s * heads + h + 1) * t * t];
                    share[h] += sinks::first_share(p, t, c.kind().normalised());
                    let a = sinks::first_importance(p, t, c.kind().normalised());
                    gu_over += usize::from(a > sinks::SINK_EPS);
                    gu_n += 1;
                    drain[h] += sinks::value_drain(|j| c.value(s * t + j, h), t);
                }
                n += 1;
            }
        }
        let n = n.max(1) as f64;
        st.head_share.push(share.iter().map(|v| v / n).collect());
        st.value_drain.push(drain.iter().map(|v| v / n).collect());
        let parts: Vec<(Cow<[f32]>, usize)> = shards
            .iter()
            .map(|w| {
                let x = stream(block, w.blocks[b].output(), d);
                let width = x.len() / w.tokens.len().max(1);
                (x, width)
            })
            .collect();
        let top = sinks::position0_ratio(
            parts
                .iter()
                .zip(shards)
                .map(|((x, width), w)| (&x[..], *width, w.t)),
        );
        st.massive0.push(top);
        st.top_over_median.push(sinks::top_ratio(
            parts
                .iter()
                .zip(shards)
                .map(|((x, width), w)| (&x[..], *width, w.t)),
        ));
    }
    st.sink_metric = if gu_n == 0 {
        f64::NAN
    } else {
        gu_over as f64 / gu_n as f64
    };
    st.uniform = crate::nn::uniform_sink_share(t_seen);
    st.sink_rate = sinks::sink_rate(st.head_share.iter().flatten());
    st
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelConfig;
    use crate::nn::uniform_sink_share;

    /// With q = k = 0 every query attends uniformly: position 0's share is
    /// the uniform baseline; every block gets one value of each measure,
    /// with Attention Residuals too (their bank's empty slots are not the
    /// stream: its median stays positive).
    #[test]
    fn uniform_attention_gives_the_uniform_sink_share() {
        for attnres in [None, Some(1)] {
            check_uniform(attnres);
        }
    }

    fn check_uniform(attnres: Option<usize>) {
        let mut c = ModelConfig::gpt();
        c.attnres = attnres;
        c.layers = 2;
        c.d_model = 16;
        c.heads = 2;
        c.seq = 12;
        c.hidden = 32;
        let model = Model::new(&c).unwrap();
        let mut params = model.init_params(3).to_vec();
        for b in &model.blocks {
            if let Op::Attention(a) = &b.mix.op {
                a.qkv.w.get_mut(&mut params).fill(0.0);
            }
        }
        let mut ws = model.workspace(2, c.seq);
        for (i, t) in ws.tokens.iter_mut().enumerate() {
            *t = (i * 13 % 256) as u32;
        }
        model.forward(&params, &mut ws);
        let mut rec: StepRecord = serde_json::from_str(
            r#"{"step":1,"loss":1.0,"lr":0.001,"grad_norm":1.0,"grad_norm_per_block":[],"residual_rms":[],"update_ratio":null,"update_ratio_per_block":[],"eval_loss":null}"#,
        )
        .unwrap();
        fill(&model, std::slice::from_ref(&ws), c.seq, &mut rec);
        for s in &rec.attn_sink {
            assert!((s - uniform_sink_share(c.seq)).abs() < 1e-6, "{s}");
        }
        assert_eq!(rec.ffn_max.len(), 2);
        assert_eq!(rec.f16_overflow, [0, 0]);
        assert_eq!(rec.stream_max_position.len(), 2);
        assert!(
            rec.stream_max_ratio
                .iter()
                .all(|r| r.is_finite() && *r > 1.0),
            "{:?}",
            rec.stream_max_ratio
        );
    }
}
