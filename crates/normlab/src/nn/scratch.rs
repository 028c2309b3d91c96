//! The buffers every sublayer of a workspace shares while it runs, and the
//! storage type its activations are rounded to (`train --dtype`).

use super::norm::buf;
use super::sublayer::Sublayer;
use crate::kernels::buf::AlignedBuf;
use crate::precision::Dtype;

/// Buffers a sublayer needs only while it runs (backward's gradients, and
/// the input norm's and S's outputs when no backward reads them): one set
/// per workspace, shared by every sublayer, so that they stay in cache.
/// Deep nets on a CPU are bound by memory traffic as much as by arithmetic.
#[derive(Clone, Debug)]
pub struct Scratch {
    pub(super) a: AlignedBuf,
    pub(super) s: AlignedBuf,
    pub(super) dh: AlignedBuf,
    pub(super) dbr: AlignedBuf,
    pub(super) ds: AlignedBuf,
    pub(super) da: AlignedBuf,
    pub(super) dxb: AlignedBuf,
    pub(super) op1: AlignedBuf,
    pub(super) op2: AlignedBuf,
    pub(super) op3: AlignedBuf,
    /// The storage type activations and their gradients are rounded to
    /// between layers (`train --dtype`; f32: no rounding).
    pub round: Dtype,
}

impl Scratch {
    /// Scratch for `rows` rows of any of `subs`.
    pub fn new<'a>(subs: impl IntoIterator<Item = &'a Sublayer>, rows: usize) -> Scratch {
        let subs: Vec<&Sublayer> = subs.into_iter().collect();
        let d = subs.first().map_or(0, |s| s.d);
        let (mut w1, mut w2, mut w3) = (0, 0, 0);
        for sub in &subs {
            let (a, b, c) = sub.op.scratch_widths();
            w1 = w1.max(a);
            w2 = w2.max(b);
            w3 = w3.max(c);
        }
        let n = rows * d;
        let any_norm_out = subs.iter().any(|s| s.norm_out_in_scratch());
        Scratch {
            a: buf(if any_norm_out { n } else { 0 }),
            s: buf(n),
            dh: buf(n),
            dbr: buf(n),
            ds: buf(n),
            da: buf(n),
            dxb: buf(n),
            op1: buf(rows * w1),
            op2: buf(rows * w2),
            op3: buf(rows * w3),
            round: Dtype::F32,
        }
    }
}
