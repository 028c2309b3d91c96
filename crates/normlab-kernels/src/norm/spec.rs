//! How a norm kind describes itself ([`KindSpec`]): its names, default eps,
//! formula, parameter tensors (name suffix, gain or bias, per feature or
//! scalar, initial value) and how its gain acts. Each kind's file defines
//! its `SPEC`; modules, the calculator, checkpoint names, gain statistics
//! and tests derive from it.

/// Floats of per-row statistics cached by forward for backward.
pub const STATS: usize = 3;

/// What a norm's parameter tensor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamRole {
    /// Multiplies the normalised value (gamma, w of `1 + w`, ScaleNorm's g).
    Gain,
    /// Added after the gain (beta).
    Bias,
    /// Multiplies the input before a point-wise squashing function (DyT's
    /// and Derf's alpha).
    Slope,
    /// Added to the scaled input before the squashing function (Derf's s).
    Shift,
}

/// How many values a parameter tensor holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamLen {
    /// One per feature (d).
    PerFeature,
    /// One scalar.
    Scalar,
}

/// Initial value of a parameter tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ParamInit {
    /// Every element equal to this.
    Const(f32),
    /// sqrt(d) (ScaleNorm's g).
    SqrtD,
}

/// One parameter tensor of a norm, in the order of the flat parameter slice.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParamSpec {
    /// Tensor name suffix (`weight`, `bias`), as in PyTorch state dicts.
    pub suffix: &'static str,
    /// Gain or bias.
    pub role: ParamRole,
    /// Its length.
    pub len: ParamLen,
    /// Its initial value.
    pub init: ParamInit,
}

impl ParamSpec {
    /// Number of values for feature size `d`.
    pub fn len(&self, d: usize) -> usize {
        match self.len {
            ParamLen::PerFeature => d,
            ParamLen::Scalar => 1,
        }
    }

    /// Its initial value for feature size `d`.
    pub fn init_value(&self, d: usize) -> f32 {
        match self.init {
            ParamInit::Const(v) => v,
            ParamInit::SqrtD => (d as f32).sqrt(),
        }
    }
}

/// How the gain tensor multiplies the normalised value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GainForm {
    /// `offset + w[j]` per feature (offset 0: gamma; 1: zero-centred `1 + w`).
    PerFeature {
        /// Added to the stored value.
        offset: f32,
    },
    /// One scalar g multiplying `x / ‖x‖` (ScaleNorm): relative to a unit-RMS
    /// output that is a gain of g / sqrt(d).
    ScalarOnL2,
    /// No gain (the output is the normalised value itself).
    Unit,
}

/// Everything a norm kind says about itself.
#[derive(Clone, Copy, Debug)]
pub struct KindSpec {
    /// The name used on the command line and in files.
    pub name: &'static str,
    /// Other accepted spellings.
    pub aliases: &'static [&'static str],
    /// One-line formula (help texts, `normlab calc`).
    pub formula: &'static str,
    /// Default eps (the table in docs/kernels.md).
    pub default_eps: f32,
    /// Parameter tensors, in flat-slice order.
    pub params: &'static [ParamSpec],
    /// How the gain tensor (the first with [`ParamRole::Gain`]) acts.
    pub gain: GainForm,
    /// Statistics per row (false only for BatchNorm).
    pub row_wise: bool,
    /// Output j depends on x_j alone (no statistics over the row): a NaN
    /// stays in its element and a zero row maps to the bias, not to zeros.
    pub elementwise: bool,
}

/// `gamma` (init 1) per feature.
pub const GAMMA: ParamSpec = ParamSpec {
    suffix: "weight",
    role: ParamRole::Gain,
    len: ParamLen::PerFeature,
    init: ParamInit::Const(1.0),
};
/// `beta` (init 0) per feature.
pub const BETA: ParamSpec = ParamSpec {
    suffix: "bias",
    role: ParamRole::Bias,
    len: ParamLen::PerFeature,
    init: ParamInit::Const(0.0),
};
