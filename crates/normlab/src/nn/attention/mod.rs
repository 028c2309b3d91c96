//! Causal multi-head self-attention, trainable, with every option the
//! pretrained families use: grouped-query attention (fewer key/value heads
//! than query heads) and a head width of its own, biases on q/k/v and on
//! the output projection, QK-Norm per head or over the whole q and k, RoPE
//! (`nn/rope.rs`, with its scalings and partial rotation), a scale of its
//! own, tanh soft-capped scores (Gemma 2), a sliding window; and the
//! lessons' options: the output gate and the score-to-weight maps of
//! [`AttnKind`] (attn_fn.rs).
//!
//! ```text
//! [q | k | v] = c_attn(a)                     (Linear d -> qw + 2 kvw;
//!                                              qw = heads hd, kvw = kv_heads hd)
//! q, k <- RMSNorm(q), RMSNorm(k)              (QK-Norm: per head over hd, or
//!                                              over the whole q and k; optional)
//! q, k <- RoPE(q), RoPE(k)                    (optional)
//! S = scale q k^T                             (per sequence and query head h,
//!                                              key/value head h / (heads / kv_heads))
//! S <- cap tanh(S / cap)                      (soft-cap, optional)
//! P = causal_softmax(S), within the window    (or sink-logit, sigmoid, relu)
//! ctx = P v, heads merged                     ([rows, qw])
//! ctx <- sigmoid(a W_g^T) * ctx               (output gate, optional)
//! out = c_proj(ctx)                           (Linear qw -> d)
//! ```
//!
//! The output gate is Qiu et al. 2025's G1 (arXiv 2505.06708; Qwen3-Next):
//! `{name}.gate`, no bias, d -> qw (elementwise: one gate per head
//! dimension) or d -> heads (headwise: one per head), from the sublayer's
//! normalised input a, initialised as c_attn.
//!
//! Backward (`backward.rs`): dP = dctx v^T, dv = P^T dctx (summed over the
//! heads that share a key/value head), dS = P (dP - rowsum(P dP)) (softmax;
//! the other kinds' in attn_fn.rs), times 1 - (S/cap)^2 under the soft-cap,
//! dq = scale dS k, dk = scale dS^T q (summed over the group), then RoPE's
//! inverse rotation and QK-Norm's backward; with the gate, dctx = g
//! dgated, dz = sum(dgated ctx) g (1 - g), da += dz W_g.

use super::attn_fn::AttnKind;
use super::linear::Linear;
use super::norm::{buf, Norm, NormCache};
use super::rope::{RopePairs, RopeScaling};
use crate::kernels::buf::AlignedBuf;
use crate::kernels::matmul::Mat;
use crate::kernels::norm::NormKind;
use crate::params::{Init, ParamKind, ParamLayout, ParamRef};
use serde::{Deserialize, Serialize};

mod backward;
mod forward;
mod stats;
pub use stats::uniform_sink_share;

/// The attention output gate's form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputGate {
    /// One gate per head dimension (W_g d x qw).
    Elementwise,
    /// One gate per head (W_g d x heads).
    Headwise,
}

impl OutputGate {
    /// Both forms.
    pub const ALL: [OutputGate; 2] = [OutputGate::Elementwise, OutputGate::Headwise];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            OutputGate::Elementwise => "elementwise",
            OutputGate::Headwise => "headwise",
        }
    }
}

/// RoPE on q and k: its base, its scaling, how many of each head's
/// dimensions it rotates (None: all), in which pairing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeSpec {
    /// The base.
    pub base: f64,
    /// Its scaling for a longer context.
    pub scaling: Option<RopeScaling>,
    /// The rotated dimensions of each head (None: all).
    pub rot: Option<usize>,
    /// Which dimensions rotate together.
    pub pairs: RopePairs,
}

