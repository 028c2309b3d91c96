//! The web lab's widgets that need no files: the norm kinds, the norm
//! calculator, the residual options and the depth simulator, each from a
//! query string to JSON. One implementation for both builds of the lab:
//! `normlab serve` answers `/api/<route>` with it, and the WebAssembly
//! build of `normlab site` ([`call`]) runs it in the reader's browser, so
//! the two give the same numbers (the code under it is fixed-order
//! arithmetic, and the depth simulator's transcendental functions go
//! through the `libm` crate, whose bits are the same on every target).

use crate::exp::depth_sim::{self, SimConfig};
use crate::exp::{ExpArgs, ExpFlag};
use crate::present::plot::{self, Figure, LineChart, Panel, Series};
use normlab::calc;
use normlab::calc_options::{self, CALC_OPTIONS};
use normlab::kernels::norm::NormKind;
use serde_json::{json, Value};
use std::collections::HashMap;

/// Longest vector the calculator accepts.
pub const MAX_CALC_LEN: usize = 4096;

/// A parsed query string: key -> value.
pub type Query = HashMap<String, String>;

/// The query string as key -> value; a parameter outside `allowed`, or one
/// given twice, is an error.
pub fn parse_query(raw: &str, allowed: &[&str]) -> Result<Query, String> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(raw).map_err(|e| format!("malformed query string: {e}"))?;
    let mut out = HashMap::new();
    for (k, v) in pairs {
        if !allowed.contains(&k.as_str()) {
            return Err(format!(
                "unknown parameter '{k}' (expected: {})",
                allowed.join(", ")
            ));
        }
        if out.insert(k.clone(), v).is_some() {
            return Err(format!("parameter '{k}' is given twice"));
        }
    }
    Ok(out)
}

/// The norm kinds a model can use, with their formulas.
pub fn kinds() -> Value {
    let kinds: Vec<Value> = NormKind::row_wise()
        .filter(|k| *k != NormKind::None)
        .map(|k| json!({"name": k.name(), "formula": k.spec().formula}))
        .collect();
    json!({ "kinds": kinds })
}

/// The residual options the simulator models (from their declarations).
pub fn residual_options() -> Value {
    json!({ "options": normlab::model::residual::simulated_json() })
}

/// The norm calculator: its parameters are `normlab calc`'s options
/// ([`CALC_OPTIONS`]: one declaration, one parser).
pub fn calc(q: &Query) -> Result<Value, String> {
    let given: Vec<(&str, &str)> = q.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let req = calc_options::request(&given, |k| k.to_string(), MAX_CALC_LEN)?;
    let r = calc::calc(&req).map_err(|e| e.to_string())?;
    serde_json::to_value(r).map_err(|e| e.to_string())
}

/// The calculator's parameter names ([`CALC_OPTIONS`]' keys).
pub fn calc_params() -> Vec<&'static str> {
    CALC_OPTIONS.iter().map(|f| f.key).collect()
}

/// The depth simulator's parameters: `normlab exp depth-sim`'s flags (one
/// declaration in `exp::args`: the same names, parsing and help), with `_`
/// for `-`.
pub fn simulate_params() -> Vec<String> {
    depth_sim::EXPERIMENT
        .all_flags()
        .iter()
        .map(|f| f.name().replace('-', "_"))
        .collect()
}

/// The simulator's settings from a query of [`simulate_params`] (an empty
/// value is the default); the lab's charts average 32 rows (the
/// experiment: 64).
pub fn simulate_config(q: &Query) -> Result<SimConfig, String> {
    let mut args = ExpArgs::default();
    for (key, value) in q {
        let flag = ExpFlag::find(key).ok_or_else(|| format!("unknown parameter '{key}'"))?;
        if value.trim().is_empty() {
            continue;
        }
        flag.set_as(&mut args, value, key)
            .map_err(|e| e.to_string())?;
    }
    depth_sim::config(&args, 32).map_err(|e| e.to_string())
}

/// The simulator's settings from a raw query string (parameters:
/// [`simulate_params`]).
pub fn simulate_query(raw: &str) -> Result<SimConfig, String> {
    let params = simulate_params();
    let allowed: Vec<&str> = params.iter().map(String::as_str).collect();
    simulate_config(&parse_query(raw, &allowed)?)
}

/// Run the depth simulator: its result, with an SVG chart of the stream's
/// RMS and the gradient by layer.
pub fn simulate(cfg: &SimConfig) -> Value {
    let res = depth_sim::simulate(cfg);
    let pts = |v: &[Option<f64>]| {
        v.iter()
            .enumerate()
            .filter_map(|(i, x)| x.map(|y| (i as f64, y)))
            .collect::<Vec<_>>()
    };
    let line = |title: &str, y_label: &str, name: &str, v: &[Option<f64>]| {
        Panel::Line(LineChart {
            title: title.into(),
            x_label: "layer".into(),
            y_label: y_label.into(),
            series: vec![Series::new(name, pts(v))],
            log_y: true,
            log_x: false,
        })
    };
    let fig = Figure {
        stem: "sim".into(),
        panels: vec![
            line(
                "residual-stream RMS",
                "RMS of x_l",
                "x_l",
                &res.residual_rms,
            ),
            line("gradient", "|dL/dx_l| per row", "dL/dx_l", &res.grad_norm),
        ],
        cols: 2,
    };
    let svg = plot::svg_string(&fig).unwrap_or_default();
    let mut v = serde_json::to_value(&res).unwrap_or(Value::Null);
    v["svg"] = json!(svg);
    v
}

/// One widget request, `route` (`kinds`, `calc`, `residual-options`,
/// `simulate`) with its raw query string: the JSON answer, or the error
/// message the server would answer with a 400.
pub fn call(route: &str, raw: &str) -> Result<Value, String> {
    match route {
        "kinds" => parse_query(raw, &[]).map(|_| kinds()),
        "residual-options" => parse_query(raw, &[]).map(|_| residual_options()),
        "calc" => calc(&parse_query(raw, &calc_params())?),
        "simulate" => Ok(simulate(&simulate_query(raw)?)),
        _ => Err(format!("no such route: /api/{route}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_queries_are_errors() {
        assert!(call("calc", "x=1,2&x=3").unwrap_err().contains("twice"));
        assert!(call("calc", "y=1")
            .unwrap_err()
            .contains("unknown parameter"));
        assert!(call("calc", "norm=layernorm")
            .unwrap_err()
            .contains("missing"));
        assert!(call("simulate", "sublayers=abc").is_err());
        assert!(call("nope", "").unwrap_err().contains("no such route"));
    }

    #[test]
    fn calc_and_simulate_answer() {
        let c = call("calc", "norm=rmsnorm&x=1,2,3,4").unwrap();
        assert!(c.get("y").is_some() || c.get("output").is_some(), "{c}");
        let s = call("simulate", "sublayers=8").unwrap();
        assert!(s["svg"].as_str().is_some_and(|s| s.starts_with("<svg")));
        assert!(
            s["residual_rms"].as_array().is_some_and(|v| v.len() == 9),
            "{s}"
        );
    }
}
