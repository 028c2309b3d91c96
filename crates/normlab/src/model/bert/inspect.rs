//! `normlab inspect` on a BERT-style model: per-layer rows of residual
//! stream and sublayer-write statistics and the norms' gains, from the
//! forward pass's trace.

use super::{Bert, Trace};
use crate::error::Result;
use serde::Serialize;
use std::collections::HashMap;

/// Statistics of a vector (mean, std, min, max).
pub fn stats(v: &[f32]) -> HashMap<&'static str, f64> {
    let [mean, std, mn, mx] = crate::model::decoder::gain_stats(v);
    HashMap::from([("mean", mean), ("std", std), ("min", mn), ("max", mx)])
}

/// One row of `normlab inspect`: a norm of the model and what flows through it.
#[derive(Clone, Debug, Serialize)]
pub struct InspectRow {
    /// Norm name.
    pub norm: String,
    /// RMS of the norm's input (the residual stream before the norm).
    pub stream_rms_before: f64,
    /// RMS of the norm's output (the stream after it).
    pub stream_rms_after: f64,
    /// For the norms after a sublayer: mean over tokens of |write| / |stream it read|.
    pub write_over_stream: Option<f64>,
    /// Gain statistics.
    pub gamma_mean: f64,
    /// Gain std.
    pub gamma_std: f64,
    /// Smallest gain.
    pub gamma_min: f64,
    /// Largest gain.
    pub gamma_max: f64,
    /// Mean |beta|.
    pub beta_abs_mean: f64,
}

/// The residual-growth and identity-path views of a real model on `texts`.
pub fn inspect(bert: &Bert, texts: &[String]) -> Result<Vec<InspectRow>> {
    let d = bert.cfg.hidden_size;
    let k = bert.norms.len();
    let (mut rb, mut ra, mut nrow) = (vec![0f64; k], vec![0f64; k], 0f64);
    let mut wr = vec![0f64; k];
    for text in texts {
        let ids = bert.encode(text)?;
        let mut tr = Trace::default();
        bert.forward(&ids, &bert.norms, &mut tr);
        let rms = |v: &[f32]| {
            (v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
        };
        for i in 0..k {
            for (a, b) in tr.norm_in[i]
                .chunks_exact(d)
                .zip(tr.norm_out[i].chunks_exact(d))
            {
                rb[i] += rms(a);
                ra[i] += rms(b);
            }
            if i > 0 {
                for (w, s) in tr.writes[i - 1]
                    .chunks_exact(d)
                    .zip(tr.stream_in[i - 1].chunks_exact(d))
                {
                    wr[i] += rms(w) / rms(s).max(1e-30);
                }
            }
        }
        nrow += ids.len() as f64;
    }
    Ok((0..k)
        .map(|i| {
            let g = stats(&bert.norms[i].gamma);
            InspectRow {
                norm: bert.norm_names[i].clone(),
                stream_rms_before: rb[i] / nrow,
                stream_rms_after: ra[i] / nrow,
                write_over_stream: (i > 0).then(|| wr[i] / nrow),
                gamma_mean: g["mean"],
                gamma_std: g["std"],
                gamma_min: g["min"],
                gamma_max: g["max"],
                beta_abs_mean: bert.norms[i]
                    .beta
                    .iter()
                    .map(|b| b.abs() as f64)
                    .sum::<f64>()
                    / d as f64,
            }
        })
        .collect())
}