/// The attention's options beyond its width and heads.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttnOptions {
    /// QK-Norm on q and k.
    pub qk_norm: bool,
    /// The output gate.
    pub gate: Option<OutputGate>,
    /// How scores become weights.
    pub kind: AttnKind,
    /// No bias on c_attn and c_proj.
    pub no_bias: bool,
    /// Key/value heads (grouped-query attention; None: as many as heads).
    pub kv_heads: Option<usize>,
    /// Each head's width (None: d / heads).
    pub head_dim: Option<usize>,
    /// A bias on c_attn even with `no_bias` (Qwen2's q/k/v biases).
    pub qkv_bias: bool,
    /// QK-Norm over the whole q and k (OLMo 2) instead of per head.
    pub qk_norm_whole: bool,
    /// QK-Norm's eps (None: RMSNorm's default).
    pub qk_eps: Option<f32>,
    /// The scores' scale (None: 1 / sqrt(head_dim)).
    pub scale: Option<f32>,
    /// Scores tanh-capped at this value (Gemma 2).
    pub softcap: Option<f32>,
    /// A query sees at most this many positions, itself included.
    pub window: Option<usize>,
    /// RoPE on q and k.
    pub rope: Option<RopeSpec>,
}

/// Attention parameters.
#[derive(Clone, Debug)]
pub struct Attention {
    /// The stream's width.
    pub d: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Each head's width.
    pub hd: usize,
    /// `{name}.c_attn`: d -> qw + 2 kvw.
    pub qkv: Linear,
    /// `{name}.c_proj`: qw -> d.
    pub proj: Linear,
    /// QK-Norm on q and k (RMSNorm over head_dim, gain shared by heads; or
    /// over the whole q and k).
    pub qk_norm: Option<(Norm, Norm)>,
    /// Whether QK-Norm spans the whole q and k.
    pub qk_whole: bool,
    /// The output gate: its form and `{name}.gate` (d -> qw or heads).
    pub gate: Option<(OutputGate, Linear)>,
    /// How scores become weights.
    pub kind: AttnKind,
    /// `{name}.sinks`: one logit per head (`AttnKind::SinkLogit`).
    pub sinks: Option<ParamRef>,
    /// The scores' scale.
    pub scale: f32,
    /// The soft-cap.
    pub softcap: Option<f32>,
    /// The window.
    pub window: Option<usize>,
    /// RoPE.
    pub rope: Option<RopeSpec>,
}

/// Activations of one attention sublayer in one shard.
///
/// Heads are never copied out: q, k, v are strided views into the fused
/// `[rows, qw + 2 kvw]` projection (or, with QK-Norm or RoPE, into the
/// `[rows, qw]` and `[rows, kvw]` copies), and each head's output is written
/// straight into its columns of the merged `[rows, qw]` buffer.
#[derive(Clone, Debug)]
pub struct AttentionCache {
    batch: usize,
    t: usize,
    qkv: AlignedBuf,
    q_raw: AlignedBuf,
    k_raw: AlignedBuf,
    q: AlignedBuf,
    k: AlignedBuf,
    /// Under the soft-cap: the capped scores (its backward reads them).
    scores: AlignedBuf,
    probs: AlignedBuf,
    merged: AlignedBuf,
    dmerged: AlignedBuf,
    dp: AlignedBuf,
    dq: AlignedBuf,
    dk: AlignedBuf,
    dq_raw: AlignedBuf,
    dk_raw: AlignedBuf,
    dqkv: AlignedBuf,
    q_cache: Option<NormCache>,
    k_cache: Option<NormCache>,
    /// With the output gate: the gates, the gated context, dL/dz.
    g: AlignedBuf,
    gated: AlignedBuf,
    dz: AlignedBuf,
    /// With sink logits: per sequence, head and query, the share the
    /// head's sink logit took.
    absorbed: AlignedBuf,
    /// RoPE's angles for positions 0..t: cos and sin `[t, rot / 2]`.
    cos: Vec<f32>,
    sin: Vec<f32>,
    kind: AttnKind,
    /// The fused projection's layout: (its width, the keys' first column,
    /// the values' first column, head width, heads per key/value head).
    layout: (usize, usize, usize, usize, usize),
    /// Largest pre-softmax logit of the last forward.
    pub max_logit: f32,
}

/// Rows per causal block: a row block [i0, i1) only attends to columns
/// [0, i1), so score and value products skip the masked upper blocks.
const BLOCK: usize = 64;

