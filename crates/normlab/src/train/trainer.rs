//! The training loop's state and one optimisation step: data -> shards
//! (forward + backward in parallel) -> gradients summed in shard order ->
//! divergence check -> clipping -> Adam(W); plus evaluation on the held-out
//! split and the per-step diagnostics (loss, gradient norms, residual-stream RMS,
//! update sizes; the run folder's format is `folder.rs`'s).

use crate::error::Result;
use crate::kernels::buf::AlignedBuf;
use crate::model::{Model, ModelKind, Workspace};
use crate::train::backcopy::{Backcopy, Target};
use crate::train::config::TrainConfig;
use crate::train::data::{Data, TextData};
use crate::train::loss_scale::LossScaler;
use crate::train::optim::{clip_grad_norm, grad_norm_per_block, Adam, Schedule};
use crate::train::record::StepRecord;
use crate::train::toy_task::ToyTask;
use rayon::prelude::*;
use std::path::Path;

/// Everything a running training holds.
pub struct Trainer {
    /// Settings.
    pub cfg: TrainConfig,
    /// Model structure.
    pub model: Model,
    /// Parameters.
    pub params: AlignedBuf,
    /// Optimiser state.
    pub opt: Adam,
    /// Learning-rate schedule.
    pub sched: Schedule,
    /// Training and held-out data.
    pub data: Data,
    /// Steps completed.
    pub step: usize,
    shards: Vec<Workspace>,
    grads: AlignedBuf,
    /// `grads` is all zeros (after an optimizer step, which consumes them).
    grads_zero: bool,
    /// Parameters that stay at their init ([`Model::frozen`]).
    frozen: Vec<crate::params::ParamRef>,
    /// The run's own threads: every parallel loop of a step runs here (the
    /// optimizer included), never on rayon's global pool, so that runs side
    /// by side in one sweep process do not share threads.
    pool: std::sync::Arc<rayon::ThreadPool>,
    threads: usize,
    /// Dynamic loss scaling (`--dtype f16` only).
    pub scaler: Option<LossScaler>,
}

/// Load the data a config asks for.
pub fn load_data(cfg: &TrainConfig) -> Result<Data> {
    if let Some(from) = &cfg.from {
        let m = crate::model::decoder::Decoder::open(Path::new(from))?;
        return token_data(cfg, &m);
    }
    match cfg.model.kind {
        ModelKind::Toy => Ok(Data::Toy(ToyTask::with_eval_noise(
            cfg.seed,
            cfg.toy_noise,
            cfg.toy_eval_noise.unwrap_or(cfg.toy_noise),
        ))),
        ModelKind::Gpt if cfg.backcopy() => Ok(Data::Backcopy(Box::new(Backcopy::bundled(
            cfg.backcopy_triggers
                .unwrap_or(crate::train::backcopy::DEFAULT_TRIGGERS),
            cfg.seed,
            cfg.model.seq,
        )?))),
        ModelKind::Gpt => {
            let text = match &cfg.data {
                Some(p) => TextData::load(Path::new(p), cfg.seed, cfg.model.seq)?,
                None => TextData::from_bytes(
                    "shakespeare.txt (bundled)".into(),
                    crate::io::BUNDLED_TEXT.to_vec(),
                    cfg.seed,
                    cfg.model.seq,
                )?,
            };
            Ok(Data::Text(TextData {
                bos: cfg.bos_byte.map(|b| b as u8),
                ..text
            }))
        }
    }
}

/// The run's text as the pretrained model `m` (`--from`) reads it.
fn token_data(cfg: &TrainConfig, m: &crate::model::decoder::Decoder) -> Result<Data> {
    let (name, text) = match &cfg.data {
        Some(p) => {
            let bytes = crate::io::read(Path::new(p))?;
            let text = String::from_utf8(bytes)
                .map_err(|_| format!("{p}: a pretrained model's tokenizer reads UTF-8 text"))?;
            (p.clone(), text)
        }
        None => (
            "shakespeare.txt (bundled)".to_string(),
            String::from_utf8_lossy(crate::io::BUNDLED_TEXT).into_owned(),
        ),
    };
    let ids = m.encode(&text)?;
    let from = cfg.from.clone().unwrap_or_default();
    // A tokenizer that puts BOS first: every window begins with it.
    let bos = m.bos.filter(|b| ids.first() == Some(b));
    let data = crate::train::data::TokenData::new(
        (name, from),
        ids,
        m.cfg.vocab,
        cfg.seed,
        cfg.model.seq,
    )?;
    Ok(Data::Tokens(crate::train::data::TokenData { bos, ..data }))
}

