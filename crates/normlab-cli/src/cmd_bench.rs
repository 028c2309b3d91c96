//! `normlab bench ...`: kernel and training benchmarks.

use crate::ui::{bad, progress, Table};
use clap::{Args, Subcommand};
use normlab::kernels::norm::NormKind;
use normlab::precision::Dtype;
use normlab_lab::bench::{self, NormBenchConfig};

mod decoder;
mod lists;
use decoder::{decoder, DecoderBenchArgs};
use lists::{parse_list, thread_counts};

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Norm kernels: forward and forward+backward, 1 thread and all threads,
    /// median time, effective GB/s and a copy roofline at the same footprint.
    Norms(NormsArgs),
    /// Training steps: steps/s and tokens/s for the toy (L20, batch 32) and
    /// gpt (d128, 4 heads, L8, seq 128, batch 16) models, 1 thread and all
    /// threads, with achieved GFLOP/s next to a matmul peak measured in the
    /// same run.
    Train(TrainBenchArgs),
    /// A GGUF decoder (Llama or Gemma 3): prompt processing (the logits of a
    /// prompt of --tokens tokens from the bundled Shakespeare) in tokens/s,
    /// median of --reps, per thread count (weights loaded once, not timed).
    #[command(alias = "llama")]
    Decoder(DecoderBenchArgs),
}

#[derive(Args, Debug)]
pub struct TrainBenchArgs {
    /// toy, gpt or both.
    #[arg(long, default_value = "both")]
    model: String,
    /// Thread counts, comma-separated (default: 1 and all cores).
    #[arg(long)]
    threads: Option<String>,
    /// Steps timed per point and round (median reported; 2 warm-up steps first).
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Rounds: each times --steps steps and then measures the matmul peak
    /// again, so the step and its peak are interleaved; the medians over the
    /// rounds are reported, with the range of the per-round % of peak.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// A variant of each configuration to time against it, interleaved
    /// round by round: training options as KEY=VALUE[,KEY=VALUE] (e.g.
    /// `hc=4` or `hc=4,hc_dynamic=true`); repeatable. The table adds each
    /// one's step time over the plain configuration's, with the range of
    /// the per-round ratios.
    #[arg(long = "vs", value_name = "KEY=VALUE,...")]
    vs: Vec<String>,
    /// Print the records as JSON.
    #[arg(long)]
    json: bool,
}

/// Training options `KEY=VALUE[,KEY=VALUE]` (numbers, true/false, or
/// words) as config overrides.
fn variant_overrides(spec: &str) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    use serde_json::Value;
    let mut m = serde_json::Map::new();
    for part in spec.split(',') {
        let Some((k, v)) = part.split_once('=') else {
            return bad(format!(
                "--vs takes KEY=VALUE[,KEY=VALUE] training options (got '{spec}')"
            ));
        };
        let (k, v) = (k.trim().replace('-', "_"), v.trim());
        let value = match v {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => match (v.parse::<i64>(), v.parse::<f64>()) {
                (Ok(i), _) => Value::from(i),
                (_, Ok(f)) => normlab::settings::finite_number(&k, f)?,
                _ => Value::from(v),
            },
        };
        m.insert(k, value);
    }
    Ok(m)
}

#[derive(Args, Debug)]
pub struct NormsArgs {
    /// Shapes ROWSxD, comma-separated (default: the standard sweep).
    #[arg(long)]
    shapes: Option<String>,
    /// Thread counts, comma-separated (default: 1 and all cores).
    #[arg(long)]
    threads: Option<String>,
    /// Kinds, comma-separated (default: layernorm,rmsnorm,zrmsnorm).
    #[arg(long)]
    kinds: Option<String>,
    /// Storage types of x, y, dy, dx, comma-separated: f32, bf16, f16
    /// (statistics and parameters stay f32). With f32 and a 16-bit type in
    /// one run, the table gives the speed-up over f32 point by point.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Seconds of timed repetitions per point (the median is reported).
    #[arg(long, default_value_t = 0.3)]
    seconds: f64,
    /// Rounds: every kind and storage type timed in turn, once per round,
    /// for --seconds / N each (A/B interleaved, so a noisy machine's slow
    /// minutes fall on all of them); the median of the rounds' medians is
    /// reported, and each kind's speed against the first kind with its
    /// range over the rounds.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Print the records as JSON.
    #[arg(long)]
    json: bool,
    /// Print a markdown table (for the README).
    #[arg(long)]
    markdown: bool,
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Norms(a) => norms(a),
        BenchCommand::Train(a) => train(a),
        BenchCommand::Decoder(a) => decoder(a),
    }
}

