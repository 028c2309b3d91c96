//! What one training step records ([`StepRecord`]: a line of
//! metrics.jsonl), with its reading of JSON nulls as NaN (a diverged step
//! is a result to show, not a line to drop).

use serde::{Deserialize, Serialize};

/// Metrics of one step.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StepRecord {
    /// 1-based step number (after this many updates).
    pub step: usize,
    /// Mean training loss of the step's batch.
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
    pub loss: f64,
    /// Learning rate used.
    pub lr: f32,
    /// Global gradient norm before clipping.
    #[serde(deserialize_with = "crate::nan_serde::f64_or_nan")]
    pub grad_norm: f64,
    /// Gradient norm of each block's parameters.
    #[serde(deserialize_with = "crate::nan_serde::vec_or_nan")]
    pub grad_norm_per_block: Vec<f64>,
    /// RMS of the residual stream after each block.
    #[serde(deserialize_with = "crate::nan_serde::vec_or_nan")]
    pub residual_rms: Vec<f64>,
    /// ||update|| / ||weights|| over all parameters.
    pub update_ratio: Option<f64>,
    /// The same per block.
    #[serde(deserialize_with = "crate::nan_serde::vec_or_nan")]
    pub update_ratio_per_block: Vec<f64>,
    /// Held-out loss, on evaluation steps.
    pub eval_loss: Option<f64>,
    /// Bigram-Backcopy: the held-out loss over the copy targets (after a
    /// trigger; a perfect model's is 0), on evaluation steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_loss_copy: Option<f64>,
    /// Bigram-Backcopy: the held-out loss over the bigram targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_loss_bigram: Option<f64>,
    /// Largest pre-softmax attention logit per block (gpt, logged steps).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::nan_serde::vec_or_nan"
    )]
    pub attn_max_logit: Vec<f64>,
    /// Mean attention entropy (nats) per block (gpt, logged steps).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::nan_serde::vec_or_nan"
    )]
    pub attn_entropy: Vec<f64>,
    /// Share of attention on position 0 per block (gpt, logged steps):
    /// the mean over sequences, heads and queries t >= 1 (uniform
    /// attention: `nn::uniform_sink_share(seq)`).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::nan_serde::vec_or_nan"
    )]
    pub attn_sink: Vec<f64>,
    /// Largest |x| in the stream after each block (logged steps).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::nan_serde::vec_or_nan"
    )]
    pub stream_max: Vec<f64>,
    /// That value over the median |x| of the same stream (logged steps).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::nan_serde::vec_or_nan"
    )]
    pub stream_max_ratio: Vec<f64>,
    /// The position in its sequence of the token holding it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stream_max_position: Vec<usize>,
    /// The feed-forward's largest |activation| per block: SwiGLU's gate
    /// times up (after its clamp), or GELU's output (logged steps).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::nan_serde::vec_or_nan"
    )]
    pub ffn_max: Vec<f64>,
    /// Per block, how many values of the feed-forward's activation and of
    /// the stream after the block f16 could not store (|v| > 65504 or not
    /// finite), whatever the storage type (logged steps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub f16_overflow: Vec<u64>,
    /// Alpha of each point-wise norm (dyt, derf) in model order, QK-Norm
    /// excluded (logged steps).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::nan_serde::vec_or_nan"
    )]
    pub norm_alpha: Vec<f64>,
    /// Share of each point-wise norm's inputs in the saturated region
    /// |alpha x + s| > 2, over the step's batch (logged steps).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::nan_serde::vec_or_nan"
    )]
    pub norm_saturation: Vec<f64>,
    /// Each sublayer's branch gate: ReZero's scalar, or the RMS of
    /// LayerScale's vector (logged steps).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::nan_serde::vec_or_nan"
    )]
    pub gate: Vec<f64>,
    /// The loss scale this step's backward used (`--dtype f16` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
    /// Steps skipped so far because the scaled gradient overflowed
    /// (`--dtype f16` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_steps: Option<u64>,
    /// n parallel streams (hyper-connections, mHC; AttnRes's slots): read,
    /// write and mixing weights, each stream's RMS, the composite mixing's
    /// gain (logged steps; see [`StreamStats`](crate::model::StreamStats)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams: Option<crate::model::StreamStats>,
    /// The attention-sink measures (gpt runs whose position 0 always holds
    /// the same token: `--bos-byte` or `--data bigram-backcopy`; logged
    /// steps; see [`SinkStats`](crate::model::sinks::SinkStats)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sinks: Option<crate::model::sinks::SinkStats>,
}
