//! Adam / AdamW over the flat parameter buffer, the learning-rate schedule
//! (linear warm-up, then constant or cosine) and global grad-norm clipping.

use crate::kernels::buf::AlignedBuf;
use crate::params::{sum_squares, ParamKind, ParamLayout};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Which optimiser.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// Adam; weight decay (if any) is L2, added to the gradient.
    Adam,
    /// AdamW; weight decay is decoupled: `p -= lr * wd * p`.
    Adamw,
}

impl std::str::FromStr for OptimizerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "adam" => Ok(OptimizerKind::Adam),
            "adamw" => Ok(OptimizerKind::Adamw),
            _ => Err(format!("unknown optimizer '{s}' (expected adam or adamw)")),
        }
    }
}

/// Shape of the learning rate after warm-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleKind {
    /// Constant at the peak.
    Constant,
    /// Cosine from the peak to `min_lr_frac * peak` at the last step.
    Cosine,
}

impl std::str::FromStr for ScheduleKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "constant" => Ok(ScheduleKind::Constant),
            "cosine" => Ok(ScheduleKind::Cosine),
            _ => Err(format!(
                "unknown schedule '{s}' (expected constant or cosine)"
            )),
        }
    }
}

/// Learning rate as a function of the step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    /// Peak learning rate.
    pub lr: f32,
    /// Linear warm-up steps (0 = none).
    pub warmup: usize,
    /// Total steps.
    pub total: usize,
    /// After warm-up.
    pub kind: ScheduleKind,
    /// Cosine floor as a fraction of the peak.
    pub min_lr_frac: f32,
}

impl Schedule {
    /// Learning rate used at (0-based) `step`: `lr * (step+1)/warmup` during
    /// warm-up, then constant or cosine.
    pub fn lr_at(&self, step: usize) -> f32 {
        if step < self.warmup {
            return self.lr * (step + 1) as f32 / self.warmup as f32;
        }
        match self.kind {
            ScheduleKind::Constant => self.lr,
            ScheduleKind::Cosine => {
                let span = self.total.saturating_sub(self.warmup).max(1) as f32;
                let progress = ((step - self.warmup) as f32 / span).min(1.0);
                let cos = 0.5 * (1.0 + (std::f32::consts::PI * progress).cos());
                self.lr * (self.min_lr_frac + (1.0 - self.min_lr_frac) * cos)
            }
        }
    }
}

/// Adam(W) state and hyper-parameters.
#[derive(Clone, Debug)]
pub struct Adam {
    /// Adam or AdamW.
    pub kind: OptimizerKind,
    /// beta1.
    pub beta1: f32,
    /// beta2.
    pub beta2: f32,
    /// eps.
    pub eps: f32,
    /// Weight decay.
    pub weight_decay: f32,
    /// First moment.
    pub m: AlignedBuf,
    /// Second moment.
    pub v: AlignedBuf,
    /// Steps taken.
    pub t: u64,
    /// Per tensor: (range, decayed?, block, learning-rate multiplier).
    groups: Vec<(std::ops::Range<usize>, bool, Option<usize>, f32)>,
}

/// Sizes of the last update, per block and overall.
#[derive(Clone, Debug, Default)]
pub struct UpdateStats {
    /// sqrt(sum(update^2)) / sqrt(sum(param^2)) over all parameters.
    pub update_ratio: f64,
    /// The same ratio per block.
    pub update_ratio_per_block: Vec<f64>,
}

impl Adam {
    /// State for a layout. Weight decay applies to weights and embeddings,
    /// never to biases, and to norm gains only if `decay_norm_gains`.
    pub fn new(
        layout: &ParamLayout,
        kind: OptimizerKind,
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
        decay_norm_gains: bool,
    ) -> Adam {
        let groups = layout
            .tensors
            .iter()
            .map(|t| {
                let decay = match t.kind {
                    ParamKind::Weight | ParamKind::Embedding => true,
                    ParamKind::Bias
                    | ParamKind::NormBias
                    | ParamKind::NormScalar
                    | ParamKind::Gate => false,
                    ParamKind::NormGain => decay_norm_gains,
                };
                (t.range.clone(), decay, t.block, 1.0)
            })
            .collect();
        Adam {
            kind,
            beta1,
            beta2,
            eps,
            weight_decay,
            m: layout.zeros(),
            v: layout.zeros(),
            t: 0,
            groups,
        }
    }

    /// The tensors lying within `ranges` step with `factor` times the
    /// learning rate (their weight decay, decoupled, too): parameters a
    /// fine-tune inserts learn at a rate of their own.
    pub fn scale_lr(&mut self, ranges: &[std::ops::Range<usize>], factor: f32) {
        for g in &mut self.groups {
            if ranges
                .iter()
                .any(|r| r.start <= g.0.start && g.0.end <= r.end)
            {
                g.3 = factor;
            }
        }
    }

