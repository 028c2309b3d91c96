//! `normlab bench decoder FILE.gguf` (alias `bench llama`): a GGUF decoder's prompt and
//! generation speed, its memory, and (`--against-f32`) how far a way of
//! holding its weights is from the f32 one.

use super::lists::thread_counts;
use crate::cmd_generate::Weights;
use crate::ui::{bad, Table};
use clap::Args;
use normlab_lab::bench;

#[derive(Args, Debug)]
pub struct DecoderBenchArgs {
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

pub(super) fn decoder(a: DecoderBenchArgs) -> anyhow::Result<()> {
    crate::ui::require_model(&a.model)?;
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
    a: &DecoderBenchArgs,
    m: &normlab::model::decoder::Decoder,
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
