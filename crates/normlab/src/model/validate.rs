//! What a [`ModelConfig`] implies beyond its fields, where the residual
//! options take part: validation (each field's rules and each declared
//! residual option's, `model/residual`) and each block's placement (Mix-LN
//! changes it by depth). In a file of its own so that the residual options,
//! which read the configuration, and the configuration do not import each
//! other.

use super::config::{InitScheme, ModelConfig, ModelKind};
use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::nn::{Activation, Placement};

impl ModelConfig {
    /// The placement of block `i`'s norms: the config's, except that Mix-LN
    /// is Post-LN for its first K blocks and Pre-LN after.
    pub fn block_placement(&self, i: usize) -> Placement {
        super::residual::plan(self, i, 0).placement
    }

    /// Check every field; the message is one line.
    pub fn validate(&self) -> Result<()> {
        let pos = |name: &str, v: usize| {
            if v == 0 {
                Err(format!("{name} must be at least 1"))
            } else {
                Ok(())
            }
        };
        pos("vocab", self.vocab)?;
        pos("seq", self.seq)?;
        pos("d_model", self.d_model)?;
        pos("layers", self.layers)?;
        pos("hidden", self.hidden)?;
        if let Some(l) = self.swiglu_clamp {
            if self.act != Activation::Swiglu {
                return Err(
                    "--swiglu-clamp clamps SwiGLU's gate and up projections; it needs --act swiglu"
                        .into(),
                );
            }
            if !(l.is_finite() && l > 0.0) {
                return Err(format!("--swiglu-clamp must be a positive number (got {l})").into());
            }
        }
        if self.kind == ModelKind::Gpt {
            pos("heads", self.heads)?;
            if !self.d_model.is_multiple_of(self.heads) {
                return Err(format!(
                    "heads ({}) must divide d_model ({})",
                    self.heads, self.d_model
                )
                .into());
            }
        }
        if self.kind == ModelKind::Toy && !self.attn_kind.is_softmax() {
            return Err(format!(
                "--attn-kind {} changes attention (model gpt); the toy net has no attention",
                self.attn_kind
            )
            .into());
        }
        if self.kind == ModelKind::Toy && self.attn_gate.is_some() {
            return Err(
                "--attn-gate gates attention's output (model gpt); the toy net has no attention"
                    .into(),
            );
        }
        if self.kind == ModelKind::Toy && self.qk_norm {
            return Err(
                "--qk-norm needs attention (model gpt); the toy net has no attention".into(),
            );
        }
        if self.norm == NormKind::BatchNorm {
            return Err("batchnorm cannot be used inside a language model (its batch statistics mix sequences and leak future tokens); see `normlab exp batch-dependence`".into());
        }
        if let Some(e) = self.eps {
            if !(e >= 0.0 && e.is_finite()) {
                return Err(format!("eps must be a finite number >= 0 (got {e})").into());
            }
        }
        if !(self.branch_scale.is_finite() && self.branch_scale > 0.0) {
            return Err(format!(
                "branch_scale must be a positive number (got {})",
                self.branch_scale
            )
            .into());
        }
        if !(self.init_std.is_finite() && self.init_std > 0.0) {
            return Err(
                format!("init_std must be a positive number (got {})", self.init_std).into(),
            );
        }
        if let Some(s) = self.out_proj_std {
            if !(s.is_finite() && s > 0.0) {
                return Err(format!("out_proj_std must be a positive number (got {s})").into());
            }
        }
        for (key, v) in [
            ("dyt_alpha", self.dyt_alpha),
            ("dyt_alpha_attn", self.dyt_alpha_attn),
        ] {
            let Some(a) = v else { continue };
            if !a.is_finite() {
                return Err(format!("{key} must be a finite number (got {a})").into());
            }
            let pointwise = |k: NormKind| {
                k.spec()
                    .params
                    .iter()
                    .any(|p| p.role == crate::kernels::norm::ParamRole::Slope)
            };
            if !pointwise(self.norm) {
                return Err(format!(
                    "--{} sets the alpha of the point-wise norms (dyt, derf); norm {} has none",
                    key.replace('_', "-"),
                    self.norm
                )
                .into());
            }
        }
        super::residual::validate(self)?;
        if self.placement == Placement::DeepNorm && self.init != InitScheme::Gpt2 {
            return Err("deepnorm has its own init (Xavier with gain beta); use init gpt2".into());
        }
        if self.placement == Placement::DeepNorm && self.norm == NormKind::None {
            return Err("deepnorm needs a norm kind (it is a post-norm scheme); use --placement none for no norm".into());
        }
        if self.seq > 1 << 16
            || self.d_model > 1 << 16
            || self.layers > 10_000
            || self.vocab > 1 << 20
        {
            return Err("model too large for normlab's CPU engine".into());
        }
        Ok(())
    }
}
