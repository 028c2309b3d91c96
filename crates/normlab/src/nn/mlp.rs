//! Feed-forward sublayer: `Linear(d, h) -> GELU -> Linear(h, d)` (GELU's
//! tanh form, or its exact erf form as GPT-NeoX), or a gated one,
//! `Linear(d, 2h) -> act(a) * b -> Linear(h, d)` with SiLU (SwiGLU) or
//! tanh-GELU (GeGLU, Gemma's).

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
    /// GeGLU (gated tanh-GELU; Gemma).
    Geglu,
    /// GELU, exact erf form (GPT-NeoX).
    #[serde(rename = "gelu-erf")]
    GeluErf,
}

impl Activation {
    /// Every activation.
    pub const ALL: [Activation; 4] = [
        Activation::Gelu,
        Activation::Swiglu,
        Activation::Geglu,
        Activation::GeluErf,
    ];

    /// The name in files and flags.
    pub fn name(self) -> &'static str {
        match self {
            Activation::Gelu => "gelu",
            Activation::Swiglu => "swiglu",
            Activation::Geglu => "geglu",
            Activation::GeluErf => "gelu-erf",
        }
    }

    /// Whether it gates: `act(a) * b` over a fused `[a | b]` projection.
    pub fn gated(self) -> bool {
        matches!(self, Activation::Swiglu | Activation::Geglu)
    }
}

impl std::str::FromStr for Activation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.to_ascii_lowercase();
        Activation::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown activation '{s}' (expected {})",
                    Activation::ALL.map(Activation::name).join(", ")
                )
            })
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
    /// SwiGLU's clamp limit (DeepSeek V4's form: the gate's output at most
    /// it, the up projection's within +-it); None: unclamped.
    pub clamp: Option<f32>,
}

/// Activations of one MLP in one shard (what its backward reads). GELU:
/// the activation and its derivative (the pre-activation is scratch);
/// SwiGLU: the pre-activation (the activation is recomputed in backward).
#[derive(Clone, Debug)]
pub struct MlpCache {
    pre: AlignedBuf,
    post: AlignedBuf,
    dact: AlignedBuf,
}

impl Mlp {
    /// Register `{name}.c_fc` and `{name}.c_proj` (with their biases
    /// unless `no_bias`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        layout: &mut ParamLayout,
        name: &str,
        d: usize,
        hidden: usize,
        act: Activation,
        no_bias: bool,
        block: Option<usize>,
        fc_init: Init,
        proj_init: Init,
    ) -> Mlp {
        let fc_out = if act.gated() { 2 * hidden } else { hidden };
        let fc = Linear::new(
            layout,
            &format!("{name}.c_fc"),
            d,
            fc_out,
            !no_bias,
            block,
            fc_init,
        );
        let proj = Linear::new(
            layout,
            &format!("{name}.c_proj"),
            hidden,
            d,
            !no_bias,
            block,
            proj_init,
        );
        Mlp {
            d,
            hidden,
            act,
            fc,
            proj,
            clamp: None,
        }
    }

    /// Buffers for `rows` rows.
    pub fn cache(&self, rows: usize) -> MlpCache {
        let f = self.fc.d_out;
        let gelu = !self.act.gated();
        let kept = |on: bool, n: usize| buf(if on { rows * n } else { 0 });
        MlpCache {
            pre: kept(!gelu, f),
            post: kept(gelu, self.hidden),
            dact: kept(gelu, self.hidden),
        }
    }

    /// Floats of scratch per row: `(pre or post, dpost, dpre)` widths.
    pub fn scratch_widths(&self) -> (usize, usize, usize) {
        (self.fc.d_out.max(self.hidden), self.hidden, self.fc.d_out)
    }

    /// The activation of the last forward (SwiGLU's gate times up after
    /// its clamp, or GELU's output): its largest |value| (NaN if one is NaN)
    /// and how many values f16 could not store (|v| > 65504, or not finite).
    pub fn activation_extremes(&self, c: &MlpCache) -> (f64, u64) {
        let stats = |v: &[f32]| {
            let top = v.iter().fold(0f32, |m, x| {
                if m.is_nan() || x.is_nan() {
                    f32::NAN
                } else {
                    m.max(x.abs())
                }
            });
            let over = crate::precision::beyond_f16(v);
            (f64::from(top), over)
        };
        if self.act.gated() {
            let mut y = vec![0.0; c.pre.len() / 2];
            self.swiglu(&c.pre, &mut y);
            stats(&y)
        } else {
            stats(&c.post)
        }
    }

    /// The gated activation of the pre-activations `ab` (SwiGLU, clamped
    /// if set; or GeGLU).
    fn swiglu(&self, ab: &[f32], y: &mut [f32]) {
        match (self.act, self.clamp) {
            (Activation::Geglu, _) => act::geglu_forward(ab, self.hidden, y),
            (_, None) => act::swiglu_forward(ab, self.hidden, y),
            (_, Some(l)) => act::swiglu_clamped_forward(ab, self.hidden, l, y),
        }
    }

    /// `out = proj(act(fc(a)))`; `tmp` is scratch of at least `rows x`
    /// [`Mlp::scratch_widths`]`.0` floats.
    pub fn forward(
        &self,
        params: &[f32],
        a: &[f32],
        out: &mut [f32],
        c: &mut MlpCache,
        tmp: &mut [f32],
    ) {
        let rows = a.len() / self.d;
        if self.act.gated() {
            let post = &mut tmp[..rows * self.hidden];
            self.fc.forward(params, a, rows, &mut c.pre);
            self.swiglu(&c.pre, post);
            self.proj.forward(params, post, rows, out);
        } else {
            let pre = &mut tmp[..rows * self.fc.d_out];
            self.fc.forward(params, a, rows, pre);
            match self.act {
                Activation::GeluErf => act::gelu_erf_forward_grad(pre, &mut c.post, &mut c.dact),
                _ => act::gelu_forward(pre, &mut c.post, &mut c.dact),
            }
            self.proj.forward(params, &c.post, rows, out);
        }
    }

    /// Write `da`, accumulate both Linears' gradients. `tmp`, `dpost` and
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
        tmp: &mut [f32],
        dpost: &mut [f32],
        dpre: &mut [f32],
    ) {
        let rows = a.len() / self.d;
        let dpost = &mut dpost[..rows * self.hidden];
        let dpre = &mut dpre[..rows * self.fc.d_out];
        let post: &[f32] = if self.act.gated() {
            let post = &mut tmp[..rows * self.hidden];
            self.swiglu(&c.pre, post);
            post
        } else {
            &c.post
        };
        self.proj
            .backward(params, grads, post, dout, rows, Some(dpost), false);
        match (self.act, self.clamp) {
            (Activation::Gelu | Activation::GeluErf, _) => act::mul(dpre, dpost, &c.dact),
            (Activation::Geglu, _) => act::geglu_backward(&c.pre, dpost, self.hidden, dpre),
            (_, None) => act::swiglu_backward(&c.pre, dpost, self.hidden, dpre),
            (_, Some(l)) => act::swiglu_clamped_backward(&c.pre, dpost, self.hidden, l, dpre),
        }
        self.fc
            .backward(params, grads, a, dpre, rows, Some(da), false);
    }
}
