//! `normlab._native`: the Python extension module over normlab's fused
//! row-wise norm kernels (`normlab-kernels`; no kernel code lives here),
//! over the library's divergence rule and run classification
//! (`normlab::train::status`), which the run logger calls so that a
//! PyTorch run is classified by the same code as a normlab run, and over
//! normlab's GGUF decoder (`gguf.rs`: a model's residual stream), and over
//! the decoder's observer and report (`diagnose.rs`: `normlab.diagnose`).
//!
//! The kernel functions take NumPy arrays (PyTorch tensors reach them as
//! the NumPy views `Tensor.numpy()` gives, bfloat16 ones viewed as int16):
//! float32 for parameters, their gradients and statistics, and float32,
//! bfloat16 or float16 for x, y, dy, dx (`dtype` "f32", "bf16", "f16"), so
//! that both are read and written in place (zero-copy). No address crosses
//! from Python: only real `numpy.ndarray`s are taken, and each one's
//! buffer, size and layout are read from the array object itself
//! (`arrays.rs`), and checked before any memory is touched (type,
//! C-contiguity, element count against the shapes given, outputs writable
//! and overlapping nothing else, alignment). The arrays are held
//! for the call. The GIL is released while a kernel runs, and the kernel
//! runs on a rayon pool of the requested size (results are bit-identical
//! for any thread count: the kernels' chunking depends only on the shape).
//!
//! Outputs of 4 MiB or more are first advised to Linux as candidates for
//! transparent huge pages (`madvise(MADV_HUGEPAGE)` on their 2 MiB-aligned
//! interior). PyTorch's default allocator hands out such buffers as fresh
//! mmap'd pages, so the first write page-faults every 4 KiB page; with huge
//! pages the same bytes fault 512 times less often (measured: filling a new
//! 32 MiB tensor, 16.6 ms -> 8.2 ms on the 2-core dev VM). Only the advice
//! for memory the call writes anyway; it changes no value.

use normlab::train::{status, Spike};
use normlab_kernels::half16::{bf16, f16};
use normlab_kernels::norm::{self, NormKind, ParamInit, ParamLen, ParamRole};
use normlab_kernels::simd::Elem;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rayon::ThreadPool;
use std::sync::Arc;

mod arrays;
mod diagnose;
mod gguf;
mod threads;
use arrays::{array, disjoint, size, Buf, Dtype};
use threads::pool;

/// Whether outputs get the huge-page advice (on by default; a switch for
/// benchmarks that compare with and without it).
static HUGE_PAGES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

fn kind(name: &str) -> PyResult<NormKind> {
    let k: NormKind = name
        .parse()
        .map_err(|e: norm::UnknownNormKind| PyValueError::new_err(e.to_string()))?;
    if !k.is_row_wise() {
        return Err(PyValueError::new_err(format!(
            "{} is not a row-wise norm (its statistics are per feature)",
            k.name()
        )));
    }
    Ok(k)
}

/// Widest row a call takes (the kernels are tested to d = 65536; a d
/// beyond this is a caller's mistake, refused before any size is computed
/// from it).
const MAX_D: usize = 1 << 24;

/// Check the element counts the caller gives against the kind's needs.
fn check(k: NormKind, d: usize, n: usize, np: usize) -> PyResult<usize> {
    if d > MAX_D {
        return Err(PyValueError::new_err(format!(
            "d = {d} is beyond the widest row a norm takes ({MAX_D})"
        )));
    }
    if d == 0 || !n.is_multiple_of(d) {
        return Err(PyValueError::new_err(format!(
            "{n} elements are not whole rows of d = {d}"
        )));
    }
    if np != k.num_params(d) {
        return Err(PyValueError::new_err(format!(
            "{} with d = {d} takes {} parameters, got {np}",
            k.name(),
            k.num_params(d)
        )));
    }
    Ok(n / d)
}