    /// One update with learning rate `lr`. With `stats`, also measures the
    /// update size relative to the weights (per block and overall).
    /// Consumes the gradients: each tensor's gradient is zeroed right after
    /// its update, while it is still in cache (the next backward then needs
    /// no separate pass to clear the buffer; see `Workspace::grads_zero`).
    pub fn step(
        &mut self,
        params: &mut [f32],
        grads: &mut [f32],
        lr: f32,
        num_blocks: usize,
        stats: bool,
    ) -> Option<UpdateStats> {
        self.t += 1;
        let (b1, b2) = (self.beta1, self.beta2);
        let bc1 = 1.0 - b1.powi(self.t as i32);
        let bc2 = 1.0 - b2.powi(self.t as i32);
        let step_size = lr / bc1;
        let inv_sqrt_bc2 = 1.0 / bc2.sqrt();
        let eps = self.eps;
        // Carve the flat buffers into per-tensor slices, then update tensors
        // in parallel (elementwise: the thread count cannot change a result).
        let (kind, weight_decay) = (self.kind, self.weight_decay);
        let mut work = Vec::with_capacity(self.groups.len());
        {
            let (mut p_rest, mut m_rest, mut v_rest, mut g_rest) = (
                &mut params[..],
                &mut self.m[..],
                &mut self.v[..],
                &mut grads[..],
            );
            let mut consumed = 0;
            for (range, decay, block, scale) in &self.groups {
                let skip = range.start - consumed;
                let (_, p1) = std::mem::take(&mut p_rest).split_at_mut(skip);
                let (p, p2) = p1.split_at_mut(range.len());
                let (_, m1) = std::mem::take(&mut m_rest).split_at_mut(skip);
                let (m, m2) = m1.split_at_mut(range.len());
                let (_, v1) = std::mem::take(&mut v_rest).split_at_mut(skip);
                let (v, v2) = v1.split_at_mut(range.len());
                let (_, g1) = std::mem::take(&mut g_rest).split_at_mut(skip);
                let (g, g2) = g1.split_at_mut(range.len());
                (p_rest, m_rest, v_rest, g_rest) = (p2, m2, v2, g2);
                consumed = range.end;
                work.push((p, m, v, g, *decay, block.unwrap_or(num_blocks), *scale));
            }
        }
        let results: Vec<(usize, f64, f64)> = work
            .into_par_iter()
            .map(|(p, m, v, g, decay, slot, scale)| {
                let wd = if decay { weight_decay } else { 0.0 };
                let (l2, decoupled) = match kind {
                    OptimizerKind::Adam => (wd, 0.0),
                    OptimizerKind::Adamw => (0.0, scale * lr * wd),
                };
                let h = (b1, b2, eps, scale * step_size, inv_sqrt_bc2, l2, decoupled);
                let r = if stats {
                    let w2 = sum_squares(p);
                    (slot, adam_update_stats(p, g, m, v, h), w2)
                } else {
                    adam_update(p, g, m, v, h);
                    (slot, 0.0, 0.0)
                };
                g.fill(0.0);
                r
            })
            .collect();
        let mut upd2 = vec![0f64; num_blocks + 1];
        let mut par2 = vec![0f64; num_blocks + 1];
        for (slot, u, w) in results {
            upd2[slot] += u;
            par2[slot] += w;
        }
        stats.then(|| {
            let ratio = |u: f64, p: f64| if p > 0.0 { (u / p).sqrt() } else { 0.0 };
            UpdateStats {
                update_ratio: ratio(upd2.iter().sum(), par2.iter().sum()),
                update_ratio_per_block: (0..num_blocks).map(|b| ratio(upd2[b], par2[b])).collect(),
            }
        })
    }
}

/// (beta1, beta2, eps, lr / bias_correction1, 1 / sqrt(bias_correction2),
/// L2 coefficient, decoupled decay lr * wd).
type Hyper = (f32, f32, f32, f32, f32, f32, f32);

/// The Adam(W) update of one element; returns the step taken.
#[inline(always)]
fn adam_elem(p: &mut f32, g: f32, m: &mut f32, v: &mut f32, h: Hyper) -> f32 {
    let (b1, b2, eps, step_size, inv_sqrt_bc2, l2, decoupled) = h;
    let gr = g + l2 * *p;
    *m = b1 * *m + (1.0 - b1) * gr;
    *v = b2 * *v + (1.0 - b2) * gr * gr;
    let update = step_size * *m / ((*v).sqrt() * inv_sqrt_bc2 + eps) + decoupled * *p;
    *p -= update;
    update
}

crate::kernels::multiversion! {
    /// Update one tensor.
    fn adam_update(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], h: Hyper) {
        for (((pv, &gv), mv), vv) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
            adam_elem(pv, gv, mv, vv, h);
        }
    }
}

