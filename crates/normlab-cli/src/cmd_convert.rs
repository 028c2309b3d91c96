//! `normlab convert IN OUT --to rmsnorm|layernorm`.

use crate::ui::bad;
use clap::Args;
use normlab::convert::{self, Agreement};
use normlab::io::atomic_write;
use normlab::kernels::norm::NormKind;
use normlab::model::Model;
use normlab::train::run::load_model;
use normlab::train::trainer::load_data;
use serde_json::json;
use std::path::PathBuf;

/// Convert a checkpoint between LayerNorm and RMSNorm, verified on held-out data.
#[derive(Args, Debug)]
pub struct ConvertCmd {
    /// Run folder to read (from `normlab train`).
    input: PathBuf,
    /// New run folder to write (must not exist or be empty).
    output: PathBuf,
    /// Target norm kind: rmsnorm or layernorm.
    #[arg(long)]
    to: String,
    /// Convert norms that have no exact conversion too (keep gamma, drop beta).
    #[arg(long)]
    approximate: bool,
    /// Then distil the original into the converted model for this many steps.
    #[arg(long, default_value_t = 0)]
    calibrate: usize,
    /// Learning rate of the calibration (Adam).
    #[arg(long, default_value_t = 1e-3)]
    calibrate_lr: f32,
    /// Held-out sequences used to compare the two models.
    #[arg(long, default_value_t = 64)]
    check_sequences: usize,
    /// Print the conversion report as JSON.
    #[arg(long)]
    json: bool,
}

fn agreement_json(a: &Agreement) -> serde_json::Value {
    json!({"max_abs_logit_diff": a.max_abs_logit_diff, "mean_abs_logit_diff": a.mean_abs_logit_diff, "max_abs_logit": a.max_abs_logit, "eval_loss": a.eval_loss_b, "sequences": a.sequences})
}

pub fn run(c: ConvertCmd) -> anyhow::Result<()> {
    let to: NormKind =
        c.to.parse()
            .or_else(|e: normlab::kernels::norm::UnknownNormKind| bad(e.to_string()))?;
    if !matches!(to, NormKind::RmsNorm | NormKind::LayerNorm) {
        return bad("--to must be rmsnorm or layernorm");
    }
    if c.output.exists()
        && std::fs::read_dir(&c.output)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return bad(format!(
            "{} already exists; choose a new output folder",
            c.output.display()
        ));
    }
    if c.check_sequences == 0 || c.check_sequences > 100_000 {
        return bad("--check-sequences must be in 1..=100000");
    }
    normlab::limits::check_count(
        "--calibrate",
        c.calibrate,
        0,
        normlab::limits::MAX_CALIBRATION_STEPS,
    )?;
    if !(c.calibrate_lr.is_finite() && c.calibrate_lr > 0.0) {
        return bad("--calibrate-lr must be positive");
    }
    let (mut tc, model, params) = load_model(&c.input)?;
    let data = load_data(&tc)?;
    let conv = match to {
        NormKind::RmsNorm => convert::to_rmsnorm(&model.cfg, &params, c.approximate),
        _ => convert::to_layernorm(&model.cfg, &params),
    }?;
    let new = Model::new(&conv.cfg)?;
    let check = convert::compare(
        (&model, &params),
        (&new, &conv.params),
        &data,
        c.check_sequences,
    );
    let finite = |a: &Agreement| {
        [a.max_abs_logit_diff, a.eval_loss_a, a.eval_loss_b]
            .iter()
            .all(|v| v.is_finite())
    };
    if !finite(&check) {
        return bad(format!(
            "verification gave non-finite logits or losses (eval loss {} -> {}); nothing written",
            check.eval_loss_a, check.eval_loss_b
        ));
    }
    let verified = convert::is_float_exact(&check);
    let exact = if to == NormKind::LayerNorm {
        verified
    } else {
        conv.exact
    };
    if exact && !verified {
        anyhow::bail!(
            "verification failed: the conversion should be exact but logits differ by up to {:.3e} (scale {:.3e}); nothing written",
            check.max_abs_logit_diff,
            check.max_abs_logit
        );
    }
    if to == NormKind::LayerNorm && !exact && !c.approximate {
        return bad(format!(
            "RMSNorm -> LayerNorm is not exact for this model: the stream its norms read is not zero-mean (logits differ by up to {:.3e}); rerun with --approximate",
            check.max_abs_logit_diff
        ));
    }
    let mut final_params = conv.params.clone();
    let mut calib = None;
    if c.calibrate > 0 {
        let batch = tc.batch.min(16);
        final_params = convert::calibrate(
            (&model, &params),
            (&new, &conv.params),
            &data,
            tc.seed,
            c.calibrate,
            c.calibrate_lr,
            batch,
        );
        let after = convert::compare(
            (&model, &params),
            (&new, &final_params),
            &data,
            c.check_sequences,
        );
        calib = Some(
            json!({"steps": c.calibrate, "lr": normlab_lab::exp::num(c.calibrate_lr), "batch": batch, "after": agreement_json(&after)}),
        );
    }
    let report = json!({
        "input": c.input.display().to_string(), "output": c.output.display().to_string(),
        "from": model.cfg.norm.name(), "to": to.name(), "placement": model.cfg.placement.name(),
        "exact": exact,
        "max_abs_logit_diff": check.max_abs_logit_diff, "mean_abs_logit_diff": check.mean_abs_logit_diff, "max_abs_logit": check.max_abs_logit,
        "eval_loss_original": check.eval_loss_a, "eval_loss_converted": check.eval_loss_b, "sequences": check.sequences,
        "calibration": calib,
        "norms": conv.norms, "notes": conv.notes,
    });
    // Write the new run folder.
    normlab::io::create_dir_all(&c.output)?;
    tc.model = conv.cfg.clone();
    let bytes = normlab::train::folder::checkpoint_bytes(&new.layout, &final_params, &tc)
        .map_err(|e| anyhow::anyhow!(e))?;
    atomic_write(
        &c.output.join("config.json"),
        serde_json::to_string_pretty(&tc)?.as_bytes(),
    )?;
    atomic_write(&c.output.join("checkpoint.safetensors"), &bytes)?;
    atomic_write(
        &c.output.join("conversion.json"),
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    if c.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let mut t = crate::ui::Table::new(&["norm", "role", "conversion", "why"]);
    for n in &conv.norms {
        t.row(vec![
            n.name.clone(),
            format!("{:?}", n.role),
            if n.exact {
                "exact".into()
            } else {
                "approximate".to_string()
            },
            n.why.clone(),
        ]);
    }
    print!("{t}");
    for n in &conv.notes {
        println!("- {n}");
    }
    println!(
        "{} -> {} ({}): {}; on {} held-out sequences max |logit diff| {:.3e}, mean {:.3e} (logits up to {:.2}); eval loss {:.4} -> {:.4}",
        model.cfg.norm,
        to,
        model.cfg.placement,
        if exact { "EXACT" } else { "approximate" },
        check.sequences,
        check.max_abs_logit_diff,
        check.mean_abs_logit_diff,
        check.max_abs_logit,
        check.eval_loss_a,
        check.eval_loss_b
    );
    if let Some(cal) = &report["calibration"].as_object() {
        let a = &cal["after"];
        println!(
            "after {} calibration steps: max |logit diff| {:.3e}, mean {:.3e}; eval loss {:.4}",
            c.calibrate,
            a["max_abs_logit_diff"].as_f64().unwrap(),
            a["mean_abs_logit_diff"].as_f64().unwrap(),
            a["eval_loss"].as_f64().unwrap()
        );
    }
    println!("wrote {}", c.output.display());
    Ok(())
}
