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
}

/// A family's names for the decoder's tensors; `{i}` stands for the block.
#[derive(Clone, Copy, Debug)]
pub struct TensorNames(pub &'static [(Tensor, &'static str)]);

/// llama.cpp's GGUF names (Llama and, with its extra norms, Gemma 3).
pub const GGUF: TensorNames = TensorNames(&[
    (Tensor::Embedding, "token_embd.weight"),
    (Tensor::FinalNorm, "output_norm.weight"),
    (Tensor::Head, "output.weight"),
    (Tensor::AttnNorm, "blk.{i}.attn_norm.weight"),
    (Tensor::AttnOutNorm, "blk.{i}.post_attention_norm.weight"),
    (Tensor::QNorm, "blk.{i}.attn_q_norm.weight"),
    (Tensor::KNorm, "blk.{i}.attn_k_norm.weight"),
    (Tensor::Q, "blk.{i}.attn_q.weight"),
    (Tensor::K, "blk.{i}.attn_k.weight"),
    (Tensor::V, "blk.{i}.attn_v.weight"),
    (Tensor::QBias, "blk.{i}.attn_q.bias"),
    (Tensor::KBias, "blk.{i}.attn_k.bias"),
    (Tensor::VBias, "blk.{i}.attn_v.bias"),
    (Tensor::O, "blk.{i}.attn_output.weight"),
    (Tensor::FfnNorm, "blk.{i}.ffn_norm.weight"),
    (Tensor::FfnOutNorm, "blk.{i}.post_ffw_norm.weight"),
    (Tensor::Gate, "blk.{i}.ffn_gate.weight"),
    (Tensor::Up, "blk.{i}.ffn_up.weight"),
    (Tensor::Down, "blk.{i}.ffn_down.weight"),
]);

/// Hugging Face's names for Gemma 3 (`Gemma3ForCausalLM`).
pub const HF: TensorNames = TensorNames(&[
    (Tensor::Embedding, "model.embed_tokens.weight"),
    (Tensor::FinalNorm, "model.norm.weight"),
    (Tensor::Head, "lm_head.weight"),
    (Tensor::AttnNorm, "model.layers.{i}.input_layernorm.weight"),
    (
        Tensor::AttnOutNorm,
        "model.layers.{i}.post_attention_layernorm.weight",
    ),
    (Tensor::QNorm, "model.layers.{i}.self_attn.q_norm.weight"),
    (Tensor::KNorm, "model.layers.{i}.self_attn.k_norm.weight"),
    (Tensor::Q, "model.layers.{i}.self_attn.q_proj.weight"),
    (Tensor::K, "model.layers.{i}.self_attn.k_proj.weight"),
    (Tensor::V, "model.layers.{i}.self_attn.v_proj.weight"),
    (Tensor::O, "model.layers.{i}.self_attn.o_proj.weight"),
    (
        Tensor::FfnNorm,
        "model.layers.{i}.pre_feedforward_layernorm.weight",
    ),
    (
        Tensor::FfnOutNorm,
        "model.layers.{i}.post_feedforward_layernorm.weight",
    ),
    (Tensor::Gate, "model.layers.{i}.mlp.gate_proj.weight"),
    (Tensor::Up, "model.layers.{i}.mlp.up_proj.weight"),
    (Tensor::Down, "model.layers.{i}.mlp.down_proj.weight"),
]);

