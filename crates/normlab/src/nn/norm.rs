//! A normalization layer of any row-wise kind, over the fused kernels.

use crate::kernels::buf::AlignedBuf;
use crate::kernels::norm::{self, NormKind};
use crate::params::{Init, ParamKind, ParamLayout, ParamRef};

/// A norm over feature size `d`.
#[derive(Clone, Debug)]
pub struct Norm {
    /// Kind (never BatchNorm inside models).
    pub kind: NormKind,
    /// Feature size.
    pub d: usize,
    /// eps.
    pub eps: f32,
    /// All its parameters as one contiguous slice (gamma then beta).
    pub p: ParamRef,
}

/// Per-row statistics and reduction scratch for one norm in one shard.
#[derive(Clone, Debug)]
pub struct NormCache {
    /// `[rows, STATS]` from the last forward.
    pub stats: Vec<f32>,
    scratch: Vec<f32>,
}

impl Norm {
    /// Register `{name}.weight` (and `{name}.bias` for layernorm).
    pub fn new(
        layout: &mut ParamLayout,
        name: &str,
        kind: NormKind,
        d: usize,
        eps: f32,
        block: Option<usize>,
    ) -> Norm {
        assert!(
            kind.is_row_wise(),
            "batchnorm cannot be used inside a model"
        );
        let p = match kind {
            NormKind::LayerNorm => {
                let g = layout.add(
                    format!("{name}.weight"),
                    &[d],
                    ParamKind::NormGain,
                    block,
                    Init::Const(1.0),
                );
                let b = layout.add_packed(
                    format!("{name}.bias"),
                    &[d],
                    ParamKind::NormBias,
                    block,
                    Init::Const(0.0),
                );
                ParamRef(g.0.start..b.0.end)
            }
            NormKind::RmsNorm => layout.add(
                format!("{name}.weight"),
                &[d],
                ParamKind::NormGain,
                block,
                Init::Const(1.0),
            ),
            NormKind::ZRmsNorm => layout.add(
                format!("{name}.weight"),
                &[d],
                ParamKind::NormGain,
                block,
                Init::Const(0.0),
            ),
            NormKind::ScaleNorm => layout.add(
                format!("{name}.weight"),
                &[1],
                ParamKind::NormGain,
                block,
                Init::Const((d as f32).sqrt()),
            ),
            NormKind::None | NormKind::BatchNorm => ParamRef::default(),
        };
        Norm { kind, d, eps, p }
    }

    /// Buffers for `rows` rows.
    pub fn cache(&self, rows: usize) -> NormCache {
        NormCache {
            stats: vec![0.0; norm::stats_len(rows)],
            scratch: vec![0.0; norm::backward_scratch_len(self.kind, rows, self.d)],
        }
    }

    /// `y = Norm(x)`.
    pub fn forward(&self, params: &[f32], x: &[f32], y: &mut [f32], c: &mut NormCache) {
        norm::forward(
            self.kind,
            self.d,
            self.eps,
            x,
            self.p.get(params),
            y,
            &mut c.stats,
        );
    }

    /// Write `dx`, accumulate the parameter gradients.
    pub fn backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        x: &[f32],
        dy: &[f32],
        dx: &mut [f32],
        c: &mut NormCache,
    ) {
        norm::backward(
            self.kind,
            self.d,
            x,
            dy,
            self.p.get(params),
            &c.stats,
            dx,
            self.p.get_mut(grads),
            &mut c.scratch,
        );
    }
}

/// Root-mean-square of a buffer (f64 accumulation).
pub fn rms(v: &[f32]) -> f64 {
    (crate::params::sum_squares(v) / v.len().max(1) as f64).sqrt()
}

/// An aligned buffer of `n` zeros (shorthand used by the caches).
pub fn buf(n: usize) -> AlignedBuf {
    AlignedBuf::zeros(n)
}
