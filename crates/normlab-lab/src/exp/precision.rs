//! precision (claim C8): what low precision does to a norm. Rows of every
//! magnitude from 1e-8 to 1e5 are stored in f32, bf16 or f16 and normalised
//! by LayerNorm and RMSNorm in two ways:
//!
//! - `upcast` (what PyTorch and a careful kernel do): each stored value is
//!   widened to f32, the sums, mean, variance and rstd are f32, and only the
//!   output is rounded to the storage type;
//! - `naive` (a hand-written half-precision norm): every intermediate result
//!   is rounded to the storage type: each square or centred value, the
//!   running sum after every addition (left to right), the mean, the
//!   variance, eps itself, var + eps, the square root, its reciprocal, and
//!   each output element.
//!
//! - `kernel`: normlab's own kernel with that storage type (`norm::forward`
//!   on bf16/f16 rows, the code PyTorch users reach through the bridge).
//!
//! Each output is compared with an f64 computation on the same stored
//! inputs (relative RMS error); where the mean square underflows to 0 or
//! overflows to inf, the table says so. Also: how much eps changes the
//! output as the row's mean square nears it, the output of LayerNorm and
//! RMSNorm in f16 for rows with a common offset, and SwiGLU's output in
//! bf16 and f16. The rounding is [`normlab::precision`]'s.

use super::args::{ExpArgs, ExpFlag};
use super::claims::{ClaimCheck, Verdict};
use super::framework::{result, ExpResult, Experiment, Progress};
use crate::present::{Figure, LineChart, Series, Table};
use normlab::error::Result;
use normlab::kernels::half16::{bf16, f16};
use normlab::kernels::norm::{self, NormKind};
use normlab::kernels::rng::Rng;
use normlab::kernels::simd::Elem;
use normlab::precision::Dtype;
use serde_json::json;

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "precision",
    question: "What do bf16 and f16 do to a norm, and when does eps matter?",
    flags: &[ExpFlag::DModel, ExpFlag::Seed],
    run,
    grid: None,
    hidden_training: None,
    quick_decides: true,
};

/// How the statistics are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Upcast,
    Naive,
    /// normlab's own kernel with the storage type (`norm::forward` on
    /// bf16/f16 rows: f32 statistics with f64 sums, output rounded once).
    Kernel,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Upcast, Mode::Naive, Mode::Kernel];

    fn name(self) -> &'static str {
        match self {
            Mode::Upcast => "upcast",
            Mode::Naive => "naive",
            Mode::Kernel => "kernel",
        }
    }
}

/// normlab's kernel on the stored row (unit gain, zero bias): the output,
/// and NaN for the second moment (the kernel keeps only rstd, from which
/// the mean square cannot be recovered when eps dominates it).
fn kernel_norm(kind: Kind, dtype: Dtype, stored: &[f64], eps: f64) -> (Vec<f64>, f64) {
    fn run<T: Elem>(k: NormKind, x: &[f64], eps: f32) -> Vec<f64> {
        let d = x.len();
        let xs: Vec<T> = x.iter().map(|&v| T::put(v as f32)).collect();
        let mut p = vec![0.0; k.num_params(d)];
        k.init_params(d, &mut p);
        let mut y = vec![T::default(); d];
        let mut st = vec![0.0; norm::stats_len(1)];
        norm::forward(k, d, eps, &xs, &p, &mut y, &mut st);
        y.iter().map(|v| f64::from(v.get())).collect()
    }
    let k = if kind == Kind::Ln {
        NormKind::LayerNorm
    } else {
        NormKind::RmsNorm
    };
    let e = eps as f32;
    let y = match dtype {
        Dtype::F32 => run::<f32>(k, stored, e),
        Dtype::Bf16 => run::<bf16>(k, stored, e),
        Dtype::F16 => run::<f16>(k, stored, e),
    };
    (y, f64::NAN)
}