/// Hugging Face's names for the Llama-style families (Llama, Mistral,
/// Qwen2, Qwen3): Pre-RMSNorm, where `post_attention_layernorm` is the MLP's
/// input norm (in Gemma 3 it is the attention output's norm).
pub const HF_LLAMA: TensorNames = TensorNames(&[
    (Tensor::Embedding, "model.embed_tokens.weight"),
    (Tensor::FinalNorm, "model.norm.weight"),
    (Tensor::Head, "lm_head.weight"),
    (Tensor::AttnNorm, "model.layers.{i}.input_layernorm.weight"),
    (Tensor::QNorm, "model.layers.{i}.self_attn.q_norm.weight"),
    (Tensor::KNorm, "model.layers.{i}.self_attn.k_norm.weight"),
    (Tensor::Q, "model.layers.{i}.self_attn.q_proj.weight"),
    (Tensor::K, "model.layers.{i}.self_attn.k_proj.weight"),
    (Tensor::V, "model.layers.{i}.self_attn.v_proj.weight"),
    (Tensor::QBias, "model.layers.{i}.self_attn.q_proj.bias"),
    (Tensor::KBias, "model.layers.{i}.self_attn.k_proj.bias"),
    (Tensor::VBias, "model.layers.{i}.self_attn.v_proj.bias"),
    (Tensor::O, "model.layers.{i}.self_attn.o_proj.weight"),
    (
        Tensor::FfnNorm,
        "model.layers.{i}.post_attention_layernorm.weight",
    ),
    (Tensor::Gate, "model.layers.{i}.mlp.gate_proj.weight"),
    (Tensor::Up, "model.layers.{i}.mlp.up_proj.weight"),
    (Tensor::Down, "model.layers.{i}.mlp.down_proj.weight"),
]);

/// Hugging Face's names for OLMo 2: its `post_attention_layernorm` and
/// `post_feedforward_layernorm` are the sublayers' output norms (there is
/// no input norm), and q_norm / k_norm span the whole q and k.
pub const HF_OLMO2: TensorNames = TensorNames(&[
    (Tensor::Embedding, "model.embed_tokens.weight"),
    (Tensor::FinalNorm, "model.norm.weight"),
    (Tensor::Head, "lm_head.weight"),
    (
        Tensor::AttnOutNorm,
        "model.layers.{i}.post_attention_layernorm.weight",
    ),
    (Tensor::QNorm, "model.layers.{i}.self_attn.q_norm.weight"),
    (Tensor::KNorm, "model.layers.{i}.self_attn.k_norm.weight"),
    (Tensor::Q, "model.layers.{i}.self_attn.q_proj.weight"),
    (Tensor::K, "model.layers.{i}.self_attn.k_proj.weight"),
    (Tensor::V, "model.layers.{i}.self_attn.v_proj.weight"),
    (Tensor::O, "model.layers.{i}.self_attn.o_proj.weight"),
    (
        Tensor::FfnOutNorm,
        "model.layers.{i}.post_feedforward_layernorm.weight",
    ),
    (Tensor::Gate, "model.layers.{i}.mlp.gate_proj.weight"),
    (Tensor::Up, "model.layers.{i}.mlp.up_proj.weight"),
    (Tensor::Down, "model.layers.{i}.mlp.down_proj.weight"),
]);

impl TensorNames {
    /// The name of `t` in block `i` (None: the family has no such tensor).
    pub fn name(&self, t: Tensor, i: usize) -> Option<String> {
        self.0
            .iter()
            .find(|(r, _)| *r == t)
            .map(|(_, n)| n.replace("{i}", &i.to_string()))
    }

