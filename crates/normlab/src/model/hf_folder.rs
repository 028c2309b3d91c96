//! What every reader of a Hugging Face folder shares ([`Decoder::load_hf`]
//! and [`Bert::load`]): `config.json` read up to [`MAX_CONFIG_BYTES`];
//! `model.safetensors` checked against the tensors its configuration
//! implies before any tensor is read (the file's size against their values
//! and a header of at most [`MAX_HEADER_BYTES`], the memory the f32
//! weights need, then the table tensor by tensor: none missing, none
//! extra, a float type, the exact shape); sharded folders refused by name;
//! `tokenizer.json` read as a regular file up to [`MAX_TOKENIZER_BYTES`]
//! (a FIFO is refused, not waited on).
//!
//! [`Decoder::load_hf`]: super::decoder::Decoder::load_hf
//! [`Bert::load`]: super::bert::Bert::load

use crate::error::{Error, Result};
use crate::limits::{check_memory, f32_bytes, human_bytes};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Largest `config.json` read (a real one is a few KiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Largest `tokenizer.json` read (Gemma 3's, of 262,144 tokens, is 33 MiB).
pub const MAX_TOKENIZER_BYTES: u64 = 256 << 20;
/// Largest safetensors header read (the table of names, dtypes, shapes and
/// offsets: Gemma 3 27B's is about 100 KiB).
pub const MAX_HEADER_BYTES: u64 = 16 << 20;

/// The tensors a configuration implies, by name and shape.
#[derive(Clone, Debug, Default)]
pub struct Expected {
    /// Tensors that must be there, of a float type.
    pub required: Vec<(String, Vec<usize>)>,
    /// Tensors that may be absent (a tied head, BERT's pooler); when
    /// there, of a float type and this shape.
    pub optional: Vec<(String, Vec<usize>)>,
    /// Tensors that may be there with any type (never read: BERT's
    /// `position_ids` buffer); when there, of this shape.
    pub ignored: Vec<(String, Vec<usize>)>,
}

fn count(shapes: &[(String, Vec<usize>)]) -> u64 {
    shapes
        .iter()
        .map(|(_, s)| s.iter().map(|&n| n as u64).product::<u64>())
        .sum()
}

impl Expected {
    /// Values of the float tensors (required and optional).
    pub fn values(&self) -> u64 {
        count(&self.required) + count(&self.optional)
    }

    /// The largest weights file these tensors fit in: 4 bytes a float
    /// value, 8 an ignored one, the 8-byte length and a header of at most
    /// [`MAX_HEADER_BYTES`].
    pub fn most_bytes(&self) -> u64 {
        8 + MAX_HEADER_BYTES + 4 * self.values() + 8 * count(&self.ignored)
    }

    /// Check `st`'s table before any tensor is read (see the module doc).
    pub fn check_table(&self, st: &SafeTensors) -> Result<()> {
        let find = |name: &str| {
            let all = [&self.required, &self.optional, &self.ignored];
            all.into_iter().enumerate().find_map(|(i, v)| {
                v.iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, s)| (i == 2, s.as_slice()))
            })
        };
        let mut names = st.names();
        names.sort();
        for name in names {
            let Some((ignored, shape)) = find(name) else {
                return Err(format!(
                    "holds a tensor '{name}' that config.json does not describe (a different model, or a layer count that does not match)"
                )
                .into());
            };
            let t = st
                .tensor(name)
                .map_err(|e| format!("tensor '{name}': {e}"))?;
            if !ignored && !matches!(t.dtype(), Dtype::F32 | Dtype::BF16 | Dtype::F16) {
                return Err(format!(
                    "tensor '{name}' is {:?}; normlab reads F32, BF16 and F16",
                    t.dtype()
                )
                .into());
            }
            if t.shape() != shape {
                return Err(format!(
                    "tensor '{name}' has shape {:?}, config.json implies {shape:?}",
                    t.shape()
                )
                .into());
            }
        }
        if let Some((name, _)) = self.required.iter().find(|(n, _)| st.tensor(n).is_err()) {
            return Err(format!("has no tensor '{name}' (config.json implies it)").into());
        }
        Ok(())
    }
}

/// `dir/config.json` as JSON, read up to [`MAX_CONFIG_BYTES`].
pub fn read_config(dir: &Path) -> Result<Value> {
    let bytes = crate::io::read_at_most(&dir.join("config.json"), MAX_CONFIG_BYTES)?;
    serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}/config.json is not JSON: {e}", dir.display()).into())
}

/// The `model_type` of `dir/config.json` ("" when it names none).
pub fn model_type(dir: &Path) -> Result<String> {
    let c = read_config(dir)?;
    Ok(c.get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string())
}

/// Read `dir/model.safetensors` once its size fits `want` and the memory
/// (refusing a sharded folder by name); returns its path and bytes, for
/// [`tensors`].
pub fn read_weights(dir: &Path, want: &Expected) -> Result<(PathBuf, Vec<u8>)> {
    let path = dir.join("model.safetensors");
    if !path.exists() && dir.join("model.safetensors.index.json").exists() {
        return Err(format!(
            "{}: sharded weights (model.safetensors.index.json) are not supported: normlab reads one model.safetensors",
            dir.display()
        )
        .into());
    }
    let len = std::fs::metadata(&path)
        .map_err(|e| Error::read(&path, e))?
        .len();
    let (values, most) = (want.values(), want.most_bytes());
    if len > most {
        return Err(format!(
            "{} is {len} bytes, more than the {most} its config.json implies ({values} values at 4 bytes, a header of at most {})",
            path.display(),
            human_bytes(MAX_HEADER_BYTES as f64)
        )
        .into());
    }
    check_memory(
        len as f64 + f32_bytes(values as f64),
        &format!("loading {} ({values} weights)", dir.display()),
    )?;
    let bytes = crate::io::read(&path)?;
    Ok((path, bytes))
}

/// The table of a weights file [`read_weights`] read, checked against
/// `want` (its header no longer than [`MAX_HEADER_BYTES`]).
pub fn tensors<'a>(path: &Path, bytes: &'a [u8], want: &Expected) -> Result<SafeTensors<'a>> {
    let bad = |e: &dyn std::fmt::Display| -> Error {
        format!("{} is not valid: {e}", path.display()).into()
    };
    let header = bytes
        .get(..8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    if header > MAX_HEADER_BYTES {
        return Err(bad(&format!(
            "its header of {header} bytes is more than the {} read",
            human_bytes(MAX_HEADER_BYTES as f64)
        )));
    }
    let st = SafeTensors::deserialize(bytes).map_err(|e| bad(&e))?;
    want.check_table(&st)
        .map_err(|e| e.within(&path.display().to_string()))?;
    Ok(st)
}

/// `dir/tokenizer.json`, when there, read up to [`MAX_TOKENIZER_BYTES`].
pub fn read_tokenizer(dir: &Path) -> Result<Option<tokenizers::Tokenizer>> {
    let path = dir.join("tokenizer.json");
    if !path.exists() {
        return Ok(None);
    }
    let b = crate::io::read_at_most(&path, MAX_TOKENIZER_BYTES)?;
    tokenizers::Tokenizer::from_bytes(b)
        .map(Some)
        .map_err(|e| format!("cannot load {}: {e}", path.display()).into())
}