/// LayerNorm (centred) or RMSNorm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ln,
    Rms,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Ln => "layernorm",
            Kind::Rms => "rmsnorm",
        }
    }
}

/// The row's output (unit gain, zero bias) and the second moment it used,
/// every operation rounded by `r`.
fn norm_with(kind: Kind, x: &[f64], eps: f64, r: &dyn Fn(f64) -> f64) -> (Vec<f64>, f64) {
    let ones = vec![1.0; x.len()];
    let out = normlab::precision::norm(kind == Kind::Ln, x, &ones, None, eps, r);
    (out.output, out.second_moment)
}

/// One cell: the relative RMS error of the output against f64 on the same
/// stored inputs, and the second moment the computation saw.
#[derive(Clone, Copy, Debug)]
struct Cell {
    err: f64,
    m2: f64,
}

fn cell(kind: Kind, dtype: Dtype, mode: Mode, row: &[f64], eps: f64) -> Cell {
    let stored: Vec<f64> = row.iter().map(|&v| dtype.round(v)).collect();
    let (reference, _) = norm_with(kind, &stored, eps, &|v| v);
    let (y, m2) = match mode {
        Mode::Upcast => {
            let (y, m2) = norm_with(kind, &stored, eps, &|v| v as f32 as f64);
            (y.iter().map(|&v| dtype.round(v)).collect::<Vec<_>>(), m2)
        }
        Mode::Naive => norm_with(kind, &stored, eps, &|v| dtype.round(v)),
        Mode::Kernel => kernel_norm(kind, dtype, &stored, eps),
    };
    let num: f64 = y.iter().zip(&reference).map(|(a, b)| (a - b).powi(2)).sum();
    let den: f64 = reference.iter().map(|b| b * b).sum();
    let err = if den > 0.0 {
        (num / den).sqrt()
    } else if num == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    Cell {
        err: if err.is_nan() { f64::INFINITY } else { err },
        m2,
    }
}

/// A cell's text: the error, and what happened to the second moment.
fn cell_text(c: Cell, inputs_finite: bool) -> String {
    if !inputs_finite {
        return "input inf".into();
    }
    let what = if c.m2 == 0.0 {
        " (ms 0)"
    } else if c.m2.is_infinite() {
        " (ms inf)"
    } else {
        ""
    };
    if c.err.is_finite() {
        format!("{:.1e}{what}", c.err)
    } else {
        format!("inf/NaN{what}")
    }
}

const MAGNITUDES: [f64; 9] = [1e-8, 1e-6, 1e-4, 1e-2, 1.0, 1e2, 1e3, 1e4, 1e5];
const EPSS: [f64; 4] = [0.0, 1e-12, 1e-6, 1e-5];

fn run(a: &ExpArgs, _progress: Progress) -> Result<ExpResult> {
    let d = a.d_model.unwrap_or(512);
    let seed = a.seed.unwrap_or(0);
    if !(2..=65536).contains(&d) {
        return Err(normlab::Error::bad(format!(
            "--d-model must be 2..65536 (got {d})"
        )));
    }
    let z: Vec<f64> = Rng::derive(seed, "precision")
        .normal_vec(d, 0.0, 1.0)
        .into_iter()
        .map(f64::from)
        .collect();
    let mut out = result(
        json!({"d": d, "magnitudes": MAGNITUDES, "eps": EPSS, "dtypes": ["f32", "bf16", "f16"], "modes": ["upcast", "naive", "kernel"], "row": "magnitude * N(0, 1)"}),
        vec![seed],
    );
    let worst = norm_grid(d, &z, &mut out);
    let eps = eps_effect(&z, &mut out);
    let ranges = offset_rows(d, &z, &mut out);
    let f16_overflow_at = swiglu(&mut out);
    conclude(&mut out, d, &worst, eps, ranges, f16_overflow_at);
    Ok(out)
}

