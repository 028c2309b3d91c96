//! `normlab._native.Diagnosis`: the observer end of `normlab.diagnose`.
//! Python's forward hooks on a PyTorch model hand each block's tensors to
//! the hook points of normlab's decoder observer ([`DecoderTrace`], the
//! one `normlab inspect` runs), one text at a time; each tensor is reduced
//! as it arrives, so memory stays at one block's tensors. The held-out
//! logits (with and without the final norm, and the logit lens) go to the
//! same sums `inspect` uses, and [`Diagnosis::report`] writes the report
//! `normlab inspect --json` writes ([`Inspection::to_json`]).
//!
//! Arrays are float32 NumPy arrays (C-contiguous), read in place.

use crate::arrays::{array, size, Dtype};
use normlab::model::decoder::field::FieldMetrics;
use normlab::model::decoder::{
    gain_stats, top_tokens, ChangedLosses, DecoderTrace, FinalNormSum, GainRow, Inspection,
    LensRow, ModelClaims, TraceSum,
};
use normlab::model::hooks::{AttentionPattern, Observer, Pass};
use normlab::nn::NormRole;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn err(m: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(m.to_string())
}

/// `a * b`, or a ValueError naming `what` when it overflows.
fn mul(a: usize, b: usize, what: &str) -> PyResult<usize> {
    a.checked_mul(b)
        .ok_or_else(|| err(format!("{what}: {a} x {b} overflows")))
}

/// A size from Python within 1..=`max` (the decoder's own caps on what a
/// model file may declare), else a ValueError.
fn within(what: &str, v: usize, max: usize) -> PyResult<usize> {
    if v == 0 || v > max {
        return Err(err(format!("{what} must be between 1 and {max}, not {v}")));
    }
    Ok(v)
}

/// A float32 array's values (read in place for the call), of `len`
/// elements.
fn floats<'a>(obj: &'a Bound<'_, PyAny>, what: &str, len: usize) -> PyResult<&'a [f32]> {
    let b = array(obj, what, Dtype::F32, len, false)?;
    // SAFETY: `array` located and checked the buffer (f32, `len`
    // elements, aligned); `obj` is borrowed for the returned lifetime.
    Ok(unsafe { b.slice::<f32>() })
}

/// The roles of the report's gain rows, in its order.
const ROLES: [&str; 7] = [
    "attention input",
    "attention output",
    "QK-Norm on queries",
    "QK-Norm on keys",
    "MLP input",
    "MLP output",
    "final",
];

/// One model's diagnosis in progress.
#[pyclass(module = "normlab._native")]
pub struct Diagnosis {
    layers: usize,
    heads: usize,
    d: usize,
    vocab: usize,
    /// Tokens of the pass under way (0: none).
    tokens: usize,
    trace: DecoderTrace,
    sum: TraceSum,
    texts: Vec<Vec<u32>>,
    fin: FinalNormSum,
    final_top: Vec<usize>,
    lens: Vec<LensRow>,
    /// Blocks whose attention was handed over (by any text).
    attended: Vec<bool>,
    /// The field's measures (Gu et al.'s Sink metric, Sun et al.'s massive
    /// activations), fed by the 64-token windows of [`Diagnosis::field_begin`].
    field: FieldMetrics,
    /// The field windows' ids, and whether one is under way.
    field_ids: Vec<Vec<u32>>,
    in_field: bool,
}

impl Diagnosis {
    fn block(&self, l: usize) -> PyResult<()> {
        if self.tokens == 0 {
            return Err(err("no pass under way: call begin first"));
        }
        if l >= self.layers {
            return Err(err(format!(
                "block {l} is outside the model's {} blocks",
                self.layers
            )));
        }
        Ok(())
    }
    fn stream<'a>(&self, x: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a [f32]> {
        floats(x, what, self.tokens * self.d)
    }
    // (tokens <= MAX_CONTEXT and d <= MAX_WIDTH: their product fits.)
    fn logits<'a>(&self, x: &'a Bound<'_, PyAny>, targets: &[u32]) -> PyResult<&'a [f32]> {
        if let Some(&t) = targets.iter().find(|&&t| t as usize >= self.vocab) {
            return Err(err(format!(
                "target {t} is outside the vocabulary ({})",
                self.vocab
            )));
        }
        floats(x, "logits", mul(targets.len(), self.vocab, "logits")?)
    }
}

