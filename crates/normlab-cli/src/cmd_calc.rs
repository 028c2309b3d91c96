//! `normlab calc`: normalise a vector given on the command line.

use crate::ui::{bad, fmt_vec};
use normlab::calc;
use normlab::calc_options::{self, CALC_OPTIONS};
use normlab::kernels::norm::NormKind;

/// Normalise one vector and show the invariances (LayerNorm under a*x + c,
/// RMSNorm under a*x).
///
/// Example: `normlab calc 1,2,3,6 --norm rmsnorm --scale 3 --shift 2` (or
/// `--x 1,2,3,6`). The options are the calculator's one declaration
/// (`normlab::calc_options`), which the web lab's `/api/calc` shares.
#[derive(Debug, Default)]
pub struct CalcArgs {
    /// The options given (key, text).
    given: Vec<(&'static str, String)>,
    /// Print the result as JSON.
    json: bool,
}

impl clap::Args for CalcArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let cmd = cmd
            .arg(
                clap::Arg::new("vector")
                    .value_name("X")
                    .allow_hyphen_values(true)
                    .conflicts_with("x")
                    .help("The vector, comma-separated (the same as --x)"),
            )
            .arg(
                clap::Arg::new("json")
                    .long("json")
                    .action(clap::ArgAction::SetTrue)
                    .help("Print the result as JSON"),
            );
        crate::flags::augment(cmd, CALC_OPTIONS.iter().copied()).mut_arg("norm", |a| {
            a.long_help(format!(
                "Norm kind (default layernorm). The kinds, with their default eps and formula: {}",
                NormKind::describe_all()
            ))
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for CalcArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut a = CalcArgs {
            json: m.get_flag("json"),
            ..CalcArgs::default()
        };
        if let Some(v) = m.get_one::<String>("vector") {
            a.given.push(("x", v.clone()));
        }
        for g in crate::flags::given(m, CALC_OPTIONS.iter().copied()) {
            a.given.push((g.key, g.text));
        }
        Ok(a)
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

pub fn run(a: CalcArgs) -> anyhow::Result<()> {
    let given: Vec<(&str, &str)> = a.given.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let req = match calc_options::request(&given, |k| format!("--{k}"), usize::MAX) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
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
        let what = match (req.scale, req.shift) {
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
