//! Options declared once. Every option normlab takes is a [`Field`]: its
//! key, its help (a doc comment) and how a command-line flag sets it
//! ([`Flag`]). [`settings!`](crate::settings!) writes a settings struct
//! (with its serde attributes) and the table of its fields: the key used in
//! TOML files, sweep grids and `config.json`. The experiment flags
//! (in the lab crate's `exp::args`) describe themselves as fields too, so that
//! the binary has one generator of command-line flags for both (one `--no-`
//! rule, one value check), and a new option is one field with its doc
//! comment and its default.
//!
//! Also here: turning flag strings and TOML values into the JSON overrides
//! that `TrainConfig::from_overrides` merges, with one-line errors that name
//! the option and the bad value (NaN and infinities are refused, never
//! silently turned into a default).

use crate::error::{Error, Result};
use serde_json::{Map, Number, Value};

/// How a command-line flag sets a field.
#[derive(Clone, Copy, Debug)]
pub enum Flag {
    /// `--key NUMBER` (a finite number).
    Num,
    /// `--key NUMBER`, or the named word (e.g. `invsqrt`).
    NumOr(&'static str),
    /// `--key TEXT` (a name or a path).
    Text,
    /// `--key NAME`, one of the names the function lists.
    Choice(fn() -> Vec<&'static str>),
    /// `--key` sets true (the default is false).
    On,
    /// `--no-key` sets false (the default is true).
    Off,
    /// `--key` sets true, `--no-key` false (the default depends on others;
    /// the later of the two wins).
    OnOff,
    /// `--key A,B,C`: a non-empty comma-separated list (parsed by the
    /// option's own type).
    List,
    /// No flag: set by normlab itself (e.g. by checkpoint conversion).
    Hidden,
}

/// One field of a settings struct.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    /// Key in files and grids (`d_model`); the flag is `--d-model`.
    pub key: &'static str,
    /// The field's doc comment.
    pub doc: &'static str,
    /// How a flag sets it.
    pub flag: Flag,
}

impl Field {
    /// The doc comment as one line (with the choices, for a choice).
    pub fn help(&self) -> String {
        let doc = self.doc.split_whitespace().collect::<Vec<_>>().join(" ");
        match self.flag {
            Flag::Choice(names) => format!("{doc} One of: {}.", names().join(", ")),
            _ => doc,
        }
    }

