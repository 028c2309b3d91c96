//! LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in LLMs"): the
//! output of each pre-norm of block l (l = 1..L) times 1/sqrt(l), so deep
//! blocks' branches stop growing with depth.

use super::{InitEffect, ResidualOption, SimKnob, SublayerPlan};
use crate::model::ModelConfig;

/// The declaration.
pub const LNS: ResidualOption = ResidualOption {
    name: "lns",
    title: "LayerNorm Scaling",
    paper: "Sun et al. 2025",
    summary: "each pre-norm's output in block l times 1/sqrt(l)",
    active: |c| c.lns,
    validate: |c: &ModelConfig| {
        if c.lns && !c.placement.has_in_norm() {
            return Err(format!("--lns scales the pre-norms' outputs; placement {} has none (use pre, sandwich, peri or mixln)", c.placement));
        }
        Ok(())
    },
    apply: |_, p: &mut SublayerPlan| p.in_scale = 1.0 / ((p.block + 1) as f32).sqrt(),
    // In the simulator every sublayer is its own layer l = 1..N.
    sim: Some(SimKnob {
        help:
            "LayerNorm Scaling, the pre-norm output of sublayer l times 1/sqrt(l) (with --pre-norm)",
        switch: Some(1.0),
        example: 1.0,
        gate: false,
        needs_pre_norm: true,
        label: |_| "LayerNorm Scaling 1/sqrt(l)".into(),
        check: |_| Ok(()),
        at_init: |_, l, pre_norm| InitEffect {
            read: if pre_norm {
                1.0 / ((l + 1) as f64).sqrt()
            } else {
                1.0
            },
            write: 1.0,
        },
        streams: None,
    }),
    example: |c| c.lns = true,
    convert_refusal: Some("it scales the beta that folds into the next bias"),
};

#[cfg(test)]
mod tests {
    use super::super::plan;
    use crate::model::ModelConfig;
    use crate::nn::Placement;

    #[test]
    fn scales_block_l_by_inverse_sqrt_l() {
        let mut c = ModelConfig::toy(4);
        c.lns = true;
        assert_eq!(plan(&c, 3, 0).in_scale, 0.5);
        assert_eq!(plan(&c, 0, 1).in_scale, 1.0);
        c.placement = Placement::Post;
        assert!(c.validate().unwrap_err().to_string().contains("has none"));
    }
}
