//! Weight-name maps and tensor sources: a family's file names each of the
//! decoder's tensors its own way (`blk.3.attn_q.weight` in llama.cpp's
//! GGUF, `model.layers.3.self_attn.q_proj.weight` in a Hugging Face
//! folder). A [`TensorNames`] maps the decoder's roles to those names; a
//! [`TensorSource`] (a GGUF file, a safetensors file) hands out tensors as
//! f32 (a GGUF file also as its blocks); [`Decoder::from_tensors`] builds the weights from the two and the
//! configuration, checking every size and value.

use super::{Decoder, DecoderConfig, DecoderLayer, GainStore, Matrix};
use crate::error::Result;
use crate::gguf::{qdot, GgmlType, Gguf};

mod maps;

/// A tensor of the decoder, by role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tensor {
    /// Token embeddings.
    Embedding,
    /// The final norm's gain.
    FinalNorm,
    /// The output head (absent: tied to the embeddings).
    Head,
    /// Input norm of attention.
    AttnNorm,
    /// Output norm of attention (sandwich).
    AttnOutNorm,
    /// QK-Norm on queries.
    QNorm,
    /// QK-Norm on keys.
    KNorm,
    /// Query projection.
    Q,
    /// Key projection.
    K,
    /// Value projection.
    V,
    /// Query bias (Qwen2).
    QBias,
    /// Key bias.
    KBias,
    /// Value bias.
    VBias,
    /// Attention output projection.
    O,
    /// Input norm of the MLP.
    FfnNorm,
    /// Output norm of the MLP (sandwich).
    FfnOutNorm,
    /// Gate projection.
    Gate,
    /// Up projection.
    Up,
    /// Down projection.
    Down,
    /// Query, key and value in one tensor (GPT-2, GPT-NeoX).
    Qkv,
    /// Their biases in one tensor.
    QkvBias,
    /// Learned position embeddings (GPT-2).
    Position,
    /// Bias of the attention output projection.
    OBias,
    /// Bias of the up projection.
    UpBias,
    /// Bias of the down projection.
    DownBias,
    /// Bias of the attention's input norm.
    AttnNormBias,
    /// Bias of the MLP's input norm.
    FfnNormBias,
    /// Bias of the final norm.
    FinalNormBias,
    /// The MLP's gate and up in one tensor, the gate's rows first (Phi-3).
    GateUp,
}

/// A family's names for the decoder's tensors; `{i}` stands for the block.
#[derive(Clone, Copy, Debug)]
pub struct TensorNames {
    map: &'static [(Tensor, &'static str)],
    /// A prefix taken off the names that start with it (GPT-2's bare
    /// `GPT2Model` files drop `transformer.`).
    strip: &'static str,
}

pub use maps::{GGUF, HF, HF_GPT2, HF_LLAMA, HF_NEOX, HF_OLMO2};

