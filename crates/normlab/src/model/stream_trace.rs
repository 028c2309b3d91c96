//! Inspection of the residual stream, written once for every model: per
//! sublayer, the stream before, what the sublayer writes as it is added
//! (after its output norm for sandwich; for a post-norm sublayer the change
//! across it) and the stream after, from the model's own tensors, with the
//! check before + write = after. The pretrained decoder fills these in its
//! forward pass (`decoder::forward`); a trained [`Model`] from its caches.

use super::{Model, Workspace};
use crate::nn::norm::rms;

/// One sublayer's effect on the residual stream in one forward pass: the
/// stream it read, what it wrote as that write is added, the stream after.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SublayerTrace {
    /// Block index.
    pub block: usize,
    /// 0: attention; 1: MLP.
    pub sub: usize,
    /// RMS of the stream before.
    pub before_rms: f64,
    /// RMS of the write.
    pub write_rms: f64,
    /// RMS of the stream after.
    pub after_rms: f64,
    /// max |after - (before + write)| over max |after|: 0 up to rounding.
    pub check: f64,
}

impl SublayerTrace {
    /// The trace of `before + write = after` (all `[rows, d]`).
    pub fn of(block: usize, sub: usize, before: &[f32], write: &[f32], after: &[f32]) -> Self {
        let (mut err, mut top) = (0f32, 0f32);
        for ((b, w), a) in before.iter().zip(write).zip(after) {
            err = err.max((a - (b + w)).abs());
            top = top.max(a.abs());
        }
        SublayerTrace {
            block,
            sub,
            before_rms: rms(before),
            write_rms: rms(write),
            after_rms: rms(after),
            check: f64::from(err) / f64::from(top).max(1e-30),
        }
    }
}

impl Workspace {
    /// Keep (or stop keeping) every sublayer's write in the next forwards,
    /// for [`Model::sublayer_traces`].
    pub fn keep_writes(&mut self, on: bool) {
        for b in &mut self.blocks {
            for s in b.sublayers_mut() {
                s.keep_write(on);
            }
        }
    }
}

impl Model {
    /// Every sublayer's trace from the last forward on `ws` (which must
    /// keep writes: [`Workspace::keep_writes`]), bottom to top.
    pub fn sublayer_traces(&self, ws: &Workspace) -> Vec<SublayerTrace> {
        let mut out = Vec::with_capacity(2 * ws.blocks.len());
        let mut before: &[f32] = &ws.x0;
        for (b, c) in ws.blocks.iter().enumerate() {
            for j in 0..2 {
                let s = c.sublayer(j);
                assert!(
                    !s.write().is_empty(),
                    "sublayer_traces needs Workspace::keep_writes(true) before the forward"
                );
                out.push(SublayerTrace::of(b, j, before, s.write(), s.output()));
                before = s.output();
            }
        }
        out
    }
}