crate::kernels::multiversion! {
    /// Update one tensor and return the sum of squared steps.
    fn adam_update_stats(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], h: Hyper) -> f64 {
        let mut u2 = 0f64;
        for (((pv, &gv), mv), vv) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
            let u = adam_elem(pv, gv, mv, vv, h) as f64;
            u2 += u * u;
        }
        u2
    }
}

/// Global L2 norm of the gradient (f64, fixed order).
pub fn grad_norm(grads: &[f32]) -> f64 {
    sum_squares(grads).sqrt()
}

/// L2 norm of the gradient of each block's tensors.
pub fn grad_norm_per_block(layout: &ParamLayout, grads: &[f32], num_blocks: usize) -> Vec<f64> {
    let mut s = vec![0f64; num_blocks];
    for t in &layout.tensors {
        if let Some(b) = t.block {
            s[b] += sum_squares(&grads[t.range.clone()]);
        }
    }
    s.into_iter().map(f64::sqrt).collect()
}

/// Scale `grads` so their global norm is at most `max_norm`; returns the
/// norm before clipping.
pub fn clip_grad_norm(grads: &mut [f32], max_norm: f32) -> f64 {
    let norm = grad_norm(grads);
    if max_norm > 0.0 && norm > max_norm as f64 && norm.is_finite() {
        let s = (max_norm as f64 / norm) as f32;
        for g in grads.iter_mut() {
            *g *= s;
        }
    }
    norm
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Init;

    #[test]
    fn schedule_shapes() {
        let s = Schedule {
            lr: 1.0,
            warmup: 4,
            total: 14,
            kind: ScheduleKind::Cosine,
            min_lr_frac: 0.1,
        };
        assert_eq!(s.lr_at(0), 0.25);
        assert_eq!(s.lr_at(3), 1.0);
        assert_eq!(s.lr_at(4), 1.0);
        assert!((s.lr_at(9) - 0.55).abs() < 1e-6);
        assert!((s.lr_at(14) - 0.1).abs() < 1e-6);
        let c = Schedule {
            kind: ScheduleKind::Constant,
            ..s
        };
        assert_eq!(c.lr_at(13), 1.0);
    }

    #[test]
    fn adam_first_step_moves_by_lr_and_decay_is_selective() {
        let mut l = ParamLayout::new();
        let w = l.add("w", &[4], ParamKind::Weight, Some(0), Init::Const(1.0));
        let g = l.add("g", &[4], ParamKind::NormGain, Some(0), Init::Const(1.0));
        let mut p = l.zeros();
        l.init(&mut p, 0);
        let mut grads = {
            let mut gr = l.zeros();
            gr[w.0.clone()].fill(0.5);
            gr
        };
        let mut opt = Adam::new(&l, OptimizerKind::Adamw, 0.9, 0.999, 1e-8, 0.1, false);
        let st = opt.step(&mut p, &mut grads, 0.01, 1, true).unwrap();
        assert!(
            grads.iter().all(|&g| g == 0.0),
            "step leaves the gradients zeroed"
        );
        // Adam's first step is lr * sign(g); AdamW adds lr * wd * p.
        assert!((p[0] - (1.0 - 0.01 - 0.001)).abs() < 1e-6, "{}", p[0]);
        // The gain has zero gradient and no decay: unchanged.
        assert_eq!(g.get(&p), &[1.0; 4]);
        assert!(st.update_ratio > 0.0);
        let mut gr = l.zeros();
        gr[0] = 3.0;
        gr[1] = 4.0;
        assert_eq!(clip_grad_norm(&mut gr, 1.0), 5.0);
        assert!((grad_norm(&gr) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn a_scaled_tensor_steps_at_its_own_rate_and_the_others_do_not() {
        let mut l = ParamLayout::new();
        let a = l.add("a", &[4], ParamKind::Weight, Some(0), Init::Const(1.0));
        let b = l.add("b", &[4], ParamKind::Gate, Some(0), Init::Const(1.0));
        let mut p = l.zeros();
        l.init(&mut p, 0);
        let mut grads = l.zeros();
        grads.fill(0.5);
        let mut opt = Adam::new(&l, OptimizerKind::Adamw, 0.9, 0.999, 1e-8, 0.1, false);
        opt.scale_lr(std::slice::from_ref(&b.0), 10.0);
        opt.step(&mut p, &mut grads, 0.01, 1, false);
        // a: lr * sign(g) and decoupled decay; b (a gate: no decay) ten
        // times lr.
        assert!((a.get(&p)[0] - (1.0 - 0.01 - 0.001)).abs() < 1e-6);
        assert!(
            (b.get(&p)[0] - (1.0 - 0.1)).abs() < 1e-6,
            "{}",
            b.get(&p)[0]
        );
    }
}
