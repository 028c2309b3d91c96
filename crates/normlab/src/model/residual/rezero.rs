//! ReZero (Bachlechner et al. 2020): each sublayer's branch times one
//! learnable scalar initialised to 0, so every block starts as the identity.

use super::{InitEffect, ResidualOption, SimKnob, SublayerPlan};
use crate::nn::GateKind;

/// The declaration.
pub const REZERO: ResidualOption = ResidualOption {
    name: "rezero",
    title: "ReZero",
    paper: "Bachlechner et al. 2020",
    summary: "each branch times a learnable scalar initialised to 0",
    active: |c| c.rezero,
    validate: |c| {
        if c.rezero && c.layerscale.is_some() {
            return Err("--rezero and --layerscale both gate the branch; choose one".into());
        }
        Ok(())
    },
    apply: |_, p: &mut SublayerPlan| p.gate = Some((GateKind::ReZero, 0.0, "rezero")),
    sim: Some(SimKnob {
        help: "ReZero, each branch times a learnable scalar gate at its init 0",
        switch: Some(0.0),
        example: 0.0,
        gate: true,
        needs_pre_norm: false,
        label: |_| "ReZero (gate 0)".into(),
        check: |v| super::check_gate_init("rezero", v),
        at_init: |v, _, _| InitEffect {
            read: 1.0,
            write: v,
        },
        streams: None,
    }),
    example: |c| c.rezero = true,
    convert_refusal: Some("a learnable gate's effect on the conversion is not derived"),
};

#[cfg(test)]
mod tests {
    use super::super::plan;
    use crate::model::ModelConfig;
    use crate::nn::GateKind;

    #[test]
    fn gates_every_sublayer_at_zero() {
        let mut c = ModelConfig::toy(3);
        c.rezero = true;
        let p = plan(&c, 2, 1);
        assert_eq!(p.gate, Some((GateKind::ReZero, 0.0, "rezero")));
        c.layerscale = Some(0.1);
        assert!(c.validate().unwrap_err().to_string().contains("choose one"));
    }
}
