//! LayerNorm <-> RMSNorm checkpoint conversion: exact where the maths
//! allows, flagged where it does not, with calibration for the rest.
//!
//! **Why it can be exact.** LayerNorm subtracts each row's mean; on a row
//! with zero mean it equals RMSNorm (same gain, same eps) plus its bias.
//! In a Pre-LN model every reader of the residual stream is a LayerNorm,
//! which ignores a per-row constant; so centring every weight that *writes*
//! into the stream (each written vector gets zero mean: embedding rows,
//! position rows, the output projection of every sublayer and its bias)
//! leaves the function unchanged and makes the stream zero-mean. Then each
//! LayerNorm becomes an RMSNorm with the same gain, and its bias folds into
//! the bias of the Linear that reads it (W (g x + b) + c = W (g x) + (W b + c)).
//! (Jiang et al. 2023, "Pre-RMSNorm and Pre-CRMSNorm Transformers".)
//!
//! A norm on a branch's output (sandwich/peri/olmo2) reads only that
//! branch: centring the branch's output projection makes its input zero-mean,
//! and its bias is kept as a bias after the RMSNorm. Norms that read a
//! stream into which such normalised outputs (non-uniform gain) are written,
//! and norms that sit on the stream itself (Post-LN, DeepNorm), have no exact
//! conversion: `--approximate` keeps the gain and drops the bias there.

use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::kernels::norm::ParamRole;
use crate::model::{Model, ModelConfig, Workspace};
use crate::nn::{NormRole, NormSite, Placement};
use crate::train::data::Data;
use crate::train::optim::{Adam, OptimizerKind};
use serde::Serialize;

/// Where a norm sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads the residual stream (a pre-norm before a sublayer, or the final norm).
    ReadsStream,
    /// Normalises one branch's output before it is added.
    BranchOutput,
    /// Sits on the stream itself, after the residual add.
    OnStream,
}

/// One norm of a model and whether it converts exactly.
#[derive(Clone, Debug, Serialize)]
pub struct NormInfo {
    /// Tensor prefix (`transformer.h.0.ln_1`).
    pub name: String,
    /// Where it sits.
    pub role: Role,
    /// Whether it converts exactly.
    pub exact: bool,
    /// Why (or how).
    pub why: String,
}

/// Every norm of `model` (QK-Norm excluded: it is already an RMSNorm), in
/// the order of [`Model::norms`].
pub fn classify(model: &Model) -> Vec<NormInfo> {
    let cfg = &model.cfg;
    let centred = placement_is_exact(cfg.placement);
    let reads_why = if centred {
        "reads the stream; centring every weight that writes into the stream makes it zero-mean, where LayerNorm = RMSNorm, and beta folds into the next Linear's bias".to_string()
    } else if cfg.placement.has_post_norm() {
        "reads a stream that is the output of post-norms (gamma * x_hat + beta has a non-zero mean that no weight centring removes)".to_string()
    } else {
        "reads a stream into which normalised branch outputs with non-uniform gain are written (gamma * x_hat + beta is not zero-mean), so LayerNorm != RMSNorm there".to_string()
    };
    converted_sites(model)
        .map(|site| {
            let (role, exact, why) = match site.role {
                NormRole::In | NormRole::Final => (Role::ReadsStream, centred, reads_why.clone()),
                NormRole::Out => (Role::BranchOutput, true, "normalises only this branch's output: centring the branch's output projection makes its input zero-mean; beta is kept as a bias after the RMSNorm".into()),
                NormRole::Post | NormRole::QkNorm | NormRole::Stream | NormRole::Embedding => (Role::OnStream, false, "sits on the residual stream itself: it subtracts the mean of x + S(x), which no centring of weights can make zero".into()),
            };
            NormInfo {
                name: site.norm.name.clone(),
                role,
                exact,
                why,
            }
        })
        .collect()
}

