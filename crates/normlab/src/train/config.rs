//! `TrainConfig`: every option of `normlab train` in one flat struct, so
//! that flags, TOML files and sweep grids are the same keys. A config is
//! built as defaults (per model family) + TOML + flags, merged as JSON
//! values and then checked field by field.

use crate::error::Result;
use crate::kernels::norm::NormKind;
use crate::model::config::norm_kind_serde;
use crate::model::{ModelConfig, ModelKind};
use crate::nn::{Activation, Placement};
use crate::train::optim::{OptimizerKind, ScheduleKind};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// All settings of one training run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// toy or gpt.
    pub model: ModelKind,
    /// Blocks.
    pub layers: usize,
    /// Width.
    pub d_model: usize,
    /// Attention heads (gpt).
    pub heads: usize,
    /// Sequence length.
    pub seq: usize,
    /// MLP hidden width.
    pub hidden: usize,
    /// Vocabulary (toy 64; gpt 256 bytes).
    pub vocab: usize,
    /// gelu or swiglu.
    pub act: Activation,
    /// Norm kind.
    #[serde(with = "norm_kind_serde")]
    pub norm: NormKind,
    /// eps (default: the kind's).
    pub eps: Option<f32>,
    /// Placement preset.
    pub placement: Placement,
    /// Residual connections.
    pub residual: bool,
    /// Multiplier on each sublayer output (1; `invsqrt` on the command line = 1/sqrt(2L)).
    pub branch_scale: f32,
    /// Output-projection init std (default 0.02/sqrt(2L)).
    pub out_proj_std: Option<f32>,
    /// Init std of other weights.
    pub init_std: f32,
    /// QK-Norm (gpt).
    pub qk_norm: bool,
    /// Final norm before the head (default by placement).
    pub final_norm: Option<bool>,
    /// Tie head and token embedding.
    pub tie_head: bool,
    /// Bias on the head (conversion only).
    #[serde(default)]
    pub head_bias: bool,
    /// Bias after each output norm (conversion only).
    #[serde(default)]
    pub out_norm_bias: bool,
    /// Text file for gpt (default: the bundled Shakespeare).
    pub data: Option<String>,
    /// Toy task label noise: probability that a target is replaced by a uniform token.
    pub toy_noise: f32,
    /// adam or adamw.
    pub optimizer: OptimizerKind,
    /// Peak learning rate.
    pub lr: f32,
    /// Adam beta1.
    pub beta1: f32,
    /// Adam beta2.
    pub beta2: f32,
    /// Adam eps.
    pub adam_eps: f32,
    /// Weight decay.
    pub weight_decay: f32,
    /// Apply weight decay to norm gains too.
    pub wd_norm_gains: bool,
    /// Linear warm-up steps.
    pub warmup: usize,
    /// constant or cosine after warm-up.
    pub schedule: ScheduleKind,
    /// Cosine floor as a fraction of lr.
    pub min_lr_frac: f32,
    /// Global grad-norm clip (0 = off).
    pub clip: f32,
    /// Optimisation steps.
    pub steps: usize,
    /// Sequences per step.
    pub batch: usize,
    /// The batch is split into this many equal shards, processed in
    /// parallel and summed in order: results depend on `shards`, never on
    /// the number of threads.
    pub shards: usize,
    /// Seed of initialisation and data.
    pub seed: u64,
    /// Evaluate the held-out loss every this many steps (and at the end).
    pub eval_every: usize,
    /// Held-out sequences per evaluation (rounded up to a multiple of batch).
    pub eval_sequences: usize,
    /// Record metrics every this many steps.
    pub log_every: usize,
    /// Write a checkpoint every this many steps (0 = only at the end).
    pub checkpoint_every: usize,
}

