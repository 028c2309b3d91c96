//! Models: the toy deep net and the byte-level GPT, both a stack of
//! [`Block`]s (mixer/attention sublayer, then MLP sublayer) between an
//! embedding and a head; and the per-shard [`Workspace`] holding every
//! activation and gradient buffer, allocated once.

mod ablate;
pub mod bert;
mod build;
pub mod config;
pub mod decoder;
pub mod hf_folder;
pub mod hooks;
mod init;
pub mod intervene;
pub mod pretrained;
pub mod residual;
pub mod sinks;
mod stream_trace;
mod streams;
mod validate;
mod workspace;

pub use config::{InitScheme, ModelConfig, ModelKind};
pub use stream_trace::SublayerTrace;
pub use streams::StreamStats;

use crate::kernels::act;
use crate::kernels::buf::AlignedBuf;
use crate::kernels::matmul;
use crate::nn::norm::buf;
use crate::nn::{
    Block, BlockCache, Embedding, HeadCache, Linear, Norm, NormCache, NormRole, NormSite, Scratch,
    StreamHead, Sublayer,
};
use crate::params::{ParamLayout, ParamRef};

/// A built model: its parameter layout and modules (no values: those live
/// in a flat buffer described by `layout`).
#[derive(Clone, Debug)]
pub struct Model {
    /// The config it was built from.
    pub cfg: ModelConfig,
    /// Every tensor, in buffer order.
    pub layout: ParamLayout,
    /// Token + position embedding.
    pub emb: Embedding,
    /// The blocks, bottom to top.
    pub blocks: Vec<Block>,
    /// With n > 1 streams: how they become what the final norm reads.
    pub stream_head: Option<StreamHead>,
    /// Norm before the head.
    pub final_norm: Option<Norm>,
    /// Untied head `lm_head.weight [vocab, d]`; None when tied to wte.
    pub head: Option<Linear>,
    /// `lm_head.bias [vocab]` (converted checkpoints only).
    pub head_bias: Option<ParamRef>,
}

/// All buffers of one shard: activations, backward scratch, gradients.
#[derive(Clone, Debug)]
pub struct Workspace {
    /// Sequences in the shard.
    pub batch: usize,
    /// Positions per sequence.
    pub t: usize,
    /// Input tokens `[batch, t]`.
    pub tokens: Vec<u32>,
    /// Targets `[batch, t]`.
    pub targets: Vec<u32>,
    x0: AlignedBuf,
    /// With n > 1 streams: the embedding copied into each (the first
    /// block's input), and the head's cache (the collapse the final norm
    /// reads).
    xs: AlignedBuf,
    head_c: Option<HeadCache>,
    /// Block caches.
    pub blocks: Vec<BlockCache>,
    scratch: Scratch,
    fin: AlignedBuf,
    fin_c: Option<NormCache>,
    probs: AlignedBuf,
    /// Under the final soft-cap: the capped logits (its backward reads them).
    capped: AlignedBuf,
    dlogits: AlignedBuf,
    dfin: AlignedBuf,
    d1: AlignedBuf,
    d2: AlignedBuf,
    dmid: AlignedBuf,
    /// Parameter gradients of this shard (same layout as the parameters).
    pub grads: AlignedBuf,
    /// Whoever sets this promises that `grads` is all zeros, so backward
    /// skips clearing it (the optimizer zeroes gradients as it consumes
    /// them; see `Adam::step`). Backward resets it.
    pub grads_zero: bool,
    /// Sum of per-token losses of the last forward.
    pub loss_sum: f64,
    /// Sum of squares of the residual stream after each block (last
    /// forward); with n streams, divided by n (so that it over rows * d
    /// is the mean square of the n x d state); for Attention Residuals,
    /// that of the sum of the slots (what one plain stream would hold).
    pub residual_sumsq: Vec<f64>,
}

impl Model {
    /// Freshly initialised parameters for `seed`.
    pub fn init_params(&self, seed: u64) -> AlignedBuf {
        let mut p = self.layout.zeros();
        self.layout.init(&mut p, seed);
        p
    }

