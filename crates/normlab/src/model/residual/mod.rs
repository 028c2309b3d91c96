//! Residual options, each declared once: a module per option holds a
//! [`ResidualOption`] saying what it is (name, paper, one-line summary),
//! when a config turns it on, how it is checked against the rest of the
//! config, what it does to each sublayer as the model is built (its
//! [`SublayerPlan`]: the block's placement, the multiplier on the input
//! norm's output, a learnable branch gate), its effect at initialisation
//! (for the depth simulator, in f64), and whether `convert` refuses it.
//! [`OPTIONS`] lists them; `Model::new`, `ModelConfig::validate`,
//! `convert`'s refusal list and the depth simulator read that list and
//! nothing else. The option's setting itself is a field of `ModelConfig`
//! (which makes it a `train` flag, a TOML key and a sweep-grid key).
//!
//! A new option: its module here, one line in [`OPTIONS`], its field in
//! `ModelConfig`, its test.

mod layerscale;
mod lns;
mod mixln;
mod rezero;

pub use layerscale::LAYERSCALE;
pub use lns::LNS;
pub use mixln::MIXLN;
pub use rezero::REZERO;

use super::ModelConfig;
use crate::nn::{GateKind, Placement};

/// What the options make of one sublayer.
#[derive(Clone, Debug, PartialEq)]
pub struct SublayerPlan {
    /// Block index (0-based).
    pub block: usize,
    /// 0: the mixing sublayer; 1: the feed-forward sublayer.
    pub sub: usize,
    /// The block's placement (the config's, unless an option sets it).
    pub placement: Placement,
    /// Multiplier on the input norm's output (1 unless an option sets it).
    pub in_scale: f32,
    /// A learnable gate on the branch: its kind, initial value and the
    /// tensor name's last part.
    pub gate: Option<(GateKind, f32, &'static str)>,
}

/// An option's effect at initialisation on sublayer `l` (0-based) of the
/// depth simulator's stream: multipliers on what the sublayer reads (after
/// the pre-norm) and on what it writes back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InitEffect {
    /// On the read (after the pre-norm).
    pub read: f64,
    /// On the write-back.
    pub write: f64,
}

/// One residual option.
pub struct ResidualOption {
    /// Its key (the `ModelConfig` field, the flag without dashes).
    pub name: &'static str,
    /// Its name in prose.
    pub title: &'static str,
    /// Where it comes from.
    pub paper: &'static str,
    /// What it does, in one line.
    pub summary: &'static str,
    /// Whether `cfg` turns it on.
    pub active: fn(&ModelConfig) -> bool,
    /// Its checks against the rest of the config (a one-line message).
    pub validate: fn(&ModelConfig) -> Result<(), String>,
    /// What it does to a sublayer as the model is built (only when active).
    pub apply: fn(&ModelConfig, &mut SublayerPlan),
    /// Its effect at initialisation (`value`: its setting, e.g. a gate's
    /// init; `pre_norm`: whether the stream has pre-norms), None when the
    /// depth simulator does not model it.
    pub at_init: Option<fn(value: f64, l: usize, pre_norm: bool) -> InitEffect>,
    /// Why `convert` refuses a checkpoint trained with it (None: converts).
    pub convert_refusal: Option<&'static str>,
}

/// Every residual option, in the order they apply.
pub const OPTIONS: &[&ResidualOption] = &[&REZERO, &LAYERSCALE, &LNS, &MIXLN];

/// The option named `name`.
pub fn option(name: &str) -> Option<&'static ResidualOption> {
    OPTIONS.iter().copied().find(|o| o.name == name)
}

/// What the active options make of sublayer `sub` of block `block`.
pub fn plan(cfg: &ModelConfig, block: usize, sub: usize) -> SublayerPlan {
    let mut p = SublayerPlan {
        block,
        sub,
        placement: cfg.placement,
        in_scale: 1.0,
        gate: None,
    };
    for o in OPTIONS.iter().filter(|o| (o.active)(cfg)) {
        (o.apply)(cfg, &mut p);
    }
    p
}

/// Every option's checks.
pub fn validate(cfg: &ModelConfig) -> Result<(), String> {
    OPTIONS.iter().try_for_each(|o| (o.validate)(cfg))
}

/// The flags of the active options that `convert` refuses.
pub fn refused_by_convert(cfg: &ModelConfig) -> Vec<String> {
    OPTIONS
        .iter()
        .filter(|o| o.convert_refusal.is_some() && (o.active)(cfg))
        .map(|o| format!("--{}", o.name.replace('_', "-")))
        .collect()
}

/// The combined effect at initialisation of `options` (each with its
/// setting) on sublayer `l`: the product of their multipliers.
pub fn at_init(options: &[(&ResidualOption, f64)], l: usize, pre_norm: bool) -> InitEffect {
    let mut e = InitEffect {
        read: 1.0,
        write: 1.0,
    };
    for (o, v) in options {
        if let Some(f) = o.at_init {
            let x = f(*v, l, pre_norm);
            e.read *= x.read;
            e.write *= x.write;
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_config_fields_and_unique() {
        for (i, o) in OPTIONS.iter().enumerate() {
            assert!(
                OPTIONS[..i].iter().all(|p| p.name != o.name),
                "{} twice",
                o.name
            );
            assert!(
                ModelConfig::FIELDS.iter().any(|f| f.key == o.name),
                "{} is no ModelConfig field",
                o.name
            );
        }
    }

    #[test]
    fn plain_config_plans_plain_sublayers() {
        let cfg = ModelConfig::toy(4);
        for b in 0..4 {
            for s in 0..2 {
                let p = plan(&cfg, b, s);
                assert_eq!(
                    (p.placement, p.in_scale, p.gate),
                    (Placement::Pre, 1.0, None)
                );
            }
        }
        assert!(refused_by_convert(&cfg).is_empty());
    }
}