/// The grid's findings: where a naive norm's mean square underflowed and
/// overflowed, and the worst error per dtype of upcast and kernel (eps 0)
/// and of naive at unit scale.
struct Worst {
    naive_underflow: Vec<String>,
    naive_overflow: Vec<String>,
    upcast_worst: [f64; 3],
    kernel_worst: [f64; 3],
    naive_unit: [f64; 3],
}

/// Every norm, dtype, mode, eps and magnitude against f64: a table per
/// norm, the figure and the cells' data.
fn norm_grid(d: usize, z: &[f64], out: &mut ExpResult) -> Worst {
    let mag_labels: Vec<String> = MAGNITUDES.iter().map(|m| format!("{m:e}")).collect();
    let mut records = Vec::new();
    let mut naive_underflow: Vec<String> = Vec::new();
    let mut naive_overflow: Vec<String> = Vec::new();
    let mut upcast_worst = [0f64; 3];
    let mut kernel_worst = [0f64; 3];
    let mut naive_unit = [0f64; 3];
    let mut panels = Vec::new();
    for kind in [Kind::Ln, Kind::Rms] {
        let mut header = vec!["dtype", "mode", "eps"];
        header.extend(mag_labels.iter().map(String::as_str));
        let mut t = Table::new(
            format!("{}: relative RMS error of the output against f64 on the same stored inputs, rows magnitude x N(0,1), d {d} (ms 0 / ms inf: the mean square underflowed / overflowed)", kind.name()),
            &header,
        );
        let mut series = Vec::new();
        for dtype in Dtype::ALL {
            for mode in Mode::ALL {
                for eps in EPSS {
                    let mut row = vec![
                        dtype.name().to_string(),
                        mode.name().to_string(),
                        format!("{eps:e}"),
                    ];
                    let mut pts = Vec::new();
                    for &m in &MAGNITUDES {
                        let x: Vec<f64> = z.iter().map(|v| v * m).collect();
                        let finite = x.iter().all(|v| dtype.round(*v).is_finite());
                        let c = cell(kind, dtype, mode, &x, eps);
                        row.push(cell_text(c, finite));
                        let di = Dtype::ALL.iter().position(|&t| t == dtype).unwrap_or(0);
                        if finite && mode == Mode::Naive {
                            let tag = format!("{} {} at {m:e}", kind.name(), dtype.name());
                            let list = if c.m2 == 0.0 {
                                Some(&mut naive_underflow)
                            } else if c.m2.is_infinite() {
                                Some(&mut naive_overflow)
                            } else {
                                None
                            };
                            if let Some(l) = list {
                                if !l.contains(&tag) {
                                    l.push(tag);
                                }
                            }
                            if m == 1.0 {
                                naive_unit[di] = naive_unit[di].max(c.err);
                            }
                        }
                        if finite && mode == Mode::Upcast && eps == 0.0 {
                            upcast_worst[di] = upcast_worst[di].max(c.err);
                        }
                        if finite && mode == Mode::Kernel && eps == 0.0 {
                            kernel_worst[di] = kernel_worst[di].max(c.err);
                        }
                        if finite && eps == 1e-5 {
                            pts.push((m.log10(), c.err.clamp(1e-12, 10.0).log10()));
                        }
                        records.push(json!({"norm": kind.name(), "dtype": dtype.name(), "mode": mode.name(), "eps": eps, "magnitude": m, "rel_error": if c.err.is_finite() { json!(c.err) } else { json!(null) }, "second_moment": if c.m2.is_finite() { json!(c.m2) } else { json!(null) }, "input_overflow": !finite}));
                    }
                    if eps == 1e-5 {
                        series.push(Series::new(
                            format!("{} {}", dtype.name(), mode.name()),
                            pts,
                        ));
                    }
                    t.row(row);
                }
            }
        }
        panels.push(
            LineChart::new(
                format!("{}, eps 1e-5", kind.name()),
                "log10 magnitude",
                "log10 relative error (capped at 10)",
                series,
            )
            .panel(),
        );
        out.tables.push(t);
    }
    out.figures.push(Figure::new("precision", panels, 2));
    out.data.insert("cells".into(), json!(records));
    Worst {
        naive_underflow,
        naive_overflow,
        upcast_worst,
        kernel_worst,
        naive_unit,
    }
}

