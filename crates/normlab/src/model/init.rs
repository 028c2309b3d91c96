//! The model's initialisation schemes applied after its modules registered
//! their defaults: PyTorch's default init, and the point-wise norms' alpha.

use super::Model;
use crate::nn::Linear;
use crate::params::Init;

impl Model {
    /// PyTorch's default initialisation: every Linear's weight and bias
    /// U(+-1/sqrt(fan_in)), embeddings N(0, 1).
    pub(super) fn apply_torch_init(&mut self) {
        let mut linears: Vec<Linear> = self
            .blocks
            .iter()
            .flat_map(|b| b.sublayers())
            .flat_map(|s| s.op.linears())
            .cloned()
            .collect();
        linears.extend(self.head.clone());
        for l in &linears {
            let bound = 1.0 / (l.d_in as f32).sqrt();
            self.layout.set_init(&l.w, Init::Uniform(bound));
            if let Some(b) = &l.b {
                self.layout.set_init(b, Init::Uniform(bound));
            }
        }
        if let Some(b) = &self.head_bias {
            let bound = 1.0 / (self.cfg.d_model as f32).sqrt();
            self.layout.set_init(b, Init::Uniform(bound));
        }
        for e in std::iter::once(&self.emb.wte).chain(&self.emb.wpe) {
            self.layout.set_init(e, Init::Normal(1.0));
        }
    }

    /// The point-wise norms' (DyT, Derf) initial alpha from the config.
    pub(super) fn apply_dyt_alpha(&mut self) {
        // Block norms of the mixing sublayer (sub 0) take the attention
        // alpha when one is given; QK-Norm is an RMSNorm, never point-wise.
        let slopes: Vec<(crate::params::ParamRef, bool)> = self
            .norms()
            .filter_map(|s| {
                let r = s.norm.param(crate::kernels::norm::ParamRole::Slope)?;
                Some((r, s.sub == Some(0)))
            })
            .collect();
        for (r, attn) in &slopes {
            let a = match (attn, self.cfg.dyt_alpha_attn, self.cfg.dyt_alpha) {
                (true, Some(a), _) | (_, _, Some(a)) => a,
                _ => continue,
            };
            self.layout.set_init(r, Init::Const(a));
        }
    }
}
