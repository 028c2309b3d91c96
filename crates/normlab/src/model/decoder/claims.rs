//! The lesson's claims measured on a decoder, from its report's rows
//! ([`ModelClaims::measure`]): C3's stream growth (on the lesson's metric
//! and on the RMS), the largest activation and where it sits, C6, C8, and
//! the losses of the claims that rerun the model changed (C21, C8).

use super::row::DecoderLayerRow;
use crate::error::Result;

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

/// How a residual stream grows over consecutive blocks, from `sizes` (its
/// size entering the first block, then after each block): the total factor,
/// its geometric mean per block, and how many blocks grow it.
pub fn stream_growth(sizes: &[f64]) -> (f64, f64, usize) {
    let blocks = sizes.len().saturating_sub(1).max(1);
    let total = sizes[sizes.len() - 1] / sizes[0].max(1e-30);
    let growing = sizes.windows(2).filter(|w| w[1] > w[0]).count();
    (total, total.powf(1.0 / blocks as f64), growing)
}

/// The held-out losses of the claims that rerun the model changed: C21's
/// with every norm swapped (and which norm it became), C8's without eps.
pub struct ChangedLosses {
    /// The loss with every norm replaced ([`ModelClaims::loss_layernorm`]).
    pub swapped: f64,
    /// The norm they became.
    pub swapped_norm: String,
    /// The loss with every norm's eps taken out.
    pub without_eps: f64,
}

impl ModelClaims {
    /// The claims from the rows, the token at the largest activation
    /// (`token(text, position)`), the norms' `eps` and the changed losses.
    pub fn measure(
        rows: &[DecoderLayerRow],
        token: impl Fn(usize, usize) -> Result<String>,
        eps: f64,
        changed: ChangedLosses,
    ) -> Result<ModelClaims> {
        let span = &rows[1.min(rows.len() - 1)..];
        // Growth by a metric: (total, per block, blocks growing, largest jump).
        let growth = |inn: &dyn Fn(&DecoderLayerRow) -> f64,
                      out: &dyn Fn(&DecoderLayerRow) -> f64| {
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
            token: token(text, position)?,
            channel,
            of_f16_max: top.max_abs / 65504.0,
            over_mean_token_norm: top.max_abs / top.row_norm_out.max(1e-30),
        };
        Ok(ModelClaims {
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
            ms_min_over_eps: rows.iter().fold(f64::INFINITY, |a, r| a.min(r.ms_min)) / eps,
            loss_layernorm: changed.swapped,
            swapped_norm: changed.swapped_norm,
            loss_without_eps: changed.without_eps,
        })
    }
}
