//! `TrainConfig`: every option of `normlab train` in one flat struct, so
//! that flags, TOML files and sweep grids are the same keys. A config is
//! built as defaults (per model family) + TOML + flags, merged as JSON
//! values and then checked field by field.

use crate::error::Result;
use crate::model::{ModelConfig, ModelKind};
use crate::nn::{AttnKind, OutputGate};
use crate::precision::Dtype;
use crate::settings::{Field, Flag};
use crate::train::optim::{OptimizerKind, ScheduleKind};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The `data` value that selects Bigram-Backcopy.
pub const BACKCOPY: &str = "bigram-backcopy";

crate::settings! {
    /// All settings of one training run: the model's ([`ModelConfig`], whose
    /// keys appear at the top level in files, flags and grids) and the
    /// training ones below.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    pub struct TrainConfig {
        /// The model.
        #[serde(flatten)]
        pub model: ModelConfig => Flag::Hidden,
        /// Text file to train a gpt on (default: the bundled Shakespeare),
        /// or `bigram-backcopy` for the synthetic task of docs/bigram-backcopy.md
        /// (BOS at position 0; a file of that name is `./bigram-backcopy`).
        pub data: Option<String> => Flag::Text,
        /// gpt: begin every sequence with this byte (0-255), a fixed
        /// BOS-like first token, so that position 0 always holds the same
        /// token (default: windows start mid-text).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub bos_byte: Option<u32> => Flag::Num,
        /// Toy task label noise: the probability that a target is replaced by a uniform token.
        pub toy_noise: f32 => Flag::Num,
        /// Label noise of the toy task's held-out targets (default: toy_noise;
        /// 0 scores the model on the clean rule).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub toy_eval_noise: Option<f32> => Flag::Num,
        /// adam or adamw.
        pub optimizer: OptimizerKind => Flag::Text,
        /// Peak learning rate.
        pub lr: f32 => Flag::Num,
        /// Adam beta1.
        pub beta1: f32 => Flag::Num,
        /// Adam beta2.
        pub beta2: f32 => Flag::Num,
        /// Adam eps.
        pub adam_eps: f32 => Flag::Num,
        /// Weight decay.
        pub weight_decay: f32 => Flag::Num,
        /// Apply weight decay to norm gains too.
        pub wd_norm_gains: bool => Flag::On,
        /// Linear warm-up steps.
        pub warmup: usize => Flag::Num,
        /// constant or cosine after warm-up.
        pub schedule: ScheduleKind => Flag::Text,
        /// Cosine floor as a fraction of lr.
        pub min_lr_frac: f32 => Flag::Num,
        /// Global grad-norm clip (0 = off).
        pub clip: f32 => Flag::Num,
        /// Optimisation steps.
        pub steps: usize => Flag::Num,
        /// Sequences per step.
        pub batch: usize => Flag::Num,
        /// The batch is split into this many equal shards, processed in
        /// parallel and summed in order: results depend on shards, never on the
        /// number of threads.
        pub shards: usize => Flag::Num,
        /// Seed of initialisation and data.
        pub seed: u64 => Flag::Num,
        /// Evaluate the held-out loss every this many steps (and at the end).
        pub eval_every: usize => Flag::Num,
        /// Held-out sequences per evaluation (rounded up to a multiple of batch).
        pub eval_sequences: usize => Flag::Num,
        /// Record metrics every this many steps.
        pub log_every: usize => Flag::Num,
        /// Write a checkpoint every this many steps (0 = only at the end).
        pub checkpoint_every: usize => Flag::Num,
        /// Storage type of activations and their gradients: f32, bf16 or
        /// f16. The values a mixed-precision framework keeps between layers
        /// (the embedding output, each norm's output, each sublayer's output
        /// and the residual stream, the final norm's output, and the
        /// gradients flowing back through the same places) are rounded to
        /// it; weights, gradients of weights and Adam stay f32, and kernels
        /// compute in f32. f16 adds dynamic loss scaling (PyTorch
        /// GradScaler's defaults: scale 65536, halved and the step skipped
        /// on an inf/NaN gradient, doubled after 2000 good steps).
        #[serde(default, skip_serializing_if = "Dtype::is_f32")]
        pub dtype: Dtype => Flag::Choice(Dtype::names),
        /// With `--data bigram-backcopy`: the number k of triggers, the k
        /// most frequent characters (default 3).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub backcopy_triggers: Option<usize> => Flag::Num,
        /// Fine-tune a pretrained model: a Hugging Face folder or a GGUF
        /// file (dequantised to f32 master weights). Its architecture is
        /// the model (the model flags are refused, but for --seq, the
        /// training sequence length: default 256 or the model's context),
        /// its weights the starting point, and its tokenizer reads the text
        /// (--data, default the bundled Shakespeare).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub from: Option<String> => Flag::Text,
        /// With --from and an insertion (--attn-gate, --attn-kind
        /// sink-logit): the inserted parameters (the gate's W_g, the sink
        /// logits) learn at this multiple of --lr (default 1: Adam moves a
        /// parameter about lr a step, so a sink logit started at -16 needs
        /// a rate of its own to act within a short fine-tune).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub inserted_lr_mult: Option<f32> => Flag::Num,
    }
}