/// A buffer located in an array this call holds (see [`array`]): its
/// address and element count, handed across the GIL release.
/// Call the generic `$f::<T>(args)` with `T` the storage type `$t` names.
macro_rules! with_dtype {
    ($t:expr, $f:ident($($a:expr),*)) => {
        match $t {
            Dtype::F32 => $f::<f32>($($a),*),
            Dtype::Bf16 => $f::<bf16>($($a),*),
            Dtype::F16 => $f::<f16>($($a),*),
        }
    };
}

/// Below this many values a call runs on the calling thread.
const SEQUENTIAL_BELOW: usize = 256 * 1024;

/// Run `f` on `pool` (`threads` threads), or on the calling thread, chunk
/// after chunk (`norm::sequential`: the same chunks, the same bits), when
/// one thread was asked for or the input is small: handing work to a pool
/// thread costs a wake-up, measured at about 28 us on the 2-core VM (a
/// 257x64 layernorm forward took 34-38 us through a 1-thread pool and 7.9 us
/// for 256x64, which the kernels run without splitting), and below about
/// 256K values a second thread saves less than that.
fn on_pool(pool: &ThreadPool, threads: usize, n: usize, f: impl FnOnce() + Send) {
    if threads <= 1 || n < SEQUENTIAL_BELOW {
        norm::sequential(f)
    } else {
        pool.install(f)
    }
}