fn norms(a: NormsArgs) -> anyhow::Result<()> {
    let mut cfg = NormBenchConfig::standard();
    if let Some(s) = &a.shapes {
        cfg.shapes = parse_list("--shapes", s, |p| {
            let (r, d) = p.split_once(['x', 'X'])?;
            let (r, d) = (r.parse().ok()?, d.parse().ok()?);
            (r > 0 && d > 0).then_some((r, d))
        })?;
    }
    if a.threads.is_some() {
        cfg.threads = thread_counts(a.threads.as_deref())?;
    }
    if let Some(s) = &a.kinds {
        cfg.kinds = parse_list("--kinds", s, |p| {
            p.parse::<NormKind>().ok().filter(|k| k.is_row_wise())
        })?;
    }
    cfg.dtypes = parse_list("--dtype", &a.dtype, |p| p.parse::<Dtype>().ok())?;
    if !(a.seconds > 0.0 && a.seconds <= 60.0) {
        return bad(format!("--seconds must be in (0, 60] (got {})", a.seconds));
    }
    cfg.target_seconds = a.seconds;
    normlab::limits::check_count("--rounds", a.rounds, 1, normlab::limits::MAX_ROUNDS)?;
    cfg.rounds = a.rounds;
    cfg.check()?;
    let total =
        (cfg.threads.len() * cfg.shapes.len() * cfg.kinds.len() * cfg.dtypes.len() * 2) as u64;
    let pb = progress(total, "bench norms");
    let recs = bench::run_norm_bench(&cfg, |r| {
        pb.set_message(format!(
            "{} {} {} {}x{} t{}",
            r.kind,
            r.dtype.name(),
            r.pass.label(),
            r.rows,
            r.d,
            r.threads
        ));
        pb.inc(1)
    });
    pb.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&recs)?);
        return Ok(());
    }
    let first = cfg.kinds[0].name();
    let vs_first = format!("vs {first}");
    let mut head = vec![
        "kind",
        "dtype",
        "pass",
        "rows x d",
        "threads",
        "median (us)",
        "GB/s",
        "roofline GB/s",
        "% roofline",
        "vs f32",
    ];
    let with_vs = cfg.kinds.len() > 1;
    if with_vs {
        head.push(&vs_first);
    }
    let rows: Vec<Vec<String>> = recs
        .iter()
        .map(|r| {
            // Speed-up over the f32 record of the same point, if measured
            // (with its range over the rounds, as for the first kind).
            let f32_rec = recs.iter().find(|o| {
                o.dtype == Dtype::F32
                    && (&o.kind, o.pass, o.rows, o.d, o.threads)
                        == (&r.kind, r.pass, r.rows, r.d, r.threads)
            });
            // Speed against the first kind's record of the same point: the
            // ratio of the medians, and its range over the rounds.
            let base = recs.iter().find(|o| {
                o.kind == first
                    && (o.dtype, o.pass, o.rows, o.d, o.threads)
                        == (r.dtype, r.pass, r.rows, r.d, r.threads)
            });
            let vs = base.map_or(String::new(), |o| speed_vs(o, r));
            let mut row = vec![
                r.kind.clone(),
                r.dtype.name().to_string(),
                r.pass.label().to_string(),
                format!("{}x{}", r.rows, r.d),
                r.threads.to_string(),
                format!("{:.1}", r.median_us),
                format!("{:.1}", r.gbps),
                format!("{:.1}", r.roofline_gbps),
                format!("{:.0}%", 100.0 * r.roofline_fraction),
                f32_rec.map_or(String::new(), |o| speed_vs(o, r)),
            ];
            if with_vs {
                row.push(vs);
            }
            row
        })
        .collect();
    if a.markdown {
        println!("| {} |", head.join(" | "));
        println!(
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|{}",
            if with_vs { "---:|" } else { "" }
        );
        for r in &rows {
            println!("| {} |", r.join(" | "));
        }
    } else {
        // The numbers, from the thread count on (10 or 11 columns).
        let numeric: Vec<usize> = (4..head.len()).collect();
        let mut t = Table::new(&head).right(&numeric);
        for r in rows {
            t.row(r);
        }
        print!("{t}");
    }
    Ok(())
}