impl TrainConfig {
    /// Defaults for a model family.
    pub fn defaults(model: ModelKind) -> TrainConfig {
        let m = ModelConfig::defaults(model);
        let toy = model == ModelKind::Toy;
        TrainConfig {
            model,
            layers: if toy { 6 } else { 4 },
            d_model: m.d_model,
            heads: m.heads,
            seq: m.seq,
            hidden: m.hidden,
            vocab: m.vocab,
            act: m.act,
            norm: m.norm,
            eps: None,
            placement: m.placement,
            residual: true,
            branch_scale: 1.0,
            out_proj_std: None,
            init_std: 0.02,
            qk_norm: false,
            final_norm: None,
            tie_head: false,
            head_bias: false,
            out_norm_bias: false,
            data: None,
            toy_noise: 0.1,
            optimizer: if toy {
                OptimizerKind::Adam
            } else {
                OptimizerKind::Adamw
            },
            lr: 1e-3,
            beta1: 0.9,
            beta2: if toy { 0.999 } else { 0.95 },
            adam_eps: 1e-8,
            weight_decay: if toy { 0.0 } else { 0.1 },
            wd_norm_gains: false,
            warmup: if toy { 0 } else { 100 },
            schedule: if toy {
                ScheduleKind::Constant
            } else {
                ScheduleKind::Cosine
            },
            min_lr_frac: 0.1,
            clip: if toy { 0.0 } else { 1.0 },
            steps: if toy { 3000 } else { 1000 },
            batch: if toy { 32 } else { 16 },
            shards: 2,
            seed: 0,
            eval_every: if toy { 250 } else { 100 },
            eval_sequences: if toy { 512 } else { 64 },
            log_every: 10,
            checkpoint_every: 0,
        }
    }

