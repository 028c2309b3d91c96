//! Building a [`Model`] from its [`ModelConfig`]: the parameter layout
//! and every module, block by block and sublayer by sublayer (where each
//! norm sits, the mixing or attention operation, the residual option that
//! routes it), then the stream head, the final norm and the head.

use super::config::{InitScheme, ModelConfig, ModelKind};
use super::residual::{self, StreamsPlan};
use super::Model;
use crate::error::Result;
use crate::nn::{
    Attention, Block, DepthAttn, DepthHead, DepthSlots, Embedding, Gate, Hyper, Linear, Mlp, Norm,
    Op, Placement, Residual, StreamHead, Sublayer, ToyMixer,
};
use crate::params::{Init, ParamLayout};

/// What every sublayer's construction shares: the initialisations and the
/// residual path's skip factor.
struct Inits {
    proj: Init,
    fc: Init,
    qkv: Init,
    skip: f32,
}

impl Inits {
    fn of(cfg: &ModelConfig) -> Inits {
        let l = cfg.layers;
        let deep = cfg.placement == Placement::DeepNorm;
        let (alpha, beta) = cfg.deepnorm_alpha_beta();
        let out_std = cfg.out_proj_std.unwrap_or(0.02 / ((2 * l) as f32).sqrt());
        let std = Init::Normal(cfg.init_std);
        let (proj, fc, qkv) = if deep {
            (
                Init::XavierNormal(beta),
                Init::XavierNormal(beta),
                Init::XavierBlocks(vec![1.0, 1.0, beta]),
            )
        } else {
            (Init::Normal(out_std), std.clone(), std.clone())
        };
        let skip = if !cfg.residual {
            0.0
        } else if deep {
            alpha
        } else {
            1.0
        };
        Inits {
            proj,
            fc,
            qkv,
            skip,
        }
    }
}

impl Model {
    /// Build the modules and parameter layout of a (validated) config.
    pub fn new(cfg: &ModelConfig) -> Result<Model> {
        cfg.validate()?;
        let (d, l) = (cfg.d_model, cfg.layers);
        let mut layout = ParamLayout::new();
        let shape = (cfg.vocab, cfg.seq, d);
        let mut emb = Embedding::new(&mut layout, shape, cfg.init_std, cfg.learned_positions());
        if cfg.emb_scale {
            emb = emb.with_scale(&mut layout);
        }
        emb.mult = cfg.emb_mult.unwrap_or(1.0);
        let inits = Inits::of(cfg);
        let mut blocks = Vec::with_capacity(l);
        for i in 0..l {
            let mix = sublayer(cfg, &mut layout, &inits, i, 0);
            let mlp = sublayer(cfg, &mut layout, &inits, i, 1);
            blocks.push(Block {
                mix,
                mlp,
                parallel: cfg.parallel,
            });
        }
        let stream_head = stream_head(cfg, &mut layout);
        let final_norm = cfg.has_final_norm().then(|| {
            Norm::new(
                &mut layout,
                "transformer.ln_f",
                cfg.norm,
                d,
                cfg.eps(),
                None,
            )
        });
        let head = (!cfg.tie_head).then(|| {
            Linear::new(
                &mut layout,
                "lm_head",
                d,
                cfg.vocab,
                false,
                None,
                Init::Normal(cfg.init_std),
            )
        });
        let head_bias = cfg.head_bias.then(|| {
            layout.add(
                "lm_head.bias",
                &[cfg.vocab],
                crate::params::ParamKind::Bias,
                None,
                Init::Const(0.0),
            )
        });
        let mut model = Model {
            cfg: cfg.clone(),
            head_bias,
            layout,
            emb,
            blocks,
            stream_head,
            final_norm,
            head,
        };
        if cfg.init == InitScheme::Torch {
            model.apply_torch_init();
        }
        if cfg.dyt_alpha.is_some() || cfg.dyt_alpha_attn.is_some() {
            model.apply_dyt_alpha();
        }
        Ok(model)
    }
}