impl Attention {
    /// Register `{name}.c_attn`, `{name}.c_proj` and, with QK-Norm,
    /// `{name}.q_norm`, `{name}.k_norm`; with the gate `{name}.gate`; with
    /// sink logits `{name}.sinks`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        layout: &mut ParamLayout,
        name: &str,
        d: usize,
        heads: usize,
        opts: AttnOptions,
        block: Option<usize>,
        qkv_init: Init,
        proj_init: Init,
    ) -> Attention {
        let hd = opts.head_dim.unwrap_or_else(|| {
            assert!(heads > 0 && d.is_multiple_of(heads), "heads must divide d");
            d / heads
        });
        let kv_heads = opts.kv_heads.unwrap_or(heads);
        assert!(
            kv_heads > 0 && heads.is_multiple_of(kv_heads),
            "kv_heads must divide heads"
        );
        let (qw, kvw) = (heads * hd, kv_heads * hd);
        let qkv = Linear::new(
            layout,
            &format!("{name}.c_attn"),
            d,
            qw + 2 * kvw,
            !opts.no_bias || opts.qkv_bias,
            block,
            qkv_init.clone(),
        );
        let proj = Linear::new(
            layout,
            &format!("{name}.c_proj"),
            qw,
            d,
            !opts.no_bias,
            block,
            proj_init,
        );
        let qk_norm = opts.qk_norm.then(|| {
            let kind = NormKind::RmsNorm;
            let eps = opts.qk_eps.unwrap_or(kind.default_eps());
            let (wq, wk) = if opts.qk_norm_whole {
                (qw, kvw)
            } else {
                (hd, hd)
            };
            (
                Norm::new(layout, &format!("{name}.q_norm"), kind, wq, eps, block),
                Norm::new(layout, &format!("{name}.k_norm"), kind, wk, eps, block),
            )
        });
        let gate = opts.gate.map(|g| {
            let out = match g {
                OutputGate::Elementwise => qw,
                OutputGate::Headwise => heads,
            };
            // c_attn's init; Xavier with the queries' gain where c_attn's
            // is per block of q | k | v (DeepNorm).
            let init = match qkv_init {
                Init::XavierBlocks(g) => Init::XavierNormal(g[0]),
                i => i,
            };
            let w = Linear::new(layout, &format!("{name}.gate"), d, out, false, block, init);
            (g, w)
        });
        let sinks = (opts.kind == AttnKind::SinkLogit).then(|| {
            layout.add(
                format!("{name}.sinks"),
                &[heads],
                ParamKind::Gate,
                block,
                Init::Const(0.0),
            )
        });
        Attention {
            d,
            heads,
            kv_heads,
            hd,
            qkv,
            proj,
            qk_norm,
            qk_whole: opts.qk_norm_whole,
            gate,
            kind: opts.kind,
            sinks,
            scale: opts.scale.unwrap_or(1.0 / (hd as f32).sqrt()),
            softcap: opts.softcap,
            window: opts.window,
            rope: opts.rope,
        }
    }

    /// The queries' width.
    pub fn q_width(&self) -> usize {
        self.heads * self.hd
    }

    /// The keys' (and the values') width.
    pub fn kv_width(&self) -> usize {
        self.kv_heads * self.hd
    }

    /// The fused projection's width.
    fn qkv_width(&self) -> usize {
        self.q_width() + 2 * self.kv_width()
    }

    /// Whether q and k get copies of their own (QK-Norm or RoPE).
    fn separate_qk(&self) -> bool {
        self.qk_norm.is_some() || self.rope.is_some()
    }

    /// The rotated dimensions of each head (0: no RoPE).
    fn rot(&self) -> usize {
        self.rope.map_or(0, |r| r.rot.unwrap_or(self.hd))
    }

    /// Where the sink logit's shares of (sequence, head) block `bh` lie
    /// in the cache (empty without sink logits).
    fn absorbed_rows(&self, bh: usize, t: usize) -> std::ops::Range<usize> {
        if self.sinks.is_some() {
            bh * t..(bh + 1) * t
        } else {
            0..0
        }
    }

    /// Gates per row (0 without the gate).
    fn gate_width(&self) -> usize {
        self.gate.as_ref().map_or(0, |(_, w)| w.d_out)
    }

    /// Buffers for `batch` sequences of `t` positions.
    pub fn cache(&self, batch: usize, t: usize) -> AttentionCache {
        let (rows, h, kvh) = (batch * t, self.heads, self.kv_heads);
        let (qw, kvw) = (self.q_width(), self.kv_width());
        let sep = |n: usize| buf(if self.separate_qk() { n } else { 0 });
        let nrm = |n: usize| buf(if self.qk_norm.is_some() { n } else { 0 });
        let (q_rows, k_rows) = if self.qk_whole {
            (rows, rows)
        } else {
            (rows * h, rows * kvh)
        };
        let (cos, sin) = match self.rope {
            Some(r) => super::rope::rope_table(0, t, self.rot(), r.base, r.scaling),
            None => (Vec::new(), Vec::new()),
        };
        AttentionCache {
            batch,
            t,
            qkv: buf(rows * self.qkv_width()),
            q_raw: nrm(rows * qw),
            k_raw: nrm(rows * kvw),
            q: sep(rows * qw),
            k: sep(rows * kvw),
            scores: buf(if self.softcap.is_some() {
                batch * h * t * t
            } else {
                0
            }),
            probs: buf(batch * h * t * t),
            merged: buf(rows * qw),
            dmerged: buf(rows * qw),
            dp: buf(t * t),
            dq: sep(rows * qw),
            dk: sep(rows * kvw),
            dq_raw: nrm(rows * qw),
            dk_raw: nrm(rows * kvw),
            dqkv: buf(rows * self.qkv_width()),
            q_cache: self.qk_norm.as_ref().map(|(n, _)| n.cache(q_rows)),
            k_cache: self.qk_norm.as_ref().map(|(_, n)| n.cache(k_rows)),
            g: buf(rows * self.gate_width()),
            gated: buf(if self.gate.is_some() { rows * qw } else { 0 }),
            dz: buf(rows * self.gate_width()),
            absorbed: buf(if self.sinks.is_some() {
                batch * h * t
            } else {
                0
            }),
            cos,
            sin,
            kind: self.kind,
            layout: (self.qkv_width(), qw, qw + kvw, self.hd, h / kvh),
            max_logit: 0.0,
        }
    }
}

