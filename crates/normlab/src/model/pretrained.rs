//! A pretrained decoder as a trainable [`Model`]: its configuration lowered
//! into the one block description ([`ModelConfig`]: RoPE, grouped-query
//! attention, QK-Norm, the placements, the gated MLPs, biases, soft-caps,
//! windows, the parallel block, tied heads) and its weights, dequantised to
//! f32, copied into the model's parameters through the modules' own
//! references (which Linear, which norm), never through re-spelled names.
//! `normlab train --from` fine-tunes what this returns; a test keeps its
//! logits equal to the decoder's on every tiny family. A fine-tune may
//! insert what the model was not trained with ([`Insert`]: the attention
//! output gate, gpt-oss's sink logit), started so that the model computes
//! what it computed before.

use super::config::{LayerAttn, ModelConfig, ModelKind};
use super::decoder::{Decoder, GatedAct, Matrix};
use super::Model;
use crate::error::Result;
use crate::kernels::buf::AlignedBuf;
use crate::kernels::norm::{NormKind, ParamRole};
use crate::nn::{Activation, Attention, AttnKind, Mlp, Norm, Op, OutputGate, Placement};
use crate::params::ParamRef;

/// The sink logit's start when inserted into a pretrained model: its share
/// of a row is exp(SINK_START - m) over the row's sum, m its largest score,
/// about 1e-7 of a row whose largest score is 0: SmolLM2-135M's first
/// training loss moves by 5e-6 of itself (4.4202368 -> 4.4202585). Lower
/// starts are closer still but frozen: the sink's gradient is about its
/// share, and below Adam's eps (1e-8) Adam no longer moves a parameter
/// about lr a step (at -20 a multiplier of 1000 on the learning rate left
/// a tiny model's losses unchanged to the bit); at -12 SmolLM2's first
/// loss moved by 2e-4 of itself.
pub const SINK_START: f32 = -16.0;

/// What a fine-tune inserts into a pretrained model's attention, each
/// started so that the model's function is unchanged: the output gate with
/// W_g = 0 (sigmoid(0) = 1/2 on every value) and the output projection
/// doubled, exactly the model's output in floating point (both factors are
/// powers of two); the sink logit at [`SINK_START`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Insert {
    /// The output gate.
    pub gate: Option<OutputGate>,
    /// Learned sink logits per head (gpt-oss).
    pub sink_logit: bool,
}

impl Insert {
    /// What `cfg` holds beyond a lowered decoder's configuration.
    pub fn of(cfg: &ModelConfig) -> Insert {
        Insert {
            gate: cfg.attn_gate,
            sink_logit: cfg.attn_kind == AttnKind::SinkLogit,
        }
    }

    /// `mc` with the insertion.
    fn apply(self, mc: &mut ModelConfig) {
        mc.attn_gate = self.gate;
        if self.sink_logit {
            mc.attn_kind = AttnKind::SinkLogit;
        }
    }
}

/// The decoder's configuration in normlab's terms, for training on
/// sequences of at most `seq` tokens (within its context).
pub fn lower_config(m: &Decoder, seq: usize) -> Result<ModelConfig> {
    lower_config_with(m, seq, Insert::default())
}