/// When eps matters: the output change it causes, in f64, against the
/// row's mean square (a table and data); whether it is as the theory says,
/// and the smallest ms/eps where it changed the output by less than 1e-3
/// and the largest where by more.
fn eps_effect(z: &[f64], out: &mut ExpResult) -> (bool, Option<f64>, Option<f64>) {
    // When eps matters: the output change it causes, in f64, against the
    // row's mean square.
    let mut te = Table::new(
        "When eps matters (RMSNorm, f64): the relative change of the output caused by eps, beside mean square / eps",
        &["magnitude", "mean square", "eps 1e-6: ms/eps", "eps 1e-6: change", "eps 1e-5: ms/eps", "eps 1e-5: change"],
    );
    let mut eps_rows = Vec::new();
    let mut eps_ok = true;
    // The smallest ms/eps at which eps changed the output by less than 1e-3,
    // and the largest at which it changed it by more.
    let (mut below, mut above): (Option<f64>, Option<f64>) = (None, None);
    for &m in &MAGNITUDES {
        let x: Vec<f64> = z.iter().map(|v| v * m).collect();
        let (y0, ms) = norm_with(Kind::Rms, &x, 0.0, &|v| v);
        let mut row = vec![format!("{m:e}"), format!("{ms:.2e}")];
        for eps in [1e-6, 1e-5] {
            let (y, _) = norm_with(Kind::Rms, &x, eps, &|v| v);
            let change = (y.iter().zip(&y0).map(|(a, b)| (a - b).powi(2)).sum::<f64>()
                / y0.iter().map(|b| b * b).sum::<f64>())
            .sqrt();
            // Theory: y_eps / y_0 = sqrt(ms / (ms + eps)).
            let theory = 1.0 - (ms / (ms + eps)).sqrt();
            eps_ok &= (change - theory).abs() <= 1e-9 + 1e-6 * theory;
            let ratio = ms / eps;
            if change < 1e-3 {
                below = Some(below.map_or(ratio, |b: f64| b.min(ratio)));
            } else {
                above = Some(above.map_or(ratio, |b: f64| b.max(ratio)));
            }
            row.push(format!("{:.1e}", ms / eps));
            row.push(format!("{change:.1e}"));
            eps_rows.push(json!({"magnitude": m, "mean_square": ms, "eps": eps, "change": change}));
        }
        te.row(row);
    }
    out.tables.push(te);
    out.data.insert("eps_effect".into(), json!(eps_rows));
    (eps_ok, below, above)
}

