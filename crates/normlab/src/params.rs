//! Flat parameter storage: every learnable tensor of a model lives in one
//! 64-byte-aligned `f32` buffer (and its gradient in a second buffer with the
//! same layout), described by a [`ParamLayout`] of named, shaped slices.
//! One buffer makes the optimiser, gradient norms, per-block statistics and
//! checkpointing single loops; names follow the nanoGPT/Hugging Face style
//! (`transformer.h.3.attn.c_attn.weight`) so checkpoints load in PyTorch.

use crate::kernels::buf::AlignedBuf;
use crate::kernels::rng::Rng;
use std::ops::Range;

/// What a tensor is (decides weight decay and initialisation defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A matrix of a Linear layer.
    Weight,
    /// A Linear bias.
    Bias,
    /// An embedding table (token or position).
    Embedding,
    /// A norm's gain (gamma, zero-centred w, ScaleNorm g).
    NormGain,
    /// A norm's bias (beta).
    NormBias,
    /// A point-wise norm's input slope or shift (DyT's and Derf's alpha,
    /// Derf's s): never weight-decayed.
    NormScalar,
    /// A branch gate (ReZero's scalar, LayerScale's vector): never
    /// weight-decayed.
    Gate,
}

/// How a tensor is initialised.
#[derive(Clone, Debug, PartialEq)]
pub enum Init {
    /// N(0, std^2).
    Normal(f32),
    /// Xavier/Glorot normal with a gain: std = gain * sqrt(2 / (fan_in + fan_out)).
    XavierNormal(f32),
    /// A `[out, in]` matrix whose rows are `gains.len()` equal blocks (e.g. a
    /// fused q|k|v projection), each Xavier-normal with its own gain and
    /// fan_out = out / blocks.
    XavierBlocks(Vec<f32>),
    /// Every element equal to the value.
    Const(f32),
    /// Uniform in [-bound, bound) (PyTorch's default Linear init uses
    /// bound = 1/sqrt(fan_in) for weights and biases).
    Uniform(f32),
    /// Every element given (e.g. hyper-connections' one-hot reads and
    /// identity mixing).
    Values(Vec<f32>),
}

/// One tensor in the flat buffer.
#[derive(Clone, Debug)]
pub struct ParamInfo {
    /// Hugging Face-style name.
    pub name: String,
    /// Shape (row-major; Linear weights are `[out, in]` as in PyTorch).
    pub shape: Vec<usize>,
    /// Where it lives in the flat buffer.
    pub range: Range<usize>,
    /// What it is.
    pub kind: ParamKind,
    /// Block (transformer layer) it belongs to, if any.
    pub block: Option<usize>,
    /// Initialisation.
    pub init: Init,
}

/// A handle to one tensor: its range in the flat buffers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParamRef(pub Range<usize>);

impl ParamRef {
    /// The tensor's values.
    #[inline]
    pub fn get<'a>(&self, buf: &'a [f32]) -> &'a [f32] {
        &buf[self.0.clone()]
    }

    /// The tensor's values, mutable (used on gradient buffers).
    #[inline]
    pub fn get_mut<'a>(&self, buf: &'a mut [f32]) -> &'a mut [f32] {
        &mut buf[self.0.clone()]
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The list of tensors of a model, in buffer order.
#[derive(Clone, Debug, Default)]
pub struct ParamLayout {
    /// Tensors in order of their ranges.
    pub tensors: Vec<ParamInfo>,
    len: usize,
}

impl ParamLayout {
    /// Empty layout.
    pub fn new() -> ParamLayout {
        ParamLayout::default()
    }

    /// Append a tensor; returns its handle. Ranges start on 16-float
    /// boundaries so every tensor is cache-line aligned.
    pub fn add(
        &mut self,
        name: impl Into<String>,
        shape: &[usize],
        kind: ParamKind,
        block: Option<usize>,
        init: Init,
    ) -> ParamRef {
        self.push(name.into(), shape, kind, block, init, true)
    }

    /// Append a tensor directly after the previous one (no alignment gap),
    /// so that e.g. a LayerNorm's gamma and beta form one contiguous slice.
    pub fn add_packed(
        &mut self,
        name: impl Into<String>,
        shape: &[usize],
        kind: ParamKind,
        block: Option<usize>,
        init: Init,
    ) -> ParamRef {
        self.push(name.into(), shape, kind, block, init, false)
    }

    fn push(
        &mut self,
        name: String,
        shape: &[usize],
        kind: ParamKind,
        block: Option<usize>,
        init: Init,
        aligned: bool,
    ) -> ParamRef {
        assert!(
            !self.tensors.iter().any(|t| t.name == name),
            "duplicate parameter name {name}"
        );
        let n: usize = shape.iter().product();
        let start = if aligned {
            self.len.div_ceil(16) * 16
        } else {
            self.len
        };
        let range = start..start + n;
        self.len = range.end;
        self.tensors.push(ParamInfo {
            name,
            shape: shape.to_vec(),
            range: range.clone(),
            kind,
            block,
            init,
        });
        ParamRef(range)
    }

