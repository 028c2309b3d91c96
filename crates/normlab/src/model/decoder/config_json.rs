//! Reading a Hugging Face `config.json` into normlab's terms: numbers and
//! counts with their defaults (a count bounded so that products of counts
//! cannot overflow), the block count, the RoPE base and scaling, and
//! switches that are refused by name. Shared by every family's
//! configuration (`hf.rs`, `hf_gpt.rs`).

use super::RopeScaling;
use crate::error::Result;
use serde_json::Value;

/// A number of `config.json`, or its default.
pub(super) fn num(c: &Value, key: &str, default: Option<f64>) -> Result<f64> {
    match c.get(key) {
        Some(v) if !v.is_null() => v
            .as_f64()
            .ok_or_else(|| format!("config.json: '{key}' is not a number").into()),
        _ => default.ok_or_else(|| format!("config.json has no '{key}'").into()),
    }
}

/// A string of `config.json`, or its default (a value of another type is
/// refused by name: transformers raises where it meets one).
pub(super) fn text<'a>(c: &'a Value, key: &str, default: &'a str) -> Result<&'a str> {
    match c.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_str()
            .ok_or_else(|| format!("config.json: '{key}' is not a string (got {v})").into()),
    }
}

/// A true/false switch of `config.json`, or its default (`"yes"` or `1`
/// is refused by name, not read as its default).
pub(super) fn switch(c: &Value, key: &str, default: bool) -> Result<bool> {
    match c.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_bool()
            .ok_or_else(|| format!("config.json: '{key}' is not true or false (got {v})").into()),
    }
}

/// A list of `config.json`, if there is one (another type is refused).
pub(super) fn list<'a>(c: &'a Value, key: &str) -> Result<Option<&'a Vec<Value>>> {
    match c.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_array()
            .map(Some)
            .ok_or_else(|| format!("config.json: '{key}' is not a list (got {v})").into()),
    }
}

/// A count of `config.json` (at most 2^31, so products of counts stay
/// far below usize's range before the tensors are compared with them).
pub(super) fn count(c: &Value, key: &str, default: Option<usize>) -> Result<usize> {
    let v = num(c, key, default.map(|d| d as f64))?;
    if !(v >= 0.0 && v.fract() == 0.0 && v <= f64::from(1u32 << 31)) {
        return Err(format!("config.json: '{key}' is not a count (got {v})").into());
    }
    Ok(v as usize)
}

/// The RoPE base and scaling of a `config.json`: `rope_parameters`
/// (transformers 5) or the older top-level `rope_theta` and `rope_scaling`.
/// Linear and Llama 3 scaling are read; any other (yarn, dynamic,
/// longrope, ...) is refused by name, never run as plain RoPE.
pub(super) fn rope(c: &Value, default: f64) -> Result<(f64, Option<RopeScaling>)> {
    let params = c.get("rope_parameters").filter(|v| !v.is_null());
    let old = c.get("rope_scaling").filter(|v| !v.is_null());
    let mut scaling = None;
    for (key, r) in [("rope_parameters", params), ("rope_scaling", old)] {
        let Some(r) = r else { continue };
        if !r.is_object() {
            return Err(format!("config.json: '{key}' is not an object (got {r})").into());
        }
        let ty = match r.get("rope_type").filter(|v| !v.is_null()) {
            Some(_) => text(r, "rope_type", "default")?,
            None => text(r, "type", "default")?,
        };
        let f = |key: &str| num(r, key, None);
        scaling = match ty {
            "default" => scaling,
            "linear" => Some(RopeScaling::Linear { factor: f("factor")? }),
            "llama3" => Some(RopeScaling::Llama3 {
                factor: f("factor")?,
                low_freq_factor: f("low_freq_factor")?,
                high_freq_factor: f("high_freq_factor")?,
                original_context: f("original_max_position_embeddings")?,
            }),
            other => {
                return Err(format!(
                    "RoPE scaling '{other}' is not supported (normlab implements plain, linear and llama3 RoPE)"
                )
                .into())
            }
        };
    }
    let base = match params.and_then(|r| r.get("rope_theta")) {
        Some(v) => v.as_f64().ok_or_else(|| -> crate::error::Error {
            "config.json: rope_theta is not a number".into()
        })?,
        None => num(c, "rope_theta", Some(default))?,
    };
    Ok((base, scaling))
}

/// The share of each head's dimensions RoPE rotates, in (0, 1]:
/// `rope_parameters.partial_rotary_factor` (transformers 5), else the
/// family's own older key (`old_key`) or `default`.
pub(super) fn rotary_share(c: &Value, old_key: &str, default: f64) -> Result<f64> {
    let share = match c
        .get("rope_parameters")
        .and_then(|r| r.get("partial_rotary_factor"))
    {
        Some(v) => v
            .as_f64()
            .ok_or("config.json: partial_rotary_factor is not a number")?,
        None => num(c, old_key, Some(default))?,
    };
    if !(share > 0.0 && share <= 1.0) {
        return Err(format!("config.json: the rotary share {share} is not in (0, 1]").into());
    }
    Ok(share)
}

/// The block count `key` of a `config.json`, within [`super::MAX_BLOCKS`].
pub(super) fn blocks(c: &Value, key: &str) -> Result<usize> {
    let layers = count(c, key, None)?;
    if layers == 0 || layers > super::MAX_BLOCKS {
        return Err(format!("block_count {layers} is not in 1..={}", super::MAX_BLOCKS).into());
    }
    Ok(layers)
}

/// Refuse each `(key, what)` of `c` that is switched on (true; a value
/// that is not a switch is refused too).
pub(super) fn refuse_flags(c: &Value, flags: &[(&str, &str)]) -> Result<()> {
    for (key, what) in flags {
        if switch(c, key, false)? {
            return Err(format!("{what} ({key}) are not supported").into());
        }
    }
    Ok(())
}