/// f16 outputs of LayerNorm and RMSNorm on rows with a common offset (a
/// table and data); the widest output span of each.
fn offset_rows(d: usize, z: &[f64], out: &mut ExpResult) -> (f64, f64) {
    // f16 outputs of LayerNorm and RMSNorm on rows with a common offset.
    let mut to = Table::new(
        format!("f16 (upcast) outputs for rows c + N(0,1), d {d}: the range of the output, and how much of the row's variation (y - mean(y)) survives the rounding"),
        &["offset c", "layernorm min .. max", "rmsnorm min .. max", "layernorm variation error", "rmsnorm variation error"],
    );
    let mut offset_rows = Vec::new();
    let (mut ln_range_max, mut rms_range_max): (f64, f64) = (0.0, 0.0);
    for c in [0.0, 10.0, 100.0, 1000.0] {
        let x: Vec<f64> = z.iter().map(|v| Dtype::F16.round(v + c)).collect();
        let mut row = vec![format!("{c}")];
        let mut errs = Vec::new();
        for kind in [Kind::Ln, Kind::Rms] {
            let (y, _) = norm_with(kind, &x, 1e-5, &|v| v as f32 as f64);
            let y16: Vec<f64> = y.iter().map(|&v| Dtype::F16.round(v)).collect();
            let (lo, hi) = y16
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
                    (a.min(v), b.max(v))
                });
            let span = hi.abs().max(lo.abs());
            if kind == Kind::Ln {
                ln_range_max = ln_range_max.max(span);
            } else {
                rms_range_max = rms_range_max.max(span);
            }
            row.push(format!("{lo:.3} .. {hi:.3}"));
            let centre = |v: &[f64]| {
                let m = v.iter().sum::<f64>() / v.len() as f64;
                v.iter().map(|x| x - m).collect::<Vec<_>>()
            };
            let (a, b) = (centre(&y16), centre(&y));
            let e = (a.iter().zip(&b).map(|(p, q)| (p - q).powi(2)).sum::<f64>()
                / b.iter().map(|q| q * q).sum::<f64>().max(f64::MIN_POSITIVE))
            .sqrt();
            errs.push(e);
            offset_rows.push(json!({"offset": c, "norm": kind.name(), "min": lo, "max": hi, "variation_error": e}));
        }
        row.extend(errs.iter().map(|e| format!("{e:.1e}")));
        to.row(row);
    }
    out.tables.push(to);
    out.data.insert("offset_rows".into(), json!(offset_rows));
    (ln_range_max, rms_range_max)
}

/// SiLU(v).
fn silu(v: f64) -> f64 {
    v / (1.0 + (-v).exp())
}

/// SwiGLU: SiLU(a) * b in each type (a table and data); the first tested
/// value whose output overflows f16.
fn swiglu(out: &mut ExpResult) -> Option<f64> {
    // SwiGLU: SiLU(a) * b in each type.
    let mut ts = Table::new(
        "SwiGLU's output SiLU(a) * b at a = b = v, computed in f64 and stored in each type",
        &["v", "f64", "bf16", "f16"],
    );
    let mut swiglu = Vec::new();
    let mut f16_overflow_at = None;
    for v in [10.0, 100.0, 200.0, 256.0, 300.0, 1000.0] {
        let exact = silu(v) * v;
        let (b, h) = (Dtype::Bf16.round(exact), Dtype::F16.round(exact));
        if h.is_infinite() && f16_overflow_at.is_none() {
            f16_overflow_at = Some(v);
        }
        ts.row(vec![
            format!("{v}"),
            format!("{exact:.3}"),
            format!("{b}"),
            format!("{h}"),
        ]);
        swiglu.push(json!({"v": v, "f64": exact, "bf16": b, "f16": if h.is_finite() { json!(h) } else { json!(null) }}));
    }
    out.tables.push(ts);
    out.data.insert("swiglu".into(), json!(swiglu));
    f16_overflow_at
}

