//! residual-routing's vocabulary: the designs compared, the grid's axes
//! and what it measures per (model, design, learning rate) and per
//! (model, design).

use normlab::model::{ModelConfig, ModelKind};
use serde::Serialize;

/// The residual designs compared; the first is the baseline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Design {
    Plain,
    Hc,
    HcDynamic,
    Mhc,
    AttnRes,
}

pub(super) const DESIGNS: [Design; 5] = [
    Design::Plain,
    Design::Hc,
    Design::HcDynamic,
    Design::Mhc,
    Design::AttnRes,
];

/// Streams of the n-stream designs (the papers' and the lesson's 4).
pub(super) const STREAMS: usize = 4;

/// Block AttnRes's block size for `layers` blocks: about 8 AttnRes blocks
/// over the 2L sublayers, as the paper's models use.
pub(super) fn attnres_size(layers: usize) -> usize {
    ((2 * layers) as f64 / 8.0).round().max(1.0) as usize
}

impl Design {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Design::Plain => "pre-ln",
            Design::Hc => "hc",
            Design::HcDynamic => "hc-dynamic",
            Design::Mhc => "mhc",
            Design::AttnRes => "attnres",
        }
    }

    pub(crate) fn apply(self, m: &mut ModelConfig) {
        match self {
            Design::Plain => {}
            Design::Hc => m.hc = Some(STREAMS),
            Design::HcDynamic => {
                m.hc = Some(STREAMS);
                m.hc_dynamic = true;
            }
            Design::Mhc => m.mhc = Some(STREAMS),
            Design::AttnRes => m.attnres = Some(attnres_size(m.layers)),
        }
    }

    pub(crate) fn of(m: &ModelConfig) -> Design {
        match (m.hc, m.hc_dynamic, m.mhc, m.attnres) {
            (Some(_), true, _, _) => Design::HcDynamic,
            (Some(_), false, _, _) => Design::Hc,
            (_, _, Some(_), _) => Design::Mhc,
            (_, _, _, Some(_)) => Design::AttnRes,
            _ => Design::Plain,
        }
    }
}

/// The grid's axes.
pub(super) struct Settings {
    pub(super) models: Vec<ModelKind>,
    pub(super) lrs: Vec<f32>,
}

/// One (model, design, lr) cell.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Cell {
    pub(super) model: String,
    pub(super) design: &'static str,
    pub(super) lr: serde_json::Value,
    pub(super) params: usize,
    /// Median seconds per training step (one thread), and its ratio to
    /// plain Pre-LN's with the per-round quartiles.
    pub(super) step_seconds: f64,
    pub(super) step_ratio: f64,
    pub(super) step_ratio_q1_q3: (f64, f64),
    pub(super) status: &'static str,
    /// Final held-out loss: mean, std over seeds.
    pub(super) loss: Option<f64>,
    pub(super) loss_std: Option<f64>,
    /// At the wall time plain Pre-LN needs for all its steps: the step
    /// this design reaches there, and its held-out loss (mean, std).
    pub(super) equal_time_step: f64,
    pub(super) loss_equal_time: Option<f64>,
    pub(super) loss_equal_time_std: Option<f64>,
    /// RMS of the stream after the last block over after the first (end).
    pub(super) stream_growth: Option<f64>,
    /// The composite mixing's forward gain, largest over tokens (end; n
    /// streams only).
    pub(super) mixing_gain: Option<f64>,
}

/// Depth use of one (model, design) at the first learning rate.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Use {
    pub(super) model: String,
    pub(super) design: &'static str,
    pub(super) skip_first: f64,
    pub(super) skip_last: f64,
    pub(super) idle: usize,
    pub(super) blocks: usize,
    pub(super) skip_loss_rise: Vec<f64>,
}
