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

/// Activations of one MLP in one shard.
#[derive(Clone, Debug)]
pub struct MlpCache {
    pre: AlignedBuf,
    gate: AlignedBuf,
    post: AlignedBuf,
    dpost: AlignedBuf,
    dpre: AlignedBuf,
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
        MlpCache {
            pre: buf(rows * f),
            gate: buf(if self.act == Activation::Gelu {
                rows * f
            } else {
                0
            }),
            post: buf(rows * self.hidden),
            dpost: buf(rows * self.hidden),
            dpre: buf(rows * f),
        }
    }

    /// `out = proj(act(fc(a)))`.
    pub fn forward(&self, params: &[f32], a: &[f32], out: &mut [f32], c: &mut MlpCache) {
        let rows = a.len() / self.d;
        self.fc.forward(params, a, rows, &mut c.pre);
        match self.act {
            Activation::Gelu => act::gelu_forward(&c.pre, &mut c.post, &mut c.gate),
            Activation::Swiglu => act::swiglu_forward(&c.pre, self.hidden, &mut c.post),
        }
        self.proj.forward(params, &c.post, rows, out);
    }

    /// Write `da`, accumulate both Linears' gradients.
    pub fn backward(
        &self,
        params: &[f32],
        grads: &mut [f32],
        a: &[f32],
        dout: &[f32],
        da: &mut [f32],
        c: &mut MlpCache,
    ) {
        let rows = a.len() / self.d;
        self.proj.backward(
            params,
            grads,
            &c.post,
            dout,
            rows,
            Some(&mut c.dpost),
            false,
        );
        match self.act {
            Activation::Gelu => act::gelu_backward(&c.pre, &c.gate, &c.dpost, &mut c.dpre, false),
            Activation::Swiglu => act::swiglu_backward(&c.pre, &c.dpost, self.hidden, &mut c.dpre),
        }
        self.fc
            .backward(params, grads, a, &c.dpre, rows, Some(da), false);
    }
}