/// The norms conversion changes: every one but QK-Norm.
fn converted_sites(model: &Model) -> impl Iterator<Item = NormSite<'_>> {
    model.norms().filter(|s| s.role != NormRole::QkNorm)
}

/// A converted checkpoint.
#[derive(Clone, Debug)]
pub struct Converted {
    /// The new model config.
    pub cfg: ModelConfig,
    /// Its parameters.
    pub params: Vec<f32>,
    /// Every norm converted exactly.
    pub exact: bool,
    /// The norms and how each was converted.
    pub norms: Vec<NormInfo>,
    /// What else changed (untied head, added biases, dropped betas).
    pub notes: Vec<String>,
}

/// Copy every tensor the two models share (same name and shape): models
/// built by `Model::new` from configs that differ in a norm or a bias.
pub fn copy_common(old: &Model, p: &[f32], new: &Model, q: &mut [f32]) {
    for t in &new.layout.tensors {
        if let Some(src) = old.layout.find(&t.name).filter(|s| s.shape == t.shape) {
            q[t.range.clone()].copy_from_slice(&p[src.range.clone()]);
        }
    }
}

/// Make every output of a Linear `[out, in]` (weight and bias) zero-mean over the outputs.
fn centre_linear_outputs(w: &mut [f32], b: Option<&mut [f32]>, d_out: usize, d_in: usize) {
    for j in 0..d_in {
        let m = (0..d_out).map(|i| w[i * d_in + j] as f64).sum::<f64>() / d_out as f64;
        for i in 0..d_out {
            w[i * d_in + j] -= m as f32;
        }
    }
    if let Some(b) = b {
        centre_rows(b, d_out);
    }
}

/// Make every row of a `[rows, d]` table zero-mean.
fn centre_rows(t: &mut [f32], d: usize) {
    for r in t.chunks_exact_mut(d) {
        let m = r.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
        r.iter_mut().for_each(|v| *v -= m as f32);
    }
}

/// `bias += W beta` for `W: [out, in]`.
fn fold_bias(w: &[f32], beta: &[f32], bias: &mut [f32]) {
    let d_in = beta.len();
    for (o, b) in bias.iter_mut().enumerate() {
        let s: f64 = w[o * d_in..(o + 1) * d_in]
            .iter()
            .zip(beta)
            .map(|(&x, &y)| x as f64 * y as f64)
            .sum();
        *b = (*b as f64 + s) as f32;
    }
}

/// Refuse weights that are not all finite, naming the first bad tensor: a
/// conversion of NaN weights could only produce NaN.
pub fn check_finite(model: &Model, params: &[f32]) -> Result<()> {
    for t in &model.layout.tensors {
        if let Some(i) = params[t.range.clone()].iter().position(|v| !v.is_finite()) {
            return Err(format!(
                "the checkpoint's tensor {} holds a non-finite value ({} at index {i}); nothing converted",
                t.name,
                params[t.range.start + i]
            )
            .into());
        }
    }
    Ok(())
}