    /// Length of the flat buffer (including alignment padding).
    pub fn buffer_len(&self) -> usize {
        self.len
    }

    /// Number of learnable values (excluding padding).
    pub fn num_params(&self) -> usize {
        self.tensors.iter().map(|t| t.range.len()).sum()
    }

    /// A zeroed buffer for this layout.
    pub fn zeros(&self) -> AlignedBuf {
        AlignedBuf::zeros(self.len)
    }

    /// Initialise every tensor; tensor `name` draws from `Rng::derive(seed, name)`,
    /// so adding a tensor never changes the others' initial values.
    pub fn init(&self, params: &mut [f32], seed: u64) {
        for t in &self.tensors {
            let dst = &mut params[t.range.clone()];
            match &t.init {
                Init::Const(v) => dst.fill(*v),
                Init::Values(v) => dst.copy_from_slice(v),
                Init::Normal(std) => Rng::derive(seed, &t.name).fill_normal(dst, 0.0, *std),
                Init::Uniform(b) => {
                    let mut rng = Rng::derive(seed, &t.name);
                    for v in dst.iter_mut() {
                        *v = (*b as f64 * (2.0 * rng.uniform() - 1.0)) as f32;
                    }
                }
                Init::XavierBlocks(gains) => {
                    let [o, i] = t.shape[..] else {
                        panic!("xavier init needs a matrix: {}", t.name)
                    };
                    let per = o / gains.len();
                    let mut rng = Rng::derive(seed, &t.name);
                    for (b, g) in gains.iter().enumerate() {
                        let std = g * (2.0 / (i + per) as f32).sqrt();
                        rng.fill_normal(&mut dst[b * per * i..(b + 1) * per * i], 0.0, std);
                    }
                }
                Init::XavierNormal(gain) => {
                    let (fan_out, fan_in) = match t.shape.as_slice() {
                        [o, i] => (*o, *i),
                        [n] => (*n, *n),
                        _ => panic!("xavier init needs a matrix: {}", t.name),
                    };
                    let std = *gain * (2.0 / (fan_in + fan_out) as f32).sqrt();
                    Rng::derive(seed, &t.name).fill_normal(dst, 0.0, std);
                }
            }
        }
    }

    /// Change the initialisation of the tensor at `r` (an init scheme
    /// applied after the modules registered their defaults).
    pub fn set_init(&mut self, r: &ParamRef, init: Init) {
        if let Some(t) = self.tensors.iter_mut().find(|t| t.range == r.0) {
            t.init = init;
        }
    }

    /// Look a tensor up by name.
    pub fn find(&self, name: &str) -> Option<&ParamInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Number of blocks referenced (max block index + 1).
    pub fn num_blocks(&self) -> usize {
        self.tensors
            .iter()
            .filter_map(|t| t.block)
            .map(|b| b + 1)
            .max()
            .unwrap_or(0)
    }
}

/// Sum of squares of `v` in f64 (fixed order, vectorised).
pub fn sum_squares(v: &[f32]) -> f64 {
    crate::kernels::act::sum_squares(v)
}

/// The largest of `v`, NaN if any is NaN (0 when empty).
pub fn nan_max(v: impl IntoIterator<Item = f64>) -> f64 {
    v.into_iter().fold(0.0, |m: f64, x| {
        if m.is_nan() || x.is_nan() {
            f64::NAN
        } else {
            m.max(x)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_aligns_and_inits_by_name() {
        let mut l = ParamLayout::new();
        let a = l.add(
            "a.weight",
            &[3, 5],
            ParamKind::Weight,
            Some(0),
            Init::Normal(0.02),
        );
        let b = l.add("a.bias", &[3], ParamKind::Bias, Some(0), Init::Const(0.0));
        let g = l.add(
            "n.weight",
            &[7],
            ParamKind::NormGain,
            None,
            Init::Const(1.0),
        );
        assert_eq!(a.0, 0..15);
        assert_eq!(b.0, 16..19);
        assert_eq!(g.0.start % 16, 0);
        assert_eq!(l.num_params(), 25);
        let mut p = l.zeros();
        l.init(&mut p, 7);
        assert!(g.get(&p).iter().all(|&v| v == 1.0));
        assert!(b.get(&p).iter().all(|&v| v == 0.0));
        let mut l2 = ParamLayout::new();
        l2.add("extra", &[4], ParamKind::Bias, None, Init::Normal(1.0));
        let a2 = l2.add(
            "a.weight",
            &[3, 5],
            ParamKind::Weight,
            Some(0),
            Init::Normal(0.02),
        );
        let mut p2 = l2.zeros();
        l2.init(&mut p2, 7);
        assert_eq!(
            a.get(&p),
            a2.get(&p2),
            "init depends on the name, not the position"
        );
        assert_eq!(l.num_blocks(), 1);
    }
}
