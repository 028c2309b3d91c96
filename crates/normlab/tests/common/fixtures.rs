//! Reading PyTorch fixtures (JSON written by `scripts/gen_*_fixtures.py`)
//! and comparing against them.

use serde_json::Value;

/// A JSON array of numbers as f32.
pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// `got` equals `want` elementwise within `tol` times the larger of 1 and
/// `want`'s largest magnitude.
pub fn close(name: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * scale,
            "{name}[{i}]: normlab {g}, torch {w}"
        );
    }
}
