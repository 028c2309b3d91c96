//! The buffers every sublayer of a workspace shares while it runs, and the
//! storage type its activations are rounded to (`train --dtype`).

use super::norm::buf;
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
    /// Scratch for `rows` rows of width `d`, the operations' three
    /// scratch widths per row, and the input norm's output when any
    /// sublayer keeps it here (`norm_out`).
    pub fn sized(rows: usize, d: usize, widths: (usize, usize, usize), norm_out: bool) -> Scratch {
        let n = rows * d;
        let (w1, w2, w3) = widths;
        Scratch {
            a: buf(if norm_out { n } else { 0 }),
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
