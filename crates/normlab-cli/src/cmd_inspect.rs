//! `normlab inspect MODEL`: per-layer residual-stream RMS, the size of each
//! sublayer's write relative to the stream, and each norm's gains, of a real
//! pretrained model: a Post-LN encoder (Hugging Face BERT folder) or a
//! decoder from a GGUF file (SmolLM2: Pre-RMSNorm; Gemma 3: sandwich
//! RMSNorm with zero-centred gains and QK-Norm), for which it also reports
//! massive activations, attention logit maxima (with and without QK-Norm)
//! and entropies, every norm's gains (w and 1 + w), the logit lens, and
//! what the final norm does to the held-out loss.

use crate::ui::{bad, Table};
use clap::Args;
use normlab::kernels::norm::NormKind;
use normlab::model::bert::{self, Bert};
use normlab::model::decoder::family;
use normlab::model::intervene::{Edit, Interventions, Knockout};
use normlab_lab::present::{plot, Figure, LineChart, Panel, Series};
use std::path::PathBuf;

/// `normlab inspect`'s one-line help, naming the families it reads (the
/// family registry).
pub fn about() -> String {
    format!(
        "Inspect a model layer by layer: a normlab run folder (any placement), a Hugging Face folder ({}, BERT) or a GGUF file ({})",
        family::titles(),
        family::gguf_titles()
    )
}

#[derive(Args, Debug)]
pub struct InspectCmd {
    /// A run folder, a Hugging Face folder (config.json, model.safetensors, tokenizer.json; e.g. models/all-MiniLM-L6-v2 from scripts/fetch_minilm.sh, or your own model: docs/own-model.md) or GGUF file (e.g. models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf from scripts/fetch_smollm2.sh, models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf from scripts/fetch_gemma3.sh).
    model: PathBuf,
    /// Decoders: held-out tokens (from the last tenth of the bundled Shakespeare) for the final norm's effect, the logit lens, the claims' losses and the field's measures.
    #[arg(long, default_value_t = 512)]
    held_out_tokens: usize,
    /// Decoders: write the residual-RMS-by-depth figure (residual_rms.png, .svg) into this folder.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Text to run (repeatable; default: 16 lines of the bundled Shakespeare for a decoder, 32 for BERT).
    #[arg(long)]
    text: Vec<String>,
    /// Decoders: token ids to run instead of a text, separated by commas or spaces (repeatable: one list per text), for a model without a tokenizer (or to pin the tokens).
    #[arg(long, value_name = "IDS")]
    ids: Vec<String>,
    /// Decoders: the held-out token ids (at least 2) for the final norm, the logit lens and the claims' losses, instead of the bundled text's last tenth (needed by a model without a tokenizer).
    #[arg(long, value_name = "IDS")]
    held_out_ids: Option<String>,
    /// Run folders: held-out sequences to run (from the run's own data).
    #[arg(long, default_value_t = 8)]
    sequences: usize,
    /// Decoders: clamp every feed-forward's gate projection to at most LIMIT and its up projection to [-LIMIT, LIMIT] before the activation (DeepSeek V4's SwiGLU clamp; GeGLU alike), without retraining: the held-out loss then shows what clamping costs the model.
    #[arg(long, value_name = "LIMIT")]
    ffn_clamp: Option<f32>,
    /// Decoders: change what flows at a hook point before anything is measured (repeatable): POINT[:BLOCKS][@POSITIONS][#CHANNELS]=CHANGE, e.g. resid_post:2-29@0#1415=zero (Sun et al.'s massive-activation ablation) or resid_post@0=mean (set to the mean over the held-out text). Points (TransformerLens's names): embed, resid_pre, attn_out, resid_mid, mlp_post (the MLP's hidden layer), mlp_out, resid_post; blocks, positions, channels: 3, 2-29, 1,4 (default all); changes: zero, mean, xF (scale by F), a number.
    #[arg(long, value_name = "SPEC")]
    intervene: Vec<String>,
    /// Decoders: remove every query's attention to these key positions, the rest of each row renormalised (repeatable): POSITIONS[:BLOCKS], e.g. 0 (the first token, in every block) or 0:3 (in block 3 only).
    #[arg(long, value_name = "SPEC")]
    knockout: Vec<String>,
    /// Decoders: run every norm but QK-Norm as this kind (layernorm or rmsnorm), keeping its gain and bias.
    #[arg(long, value_name = "KIND")]
    norm_as: Option<String>,
    /// Decoders: run every norm with this eps instead of the model's.
    #[arg(long, value_name = "EPS")]
    norm_eps: Option<f32>,
    /// Decoders: leave the final norm out.
    #[arg(long)]
    no_final_norm: bool,
    /// Print the rows as JSON.
    #[arg(long)]
    json: bool,
}

