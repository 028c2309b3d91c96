//! residual-growth (claims C3, C20): how does the residual stream grow with
//! depth? The mean row norm of the stream after each block of a Pre-LN GPT
//! at initialisation and after training, with and without the final norm,
//! against Post-LN (pinned at sqrt(d) by its norms).

use super::runs::{self, block_row_norms, cfg, final_params, gpt_base, grid_settings, merge};
use super::{num, result, ExpArgs, ExpFlag, ExpResult, Experiment, Progress};
use crate::error::Result;
use crate::model::Model;
use crate::nn::Placement;
use crate::present::{f, Figure, LineChart, Series, Table};
use crate::sweep::RunSpec;
use serde_json::{json, Map, Value};

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "residual-growth",
    question: "How does the residual stream grow?",
    flags: &[
        ExpFlag::DModel,
        ExpFlag::Layers,
        ExpFlag::Steps,
        ExpFlag::Seeds,
        ExpFlag::Seed,
        ExpFlag::Jobs,
        ExpFlag::Lrs,
    ],
    run,
    grid: Some(grid),
};

/// The variants: name, placement, final norm (None: the placement's default).
const VARIANTS: [(&str, Placement, Option<bool>); 3] = [
    ("pre, final norm", Placement::Pre, Some(true)),
    ("pre, no final norm", Placement::Pre, Some(false)),
    ("post", Placement::Post, None),
];

/// The grid's settings.
struct Settings {
    d: usize,
    layers: usize,
    steps: usize,
    seeds: Vec<u64>,
    lr: f32,
}

fn settings(a: &ExpArgs) -> Settings {
    Settings {
        d: a.d_model.unwrap_or(if a.quick { 64 } else { 128 }),
        layers: a.first_layers().unwrap_or(if a.quick { 4 } else { 12 }),
        steps: a.steps_or(100, 1000),
        seeds: a.seed_list(1),
        lr: a.lr_or(1e-3),
    }
}

/// GPT of width d (MLP 4d): variant x seed.
fn grid(a: &ExpArgs) -> Result<Vec<RunSpec>> {
    let s = settings(a);
    let base = gpt_base(&ExpArgs {
        layers: None,
        ..a.clone()
    });
    let d = s.d;
    let mut cfgs = Vec::new();
    for (_, p, fin) in VARIANTS {
        for &seed in &s.seeds {
            let mut v = merge(
                &base,
                json!({"d_model": d, "heads": 4.min(d / 16).max(1), "hidden": 4 * d, "layers": s.layers, "placement": p.name(), "steps": s.steps, "seed": seed, "lr": s.lr, "shards": 1}),
            );
            if let Some(fnorm) = fin {
                v = merge(&v, json!({ "final_norm": fnorm }));
            }
            cfgs.push(cfg(v)?);
        }
    }
    Ok(runs::specs(cfgs))
}

fn run(a: &ExpArgs, progress: Progress) -> Result<ExpResult> {
    let s = settings(a);
    let (d, layers, steps) = (s.d, s.layers, s.steps);
    let rs = runs::run_grid(a, grid(a)?, true, progress)?;
    let mut table = Table::new(
        format!("Mean row norm of the residual stream, GPT d {d}, {layers} blocks (sqrt(d) = {:.2}), seed {}", (d as f64).sqrt(), s.seeds[0]),
        &["variant", "when", "after embedding", "after block 1", "middle block", "last block", "last / first block"],
    );
    let mut panels = Vec::new();
    let mut data = Map::new();
    let mut trained_of = Vec::new();
    for (name, p, fin) in VARIANTS {
        // The first seed's run of this variant.
        let r = rs
            .iter()
            .find(|r| {
                r.cfg.model.placement == p
                    && r.cfg.seed == s.seeds[0]
                    && (fin.is_none() || r.cfg.model.final_norm == fin)
            })
            .expect("every variant was run");
        let model = Model::new(&r.cfg.model)?;
        let init = block_row_norms(&r.cfg, &model.init_params(r.cfg.seed))?;
        let trained = block_row_norms(&r.cfg, &final_params(a, r)?)?;
        for (when, v) in [("init", &init), ("trained", &trained)] {
            table.row(vec![
                name.to_string(),
                when.into(),
                f(v[0], 3),
                f(v[1], 3),
                f(v[layers / 2], 3),
                f(v[layers], 3),
                f(v[layers] / v[1], 3),
            ]);
        }
        data.insert(name.to_string(), json!({"init": init, "trained": trained, "status": r.summary.status.name(), "final_eval_loss": r.summary.final_eval_loss}));
        panels.push(
            LineChart::new(
                name,
                "block (0 = embedding)",
                "mean row norm",
                vec![
                    Series::indexed("init", &init),
                    Series::indexed(format!("after {steps} steps"), &trained),
                    Series::indexed("sqrt(d)", &vec![(d as f64).sqrt(); layers + 1]),
                ],
            )
            .log_y()
            .panel(),
        );
        trained_of.push(trained);
    }
    let mut out = result(
        grid_settings(
            a,
            json!({"model": "gpt", "d_model": d, "layers": layers, "steps": steps, "lr": num(s.lr)}),
        ),
        s.seeds.clone(),
    );
    out.data
        .insert("per_layer_mean_row_norm".into(), Value::Object(data));
    out.figures.push(Figure::new("residual_growth", panels, 3));
    let (pre, pre_nofinal, post) = (&trained_of[0], &trained_of[1], &trained_of[2]);
    out.conclusion = format!(
        "After training, the pre-LN stream's mean row norm grows from {} after block 1 to {} after block {layers} ({}x); with the final norm removed it ends at {}. Post-LN keeps every block's output at {} (sqrt(d) = {:.2}), since each block ends in a norm.",
        f(pre[1], 2),
        f(pre[layers], 2),
        f(pre[layers] / pre[1], 2),
        f(pre_nofinal[layers], 2),
        f(post[1..].iter().sum::<f64>() / layers as f64, 2),
        (d as f64).sqrt()
    );
    out.tables.push(table);
    Ok(out)
}
