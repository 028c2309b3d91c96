//! `normlab._native.gguf_trace`: a GGUF decoder's residual stream (SmolLM2,
//! Gemma 3) run by normlab's own decoder, for `normlab.gguf.trace`: the
//! stream entering each block and after the last, the final norm's output,
//! each sublayer's before / write / after, and the attention statistics.
//! Streams go back as little-endian float32 bytes with their shape; the
//! Python side wraps them as NumPy arrays (no copy) and computes its
//! per-token statistics there.

use normlab::model::decoder::{Decoder, DecoderTrace};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The last model loaded (path, modification time), reused by the next
/// call on the same unchanged file: loading Gemma 3 dequantises 250 MB.
type Cached = (PathBuf, std::time::SystemTime, Arc<Decoder>);
static LAST: Mutex<Option<Cached>> = Mutex::new(None);

fn load(path: &Path) -> Result<Arc<Decoder>, String> {
    let mtime = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((p, t, m)) = last.as_ref() {
        if p == path && *t == mtime {
            return Ok(m.clone());
        }
    }
    let m = Arc::new(Decoder::load(path).map_err(|e| e.to_string())?);
    *last = Some((path.to_path_buf(), mtime, m.clone()));
    Ok(m)
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Run `text` (at most `max_tokens` tokens after the model's BOS) through
/// the GGUF decoder at `path` on `threads` threads.
#[pyfunction]
pub fn gguf_trace<'py>(
    py: Python<'py>,
    path: &str,
    text: &str,
    max_tokens: usize,
    threads: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let pool = crate::threads::pool(threads)?;
    let path = PathBuf::from(path);
    let text = text.to_string();
    let run = move || -> Result<_, String> {
        let m = load(&path)?;
        let mut ids = m.encode(&text).map_err(|e| e.to_string())?;
        if ids.is_empty() {
            return Err("the text gives no tokens".into());
        }
        ids.truncate(max_tokens.max(1));
        let mut tr = DecoderTrace::keeping_streams();
        pool.install(|| m.observe(&ids, &mut tr))
            .map_err(|e| e.to_string())?;
        let last = tr.streams.last().cloned().unwrap_or_default();
        let fin = m.final_normed(&last);
        let tokens: Vec<String> = ids
            .iter()
            .map(|&i| m.decode(&[i]).unwrap_or_default())
            .collect();
        Ok((m, ids, tokens, tr, fin))
    };
    let (m, ids, tokens, tr, fin) = py.detach(run).map_err(PyValueError::new_err)?;
    let d = PyDict::new(py);
    let cfg = serde_json::to_string(&m.cfg).map_err(|e| PyValueError::new_err(e.to_string()))?;
    d.set_item("config", cfg)?;
    d.set_item("ids", ids)?;
    d.set_item("tokens", tokens)?;
    d.set_item("d", m.cfg.d)?;
    let streams: Vec<f32> = tr.streams.concat();
    d.set_item("streams", PyBytes::new(py, &f32_bytes(&streams)))?;
    d.set_item("n_streams", tr.streams.len())?;
    d.set_item("final", PyBytes::new(py, &f32_bytes(&fin)))?;
    d.set_item("attn_max_logit", tr.attn_max_logit)?;
    d.set_item("attn_max_logit_raw", tr.attn_max_logit_raw)?;
    d.set_item("attn_entropy", tr.attn_entropy)?;
    let subs: Vec<(usize, usize, f64, f64, f64, f64)> = tr
        .sublayers
        .iter()
        .map(|s| {
            (
                s.block,
                s.sub,
                s.before_rms,
                s.write_rms,
                s.after_rms,
                s.check,
            )
        })
        .collect();
    d.set_item("sublayers", subs)?;
    Ok(d)
}