impl InspectCmd {
    /// Whether any intervention flag is given.
    fn changes(&self) -> bool {
        self.ffn_clamp.is_some()
            || !self.intervene.is_empty()
            || !self.knockout.is_empty()
            || self.norm_as.is_some()
            || self.norm_eps.is_some()
            || self.no_final_norm
    }

    /// The interventions the flags ask for (`model/intervene.rs`).
    fn interventions(&self) -> anyhow::Result<Interventions> {
        let one = |e: normlab::Error| anyhow::Error::from(crate::ui::BadInput(e.to_string()));
        let norm_kind = match self.norm_as.as_deref() {
            None => None,
            Some(k) => match k.parse::<NormKind>() {
                Ok(k @ (NormKind::LayerNorm | NormKind::RmsNorm)) => Some(k),
                _ => return bad(format!("--norm-as takes layernorm or rmsnorm (got '{k}')")),
            },
        };
        Ok(Interventions {
            edits: self
                .intervene
                .iter()
                .map(|s| Edit::parse(s).map_err(one))
                .collect::<anyhow::Result<_>>()?,
            knockouts: self
                .knockout
                .iter()
                .map(|s| Knockout::parse(s).map_err(one))
                .collect::<anyhow::Result<_>>()?,
            norm_kind,
            eps: self.norm_eps,
            no_final_norm: self.no_final_norm,
            ffn_clamp: self.ffn_clamp,
        })
    }
}