impl TensorNames {
    /// A map of `map`'s names.
    pub const fn new(map: &'static [(Tensor, &'static str)]) -> TensorNames {
        TensorNames { map, strip: "" }
    }

    /// These names with `prefix` taken off those that start with it.
    pub const fn stripping(self, prefix: &'static str) -> TensorNames {
        TensorNames {
            map: self.map,
            strip: prefix,
        }
    }

    /// `name` as this map writes it (`{i}`: block `i`).
    pub fn spell(&self, name: &str, i: usize) -> String {
        let n = name.replace("{i}", &i.to_string());
        match n.strip_prefix(self.strip) {
            Some(rest) if !self.strip.is_empty() => rest.to_string(),
            _ => n,
        }
    }

    /// The name of `t` in block `i` (None: the family has no such tensor).
    pub fn name(&self, t: Tensor, i: usize) -> Option<String> {
        self.map
            .iter()
            .find(|(r, _)| *r == t)
            .map(|(_, n)| self.spell(n, i))
    }

    /// Every tensor a file of `cfg` (a [checked](DecoderConfig::check)
    /// one) holds under these names, with its shape as
    /// [`Decoder::from_tensors`] expects it, outermost first; the output
    /// head last, as it may be absent (tied to the embeddings).
    pub fn shapes(&self, cfg: &DecoderConfig) -> Vec<(String, Vec<usize>)> {
        let (d, qw, kvw, f) = (cfg.d, cfg.q_width(), cfg.kv_width(), cfg.ffn);
        let (ins, outs) = cfg.block_norms();
        let (qn, kn) = cfg.qk_norm_widths();
        let g = cfg.gpt;
        // A projection of `rows` outputs from `cols` inputs, as stored.
        let proj = |rows: usize, cols: usize| {
            if g.conv1d {
                vec![cols, rows]
            } else {
                vec![rows, cols]
            }
        };
        let mut roles = vec![(Tensor::Embedding, 0, vec![cfg.vocab, d])];
        if g.learned_positions {
            roles.push((Tensor::Position, 0, vec![cfg.context, d]));
        }
        roles.push((Tensor::FinalNorm, 0, vec![d]));
        if g.norm_bias {
            roles.push((Tensor::FinalNormBias, 0, vec![d]));
        }
        for i in 0..cfg.layers {
            if ins {
                roles.push((Tensor::AttnNorm, i, vec![d]));
                roles.push((Tensor::FfnNorm, i, vec![d]));
                if g.norm_bias {
                    roles.push((Tensor::AttnNormBias, i, vec![d]));
                    roles.push((Tensor::FfnNormBias, i, vec![d]));
                }
            }
            if outs {
                roles.push((Tensor::AttnOutNorm, i, vec![d]));
                roles.push((Tensor::FfnOutNorm, i, vec![d]));
            }
            if cfg.qk_norm {
                roles.push((Tensor::QNorm, i, vec![qn]));
                roles.push((Tensor::KNorm, i, vec![kn]));
            }
            if g.qkv == super::QkvStore::Separate {
                roles.push((Tensor::Q, i, proj(qw, d)));
                roles.push((Tensor::K, i, proj(kvw, d)));
                roles.push((Tensor::V, i, proj(kvw, d)));
                if cfg.qkv_bias {
                    roles.push((Tensor::QBias, i, vec![qw]));
                    roles.push((Tensor::KBias, i, vec![kvw]));
                    roles.push((Tensor::VBias, i, vec![kvw]));
                }
            } else {
                roles.push((Tensor::Qkv, i, proj(qw + 2 * kvw, d)));
                if cfg.qkv_bias {
                    roles.push((Tensor::QkvBias, i, vec![qw + 2 * kvw]));
                }
            }
            roles.push((Tensor::O, i, proj(d, qw)));
            if g.fused_gate_up {
                roles.push((Tensor::GateUp, i, proj(2 * f, d)));
            } else {
                if !g.plain_mlp {
                    roles.push((Tensor::Gate, i, proj(f, d)));
                }
                roles.push((Tensor::Up, i, proj(f, d)));
            }
            roles.push((Tensor::Down, i, proj(d, f)));
            if g.linear_bias {
                roles.push((Tensor::OBias, i, vec![d]));
                roles.push((Tensor::UpBias, i, vec![f]));
                roles.push((Tensor::DownBias, i, vec![d]));
            }
        }
        roles.push((Tensor::Head, 0, vec![cfg.vocab, d]));
        roles
            .into_iter()
            .filter_map(|(t, i, shape)| Some((self.name(t, i)?, shape)))
            .collect()
    }
}

/// Where tensors come from.
pub trait TensorSource {
    /// The number of values of `name` (None: no such tensor).
    fn numel(&self, name: &str) -> Option<usize> {
        self.shape(name).map(|s| {
            s.iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .unwrap_or(usize::MAX)
        })
    }
    /// The shape of `name`, outermost dimension first as PyTorch writes it
    /// (`[rows, columns]` for a weight matrix; None: no such tensor).
    fn shape(&self, name: &str) -> Option<Vec<usize>>;
    /// `name`'s values as f32.
    fn read(&self, name: &str) -> Result<Vec<f32>>;
    /// `name`'s stored blocks, when the source keeps a quantised type
    /// (None: no such tensor, or only f32 values to give).
    fn raw(&self, _name: &str) -> Option<(GgmlType, &[u8])> {
        None
    }
}

/// How [`Decoder::from_tensors`] keeps the weight matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightStorage {
    /// Dequantised to f32 once at load.
    F32,
    /// As the source stores them (GGUF blocks), dequantised on the fly:
    /// a loaded model's memory is close to its file's size.
    Quantised,
}

impl TensorSource for Gguf {
    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        // GGUF lists the fastest-varying dimension first.
        self.info(name)
            .ok()
            .map(|t| t.dims.iter().rev().copied().collect())
    }
    fn read(&self, name: &str) -> Result<Vec<f32>> {
        self.tensor(name)
    }
    fn raw(&self, name: &str) -> Option<(GgmlType, &[u8])> {
        let (t, b) = self.raw(name).ok()?;
        Some((t.ty, b))
    }
}