/// Convert a LayerNorm model to RMSNorm. Without `approximate`, refuses
/// when some norm has no exact conversion (the error lists them).
pub fn to_rmsnorm(cfg: &ModelConfig, params: &[f32], approximate: bool) -> Result<Converted> {
    if cfg.norm != NormKind::LayerNorm {
        return Err(format!("the checkpoint's norms are {}, not layernorm", cfg.norm).into());
    }
    refuse_residual_options(cfg)?;
    let old = Model::new(cfg)?;
    check_finite(&old, params)?;
    let norms = classify(&old);
    let inexact: Vec<&NormInfo> = norms.iter().filter(|n| !n.exact).collect();
    if !inexact.is_empty() && !approximate {
        let names: Vec<&str> = inexact.iter().map(|n| n.name.as_str()).collect();
        return Err(format!(
            "{} of {} norms have no exact conversion ({}: {}): {}; rerun with --approximate (keeps gamma, drops beta) and optionally --calibrate STEPS",
            inexact.len(),
            norms.len(),
            cfg.placement,
            inexact[0].why,
            names.join(", ")
        ).into());
    }
    let mut p = params.to_vec();
    let mut notes = Vec::new();
    let d = cfg.d_model;
    let centred = placement_is_exact(cfg.placement);
    let mut new_cfg = cfg.clone();
    new_cfg.norm = NormKind::RmsNorm;
    new_cfg.eps = Some(cfg.eps());
    new_cfg.out_norm_bias = cfg.placement.has_out_norm();
    // The final norm's beta folds into a head bias (exact case only).
    new_cfg.head_bias = cfg.head_bias || (centred && cfg.has_final_norm());
    let head_weight_orig = old.head_weight().get(&p).to_vec();
    if centred {
        if cfg.tie_head {
            new_cfg.tie_head = false;
            notes.push("untied the head from the token embedding (the embedding is centred, the head is not)".into());
        }
        centre_rows(old.emb.wte.get_mut(&mut p), d);
        if let Some(wpe) = &old.emb.wpe {
            centre_rows(wpe.get_mut(&mut p), d);
        }
        notes.push("centred the token and position embedding rows".into());
    }
    // Centre the output projection of every sublayer whose output must be
    // zero-mean: all of them when the stream is centred, and those feeding an
    // output norm.
    if centred || cfg.placement.has_out_norm() {
        for sub in old.sublayers() {
            let w = sub.op.writer();
            let b = w.b.as_ref().expect("output projections have a bias");
            let (lo, hi) = p.split_at_mut(b.0.start);
            centre_linear_outputs(w.w.get_mut(lo), Some(&mut hi[..b.len()]), w.d_out, w.d_in);
        }
        notes.push(
            "centred the output projection (weight columns and bias) of every sublayer".into(),
        );
    }
    let new = Model::new(&new_cfg)?;
    let mut q = vec![0.0f32; new.layout.buffer_len()];
    copy_common(&old, &p, &new, &mut q);
    // lm_head is copied by name, or still tied; an untied one gets the
    // original (uncentred) embedding.
    if cfg.tie_head && !new_cfg.tie_head {
        new.head_weight()
            .get_mut(&mut q)
            .copy_from_slice(&head_weight_orig);
    }
    let mut dropped = Vec::new();
    for ((site, new_site), n) in converted_sites(&old).zip(converted_sites(&new)).zip(&norms) {
        let beta = site
            .norm
            .param(ParamRole::Bias)
            .expect("layernorm has a bias")
            .get(&p)
            .to_vec();
        match (n.role, n.exact) {
            (Role::ReadsStream, true) => {
                // The Linear that reads this norm's output: the sublayer's
                // first one, or the head for the final norm.
                let (w, bias) = match new_site.sublayer {
                    Some(sub) => {
                        let r = sub.op.reader();
                        (&r.w, r.b.as_ref().expect("readers have a bias"))
                    }
                    None => (
                        new.head_weight(),
                        new.head_bias.as_ref().expect("head bias added"),
                    ),
                };
                let w = w.get(&q).to_vec();
                fold_bias(&w, &beta, bias.get_mut(&mut q));
            }
            (Role::BranchOutput, true) => {
                let sub = new_site
                    .sublayer
                    .expect("output norms belong to a sublayer");
                sub.out_bias
                    .as_ref()
                    .expect("output norm bias added")
                    .get_mut(&mut q)
                    .copy_from_slice(&beta);
            }
            _ => dropped.push(n.name.clone()),
        }
    }
    if !dropped.is_empty() {
        notes.push(format!(
            "approximate: kept gamma and dropped beta of {} norm(s)",
            dropped.len()
        ));
    }
    if new_cfg.head_bias && !cfg.head_bias {
        notes.push("added lm_head.bias = W_head * beta of the final norm".into());
    }
    if new_cfg.out_norm_bias {
        notes.push("kept each output norm's beta as a bias after its RMSNorm".into());
    }
    Ok(Converted {
        cfg: new_cfg,
        params: q,
        exact: inexact.is_empty(),
        norms,
        notes,
    })
}