pub fn run(mut c: InspectCmd) -> anyhow::Result<()> {
    c.model = crate::ui::model_path(&c.model);
    crate::ui::require_model(&c.model)?;
    if c.model.join(normlab::train::folder::CHECKPOINT).is_file() {
        return run_trained(&c);
    }
    let gguf = c
        .model
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    if gguf || (c.model.is_dir() && normlab::model::hf_folder::model_type(&c.model)? != "bert") {
        return run_decoder(&c);
    }
    if c.out.is_some() || c.changes() {
        return bad("--out, --ffn-clamp and the interventions are for decoders (.gguf files and decoder folders)");
    }
    let b = Bert::load(&c.model)?;
    let texts = if c.text.is_empty() {
        normlab::io::sample_sentences(32, 0, 53)
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

/// `normlab inspect FILE.gguf` or a decoder's Hugging Face folder.
fn run_decoder(c: &InspectCmd) -> anyhow::Result<()> {
    use normlab::model::decoder::{self, Decoder};
    let mut m = Decoder::open(&c.model)?;
    m.interventions = c.interventions()?;
    m.interventions
        .check(m.cfg.layers, m.cfg.d, m.cfg.ffn)
        .map_err(|e| crate::ui::BadInput(e.to_string()))?;
    let texts = if c.text.is_empty() {
        normlab::io::sample_sentences(16, 0, 53)
    } else {
        c.text.clone()
    };
    if texts.iter().any(|t| t.trim().is_empty()) {
        return bad("--text must not be empty");
    }
    if !c.ids.is_empty() && !c.text.is_empty() {
        return bad("give --text or --ids, not both");
    }
    // Read in windows: the bound is the bundled text's size, not the context.
    normlab::limits::check_count("--held-out-tokens", c.held_out_tokens, 2, 10_000_000)?;
    let text_ids = if c.ids.is_empty() {
        texts
            .iter()
            .map(|t| m.encode(t))
            .collect::<normlab::Result<Vec<_>>>()?
    } else {
        c.ids
            .iter()
            .map(|s| token_ids("--ids", s))
            .collect::<anyhow::Result<Vec<_>>>()?
    };
    let held_out = match &c.held_out_ids {
        Some(s) => token_ids("--held-out-ids", s)?,
        None => {
            let mut ids = m.encode(decoder::held_out_text())?;
            ids.truncate(c.held_out_tokens.saturating_add(1));
            ids
        }
    };
    let texts: Vec<String> = if c.ids.is_empty() {
        texts
    } else {
        c.ids.clone()
    };
    m.resolve_means(&held_out, 256.min(m.cfg.context))?;
    let insp = decoder::inspect_ids(&mut m, &text_ids, &held_out)?;
    let (rows, fin, claims) = (&insp.blocks, &insp.final_norm, &insp.claims);
    if let Some(dir) = &c.out {
        let series = |name: &str, f: &dyn Fn(&decoder::DecoderLayerRow) -> f64| {
            Series::new(name, rows.iter().map(|r| (r.layer as f64, f(r))).collect())
        };
        let fig = Figure {
            stem: "residual_rms".into(),
            cols: 1,
            panels: vec![Panel::Line(LineChart {
                title: "residual-stream RMS by depth".into(),
                x_label: "block".into(),
                y_label: "RMS".into(),
                series: vec![
                    series("entering the block", &|r| r.rms_in),
                    series("after attention", &|r| r.rms_attn),
                    series("after the MLP", &|r| r.rms_out),
                ],
                log_y: true,
                log_x: false,
            })],
        };
        normlab::io::create_dir_all(dir)?;
        plot::save(&fig, dir)?;
    }
    if c.json {
        let head = decoder::report_head(&m, &c.model.display().to_string(), texts.len());
        println!("{}", serde_json::to_string_pretty(&insp.to_json(head)?)?);
        return Ok(());
    }
    println!(
        "{}: {}; {} text(s)",
        c.model.display(),
        m.cfg.describe(),
        texts.len()
    );
    let mut t = Table::new(&[
        "block",
        "RMS in",
        "after attn",
        "after mlp",
        "max |x|",
        "attn write",
        "mlp write",
        "max logit",
        "entropy",
        "sink (uniform)",
        "max/median",
        "ffn max",
        "attn gain mean",
        "mlp gain mean",
    ])
    .right(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]);
    for r in rows {
        t.row(vec![
            r.layer.to_string(),
            format!("{:.3}", r.rms_in),
            format!("{:.3}", r.rms_attn),
            format!("{:.3}", r.rms_out),
            format!("{:.1}", r.max_abs),
            format!("{:.3}", r.attn_write),
            format!("{:.3}", r.mlp_write),
            format!("{:.2}", r.attn_max_logit),
            format!("{:.3}", r.attn_entropy),
            format!("{:.3} ({:.3})", r.attn_sink, r.attn_sink_uniform),
            format!("{:.0}", r.max_over_median),
            format!("{:.1}", r.ffn_max),
            format!("{:.3}", r.attn_gain[0]),
            format!("{:.3}", r.mlp_gain[0]),
        ]);
    }
    print!("{t}");
    let mut seats = insp.position0.clone();
    seats.dedup();
    println!(
        "position 0 (the sink's seat) holds {} (the sink: position 0's share of attention over heads and the queries past it; uniform attention would give the value in brackets)",
        seats.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", "),
    );
    for line in m.interventions.describe() {
        println!("changed: {line}");
    }
    println!(
        "final RMSNorm (gain mean {:.3}, min {:.3}, max {:.3}): held-out loss {:.4} nats/token with it, {:.4} without ({} tokens); removing it changes the logits by {:.1}% (RMS)",
        fin.gain[0], fin.gain[2], fin.gain[3], fin.loss_with, fin.loss_without, fin.tokens, 100.0 * fin.logit_change
    );
    println!("the lesson's claims on this model:");
    println!(
        "  C3  the mean token norm grows x{:.1} from block 1 to the output (x{:.3} per block on average; {} of {} blocks grow it; the largest jump x{:.1} at block {}); the RMS over all elements x{:.1} ({} of {} blocks; largest jump x{:.1} at block {})",
        claims.growth_total, claims.growth_per_block, claims.blocks_growing, m.cfg.layers - 1, claims.largest_jump.0, claims.largest_jump.1,
        claims.rms_growth_total, claims.rms_blocks_growing, m.cfg.layers - 1, claims.rms_largest_jump.0, claims.rms_largest_jump.1
    );
    let ma = &claims.massive;
    println!(
        "      massive activation: |x| = {:.0} in channel {} of the token {:?} (text {}, position {}), after block {} (present from block {}): {:.0}% of f16's largest value, {:.1}x the mean token norm",
        ma.value, ma.channel, ma.token, ma.text, ma.position, ma.block, ma.from_block, 100.0 * ma.of_f16_max, ma.over_mean_token_norm
    );
    println!(
        "  C6  the rows of x / rms(x) at the attention norms have |mean| {:.3} on average in the block where it is largest (a LayerNorm's are 0; N(1.5, 3^2) inputs give 0.447)",
        claims.xhat_mean_max_abs
    );
    println!(
        "  C8  the smallest row mean square entering any norm is {:.3e} x eps (eps {:e}): {}; without eps the held-out loss is {:.4} ({:+.1e})",
        claims.ms_min_over_eps,
        m.cfg.eps,
        if claims.ms_min_over_eps > 100.0 {
            "eps should never matter here"
        } else {
            "eps can matter for some rows"
        },
        claims.loss_without_eps,
        claims.loss_without_eps - fin.loss_with
    );
    println!(
        "  C20 without the final norm the held-out loss goes from {:.4} to {:.4}",
        fin.loss_with, fin.loss_without
    );
    let swap = if m.cfg.norm == NormKind::LayerNorm {
        "every LayerNorm replaced by an RMSNorm keeping gain and bias"
    } else {
        "every RMSNorm replaced by a LayerNorm keeping its gain"
    };
    println!(
        "  C21 {swap}: held-out loss {:.4} (own {:.4})",
        claims.loss_layernorm, fin.loss_with
    );
    print_field(&insp);
    print_more(&m, &insp);
    if let Some(dir) = &c.out {
        println!("figure: {}", dir.join("residual_rms.png").display());
    }
    Ok(())
}

