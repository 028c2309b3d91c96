//! identity-path (claim C2): how much of the gradient takes the identity
//! path of a residual block y = x + F(x)? The input gradient split into the
//! identity term and the term through F, against y = F(x); and the gradient
//! that reaches the input of deep stacks with and without residuals.

use super::{result, ExpArgs, ExpFlag, ExpResult, Experiment, Progress};
use crate::error::Result;
use crate::kernels::buf::AlignedBuf;
use crate::kernels::rng::Rng;
use crate::nn::{Activation, Mlp, Op, Scratch, Sublayer, SublayerCache};
use crate::params::{sum_squares, Init, ParamLayout};
use crate::present::{f, Figure, LineChart, Panel, Series, Table};
use serde_json::{json, Map, Value};

/// The experiment's registry row.
pub const EXPERIMENT: Experiment = Experiment {
    id: "identity-path",
    question: "How much gradient takes the identity path?",
    flags: &[
        ExpFlag::DModel,
        ExpFlag::Rows,
        ExpFlag::Seed,
        ExpFlag::Layers,
    ],
    run,
    grid: None,
};

/// A stack of residual (or plain) MLP sublayers for the identity-path experiment.
struct MlpStack {
    subs: Vec<Sublayer>,
    params: AlignedBuf,
    grads: AlignedBuf,
    caches: Vec<SublayerCache>,
    scratch: Scratch,
}

impl MlpStack {
    #[allow(clippy::too_many_arguments)]
    fn new(
        depth: usize,
        d: usize,
        hidden: usize,
        residual: bool,
        std_in: f32,
        std_out: f32,
        seed: u64,
        rows: usize,
    ) -> MlpStack {
        let mut layout = ParamLayout::new();
        let subs: Vec<Sublayer> = (0..depth)
            .map(|i| {
                let mlp = Mlp::new(
                    &mut layout,
                    &format!("f.{i}"),
                    d,
                    hidden,
                    Activation::Gelu,
                    Some(i),
                    Init::Normal(std_in),
                    Init::Normal(std_out),
                );
                Sublayer {
                    d,
                    in_norm: None,
                    out_norm: None,
                    post_norm: None,
                    skip: if residual { 1.0 } else { 0.0 },
                    out_bias: None,
                    branch: 1.0,
                    op: Op::Mlp(mlp),
                }
            })
            .collect();
        let mut params = layout.zeros();
        layout.init(&mut params, seed);
        let caches = subs
            .iter()
            .map(|s| {
                let mut c = s.cache(rows, 1);
                c.track_paths = true;
                c
            })
            .collect();
        MlpStack {
            scratch: Scratch::new(&subs, rows),
            subs,
            params,
            grads: layout.zeros(),
            caches,
        }
    }

    /// Forward, then backward of sum(r * y); returns dL/dx.
    fn grad(&mut self, x: &[f32], r: &[f32]) -> Vec<f32> {
        for i in 0..self.subs.len() {
            let (done, rest) = self.caches.split_at_mut(i);
            let input: &[f32] = if i == 0 { x } else { done[i - 1].output() };
            self.subs[i].forward(&self.params, input, &mut rest[0], &mut self.scratch);
        }
        let mut dcur = r.to_vec();
        let mut dnext = vec![0.0; r.len()];
        for i in (0..self.subs.len()).rev() {
            let (done, rest) = self.caches.split_at_mut(i);
            let input: &[f32] = if i == 0 { x } else { done[i - 1].output() };
            self.subs[i].backward(
                &self.params,
                &mut self.grads,
                input,
                &dcur,
                &mut dnext,
                &mut rest[0],
                &mut self.scratch,
            );
            std::mem::swap(&mut dcur, &mut dnext);
        }
        dcur
    }
}

