//! `normlab bench ...`: kernel and training benchmarks.

use crate::cmd_generate::Weights;
use crate::ui::{bad, progress, Table};
use clap::{Args, Subcommand};
use normlab::kernels::norm::NormKind;
use normlab::precision::Dtype;
use normlab_lab::bench::{self, NormBenchConfig};

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
    Llama(LlamaBenchArgs),
}

#[derive(Args, Debug)]
pub struct LlamaBenchArgs {
    /// The .gguf file (e.g. models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf).
    model: std::path::PathBuf,
    /// Prompt length in tokens.
    #[arg(long, default_value_t = 256)]
    tokens: usize,
    /// Tokens generated after the prompt (greedy, over the key/value cache;
    /// 0: prompt processing only). Timed from the first generated token to
    /// the last, so the prompt's pass is not counted.
    #[arg(long, default_value_t = 64)]
    generate: usize,
    /// Thread counts, comma-separated (default: 1 and all cores).
    #[arg(long)]
    threads: Option<String>,
    /// Timed repetitions per thread count (after one warm-up).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// How the weights are held and applied (as `generate --weights`).
    #[arg(long, value_enum, default_value_t = Weights::F32)]
    weights: Weights,
    /// Also load the f32 weights and report how far --weights is from
    /// them on these prompts: a JSON file with `prompts[].ids` (the
    /// transformers fixtures, crates/normlab/tests/fixtures/smollm2.json
    /// or gemma3.json): the largest logit difference of any generation
    /// step relative to its logit range, and how many greedy continuations
    /// of --generate tokens change.
    #[arg(long)]
    against_f32: Option<std::path::PathBuf>,
    /// Print the records as JSON.
    #[arg(long)]
    json: bool,
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

fn parse_list<T>(what: &str, s: &str, f: impl Fn(&str) -> Option<T>) -> anyhow::Result<Vec<T>> {
    let mut out = Vec::new();
    for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match f(p) {
            Some(v) => out.push(v),
            None => return bad(format!("{what}: cannot parse '{p}'")),
        }
    }
    if out.is_empty() {
        return bad(format!("{what} is empty"));
    }
    Ok(out)
}

/// `--threads` as a list of counts; without it, 1 and all cores.
fn thread_counts(arg: Option<&str>) -> anyhow::Result<Vec<usize>> {
    let all = crate::cmd_train::default_threads();
    match arg {
        Some(s) => {
            let v = parse_list("--threads", s, |p| p.parse::<usize>().ok())?;
            for &t in &v {
                normlab::limits::check_threads("--threads", t)?;
            }
            Ok(v)
        }
        None if all > 1 => Ok(vec![1, all]),
        None => Ok(vec![1]),
    }
}

pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Norms(a) => norms(a),
        BenchCommand::Train(a) => train(a),
        BenchCommand::Llama(a) => llama(a),
    }
}

