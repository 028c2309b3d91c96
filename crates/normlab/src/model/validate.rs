//! What a [`ModelConfig`] implies beyond its fields, where the residual
//! options take part: validation (each field's rules and each declared
//! residual option's, `model/residual`) and each block's placement (Mix-LN
//! changes it by depth). In a file of its own so that the residual options,
//! which read the configuration, and the configuration do not import each
//! other.

use super::config::{InitScheme, ModelConfig, ModelKind};
use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::nn::{Activation, AttnKind, Placement};

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
            if self.head_dim.is_none() && !self.d_model.is_multiple_of(self.heads) {
                return Err(format!(
                    "heads ({}) must divide d_model ({})",
                    self.heads, self.d_model
                )
                .into());
            }
        }
        self.validate_attention()?;
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
            || self.d_model > 1 << 17
            || self.layers > 10_000
            || self.vocab > 1 << 22
        {
            return Err("model too large for normlab's CPU engine".into());
        }
        Ok(())
    }

    /// The pretrained families' attention and block options: each within
    /// its range, and only where it means something.
    fn validate_attention(&self) -> Result<()> {
        let gpt = self.kind == ModelKind::Gpt;
        let set = [
            ("kv_heads", self.kv_heads.is_some()),
            ("head_dim", self.head_dim.is_some()),
            ("qkv_bias", self.qkv_bias),
            ("qk_norm_whole", self.qk_norm_whole),
            ("rope", self.rope.is_some() || self.layer_attn.is_some()),
            ("attn_scale", self.attn_scale.is_some()),
            ("attn_softcap", self.attn_softcap.is_some()),
            ("window", self.window.is_some()),
            ("parallel", self.parallel),
        ];
        if let (false, Some((k, _))) = (gpt, set.iter().find(|(_, on)| *on)) {
            return Err(format!(
                "--{} changes attention (model gpt); the toy net has none",
                k.replace('_', "-")
            )
            .into());
        }
        if let Some(kv) = self.kv_heads {
            if kv == 0 || !self.heads.is_multiple_of(kv) {
                return Err(format!("kv_heads ({kv}) must divide heads ({})", self.heads).into());
            }
        }
        let hd = self.head_dim.unwrap_or(self.d_model / self.heads.max(1));
        if self.head_dim == Some(0) || hd > 1 << 12 {
            return Err(format!("head_dim must be between 1 and 4096 (got {hd})").into());
        }
        if self.qk_norm_whole && !self.qk_norm {
            return Err("--qk-norm-whole needs --qk-norm".into());
        }
        if let Some(b) = self.rope {
            if !(b.is_finite() && b > 1.0) {
                return Err(format!("rope (its base) must be a number above 1 (got {b})").into());
            }
        }
        if let Some(r) = self.rope_dims {
            if self.rope.is_none() && self.layer_attn.is_none() {
                return Err("--rope-dims needs --rope".into());
            }
            if r == 0 || r % 2 == 1 || r > hd {
                return Err(format!("rope_dims must be even and within 2..={hd} (got {r})").into());
            }
        }
        for (key, v) in [
            ("attn_scale", self.attn_scale),
            ("attn_softcap", self.attn_softcap),
            ("final_softcap", self.final_softcap),
            ("emb_mult", self.emb_mult),
            ("qk_eps", self.qk_eps),
        ] {
            if let Some(x) = v.filter(|x| !(x.is_finite() && *x > 0.0)) {
                return Err(format!("{key} must be a positive number (got {x})").into());
            }
        }
        // A window masks scores to -inf before the weights: softmax and
        // the sink logit give them 0 (gpt-oss has both); sigmoid and ReLU
        // would not.
        if (self.window.is_some() || self.layer_attn.is_some())
            && !matches!(self.attn_kind, AttnKind::Softmax | AttnKind::SinkLogit)
        {
            return Err("a sliding window is for softmax or sink-logit attention".into());
        }
        if self.window == Some(0) {
            return Err("window must be at least 1".into());
        }
        if let Some(l) = &self.layer_attn {
            if l.len() != self.layers {
                return Err(format!(
                    "layer_attn has {} entries for {} blocks",
                    l.len(),
                    self.layers
                )
                .into());
            }
            if l.iter()
                .any(|a| a.window == Some(0) || !(a.rope_base.is_finite() && a.rope_base > 1.0))
            {
                return Err("layer_attn: a window of 0 or a RoPE base not above 1".into());
            }
        }
        if self.parallel && self.placement != Placement::Pre {
            return Err("--parallel is a pre-norm block (GPT-NeoX): use --placement pre".into());
        }
        if self.parallel && (self.hc.is_some() || self.mhc.is_some() || self.attnres.is_some()) {
            return Err(
                "--parallel takes a plain residual (no hyper-connections, mHC or AttnRes)".into(),
            );
        }
        Ok(())
    }
}