/// `base`'s time over `r`'s (> 1: `r` is faster), with the range of the
/// round-by-round ratios when there were several rounds.
fn speed_vs(base: &bench::NormBenchRecord, r: &bench::NormBenchRecord) -> String {
    let ratio = base.median_us / r.median_us;
    let per: Vec<f64> = base
        .round_us
        .iter()
        .zip(&r.round_us)
        .map(|(b, x)| b / x)
        .collect();
    if per.len() < 2 {
        return format!("{ratio:.2}x");
    }
    let (lo, hi) = bench::range(&per);
    format!("{ratio:.2}x ({lo:.2}-{hi:.2})")
}

fn train(a: TrainBenchArgs) -> anyhow::Result<()> {
    let threads = thread_counts(a.threads.as_deref())?;
    if a.steps == 0 {
        return bad("--steps must be at least 1");
    }
    normlab::limits::check_count("--rounds", a.rounds, 1, normlab::limits::MAX_ROUNDS)?;
    let cfgs: Vec<_> = bench::standard_train_configs()
        .into_iter()
        .filter(|c| a.model == "both" || c.model.kind.to_string() == a.model)
        .collect();
    if cfgs.is_empty() {
        return bad(format!(
            "--model must be toy, gpt or both (got '{}')",
            a.model
        ));
    }
    // Each configuration with its variants (the plain one first).
    let mut groups = Vec::new();
    for c in &cfgs {
        let mut g = vec![c.clone()];
        for spec in &a.vs {
            let mut ov = c.overrides().as_object().cloned().unwrap_or_default();
            ov.extend(variant_overrides(spec)?);
            g.push(
                normlab::train::TrainConfig::from_overrides(&ov)
                    .map_err(|e| anyhow::anyhow!("--vs {spec}: {e}"))?,
            );
        }
        groups.push(g);
    }
    let pb = progress((cfgs.len() * threads.len()) as u64, "bench train");
    let mut recs = Vec::new();
    // Each variant's step time over its plain configuration's (median and
    // range of the per-round ratios), by record.
    let mut vs_plain: Vec<Option<(f64, (f64, f64))>> = Vec::new();
    for g in &groups {
        for &t in &threads {
            pb.set_message(format!("{} t{t}", g[0].model.kind));
            let rs = bench::run_train_bench_interleaved(g, t, a.steps, a.rounds)?;
            for r in &rs {
                let per: Vec<f64> = r
                    .round_ms
                    .iter()
                    .zip(&rs[0].round_ms)
                    .map(|(x, b)| x / b)
                    .collect();
                vs_plain.push(
                    (!a.vs.is_empty())
                        .then(|| (bench::median(&mut per.clone()), bench::range(&per))),
                );
            }
            recs.extend(rs);
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&recs)?);
        return Ok(());
    }
    let cols = if a.vs.is_empty() { 10 } else { 11 };
    let mut t = Table::new(
        &[
            "model",
            "config",
            "threads",
            "ms/step",
            "steps/s",
            "tokens/s",
            "GFLOP/step",
            "GFLOP/s",
            "matmul peak",
            "% peak",
            "time vs plain",
        ][..cols],
    )
    .right(&(2..cols).collect::<Vec<_>>());
    for (r, vs) in recs.iter().zip(&vs_plain) {
        let mut row = vec![
            r.model.clone(),
            r.config.clone(),
            r.threads.to_string(),
            format!("{:.2}", r.ms_per_step),
            format!("{:.1}", r.steps_per_sec),
            format!("{:.0}", r.tokens_per_sec),
            format!("{:.2}", r.gflop_per_step),
            format!("{:.1}", r.gflops),
            format!("{:.1}", r.matmul_peak_gflops),
            if a.rounds > 1 {
                let (lo, hi) = r.peak_fraction_range;
                format!(
                    "{:.0}% ({:.0}-{:.0}%)",
                    100.0 * r.peak_fraction,
                    100.0 * lo,
                    100.0 * hi
                )
            } else {
                format!("{:.0}%", 100.0 * r.peak_fraction)
            },
        ];
        if let Some((m, (lo, hi))) = vs {
            row.push(if a.rounds > 1 {
                format!("{m:.2}x ({lo:.2}-{hi:.2})")
            } else {
                format!("{m:.2}x")
            });
        }
        t.row(row);
    }
    print!("{t}");
    Ok(())
}
