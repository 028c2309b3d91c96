//! The norm calculator's options, declared once ([`CALC_OPTIONS`]): `normlab
//! calc`'s flags (through the binary's one flag generator) and the web
//! lab's `/api/calc` parameters are these fields, and both build their
//! [`CalcRequest`] with [`request`], which parses and checks every value
//! the same way (naming it as the caller writes it: `--eps` on the command
//! line, `eps` in the web API).

use crate::calc::{parse_vector, CalcRequest};
use crate::kernels::norm::NormKind;
use crate::precision::Dtype;
use crate::settings::{Field, Flag};

/// The calculator's options.
pub const CALC_OPTIONS: &[Field] = &[
    Field {
        key: "x",
        doc: "The vector, comma-separated (e.g. 1,2,3,6; write --x=-1,2 for a leading minus).",
        flag: Flag::List,
    },
    Field {
        key: "norm",
        doc: "Norm kind (default layernorm; `normlab calc --help` lists each with its default eps and formula).",
        flag: Flag::Choice(|| NormKind::ALL.iter().map(|k| k.name()).collect()),
    },
    Field {
        key: "eps",
        doc: "eps (default: the kind's).",
        flag: Flag::Num,
    },
    Field {
        key: "gamma",
        doc: "Gain: one value (broadcast) or d values; the kind's gain tensor as stored (for zrmsnorm w, the gain being 1 + w; for scalenorm the scalar g).",
        flag: Flag::List,
    },
    Field {
        key: "beta",
        doc: "Bias, for kinds with one: one value or d values.",
        flag: Flag::List,
    },
    Field {
        key: "scale",
        doc: "Also normalise scale * x (+ shift) and say whether the output changed.",
        flag: Flag::Num,
    },
    Field {
        key: "shift",
        doc: "Also normalise x + shift (with scale: scale * x + shift).",
        flag: Flag::Num,
    },
    Field {
        key: "dtype",
        doc: "Also compute the norm with the input, gain and bias stored in bf16 or f16 (or f32), statistics in f32 (layernorm, rmsnorm, zrmsnorm).",
        flag: Flag::Choice(|| vec!["f32", "bf16", "f16"]),
    },
    Field {
        key: "naive",
        doc: "With dtype: round every intermediate (squares, running sums, mean, variance, eps, rstd) to the type, as a naive half-precision norm does.",
        flag: Flag::On,
    },
];

/// The request `given` (key, text) describes: each value checked by its
/// option (an empty value is the default), vectors of at most `max_len`
/// values; errors name an option as `label` writes it.
pub fn request(
    given: &[(&str, &str)],
    label: impl Fn(&str) -> String,
    max_len: usize,
) -> Result<CalcRequest, String> {
    let get = |key: &str| {
        given
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    };
    if let Some((k, _)) = given
        .iter()
        .find(|(k, _)| !CALC_OPTIONS.iter().any(|f| f.key == *k))
    {
        return Err(format!("unknown option {}", label(k)));
    }
    let vector = |key: &str, s: &str| -> Result<Vec<f32>, String> {
        let name = label(key);
        if s.len() > max_len.saturating_mul(32) {
            return Err(format!("{name} is too long (at most {max_len} values)"));
        }
        let v = parse_vector(&name, s)?;
        if v.len() > max_len {
            return Err(format!(
                "{name} has {} values; at most {max_len} are allowed",
                v.len()
            ));
        }
        Ok(v)
    };
    let number = |key: &str| -> Result<Option<f32>, String> {
        match get(key) {
            None => Ok(None),
            Some(s) => match s.parse::<f32>() {
                Ok(v) if v.is_finite() => Ok(Some(v)),
                Ok(v) => Err(format!("{} must be a finite number (got {v})", label(key))),
                Err(_) => Err(format!("{}: '{s}' is not a number", label(key))),
            },
        }
    };
    let kind: NormKind = get("norm")
        .unwrap_or("layernorm")
        .parse()
        .map_err(|e| format!("{e}"))?;
    // x given empty is an empty vector (an error), not a missing one.
    let x = match given.iter().find(|(k, _)| *k == "x") {
        Some((_, s)) => vector("x", s)?,
        None => return Err(format!("missing {} (comma-separated numbers)", label("x"))),
    };
    let mut req = CalcRequest::new(kind, x);
    req.eps = number("eps")?;
    req.scale = number("scale")?;
    req.shift = number("shift")?;
    if let Some(t) = get("dtype") {
        req.dtype = Some(t.parse::<Dtype>()?);
    }
    req.naive = match get("naive").map(str::to_ascii_lowercase).as_deref() {
        None | Some("false" | "off" | "no" | "0") => false,
        Some("true" | "on" | "yes" | "1") => true,
        Some(other) => {
            return Err(format!(
                "{} must be true or false (got '{other}')",
                label("naive")
            ))
        }
    };
    if let Some(g) = get("gamma") {
        req.gamma = Some(vector("gamma", g)?);
    }
    if let Some(b) = get("beta") {
        req.beta = Some(vector("beta", b)?);
    }
    Ok(req)
}