/// Ask for transparent huge pages on the 2 MiB-aligned interior of an
/// output buffer of at least 4 MiB (a hint; failure is ignored).
fn advise_huge_pages(addr: usize, bytes: usize) {
    if !HUGE_PAGES.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        if bytes < 2 * HUGE {
            return;
        }
        let start = addr.next_multiple_of(HUGE);
        let end = (addr + bytes) / HUGE * HUGE;
        if end > start {
            // SAFETY: the range lies inside a live buffer the caller owns;
            // MADV_HUGEPAGE changes how its pages are backed, not its contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (addr, bytes);
}

/// The kind (row-wise), whole rows and the parameter count, and the pool.
fn prepare(
    kind_name: &str,
    d: usize,
    n: usize,
    np: usize,
    threads: usize,
) -> PyResult<(NormKind, usize, Arc<ThreadPool>)> {
    let k = kind(kind_name)?;
    let rows = check(k, d, n, np)?;
    Ok((k, rows, pool(threads)?))
}

/// Forward of a row-wise norm over `x` (rows of `d`, stored as `dtype`):
/// writes `y` (as `x`) and the `3 * rows` f32 statistics `stats`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (kind_name, d, eps, x, params, y, stats, threads, dtype = "f32"))]
fn forward(
    py: Python<'_>,
    kind_name: &str,
    d: usize,
    eps: f32,
    x: &Bound<'_, PyAny>,
    params: &Bound<'_, PyAny>,
    y: &Bound<'_, PyAny>,
    stats: &Bound<'_, PyAny>,
    threads: usize,
    dtype: &str,
) -> PyResult<()> {
    let t = Dtype::parse(dtype)?;
    let (n, np) = (size(x, "x")?, size(params, "params")?);
    let (k, rows, pool) = prepare(kind_name, d, n, np, threads)?;
    let bx = array(x, "x", t, n, false)?;
    let bp = array(params, "params", Dtype::F32, np, false)?;
    let by = array(y, "y", t, n, true)?;
    let bs = array(stats, "stats", Dtype::F32, norm::stats_len(rows), true)?;
    disjoint(
        &[(by, t.size(), "y"), (bs, 4, "stats")],
        &[(bx, t.size(), "x"), (bp, 4, "params")],
    )?;
    if n == 0 {
        return Ok(());
    }
    advise_huge_pages(by.addr, n * t.size());
    fn run<T: Elem>(k: NormKind, d: usize, eps: f32, (x, p, y, s): (Buf, Buf, Buf, Buf)) {
        // SAFETY: every buffer was located and checked by `array` (type,
        // length, contiguity, alignment; y and stats writable and disjoint
        // from the rest) in arrays the caller holds for the call.
        let (x, p, y, s) = unsafe {
            (
                x.slice::<T>(),
                p.slice::<f32>(),
                y.slice_mut::<T>(),
                s.slice_mut::<f32>(),
            )
        };
        norm::forward(k, d, eps, x, p, y, s)
    }
    let bufs = (bx, bp, by, bs);
    py.detach(move || on_pool(&pool, threads, n, || with_dtype!(t, run(k, d, eps, bufs))));
    Ok(())
}

/// Backward of a row-wise norm: writes `dx` (as `x`), **adds** the f32
/// parameter gradients into `dparams`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (kind_name, d, x, dy, params, stats, dx, dparams, threads, dtype = "f32"))]
fn backward(
    py: Python<'_>,
    kind_name: &str,
    d: usize,
    x: &Bound<'_, PyAny>,
    dy: &Bound<'_, PyAny>,
    params: &Bound<'_, PyAny>,
    stats: &Bound<'_, PyAny>,
    dx: &Bound<'_, PyAny>,
    dparams: &Bound<'_, PyAny>,
    threads: usize,
    dtype: &str,
) -> PyResult<()> {
    let t = Dtype::parse(dtype)?;
    let (n, np) = (size(x, "x")?, size(params, "params")?);
    let (k, rows, pool) = prepare(kind_name, d, n, np, threads)?;
    let bx = array(x, "x", t, n, false)?;
    let bdy = array(dy, "dy", t, n, false)?;
    let bp = array(params, "params", Dtype::F32, np, false)?;
    let bs = array(stats, "stats", Dtype::F32, norm::stats_len(rows), false)?;
    let bdx = array(dx, "dx", t, n, true)?;
    let bdp = array(dparams, "dparams", Dtype::F32, np, true)?;
    disjoint(
        &[(bdx, t.size(), "dx"), (bdp, 4, "dparams")],
        &[
            (bx, t.size(), "x"),
            (bdy, t.size(), "dy"),
            (bp, 4, "params"),
            (bs, 4, "stats"),
        ],
    )?;
    if n == 0 {
        return Ok(());
    }
    advise_huge_pages(bdx.addr, n * t.size());
    type Bufs = (Buf, Buf, Buf, Buf, Buf, Buf);
    fn run<T: Elem>(k: NormKind, d: usize, rows: usize, (x, dy, p, s, dx, dp): Bufs) {
        let mut scratch = vec![0f32; norm::backward_scratch_len(k, rows, d)];
        // SAFETY: as in `forward`; dx and dparams are writable and
        // disjoint from the inputs.
        let (x, dy, p, s, dx, dp) = unsafe {
            (
                x.slice::<T>(),
                dy.slice::<T>(),
                p.slice::<f32>(),
                s.slice::<f32>(),
                dx.slice_mut::<T>(),
                dp.slice_mut::<f32>(),
            )
        };
        norm::backward(k, d, x, dy, p, s, dx, dp, &mut scratch)
    }
    let bufs = (bx, bdy, bp, bs, bdx, bdp);
    py.detach(move || on_pool(&pool, threads, n, || with_dtype!(t, run(k, d, rows, bufs))));
    Ok(())
}

/// Every row-wise kind's description, from the kernels' `KindSpec`: name,
/// aliases, formula, default eps, and its parameter tensors in flat order
/// (suffix, role, per-feature or scalar, initial value: a number, or
/// "sqrt_d").
#[pyfunction]
fn kinds(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    let mut out = Vec::new();
    for k in NormKind::row_wise() {
        let s = k.spec();
        let d = PyDict::new(py);
        d.set_item("name", s.name)?;
        d.set_item("aliases", s.aliases.to_vec())?;
        d.set_item("formula", s.formula)?;
        d.set_item("default_eps", s.default_eps)?;
        d.set_item("elementwise", s.elementwise)?;
        let mut params = Vec::new();
        for p in s.params {
            let pd = PyDict::new(py);
            pd.set_item("suffix", p.suffix)?;
            pd.set_item(
                "role",
                match p.role {
                    ParamRole::Gain => "gain",
                    ParamRole::Bias => "bias",
                    ParamRole::Slope => "slope",
                    ParamRole::Shift => "shift",
                },
            )?;
            pd.set_item("per_feature", p.len == ParamLen::PerFeature)?;
            match p.init {
                ParamInit::Const(v) => pd.set_item("init", v)?,
                ParamInit::SqrtD => pd.set_item("init", "sqrt_d")?,
            }
            params.push(pd);
        }
        d.set_item("params", params)?;
        out.push(d);
    }
    Ok(out)
}

/// Turn the huge-page advice on large outputs on or off; returns the old
/// setting.
#[pyfunction]
fn set_huge_pages(on: bool) -> bool {
    HUGE_PAGES.swap(on, std::sync::atomic::Ordering::Relaxed)
}

/// Floats of statistics per row.
#[pyfunction]
fn stats_per_row() -> usize {
    norm::STATS
}

/// The instruction set the kernels dispatch to on this machine.
#[pyfunction]
fn isa() -> String {
    normlab_kernels::simd::level().name().to_string()
}

/// The trainer's divergence rule, step by step (`normlab::train::status`):
/// a non-finite loss diverges at once; a loss above the bound for
/// `divergence_window()` consecutive steps diverges where it rose; an
/// excursion that comes back is a spike.
#[pyclass(module = "normlab._native")]
#[derive(Default)]
struct DivergenceTracker {
    excursion: Option<Spike>,
    spikes: Vec<Spike>,
}

#[pymethods]
impl DivergenceTracker {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Observe one step's loss against `bound`: the step the run diverged
    /// at, or None.
    fn track(&mut self, step: usize, loss: f64, bound: f64) -> Option<usize> {
        status::track_excursion(&mut self.excursion, &mut self.spikes, step, loss, bound)
    }

    /// At the end of the run: the step where an excursion still above the
    /// bound began (the run has not recovered: diverged there), or None.
    fn unrecovered(&self) -> Option<usize> {
        status::unrecovered(self.excursion.as_ref())
    }

    /// The spikes that came back, as (step, peak_loss, steps).
    fn spikes(&self) -> Vec<(usize, f64, usize)> {
        self.spikes
            .iter()
            .map(|s| (s.step, s.peak_loss, s.steps))
            .collect()
    }
}

/// converged / stalled / diverged, by the trainer's rule.
#[pyfunction]
#[pyo3(signature = (diverged, final_eval, unigram, floor, first_loss))]
fn classify(
    diverged: bool,
    final_eval: f64,
    unigram: f64,
    floor: Option<f64>,
    first_loss: f64,
) -> &'static str {
    status::classify(diverged, final_eval, unigram, floor, first_loss).name()
}