/// The `[n_rows, n_cols]` block at (`r0`, `c0`) of a row-major `t x t`
/// matrix (a head's scores or probabilities).
#[inline]
fn square_block(
    m: &[f32],
    t: usize,
    r0: usize,
    n_rows: usize,
    c0: usize,
    n_cols: usize,
) -> Mat<'_> {
    Mat {
        data: &m[r0 * t + c0..],
        rows: n_rows,
        cols: n_cols,
        rs: t,
        cs: 1,
    }
}

/// The `[n, hd]` block of head columns `col..col + hd` starting at `row`, in
/// a buffer `(data, row stride, column offset)`.
#[inline]
fn head(src: (&[f32], usize, usize), row: usize, col: usize, n: usize, hd: usize) -> Mat<'_> {
    let (buf, rs, off) = src;
    Mat {
        data: &buf[row * rs + off + col..],
        rows: n,
        cols: hd,
        rs,
        cs: 1,
    }
}

/// Copy columns `[off, off + n)` of a `[rows, stride]` matrix into `[rows, n]`.
fn copy_columns(src: &[f32], stride: usize, off: usize, n: usize, dst: &mut [f32]) {
    for (row, out) in src.chunks_exact(stride).zip(dst.chunks_exact_mut(n)) {
        out.copy_from_slice(&row[off..off + n]);
    }
}

/// Write a `[rows, n]` matrix into columns `[off, off + n)` of a `[rows, stride]` one.
fn put_columns(src: &[f32], n: usize, dst: &mut [f32], stride: usize, off: usize) {
    for (row, out) in src.chunks_exact(n).zip(dst.chunks_exact_mut(stride)) {
        out[off..off + n].copy_from_slice(row);
    }
}
