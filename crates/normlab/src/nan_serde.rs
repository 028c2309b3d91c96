//! serde helpers for numbers that serde_json writes as null (NaN and the
//! infinities): null reads back as NaN, so a diverged step is a result to
//! show, not a line to drop. Shared by the metrics records
//! (`train::record`), the stream statistics (`model::streams`) and the sink
//! measures (`model::sinks`).

use serde::Deserialize;

/// NaN, the default of a measure a record written before it lacks.
pub fn nan() -> f64 {
    f64::NAN
}

/// An f64 written by serde_json, which writes NaN and infinities as null:
/// null reads back as NaN (a diverged step is a result to show, not a line
/// to drop).
pub fn f64_or_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// `v` with nulls as NaN, holding no more than its values (the collect
/// reuses the twice-as-large buffer of the options: a long list of `0`
/// would hold 16 bytes a value, not 8).
fn nan_for_null(v: Vec<Option<f64>>) -> Vec<f64> {
    let mut out: Vec<f64> = v.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect();
    out.shrink_to_fit();
    out
}

/// A list of f64 with nulls read as NaN (see [`f64_or_nan`]).
pub fn vec_or_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Ok(nan_for_null(Vec::<Option<f64>>::deserialize(d)?))
}

/// A list of lists of f64 with nulls read as NaN (see [`f64_or_nan`]).
pub fn vecs_or_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Vec<f64>>, D::Error> {
    let mut out: Vec<Vec<f64>> = Vec::<Vec<Option<f64>>>::deserialize(d)?
        .into_iter()
        .map(nan_for_null)
        .collect();
    out.shrink_to_fit();
    Ok(out)
}
