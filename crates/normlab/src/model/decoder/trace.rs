//! What `normlab inspect`, the llm chapter and Python's traces record of a
//! decoder's forward pass ([`DecoderTrace`]): per block the residual
//! stream's size by the lesson's metric and by RMS, its largest value and
//! where it sits, each sublayer's write, the attention's largest logit
//! (with and without QK-Norm), entropy and first-position share, the
//! feed-forward's largest activation, the smallest mean square entering a
//! norm; per sublayer the stream before, the write and the stream after.
//! It is an [`Observer`]: every number comes from the tensors the pass
//! hands to its hook points, so the forward itself computes only what
//! inference needs.

use super::heads::max_logit;
use crate::model::hooks::{AttentionPattern, Observer, Pass, QkGeometry};
use crate::model::stream_trace::SublayerTrace;
use crate::nn::norm::{mean_row_norm, rms};
use crate::nn::NormRole;

/// What a forward pass records per layer (for `normlab inspect`).
#[derive(Clone, Debug, Default)]
pub struct DecoderTrace {
    /// RMS of the residual stream entering each block.
    pub rms_in: Vec<f64>,
    /// RMS after the attention sublayer's write.
    pub rms_attn: Vec<f64>,
    /// RMS after the MLP sublayer's write (the block's output).
    pub rms_out: Vec<f64>,
    /// Largest |value| of the stream after each block.
    pub max_abs: Vec<f64>,
    /// Where it is: (position, channel), per block.
    pub max_at: Vec<(usize, usize)>,
    /// The lesson's metric of the stream entering each block: the mean over
    /// tokens of each token's L2 norm (`x.norm(dim=-1).mean()`), which one
    /// token's massive activation cannot dominate as it does the RMS.
    pub row_norm_in: Vec<f64>,
    /// The same after each block.
    pub row_norm_out: Vec<f64>,
    /// The median over tokens of each token's L2 norm after each block (the
    /// typical token, whatever one token holds).
    pub row_norm_median_out: Vec<f64>,
    /// ||attention write|| / ||stream it read||, per block.
    pub attn_write: Vec<f64>,
    /// ||MLP write|| / ||stream it read||, per block.
    pub mlp_write: Vec<f64>,
    /// Largest pre-softmax attention logit, per block.
    pub attn_max_logit: Vec<f64>,
    /// The same from the same queries and keys without QK-Norm (NaN for a
    /// model without it), over the keys of this pass.
    pub attn_max_logit_raw: Vec<f64>,
    /// Mean attention entropy (nats) over heads and positions, per block.
    pub attn_entropy: Vec<f64>,
    /// The attention sink: position 0's share of attention, averaged over
    /// heads and over the queries at positions 1 and on, per block (NaN
    /// when no query is past position 0).
    pub attn_sink: Vec<f64>,
    /// What a uniform attention would give it: the mean of 1/(t+1) over the
    /// same queries (0 for a query whose window has left position 0).
    pub attn_sink_uniform: Vec<f64>,
    /// The median |value| of the stream after each block.
    pub median_abs: Vec<f64>,
    /// The feed-forward's largest |act(gate) x up| (after any clamp), per
    /// block.
    pub ffn_max: Vec<f64>,
    /// Smallest mean square of a row entering any of the block's norms
    /// (input norms, QK-Norm's per-head rows, sandwich output norms; the
    /// last block's also the final norm's).
    pub ms_min: Vec<f64>,
    /// Mean over rows of |the row mean of `x / rms(x)`| at the attention
    /// norm (RMSNorm does not centre: LayerNorm's would be 0).
    pub xhat_mean: Vec<f64>,
    /// Per sublayer (two per block, in order): the stream before, the
    /// write as it is added, the stream after.
    pub sublayers: Vec<SublayerTrace>,
    /// Set before the pass to keep the whole stream (`[T, d]` per entry)
    /// in [`DecoderTrace::streams`].
    pub keep_streams: bool,
    /// With `keep_streams`: the stream entering each block, then the stream
    /// after the last block (before the final norm): transformers'
    /// `output_hidden_states` but for the last entry, which it records
    /// after the final norm ([`Decoder::final_normed`]).
    pub streams: Vec<Vec<f32>>,
    /// What the trace holds while a pass runs.
    run: Running,
}

impl DecoderTrace {
    /// A trace that also keeps the whole stream entering each block and
    /// after the last ([`DecoderTrace::streams`]).
    pub fn keeping_streams() -> DecoderTrace {
        DecoderTrace {
            keep_streams: true,
            ..DecoderTrace::default()
        }
    }
}

