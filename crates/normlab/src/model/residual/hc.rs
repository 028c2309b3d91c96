//! Hyper-connections (Zhu et al. 2024, arXiv 2409.19606): the residual
//! stream widened to n parallel streams, each sublayer connected to them by
//! learned read, write and mixing weights (static, or with the dynamic
//! form's input-dependent terms). The arithmetic is `nn/hyper.rs`.

use super::{InitEffect, ResidualOption, SimKnob, StreamSim, StreamsPlan, SublayerPlan};
use crate::model::ModelConfig;
use crate::nn::Placement;

/// The most streams `--hc` takes.
pub const MAX_STREAMS: usize = 16;

/// The declaration.
pub const HC: ResidualOption = ResidualOption {
    name: "hc",
    title: "Hyper-connections",
    paper: "Zhu et al. 2024",
    summary: "n parallel streams with learned read, write and mixing weights",
    active: |c| c.hc.is_some(),
    validate: |c: &ModelConfig| {
        let Some(n) = c.hc else {
            if c.hc_dynamic {
                return Err("--hc-dynamic needs --hc N (the number of streams, e.g. 4)".into());
            }
            return Ok(());
        };
        check_streams("--hc", n, c)
    },
    apply: |c, p: &mut SublayerPlan| {
        p.hyper = c.hc.map(|n| StreamsPlan::Hc {
            n,
            dynamic: c.hc_dynamic,
        })
    },
    sim: Some(stream_knob(
        "hyper-connections with n streams at the paper's init (sublayer l reads stream l mod n, writes all, no mixing)",
        |v| format!("hyper-connections n={v}"),
        StreamSim::Hyper,
    )),
    example: |c| c.hc = Some(4),
    convert_refusal: Some("n parallel streams have no single-stream LayerNorm/RMSNorm equivalent"),
};

/// The depth simulator's knob of an n-stream design: its setting is n
/// (a value, 4 in the comparison), routed as `kind`; no effect at init
/// beyond the routing.
pub(super) const fn stream_knob(
    help: &'static str,
    label: fn(f64) -> String,
    kind: StreamSim,
) -> SimKnob {
    SimKnob {
        help,
        switch: None,
        example: 4.0,
        gate: false,
        needs_pre_norm: false,
        label,
        check: sim_streams,
        at_init: |_, _, _| InitEffect {
            read: 1.0,
            write: 1.0,
        },
        streams: Some(kind),
    }
}

/// The most streams the depth simulator takes (its work grows as n^2).
pub const MAX_SIM_STREAMS: usize = 8;

/// A simulated number of streams: a whole number in 2..=MAX_SIM_STREAMS.
pub(super) fn sim_streams(v: f64) -> Result<(), String> {
    if v.fract() != 0.0 || !(2.0..=MAX_SIM_STREAMS as f64).contains(&v) {
        return Err(format!(
            "the number of streams must be a whole number from 2 to {MAX_SIM_STREAMS} (got {v})"
        ));
    }
    Ok(())
}

/// What n parallel streams (`flag` N) cannot be combined with.
pub(super) fn check_streams(flag: &str, n: usize, c: &ModelConfig) -> Result<(), String> {
    if !(2..=MAX_STREAMS).contains(&n) {
        return Err(format!(
            "{flag} takes 2 to {MAX_STREAMS} streams (got {n}; 1 stream is the plain residual)"
        ));
    }
    if c.placement.has_post_norm() || c.placement == Placement::MixLn {
        return Err(format!(
            "{flag} mixes the streams where placement {} normalises the one stream after the add; use pre, sandwich, peri, olmo2 or none",
            c.placement
        ));
    }
    if !c.residual {
        return Err(format!(
            "{flag} is a residual design; it cannot be combined with --no-residual"
        ));
    }
    if c.branch_scale != 1.0 {
        return Err(format!(
            "{flag} learns each branch's write weights; --branch-scale must stay 1"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{plan, StreamsPlan};
    use crate::model::ModelConfig;
    use crate::nn::Placement;

    #[test]
    fn plans_streams_and_refuses_what_it_cannot_combine_with() {
        let mut c = ModelConfig::toy(3);
        c.hc = Some(4);
        c.hc_dynamic = true;
        assert_eq!(
            plan(&c, 2, 1).hyper,
            Some(StreamsPlan::Hc {
                n: 4,
                dynamic: true
            })
        );
        assert!(c.validate().is_ok());
        c.placement = Placement::Post;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("placement post"));
        c.placement = Placement::Pre;
        c.hc = Some(1);
        assert!(c.validate().unwrap_err().to_string().contains("2 to 16"));
        c.hc = None;
        assert!(c.validate().unwrap_err().to_string().contains("needs --hc"));
    }
}
