//! The lesson's residual block and stacks of it: `x + F(x)` (or `F(x)`
//! alone) with `F = Linear(4d, d)(GELU(Linear(d, 4d)(x)))`, optionally with
//! a LayerNorm before F (Pre-LN: `x + F(LayerNorm(x))`), one sublayer per
//! block and no attention, as the lesson writes it; weights from a normal
//! init or PyTorch's `nn.Linear` default. Forward and the explicit backward
//! go through the model's own `Sublayer`. Used by identity-path (C1, C2)
//! and residual-growth (C3).

use normlab::kernels::buf::AlignedBuf;
use normlab::kernels::norm::NormKind;
use normlab::nn::{Activation, Mlp, Norm, Op, Residual, Scratch, Sublayer, SublayerCache};
use normlab::params::{Init, ParamLayout};

/// PyTorch's `nn.LayerNorm` default eps.
pub const LAYERNORM_EPS: f32 = 1e-5;

/// How the stack's weights are drawn.
#[derive(Clone, Copy, Debug)]
pub enum StackInit {
    /// N(0, std_in^2) into the hidden layer, N(0, std_out^2) out of it,
    /// zero biases.
    Normal(f32, f32),
    /// PyTorch's nn.Linear default: weights and biases U(+-1/sqrt(fan_in)).
    Torch,
}

/// A stack of residual (or plain) MLP sublayers, each optionally Pre-LN.
pub struct MlpStack {
    subs: Vec<Sublayer>,
    params: AlignedBuf,
    grads: AlignedBuf,
    caches: Vec<SublayerCache>,
    scratch: Scratch,
}

impl MlpStack {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        depth: usize,
        d: usize,
        hidden: usize,
        residual: bool,
        init: StackInit,
        seed: u64,
        rows: usize,
    ) -> MlpStack {
        MlpStack::build(depth, d, hidden, residual, init, seed, rows, false)
    }

    /// The lesson's Pre-LN stack: `depth` blocks `x + F(LayerNorm(x))`, F
    /// the MLP d -> 4d -> d at PyTorch's default init.
    pub fn pre_ln(depth: usize, d: usize, seed: u64, rows: usize) -> MlpStack {
        MlpStack::build(depth, d, 4 * d, true, StackInit::Torch, seed, rows, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        depth: usize,
        d: usize,
        hidden: usize,
        residual: bool,
        init: StackInit,
        seed: u64,
        rows: usize,
        pre_norm: bool,
    ) -> MlpStack {
        let (std_in, std_out) = match init {
            StackInit::Normal(a, b) => (a, b),
            StackInit::Torch => (0.0, 0.0),
        };
        let mut layout = ParamLayout::new();
        let subs: Vec<Sublayer> = (0..depth)
            .map(|i| {
                let mlp = Mlp::new(
                    &mut layout,
                    &format!("f.{i}"),
                    d,
                    hidden,
                    Activation::Gelu,
                    false,
                    Some(i),
                    Init::Normal(std_in),
                    Init::Normal(std_out),
                );
                Sublayer {
                    d,
                    in_norm: pre_norm.then(|| {
                        Norm::new(
                            &mut layout,
                            &format!("ln.{i}"),
                            NormKind::LayerNorm,
                            d,
                            LAYERNORM_EPS,
                            Some(i),
                        )
                    }),
                    out_norm: None,
                    res: Residual::single(if residual { 1.0 } else { 0.0 }, 1.0, None),
                    out_bias: None,
                    in_scale: 1.0,
                    gate: None,
                    op: Op::Mlp(mlp),
                }
            })
            .collect();
        if let StackInit::Torch = init {
            for sub in &subs {
                for l in sub.op.linears() {
                    let bound = 1.0 / (l.d_in as f32).sqrt();
                    layout.set_init(&l.w, Init::Uniform(bound));
                    if let Some(b) = &l.b {
                        layout.set_init(b, Init::Uniform(bound));
                    }
                }
            }
        }
        let mut params = layout.zeros();
        layout.init(&mut params, seed);
        let caches = subs
            .iter()
            .map(|s| {
                let mut c = s.cache(rows, 1);
                c.track_paths = true;
                c
            })
            .collect();
        MlpStack {
            scratch: Scratch::new(&subs, rows),
            subs,
            params,
            grads: layout.zeros(),
            caches,
        }
    }

    /// Sublayer i's cache of the last forward (and backward).
    pub fn cache(&self, i: usize) -> &SublayerCache {
        &self.caches[i]
    }

    /// The stream after each sublayer of the last forward.
    pub fn outputs(&self) -> impl Iterator<Item = &[f32]> {
        self.caches.iter().map(|c| c.output())
    }

    /// Forward; returns y.
    pub fn forward(&mut self, x: &[f32]) -> Vec<f32> {
        for i in 0..self.subs.len() {
            let (done, rest) = self.caches.split_at_mut(i);
            let input: &[f32] = if i == 0 { x } else { done[i - 1].output() };
            self.subs[i].forward(&self.params, input, &mut rest[0], &mut self.scratch);
        }
        self.caches
            .last()
            .map(|c| c.output().to_vec())
            .unwrap_or_else(|| x.to_vec())
    }

    /// Forward, then backward of sum(r * y); returns dL/dx.
    pub fn grad(&mut self, x: &[f32], r: &[f32]) -> Vec<f32> {
        self.forward(x);
        self.backward(x, r)
    }

    /// Forward, then backward of the lesson's loss sum(y^2) (dL/dy = 2y);
    /// returns dL/dx.
    pub fn grad_sum_sq(&mut self, x: &[f32]) -> Vec<f32> {
        let y = self.forward(x);
        let r: Vec<f32> = y.iter().map(|v| 2.0 * v).collect();
        self.backward(x, &r)
    }

    /// Backward of sum(r * y) after a forward of `x`; returns dL/dx.
    pub fn backward(&mut self, x: &[f32], r: &[f32]) -> Vec<f32> {
        let mut dcur = r.to_vec();
        let mut dnext = vec![0.0; r.len()];
        for i in (0..self.subs.len()).rev() {
            let (done, rest) = self.caches.split_at_mut(i);
            let input: &[f32] = if i == 0 { x } else { done[i - 1].output() };
            self.subs[i].backward(
                &self.params,
                &mut self.grads,
                input,
                &dcur,
                &mut dnext,
                &mut rest[0],
                &mut self.scratch,
            );
            std::mem::swap(&mut dcur, &mut dnext);
        }
        dcur
    }
}