impl TensorSource for safetensors::SafeTensors<'_> {
    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.tensor(name).ok().map(|t| t.shape().to_vec())
    }
    fn read(&self, name: &str) -> Result<Vec<f32>> {
        use safetensors::Dtype;
        let t = self
            .tensor(name)
            .map_err(|_| format!("the safetensors file has no tensor '{name}'"))?;
        let b = t.data();
        let h = |c: &[u8]| [c[0], c[1]];
        Ok(match t.dtype() {
            Dtype::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            Dtype::BF16 => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes(h(c)).to_f32())
                .collect(),
            Dtype::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes(h(c)).to_f32())
                .collect(),
            other => {
                return Err(format!(
                    "tensor '{name}' is {other:?}; normlab reads F32, BF16 and F16"
                )
                .into())
            }
        })
    }
}

impl TensorSource for crate::model::hf_folder::Shards<'_> {
    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.part(name)?.shape(name)
    }
    fn read(&self, name: &str) -> Result<Vec<f32>> {
        match self.part(name) {
            Some(p) => p.read(name),
            None => Err(format!("the safetensors files have no tensor '{name}'").into()),
        }
    }
}

impl Decoder {
    /// Build a decoder of `cfg` from `src`'s tensors named by `names`:
    /// every size is checked against the configuration and every value
    /// must be finite; gains stored as w become 1 + w.
    pub fn from_tensors(
        cfg: DecoderConfig,
        names: &TensorNames,
        src: &dyn TensorSource,
        tokenizer: Option<tokenizers::Tokenizer>,
        eos: Option<u32>,
    ) -> Result<Decoder> {
        Decoder::from_tensors_as(cfg, names, src, tokenizer, eos, WeightStorage::F32)
    }