fn llama(a: LlamaBenchArgs) -> anyhow::Result<()> {
    let threads = thread_counts(a.threads.as_deref())?;
    if a.reps == 0 || a.tokens == 0 {
        return bad("--reps and --tokens must be at least 1");
    }
    let m = a.weights.load(&a.model)?;
    // The process's resident memory with the model loaded, before any
    // activation buffer exists.
    let rss = resident_bytes();
    let text = String::from_utf8_lossy(normlab::io::BUNDLED_TEXT);
    let mut ids = m.encode(&text[..text.len().min(64 * a.tokens)])?;
    if ids.len() < a.tokens {
        return bad(format!("the bundled text gives only {} tokens", ids.len()));
    }
    ids.truncate(a.tokens);
    if a.generate == 1 || ids.len() + a.generate > m.cfg.context {
        return bad(format!(
            "--generate must be 0 or at least 2, and the prompt plus it within the context of {}",
            m.cfg.context
        ));
    }
    // Median (normlab's one definition) and the range of a sample.
    let median = |mut v: Vec<f64>| {
        let m = bench::median(&mut v);
        (m, v[0], v[v.len() - 1])
    };
    let mut recs = Vec::new();
    for &t in &threads {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(t).build()?;
        let (mut prompt, mut gen) = (Vec::new(), Vec::new());
        pool.install(|| -> anyhow::Result<()> {
            m.logits(&ids)?;
            for _ in 0..a.reps {
                let t0 = std::time::Instant::now();
                std::hint::black_box(m.logits(&ids)?);
                prompt.push(t0.elapsed().as_secs_f64());
            }
            for _ in 0..a.reps.min(3) * usize::from(a.generate > 0) {
                // Seconds per token between the first generated token and
                // the last (each step: one token through the blocks over
                // the cache, then the head).
                let mut at = Vec::with_capacity(a.generate);
                m.generate(&ids, a.generate, false, |_| {
                    at.push(std::time::Instant::now())
                })?;
                let span = at[at.len() - 1] - at[0];
                gen.push(span.as_secs_f64() / (at.len() - 1) as f64);
            }
            Ok(())
        })?;
        for (phase, times, tokens) in [("prompt", prompt, a.tokens), ("generate", gen, a.generate)]
        {
            if times.is_empty() {
                continue;
            }
            let (med, lo, hi) = median(times);
            // prompt: seconds per pass over the prompt; generate: per token.
            let per_token = if phase == "prompt" {
                med / tokens as f64
            } else {
                med
            };
            recs.push(serde_json::json!({
                "threads": t, "phase": phase, "tokens": tokens, "median_s": med,
                "min_s": lo, "max_s": hi, "tokens_per_s": 1.0 / per_token,
                "weights": a.weights.name(), "weight_bytes": m.weight_bytes(),
                "rss_bytes": rss,
            }));
        }
    }
    let deviation = match &a.against_f32 {
        Some(p) => Some(against_f32(&a, &m, p)?),
        None => None,
    };
    if let Some(d) = &deviation {
        recs.push(serde_json::json!({
            "phase": "deviation", "weights": a.weights.name(),
            "max_rel_logit_diff": d.max_rel_logit_diff, "prompts": d.prompts,
            "steps": d.steps, "greedy_changed": d.greedy_changed,
        }));
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&recs)?);
        return Ok(());
    }
    recs.retain(|r| r["phase"] != "deviation");
    let mut tab = Table::new(&[
        "threads",
        "phase",
        "tokens",
        "median s",
        "min-max s",
        "tokens/s",
    ])
    .right(&[0, 2, 3, 4, 5]);
    for r in &recs {
        tab.row(vec![
            r["threads"].to_string(),
            r["phase"].as_str().unwrap_or("").to_string(),
            r["tokens"].to_string(),
            format!("{:.4}", r["median_s"].as_f64().unwrap()),
            format!(
                "{:.4}-{:.4}",
                r["min_s"].as_f64().unwrap(),
                r["max_s"].as_f64().unwrap()
            ),
            format!("{:.1}", r["tokens_per_s"].as_f64().unwrap()),
        ]);
    }
    print!("{tab}");
    println!("(prompt: seconds per pass over the prompt; generate: seconds per generated token, the prompt's pass not counted)");
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    let rss = rss.map_or("unknown".into(), |b| format!("{:.0} MiB", mib(b)));
    println!(
        "--weights {}: weights {:.0} MiB in memory; process resident {rss} once loaded",
        a.weights.name(),
        mib(m.weight_bytes())
    );
    if let Some(d) = deviation {
        println!(
            "against --weights f32 on {} prompts, {} steps each: largest logit difference {:.2e} of the logit range; {} of {} greedy continuations changed",
            d.prompts, d.steps, d.max_rel_logit_diff, d.greedy_changed, d.prompts
        );
    }
    Ok(())
}

/// [`normlab::model::decoder::compare::deviation`] of `m` from the same
/// file's f32 weights, on the prompts of the fixture file `path`.
fn against_f32(
    a: &LlamaBenchArgs,
    m: &normlab::model::llama::Llama,
    path: &std::path::Path,
) -> anyhow::Result<normlab::model::decoder::compare::PathDeviation> {
    let text = normlab::io::read_to_string(path)?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: not JSON: {e}", path.display()))?;
    let prompts: Vec<Vec<u32>> = v["prompts"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| {
                    p["ids"].as_array().map(|ids| {
                        ids.iter()
                            .filter_map(|x| x.as_u64().map(|x| x as u32))
                            .collect()
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    if prompts.is_empty() {
        return bad(format!("{}: no prompts[].ids", path.display()));
    }
    let reference = Weights::F32.load(&a.model)?;
    let steps = a.generate.max(1);
    Ok(normlab::model::decoder::compare::deviation(
        &reference, m, &prompts, steps,
    )?)
}

/// This process's resident memory (VmRSS; None where /proc is absent).
fn resident_bytes() -> Option<usize> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = s.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    Some(
        kb.trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<usize>()
            .ok()?
            * 1024,
    )
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
        ][..if a.vs.is_empty() { 10 } else { 11 }],
    )
    .right(&[2, 3, 4, 5, 6, 7, 8, 9, 10]);
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
