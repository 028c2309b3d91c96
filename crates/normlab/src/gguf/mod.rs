//! Reading GGUF files (llama.cpp's model format, version 2 and 3): header,
//! metadata, tensor infos and alignment; [`quant`] dequantises the tensor
//! types normlab reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K,
//! Q6_K) to f32.
//!
//! Written by hand rather than through candle-core's `gguf_file`: the
//! format is a short header plus a few block layouts, while candle-core
//! would bring its whole tensor library into normlab's build.
//!
//! Layout details that break reimplementations, as the format defines them:
//! - dimensions are listed innermost first: a `[576, 49152]` tensor is 49152
//!   rows of 576 (PyTorch's `[49152, 576]`);
//! - tensor data starts at the first multiple of `general.alignment`
//!   (default 32) after the tensor infos, and each tensor's offset is
//!   relative to that start.

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::path::Path;

pub mod qdot;
mod quant;
pub use quant::{dequantize, dequantize_into, GgmlType};

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Any unsigned integer type.
    U(u64),
    /// Any signed integer type.
    I(i64),
    /// f32 or f64.
    F(f64),
    /// bool.
    Bool(bool),
    /// UTF-8 string.
    Str(String),
    /// Array of values.
    Array(Vec<Value>),
}

impl Value {
    /// As an unsigned integer (non-negative signed ones too).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U(v) => Some(v),
            Value::I(v) if v >= 0 => Some(v as u64),
            _ => None,
        }
    }
    /// As a float (integers too).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F(v) => Some(v),
            Value::U(v) => Some(v as f64),
            Value::I(v) => Some(v as f64),
            _ => None,
        }
    }
    /// As a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    /// As an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(v) => Some(v),
            _ => None,
        }
    }
}

/// One tensor's description.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// Name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Dimensions, innermost first (as stored).
    pub dims: Vec<usize>,
    /// Storage type.
    pub ty: GgmlType,
    /// Byte offset of its data from the start of the data section.
    pub offset: usize,
}

impl TensorInfo {
    /// Number of values.
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }
    /// Bytes of its data.
    pub fn nbytes(&self) -> usize {
        let (per, bytes) = self.ty.block();
        self.numel() / per * bytes
    }
}

/// A GGUF file read into memory.
pub struct Gguf {
    /// Format version (2 or 3).
    pub version: u32,
    /// Metadata by key.
    pub meta: HashMap<String, Value>,
    /// Tensors in file order.
    pub tensors: Vec<TensorInfo>,
    data: crate::io::FileBytes,
    data_start: usize,
}

/// Most metadata values (array elements included) a file may hold: Gemma
/// 3's 262k-token vocabulary needs about 0.8 million; each value costs tens
/// of bytes in memory, so a small file of long arrays cannot blow up.
pub const MAX_META_VALUES: usize = 4_000_000;