/// The conclusion, the kernel's worst errors and claim C8's verdict.
fn conclude(
    out: &mut ExpResult,
    d: usize,
    w: &Worst,
    (eps_ok, below, above): (bool, Option<f64>, Option<f64>),
    (ln_range_max, rms_range_max): (f64, f64),
    f16_overflow_at: Option<f64>,
) {
    let Worst {
        naive_underflow,
        naive_overflow,
        upcast_worst,
        kernel_worst,
        naive_unit,
    } = w;
    let silu10 = silu(10.0) * 10.0;
    out.conclusion = format!(
        "Upcast (f32 statistics) keeps every norm as close to f64 as the output's own rounding allows (relative error at most {:.1e} f32, {:.1e} bf16, {:.1e} f16, eps 0) at every magnitude whose inputs the type can store; normlab's own kernel with that storage type does the same (at most {:.1e} f32, {:.1e} bf16, {:.1e} f16). A naive half-precision norm fails: its mean square underflows to 0 ({}) and overflows to inf ({}); at unit scale naive bf16 is off by {:.1e} (its running sum over d {d} terms keeps 8 significant bits, so later terms stop counting; naive f16 {:.1e}). eps changes the output by 1 - sqrt(ms/(ms + eps)), as measured: the change was below 1e-3 from mean square / eps = {} up, and 1e-3 or more at {} and below. In f16 the outputs span at most {:.2} (LayerNorm) and {:.2} (RMSNorm) over the offset rows; RMSNorm's output sits near 1 when the row has an offset, so f16 rounding removes most of its variation. SwiGLU's SiLU(10) * 10 = {silu10:.3}; its output overflows f16 (max {}) at a = b = {} and stays finite in bf16 (max {:.2e}).",
        upcast_worst[0],
        upcast_worst[1],
        upcast_worst[2],
        kernel_worst[0],
        kernel_worst[1],
        kernel_worst[2],
        if naive_underflow.is_empty() { "never".to_string() } else { naive_underflow.join(", ") },
        if naive_overflow.is_empty() { "never".to_string() } else { naive_overflow.join(", ") },
        naive_unit[1],
        naive_unit[2],
        below.map_or("-".to_string(), |v| format!("{v:.1e}")),
        above.map_or("-".to_string(), |v| format!("{v:.1e}")),
        ln_range_max,
        rms_range_max,
        Dtype::F16.max(),
        f16_overflow_at.map_or("-".to_string(), |v| format!("{v}")),
        Dtype::Bf16.max(),
    );
    out.data.insert(
        "kernel_worst_rel_error".into(),
        json!({"f32": kernel_worst[0], "bf16": kernel_worst[1], "f16": kernel_worst[2]}),
    );
    out.checks.push(check_c8(
        naive_underflow,
        upcast_worst[1]
            .max(upcast_worst[2])
            .max(kernel_worst[1])
            .max(kernel_worst[2]),
        eps_ok,
        ln_range_max,
        rms_range_max,
        f16_overflow_at,
        silu10,
    ));
}

/// C8's four parts: the mean square underflows in half precision (naive
/// statistics), eps matters only near the mean square, RMSNorm's f16 output
/// range is wider than LayerNorm's, SwiGLU overflows low precision.
fn check_c8(
    naive_underflow: &[String],
    upcast_worst: f64,
    eps_ok: bool,
    ln_range: f64,
    rms_range: f64,
    f16_overflow_at: Option<f64>,
    silu10: f64,
) -> ClaimCheck {
    let parts = [
        !naive_underflow.is_empty(),
        eps_ok,
        rms_range > ln_range,
        f16_overflow_at.is_some(),
    ];
    let v = Verdict::of_count(parts.iter().filter(|&&p| p).count(), parts.len());
    ClaimCheck::new(
        "C8",
        v,
        format!(
            "underflow: a naive bf16/f16 norm's mean square underflows to 0 ({}), while f32 statistics (upcast) stay within {:.1e} of f64 (the output's own rounding); eps: the output change is 1 - sqrt(ms/(ms+eps)) {} (so eps matters only when the mean square is near it); range: in f16 over rows with offsets 0..1000 LayerNorm's outputs span up to {:.2}, RMSNorm's up to {:.2} ({}); SwiGLU: SiLU(10)*10 = {:.3} (lesson 99.995), the output overflows f16 at a = b = {} and not bf16. eps against real rows: the llm chapter",
            if naive_underflow.is_empty() { "never".to_string() } else { naive_underflow.join(", ") },
            upcast_worst,
            if eps_ok { "as measured at every magnitude" } else { "NOT as measured" },
            ln_range,
            rms_range,
            if rms_range > ln_range { "RMSNorm wider" } else { "RMSNorm not wider: without centring, an offset row normalises to values near 1" },
            silu10,
            f16_overflow_at.map_or("no tested value".to_string(), |v| format!("{v}")),
        ),
    )
}