/// [`lower_config`] with `insert` added.
pub fn lower_config_with(m: &Decoder, seq: usize, insert: Insert) -> Result<ModelConfig> {
    let c = &m.cfg;
    let g = c.gpt;
    let mut mc = ModelConfig::defaults(ModelKind::Gpt);
    mc.layers = c.layers;
    mc.d_model = c.d;
    mc.heads = c.heads;
    mc.kv_heads = (c.kv_heads != c.heads).then_some(c.kv_heads);
    mc.head_dim = (c.head_dim * c.heads != c.d).then_some(c.head_dim);
    mc.seq = seq.min(c.context).max(1);
    mc.hidden = c.ffn;
    mc.vocab = c.vocab;
    mc.act = match (g.plain_mlp, c.act) {
        (true, GatedAct::GeluTanh) => Activation::Gelu,
        (true, GatedAct::Gelu) => Activation::GeluErf,
        (false, GatedAct::Silu) => Activation::Swiglu,
        (false, GatedAct::GeluTanh) => Activation::Geglu,
        (plain, act) => {
            return Err(format!(
                "training a {} MLP with {act:?} is not supported",
                if plain { "plain" } else { "gated" }
            )
            .into())
        }
    };
    mc.norm = match (c.norm, c.gain.zero_centred()) {
        (NormKind::RmsNorm, true) => NormKind::ZRmsNorm,
        (k, _) => k,
    };
    mc.no_beta = c.norm == NormKind::LayerNorm && !g.norm_bias;
    mc.eps = Some(c.eps);
    mc.placement = match c.placement {
        Placement::Sandwich | Placement::Peri => Placement::Sandwich,
        p => p,
    };
    mc.final_norm = Some(true);
    mc.qk_norm = c.qk_norm;
    mc.qk_norm_whole = c.qk_norm_whole;
    mc.qk_eps = c.qk_norm.then_some(c.eps);
    mc.no_bias = !g.linear_bias;
    mc.qkv_bias = c.qkv_bias && !g.linear_bias;
    mc.tie_head = m.head.is_none();
    mc.parallel = g.parallel;
    mc.emb_mult = (c.emb_scale != 1.0).then_some(c.emb_scale);
    mc.final_softcap = c.final_softcap;
    mc.attn_softcap = c.attn_softcap;
    let default_scale = 1.0 / (c.head_dim as f32).sqrt();
    mc.attn_scale = (c.attn_scale != default_scale).then_some(c.attn_scale);
    if !g.learned_positions {
        let rot = c.rotary_dims();
        if rot == 0 {
            return Err("training a decoder without positions is not supported".into());
        }
        mc.rope_dims = (rot < c.head_dim).then_some(rot);
        mc.rope_scaling = c.rope_scaling;
        mc.rope_pairs = Some(c.rope_pairs);
        let first = c.attn[0];
        if c.attn.iter().all(|a| *a == first) {
            mc.rope = Some(first.rope_base);
            mc.window = first.window;
        } else {
            mc.layer_attn = Some(
                c.attn
                    .iter()
                    .map(|a| LayerAttn {
                        window: a.window,
                        rope_base: a.rope_base,
                    })
                    .collect(),
            );
        }
    }
    insert.apply(&mut mc);
    mc.validate()?;
    Ok(mc)
}

/// Where the parameters [`Insert`] adds lie in a lowered model's buffer
/// (every gate's W_g and sink logits: a pretrained family lowered has
/// none of its own).
pub fn inserted(model: &Model) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    for b in &model.blocks {
        if let Op::Attention(a) = &b.mix.op {
            out.extend(a.gate.as_ref().map(|(_, w)| w.w.0.clone()));
            out.extend(a.sinks.as_ref().map(|s| s.0.clone()));
        }
    }
    out
}

/// The decoder as a model and its parameters (`seq`: as
/// [`lower_config`]).
pub fn lower(m: &Decoder, seq: usize) -> Result<(Model, AlignedBuf)> {
    lower_with(m, seq, Insert::default())
}

/// [`lower`] with `insert` added, computing what the decoder computes.
pub fn lower_with(m: &Decoder, seq: usize, insert: Insert) -> Result<(Model, AlignedBuf)> {
    let cfg = lower_config_with(m, seq, insert)?;
    let model = Model::new(&cfg)?;
    let mut p = model.layout.zeros();
    let d = m.cfg.d;
    set(&mut p, &model.emb.wte, &dense(&m.emb));
    if let (Some(wpe), Some(pos)) = (&model.emb.wpe, &m.pos) {
        set(&mut p, wpe, &dense(pos)[..cfg.seq * d]);
    }
    for (b, l) in model.blocks.iter().zip(&m.layers) {
        let bias = &l.bias;
        gain(
            &mut p,
            b.mix.in_norm.as_ref(),
            l.attn_norm.as_deref(),
            bias.attn_norm.as_deref(),
        )?;
        gain(
            &mut p,
            b.mix.out_norm.as_ref(),
            l.attn_out_norm.as_deref(),
            None,
        )?;
        gain(
            &mut p,
            b.mlp.in_norm.as_ref(),
            l.ffn_norm.as_deref(),
            bias.ffn_norm.as_deref(),
        )?;
        gain(
            &mut p,
            b.mlp.out_norm.as_ref(),
            l.ffn_out_norm.as_deref(),
            None,
        )?;
        let (Op::Attention(a), Op::Mlp(f)) = (&b.mix.op, &b.mlp.op) else {
            return Err("a lowered block is attention then MLP".into());
        };
        attention(&mut p, a, l)?;
        mlp(&mut p, f, l)?;
    }
    gain(
        &mut p,
        model.final_norm.as_ref(),
        Some(&m.final_norm),
        m.final_norm_bias.as_deref(),
    )?;
    if let (Some(h), Some(w)) = (&model.head, &m.head) {
        set(&mut p, &h.w, &dense(w));
    }
    Ok((model, p))
}