/// The operation of sublayer `j` of block `i`: the toy mixer or attention
/// (j = 0), the MLP (j = 1).
fn operation(cfg: &ModelConfig, layout: &mut ParamLayout, inits: &Inits, i: usize, j: usize) -> Op {
    let (d, blk) = (cfg.d_model, Some(i));
    let base = format!("transformer.h.{i}");
    match (j, cfg.kind) {
        (0, ModelKind::Toy) => Op::Mixer(ToyMixer::new(
            layout,
            &format!("{base}.mix"),
            d,
            cfg.no_bias,
            blk,
            inits.proj.clone(),
        )),
        (0, ModelKind::Gpt) => Op::Attention(Attention::new(
            layout,
            &format!("{base}.attn"),
            d,
            cfg.heads,
            cfg.attn_options(i),
            blk,
            inits.qkv.clone(),
            inits.proj.clone(),
        )),
        _ => Op::Mlp(Mlp {
            clamp: cfg.swiglu_clamp,
            ..Mlp::new(
                layout,
                &format!("{base}.mlp"),
                d,
                cfg.hidden,
                cfg.act,
                cfg.no_bias,
                blk,
                inits.fc.clone(),
                inits.proj.clone(),
            )
        }),
    }
}

/// Sublayer `j` of block `i`: its norms where its placement puts them,
/// its operation, and the residual option that routes it.
fn sublayer(
    cfg: &ModelConfig,
    layout: &mut ParamLayout,
    inits: &Inits,
    i: usize,
    j: usize,
) -> Sublayer {
    let (d, l, eps, blk) = (cfg.d_model, cfg.layers, cfg.eps(), Some(i));
    let op_name = match (j, cfg.kind) {
        (0, ModelKind::Toy) => "mix",
        (0, _) => "attn",
        _ => "mlp",
    };
    let base = format!("transformer.h.{i}");
    let plan = residual::plan(cfg, i, j);
    let placement = plan.placement;
    let norm =
        |layout: &mut ParamLayout, name: String| Norm::new(layout, &name, cfg.norm, d, eps, blk);
    let in_norm = placement
        .has_in_norm()
        .then(|| norm(layout, format!("{base}.ln_{}", j + 1)));
    let op = operation(cfg, layout, inits, i, j);
    let out_norm = placement
        .has_out_norm()
        .then(|| norm(layout, format!("{base}.{op_name}.out_norm")));
    let out_bias = (cfg.out_norm_bias && out_norm.is_some()).then(|| {
        layout.add(
            format!("{base}.{op_name}.out_norm_bias"),
            &[d],
            crate::params::ParamKind::Bias,
            blk,
            Init::Const(0.0),
        )
    });
    let post_norm = placement
        .has_post_norm()
        .then(|| norm(layout, format!("{base}.{op_name}.post_norm")));
    let gate = plan.gate.map(|(kind, init, name)| {
        Gate::new(
            layout,
            &format!("{base}.{op_name}.{name}"),
            kind,
            d,
            init,
            blk,
        )
    });
    let hc_name = format!("{base}.{op_name}.hc");
    let res = match plan.hyper {
        Some(StreamsPlan::Hc { n, dynamic }) => Residual::Hyper(Hyper::new(
            layout,
            &hc_name,
            n,
            d,
            2 * i + j,
            dynamic.then_some((cfg.norm, eps)),
            blk,
        )),
        Some(StreamsPlan::Mhc { n, iters }) => Residual::Hyper(Hyper::manifold(
            layout,
            &hc_name,
            n,
            d,
            iters,
            cfg.init_std,
            blk,
        )),
        Some(StreamsPlan::AttnRes { size }) => Residual::Depth(DepthAttn::new(
            layout,
            &format!("{base}.{op_name}.attn_res"),
            DepthSlots::of(2 * i + j, 2 * l, size),
            d,
            blk,
        )),
        // A parallel block's MLP adds to the mixing output: no skip path.
        None if cfg.parallel && j == 1 => Residual::single(0.0, cfg.branch_scale, post_norm),
        None => Residual::single(inits.skip, cfg.branch_scale, post_norm),
    };
    Sublayer {
        d,
        in_norm,
        out_norm,
        res,
        out_bias,
        in_scale: plan.in_scale,
        gate,
        op,
    }
}

/// With n > 1 streams: how they become what the final norm reads.
fn stream_head(cfg: &ModelConfig, layout: &mut ParamLayout) -> Option<StreamHead> {
    let (d, l) = (cfg.d_model, cfg.layers);
    match residual::plan(cfg, 0, 0).hyper {
        None => None,
        Some(StreamsPlan::Hc { n, .. }) => Some(StreamHead::Sum { n, d }),
        Some(StreamsPlan::Mhc { n, .. }) => Some(StreamHead::learned(
            layout,
            "transformer.hc_head",
            n,
            d,
            cfg.init_std,
        )),
        Some(StreamsPlan::AttnRes { size }) => Some(StreamHead::Depth(DepthHead::new(
            layout,
            "transformer.attn_res_out",
            DepthSlots::of(0, 2 * l, size).slots,
            d,
        ))),
    }
}