    /// The flag's name (`d-model`).
    pub fn flag_name(&self) -> String {
        self.key.replace('_', "-")
    }
}

/// Declare a settings struct: `pub name: Type [as "key"] => Flag,` per
/// field, each with a doc comment (its help text) and then any `#[serde]`
/// attributes. Generates the struct and `FIELDS`, its [`Field`] table in
/// declaration order.
#[macro_export]
macro_rules! settings {
    (
        $(#[$smeta:meta])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])+
                $(#[serde($($serde:tt)*)])*
                pub $field:ident : $ty:ty $(as $key:literal)? => $flag:expr,
            )*
        }
    ) => {
        $(#[$smeta])*
        pub struct $name {
            $(
                $(#[doc = $doc])+
                $(#[serde($($serde)*)])*
                pub $field: $ty,
            )*
        }

        impl $name {
            /// Every field: key, help (its doc comment) and flag, in order.
            pub const FIELDS: &'static [$crate::settings::Field] = &[
                $($crate::settings::Field {
                    key: $crate::settings_key!($field $(, $key)?),
                    doc: concat!($($doc, " "),+),
                    flag: $flag,
                },)*
            ];
        }
    };
}

/// The key of a field: its name, or the `as "key"` given.
#[doc(hidden)]
#[macro_export]
macro_rules! settings_key {
    ($f:ident) => {
        stringify!($f)
    };
    ($f:ident, $k:literal) => {
        $k
    };
}

/// A finite JSON number from a float, or an error naming the option.
pub fn finite_number(key: &str, v: f64) -> Result<Value> {
    Number::from_f64(v)
        .filter(|_| v.is_finite())
        .map(Value::Number)
        .ok_or_else(|| Error::bad(format!("{key} must be a finite number (got {v})")))
}

/// The JSON value a flag's text gives field `f`.
pub fn flag_value(f: &Field, text: &str) -> Result<Value> {
    let key = f.flag_name();
    match f.flag {
        Flag::Num | Flag::NumOr(_) => {
            if let Flag::NumOr(word) = f.flag {
                if text.trim() == word {
                    return Ok(Value::from(word));
                }
            }
            let t = text.trim();
            if let Ok(i) = t.parse::<i64>() {
                return Ok(Value::from(i));
            }
            match t.parse::<f64>() {
                Ok(v) => finite_number(&format!("--{key}"), v),
                Err(_) => Err(Error::bad(format!(
                    "--{key}: '{text}' is not a number{}",
                    match f.flag {
                        Flag::NumOr(w) => format!(" (or {w})"),
                        _ => String::new(),
                    }
                ))),
            }
        }
        Flag::List => {
            if text.split(',').all(|p| p.trim().is_empty()) {
                return Err(Error::bad(format!("--{key} is empty")));
            }
            Ok(Value::from(text.to_string()))
        }
        Flag::Choice(names) => {
            let t = text.trim();
            if names().contains(&t) {
                Ok(Value::from(t))
            } else {
                // The type's own parser may know aliases (e.g. `ln`).
                Ok(Value::from(t.to_string()))
            }
        }
        _ => Ok(Value::from(text.to_string())),
    }
}

/// A TOML document as JSON overrides: a table of keys; floats that are NaN
/// or infinite are refused with the key's name (JSON has no such numbers,
/// and a silent null would mean "the default").
pub fn toml_overrides(text: &str, what: &str) -> Result<Map<String, Value>> {
    let doc: toml::Table = toml::from_str(text).map_err(|e| {
        Error::bad(format!(
            "{what} is not valid TOML: {}",
            e.to_string().lines().next().unwrap_or("")
        ))
    })?;
    let mut out = Map::new();
    for (k, v) in doc {
        out.insert(k.clone(), toml_to_json(&k, v)?);
    }
    Ok(out)
}

fn toml_to_json(key: &str, v: toml::Value) -> Result<Value> {
    Ok(match v {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => finite_number(key, f)?,
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(
            a.into_iter()
                .map(|x| toml_to_json(key, x))
                .collect::<Result<_>>()?,
        ),
        toml::Value::Table(t) => {
            let mut m = Map::new();
            for (k, x) in t {
                m.insert(k.clone(), toml_to_json(&format!("{key}.{k}"), x)?);
            }
            Value::Object(m)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_toml_refuse_non_finite_numbers() {
        let f = Field {
            key: "branch_scale",
            doc: "x",
            flag: Flag::NumOr("invsqrt"),
        };
        assert_eq!(flag_value(&f, "0.5").unwrap(), Value::from(0.5));
        assert_eq!(flag_value(&f, "3").unwrap(), Value::from(3));
        assert_eq!(flag_value(&f, "invsqrt").unwrap(), Value::from("invsqrt"));
        for bad in ["nan", "inf", "-inf", "NaN", "1e999"] {
            let e = flag_value(&f, bad).unwrap_err().to_string();
            assert!(e.contains("--branch-scale") && e.contains("finite"), "{e}");
        }
        assert!(flag_value(&f, "x1")
            .unwrap_err()
            .to_string()
            .contains("not a number"));
        let e = toml_overrides("eps = nan\n", "run.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("eps must be a finite number"), "{e}");
        let e = toml_overrides("lr = [0.1, inf]\n", "grid")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lr must be"), "{e}");
        let m = toml_overrides("lr = 0.5\nmodel = \"gpt\"\n", "x").unwrap();
        assert_eq!(m["lr"], Value::from(0.5));
    }
}
