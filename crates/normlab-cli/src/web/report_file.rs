//! A model report file for the dashboard (`normlab serve --report FILE`):
//! a report of `normlab inspect --json` (or of Python's `normlab.diagnose`,
//! the same format), read and checked when the lab starts, kept as each
//! drawn metric's per-block values. `reports.rs` serves them.

use serde_json::Value;
use std::path::Path;

/// What the report plot draws: (metric, the report's field, the run's
/// metric, a log scale).
pub(super) const METRICS: [(&str, &str, &str, bool); 6] = [
    ("stream", "rms_out", "residual_rms", true),
    ("attn_sink", "attn_sink", "attn_sink", false),
    ("attn_max_logit", "attn_max_logit", "attn_max_logit", false),
    ("attn_entropy", "attn_entropy", "attn_entropy", false),
    ("ffn_max", "ffn_max", "ffn_max", true),
    (
        "max_over_median",
        "max_over_median",
        "stream_max_ratio",
        true,
    ),
];

/// The largest report file read (a report of a 1000-block model is about
/// 2 MB).
const MAX_REPORT_BYTES: u64 = 32 << 20;

/// One model report: its name (the file's stem), what it describes, and
/// per metric its per-block values (None: null in the report).
pub struct ModelReport {
    pub(super) name: String,
    pub(super) model: String,
    pub(super) architecture: String,
    pub(super) profile: Vec<Vec<Option<f64>>>,
}

impl ModelReport {
    /// Read and check the report at `path`: a JSON object with a `blocks`
    /// array whose entries hold every metric's field as a number or null.
    pub fn load(path: &Path) -> Result<ModelReport, String> {
        let at = |m: String| format!("--report {}: {m}", path.display());
        // A regular file only (a FIFO or a device is refused, not waited on
        // or read forever), refused from its size before it is read.
        let bytes = normlab::io::read_at_most(path, MAX_REPORT_BYTES)
            .map_err(|e| format!("--report: {}", e.to_string().trim_start_matches("error: ")))?;
        let text = String::from_utf8(bytes).map_err(|_| at("not UTF-8 text".into()))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| at(format!("not JSON: {e}")))?;
        let blocks = v
            .get("blocks")
            .and_then(Value::as_array)
            .filter(|b| !b.is_empty())
            .ok_or_else(|| {
                at("not an inspect report (no blocks; write one with normlab inspect MODEL --json > FILE)".into())
            })?;
        if blocks.len() > normlab::model::decoder::MAX_BLOCKS {
            return Err(at(format!(
                "{} blocks is more than a model has",
                blocks.len()
            )));
        }
        let mut profile = Vec::new();
        for (_, field, _, _) in METRICS {
            let col = blocks
                .iter()
                .enumerate()
                .map(|(i, b)| match b.get(field) {
                    Some(Value::Null) => Ok(None),
                    Some(x) if x.is_number() => Ok(x.as_f64()),
                    _ => Err(at(format!("block {i} has no number '{field}'"))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            profile.push(col);
        }
        let text_of = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Ok(ModelReport {
            name: path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            model: text_of("model"),
            architecture: text_of("architecture"),
            profile,
        })
    }
}