    /// [`Decoder::from_tensors`] keeping the matrices (embeddings and head
    /// included) as `storage` says. Quantised matrices are checked for
    /// finite values one row at a time, as f32 ones are whole.
    pub fn from_tensors_as(
        cfg: DecoderConfig,
        names: &TensorNames,
        src: &dyn TensorSource,
        tokenizer: Option<tokenizers::Tokenizer>,
        eos: Option<u32>,
        storage: WeightStorage,
    ) -> Result<Decoder> {
        cfg.check()?;
        let name = |t: Tensor, i: usize| -> Result<String> {
            names
                .name(t, i)
                .ok_or_else(|| format!("the weight-name map has no {t:?}").into())
        };
        // The last block's first norm (its input norm; OLMo 2's output norm).
        let probe = if cfg.block_norms().0 {
            Tensor::AttnNorm
        } else {
            Tensor::AttnOutNorm
        };
        let last = name(probe, cfg.layers - 1)?;
        if src.numel(&last).is_none() {
            return Err(format!(
                "block_count says {} blocks but the file has no tensor {last}",
                cfg.layers
            )
            .into());
        }
        // The exact shape the configuration implies (a transposed,
        // flattened or 4-d matrix of the right size is refused too).
        let check_shape = |n: &str, want: &[usize]| -> Result<()> {
            match src.shape(n) {
                None => Err(format!("the file has no tensor '{n}'").into()),
                Some(s) if s != want => Err(format!(
                    "{n} has shape {s:?}, expected {want:?} (outermost first: it does not have the shape the metadata gives)"
                )
                .into()),
                _ => Ok(()),
            }
        };
        let read_checked = |n: &str, want: &[usize]| -> Result<Vec<f32>> {
            check_shape(n, want)?;
            let len: usize = want.iter().product();
            let v = src.read(n)?;
            if v.len() != len {
                return Err(format!("{n} has {} values, expected {len}", v.len()).into());
            }
            if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                return Err(format!("{n} holds a non-finite value ({}) at {i}", v[i]).into());
            }
            Ok(v)
        };
        let get = |t: Tensor, i: usize, len: usize| read_checked(&name(t, i)?, &[len]);
        let gain = |t: Tensor, i: usize, len: usize| -> Result<Vec<f32>> {
            let mut g = get(t, i, len)?;
            if cfg.gain == GainStore::OnePlus {
                g.iter_mut().for_each(|w| *w += 1.0);
            }
            Ok(g)
        };
        // The `rows x cols` values named `n`, stored `[cols, rows]` when
        // `conv1d` (GPT-2's projections) and transposed here.
        let dense = |n: &str, rows: usize, cols: usize, conv1d: bool| -> Result<Vec<f32>> {
            rows.checked_mul(cols)
                .ok_or("a weight matrix's size overflows")?;
            if conv1d {
                Ok(transpose(&read_checked(n, &[cols, rows])?, cols, rows))
            } else {
                read_checked(n, &[rows, cols])
            }
        };
        let matrix_named = |n: &str, rows: usize, cols: usize, conv1d: bool| -> Result<Matrix> {
            rows.checked_mul(cols)
                .ok_or("a weight matrix's size overflows")?;
            if storage == WeightStorage::Quantised && !conv1d {
                check_shape(n, &[rows, cols])?;
                if let Some(m) = src
                    .raw(n)
                    .filter(|(ty, _)| qdot::has_dot(*ty))
                    .and_then(|(ty, b)| Matrix::quantised(ty, b.to_vec(), rows, cols))
                {
                    check_finite(n, &m)?;
                    return Ok(m);
                }
            }
            Ok(Matrix::dense(dense(n, rows, cols, conv1d)?, rows, cols))
        };
        let g = cfg.gpt;
        let matrix = |t: Tensor, i: usize, rows: usize, cols: usize| -> Result<Matrix> {
            matrix_named(&name(t, i)?, rows, cols, g.conv1d)
        };
        let (d, qw, kvw, f) = (cfg.d, cfg.q_width(), cfg.kv_width(), cfg.ffn);
        let (ins, outs) = cfg.block_norms();
        let (qn, kn) = cfg.qk_norm_widths();
        let bias =
            |on: bool, t: Tensor, i: usize, len: usize| on.then(|| get(t, i, len)).transpose();
        // q, k and v (and their biases): three tensors, or one split here.
        let qkv = |i: usize| -> Result<([Matrix; 3], QkvBias)> {
            if g.qkv == super::QkvStore::Separate {
                let b = cfg
                    .qkv_bias
                    .then(|| {
                        Ok::<_, crate::error::Error>((
                            get(Tensor::QBias, i, qw)?,
                            get(Tensor::KBias, i, kvw)?,
                            get(Tensor::VBias, i, kvw)?,
                        ))
                    })
                    .transpose()?;
                return Ok((
                    [
                        matrix(Tensor::Q, i, qw, d)?,
                        matrix(Tensor::K, i, kvw, d)?,
                        matrix(Tensor::V, i, kvw, d)?,
                    ],
                    b,
                ));
            }
            let rows = qw + 2 * kvw;
            let w = dense(&name(Tensor::Qkv, i)?, rows, d, g.conv1d)?;
            let [wq, wk, wv] = split_qkv(&w, d, &cfg);
            let b = match cfg.qkv_bias {
                true => {
                    let [bq, bk, bv] = split_qkv(&get(Tensor::QkvBias, i, rows)?, 1, &cfg);
                    Some((bq, bk, bv))
                }
                false => None,
            };
            Ok((
                [
                    Matrix::dense(wq, qw, d),
                    Matrix::dense(wk, kvw, d),
                    Matrix::dense(wv, kvw, d),
                ],
                b,
            ))
        };
        // A fused gate and up (Phi-3): the gate's rows, then the up's.
        let gate_up = |i: usize| -> Result<(Vec<f32>, Vec<f32>)> {
            let mut w = dense(&name(Tensor::GateUp, i)?, 2 * f, d, g.conv1d)?;
            let up = w.split_off(f * d);
            Ok((w, up))
        };
        let mut layers = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            // In the order of a block's computation (the norm first).
            let attn_norm = ins.then(|| gain(Tensor::AttnNorm, i, d)).transpose()?;
            let ([wq, wk, wv], qkv_bias) = qkv(i)?;
            let (fused_gate, fused_up) = match g.fused_gate_up {
                true => gate_up(i).map(|(a, b)| (Some(a), Some(b)))?,
                false => (None, None),
            };
            layers.push(DecoderLayer {
                attn_norm,
                attn_out_norm: outs.then(|| gain(Tensor::AttnOutNorm, i, d)).transpose()?,
                qk_norm: cfg
                    .qk_norm
                    .then(|| {
                        Ok::<_, crate::error::Error>((
                            gain(Tensor::QNorm, i, qn)?,
                            gain(Tensor::KNorm, i, kn)?,
                        ))
                    })
                    .transpose()?,
                qkv_bias,
                wq,
                wk,
                wv,
                wo: matrix(Tensor::O, i, d, qw)?,
                ffn_norm: ins.then(|| gain(Tensor::FfnNorm, i, d)).transpose()?,
                ffn_out_norm: outs.then(|| gain(Tensor::FfnOutNorm, i, d)).transpose()?,
                gate: match fused_gate {
                    Some(w) => Some(Matrix::dense(w, f, d)),
                    None => (!g.plain_mlp)
                        .then(|| matrix(Tensor::Gate, i, f, d))
                        .transpose()?,
                },
                up: match fused_up {
                    Some(w) => Matrix::dense(w, f, d),
                    None => matrix(Tensor::Up, i, f, d)?,
                },
                down: matrix(Tensor::Down, i, d, f)?,
                bias: super::LayerBias {
                    attn_norm: bias(ins && g.norm_bias, Tensor::AttnNormBias, i, d)?,
                    ffn_norm: bias(ins && g.norm_bias, Tensor::FfnNormBias, i, d)?,
                    o: bias(g.linear_bias, Tensor::OBias, i, d)?,
                    up: bias(g.linear_bias, Tensor::UpBias, i, f)?,
                    down: bias(g.linear_bias, Tensor::DownBias, i, d)?,
                },
            });
        }
        let emb = matrix_named(&name(Tensor::Embedding, 0)?, cfg.vocab, d, false)?;
        let pos = g
            .learned_positions
            .then(|| matrix_named(&name(Tensor::Position, 0)?, cfg.context, d, false))
            .transpose()?;
        let head_name = name(Tensor::Head, 0)?;
        let head = match src.numel(&head_name) {
            Some(_) => Some(matrix_named(&head_name, cfg.vocab, d, false)?),
            None => None,
        };
        let final_norm = gain(Tensor::FinalNorm, 0, d)?;
        let final_norm_bias = bias(g.norm_bias, Tensor::FinalNormBias, 0, d)?;
        Ok(Decoder {
            cfg,
            emb,
            layers,
            final_norm,
            final_norm_bias,
            pos,
            head,
            eos,
            bos: None,
            interventions: crate::model::intervene::Interventions::none(),
            quantised_activations: None,
            tokenizer,
        })
    }
}