    /// Buffers for a shard of `batch` sequences of `t <= seq` positions.
    pub fn workspace(&self, batch: usize, t: usize) -> Workspace {
        assert!(t <= self.cfg.seq && t > 0 && batch > 0);
        let (rows, d, v) = (batch * t, self.cfg.d_model, self.cfg.vocab);
        let n = self.streams();
        let wide = if n > 1 { rows * n * d } else { 0 };
        Workspace {
            batch,
            t,
            tokens: vec![0; rows],
            targets: vec![0; rows],
            x0: buf(rows * d),
            xs: buf(wide),
            head_c: self.stream_head.as_ref().map(|h| h.cache(rows)),
            blocks: self.blocks.iter().map(|b| b.cache(batch, t)).collect(),
            scratch: Scratch::new(self.blocks.iter().flat_map(|b| b.sublayers()), rows),
            fin: buf(if self.final_norm.is_some() {
                rows * d
            } else {
                0
            }),
            fin_c: self.final_norm.as_ref().map(|n| n.cache(rows)),
            probs: buf(rows * v),
            capped: buf(if self.cfg.final_softcap.is_some() {
                rows * v
            } else {
                0
            }),
            dlogits: buf(rows * v),
            dfin: buf(rows * d),
            d1: buf(rows * n * d),
            d2: buf(rows * n * d),
            dmid: buf(rows * n * d),
            grads: self.layout.zeros(),
            grads_zero: true,
            loss_sum: 0.0,
            residual_sumsq: vec![0.0; self.cfg.layers],
        }
    }

    /// Parallel residual streams per token (1, hyper-connections' and
    /// mHC's n, or Attention Residuals' slots).
    pub fn streams(&self) -> usize {
        self.sublayers().next().map_or(1, |s| s.res.streams())
    }

    /// The head's weight (`lm_head.weight`, or the tied token embedding).
    pub fn head_weight(&self) -> &ParamRef {
        self.head.as_ref().map(|h| &h.w).unwrap_or(&self.emb.wte)
    }

    /// Forward on `ws.tokens` -> `ws.targets`; returns the summed loss
    /// (also in `ws.loss_sum`); `ws.probs` holds the softmax afterwards.
    pub fn forward(&self, params: &[f32], ws: &mut Workspace) -> f64 {
        self.forward_logits(params, ws);
        self.loss_from_logits(ws)
    }

    /// After [`Model::forward_logits`]: turn the logits in `ws.probs` into
    /// probabilities in place and return the summed loss (as `forward`).
    pub fn loss_from_logits(&self, ws: &mut Workspace) -> f64 {
        ws.loss_sum = act::softmax_cross_entropy(&mut ws.probs, &ws.targets, self.cfg.vocab);
        ws.loss_sum
    }

