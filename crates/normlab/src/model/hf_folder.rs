//! What every reader of a Hugging Face folder shares ([`Decoder::load_hf`]
//! and [`Bert::load`]): `config.json` read up to [`MAX_CONFIG_BYTES`];
//! `model.safetensors` (or the shards `model.safetensors.index.json`
//! names) checked against the tensors its configuration
//! implies before any tensor is read (the file's size against their values
//! and a header of at most [`MAX_HEADER_BYTES`], the memory the f32
//! weights need, then the table tensor by tensor: none missing, none
//! extra, a float type, the exact shape);
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
    pub fn check_table(&self, st: &Shards) -> Result<()> {
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
                .part(name)
                .and_then(|p| p.tensor(name).ok())
                .ok_or_else(|| format!("tensor '{name}' cannot be read"))?;
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
        if let Some((name, _)) = self.required.iter().find(|(n, _)| st.part(n).is_none()) {
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

/// Most shards a sharded folder may name.
pub const MAX_SHARDS: usize = 4096;

/// The weights files of a folder, memory-mapped: one `model.safetensors`,
/// or the shards `model.safetensors.index.json` names.
pub struct WeightFiles {
    /// Each file's path and bytes.
    pub files: Vec<(PathBuf, crate::io::FileBytes)>,
}

/// The shard files `dir/model.safetensors.index.json` names (its
/// `weight_map`'s values): plain `.safetensors` file names in `dir`.
fn shard_names(dir: &Path) -> Result<Vec<String>> {
    let path = dir.join("model.safetensors.index.json");
    let index: Value =
        serde_json::from_slice(&crate::io::read_at_most(&path, 16 * MAX_CONFIG_BYTES)?)
            .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
    let map = index
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("{} has no weight_map", path.display()))?;
    let mut names: Vec<String> = Vec::new();
    for v in map.values() {
        let f = v.as_str().unwrap_or("");
        let plain = f.ends_with(".safetensors")
            && !f.starts_with('.')
            && !f.contains(['/', '\\'])
            && !f.contains("..");
        if !plain {
            return Err(format!(
                "{}: shard '{f}' is not a .safetensors file name in the folder",
                path.display()
            )
            .into());
        }
        if !names.iter().any(|n| n == f) {
            names.push(f.to_string());
        }
    }
    if names.is_empty() || names.len() > MAX_SHARDS {
        return Err(format!(
            "{} names {} shards (1 to {MAX_SHARDS} are read)",
            path.display(),
            names.len()
        )
        .into());
    }
    names.sort();
    Ok(names)
}

/// Map the folder's weights once their sizes fit `want` and the memory:
/// `model.safetensors`, or every shard of `model.safetensors.index.json`;
/// for [`Shards::check`]. The files are memory-mapped, not read,
/// so the memory asked for is the f32 weights made from them (and the
/// files' bytes only where the platform cannot map them).
pub fn read_weights(dir: &Path, want: &Expected) -> Result<WeightFiles> {
    let single = dir.join("model.safetensors");
    let paths: Vec<PathBuf> =
        if !single.exists() && dir.join("model.safetensors.index.json").exists() {
            shard_names(dir)?.iter().map(|f| dir.join(f)).collect()
        } else {
            vec![single]
        };
    let mut len = 0u64;
    for p in &paths {
        len += std::fs::metadata(p).map_err(|e| Error::read(p, e))?.len();
    }
    let values = want.values();
    let most = want.most_bytes() + (paths.len() as u64 - 1) * (8 + MAX_HEADER_BYTES);
    if len > most {
        return Err(format!(
            "{} is {len} bytes, more than the {most} its config.json implies ({values} values at 4 bytes, a header of at most {} per file)",
            if paths.len() == 1 { paths[0].display().to_string() } else { format!("{} ({} shards)", dir.display(), paths.len()) },
            human_bytes(MAX_HEADER_BYTES as f64)
        )
        .into());
    }
    let files = paths
        .into_iter()
        .map(|p| crate::io::map(&p).map(|b| (p, b)))
        .collect::<Result<Vec<_>>>()?;
    let held = if files.iter().all(|(_, b)| b.mapped()) {
        0
    } else {
        len
    };
    check_memory(
        held as f64 + f32_bytes(values as f64),
        &format!("loading {} ({values} weights)", dir.display()),
    )?;
    Ok(WeightFiles { files })
}

/// The tensors of every weights file of a folder, by name.
pub struct Shards<'a> {
    parts: Vec<SafeTensors<'a>>,
    at: std::collections::HashMap<String, usize>,
    /// The file, or how many shards, for messages.
    where_: String,
}

impl<'a> Shards<'a> {
    /// Every tensor's name.
    pub fn names(&self) -> Vec<&str> {
        self.at.keys().map(String::as_str).collect()
    }

    /// The file holding `name`.
    pub fn part(&self, name: &str) -> Option<&SafeTensors<'a>> {
        self.at.get(name).map(|&i| &self.parts[i])
    }

    /// Check the table against `want` before any tensor is read
    /// ([`Expected::check_table`]).
    pub fn check(&self, want: &Expected) -> Result<()> {
        want.check_table(self).map_err(|e| e.within(&self.where_))
    }
}

impl WeightFiles {
    /// Every file's table, parsed once (headers no longer than
    /// [`MAX_HEADER_BYTES`], no name in two files) but not yet checked
    /// against what a configuration implies ([`Shards::check`]): a reader
    /// can first look at the names (a prefix some exports add).
    pub fn shards(&self) -> Result<Shards<'_>> {
        let mut parts = Vec::with_capacity(self.files.len());
        let mut at = std::collections::HashMap::new();
        for (i, (path, bytes)) in self.files.iter().enumerate() {
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
            for name in st.names() {
                if at.insert(name.to_string(), i).is_some() {
                    return Err(bad(&format!("tensor '{name}' is in two shards")));
                }
            }
            parts.push(st);
        }
        let where_ = match self.files.as_slice() {
            [(p, _)] => p.display().to_string(),
            _ => format!("{} shards", self.files.len()),
        };
        Ok(Shards { parts, at, where_ })
    }
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
