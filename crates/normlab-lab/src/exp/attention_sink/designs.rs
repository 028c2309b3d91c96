//! attention-sink's settings (the Bigram-Backcopy GPTs' depth and heads)
//! and designs (the ungated softmax, then each sink remover).

use normlab::nn::{AttnKind, OutputGate};

/// A Bigram-Backcopy setting: the GPT's depth and heads.
#[derive(Clone, Copy, Debug)]
pub(super) struct Setting {
    pub(super) name: &'static str,
    pub(super) layers: usize,
    pub(super) heads: usize,
}

/// The settings (quick: the first only).
pub(super) const SETTINGS: [Setting; 2] = [
    Setting {
        name: "1 layer, 1 head",
        layers: 1,
        heads: 1,
    },
    Setting {
        name: "2 layers, 2 heads",
        layers: 2,
        heads: 2,
    },
];

/// One design: the plain softmax, or one sink remover.
#[derive(Clone, Copy, Debug)]
pub(super) struct Design {
    pub(super) name: &'static str,
    pub(super) gate: Option<OutputGate>,
    pub(super) kind: AttnKind,
}

const fn design(name: &'static str, gate: Option<OutputGate>, kind: AttnKind) -> Design {
    Design { name, gate, kind }
}

/// The designs: the ungated softmax first, the lesson's gate second.
pub(super) const DESIGNS: [Design; 6] = [
    design("softmax (no gate)", None, AttnKind::Softmax),
    design(
        "elementwise output gate",
        Some(OutputGate::Elementwise),
        AttnKind::Softmax,
    ),
    design(
        "headwise output gate",
        Some(OutputGate::Headwise),
        AttnKind::Softmax,
    ),
    design("sink logit", None, AttnKind::SinkLogit),
    design("sigmoid attention", None, AttnKind::Sigmoid),
    design("ReLU attention", None, AttnKind::Relu),
];