/// Most tensors a file may hold (a 100-block model has about 1500).
pub const MAX_TENSORS: usize = 1 << 20;

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
    /// Metadata values read so far (bounded by [`MAX_META_VALUES`]).
    values: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| Error::from("truncated GGUF file".to_string()))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn len(&mut self) -> Result<usize> {
        let n = self.u64()?;
        if n > self.b.len() as u64 {
            return Err(format!("GGUF length {n} exceeds the file's size").into());
        }
        Ok(n as usize)
    }
    fn string(&mut self) -> Result<String> {
        let n = self.len()?;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| Error::from("GGUF string is not UTF-8".to_string()))
    }
    fn value(&mut self, ty: u32, depth: usize) -> Result<Value> {
        self.values += 1;
        if self.values > MAX_META_VALUES {
            return Err(format!("GGUF metadata holds more than {MAX_META_VALUES} values").into());
        }
        let b = |c: &mut Self, n| c.take(n);
        Ok(match ty {
            0 => Value::U(b(self, 1)?[0] as u64),
            1 => Value::I(b(self, 1)?[0] as i8 as i64),
            2 => Value::U(u16::from_le_bytes(b(self, 2)?.try_into().unwrap()) as u64),
            3 => Value::I(i16::from_le_bytes(b(self, 2)?.try_into().unwrap()) as i64),
            4 => Value::U(self.u32()? as u64),
            5 => Value::I(self.u32()? as i32 as i64),
            6 => Value::F(f32::from_le_bytes(b(self, 4)?.try_into().unwrap()) as f64),
            7 => Value::Bool(b(self, 1)?[0] != 0),
            8 => Value::Str(self.string()?),
            9 => {
                if depth > 4 {
                    return Err("GGUF arrays nested too deep".to_string().into());
                }
                let inner = self.u32()?;
                let n = self.len()?;
                // Each element takes at least one byte of the file and one
                // value of the budget: check both before reading any.
                let left = self.b.len() - self.pos;
                if n > left || self.values.saturating_add(n) > MAX_META_VALUES {
                    return Err(format!(
                        "GGUF array of {n} values does not fit the file or the metadata budget ({MAX_META_VALUES} values)"
                    )
                    .into());
                }
                let mut v = Vec::with_capacity(n.min(1 << 20));
                for _ in 0..n {
                    v.push(self.value(inner, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U(self.u64()?),
            11 => Value::I(self.u64()? as i64),
            12 => Value::F(f64::from_le_bytes(b(self, 8)?.try_into().unwrap())),
            other => return Err(format!("unknown GGUF value type {other}").into()),
        })
    }
}

impl Gguf {
    /// Open a GGUF file (a regular file, memory-mapped; see [`crate::io::map`]).
    pub fn open(path: &Path) -> Result<Gguf> {
        // Mapped, not read: only where the platform cannot map files is
        // the file held in memory, and checked against it.
        let data = crate::io::map(path)?;
        if !data.mapped() {
            let what = format!("reading {}", path.display());
            crate::limits::check_memory(data.len() as f64, &what)?;
        }
        Gguf::parse(data).map_err(|e| format!("{}: {e}", path.display()).into())
    }

    /// Parse GGUF bytes.
    pub fn parse(data: impl Into<crate::io::FileBytes>) -> Result<Gguf> {
        let data: crate::io::FileBytes = data.into();
        let mut c = Cursor {
            b: &data,
            pos: 0,
            values: 0,
        };
        if c.take(4)? != b"GGUF" {
            return Err("not a GGUF file (no GGUF magic)".to_string().into());
        }
        let version = c.u32()?;
        if !(2..=3).contains(&version) {
            return Err(format!("GGUF version {version} is not supported (2 or 3)").into());
        }
        let n_tensors = c.len()?;
        let n_kv = c.len()?;
        let mut meta = HashMap::new();
        for _ in 0..n_kv {
            let k = c.string()?;
            let ty = c.u32()?;
            meta.insert(k, c.value(ty, 0)?);
        }
        // Each tensor's header takes at least 24 bytes (name length, rank,
        // type, offset): a count the rest of the file cannot hold, or more
        // than any model has, is refused before anything is sized from it.
        if n_tensors > MAX_TENSORS {
            return Err(format!(
                "the header announces {n_tensors} tensors; normlab reads at most {MAX_TENSORS}"
            )
            .into());
        }
        if n_tensors > (data.len() - c.pos) / 24 {
            return Err(format!(
                "the header announces {n_tensors} tensors, more than the file's {} bytes can describe",
                data.len()
            )
            .into());
        }
        let mut tensors = Vec::with_capacity(n_tensors);
        for _ in 0..n_tensors {
            let name = c.string()?;
            let nd = c.u32()? as usize;
            if nd > 4 {
                return Err(format!("tensor {name} has {nd} dimensions").into());
            }
            let mut dims = Vec::with_capacity(nd);
            for _ in 0..nd {
                dims.push(c.len()?);
            }
            let id = c.u32()?;
            let ty = GgmlType::from_id(id)
                .ok_or_else(|| format!("tensor {name}: ggml type {id} is not supported"))?;
            let offset = c.len()?;
            let t = TensorInfo {
                name,
                dims,
                ty,
                offset,
            };
            let numel = t.dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            if numel.is_none_or(|n| !n.is_multiple_of(ty.block().0)) {
                return Err(format!("tensor {} is not whole blocks", t.name).into());
            }
            tensors.push(t);
        }
        let align = meta
            .get("general.alignment")
            .and_then(Value::as_u64)
            .unwrap_or(32) as usize;
        if align == 0 {
            return Err("general.alignment is 0".to_string().into());
        }
        let data_start = c.pos.div_ceil(align) * align;
        for t in &tensors {
            // Checked: a crafted file must not overflow the size arithmetic.
            let (per, bs) = t.ty.block();
            let end = t
                .dims
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .filter(|n| n % per == 0)
                .and_then(|n| (n / per).checked_mul(bs))
                .and_then(|b| data_start.checked_add(t.offset)?.checked_add(b));
            if end.is_none_or(|e| e > data.len()) {
                return Err(format!(
                    "tensor {} has a bad size or runs past the end of the file",
                    t.name
                )
                .into());
            }
        }
        Ok(Gguf {
            version,
            meta,
            tensors,
            data,
            data_start,
        })
    }

    /// A metadata value, or a clear error naming the key.
    pub fn get(&self, key: &str) -> Result<&Value> {
        self.meta
            .get(key)
            .ok_or_else(|| format!("GGUF metadata has no '{key}'").into())
    }

    /// A metadata integer.
    pub fn usize(&self, key: &str) -> Result<usize> {
        self.get(key)?
            .as_u64()
            .map(|v| v as usize)
            .ok_or_else(|| format!("GGUF metadata '{key}' is not an integer").into())
    }

    /// A metadata float.
    pub fn f64(&self, key: &str) -> Result<f64> {
        self.get(key)?
            .as_f64()
            .ok_or_else(|| format!("GGUF metadata '{key}' is not a number").into())
    }

    /// A tensor's description.
    pub fn info(&self, name: &str) -> Result<&TensorInfo> {
        self.tensors
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| format!("GGUF file has no tensor '{name}'").into())
    }

    /// A tensor dequantised to f32, in storage order (row-major with the
    /// innermost dimension first in `dims`).
    pub fn tensor(&self, name: &str) -> Result<Vec<f32>> {
        let (t, b) = self.raw(name)?;
        Ok(dequantize(t.ty, b))
    }

    /// A tensor's description and stored bytes (its blocks, as the file
    /// has them).
    pub fn raw(&self, name: &str) -> Result<(&TensorInfo, &[u8])> {
        let t = self.info(name)?;
        let start = self.data_start + t.offset;
        Ok((t, &self.data[start..start + t.nbytes()]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    fn kv_string(out: &mut Vec<u8>, k: &str, v: &str) {
        out.extend((k.len() as u64).to_le_bytes());
        out.extend(k.as_bytes());
        out.extend(8u32.to_le_bytes());
        out.extend((v.len() as u64).to_le_bytes());
        out.extend(v.as_bytes());
    }

    #[test]
    fn parses_a_hand_built_file_and_dequantises_q4_1_nibbles_in_order() {
        // One Q4_1 block: d = 0.5, m = -1, byte j = (j | (15 - j) << 4):
        // values 0..16 are j, values 16..32 are 15 - j.
        let mut block = Vec::new();
        block.extend(f16::from_f32(0.5).to_le_bytes());
        block.extend(f16::from_f32(-1.0).to_le_bytes());
        for j in 0..16u8 {
            block.push(j | ((15 - j) << 4));
        }
        let mut f = b"GGUF".to_vec();
        f.extend(3u32.to_le_bytes());
        f.extend(1u64.to_le_bytes()); // tensors
        f.extend(1u64.to_le_bytes()); // kv
        kv_string(&mut f, "general.architecture", "llama");
        let name = "w";
        f.extend((name.len() as u64).to_le_bytes());
        f.extend(name.as_bytes());
        f.extend(2u32.to_le_bytes());
        f.extend(32u64.to_le_bytes());
        f.extend(1u64.to_le_bytes());
        f.extend(3u32.to_le_bytes()); // Q4_1
        f.extend(0u64.to_le_bytes());
        while !f.len().is_multiple_of(32) {
            f.push(0);
        }
        f.extend(&block);
        let g = Gguf::parse(f.clone()).unwrap();
        assert_eq!(
            g.get("general.architecture").unwrap().as_str(),
            Some("llama")
        );
        assert_eq!(g.info("w").unwrap().dims, vec![32, 1]);
        let w = g.tensor("w").unwrap();
        for j in 0..16 {
            assert_eq!(w[j], 0.5 * j as f32 - 1.0);
            assert_eq!(w[j + 16], 0.5 * (15 - j) as f32 - 1.0);
        }
        // Truncated data is an error, not a panic.
        let cut = f[..f.len() - 3].to_vec();
        let e = Gguf::parse(cut).err().unwrap().to_string();
        assert!(e.contains("past the end"), "{e}");
        assert!(Gguf::parse(b"GGML".to_vec()).is_err());
    }

    /// Arrays are bounded before they are read: a count beyond the file's
    /// bytes, or beyond the metadata budget (many small arrays), is refused
    /// (a 20 MB file of bool arrays took 653 MB before it was refused).
    #[test]
    fn metadata_arrays_are_bounded_before_reading() {
        let header = |n_kv: u64| {
            let mut f = b"GGUF".to_vec();
            f.extend(3u32.to_le_bytes());
            f.extend(0u64.to_le_bytes()); // tensors
            f.extend(n_kv.to_le_bytes());
            f
        };
        let bool_array = |f: &mut Vec<u8>, key: &str, n: u64, present: usize| {
            f.extend((key.len() as u64).to_le_bytes());
            f.extend(key.as_bytes());
            f.extend(9u32.to_le_bytes()); // array
            f.extend(7u32.to_le_bytes()); // of bool
            f.extend(n.to_le_bytes());
            f.extend(std::iter::repeat_n(1u8, present));
        };
        // A count far beyond the bytes that follow.
        let mut f = header(1);
        bool_array(&mut f, "a", 1 << 40, 16);
        let e = Gguf::parse(f).err().unwrap().to_string();
        assert!(
            e.contains("exceeds the file's size") || e.contains("does not fit"),
            "{e}"
        );
        // Real arrays whose total passes the budget.
        let per = 1 << 20;
        let arrays = MAX_META_VALUES / per + 1;
        let mut f = header(arrays as u64);
        for i in 0..arrays {
            bool_array(&mut f, &format!("k{i}"), per as u64, per);
        }
        let e = Gguf::parse(f).err().unwrap().to_string();
        assert!(e.contains("budget") || e.contains("more than"), "{e}");
    }
}