/// A pass's state between the hook points: the current block's
/// measurements until its last sublayer has written.
#[derive(Clone, Debug, Default)]
struct Running {
    past: usize,
    tokens: usize,
    d: usize,
    heads: usize,
    /// The stream before the current sublayer, and its write.
    before: Vec<f32>,
    write: Vec<f32>,
    rms_in: f64,
    rms_attn: f64,
    xhat_mean: f64,
    row_norm_in: f64,
    ms_block: f64,
    attn_write: f64,
    mlp_write: f64,
    max_logit: f64,
    raw_max_logit: f64,
    entropy: f64,
    sink: f64,
    window: Option<usize>,
    ffn_max: f64,
}

impl Observer for DecoderTrace {
    fn begin(&mut self, pass: Pass) {
        self.run = Running {
            past: pass.past,
            tokens: pass.tokens,
            d: pass.d,
            heads: pass.heads,
            ..Running::default()
        };
    }

    fn sublayer_in(&mut self, _block: usize, sub: usize, x: &[f32]) {
        let r = &mut self.run;
        if sub == 0 {
            if self.keep_streams {
                self.streams.push(x.to_vec());
            }
            let (ms_min, xhat_mean) = row_stats(x, r.d);
            r.rms_in = rms(x);
            r.xhat_mean = xhat_mean;
            r.ms_block = ms_min;
            r.row_norm_in = mean_row_norm(x, r.d);
            r.max_logit = f64::NEG_INFINITY;
            r.raw_max_logit = f64::NAN;
            r.entropy = 0.0;
            r.sink = 0.0;
            // What an observer fed from outside may not know (a block
            // whose stream between its sublayers is hidden): unmeasured.
            (r.rms_attn, r.attn_write, r.mlp_write, r.ffn_max) =
                (f64::NAN, f64::NAN, f64::NAN, f64::NAN);
        } else {
            r.rms_attn = rms(x);
            r.ms_block = r.ms_block.min(row_stats(x, r.d).0);
        }
        r.before.clear();
        r.before.extend_from_slice(x);
        r.write.clear();
    }

    fn norm_input(&mut self, _block: usize, role: NormRole, x: &[f32], width: usize) {
        // The input norms' rows are the stream's, counted at sublayer_in.
        if role != NormRole::In {
            self.run.ms_block = self.run.ms_block.min(row_stats(x, width).0);
        }
    }

    fn queries_keys(&mut self, _block: usize, q: &[f32], k: &[f32], g: &QkGeometry) {
        // The largest logit the same queries and keys give without
        // QK-Norm, rotated alike.
        let (mut rq, mut rk) = (q.to_vec(), k.to_vec());
        (g.rotate)(&mut rq, g.heads);
        (g.rotate)(&mut rk, g.kv_heads);
        self.run.raw_max_logit = max_logit(
            &rq,
            &rk,
            g.tokens,
            (g.heads, g.kv_heads, g.head_dim),
            g.scale,
            g.window,
        );
    }

    fn attention(&mut self, p: &AttentionPattern) {
        // Per head, as one sum each: its entropy over every query, and
        // position 0's share over the queries past it.
        let (mut entropy, mut sink) = (0f64, 0f64);
        for i in 0..p.queries {
            let (from, seen) = p.seen_by(i);
            let row = &p.probs[i * p.keys..(i + 1) * p.keys];
            for &pj in row[from..seen].iter().filter(|&&pj| pj > 0.0) {
                entropy -= f64::from(pj) * f64::from(pj).ln();
            }
            if seen > 1 && from == 0 {
                sink += f64::from(row[0]);
            }
        }
        let r = &mut self.run;
        r.sink += sink;
        r.max_logit = r.max_logit.max(p.max_logit);
        r.entropy += entropy;
        r.window = p.window;
    }

    fn mlp_hidden(&mut self, _block: usize, h: &[f32]) {
        self.run.ffn_max = crate::params::nan_max(h.iter().map(|v| f64::from(v.abs())));
    }

    fn write(&mut self, _block: usize, sub: usize, w: &[f32]) {
        let r = &mut self.run;
        let read = if sub == 0 { r.rms_in } else { r.rms_attn };
        let ratio = rms(w) / read.max(1e-30);
        if sub == 0 {
            r.attn_write = ratio;
        } else {
            r.mlp_write = ratio;
        }
        r.write.clear();
        r.write.extend_from_slice(w);
    }