    /// Forward up to the logits, left in `ws.probs` (before any softmax);
    /// returns them.
    pub fn forward_logits<'a>(&self, params: &[f32], ws: &'a mut Workspace) -> &'a [f32] {
        let (rows, d, v) = (ws.batch * ws.t, self.cfg.d_model, self.cfg.vocab);
        self.emb.forward(params, &ws.tokens, ws.t, &mut ws.x0);
        let r = ws.scratch.round;
        r.round_in_place(&mut ws.x0);
        let n = self.streams();
        if let Some(h) = &self.stream_head {
            h.enter(&ws.x0, &mut ws.xs);
        }
        let first: &[f32] = if n > 1 { &ws.xs } else { &ws.x0 };
        for i in 0..self.blocks.len() {
            let (done, rest) = ws.blocks.split_at_mut(i);
            let x: &[f32] = if i == 0 { first } else { done[i - 1].output() };
            self.blocks[i].forward(params, x, &mut rest[0], &mut ws.scratch);
            ws.residual_sumsq[i] = rest[0].mlp.output_sumsq / self.blocks[i].mlp.res.rms_streams();
        }
        let last: &[f32] = ws.blocks.last().map(|c| c.output()).unwrap_or(first);
        let last: &[f32] = match &self.stream_head {
            Some(h) => {
                let col = h.forward(params, last, ws.head_c.as_mut().unwrap());
                r.round_in_place(col);
                col
            }
            None => last,
        };
        let fin: &[f32] = match &self.final_norm {
            Some(n) => {
                n.forward(params, last, &mut ws.fin, ws.fin_c.as_mut().unwrap());
                r.round_in_place(&mut ws.fin);
                &ws.fin
            }
            None => last,
        };
        matmul::linear_forward(
            fin,
            self.head_weight().get(params),
            self.head_bias.as_ref().map(|b| b.get(params)),
            rows,
            d,
            v,
            &mut ws.probs,
        );
        if let Some(cap) = self.cfg.final_softcap {
            ws.probs
                .iter_mut()
                .for_each(|l| *l = (*l / cap).tanh() * cap);
            ws.capped.copy_from_slice(&ws.probs);
        }
        &ws.probs
    }

    /// Backward of `scale * loss_sum` after [`forward`](Self::forward):
    /// zeroes `ws.grads` (unless `ws.grads_zero` says it is) and fills it.
    pub fn backward(&self, params: &[f32], ws: &mut Workspace, scale: f32) {
        self.backward_inner(params, ws, scale, None)
    }

    /// Backward of `scale * sum_rows CE(teacher_row, softmax(logits_row))`
    /// (distillation onto soft targets `teacher`, `[rows, vocab]`).
    pub fn backward_soft(&self, params: &[f32], ws: &mut Workspace, teacher: &[f32], scale: f32) {
        self.backward_inner(params, ws, scale, Some(teacher))
    }

    fn backward_inner(
        &self,
        params: &[f32],
        ws: &mut Workspace,
        scale: f32,
        teacher: Option<&[f32]>,
    ) {
        let (rows, d, v) = (ws.batch * ws.t, self.cfg.d_model, self.cfg.vocab);
        let Workspace {
            t,
            tokens,
            targets,
            x0,
            xs,
            head_c,
            blocks,
            scratch,
            fin,
            fin_c,
            probs,
            capped,
            dlogits,
            dfin,
            d1,
            d2,
            dmid,
            grads,
            grads_zero,
            ..
        } = ws;
        if !*grads_zero {
            grads.fill(0.0);
        }
        *grads_zero = false;
        match teacher {
            None => act::cross_entropy_backward(probs, targets, v, scale, dlogits),
            Some(t) => act::soft_cross_entropy_backward(probs, t, scale, dlogits),
        }
        if let Some(cap) = self.cfg.final_softcap {
            // Through the soft-cap: d(raw) = d(capped) (1 - (capped / cap)^2).
            for (g, &c) in dlogits.iter_mut().zip(capped.iter()) {
                let u = c / cap;
                *g *= 1.0 - u * u;
            }
        }
        if let Some(b) = &self.head_bias {
            matmul::add_column_sums(dlogits, v, b.get_mut(grads));
        }
        let n = self.streams();
        let first: &[f32] = if n > 1 { xs } else { x0 };
        let streams_out: &[f32] = blocks.last().map(|c| c.output()).unwrap_or(first);
        let last: &[f32] = match head_c {
            Some(h) => h.output(),
            None => streams_out,
        };
        let fin_in: &[f32] = if self.final_norm.is_some() { fin } else { last };
        let hw = self.head_weight();
        matmul::linear_backward(
            fin_in,
            hw.get(params),
            dlogits,
            rows,
            d,
            v,
            hw.get_mut(grads),
            None,
            Some(dfin),
            false,
        );
        let nd = rows * d;
        match &self.final_norm {
            Some(fnorm) => fnorm.backward(
                params,
                grads,
                last,
                dfin,
                &mut d1[..nd],
                fin_c.as_mut().unwrap(),
            ),
            None => d1[..nd].copy_from_slice(dfin),
        }
        scratch.round.round_in_place(&mut d1[..nd]);
        let (mut dcur, mut dnext): (&mut AlignedBuf, &mut AlignedBuf) = (d1, d2);
        if let (Some(h), Some(hc)) = (&self.stream_head, head_c.as_mut()) {
            h.backward(params, grads, streams_out, &dcur[..nd], dnext, hc);
            scratch.round.round_in_place(dnext);
            std::mem::swap(&mut dcur, &mut dnext);
        }
        for i in (0..self.blocks.len()).rev() {
            let (done, rest) = blocks.split_at_mut(i);
            let x: &[f32] = if i == 0 { first } else { done[i - 1].output() };
            self.blocks[i].backward(params, grads, x, dcur, dnext, dmid, &mut rest[0], scratch);
            std::mem::swap(&mut dcur, &mut dnext);
        }
        if let Some(h) = &self.stream_head {
            // The embedding entered the streams (copied into each, or slot 0).
            h.enter_backward(dcur, &mut dnext[..nd]);
            scratch.round.round_in_place(&mut dnext[..nd]);
            dcur = dnext;
        }
        self.emb.backward(params, grads, tokens, *t, &dcur[..nd]);
    }

    /// Number of learnable parameters.
    pub fn num_params(&self) -> usize {
        self.layout.num_params()
    }

    /// Every sublayer, bottom to top (two per block).
    pub fn sublayers(&self) -> impl Iterator<Item = &Sublayer> {
        self.blocks.iter().flat_map(|b| b.sublayers())
    }

    /// The parameters that stay at their initial value (`no_beta`: every
    /// norm's beta): the trainer zeroes their gradients before each step.
    pub fn frozen(&self) -> Vec<crate::params::ParamRef> {
        if !self.cfg.no_beta {
            return Vec::new();
        }
        self.norms()
            .filter_map(|s| s.norm.param(crate::kernels::norm::ParamRole::Bias))
            .collect()
    }

    /// Every norm with where it sits: the blocks' (in parameter order),
    /// then the final norm.
    pub fn norms(&self) -> impl Iterator<Item = NormSite<'_>> {
        let blocks = self.blocks.iter().enumerate().flat_map(|(i, b)| b.norms(i));
        let fin = self.final_norm.iter().map(|n| NormSite {
            block: None,
            sublayer: None,
            sub: None,
            role: NormRole::Final,
            norm: n,
        });
        blocks.chain(fin)
    }
}