/// Convert an RMSNorm model to LayerNorm (gamma kept, beta = 0). This is
/// exact only where the stream the norms read is zero-mean (e.g. a model
/// converted from LayerNorm): the caller verifies on data.
pub fn to_layernorm(cfg: &ModelConfig, params: &[f32]) -> Result<Converted> {
    if cfg.norm != NormKind::RmsNorm {
        return Err(format!("the checkpoint's norms are {}, not rmsnorm", cfg.norm).into());
    }
    refuse_residual_options(cfg)?;
    if cfg.out_norm_bias {
        return Err(
            "output norms with a bias cannot become LayerNorm (the bias would double)".into(),
        );
    }
    let old = Model::new(cfg)?;
    check_finite(&old, params)?;
    let mut new_cfg = cfg.clone();
    new_cfg.norm = NormKind::LayerNorm;
    new_cfg.eps = Some(cfg.eps());
    let new = Model::new(&new_cfg)?;
    let mut q = vec![0.0f32; new.layout.buffer_len()];
    copy_common(&old, params, &new, &mut q);
    let norms = classify(&new).into_iter().map(|mut n| {
        n.exact = false;
        n.why = "exact only if the stream it reads is zero-mean: checked on data".into();
        n
    });
    Ok(Converted {
        cfg: new_cfg,
        params: q,
        exact: false,
        norms: norms.collect(),
        notes: vec!["LayerNorm gains = the RMSNorm gains, biases 0".into()],
    })
}

/// Logit agreement and held-out loss of two models on the same sequences.
#[derive(Clone, Debug, Serialize)]
pub struct Agreement {
    /// Largest |logit_a - logit_b|.
    pub max_abs_logit_diff: f64,
    /// Mean |logit_a - logit_b|.
    pub mean_abs_logit_diff: f64,
    /// Largest |logit| of model a (scale for the differences).
    pub max_abs_logit: f64,
    /// Held-out loss of model a.
    pub eval_loss_a: f64,
    /// Held-out loss of model b.
    pub eval_loss_b: f64,
    /// Sequences compared.
    pub sequences: usize,
}

fn fill_eval(data: &Data, ws: &mut Workspace, first: usize) {
    let t = ws.t;
    for i in 0..ws.batch {
        let r = i * t..(i + 1) * t;
        data.eval_sequence(first + i, t, &mut ws.tokens[r.clone()], &mut ws.targets[r]);
    }
}

/// Run both models on `sequences` held-out sequences (in batches of 8).
pub fn compare(
    a: (&Model, &[f32]),
    b: (&Model, &[f32]),
    data: &Data,
    sequences: usize,
) -> Agreement {
    let batch = 8usize.min(sequences.max(1));
    let t = a.0.cfg.seq;
    let (mut wa, mut wb) = (a.0.workspace(batch, t), b.0.workspace(batch, t));
    let (mut mx, mut sum, mut n, mut big) = (0f64, 0f64, 0usize, 0f64);
    let (mut la, mut lb) = (0f64, 0f64);
    let rounds = sequences.div_ceil(batch);
    for r in 0..rounds {
        fill_eval(data, &mut wa, r * batch);
        wb.tokens.copy_from_slice(&wa.tokens);
        wb.targets.copy_from_slice(&wa.targets);
        let lga = a.0.forward_logits(a.1, &mut wa);
        let lgb = b.0.forward_logits(b.1, &mut wb);
        for (x, y) in lga.iter().zip(lgb) {
            let dd = (*x as f64 - *y as f64).abs();
            mx = mx.max(dd);
            sum += dd;
            big = big.max((*x as f64).abs());
            n += 1;
        }
        la += a.0.loss_from_logits(&mut wa);
        lb += b.0.loss_from_logits(&mut wb);
    }
    let tokens = (rounds * batch * t) as f64;
    Agreement {
        max_abs_logit_diff: mx,
        mean_abs_logit_diff: sum / n.max(1) as f64,
        max_abs_logit: big,
        eval_loss_a: la / tokens,
        eval_loss_b: lb / tokens,
        sequences: rounds * batch,
    }
}

