//! LayerNorm -> RMSNorm conversion: exact for pre-LN (and output norms),
//! refused without --approximate where it cannot be exact, and calibration
//! moves an approximate conversion toward the original.

use normlab::convert::{self, Role};
use normlab::kernels::norm::NormKind;
use normlab::kernels::rng::Rng;
use normlab::model::{Model, ModelConfig, ModelKind};
use normlab::nn::Placement;
use normlab::train::{trainer::load_data, TrainConfig};

fn setup(kind: ModelKind, placement: Placement, tie: bool) -> (TrainConfig, Model, Vec<f32>) {
    let mut tc = TrainConfig::from_overrides(
        serde_json::json!({"model": kind.to_string()})
            .as_object()
            .unwrap(),
    )
    .unwrap();
    let mut m = ModelConfig::defaults(kind);
    m.layers = 2;
    m.d_model = 32;
    m.heads = 2;
    m.hidden = 64;
    m.seq = if kind == ModelKind::Gpt { 32 } else { 16 };
    m.placement = placement;
    m.tie_head = tie;
    m.init_std = 0.2;
    m.out_proj_std = Some(0.2);
    tc.model = m.clone();
    let model = Model::new(&m).unwrap();
    let mut p = model.init_params(3).to_vec();
    // Non-trivial gains and biases, as after training.
    let mut rng = Rng::new(4);
    for v in p.iter_mut() {
        *v += 0.2 * rng.normal() as f32;
    }
    (tc, model, p)
}

#[test]
fn pre_ln_converts_exactly() {
    for (kind, tie) in [
        (ModelKind::Gpt, false),
        (ModelKind::Gpt, true),
        (ModelKind::Toy, false),
    ] {
        let (tc, model, p) = setup(kind, Placement::Pre, tie);
        let c = convert::to_rmsnorm(&model.cfg, &p, false).unwrap();
        assert!(c.exact && c.cfg.norm == NormKind::RmsNorm);
        let new = Model::new(&c.cfg).unwrap();
        let data = load_data(&tc).unwrap();
        let a = convert::compare((&model, &p), (&new, &c.params), &data, 16);
        assert!(
            convert::is_float_exact(&a),
            "{kind:?} tie={tie}: max |diff| {} (logits up to {})",
            a.max_abs_logit_diff,
            a.max_abs_logit
        );
        assert!((a.eval_loss_a - a.eval_loss_b).abs() < 1e-4);
        // And back: the converted model's stream is zero-mean, so RMSNorm -> LayerNorm is exact too.
        let back = convert::to_layernorm(&c.cfg, &c.params).unwrap();
        let bm = Model::new(&back.cfg).unwrap();
        let a2 = convert::compare((&new, &c.params), (&bm, &back.params), &data, 16);
        assert!(
            convert::is_float_exact(&a2),
            "back: {}",
            a2.max_abs_logit_diff
        );
    }
}

#[test]
fn inexact_placements_are_refused_then_approximated() {
    for placement in [
        Placement::Post,
        Placement::Sandwich,
        Placement::Olmo2,
        Placement::DeepNorm,
    ] {
        let (_, model, p) = setup(ModelKind::Gpt, placement, false);
        let err = convert::to_rmsnorm(&model.cfg, &p, false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no exact conversion") && err.contains("--approximate"),
            "{err}"
        );
        let c = convert::to_rmsnorm(&model.cfg, &p, true).unwrap();
        assert!(!c.exact);
        // Output norms are still converted exactly.
        for n in &c.norms {
            assert_eq!(
                n.exact,
                n.role == Role::BranchOutput,
                "{} {:?}",
                n.name,
                n.role
            );
        }
    }
}

#[test]
fn output_norms_convert_exactly_when_they_are_the_only_norms() {
    // olmo2 with the final norm removed: only branch-output norms.
    let (tc, mut model, p) = setup(ModelKind::Gpt, Placement::Olmo2, false);
    let mut m = model.cfg.clone();
    m.final_norm = Some(false);
    model = Model::new(&m).unwrap();
    let p = p[..model.layout.buffer_len()].to_vec();
    let c = convert::to_rmsnorm(&model.cfg, &p, false).unwrap();
    assert!(c.exact);
    let new = Model::new(&c.cfg).unwrap();
    let a = convert::compare((&model, &p), (&new, &c.params), &load_data(&tc).unwrap(), 8);
    assert!(convert::is_float_exact(&a), "{}", a.max_abs_logit_diff);
}

#[test]
fn calibration_moves_an_approximate_conversion_toward_the_original() {
    let (tc, model, p) = setup(ModelKind::Gpt, Placement::Post, false);
    let c = convert::to_rmsnorm(&model.cfg, &p, true).unwrap();
    let new = Model::new(&c.cfg).unwrap();
    let data = load_data(&tc).unwrap();
    let before = convert::compare((&model, &p), (&new, &c.params), &data, 16);
    let cal = convert::calibrate((&model, &p), (&new, &c.params), &data, 0, 150, 3e-3, 8);
    let after = convert::compare((&model, &p), (&new, &cal), &data, 16);
    assert!(
        after.mean_abs_logit_diff < before.mean_abs_logit_diff,
        "{} -> {}",
        before.mean_abs_logit_diff,
        after.mean_abs_logit_diff
    );
}
