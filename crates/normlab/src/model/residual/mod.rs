//! Residual options, each declared once: a module per option holds a
//! [`ResidualOption`] saying what it is (name, paper, one-line summary),
//! when a config turns it on, how it is checked against the rest of the
//! config, what it does to each sublayer as the model is built (its
//! [`SublayerPlan`]: the block's placement, the multiplier on the input
//! norm's output, a learnable branch gate), how the random-init depth
//! simulator models it (its [`SimKnob`]: the flag, the setting, the label,
//! the effect at initialisation in f64), and whether `convert` refuses it.
//! [`OPTIONS`] lists them; `Model::new`, `ModelConfig::validate`,
//! `convert`'s refusal list, the depth simulator (its flags, settings,
//! comparison rows and labels) and the web lab's simulator controls read
//! that list and nothing else. The option's setting itself is a field of
//! `ModelConfig` (which makes it a `train` flag, a TOML key and a
//! sweep-grid key).
//!
//! A new option: its module here, one line in [`OPTIONS`], its field in
//! `ModelConfig`, its test.

mod attnres;
mod hc;
mod layerscale;
mod lns;
mod mhc;
mod mixln;
mod rezero;

pub use attnres::ATTNRES;
pub use hc::HC;
pub use layerscale::LAYERSCALE;
pub use lns::LNS;
pub use mhc::MHC;
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
    /// n parallel streams instead of the single stream.
    pub hyper: Option<StreamsPlan>,
}

/// A sublayer's connection to n parallel streams.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StreamsPlan {
    /// Hyper-connections: n streams, and whether the dynamic form.
    Hc {
        /// Streams.
        n: usize,
        /// The dynamic form.
        dynamic: bool,
    },
    /// mHC: n streams, Sinkhorn iterations.
    Mhc {
        /// Streams.
        n: usize,
        /// Sinkhorn iterations.
        iters: usize,
    },
    /// Attention Residuals: blocks of `size` sublayers (1: full AttnRes).
    AttnRes {
        /// Sublayers per block.
        size: usize,
    },
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

/// How an option appears in the random-init depth simulator: its flag of
/// `normlab exp depth-sim`, its control in the web lab, its effect on the
/// simulated stream. The simulator's flags, settings, canonical variants
/// and labels, and the lab's controls, are made from these.
pub struct SimKnob {
    /// The flag's help text (and the control's tooltip).
    pub help: &'static str,
    /// The setting the flag gives as a switch (`--lns`); None: the flag
    /// takes the setting as its value (`--layerscale 1e-4`).
    pub switch: Option<f64>,
    /// A setting to show it with: the canonical comparison's and the tests'.
    pub example: f64,
    /// It gates the branch: a simulation takes at most one gate.
    pub gate: bool,
    /// It acts on the pre-norm: shown with it (the canonical comparison
    /// turns the pre-norm on; without one it does nothing).
    pub needs_pre_norm: bool,
    /// Its part of a simulated setting's label, given its setting.
    pub label: fn(f64) -> String,
    /// Checks a setting given as a value (one-line message).
    pub check: fn(f64) -> Result<(), String>,
    /// Its effect at initialisation (`value`: its setting, e.g. a gate's
    /// init; `pre_norm`: whether the stream has pre-norms), in f64.
    pub at_init: fn(value: f64, l: usize, pre_norm: bool) -> InitEffect,
    /// It widens the stream to n = its setting parallel streams, routed
    /// this way (None: one stream).
    pub streams: Option<StreamSim>,
}

/// How an n-stream option reads, writes and mixes its streams at init in
/// the depth simulator (which implements each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamSim {
    /// Hyper-connections at the paper's init: sublayer l reads stream
    /// l mod n, writes every stream, no mixing (a plain residual).
    Hyper,
    /// mHC at transformers' init: per-token weights from a small random
    /// map of the streams, Sinkhorn-projected mixing near uniform 1/n.
    Manifold,
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
    /// How the depth simulator models it (None: it does not).
    pub sim: Option<SimKnob>,
    /// Turns it on with a typical setting (the docs' table of which
    /// placements it combines with, and tests).
    pub example: fn(&mut ModelConfig),
    /// Why `convert` refuses a checkpoint trained with it (None: converts).
    pub convert_refusal: Option<&'static str>,
}

/// Every residual option, in the order they apply.
pub const OPTIONS: &[&ResidualOption] = &[&REZERO, &LAYERSCALE, &LNS, &MIXLN, &HC, &MHC, &ATTNRES];

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
        hyper: None,
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

/// The active options as a label's suffix (`+rezero+lns`, `+hc=4,dynamic`,
/// `+mhc=4,sinkhorn=5`; empty without any), as `train` and `bench train`
/// print a configuration: each option with its setting and the settings
/// of the fields named after it that a config file would hold (those set
/// away from their defaults, or given explicitly).
pub fn label(cfg: &ModelConfig) -> String {
    let v = serde_json::to_value(cfg).unwrap_or_default();
    // Settings are f32: printed as such (JSON widens them to f64 digits).
    let num = |x: &serde_json::Value| match x.as_f64() {
        Some(f) if !x.is_i64() && !x.is_u64() => format!("{}", f as f32),
        _ => x.to_string(),
    };
    let show = |k: &str, x: &serde_json::Value| match x {
        serde_json::Value::Bool(true) => k.to_string(),
        x => format!("{k}={}", num(x)),
    };
    OPTIONS
        .iter()
        .filter(|o| (o.active)(cfg))
        .map(|o| {
            let mut parts = Vec::new();
            if let Some(x) = v.get(o.name).filter(|x| !x.is_boolean()) {
                parts.push(num(x));
            }
            let prefix = format!("{}_", o.name);
            if let Some(m) = v.as_object() {
                for (k, x) in m.iter().filter(|(k, _)| k.starts_with(&prefix)) {
                    parts.push(show(&k[prefix.len()..], x));
                }
            }
            match parts.split_first() {
                None => format!("+{}", o.name),
                Some((first, rest)) if v.get(o.name).is_some_and(|x| !x.is_boolean()) => {
                    let mut s = format!("+{}={first}", o.name);
                    rest.iter().for_each(|p| s += &format!(",{p}"));
                    s
                }
                Some(_) => format!("+{},{}", o.name, parts.join(",")),
            }
        })
        .collect()
}