/// Whether an agreement is at f32 precision: every logit within 1e-4 of
/// the logit scale (and 1e-4 absolute for small logits).
pub fn is_float_exact(a: &Agreement) -> bool {
    a.max_abs_logit_diff <= 1e-4 * a.max_abs_logit.max(1.0)
}

/// Distil the original model into the converted one on training sequences:
/// `steps` Adam steps (lr `lr`, batch `batch`) on the cross-entropy between
/// the original's softmax and the converted model's. Returns the calibrated
/// parameters.
pub fn calibrate(
    orig: (&Model, &[f32]),
    conv: (&Model, &[f32]),
    data: &Data,
    seed: u64,
    steps: usize,
    lr: f32,
    batch: usize,
) -> Vec<f32> {
    calibrate_with(orig, conv, data, seed, steps, lr, batch, &mut |_, _| {})
}

/// [`calibrate`], calling `each(step, params)` after every step.
#[allow(clippy::too_many_arguments)]
pub fn calibrate_with(
    orig: (&Model, &[f32]),
    conv: (&Model, &[f32]),
    data: &Data,
    seed: u64,
    steps: usize,
    lr: f32,
    batch: usize,
    each: &mut dyn FnMut(usize, &[f32]),
) -> Vec<f32> {
    let t = orig.0.cfg.seq;
    let (mut wa, mut wb) = (orig.0.workspace(batch, t), conv.0.workspace(batch, t));
    let mut p = conv.1.to_vec();
    let mut opt = Adam::new(
        &conv.0.layout,
        OptimizerKind::Adam,
        0.9,
        0.999,
        1e-8,
        0.0,
        false,
    );
    for step in 0..steps {
        for i in 0..batch {
            let r = i * t..(i + 1) * t;
            data.train_sequence(
                step as u64 ^ (seed << 32) ^ 0xCA11,
                i,
                t,
                &mut wa.tokens[r.clone()],
                &mut wa.targets[r],
            );
        }
        wb.tokens.copy_from_slice(&wa.tokens);
        wb.targets.copy_from_slice(&wa.targets);
        orig.0.forward(orig.1, &mut wa);
        conv.0.forward(&p, &mut wb);
        conv.0
            .backward_soft(&p, &mut wb, wa.probs(), 1.0 / (batch * t) as f32);
        opt.step(&mut p, &mut wb.grads, lr, conv.0.cfg.layers, false);
        wb.grads_zero = true;
        each(step + 1, &p);
    }
    p
}

/// The residual options whose effect on the conversion is not derived here
/// (each option's declaration says why, in `model::residual`): refused.
fn refuse_residual_options(cfg: &ModelConfig) -> Result<()> {
    let mut on = crate::model::residual::refused_by_convert(cfg);
    // The output gate reads the attention's normalised input without a
    // bias to fold LayerNorm's beta into.
    if cfg.attn_gate.is_some() {
        on.push("--attn-gate".into());
    }
    // LayerNorm's beta folds into the bias of the Linear that reads it.
    if cfg.no_bias {
        on.push("--no-bias".into());
    }
    if on.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "convert does not handle checkpoints trained with {} (only plain norms are converted)",
            on.join(", ")
        )
        .into())
    }
}

/// Whether a placement's norms can all be converted exactly.
pub fn placement_is_exact(p: Placement) -> bool {
    !p.has_out_norm() && !p.has_post_norm()
}