/// The model, its starting parameters and the data: fresh ones, or
/// (`--from`) the pretrained model's, lowered into normlab's block
/// description, with its tokenizer reading the text.
fn start(cfg: &TrainConfig) -> Result<(Model, AlignedBuf, Data)> {
    let Some(from) = &cfg.from else {
        let model = Model::new(&cfg.model)?;
        let params = model.init_params(cfg.seed);
        return Ok((model, params, load_data(cfg)?));
    };
    let m = crate::model::decoder::Decoder::open(Path::new(from))?;
    let data = token_data(cfg, &m)?;
    let insert = crate::model::pretrained::Insert::of(&cfg.model);
    let (model, params) = crate::model::pretrained::lower_with(&m, cfg.model.seq, insert)?;
    if model.cfg != cfg.model {
        return Err(format!(
            "{from} no longer lowers to the model this run's config.json describes (the file changed?)"
        )
        .into());
    }
    Ok((model, params, data))
}

impl Trainer {
    /// A fresh run: initialised parameters (or a pretrained model's),
    /// zero optimiser state.
    pub fn new(cfg: &TrainConfig, threads: usize) -> Result<Trainer> {
        cfg.validate()?;
        cfg.check_resources()?;
        let (model, params, data) = start(cfg)?;
        if data.vocab() != cfg.model.vocab {
            return Err(format!(
                "data has vocabulary {} but the model {}",
                data.vocab(),
                cfg.model.vocab
            )
            .into());
        }
        let mut opt = Adam::new(
            &model.layout,
            cfg.optimizer,
            cfg.beta1,
            cfg.beta2,
            cfg.adam_eps,
            cfg.weight_decay,
            cfg.wd_norm_gains,
        );
        if let Some(f) = cfg.inserted_lr_mult {
            opt.scale_lr(&crate::model::pretrained::inserted(&model), f);
        }
        let sched = Schedule {
            lr: cfg.lr,
            warmup: cfg.warmup,
            total: cfg.steps,
            kind: cfg.schedule,
            min_lr_frac: cfg.min_lr_frac,
        };
        let per = cfg.batch / cfg.shards;
        let shards = (0..cfg.shards)
            .map(|_| {
                let mut ws = model.workspace(per, cfg.model.seq);
                ws.set_storage(cfg.dtype);
                ws
            })
            .collect();
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| format!("thread pool: {e}"))?;
        let pool = std::sync::Arc::new(pool);
        let grads = model.layout.zeros();
        let frozen = model.frozen();
        Ok(Trainer {
            cfg: cfg.clone(),
            model,
            params,
            opt,
            sched,
            data,
            step: 0,
            shards,
            grads,
            grads_zero: true,
            frozen,
            pool,
            threads,
            scaler: (cfg.dtype == crate::precision::Dtype::F16).then(LossScaler::new),
        })
    }

    /// Threads in use.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Loss above which (or non-finite) a run counts as diverged: 2 ln(vocab).
    pub fn divergence_bound(&self) -> f64 {
        2.0 * (self.cfg.model.vocab as f64).ln()
    }

    /// Tokens per optimisation step.
    pub fn tokens_per_step(&self) -> usize {
        self.cfg.batch * self.cfg.model.seq
    }

    /// One optimisation step. Returns the record and whether the run
    /// diverged at this step (then no update was applied).
    pub fn train_step(&mut self, want_stats: bool) -> (StepRecord, bool) {
        let pool = std::sync::Arc::clone(&self.pool);
        pool.install(|| self.step_in_pool(want_stats))
    }

    /// [`Trainer::train_step`]'s body, on one of the run's threads (so its
    /// parallel loops use the run's pool).
    fn step_in_pool(&mut self, want_stats: bool) -> (StepRecord, bool) {
        let step = self.step;
        let lr = self.sched.lr_at(step);
        let (per, t) = (self.cfg.batch / self.cfg.shards, self.cfg.model.seq);
        let total_tokens = (self.cfg.batch * t) as f32;
        let (model, params, data) = (&self.model, &self.params, &self.data);
        let track = want_stats;
        let loss_scale = self.scaler.map_or(1.0, |s| s.scale);
        // 1/tokens in f32 as always; the loss scale is a power of two, so
        // the product is exact (and f32/bf16 runs keep their bits).
        let backward_scale = loss_scale as f32 * (1.0 / total_tokens);
        self.shards.par_iter_mut().enumerate().for_each(|(s, ws)| {
            for i in 0..per {
                let r = i * t..(i + 1) * t;
                data.train_sequence(
                    step as u64,
                    s * per + i,
                    t,
                    &mut ws.tokens[r.clone()],
                    &mut ws.targets[r],
                );
            }
            ws.track_paths(track);
            ws.diagnose_norms(want_stats);
            model.forward(params, ws);
            model.backward(params, ws, backward_scale);
        });
        let loss = self.shards.iter().map(|w| w.loss_sum).sum::<f64>() / total_tokens as f64;
        // Sum shard gradients in shard order (parallel over elements); one
        // shard's gradients are taken as they are (a buffer swap: backward
        // overwrites the shard's buffer next step).
        if self.shards.len() == 1 {
            std::mem::swap(&mut self.grads, &mut self.shards[0].grads);
            // The buffer handed to the shard was zeroed by the last optimizer step.
            self.shards[0].grads_zero = std::mem::replace(&mut self.grads_zero, false);
        } else {
            let shards = &self.shards;
            let chunk = 16 * 1024;
            self.grads
                .par_chunks_mut(chunk)
                .enumerate()
                .for_each(|(c, g)| {
                    let off = c * chunk;
                    let n = g.len();
                    g.copy_from_slice(&shards[0].grads[off..off + n]);
                    for ws in &shards[1..] {
                        for (a, &b) in g.iter_mut().zip(&ws.grads[off..off + n]) {
                            *a += b;
                        }
                    }
                });
        }
        // f16: unscale, or skip the step when the scaled gradient overflowed.
        let skipped = match &mut self.scaler {
            Some(sc) => !sc.update(&mut self.grads),
            None => false,
        };
        // Frozen parameters (no_beta) get no gradient, so Adam leaves them
        // where they are (they are never weight-decayed).
        for r in &self.frozen {
            r.get_mut(&mut self.grads).fill(0.0);
        }
        let nb = self.cfg.model.layers;
        let d = self.cfg.model.d_model as f64;
        let residual_rms: Vec<f64> = (0..nb)
            .map(|b| {
                (self.shards.iter().map(|w| w.residual_sumsq[b]).sum::<f64>()
                    / (total_tokens as f64 * d))
                    .sqrt()
            })
            .collect();
        let grad_norm_per_block = if want_stats {
            grad_norm_per_block(&self.model.layout, &self.grads, nb)
        } else {
            Vec::new()
        };
        let grad_norm = clip_grad_norm(&mut self.grads, self.cfg.clip);
        let mut rec = StepRecord {
            step: step + 1,
            loss,
            lr,
            grad_norm,
            grad_norm_per_block,
            residual_rms,
            update_ratio: None,
            update_ratio_per_block: Vec::new(),
            eval_loss: None,
            eval_loss_copy: None,
            eval_loss_bigram: None,
            attn_max_logit: Vec::new(),
            attn_entropy: Vec::new(),
            attn_sink: Vec::new(),
            stream_max: Vec::new(),
            stream_max_ratio: Vec::new(),
            stream_max_position: Vec::new(),
            ffn_max: Vec::new(),
            f16_overflow: Vec::new(),
            norm_alpha: Vec::new(),
            norm_saturation: Vec::new(),
            gate: Vec::new(),
            loss_scale: self.scaler.map(|_| loss_scale),
            skipped_steps: self.scaler.map(|s| s.skipped),
            streams: None,
            sinks: None,
        };
        if want_stats {
            rec.streams = self.model.stream_stats(&self.shards);
        }
        if want_stats {
            self.pointwise_and_gate_stats(&mut rec);
        }
        if want_stats && self.cfg.model.kind == crate::model::ModelKind::Gpt {
            for b in 0..nb {
                let caches: Vec<_> = self
                    .shards
                    .iter()
                    .filter_map(|w| w.blocks[b].mix.attention())
                    .collect();
                rec.attn_max_logit.push(
                    caches
                        .iter()
                        .map(|c| c.max_logit as f64)
                        .fold(f64::NEG_INFINITY, f64::max),
                );
                rec.attn_entropy.push(
                    caches.iter().map(|c| c.mean_entropy()).sum::<f64>()
                        / caches.len().max(1) as f64,
                );
            }
        }
        if want_stats {
            super::outliers::fill(&self.model, &self.shards, self.cfg.model.seq, &mut rec);
            if self.cfg.fixed_first_token() {
                rec.sinks = Some(super::outliers::sinks(&self.model, &self.shards));
            }
        }
        if !loss.is_finite() || !grad_norm.is_finite() {
            return (rec, true);
        }
        if skipped {
            // The overflowed gradient is gone (zeroed); no update this step.
            rec.grad_norm = f64::NAN;
            self.grads_zero = true;
            self.step += 1;
            return (rec, false);
        }
        if let Some(st) = self
            .opt
            .step(&mut self.params, &mut self.grads, lr, nb, want_stats)
        {
            rec.update_ratio = Some(st.update_ratio);
            rec.update_ratio_per_block = st.update_ratio_per_block;
        }
        self.grads_zero = true;
        self.step += 1;
        (rec, false)
    }

    /// Fill `rec`'s point-wise norm and gate diagnostics from the
    /// parameters and the last forward's norm statistics.
    fn pointwise_and_gate_stats(&self, rec: &mut StepRecord) {
        use crate::kernels::norm::ParamRole;
        use crate::nn::NormRole;
        let params = &self.params;
        for site in self.model.norms().filter(|s| s.role != NormRole::QkNorm) {
            let Some(alpha) = site.norm.param(ParamRole::Slope) else {
                continue;
            };
            rec.norm_alpha.push(f64::from(alpha.get(params)[0]));
            let (mut sum, mut rows) = (0f64, 0usize);
            for ws in &self.shards {
                if let Some(c) = ws.norm_cache(&site) {
                    let st = c.stats.chunks_exact(crate::kernels::norm::STATS);
                    rows += st.len();
                    sum += st.map(|r| f64::from(r[0])).sum::<f64>();
                }
            }
            rec.norm_saturation.push(sum / rows.max(1) as f64);
        }
        for sub in self.model.sublayers() {
            if let Some(g) = &sub.gate {
                let v = g.g.get(params);
                let ms =
                    v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>() / v.len() as f64;
                rec.gate.push(if v.len() == 1 {
                    f64::from(v[0])
                } else {
                    ms.sqrt()
                });
            }
        }
    }

    /// Mean loss on the held-out split.
    pub fn evaluate(&mut self) -> f64 {
        self.evaluate_parts().0
    }

    /// Mean loss on the held-out split and, for Bigram-Backcopy, its mean
    /// over the copy targets and over the bigram targets.
    pub fn evaluate_parts(&mut self) -> (f64, Option<[f64; 2]>) {
        let n = self.cfg.eval_sequences_rounded();
        let (per, t) = (self.cfg.batch / self.cfg.shards, self.cfg.model.seq);
        let rounds = n / self.cfg.batch;
        let (model, params, data) = (&self.model, &self.params, &self.data);
        let vocab = self.cfg.model.vocab;
        let mut total = 0f64;
        // Per kind: summed loss and count (copy, bigram).
        let mut parts = [(0f64, 0usize); 2];
        for r in 0..rounds {
            let sums: Vec<(f64, [(f64, usize); 2])> = self.pool.install(|| {
                self.shards
                    .par_iter_mut()
                    .enumerate()
                    .map(|(s, ws)| {
                        for i in 0..per {
                            let rr = i * t..(i + 1) * t;
                            data.eval_sequence(
                                r * self.cfg.batch + s * per + i,
                                t,
                                &mut ws.tokens[rr.clone()],
                                &mut ws.targets[rr],
                            );
                        }
                        let loss = model.forward(params, ws);
                        let mut kinds = [(0f64, 0usize); 2];
                        if let Data::Backcopy(bb) = data {
                            for (row, (seq, tgt)) in ws
                                .tokens
                                .chunks_exact(t)
                                .zip(ws.targets.chunks_exact(t))
                                .enumerate()
                            {
                                for (i, &y) in tgt.iter().enumerate() {
                                    let k = match bb.target_kind(seq, i) {
                                        Target::Copy => 0,
                                        Target::Bigram => 1,
                                        Target::First => continue,
                                    };
                                    let p = ws.probs()[(row * t + i) * vocab + y as usize];
                                    kinds[k].0 -= f64::from(p.max(f32::MIN_POSITIVE)).ln();
                                    kinds[k].1 += 1;
                                }
                            }
                        }
                        (loss, kinds)
                    })
                    .collect()
            });
            // The shards' losses summed first, then added (the order every
            // earlier run folder's held-out losses were computed in).
            total += sums.iter().map(|s| s.0).sum::<f64>();
            for (_, kinds) in sums {
                for (acc, k) in parts.iter_mut().zip(kinds) {
                    acc.0 += k.0;
                    acc.1 += k.1;
                }
            }
        }
        let split =
            matches!(self.data, Data::Backcopy(_)).then(|| parts.map(|(s, c)| s / c.max(1) as f64));
        (total / (n * t) as f64, split)
    }

    /// Shard workspaces (diagnostics read their caches after a step).
    pub fn shards(&self) -> &[Workspace] {
        &self.shards
    }
}