    fn sublayer_out(&mut self, block: usize, sub: usize, h: &[f32]) {
        let r = &self.run;
        // (Only when this sublayer's stream before and write were given.)
        if r.before.len() == h.len() && r.write.len() == h.len() {
            self.sublayers
                .push(SublayerTrace::of(block, sub, &r.before, &r.write, h));
        }
        if sub == 0 {
            return;
        }
        let d = r.d;
        let (at, _) =
            h.iter().enumerate().fold(
                (0, 0f32),
                |(i, m), (j, &x)| {
                    if x.abs() > m {
                        (j, x.abs())
                    } else {
                        (i, m)
                    }
                },
            );
        self.max_at.push((r.past + at / d, at % d));
        self.row_norm_in.push(r.row_norm_in);
        self.row_norm_out.push(mean_row_norm(h, d));
        self.row_norm_median_out.push(median_row_norm(h, d));
        self.rms_in.push(r.rms_in);
        self.rms_attn.push(r.rms_attn);
        self.rms_out.push(rms(h));
        self.max_abs
            .push(h.iter().fold(0f64, |m, &x| m.max(f64::from(x.abs()))));
        self.attn_write.push(r.attn_write);
        self.mlp_write.push(r.mlp_write);
        self.attn_max_logit.push(r.max_logit);
        self.attn_max_logit_raw.push(r.raw_max_logit);
        self.attn_entropy
            .push(r.entropy / (r.heads * r.tokens) as f64);
        let (share, uniform) = sink_baseline(r.past, r.tokens, r.window);
        self.attn_sink.push(r.sink / (r.heads as f64 * share));
        self.attn_sink_uniform.push(uniform / share);
        self.median_abs.push(median_abs(h));
        self.ffn_max.push(r.ffn_max);
        self.ms_min.push(r.ms_block);
        self.xhat_mean.push(r.xhat_mean);
    }

    fn final_stream(&mut self, h: &[f32]) {
        // The last block's smallest mean square includes the final norm's
        // rows.
        let ms = row_stats(h, self.run.d).0;
        if let Some(last) = self.ms_min.last_mut() {
            *last = last.min(ms);
        }
        if self.keep_streams {
            self.streams.push(h.to_vec());
        }
    }
}

/// Over the queries of a pass (positions `past..past + t`) that are past
/// position 0: how many there are (as f64; NaN when none, so that a share
/// over them is NaN) and the sum of what a uniform attention gives position
/// 0 (1/(t+1) for the query at t, 0 once its window has left position 0).
fn sink_baseline(past: usize, t: usize, window: Option<usize>) -> (f64, f64) {
    let (mut n, mut u) = (0usize, 0f64);
    for pos in (past..past + t).filter(|&p| p >= 1) {
        n += 1;
        if window.is_none_or(|w| pos < w) {
            u += 1.0 / (pos + 1) as f64;
        }
    }
    (if n == 0 { f64::NAN } else { n as f64 }, u)
}

/// The median of |x| (NaN when empty).
fn median_abs(x: &[f32]) -> f64 {
    if x.is_empty() {
        return f64::NAN;
    }
    let mut a: Vec<f32> = x.iter().map(|v| v.abs()).collect();
    let m = a.len() / 2;
    let (_, v, _) = a.select_nth_unstable_by(m, f32::total_cmp);
    f64::from(*v)
}

/// Median L2 norm of the rows of a `[rows, d]` matrix.
fn median_row_norm(x: &[f32], d: usize) -> f64 {
    let mut n: Vec<f64> = x
        .chunks_exact(d)
        .map(|r| crate::params::sum_squares(r).sqrt())
        .collect();
    n.sort_by(f64::total_cmp);
    match n.len() {
        0 => 0.0,
        k if k % 2 == 1 => n[k / 2],
        k => 0.5 * (n[k / 2 - 1] + n[k / 2]),
    }
}

/// Per row of `[rows, d]`: the smallest mean square, and the mean over rows
/// of |the row mean of `x / rms(x)`|.
fn row_stats(x: &[f32], d: usize) -> (f64, f64) {
    let (mut min, mut mean, mut n) = (f64::INFINITY, 0f64, 0usize);
    for r in x.chunks_exact(d) {
        let ms = r.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / d as f64;
        min = min.min(ms);
        if ms > 0.0 {
            mean += (r.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64 / ms.sqrt()).abs();
        }
        n += 1;
    }
    (min, mean / n.max(1) as f64)
}

#[cfg(test)]
mod tests;
