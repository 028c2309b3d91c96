//! A learnable gate on a sublayer's branch, applied before the residual add:
//! ReZero (one scalar per sublayer, Bachlechner et al. 2020) or LayerScale
//! (one scale per channel, Touvron et al. 2021).
//!
//! ```text
//! forward:  y = g * o                       (g broadcast over rows)
//! backward: dg += sum_rows dy * o,   do = g * dy
//! ```

use crate::params::{Init, ParamKind, ParamLayout, ParamRef};

/// Which gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateKind {
    /// One scalar (ReZero's alpha).
    ReZero,
    /// One scale per channel (LayerScale's diag(lambda)).
    LayerScale,
}

/// A branch gate with its parameter.
#[derive(Clone, Debug)]
pub struct Gate {
    /// Which gate.
    pub kind: GateKind,
    /// Its values: 1 (ReZero) or d (LayerScale).
    pub g: ParamRef,
    /// Tensor name.
    pub name: String,
    d: usize,
}

impl Gate {
    /// Register a gate of width `d` named `name`, initialised to `init`.
    pub fn new(
        layout: &mut ParamLayout,
        name: &str,
        kind: GateKind,
        d: usize,
        init: f32,
        block: Option<usize>,
    ) -> Gate {
        let len = match kind {
            GateKind::ReZero => 1,
            GateKind::LayerScale => d,
        };
        let g = layout.add(name, &[len], ParamKind::Gate, block, Init::Const(init));
        Gate {
            kind,
            g,
            name: name.to_string(),
            d,
        }
    }

    /// `y = g * o`, row by row.
    pub fn forward(&self, params: &[f32], o: &[f32], y: &mut [f32]) {
        let g = self.g.get(params);
        match self.kind {
            GateKind::ReZero => {
                let a = g[0];
                y.iter_mut().zip(o).for_each(|(y, &o)| *y = a * o);
            }
            GateKind::LayerScale => {
                for (yr, or) in y.chunks_exact_mut(self.d).zip(o.chunks_exact(self.d)) {
                    for ((y, &o), &s) in yr.iter_mut().zip(or).zip(g) {
                        *y = s * o;
                    }
                }
            }
        }
    }

    /// Given dL/dy in `dy` and the forward's input `o`: accumulate dL/dg
    /// into `grads` and overwrite `dy` with dL/do = g * dy. The sums run in
    /// row order (f64), so they do not depend on the thread count.
    pub fn backward_in_place(&self, params: &[f32], grads: &mut [f32], o: &[f32], dy: &mut [f32]) {
        let g = self.g.get(params);
        match self.kind {
            GateKind::ReZero => {
                let a = g[0];
                let mut acc = 0f64;
                for (dy, &o) in dy.iter_mut().zip(o) {
                    acc += f64::from(*dy * o);
                    *dy *= a;
                }
                self.g.get_mut(grads)[0] += acc as f32;
            }
            GateKind::LayerScale => {
                let mut acc = vec![0f64; self.d];
                for (dr, or) in dy.chunks_exact_mut(self.d).zip(o.chunks_exact(self.d)) {
                    for (((dy, &o), &s), a) in dr.iter_mut().zip(or).zip(g).zip(acc.iter_mut()) {
                        *a += f64::from(*dy * o);
                        *dy *= s;
                    }
                }
                for (gr, a) in self.g.get_mut(grads).iter_mut().zip(acc) {
                    *gr += a as f32;
                }
            }
        }
    }
}
