//! `normlab inspect MODEL`: per-layer residual-stream RMS, the size of each
//! sublayer's write relative to the stream, and each LayerNorm's gains, of
//! a real pretrained Post-LN encoder (Hugging Face BERT folder).

use crate::ui::{bad, Table};
use clap::Args;
use normlab::model::bert::{self, Bert};
use std::path::PathBuf;

/// Inspect a pretrained BERT-style model (folder with config.json, model.safetensors, tokenizer.json).
#[derive(Args, Debug)]
pub struct InspectCmd {
    /// Model folder (e.g. models/all-MiniLM-L6-v2 from scripts/fetch_minilm.sh).
    model: PathBuf,
    /// Text to run (repeatable; default: 32 lines of the bundled Shakespeare).
    #[arg(long)]
    text: Vec<String>,
    /// Print the rows as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(c: InspectCmd) -> anyhow::Result<()> {
    let b = Bert::load(&c.model)?;
    let texts = if c.text.is_empty() {
        bert::sample_sentences(32, 0, 53)
    } else {
        c.text.clone()
    };
    if texts.iter().any(|t| t.trim().is_empty()) {
        return bad("--text must not be empty");
    }
    let rows = bert::inspect(&b, &texts)?;
    if c.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"model": c.model.display().to_string(), "texts": texts.len(), "norms": rows})
            )?
        );
        return Ok(());
    }
    println!(
        "{}: {} layers, d {}, {} heads, Post-LN (eps {:e}); {} text(s)",
        c.model.display(),
        b.cfg.num_hidden_layers,
        b.cfg.hidden_size,
        b.cfg.num_attention_heads,
        b.cfg.layer_norm_eps,
        texts.len()
    );
    let mut t = Table::new(&[
        "norm",
        "stream RMS in",
        "stream RMS out",
        "write / stream",
        "gamma mean",
        "gamma std",
        "gamma min",
        "gamma max",
        "|beta| mean",
    ])
    .right(&[1, 2, 3, 4, 5, 6, 7, 8]);
    for r in &rows {
        t.row(vec![
            r.norm
                .replace("encoder.layer.", "L")
                .replace(".attention.output.LayerNorm", " attn LN")
                .replace(".output.LayerNorm", " mlp LN"),
            format!("{:.4}", r.stream_rms_before),
            format!("{:.4}", r.stream_rms_after),
            r.write_over_stream
                .map(|v| format!("{v:.4}"))
                .unwrap_or_else(|| "-".into()),
            format!("{:.4}", r.gamma_mean),
            format!("{:.4}", r.gamma_std),
            format!("{:.4}", r.gamma_min),
            format!("{:.4}", r.gamma_max),
            format!("{:.4}", r.beta_abs_mean),
        ]);
    }
    print!("{t}");
    Ok(())
}