/// Token ids from `--ids`-style text: numbers separated by commas or
/// spaces (at least one).
fn token_ids(flag: &str, s: &str) -> anyhow::Result<Vec<u32>> {
    let ids = s
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
        .map(|w| {
            w.parse::<u32>().map_err(|_| {
                anyhow::Error::from(crate::ui::BadInput(format!(
                    "{flag}: '{w}' is not a token id (a number from 0)"
                )))
            })
        })
        .collect::<anyhow::Result<Vec<u32>>>()?;
    if ids.is_empty() {
        return bad(format!("{flag} holds no token id"));
    }
    Ok(ids)
}

/// The field's own measures (`decoder/field.rs`), as the papers define
/// them.
fn print_field(insp: &normlab::model::decoder::Inspection) {
    let Some(f) = &insp.field else {
        return;
    };
    let s = &f.sink_metric;
    println!(
        "the field's measures on {} held-out window(s) of {} tokens: Gu et al.'s Sink metric (eps {}) {:.1}% of (window, layer, head) (per block {})",
        s.windows,
        s.tokens,
        s.eps,
        s.percent,
        s.per_block_percent
            .iter()
            .map(|v| format!("{v:.0}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let m = &f.massive_activations;
    match m.first_block.and_then(|b| m.per_block.get(b)) {
        Some(r) => {
            let t = &r.top[0];
            println!(
                "  Sun et al.'s massive activations (above {} and {}x the median) from block {}: |x| = {:.0} in channel {} at position {} ({:?}), {:.0}x the median {:.3}",
                m.min, m.over_median, r.block, t.value, t.channel, t.position, t.token, r.top_over_median, r.median
            );
        }
        None => println!(
            "  Sun et al.'s massive activations (above {} and {}x the median): none (largest {:.0}x the median)",
            m.min,
            m.over_median,
            m.per_block
                .iter()
                .fold(0f64, |a, r| a.max(r.top_over_median))
        ),
    }
}

/// What `inspect` adds to the per-block table for a decoder: the
/// sublayer check, QK-Norm's effect, every norm's gains, the logit lens.
fn print_more(m: &normlab::model::decoder::Decoder, insp: &normlab::model::decoder::Inspection) {
    println!(
        "per sublayer, stream before + write as added = stream after to {:.1e} (largest relative error over every sublayer and text)",
        insp.sublayer_check
    );
    if m.cfg.qk_norm {
        let (with, without, lower) = insp.qk_norm_effect();
        println!(
            "QK-Norm: the largest attention logit is {with:.2} with it, {without:.2} from the same queries and keys without it; it lowers the block's largest logit in {lower} of {} blocks",
            m.cfg.layers
        );
    }
    let zc = m.cfg.gain.zero_centred();
    let cols = if zc { 6 } else { 4 };
    let head = [
        "norm",
        "gain mean",
        "gain min",
        "gain max",
        "w mean",
        "w std",
    ];
    let mut t = Table::new(&head[..cols]).right(&[1, 2, 3, 4, 5][..cols - 1]);
    for g in &insp.gains {
        let mut row = vec![g.role.to_string()];
        row.extend([0, 2, 3].map(|i| format!("{:.4}", g.gain[i])));
        if let Some(w) = g.w {
            row.extend([0, 1].map(|i| format!("{:.4}", w[i])));
        }
        t.row(row);
    }
    println!(
        "norm gains{}:",
        if zc {
            " (the model multiplies by 1 + w; w is what weight decay pulls toward 0)"
        } else {
            " (the model multiplies by the stored gain)"
        }
    );
    print!("{t}");
    if let (Some(first), Some(last)) = (insp.lens.first(), insp.lens.last()) {
        let half = insp
            .lens
            .iter()
            .find(|r| r.agrees >= 0.5)
            .map_or("no block".to_string(), |r| format!("block {}", r.block));
        println!(
            "logit lens ({} held-out predictions; the final norm recomputed on each block's stream): loss {:.3} after block {} .. {:.3} after block {}; the top token first matches the model's own in half the positions at {half}",
            insp.final_norm.tokens.min(normlab::model::decoder::LENS_TOKENS),
            first.loss,
            first.block,
            last.loss,
            last.block
        );
    }
}

/// `normlab inspect RUN_DIR`: a model trained by normlab, any placement.
fn run_trained(c: &InspectCmd) -> anyhow::Result<()> {
    if c.out.is_some() || !c.text.is_empty() || c.changes() || !c.ids.is_empty() {
        return bad(
            "--out, --text, --ids, --ffn-clamp and the interventions are for pretrained decoders; a run folder reads its own held-out data",
        );
    }
    normlab::limits::check_count("--sequences", c.sequences, 1, 256)?;
    let (tc, model, params) = normlab::train::run::load_model(&c.model)?;
    let data = normlab::train::trainer::load_data(&tc)?;
    let (n, t) = (c.sequences, tc.model.seq);
    let mut ws = model.workspace(n, t);
    for i in 0..n {
        let r = i * t..(i + 1) * t;
        data.eval_sequence(i, t, &mut ws.tokens[r.clone()], &mut ws.targets[r]);
    }
    ws.keep_writes(true);
    let loss = model.forward(&params, &mut ws) / (n * t) as f64;
    let rows = model.sublayer_traces(&ws);
    let m = &tc.model;
    let name = |j: usize| match (j, m.kind) {
        (0, normlab::model::ModelKind::Toy) => "mix",
        (0, _) => "attn",
        _ => "mlp",
    };
    if c.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "run": c.model.display().to_string(), "model": m.kind.to_string(), "layers": m.layers,
                "d_model": m.d_model, "norm": m.norm.name(), "placement": m.placement.name(),
                "sequences": n, "held_out_loss": loss, "sublayers": rows,
            }))?
        );
        return Ok(());
    }
    println!(
        "{}: {} with {} blocks, d {}, {} {}; {} held-out sequence(s) of {} tokens, loss {:.4} nats/token",
        c.model.display(),
        m.kind,
        m.layers,
        m.d_model,
        m.placement,
        m.norm.name(),
        n,
        t,
        loss
    );
    println!("per sublayer: the stream's RMS before, the write as it is added (after the output norm for sandwich/olmo2; for a post-norm sublayer the change across it), the stream after; check = max |after - (before + write)| / max |after|");
    let mut table = Table::new(&[
        "block",
        "sublayer",
        "placement",
        "stream RMS before",
        "write RMS",
        "write / stream",
        "stream RMS after",
        "check",
    ])
    .right(&[3, 4, 5, 6, 7]);
    for r in &rows {
        table.row(vec![
            r.block.to_string(),
            name(r.sub).into(),
            m.block_placement(r.block).name().into(),
            format!("{:.4}", r.before_rms),
            format!("{:.4}", r.write_rms),
            format!("{:.4}", r.write_rms / r.before_rms.max(1e-30)),
            format!("{:.4}", r.after_rms),
            format!("{:.1e}", r.check),
        ]);
    }
    print!("{table}");
    Ok(())
}
