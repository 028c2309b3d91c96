//! Modules with explicit forward and backward passes (no autograd tape).
//!
//! A module holds its configuration and [`ParamRef`](crate::params::ParamRef)s
//! into the model's flat parameter buffer; a matching `*Cache` holds the
//! activations its backward needs, sized once for a (batch, seq) shard.
//! Conventions: `forward(params, input, ..., output, cache)`;
//! `backward(params, grads, input, d_output, d_input, cache)` **writes**
//! `d_input` and **accumulates** into `grads`.

pub mod attention;
pub mod attn_fn;
pub mod attnres;
pub mod block;
pub mod embedding;
pub mod gate;
pub mod hyper;
pub mod hyper_rows;
pub mod linear;
pub mod mhc;
pub mod mixer;
pub mod mlp;
pub mod norm;
pub mod placement;
pub mod residual;
pub mod rope;
pub mod scratch;
pub mod sinkhorn;
pub mod stream_head;
pub mod sublayer;

pub use attention::{
    uniform_sink_share, Attention, AttentionCache, AttnOptions, OutputGate, RopeSpec,
};
pub use attn_fn::AttnKind;
pub use attnres::{DepthAttn, DepthCache, DepthHead, DepthSlots};
pub use block::{Block, BlockCache, NormSite};
pub use embedding::Embedding;
pub use gate::{Gate, GateKind};
pub use hyper::{Coefficients, Hyper, HyperCache, HyperDynamic};
pub use linear::Linear;
pub use mhc::Manifold;
pub use mixer::{ToyMixer, ToyMixerCache};
pub use mlp::{Activation, Mlp, MlpCache};
pub use norm::{Norm, NormCache};
pub use placement::{NormRole, Placement};
pub use residual::{Residual, ResidualCache};
pub use scratch::Scratch;
pub use stream_head::{HeadCache, HyperHead, StreamHead};
pub use sublayer::{Op, OpCache, Sublayer, SublayerCache};