/// The flags of the active options that `convert` refuses.
pub fn refused_by_convert(cfg: &ModelConfig) -> Vec<String> {
    OPTIONS
        .iter()
        .filter(|o| o.convert_refusal.is_some() && (o.active)(cfg))
        .map(|o| format!("--{}", o.name.replace('_', "-")))
        .collect()
}

/// Which placements each option combines with (its example setting
/// validated with each placement, in a GPT with LayerNorm), as a Markdown
/// table; docs/commands/train.md carries it and a test keeps the two equal.
pub fn placements_table() -> String {
    let mut s = String::from("| option |");
    Placement::ALL.iter().for_each(|p| s += &format!(" {p} |"));
    s += "\n|---|";
    Placement::ALL.iter().for_each(|_| s += "---|");
    s += "\n";
    for o in OPTIONS {
        s += &format!("| {} |", o.title);
        for p in Placement::ALL {
            let mut c = ModelConfig::gpt();
            c.placement = p;
            (o.example)(&mut c);
            s += if c.validate().is_ok() {
                " yes |"
            } else {
                " - |"
            };
        }
        s += "\n";
    }
    s
}

/// The options the depth simulator models, in [`OPTIONS`]' order.
pub fn simulated() -> impl Iterator<Item = (&'static ResidualOption, &'static SimKnob)> {
    OPTIONS
        .iter()
        .filter_map(|o| o.sim.as_ref().map(|k| (*o, k)))
}

/// The simulated options as the web lab lists them (its controls are made
/// from this): name, title, paper, help, switch or value, example, gate,
/// whether it needs the pre-norm.
pub fn simulated_json() -> Vec<serde_json::Value> {
    simulated()
        .map(|(o, k)| {
            serde_json::json!({
                "name": o.name,
                "title": o.title,
                "paper": o.paper,
                "help": k.help,
                "switch": k.switch.is_some(),
                "example": k.example,
                "gate": k.gate,
                "needs_pre_norm": k.needs_pre_norm,
            })
        })
        .collect()
}

/// A gate's initial value: 0, or a finite number in [1e-6, 100] (below
/// 1e-6 every product of the simulator's pass is subnormal, which costs
/// tens of times the arithmetic and shows nothing 0 does not).
pub fn check_gate_init(name: &str, g: f64) -> Result<(), String> {
    if !(g.is_finite() && (0.0..=100.0).contains(&g)) {
        return Err(format!(
            "{name}'s init must be a number in [0, 100] (got {g})"
        ));
    }
    if g > 0.0 && g < 1e-6 {
        return Err(format!(
            "{name}'s init must be 0 or at least 1e-6 (got {g:e})"
        ));
    }
    Ok(())
}

/// The combined effect at initialisation of `options` (each with its
/// setting) on sublayer `l`: the product of their multipliers.
pub fn at_init(options: &[(&ResidualOption, f64)], l: usize, pre_norm: bool) -> InitEffect {
    let mut e = InitEffect {
        read: 1.0,
        write: 1.0,
    };
    for (o, v) in options {
        if let Some(k) = &o.sim {
            let x = (k.at_init)(*v, l, pre_norm);
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
    fn labels_carry_the_settings() {
        let mut c = ModelConfig::gpt();
        assert_eq!(label(&c), "");
        c.hc = Some(4);
        c.hc_dynamic = true;
        assert_eq!(label(&c), "+hc=4,dynamic");
        c.hc = None;
        c.hc_dynamic = false;
        c.mhc = Some(4);
        c.mhc_sinkhorn = Some(5);
        c.rezero = true;
        assert_eq!(label(&c), "+rezero+mhc=4,sinkhorn=5");
        c.rezero = false;
        c.layerscale = Some(1e-4);
        assert_eq!(label(&c), "+layerscale=0.0001+mhc=4,sinkhorn=5");
    }

    /// docs/commands/train.md shows the table the validations give.
    #[test]
    fn docs_show_which_placements_each_option_combines_with() {
        let docs = include_str!("../../../../../docs/commands/train.md");
        let t = placements_table();
        assert!(
            docs.contains(&t),
            "docs/commands/train.md lacks this table:\n{t}"
        );
        assert!(t.contains("| Hyper-connections | yes | - | yes |"), "{t}");
    }

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
    fn simulated_options_are_complete() {
        for (o, k) in simulated() {
            assert!((k.check)(k.example).is_ok(), "{}", o.name);
            assert!(!(k.label)(k.example).is_empty(), "{}", o.name);
            assert!(!k.help.is_empty(), "{}", o.name);
            // Its name is its depth-sim flag as it is.
            assert!(!o.name.contains('_'), "{}", o.name);
        }
        assert!(simulated().count() >= 3);
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