#[pymethods]
impl Diagnosis {
    /// A diagnosis of a model of `layers` blocks, `heads` query heads, a
    /// residual stream `d` wide and `vocab` tokens.
    #[new]
    fn new(layers: usize, heads: usize, d: usize, vocab: usize) -> PyResult<Self> {
        use normlab::model::decoder::{MAX_BLOCKS, MAX_HEADS, MAX_VOCAB, MAX_WIDTH};
        within("layers", layers, MAX_BLOCKS)?;
        within("heads", heads, MAX_HEADS)?;
        within("d", d, MAX_WIDTH)?;
        within("vocab", vocab, MAX_VOCAB)?;
        Ok(Diagnosis {
            layers,
            heads,
            d,
            vocab,
            tokens: 0,
            trace: DecoderTrace::default(),
            sum: TraceSum::new(layers),
            texts: Vec::new(),
            fin: FinalNormSum::default(),
            final_top: Vec::new(),
            lens: Vec::new(),
            attended: vec![false; layers],
            field: FieldMetrics::default(),
            field_ids: Vec::new(),
            in_field: false,
        })
    }

    /// A pass over one text of `ids` starts.
    fn begin(&mut self, ids: Vec<u32>) -> PyResult<()> {
        if ids.is_empty() {
            return Err(err("a text needs at least one token"));
        }
        within(
            "a text's tokens",
            ids.len(),
            normlab::model::decoder::MAX_CONTEXT,
        )?;
        if let Some(&t) = ids.iter().find(|&&t| t as usize >= self.vocab) {
            return Err(err(format!(
                "token {t} is outside the vocabulary ({})",
                self.vocab
            )));
        }
        self.tokens = ids.len();
        self.trace = DecoderTrace::default();
        self.trace.begin(Pass {
            past: 0,
            tokens: ids.len(),
            d: self.d,
            blocks: self.layers,
            heads: self.heads,
        });
        self.texts.push(ids);
        Ok(())
    }

    /// A pass over one window of `ids` (at most 64 tokens, from the
    /// held-out text) for the field's measures starts: until its
    /// `final_stream`, `attention` and `sublayer_out` feed them and the
    /// other hook points are ignored.
    fn field_begin(&mut self, ids: Vec<u32>) -> PyResult<()> {
        self.begin(ids)?;
        let ids = self.texts.pop().expect("begin pushed the text");
        self.field.begin(Pass {
            past: 0,
            tokens: ids.len(),
            d: self.d,
            blocks: self.layers,
            heads: self.heads,
        });
        self.field_ids.push(ids);
        self.in_field = true;
        Ok(())
    }

    /// The stream sublayer `sub` (0 attention, 1 MLP) of block `l` reads.
    fn sublayer_in(&mut self, l: usize, sub: usize, x: &Bound<'_, PyAny>) -> PyResult<()> {
        self.block(l)?;
        if self.in_field {
            return Ok(());
        }
        let x = self.stream(x, "stream")?;
        self.trace.sublayer_in(l, sub.min(1), x);
        Ok(())
    }

    /// A norm's input inside block `l` (rows of `width`).
    fn norm_input(&mut self, l: usize, x: &Bound<'_, PyAny>, width: usize) -> PyResult<()> {
        self.block(l)?;
        if self.in_field {
            return Ok(());
        }
        let n = size(x, "norm input")?;
        if width == 0 || !n.is_multiple_of(width) {
            return Err(err(format!("{n} values are not rows of {width}")));
        }
        let x = floats(x, "norm input", n)?;
        self.trace.norm_input(l, NormRole::Out, x, width);
        Ok(())
    }

