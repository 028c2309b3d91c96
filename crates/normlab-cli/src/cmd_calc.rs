//! `normlab calc`: normalise a vector given on the command line.

use crate::ui::{bad, fmt_vec};
use clap::Args;
use normlab::calc::{self, CalcRequest};
use normlab::kernels::norm::NormKind;

/// Normalise one vector and show the invariances (LayerNorm under a*x + c,
/// RMSNorm under a*x).
///
/// Example: `normlab calc --x 1,2,3,6 --norm rmsnorm --scale 3 --shift 2`
#[derive(Args, Debug)]
pub struct CalcArgs {
    /// The vector, comma-separated (e.g. 1,2,3,6). Use --x=-1,2 for a leading minus.
    #[arg(long, allow_hyphen_values = true)]
    x: String,
    /// Norm kind (default layernorm). The kinds and their default eps:
    #[arg(long, default_value = "layernorm", long_help = format!("Norm kind. The kinds, with their default eps and formula: {}", NormKind::describe_all()))]
    norm: String,
    /// eps (default: the kind's, listed under --norm).
    #[arg(long, allow_hyphen_values = true)]
    eps: Option<f32>,
    /// Gain: one value (broadcast) or d values; the kind's gain tensor as
    /// stored (for zrmsnorm w, the gain being 1 + w; for scalenorm the scalar g).
    #[arg(long, allow_hyphen_values = true)]
    gamma: Option<String>,
    /// Bias, for kinds with one: one value or d values.
    #[arg(long, allow_hyphen_values = true)]
    beta: Option<String>,
    /// Also normalise scale * x (+ shift) and say whether the output changed.
    #[arg(long, allow_hyphen_values = true)]
    scale: Option<f32>,
    /// Also normalise x + shift (with --scale: scale * x + shift).
    #[arg(long, allow_hyphen_values = true)]
    shift: Option<f32>,
    /// Also compute the norm with the input, gain and bias stored in bf16 or
    /// f16 (or f32), statistics in f32 (layernorm, rmsnorm, zrmsnorm).
    #[arg(long)]
    dtype: Option<String>,
    /// With --dtype: round every intermediate (squares, running sums, mean,
    /// variance, eps, rstd) to the type, as a naive half-precision norm does.
    #[arg(long)]
    naive: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: CalcArgs) -> anyhow::Result<()> {
    let kind: NormKind = match a.norm.parse() {
        Ok(k) => k,
        Err(e) => return bad(format!("{e}")),
    };
    let parse = |what: &str, s: &str| calc::parse_vector(what, s);
    let x = match parse("--x", &a.x) {
        Ok(v) => v,
        Err(e) => return bad(e),
    };
    let mut req = CalcRequest::new(kind, x);
    req.eps = a.eps;
    req.scale = a.scale;
    req.shift = a.shift;
    req.naive = a.naive;
    if let Some(t) = &a.dtype {
        req.dtype = Some(t.parse().or_else(bad)?);
    }
    if let Some(g) = &a.gamma {
        req.gamma = Some(parse("--gamma", g).or_else(bad)?);
    }
    if let Some(b) = &a.beta {
        req.beta = Some(parse("--beta", b).or_else(bad)?);
    }
    let r = match calc::calc(&req) {
        Ok(r) => r,
        Err(e) => return bad(e.to_string()),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!("{}  d={}  eps={:e}", r.kind, r.d, r.eps);
    println!("{:<10} {}", "input", fmt_vec(&r.input, 4));
    println!("{:<10} {}", "output", fmt_vec(&r.output, 4));
    println!(
        "{:<10} mean {:.6}   std {:.6}   L2 {:.6}   (sqrt(d) = {:.6})",
        "", r.mean, r.std, r.l2, r.sqrt_d
    );
    if let Some(lp) = &r.low_precision {
        let show = |v: &[f64]| {
            let f: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            fmt_vec(&f, 4)
        };
        println!(
            "{} {} (statistics {}):",
            lp.dtype.name(),
            lp.mode,
            if lp.mode == "naive" {
                format!("rounded to {} at every step", lp.dtype.name())
            } else {
                "in f32".to_string()
            }
        );
        println!("{:<10} {}", "stored x", show(&lp.stored_input));
        println!(
            "{:<10} mean {:.4e}   {} {:.4e}   rstd {:.4e}",
            "",
            lp.result.mean,
            if r.kind == "layernorm" {
                "variance"
            } else {
                "mean square"
            },
            lp.result.second_moment,
            lp.result.rstd
        );
        println!("{:<10} {}", "output", show(&lp.result.output));
        println!("-> max |diff| from the f32 output: {:.3e}", lp.max_abs_diff);
    }
    if let Some(t) = &r.transformed {
        let what = match (a.scale, a.shift) {
            (Some(s), Some(c)) => format!("{s} * x + {c}"),
            (Some(s), None) => format!("{s} * x"),
            _ => format!("x + {}", t.shift),
        };
        println!("{what:<10} {}", fmt_vec(&t.input, 4));
        println!("{:<10} {}", "output", fmt_vec(&t.output, 4));
        let verdict = if t.unchanged { "UNCHANGED" } else { "CHANGED" };
        println!(
            "-> output {verdict} by {what} (max |diff| = {:.3e})",
            t.max_abs_diff
        );
    }
    Ok(())
}
