//! A BERT checkpoint's LayerNorms as RMSNorms: dropping beta (or keeping
//! it as a bias) and calibrating the RMSNorm gains against the original
//! model's outputs; cosine similarity of sentence embeddings to judge it.

use super::{Bert, NormParams, Trace};
use crate::kernels::norm::NormKind;

/// Cosine similarity.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-30)
}

/// The model's LayerNorms as RMSNorms: gamma kept; beta kept or dropped.
pub fn rms_norms(bert: &Bert, keep_beta: bool) -> Vec<NormParams> {
    bert.norms
        .iter()
        .map(|n| NormParams {
            kind: NormKind::RmsNorm,
            gamma: n.gamma.clone(),
            beta: if keep_beta {
                n.beta.clone()
            } else {
                vec![0.0; n.beta.len()]
            },
            eps: n.eps,
        })
        .collect()
}

/// Calibrate RMSNorm replacements layer by layer: for each norm in forward
/// order, run the partly converted model on `sentences`, and fit per feature
/// the gain and bias that best map RMSNorm(input) to the original
/// LayerNorm's output at that place (least squares).
pub fn calibrate_rms(bert: &Bert, sentences: &[Vec<u32>]) -> Vec<NormParams> {
    let d = bert.cfg.hidden_size;
    let mut conv = rms_norms(bert, true);
    let originals: Vec<Trace> = sentences
        .iter()
        .map(|ids| {
            let mut tr = Trace::default();
            bert.forward(ids, &bert.norms, &mut tr);
            tr
        })
        .collect();
    for k in 0..conv.len() {
        // Sums for y = a r + b per feature.
        let (mut sr, mut srr, mut sy, mut sry, mut n) = (
            vec![0f64; d],
            vec![0f64; d],
            vec![0f64; d],
            vec![0f64; d],
            0f64,
        );
        for (ids, orig) in sentences.iter().zip(&originals) {
            let mut tr = Trace::default();
            bert.forward(ids, &conv, &mut tr);
            let (input, target) = (&tr.norm_in[k], &orig.norm_out[k]);
            for (row, yrow) in input.chunks_exact(d).zip(target.chunks_exact(d)) {
                let rms = (row.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / d as f64
                    + conv[k].eps as f64)
                    .sqrt();
                for j in 0..d {
                    let r = row[j] as f64 / rms;
                    let y = yrow[j] as f64;
                    sr[j] += r;
                    srr[j] += r * r;
                    sy[j] += y;
                    sry[j] += r * y;
                }
                n += 1.0;
            }
        }
        for j in 0..d {
            let var = srr[j] / n - (sr[j] / n).powi(2);
            let cov = sry[j] / n - (sr[j] / n) * (sy[j] / n);
            let a = if var > 1e-12 {
                cov / var
            } else {
                conv[k].gamma[j] as f64
            };
            let b = sy[j] / n - a * sr[j] / n;
            conv[k].gamma[j] = a as f32;
            conv[k].beta[j] = b as f32;
        }
    }
    conv
}