    /// Block `l`'s attention probabilities `[heads, tokens, keys]` and
    /// each head's largest logit; `window`: the layer's sliding window.
    fn attention(
        &mut self,
        l: usize,
        probs: &Bound<'_, PyAny>,
        max_logits: Vec<f64>,
        keys: usize,
        window: Option<usize>,
    ) -> PyResult<()> {
        self.block(l)?;
        let (t, h) = (self.tokens, max_logits.len());
        if keys < t {
            return Err(err(format!("{keys} keys for {t} queries")));
        }
        if h == 0 || h > self.heads {
            return Err(err(format!(
                "{h} heads' largest logits for a model of {} heads",
                self.heads
            )));
        }
        let what = "attention probabilities";
        let p = floats(probs, what, mul(mul(h, t, what)?, keys, what)?)?;
        if !self.in_field {
            self.attended[l] = true;
        }
        for (head, &max_logit) in max_logits.iter().enumerate() {
            let obs: &mut dyn Observer = if self.in_field {
                &mut self.field
            } else {
                &mut self.trace
            };
            obs.attention(&AttentionPattern {
                block: l,
                head,
                probs: &p[head * t * keys..(head + 1) * t * keys],
                queries: t,
                keys,
                past: keys - t,
                window,
                max_logit,
            });
        }
        Ok(())
    }

    /// Block `l`'s MLP hidden activation (any shape).
    fn mlp_hidden(&mut self, l: usize, h: &Bound<'_, PyAny>) -> PyResult<()> {
        self.block(l)?;
        if self.in_field {
            return Ok(());
        }
        let n = size(h, "MLP hidden")?;
        let h = floats(h, "MLP hidden", n)?;
        self.trace.mlp_hidden(l, h);
        Ok(())
    }

    /// What sublayer `sub` of block `l` adds to the stream.
    fn write(&mut self, l: usize, sub: usize, w: &Bound<'_, PyAny>) -> PyResult<()> {
        self.block(l)?;
        if self.in_field {
            return Ok(());
        }
        let w = self.stream(w, "write")?;
        self.trace.write(l, sub.min(1), w);
        Ok(())
    }

    /// The stream after sublayer `sub` of block `l` (sub 1: the block's
    /// output).
    fn sublayer_out(&mut self, l: usize, sub: usize, x: &Bound<'_, PyAny>) -> PyResult<()> {
        self.block(l)?;
        let x = self.stream(x, "stream")?;
        if self.in_field {
            self.field.sublayer_out(l, sub.min(1), x);
            return Ok(());
        }
        self.trace.sublayer_out(l, sub.min(1), x);
        Ok(())
    }

    /// The stream the final norm reads; the text's pass ends.
    fn final_stream(&mut self, x: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.tokens == 0 {
            return Err(err("no pass under way: call begin first"));
        }
        let x = self.stream(x, "final stream")?;
        if self.in_field {
            self.in_field = false;
            self.tokens = 0;
            return Ok(());
        }
        self.trace.final_stream(x);
        let ti = self.texts.len() - 1;
        self.sum.add(ti, &self.trace).map_err(err)?;
        self.tokens = 0;
        Ok(())
    }

    /// One held-out window's logits with (`a`) and without (`b`) the final
    /// norm, on `targets`.
    fn final_norm_window(
        &mut self,
        a: &Bound<'_, PyAny>,
        b: &Bound<'_, PyAny>,
        targets: Vec<u32>,
    ) -> PyResult<()> {
        let (a, b) = (self.logits(a, &targets)?, self.logits(b, &targets)?);
        self.fin.add(a, b, self.vocab, &targets);
        Ok(())
    }

    /// The logit lens: the model's own logits on `targets` first
    /// (`block` None), then each block's (`block` 0, 1, ...).
    fn lens(
        &mut self,
        block: Option<usize>,
        logits: &Bound<'_, PyAny>,
        targets: Vec<u32>,
    ) -> PyResult<()> {
        let x = self.logits(logits, &targets)?;
        match block {
            None => self.final_top = top_tokens(x, self.vocab),
            Some(b) => {
                if self.final_top.len() != targets.len() {
                    return Err(err(
                        "the lens needs the model's own logits first, on the same targets",
                    ));
                }
                self.lens.push(LensRow::measure(
                    b,
                    x,
                    self.vocab,
                    &targets,
                    &self.final_top,
                ))
            }
        }
        Ok(())
    }

