//! What both kinds of panel share: tick labels and the drawing error.

use normlab::error::Error;

/// A tick label: whole numbers without a decimal point ("50", "10000"),
/// others in their shortest form ("0.25", "1e-5").
pub fn tick(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v == v.round() && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let a = v.abs();
    if !(1e-3..1e6).contains(&a) {
        let s = format!("{v:.2e}");
        // 1.00e-5 -> 1e-5, 2.50e-4 -> 2.5e-4
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = m.trim_end_matches('0').trim_end_matches('.');
        return format!("{m}e{e}");
    }
    let s = format!("{v:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A plotters failure as normlab's error.
pub(super) fn err<E: std::fmt::Display>(e: E) -> Error {
    Error::Internal(format!("cannot draw figure: {e}"))
}