/// The biases of q, k and v, when there are any.
type QkvBias = Option<(Vec<f32>, Vec<f32>, Vec<f32>)>;

/// `x` (`rows x cols`) transposed.
fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut y = vec![0f32; x.len()];
    for r in 0..rows {
        for c in 0..cols {
            y[c * rows + r] = x[r * cols + c];
        }
    }
    y
}

/// A fused q/k/v tensor's rows (`cols` values each) split into the
/// queries', keys' and values': one after another ([`QkvStore::Concat`])
/// or head by head ([`QkvStore::PerHead`]).
///
/// [`QkvStore::Concat`]: super::QkvStore::Concat
/// [`QkvStore::PerHead`]: super::QkvStore::PerHead
fn split_qkv(x: &[f32], cols: usize, cfg: &DecoderConfig) -> [Vec<f32>; 3] {
    let (qw, kvw, hd) = (cfg.q_width(), cfg.kv_width(), cfg.head_dim);
    if cfg.gpt.qkv == super::QkvStore::Concat {
        let (q, rest) = x.split_at(qw * cols);
        let (k, v) = rest.split_at(kvw * cols);
        return [q.to_vec(), k.to_vec(), v.to_vec()];
    }
    let mut out: [Vec<f32>; 3] = Default::default();
    for head in x.chunks_exact(3 * hd * cols) {
        for (o, part) in out.iter_mut().zip(head.chunks_exact(hd * cols)) {
            o.extend_from_slice(part);
        }
    }
    out
}

/// Refuse a quantised matrix with a non-finite value (as the f32 load
/// refuses one), looking at one dequantised row at a time.
fn check_finite(name: &str, m: &Matrix) -> Result<()> {
    let mut row = vec![0f32; m.cols];
    for r in 0..m.rows {
        m.row_into(r, &mut row);
        if let Some(i) = row.iter().position(|x| !x.is_finite()) {
            return Err(format!(
                "{name} holds a non-finite value ({}) at {}",
                row[i],
                r * m.cols + i
            )
            .into());
        }
    }
    Ok(())
}
