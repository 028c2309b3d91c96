//! Feed-forward sublayer: `Linear(d, h) -> GELU -> Linear(h, d)`, or SwiGLU
//! `Linear(d, 2h) -> silu(a) * b -> Linear(h, d)`.

use super::linear::Linear;
use super::norm::buf;
use crate::kernels::act;
use crate::kernels::buf::AlignedBuf;
use crate::params::{Init, ParamLayout};
use serde::{Deserialize, Serialize};

/// The MLP's nonlinearity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// GELU, tanh form.
    Gelu,
    /// SwiGLU (gated SiLU).
    Swiglu,
}

impl std::str::FromStr for Activation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "gelu" => Ok(Activation::Gelu),
            "swiglu" => Ok(Activation::Swiglu),
            _ => Err(format!(
                "unknown activation '{s}' (expected gelu or swiglu)"
            )),
        }
    }
}

/// Two Linears around a nonlinearity.
#[derive(Clone, Debug)]
pub struct Mlp {
    /// Width.
    pub d: usize,
    /// Hidden width h.
    pub hidden: usize,
    /// Nonlinearity.
    pub act: Activation,
    /// `{name}.c_fc`: d -> h (or 2h for SwiGLU).
    pub fc: Linear,
    /// `{name}.c_proj`: h -> d.
    pub proj: Linear,
}

/// Activations of one MLP in one shard (what its backward reads): the
/// pre-activation and, for GELU, its gate. The activation itself is rebuilt
/// in backward (GELU: `pre * gate`, one multiply; SwiGLU: recomputed),
/// which is cheaper than storing and reloading it on the small layers
/// normlab trains.
#[derive(Clone, Debug)]
pub struct MlpCache {
    pre: AlignedBuf,
    gate: AlignedBuf,
}

impl Mlp {
    /// Register `{name}.c_fc` and `{name}.c_proj`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        layout: &mut ParamLayout,
        name: &str,
        d: usize,
        hidden: usize,
        act: Activation,
        block: Option<usize>,
        fc_init: Init,
        proj_init: Init,
    ) -> Mlp {
        let fc_out = if act == Activation::Swiglu {
            2 * hidden
        } else {
            hidden
        };
        let fc = Linear::new(
            layout,
            &format!("{name}.c_fc"),
            d,
            fc_out,
            true,
            block,
            fc_init,
        );
        let proj = Linear::new(
            layout,
            &format!("{name}.c_proj"),
            hidden,
            d,
            true,
            block,
            proj_init,
        );
        Mlp {
            d,
            hidden,
            act,
            fc,
            proj,
        }
    }

    /// Buffers for `rows` rows.
    pub fn cache(&self, rows: usize) -> MlpCache {
        let f = self.fc.d_out;
        let gelu = self.act == Activation::Gelu;
        MlpCache {
            pre: buf(rows * f),
            gate: buf(if gelu { rows * f } else { 0 }),
        }
    }

    /// Floats of scratch per row: `(post, dpost, dpre)` widths.
    pub fn scratch_widths(&self) -> (usize, usize, usize) {
        (self.hidden, self.hidden, self.fc.d_out)
    }

    /// `out = proj(act(fc(a)))`; `post` is scratch of at least `rows x
    /// hidden` floats.
    pub fn forward(
        &self,
        params: &[f32],
        a: &[f32],
        out: &mut [f32],
        c: &mut MlpCache,
        post: &mut [f32],
    ) {
        let rows = a.len() / self.d;
        let post = &mut post[..rows * self.hidden];
        self.fc.forward(params, a, rows, &mut c.pre);
        match self.act {
            Activation::Gelu => act::gelu_forward(&c.pre, post, &mut c.gate),
            Activation::Swiglu => act::swiglu_forward(&c.pre, self.hidden, post),
        }
        self.proj.forward(params, post, rows, out);
    }

    /// Write `da`, accumulate both Linears' gradients. `post`, `dpost` and
    /// `dpre` are scratch of at least `rows x` [`Mlp::scratch_widths`] floats.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        a: &[f32],
        dout: &[f32],
        da: &mut [f32],
        c: &MlpCache,
        post: &mut [f32],
        dpost: &mut [f32],
        dpre: &mut [f32],
    ) {
        let rows = a.len() / self.d;
        let post = &mut post[..rows * self.hidden];
        let dpost = &mut dpost[..rows * self.hidden];
        let dpre = &mut dpre[..rows * self.fc.d_out];
        match self.act {
            Activation::Gelu => act::mul(post, &c.pre, &c.gate),
            Activation::Swiglu => act::swiglu_forward(&c.pre, self.hidden, post),
        }
        self.proj
            .backward(params, grads, post, dout, rows, Some(dpost), false);
        match self.act {
            Activation::Gelu => act::gelu_backward(&c.pre, &c.gate, dpost, dpre, false),
            Activation::Swiglu => act::swiglu_backward(&c.pre, dpost, self.hidden, dpre),
        }
        self.fc
            .backward(params, grads, a, dpre, rows, Some(da), false);
    }
}
