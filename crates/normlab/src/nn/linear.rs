//! Linear layer `y = x W^T + b` with `W: [out, in]` (PyTorch layout).

use crate::kernels::matmul;
use crate::params::{Init, ParamKind, ParamLayout, ParamRef};

/// A Linear layer's parameters.
#[derive(Clone, Debug)]
pub struct Linear {
    /// Input features.
    pub d_in: usize,
    /// Output features.
    pub d_out: usize,
    /// Weight `[d_out, d_in]`.
    pub w: ParamRef,
    /// Optional bias `[d_out]`.
    pub b: Option<ParamRef>,
}

impl Linear {
    /// Register `{name}.weight` (and `{name}.bias`, zero-initialised).
    pub fn new(
        layout: &mut ParamLayout,
        name: &str,
        d_in: usize,
        d_out: usize,
        bias: bool,
        block: Option<usize>,
        init: Init,
    ) -> Linear {
        let w = layout.add(
            format!("{name}.weight"),
            &[d_out, d_in],
            ParamKind::Weight,
            block,
            init,
        );
        let b = bias.then(|| {
            layout.add(
                format!("{name}.bias"),
                &[d_out],
                ParamKind::Bias,
                block,
                Init::Const(0.0),
            )
        });
        Linear { d_in, d_out, w, b }
    }

    /// `y[rows, out] = x[rows, in] W^T + b`.
    pub fn forward(&self, params: &[f32], x: &[f32], rows: usize, y: &mut [f32]) {
        matmul::linear_forward(
            x,
            self.w.get(params),
            self.b.as_ref().map(|b| b.get(params)),
            rows,
            self.d_in,
            self.d_out,
            y,
        );
    }

    /// Accumulate dW, db; write (or add, if `accumulate`) `dx = dy W`.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        x: &[f32],
        dy: &[f32],
        rows: usize,
        dx: Option<&mut [f32]>,
        accumulate: bool,
    ) {
        let (dw, db) = match &self.b {
            Some(b) => {
                // W and b are disjoint ranges of the gradient buffer.
                let (lo, hi) = grads.split_at_mut(b.0.start);
                (&mut lo[self.w.0.clone()], Some(&mut hi[..b.len()]))
            }
            None => (self.w.get_mut(grads), None),
        };
        assert!(
            self.b.as_ref().is_none_or(|b| b.0.start >= self.w.0.end),
            "bias must follow weight"
        );
        matmul::linear_backward(
            x,
            self.w.get(params),
            dy,
            rows,
            self.d_in,
            self.d_out,
            dw,
            db,
            dx,
            accumulate,
        );
    }
}
