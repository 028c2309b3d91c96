//! One block's row of a decoder's report (`normlab inspect`,
//! `normlab.diagnose`): what [`TraceSum`](super::TraceSum) sums from the
//! traces and the claims (`claims.rs`) are measured from.

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
