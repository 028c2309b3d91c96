//! The depth simulator's settings ([`SimConfig`], with the residual
//! options it simulates) and its output ([`SimResult`]).

use normlab::model::residual;
use serde::Serialize;

/// A residual option in a simulation: its name in `model::residual` and
/// its setting (a gate's init; 1 for a switch such as LNS).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SimOption {
    /// The option's name (its flag).
    pub name: &'static str,
    /// Its setting.
    pub value: f64,
}

/// Simulator settings.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SimConfig {
    /// Sublayers N.
    pub sublayers: usize,
    /// Init gain g.
    pub gain: f64,
    /// Residual connections.
    pub residual: bool,
    /// RMSNorm before each sublayer.
    pub pre_norm: bool,
    /// Scale each sublayer's write-back by 1/sqrt(N).
    pub scale_writeback: bool,
    /// The pre-norm is DyT's point-wise tanh(alpha x) with its initial
    /// alpha [`DYT_ALPHA`] instead of RMSNorm (only with pre-norm).
    #[serde(default)]
    pub dyt: bool,
    /// The residual options on, in `model::residual::OPTIONS`' order
    /// (result.json before 2026-12-02 had `lns` and `gate` fields instead).
    pub options: Vec<SimOption>,
    /// Width.
    pub d: usize,
    /// Rows (independent inputs).
    pub rows: usize,
    /// Seed of inputs and weights.
    pub seed: u64,
}

impl SimConfig {
    /// The residual options it turns on, each with its declaration and
    /// setting.
    pub fn residual_options(&self) -> Vec<(&'static residual::ResidualOption, f64)> {
        self.options
            .iter()
            .filter_map(|o| residual::option(o.name).map(|d| (d, o.value)))
            .collect()
    }

    /// The n-stream option on, if any: how it routes and its n.
    pub fn streams(&self) -> Option<(residual::StreamSim, usize)> {
        self.residual_options()
            .into_iter()
            .find_map(|(o, v)| Some((o.sim.as_ref()?.streams?, v as usize)))
    }

    /// These settings with residual option `name` on at `value` (in
    /// `OPTIONS`' order).
    pub fn with(mut self, name: &'static str, value: f64) -> Self {
        self.options.retain(|o| o.name != name);
        self.options.push(SimOption { name, value });
        let at = |n: &str| residual::OPTIONS.iter().position(|o| o.name == n);
        self.options.sort_by_key(|o| at(o.name));
        self
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            sublayers: 32,
            gain: 1.0,
            residual: true,
            pre_norm: false,
            scale_writeback: false,
            dyt: false,
            options: Vec::new(),
            d: 64,
            rows: 64,
            seed: 0,
        }
    }
}

/// DyT's initial alpha in the simulator (the DyT paper's default).
pub const DYT_ALPHA: f64 = 0.5;

/// Simulator output.
#[derive(Clone, Debug, Serialize)]
pub struct SimResult {
    /// The settings.
    pub config: SimConfig,
    /// RMS of the stream x_l for l = 0..=N (None: overflowed).
    pub residual_rms: Vec<Option<f64>>,
    /// |dL/dx_l| / sqrt(rows) for l = 0..=N (None: overflowed).
    pub grad_norm: Vec<Option<f64>>,
    /// |dL/dx_0| / |dL/dx_N|.
    pub grad_ratio_bottom_top: Option<f64>,
    /// RMS of x_N.
    pub final_residual_rms: Option<f64>,
}

pub(super) fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}