    /// Defaults, then `overrides` (a JSON object of option -> value; keys
    /// may use '-' or '_'). The model family is taken from the overrides
    /// first. Unknown keys and bad values are one-line errors.
    pub fn from_overrides(overrides: &Map<String, Value>) -> Result<TrainConfig> {
        let norm_key = |k: &str| k.replace('-', "_");
        let mut ov = Map::new();
        for (k, v) in overrides {
            ov.insert(norm_key(k), v.clone());
        }
        let kind = match ov.get("model") {
            Some(Value::String(s)) => s.parse::<ModelKind>()?,
            Some(other) => return Err(format!("model must be a string (got {other})").into()),
            None => ModelKind::Toy,
        };
        let mut base =
            serde_json::to_value(TrainConfig::defaults(kind)).map_err(|e| e.to_string())?;
        let obj = base.as_object_mut().unwrap();
        let fields: Vec<String> = obj.keys().cloned().collect();
        for (k, v) in ov {
            if !obj.contains_key(&k) {
                return Err(format!("unknown option '{k}' (known: {})", fields.join(", ")).into());
            }
            let v = match (k.as_str(), v) {
                // Integers given for float options, and "invsqrt" for branch_scale.
                ("branch_scale", Value::String(s)) if s == "invsqrt" => Value::Null,
                (_, v) => v,
            };
            obj.insert(k, v);
        }
        if obj.get("branch_scale") == Some(&Value::Null) {
            let layers = obj
                .get("layers")
                .and_then(Value::as_u64)
                .unwrap_or(1)
                .max(1);
            obj.insert(
                "branch_scale".into(),
                Value::from(1.0 / ((2 * layers) as f64).sqrt()),
            );
        }
        let cfg: TrainConfig =
            serde_json::from_value(base).map_err(|e| format!("bad option value: {e}"))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The model part.
    pub fn model_config(&self) -> ModelConfig {
        ModelConfig {
            model: self.model,
            vocab: self.vocab,
            seq: self.seq,
            d_model: self.d_model,
            heads: self.heads,
            layers: self.layers,
            hidden: self.hidden,
            act: self.act,
            norm: self.norm,
            eps: self.eps,
            placement: self.placement,
            residual: self.residual,
            branch_scale: self.branch_scale,
            out_proj_std: self.out_proj_std,
            init_std: self.init_std,
            qk_norm: self.qk_norm,
            final_norm: self.final_norm,
            tie_head: self.tie_head,
            head_bias: self.head_bias,
            out_norm_bias: self.out_norm_bias,
        }
    }

    /// Check everything; one-line messages.
    pub fn validate(&self) -> Result<()> {
        self.model_config().validate()?;
        let finite_pos = |name: &str, v: f32| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!("{name} must be a positive number (got {v})"))
            }
        };
        finite_pos("lr", self.lr)?;
        finite_pos("adam_eps", self.adam_eps)?;
        for (name, b) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&b) {
                return Err(format!("{name} must be in [0, 1) (got {b})").into());
            }
        }
        for (name, v) in [
            ("weight_decay", self.weight_decay),
            ("clip", self.clip),
            ("min_lr_frac", self.min_lr_frac),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{name} must be a number >= 0 (got {v})").into());
            }
        }
        if !(0.0..=1.0).contains(&self.toy_noise) {
            return Err(format!("toy_noise must be in [0, 1] (got {})", self.toy_noise).into());
        }
        if self.steps == 0 {
            return Err("steps must be at least 1".into());
        }
        if self.batch == 0 || self.shards == 0 {
            return Err("batch and shards must be at least 1".into());
        }
        if self.batch % self.shards != 0 {
            return Err(format!(
                "batch ({}) must be divisible by shards ({})",
                self.batch, self.shards
            )
            .into());
        }
        if self.eval_every == 0 || self.log_every == 0 {
            return Err("eval_every and log_every must be at least 1".into());
        }
        if self.model == ModelKind::Toy && self.vocab != 64 {
            return Err("the toy task has a vocabulary of 64".into());
        }
        if self.model == ModelKind::Gpt && self.vocab != 256 {
            return Err("gpt models are byte-level: vocab must be 256".into());
        }
        if self.model == ModelKind::Toy && self.data.is_some() {
            return Err("--data applies to gpt models (the toy task is generated)".into());
        }
        Ok(())
    }

    /// Set the model fields from a model config (the training fields stay).
    pub fn set_model(&mut self, m: &ModelConfig) {
        self.model = m.model;
        self.vocab = m.vocab;
        self.seq = m.seq;
        self.d_model = m.d_model;
        self.heads = m.heads;
        self.layers = m.layers;
        self.hidden = m.hidden;
        self.act = m.act;
        self.norm = m.norm;
        self.eps = m.eps;
        self.placement = m.placement;
        self.residual = m.residual;
        self.branch_scale = m.branch_scale;
        self.out_proj_std = m.out_proj_std;
        self.init_std = m.init_std;
        self.qk_norm = m.qk_norm;
        self.final_norm = m.final_norm;
        self.tie_head = m.tie_head;
        self.head_bias = m.head_bias;
        self.out_norm_bias = m.out_norm_bias;
    }

    /// The config as a JSON value whose numbers keep their f32 decimal form
    /// (0.95, not 0.949999988079071).
    pub fn to_json_value(&self) -> serde_json::Value {
        serde_json::from_str(&serde_json::to_string(self).expect("config serialises"))
            .expect("valid JSON")
    }

    /// Held-out sequences actually evaluated (a multiple of batch).
    pub fn eval_sequences_rounded(&self) -> usize {
        self.eval_sequences.div_ceil(self.batch).max(1) * self.batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ov(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn overrides_and_errors() {
        let c = TrainConfig::from_overrides(&ov(
            json!({"model": "gpt", "d-model": 64, "heads": 4, "lr": 0.003}),
        ))
        .unwrap();
        assert_eq!((c.model, c.d_model, c.lr), (ModelKind::Gpt, 64, 0.003));
        let c = TrainConfig::from_overrides(&ov(json!({"layers": 8, "branch_scale": "invsqrt"})))
            .unwrap();
        assert!((c.branch_scale - 0.25).abs() < 1e-7);
        let e = TrainConfig::from_overrides(&ov(json!({"model": "gpt", "heads": 3})))
            .unwrap_err()
            .to_string();
        assert!(e.contains("heads (3) must divide"), "{e}");
        let e = TrainConfig::from_overrides(&ov(json!({"lr": -1.0})))
            .unwrap_err()
            .to_string();
        assert!(e.contains("lr must be a positive"), "{e}");
        let e = TrainConfig::from_overrides(&ov(json!({"placement": "sideways"})))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sideways"), "{e}");
        let e = TrainConfig::from_overrides(&ov(json!({"colour": 3})))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown option 'colour'"), "{e}");
        let e = TrainConfig::from_overrides(&ov(json!({"batch": 5})))
            .unwrap_err()
            .to_string();
        assert!(e.contains("divisible"), "{e}");
    }
}