    /// The report: `head` (a JSON object: what the model is), each block's
    /// attention and MLP norm gains (`block_gains[l]`: two arrays, empty
    /// when none), the gains pooled by role (`gains`: role, values,
    /// zero-centred), the final norm's gain, the norms' eps, the losses
    /// with every norm swapped and without eps (`changed`: loss, the norm
    /// they became, loss; None: not measured), and `token(id)` naming a
    /// token (None: `#id`).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (head, block_gains, gains, final_gain, eps, changed=None, token=None))]
    fn report(
        &self,
        head: &str,
        block_gains: Vec<(Vec<f32>, Vec<f32>)>,
        gains: Vec<(String, Vec<f32>, bool)>,
        final_gain: Vec<f32>,
        eps: f64,
        changed: Option<(f64, String, f64)>,
        token: Option<Bound<'_, PyAny>>,
    ) -> PyResult<String> {
        if block_gains.len() != self.layers {
            return Err(err(format!(
                "block_gains has {} entries for {} blocks",
                block_gains.len(),
                self.layers
            )));
        }
        let mut rows = self
            .sum
            .rows(|i| (gain_stats(&block_gains[i].0), gain_stats(&block_gains[i].1)))
            .map_err(err)?;
        // A block whose attention was never handed over (a model without
        // transformers' attention functions) has no attention measures.
        for (r, _) in rows.iter_mut().zip(&self.attended).filter(|(_, &a)| !a) {
            (r.attn_max_logit, r.attn_entropy) = (f64::NAN, f64::NAN);
            (r.attn_sink, r.attn_sink_uniform) = (f64::NAN, f64::NAN);
        }
        let name = |id: u32| -> PyResult<String> {
            match &token {
                Some(f) => f.call1((id,))?.extract(),
                None => Ok(format!("#{id}")),
            }
        };
        let (swapped, swapped_norm, without_eps) =
            changed.unwrap_or((f64::NAN, String::new(), f64::NAN));
        let claims = ModelClaims::measure(
            &rows,
            |t, p| name(self.texts[t][p]).map_err(|e| e.to_string().into()),
            eps,
            ChangedLosses {
                swapped,
                swapped_norm,
                without_eps,
            },
        )
        .map_err(err)?;
        let mut rows_by_role = Vec::new();
        for role in ROLES {
            if let Some((_, g, zc)) = gains.iter().find(|(r, _, _)| r == role) {
                rows_by_role.push(GainRow::of(role, g, *zc));
            }
        }
        if let Some((r, _, _)) = gains.iter().find(|(r, _, _)| !ROLES.contains(&r.as_str())) {
            return Err(err(format!(
                "unknown gain role '{r}' (one of: {})",
                ROLES.join(", ")
            )));
        }
        let insp = Inspection {
            position0: self
                .texts
                .iter()
                .map(|ids| name(ids[0]))
                .collect::<PyResult<_>>()?,
            blocks: rows,
            final_norm: self.fin.finish(&final_gain),
            claims,
            gains: rows_by_role,
            lens: self.lens.clone(),
            sublayer_check: self.sum.sublayer_check(),
            field: if self.field.windows() > 0 {
                let ids = &self.field_ids;
                Some(
                    self.field
                        .report(|w, p| name(ids[w][p]).map_err(|e| e.to_string().into()))
                        .map_err(err)?,
                )
            } else {
                None
            },
        };
        let head: serde_json::Value = serde_json::from_str(head).map_err(err)?;
        let serde_json::Value::Object(head) = head else {
            return Err(err("head must be a JSON object"));
        };
        let v = insp.to_json(head).map_err(err)?;
        serde_json::to_string_pretty(&v).map_err(err)
    }
}

/// `normlab inspect`'s report of the decoder at `path` (a GGUF file or a
/// Hugging Face folder), on token ids: `texts` for the rows, `held_out`
/// for the final norm, the lens and the claims' losses (as
/// `normlab.diagnose` takes them), on `threads` threads.
#[pyfunction]
pub fn inspect_ids(
    py: Python<'_>,
    path: &str,
    texts: Vec<Vec<u32>>,
    held_out: Vec<u32>,
    threads: usize,
) -> PyResult<String> {
    let pool = crate::threads::pool(threads)?;
    let path = path.to_string();
    let run = move || -> Result<String, String> {
        let mut m = normlab::model::decoder::Decoder::open(std::path::Path::new(&path))
            .map_err(|e| e.to_string())?;
        let insp = pool
            .install(|| normlab::model::decoder::inspect_ids(&mut m, &texts, &held_out))
            .map_err(|e| e.to_string())?;
        let head = normlab::model::decoder::report_head(&m, &path, texts.len());
        let v = insp.to_json(head).map_err(|e| e.to_string())?;
        serde_json::to_string_pretty(&v).map_err(|e| e.to_string())
    };
    py.detach(run).map_err(err)
}