    /// Every tensor a file of `cfg` (a [checked](DecoderConfig::check)
    /// one) holds under these names, with its shape as
    /// [`Decoder::from_tensors`] expects it, outermost first; the output
    /// head last, as it may be absent (tied to the embeddings).
    pub fn shapes(&self, cfg: &DecoderConfig) -> Vec<(String, Vec<usize>)> {
        let (d, qw, kvw, f) = (cfg.d, cfg.q_width(), cfg.kv_width(), cfg.ffn);
        let (ins, outs) = cfg.block_norms();
        let (qn, kn) = cfg.qk_norm_widths();
        let mut roles = vec![(Tensor::Embedding, 0, vec![cfg.vocab, d])];
        roles.push((Tensor::FinalNorm, 0, vec![d]));
        for i in 0..cfg.layers {
            if ins {
                roles.push((Tensor::AttnNorm, i, vec![d]));
                roles.push((Tensor::FfnNorm, i, vec![d]));
            }
            if outs {
                roles.push((Tensor::AttnOutNorm, i, vec![d]));
                roles.push((Tensor::FfnOutNorm, i, vec![d]));
            }
            if cfg.qk_norm {
                roles.push((Tensor::QNorm, i, vec![qn]));
                roles.push((Tensor::KNorm, i, vec![kn]));
            }
            roles.push((Tensor::Q, i, vec![qw, d]));
            roles.push((Tensor::K, i, vec![kvw, d]));
            roles.push((Tensor::V, i, vec![kvw, d]));
            if cfg.qkv_bias {
                roles.push((Tensor::QBias, i, vec![qw]));
                roles.push((Tensor::KBias, i, vec![kvw]));
                roles.push((Tensor::VBias, i, vec![kvw]));
            }
            roles.push((Tensor::O, i, vec![d, qw]));
            roles.push((Tensor::Gate, i, vec![f, d]));
            roles.push((Tensor::Up, i, vec![f, d]));
            roles.push((Tensor::Down, i, vec![d, f]));
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
        let matrix_named = |n: &str, rows: usize, cols: usize| -> Result<Matrix> {
            rows.checked_mul(cols)
                .ok_or("a weight matrix's size overflows")?;
            check_shape(n, &[rows, cols])?;
            if storage == WeightStorage::Quantised {
                if let Some(m) = src
                    .raw(n)
                    .filter(|(ty, _)| qdot::has_dot(*ty))
                    .and_then(|(ty, b)| Matrix::quantised(ty, b.to_vec(), rows, cols))
                {
                    check_finite(n, &m)?;
                    return Ok(m);
                }
            }
            Ok(Matrix::dense(read_checked(n, &[rows, cols])?, rows, cols))
        };
        let matrix = |t: Tensor, i: usize, rows: usize, cols: usize| -> Result<Matrix> {
            matrix_named(&name(t, i)?, rows, cols)
        };
        let (d, qw, kvw, f) = (cfg.d, cfg.q_width(), cfg.kv_width(), cfg.ffn);
        let (ins, outs) = cfg.block_norms();
        let (qn, kn) = cfg.qk_norm_widths();
        let mut layers = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            layers.push(DecoderLayer {
                attn_norm: ins.then(|| gain(Tensor::AttnNorm, i, d)).transpose()?,
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
                qkv_bias: cfg
                    .qkv_bias
                    .then(|| {
                        Ok::<_, crate::error::Error>((
                            get(Tensor::QBias, i, qw)?,
                            get(Tensor::KBias, i, kvw)?,
                            get(Tensor::VBias, i, kvw)?,
                        ))
                    })
                    .transpose()?,
                wq: matrix(Tensor::Q, i, qw, d)?,
                wk: matrix(Tensor::K, i, kvw, d)?,
                wv: matrix(Tensor::V, i, kvw, d)?,
                wo: matrix(Tensor::O, i, d, qw)?,
                ffn_norm: ins.then(|| gain(Tensor::FfnNorm, i, d)).transpose()?,
                ffn_out_norm: outs.then(|| gain(Tensor::FfnOutNorm, i, d)).transpose()?,
                gate: matrix(Tensor::Gate, i, f, d)?,
                up: matrix(Tensor::Up, i, f, d)?,
                down: matrix(Tensor::Down, i, d, f)?,
            });
        }
        let emb = matrix(Tensor::Embedding, 0, cfg.vocab, d)?;
        let head_name = name(Tensor::Head, 0)?;
        let head = match src.numel(&head_name) {
            Some(_) => Some(matrix_named(&head_name, cfg.vocab, d)?),
            None => None,
        };
        let final_norm = gain(Tensor::FinalNorm, 0, d)?;
        Ok(Decoder {
            cfg,
            emb,
            layers,
            final_norm,
            head,
            eos,
            bos: None,
            ffn_clamp: None,
            quantised_activations: None,
            tokenizer,
        })
    }
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