/// The most threads a call may ask for (`normlab::limits::max_threads`:
/// 4 per core of this machine, as the CLI).
#[pyfunction]
fn max_threads() -> usize {
    normlab::limits::max_threads()
}

/// The field's measures' windows (`normlab::model::decoder::field`):
/// (tokens per window, most windows), as `normlab inspect` cuts them.
#[pyfunction]
fn field_windows() -> (usize, usize) {
    (
        normlab::model::decoder::field::SINK_TOKENS,
        normlab::model::decoder::FIELD_WINDOWS,
    )
}

/// Consecutive steps above the bound that make a run diverged.
#[pyfunction]
fn divergence_window() -> usize {
    status::DIVERGENCE_WINDOW
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(forward, m)?)?;
    m.add_function(wrap_pyfunction!(backward, m)?)?;
    m.add_function(wrap_pyfunction!(kinds, m)?)?;
    m.add_function(wrap_pyfunction!(stats_per_row, m)?)?;
    m.add_function(wrap_pyfunction!(isa, m)?)?;
    m.add_function(wrap_pyfunction!(set_huge_pages, m)?)?;
    m.add_function(wrap_pyfunction!(classify, m)?)?;
    m.add_function(wrap_pyfunction!(divergence_window, m)?)?;
    m.add_function(wrap_pyfunction!(max_threads, m)?)?;
    m.add_function(wrap_pyfunction!(field_windows, m)?)?;
    m.add_function(wrap_pyfunction!(gguf::gguf_trace, m)?)?;
    m.add_function(wrap_pyfunction!(diagnose::inspect_ids, m)?)?;
    m.add_class::<DivergenceTracker>()?;
    m.add_class::<diagnose::Diagnosis>()?;
    Ok(())
}