/// A matrix's values, row by row.
fn dense(w: &Matrix) -> Vec<f32> {
    let mut out = vec![0f32; w.rows * w.cols];
    for (r, row) in out.chunks_exact_mut(w.cols).enumerate() {
        w.row_into(r, row);
    }
    out
}

/// Copy `v` into the parameter `r`.
fn set(p: &mut [f32], r: &ParamRef, v: &[f32]) {
    r.get_mut(p).copy_from_slice(v);
}

/// A norm's gain (and bias): the model's gain, or w = gain - 1 for a
/// zero-centred kind.
fn gain(p: &mut [f32], n: Option<&Norm>, g: Option<&[f32]>, b: Option<&[f32]>) -> Result<()> {
    let (n, g) = match (n, g) {
        (Some(n), Some(g)) => (n, g),
        (None, None) => return Ok(()),
        _ => return Err("a norm of the decoder has no place in the model".into()),
    };
    let r = n.param(ParamRole::Gain).expect("a norm with a gain");
    let zero_centred = n.kind == NormKind::ZRmsNorm;
    r.get_mut(p)
        .iter_mut()
        .zip(g)
        .for_each(|(o, &v)| *o = if zero_centred { v - 1.0 } else { v });
    if let (Some(rb), Some(b)) = (n.param(ParamRole::Bias), b) {
        set(p, &rb, b);
    }
    Ok(())
}

/// q, k and v stacked as the fused projection's rows; their biases; the
/// output projection; QK-Norm's gains.
fn attention(p: &mut [f32], a: &Attention, l: &super::decoder::DecoderLayer) -> Result<()> {
    let mut w = dense(&l.wq);
    w.extend(dense(&l.wk));
    w.extend(dense(&l.wv));
    set(p, &a.qkv.w, &w);
    if let Some(rb) = &a.qkv.b {
        match &l.qkv_bias {
            Some((bq, bk, bv)) => {
                let v: Vec<f32> = bq.iter().chain(bk).chain(bv).copied().collect();
                set(p, rb, &v);
            }
            None => rb.get_mut(p).fill(0.0),
        }
    }
    let mut wo = dense(&l.wo);
    if let Some((_, gw)) = &a.gate {
        // sigmoid(0) halves every value the projection reads: doubled, it
        // writes what it wrote (the gate's W_g stays at zero).
        gw.w.get_mut(p).fill(0.0);
        wo.iter_mut().for_each(|v| *v *= 2.0);
    }
    set(p, &a.proj.w, &wo);
    if let Some(s) = &a.sinks {
        s.get_mut(p).fill(SINK_START);
    }
    if let (Some(rb), Some(b)) = (&a.proj.b, &l.bias.o) {
        set(p, rb, b);
    }
    if let (Some((qn, kn)), Some((gq, gk))) = (&a.qk_norm, &l.qk_norm) {
        for (n, g) in [(qn, gq), (kn, gk)] {
            set(p, &n.param(ParamRole::Gain).expect("a gain"), g);
        }
    }
    Ok(())
}

/// The MLP: a gated one's gate and up stacked as the fused projection's
/// rows, or a plain one's up; the down projection; their biases.
fn mlp(p: &mut [f32], f: &Mlp, l: &super::decoder::DecoderLayer) -> Result<()> {
    let mut w = match &l.gate {
        Some(g) => dense(g),
        None => Vec::new(),
    };
    w.extend(dense(&l.up));
    set(p, &f.fc.w, &w);
    if let (Some(rb), Some(b)) = (&f.fc.b, &l.bias.up) {
        set(p, rb, b);
    }
    set(p, &f.proj.w, &dense(&l.down));
    if let (Some(rb), Some(b)) = (&f.proj.b, &l.bias.down) {
        set(p, rb, b);
    }
    Ok(())
}