/// identity-path: split dL/dx of y = x + F(x) into the identity term and
/// the term through F; compare with y = F(x); then through stacks.
fn run(a: &ExpArgs, _progress: Progress) -> Result<ExpResult> {
    let d = a.d_model.unwrap_or(64);
    let rows = a.rows.unwrap_or(256);
    let seed = a.seed.unwrap_or(0);
    let hidden = 4 * d;
    let depths = a.layers.clone().unwrap_or(if a.quick {
        vec![1, 4, 16]
    } else {
        vec![1, 2, 4, 8, 16, 32, 64]
    });
    let deepest = depths.iter().copied().max().unwrap_or(1) as f64;
    let (df, rf) = (d as f64, rows as f64);
    crate::limits::check_memory(
        crate::limits::f32_bytes(deepest * (8.0 * df * df + 20.0 * rf * df)),
        &format!("identity-path ({deepest} blocks, d {d}, {rows} rows)"),
    )?;
    let mut rng = Rng::derive(seed, "identity-path");
    let x = rng.normal_vec(rows * d, 0.0, 1.0);
    let r = rng.normal_vec(rows * d, 0.0, 1.0);
    let inits = [
        (
            "fan-in (std 1/sqrt(fan_in))",
            (1.0 / (d as f32).sqrt(), 1.0 / (hidden as f32).sqrt()),
        ),
        ("GPT-2 (std 0.02)", (0.02, 0.02)),
    ];
    let mut table = Table::new(
        "One block, upstream gradient dL/dy ~ N(0,1): norms of dL/dx and its two terms",
        &[
            "init",
            "|dL/dx|",
            "identity term",
            "through F",
            "identity share",
            "|dL/dx| without residual",
        ],
    );
    let mut single = Map::new();
    for (name, (si, so)) in inits {
        let mut st = MlpStack::new(1, d, hidden, true, si, so, seed, rows);
        let dx = st.grad(&x, &r);
        let c = &st.caches[0];
        let (id, br, tot) = (
            c.identity_grad_sumsq.sqrt(),
            c.branch_grad_sumsq.sqrt(),
            sum_squares(&dx).sqrt(),
        );
        let share = c.identity_grad_sumsq / (c.identity_grad_sumsq + c.branch_grad_sumsq);
        let mut plain = MlpStack::new(1, d, hidden, false, si, so, seed, rows);
        let no_res = sum_squares(&plain.grad(&x, &r)).sqrt();
        table.row(vec![
            name.into(),
            f(tot, 3),
            f(id, 3),
            f(br, 3),
            format!("{:.1}%", 100.0 * share),
            f(no_res, 4),
        ]);
        single.insert(
            name.into(),
            json!({"total_grad_norm": tot, "identity_grad_norm": id, "through_branch_grad_norm": br, "identity_share": share, "no_residual_grad_norm": no_res}),
        );
    }
    let mut stack_table = Table::new(
        "Stacks of blocks (fan-in init): |dL/dx at the input| / |dL/dy at the output|",
        &["blocks", "with residual", "without residual"],
    );
    let (mut s_res, mut s_plain) = (Vec::new(), Vec::new());
    let top = sum_squares(&r).sqrt();
    for &l in &depths {
        let (si, so) = (1.0 / (d as f32).sqrt(), 1.0 / (hidden as f32).sqrt());
        let g_res =
            sum_squares(&MlpStack::new(l, d, hidden, true, si, so, seed, rows).grad(&x, &r)).sqrt()
                / top;
        let g_plain =
            sum_squares(&MlpStack::new(l, d, hidden, false, si, so, seed, rows).grad(&x, &r))
                .sqrt()
                / top;
        stack_table.row(vec![l.to_string(), f(g_res, 4), f(g_plain, 4)]);
        s_res.push((l as f64, g_res));
        s_plain.push((l as f64, g_plain));
    }
    let mut out = result(
        json!({"d": d, "hidden": hidden, "rows": rows, "F": "Linear(d, 4d) - GELU - Linear(4d, d)", "loss": "sum(r * y), r ~ N(0,1)", "depths": depths}),
        vec![seed],
    );
    let main = single["fan-in (std 1/sqrt(fan_in))"].clone();
    for k in [
        "total_grad_norm",
        "identity_grad_norm",
        "through_branch_grad_norm",
        "identity_share",
        "no_residual_grad_norm",
    ] {
        out.data.insert(k.into(), main[k].clone());
    }
    out.data
        .insert("by_init".into(), Value::Object(single.clone()));
    out.data.insert("stack".into(), json!({"depths": depths, "with_residual": s_res.iter().map(|p| p.1).collect::<Vec<_>>(), "without_residual": s_plain.iter().map(|p| p.1).collect::<Vec<_>>()}));
    out.figures.push(Figure {
        stem: "identity_path".into(),
        panels: vec![Panel::Line(LineChart {
            title: "gradient reaching the input of a stack".into(),
            x_label: "blocks".into(),
            y_label: "|dL/dx_in| / |dL/dy_out|".into(),
            series: vec![
                Series {
                    name: "with residual".into(),
                    points: s_res.clone(),
                    markers: true,
                },
                Series {
                    name: "without residual".into(),
                    points: s_plain.clone(),
                    markers: true,
                },
            ],
            log_y: true,
            log_x: true,
        })],
        cols: 1,
    });
    let gpt = &single["GPT-2 (std 0.02)"];
    out.conclusion = format!(
        "In one block the identity path carries {:.1}% of the squared gradient with fan-in init and {:.1}% with GPT-2's small init; without the residual only the through-F term is left ({} instead of {}). Through {} blocks the gradient reaching the input is {} of the output gradient with residuals and {} without.",
        100.0 * main["identity_share"].as_f64().unwrap(),
        100.0 * gpt["identity_share"].as_f64().unwrap(),
        f(main["no_residual_grad_norm"].as_f64().unwrap(), 3),
        f(main["total_grad_norm"].as_f64().unwrap(), 3),
        depths.last().unwrap(),
        f(s_res.last().unwrap().1, 3),
        f(s_plain.last().unwrap().1, 3)
    );
    out.tables.push(table);
    out.tables.push(stack_table);
    Ok(out)
}
