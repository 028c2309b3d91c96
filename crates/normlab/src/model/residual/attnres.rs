//! Attention Residuals (Kimi team, Moonshot AI 2026, arXiv 2603.15031):
//! each sublayer reads a softmax mix over depth of the embedding and the
//! block sums of earlier sublayers' outputs (block AttnRes; blocks of one
//! sublayer are full AttnRes). The arithmetic is `nn/attnres.rs`.

use super::{ResidualOption, StreamsPlan, SublayerPlan};
use crate::model::ModelConfig;
use crate::nn::Placement;

/// The declaration.
pub const ATTNRES: ResidualOption = ResidualOption {
    name: "attnres",
    title: "Attention Residuals",
    paper: "Kimi team 2026",
    summary: "each sublayer reads a softmax mix over depth of earlier block sums",
    active: |c| c.attnres.is_some(),
    validate: |c: &ModelConfig| {
        let Some(s) = c.attnres else { return Ok(()) };
        if s == 0 || s > c.sublayers() {
            return Err(format!(
                "--attnres is the block size in sublayers: 1 (full AttnRes) to {} (got {s})",
                c.sublayers()
            ));
        }
        if c.hc.is_some() || c.mhc.is_some() {
            return Err(
                "--attnres and --hc/--mhc are two designs of the residual; choose one".into(),
            );
        }
        if c.placement.has_post_norm() || c.placement == Placement::MixLn {
            return Err(format!(
                "--attnres mixes earlier outputs where placement {} normalises the one stream after the add; use pre, sandwich, peri, olmo2 or none",
                c.placement
            ));
        }
        if !c.residual {
            return Err(
                "--attnres is a residual design; it cannot be combined with --no-residual".into(),
            );
        }
        if c.branch_scale != 1.0 {
            return Err(
                "--attnres learns how each source is weighted; --branch-scale must stay 1".into(),
            );
        }
        Ok(())
    },
    apply: |c, p: &mut SublayerPlan| p.hyper = c.attnres.map(|size| StreamsPlan::AttnRes { size }),
    sim: None,
    example: |c| c.attnres = Some(2),
    convert_refusal: Some(
        "a depth mix of block sums has no single-stream LayerNorm/RMSNorm equivalent",
    ),
};

#[cfg(test)]
mod tests {
    use super::super::{plan, StreamsPlan};
    use crate::model::ModelConfig;
    use crate::nn::DepthSlots;

    #[test]
    fn slots_blocks_and_refusals() {
        // 8 sublayers in blocks of 2: slots 0 (embedding) + 4 blocks.
        assert_eq!(
            DepthSlots::of(0, 8, 2),
            DepthSlots {
                slots: 5,
                own: 1,
                reads: 1,
                absent: 0,
            }
        );
        assert_eq!(
            DepthSlots::of(3, 8, 2),
            DepthSlots {
                slots: 5,
                own: 2,
                reads: 3,
                absent: 0,
            }
        );
        assert_eq!(
            DepthSlots::of(4, 8, 2),
            DepthSlots {
                slots: 5,
                own: 3,
                reads: 3,
                absent: 0,
            }
        );
        // Full AttnRes: every sublayer's output its own source.
        assert_eq!(
            DepthSlots::of(7, 8, 1),
            DepthSlots {
                slots: 9,
                own: 8,
                reads: 8,
                absent: 0,
            }
        );
        let mut c = ModelConfig::gpt();
        c.attnres = Some(4);
        assert_eq!(plan(&c, 1, 0).hyper, Some(StreamsPlan::AttnRes { size: 4 }));
        assert!(c.validate().is_ok());
        c.attnres = Some(9);
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("1 (full AttnRes) to 8"));
        c.attnres = Some(2);
        c.mhc = Some(4);
        assert!(c.validate().unwrap_err().to_string().contains("choose one"));
    }
}