impl TrainConfig {
    /// Defaults for a model family.
    pub fn defaults(model: ModelKind) -> TrainConfig {
        let toy = model == ModelKind::Toy;
        TrainConfig {
            model: ModelConfig::defaults(model),
            data: None,
            toy_noise: 0.1,
            toy_eval_noise: None,
            bos_byte: None,
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
            dtype: Dtype::F32,
            backcopy_triggers: None,
            from: None,
            inserted_lr_mult: None,
        }
    }

    /// Whether position 0 always holds the same token (`bos_byte`, or
    /// Bigram-Backcopy's BOS): such runs log the sink measures.
    pub fn fixed_first_token(&self) -> bool {
        self.model.kind == ModelKind::Gpt && (self.bos_byte.is_some() || self.backcopy())
    }

    /// Whether the data is Bigram-Backcopy.
    pub fn backcopy(&self) -> bool {
        self.data.as_deref() == Some(BACKCOPY)
    }

    /// Every option's field description: the model's, then the training ones.
    pub fn fields() -> impl Iterator<Item = &'static Field> {
        ModelConfig::FIELDS
            .iter()
            .chain(TrainConfig::FIELDS.iter().filter(|f| f.key != "model"))
    }

    /// Defaults, then `overrides` (a JSON object of option -> value; keys
    /// may use '-' or '_'). The model family is taken from the overrides
    /// first. Unknown keys and bad values are one-line errors that name the
    /// option and the value.
    pub fn from_overrides(overrides: &Map<String, Value>) -> Result<TrainConfig> {
        let mut ov = Map::new();
        for (k, v) in overrides {
            let key = k.replace('-', "_");
            if ov.insert(key.clone(), v.clone()).is_some() {
                return Err(format!(
                    "option {key} is given twice (as {key} and as {})",
                    key.replace('_', "-")
                )
                .into());
            }
        }
        let kind = match ov.get("model") {
            Some(Value::String(s)) => s.parse::<ModelKind>()?,
            Some(other) => return Err(format!("model must be a string (got {other})").into()),
            // A pretrained model is a decoder: the GPT's training defaults.
            None if ov.contains_key("from") => ModelKind::Gpt,
            None => ModelKind::Toy,
        };
        let base = serde_json::to_value(TrainConfig::defaults(kind)).expect("config serialises");
        let mut obj = base.as_object().expect("an object").clone();
        let known: Vec<&str> = TrainConfig::fields().map(|f| f.key).collect();
        for (k, v) in ov {
            // Fields at their default may be left out of the serialised
            // config, so the field table says which keys exist.
            if !known.contains(&k.as_str()) {
                return Err(format!("unknown option '{k}' (known: {})", known.join(", ")).into());
            }
            let v = match (k.as_str(), v) {
                // 1/sqrt(2L), once the layers are known.
                ("branch_scale", Value::String(s)) if s == "invsqrt" => Value::Null,
                (_, Value::Null) => {
                    return Err(format!("option {k} has no value (null)").into());
                }
                (_, v) => {
                    // Check the value alone, so that the error names it.
                    let mut one = base.as_object().expect("an object").clone();
                    one.insert(k.clone(), v.clone());
                    if let Err(e) = serde_json::from_value::<TrainConfig>(Value::Object(one)) {
                        let e = e.to_string();
                        return Err(format!(
                            "bad value for {k}: {v} ({})",
                            e.split(" at line").next().unwrap_or(&e)
                        )
                        .into());
                    }
                    v
                }
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
        let mut cfg: TrainConfig = serde_json::from_value(Value::Object(obj))
            .map_err(|e| format!("bad option value: {e}"))?;
        if let Some(from) = cfg.from.clone() {
            cfg.model = pretrained_model(&from, overrides)?;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// This config changed by `f`, then checked: how code (the experiments)
    /// builds a run's settings, so that a misspelt option does not compile.
    pub fn with(&self, f: impl FnOnce(&mut TrainConfig)) -> Result<TrainConfig> {
        let mut c = self.clone();
        f(&mut c);
        c.validate()?;
        Ok(c)
    }

    /// The settings that differ from the model family's defaults, with the
    /// family (`model`) always: the options of `normlab train` that rebuild
    /// this config, as a JSON object whose numbers keep their f32 decimal
    /// form.
    pub fn overrides(&self) -> Value {
        let full = self.to_json_value();
        let base = TrainConfig::defaults(self.model.kind).to_json_value();
        let mut changed: Map<String, Value> = full
            .as_object()
            .expect("config is an object")
            .iter()
            .filter(|(k, v)| base.get(k.as_str()) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        changed.insert("model".into(), Value::from(self.model.kind.to_string()));
        Value::Object(changed)
    }

    /// Check that a stored config (`config.json`) has only known keys:
    /// serde cannot deny unknown fields of a flattened struct.
    pub fn check_keys(v: &Value) -> Result<()> {
        let known: Vec<&str> = TrainConfig::fields().map(|f| f.key).collect();
        if let Some(o) = v.as_object() {
            if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
                return Err(format!("unknown option '{k}'").into());
            }
        }
        Ok(())
    }

    /// Check everything; one-line messages.
    pub fn validate(&self) -> Result<()> {
        self.model.validate()?;
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
        for (name, v) in [
            ("toy_noise", Some(self.toy_noise)),
            ("toy_eval_noise", self.toy_eval_noise),
        ] {
            if let Some(v) = v.filter(|v| !(0.0..=1.0).contains(v)) {
                return Err(format!("{name} must be in [0, 1] (got {v})").into());
            }
        }
        if self.steps == 0 {
            return Err("steps must be at least 1".into());
        }
        if self.batch == 0 || self.shards == 0 {
            return Err("batch and shards must be at least 1".into());
        }
        if !self.batch.is_multiple_of(self.shards) {
            return Err(format!(
                "batch ({}) must be divisible by shards ({})",
                self.batch, self.shards
            )
            .into());
        }
        if self.eval_every == 0 || self.log_every == 0 {
            return Err("eval_every and log_every must be at least 1".into());
        }
        if self.eval_sequences == 0 {
            return Err("eval_sequences must be at least 1".into());
        }
        if self.model.kind == ModelKind::Toy && self.model.heads != 1 {
            return Err(format!(
                "heads applies to gpt models (the toy net's mixer has no heads; got {})",
                self.model.heads
            )
            .into());
        }

        if self.model.kind == ModelKind::Toy && self.model.vocab != 64 {
            return Err("the toy task has a vocabulary of 64".into());
        }
        if self.model.kind == ModelKind::Gpt && self.model.vocab != 256 && self.from.is_none() {
            return Err(
                "gpt models are byte-level: vocab must be 256 (a pretrained model's own: --from)"
                    .into(),
            );
        }
        if self.from.is_some() && (self.backcopy() || self.bos_byte.is_some()) {
            return Err("--from reads text with the model's tokenizer: --data bigram-backcopy and --bos-byte are byte-level".into());
        }
        if let Some(b) = self.bos_byte {
            if b > 255 {
                return Err(format!("bos_byte must be a byte, 0 to 255 (got {b})").into());
            }
            if self.model.kind == ModelKind::Toy {
                return Err("bos_byte applies to gpt models (the toy task has no text)".into());
            }
        }
        if let Some(f) = self.inserted_lr_mult {
            if !(f.is_finite() && f > 0.0) {
                return Err(format!("inserted_lr_mult must be a positive number (got {f})").into());
            }
            let m = &self.model;
            if self.from.is_none() || (m.attn_gate.is_none() && m.attn_kind != AttnKind::SinkLogit)
            {
                return Err("inserted_lr_mult applies to what --from inserts (--attn-gate, --attn-kind sink-logit)".into());
            }
        }
        if self.backcopy_triggers.is_some() && !self.backcopy() {
            return Err(format!("backcopy_triggers applies to --data {BACKCOPY}").into());
        }
        if self.backcopy() && self.bos_byte.is_some() {
            return Err(format!(
                "bos_byte does not apply to --data {BACKCOPY}, whose sequences start with their own BOS"
            )
            .into());
        }
        if self.model.kind == ModelKind::Toy && self.data.is_some() {
            return Err("--data applies to gpt models (the toy task is generated)".into());
        }
        Ok(())
    }

    /// The config as a JSON value whose numbers keep their f32 decimal form
    /// (0.95, not 0.949999988079071).
    pub fn to_json_value(&self) -> serde_json::Value {
        serde_json::from_str(&serde_json::to_string(self).expect("config serialises"))
            .expect("valid JSON")
    }

    /// Whether this machine can run the config: its memory estimate against
    /// the memory available, and evaluations that do not dwarf the training.
    /// Checked before anything is allocated (not by `validate`: a run folder
    /// made on a larger machine stays readable here).
    pub fn check_resources(&self) -> Result<()> {
        // Work: the evaluations may not dwarf the training itself.
        let evals = self.steps.div_ceil(self.eval_every) as f64 + 1.0;
        let eval_total = evals * self.eval_sequences_rounded() as f64;
        let train_total = self.steps as f64 * self.batch as f64;
        if eval_total > 1e6 && eval_total > 100.0 * train_total {
            return Err(format!(
                "evaluation would process {eval_total:.0} sequences ({} every {} steps), over 100 times the {train_total:.0} training sequences; lower eval_sequences or raise eval_every",
                self.eval_sequences, self.eval_every
            )
            .into());
        }
        crate::limits::check_memory(
            crate::limits::f32_bytes(self.memory_floats()),
            &format!(
                "training (batch {}, seq {}, d_model {}, {} layers, hidden {})",
                self.batch,
                self.model.seq,
                self.model.d_model,
                self.model.layers,
                self.model.hidden
            ),
        )?;
        Ok(())
    }

    /// An estimate of the floats a run of this config holds: parameters,
    /// their gradients (one set per shard and the sum), Adam's two moments,
    /// and every shard's activations.
    pub fn memory_floats(&self) -> f64 {
        let m = &self.model;
        let (d, h, l, v, t) = (
            m.d_model as f64,
            m.hidden as f64,
            m.layers as f64,
            m.vocab as f64,
            m.seq as f64,
        );
        let fc = if m.act.gated() { 2.0 * h } else { h };
        let params = l * (4.0 * d * d + d * fc + h * d + 12.0 * d) + 2.0 * v * d + t * d;
        let rows = self.batch as f64 * t;
        let attention_rows = if m.kind == ModelKind::Gpt {
            10.0 * d + m.heads as f64 * t
        } else {
            2.0 * d
        };
        let per_row = l * (12.0 * d + 3.0 * fc + attention_rows) + 2.0 * v + 8.0 * d;
        (4.0 + self.shards as f64) * params + rows * per_row
    }

    /// Held-out sequences actually evaluated (a multiple of batch).
    pub fn eval_sequences_rounded(&self) -> usize {
        self.eval_sequences.div_ceil(self.batch).max(1) * self.batch
    }
}

/// `--from`'s model: the pretrained decoder's configuration lowered into
/// normlab's (`model::pretrained`), at the `seq` the overrides give (256,
/// or the model's context when shorter), with what `--attn-gate` and
/// `--attn-kind sink-logit` insert (started function-preserving); any other
/// model option is refused, since the file defines the architecture.
fn pretrained_model(from: &str, overrides: &Map<String, Value>) -> Result<ModelConfig> {
    let model_keys: Vec<&str> = ModelConfig::FIELDS.iter().map(|f| f.key).collect();
    // Keys as the field table spells them (a TOML file or a grid may write
    // attn-gate for attn_gate).
    let overrides: Map<String, Value> = overrides
        .iter()
        .map(|(k, v)| (k.replace('-', "_"), v.clone()))
        .collect();
    let value = |k: &str| overrides.get(k);
    if let Some(k) = overrides.keys().find(|k| {
        model_keys.contains(&k.as_str())
            && !matches!(k.as_str(), "seq" | "attn_gate" | "attn_kind")
            && !(k.as_str() == "model" && value(k) == Some(&Value::from("gpt")))
    }) {
        return Err(format!(
            "--{} would change the architecture of the model --from reads (with --from: --seq, and --attn-gate or --attn-kind sink-logit to insert one)",
            k.replace('_', "-")
        )
        .into());
    }
    let parse =
        |k: &str| -> Result<Option<Value>> { Ok(value(k).filter(|v| !v.is_null()).cloned()) };
    let gate: Option<OutputGate> = match parse("attn_gate")? {
        Some(v) => {
            Some(serde_json::from_value(v).map_err(|e| format!("bad value for attn-gate: {e}"))?)
        }
        None => None,
    };
    let kind: AttnKind = match parse("attn_kind")? {
        Some(v) => {
            serde_json::from_value(v).map_err(|e| format!("bad value for attn-kind: {e}"))?
        }
        None => AttnKind::Softmax,
    };
    if !matches!(kind, AttnKind::Softmax | AttnKind::SinkLogit) {
        return Err(format!(
            "--attn-kind {} cannot be inserted into a pretrained model (it would change what every head computes); with --from: sink-logit",
            kind.name()
        )
        .into());
    }
    let insert = crate::model::pretrained::Insert {
        gate,
        sink_logit: kind == AttnKind::SinkLogit,
    };
    let seq = match overrides.get("seq") {
        Some(v) => v
            .as_u64()
            .ok_or_else(|| format!("bad value for seq: {v}"))? as usize,
        None => 256,
    };
    let m = crate::model::decoder::Decoder::open(std::path::Path::new(from))?;
    crate::model::pretrained::lower_config_with(&m, seq, insert)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ov(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    /// `d-model` and `d_model` are one option: a file giving both is
    /// refused, not read as one of them.
    #[test]
    fn an_option_given_under_both_spellings_is_refused() {
        let mut m = Map::new();
        m.insert("d-model".into(), Value::from(32));
        m.insert("d_model".into(), Value::from(64));
        let e = TrainConfig::from_overrides(&m).err().unwrap().to_string();
        assert!(e.contains("d_model is given twice"), "{e}");
    }

    #[test]
    fn overrides_and_errors() {
        let c = TrainConfig::from_overrides(&ov(
            json!({"model": "gpt", "d-model": 64, "heads": 4, "lr": 0.003}),
        ))
        .unwrap();
        assert_eq!(
            (c.model.kind, c.model.d_model, c.lr),
            (ModelKind::Gpt, 64, 0.003)
        );
        let c = TrainConfig::from_overrides(&ov(json!({"layers": 8, "branch_scale": "invsqrt"})))
            .unwrap();
        assert!((c.model.branch_scale - 0.25).abs() < 1e-7);
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

    #[test]
    fn typed_configs_match_the_overrides_they_print() {
        let base = TrainConfig::defaults(ModelKind::Gpt);
        let c = base
            .with(|c| {
                c.model.layers = 2;
                c.lr = 3e-3;
            })
            .unwrap();
        let o = c.overrides();
        assert_eq!(o, json!({"model": "gpt", "layers": 2, "lr": 0.003}));
        // The printed overrides rebuild the same config.
        let back = TrainConfig::from_overrides(o.as_object().unwrap()).unwrap();
        assert_eq!(back, c);
        assert_eq!(base.overrides(), json!({"model": "gpt"}));
        // `with` checks what it built, as the flags are checked.
        let e = base.with(|c| c.batch = 5).unwrap_err().to_string();
        assert!(e.contains("divisible"), "{e}");
    }
}
