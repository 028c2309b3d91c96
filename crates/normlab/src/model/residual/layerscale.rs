//! LayerScale (Touvron et al. 2021, CaiT): each sublayer's branch times a
//! learnable per-channel scale initialised to the option's value (e.g. 1e-4).

use super::{InitEffect, ResidualOption, SimKnob, SublayerPlan};
use crate::model::ModelConfig;
use crate::nn::GateKind;

/// The declaration.
pub const LAYERSCALE: ResidualOption = ResidualOption {
    name: "layerscale",
    title: "LayerScale",
    paper: "Touvron et al. 2021 (CaiT)",
    summary: "each branch times a learnable per-channel scale at a small init",
    active: |c| c.layerscale.is_some(),
    validate: |c| match c.layerscale {
        Some(v) if !v.is_finite() => Err(format!("layerscale must be a finite number (got {v})")),
        _ => Ok(()),
    },
    apply: |c: &ModelConfig, p: &mut SublayerPlan| {
        p.gate = Some((
            GateKind::LayerScale,
            c.layerscale.unwrap_or(1.0),
            "layerscale",
        ))
    },
    // At init every channel's scale is the same value.
    sim: Some(SimKnob {
        help:
            "LayerScale, each branch times a learnable per-channel scale at this init (e.g. 1e-4)",
        switch: None,
        example: 1e-4,
        gate: true,
        needs_pre_norm: false,
        label: |v| format!("LayerScale {v}"),
        check: |v| super::check_gate_init("layerscale", v),
        at_init: |v, _, _| InitEffect {
            read: 1.0,
            write: v,
        },
        streams: None,
    }),
    example: |c| c.layerscale = Some(1e-4),
    convert_refusal: Some("a per-channel gate makes a centred branch non-zero-mean"),
};

#[cfg(test)]
mod tests {
    use super::super::plan;
    use crate::model::ModelConfig;
    use crate::nn::GateKind;

    #[test]
    fn gates_with_its_init() {
        let mut c = ModelConfig::gpt();
        c.layerscale = Some(1e-4);
        assert_eq!(
            plan(&c, 0, 0).gate,
            Some((GateKind::LayerScale, 1e-4, "layerscale"))
        );
        c.layerscale = Some(f32::INFINITY);
        assert!(c.validate().unwrap_err().to_string().contains("finite"));
    }
}
