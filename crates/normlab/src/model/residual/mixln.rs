//! Mix-LN (Li et al. 2025): with placement mixln, the first K blocks are
//! Post-LN and the rest Pre-LN (K: `mixln_post_layers`, default a quarter
//! of the blocks, rounded down).

use super::{ResidualOption, SublayerPlan};
use crate::model::ModelConfig;
use crate::nn::Placement;

/// The declaration.
pub const MIXLN: ResidualOption = ResidualOption {
    name: "mixln_post_layers",
    title: "Mix-LN",
    paper: "Li et al. 2025",
    summary: "Post-LN in the first K blocks, Pre-LN in the rest",
    active: |c| c.placement == Placement::MixLn,
    validate: |c: &ModelConfig| {
        if let Some(k) = c.mixln_post_layers {
            if c.placement != Placement::MixLn {
                return Err(format!(
                    "--mixln-post-layers is Mix-LN's K; it needs --placement mixln (got {})",
                    c.placement
                ));
            }
            if k > c.layers {
                return Err(format!(
                    "mixln_post_layers {k} exceeds the {} layers",
                    c.layers
                ));
            }
        }
        Ok(())
    },
    apply: |c: &ModelConfig, p: &mut SublayerPlan| {
        p.placement = if p.block < c.mixln_k() {
            Placement::Post
        } else {
            Placement::Pre
        }
    },
    sim: None,
    example: |c| c.mixln_post_layers = Some(1),
    convert_refusal: None,
};

#[cfg(test)]
mod tests {
    use super::super::plan;
    use crate::model::ModelConfig;
    use crate::nn::Placement;

    #[test]
    fn post_then_pre() {
        let mut c = ModelConfig::toy(8);
        c.placement = Placement::MixLn;
        let got: Vec<_> = (0..8).map(|b| plan(&c, b, 0).placement).collect();
        assert_eq!(got[..2], [Placement::Post; 2]);
        assert_eq!(got[2..], [Placement::Pre; 6]);
        c.mixln_post_layers = Some(9);
        assert!(c.validate().unwrap_err().to_string().contains("exceeds"));
    }
}
