//! Where each chapter departs from the lesson's own setting: what the
//! lesson gives, what normlab runs, why, and whether the verdict could
//! depend on it. Settings only (no measured numbers: those are in each
//! chapter's report). `book` writes it into findings.md; a test checks that
//! every registered experiment has a row.

/// One departure of one chapter.
#[derive(Clone, Copy, Debug)]
pub struct Departure {
    /// The experiment id.
    pub chapter: &'static str,
    /// The claims it concerns.
    pub claims: &'static str,
    /// The lesson's setting (or "not given").
    pub lesson: &'static str,
    /// normlab's setting.
    pub normlab: &'static str,
    /// Why.
    pub why: &'static str,
    /// Whether the verdict could depend on it: "no", "possibly: ..." or
    /// "yes: ...".
    pub depends: &'static str,
}

/// Every chapter's departures, in the book's order of claims.
pub static DEPARTURES: &[Departure] = &[
    Departure {
        chapter: "drift",
        claims: "C1",
        lesson: "d 64, 20 linear layers, x (4, 16, 64), no norm or residual; W = 0.3*randn (code) or N(0, 0.3^2/d) (printed), and 1.2x; LayerNorm after each; seed not given",
        normlab: "the same, both weight readings; normlab's own RNG, seed 0",
        why: "the lesson gives no seed",
        depends: "no",
    },
    Departure {
        chapter: "batch-dependence",
        claims: "C7",
        lesson: "not given (three failure modes named: other sequences and padding, a batch of one token, training vs inference)",
        normlab: "synthetic rows d 64, 8 sequences x 16 positions with per-sequence offsets, 4 padding positions each, running statistics from 50 batches",
        why: "the lesson gives no setting, so normlab builds a minimal batch that shows each failure mode",
        depends: "no",
    },
    Departure {
        chapter: "norm-stats",
        claims: "C5, C6",
        lesson: "C6: rows ~ N(1.5, 3^2), d not given; C5: a and c not given",
        normlab: "rows ~ N(1.5, 3^2), d 512, 4096 rows, unit gains; transforms x -> 3x and x -> x + 2",
        why: "the lesson gives no width or transform values; a wide row brings the statistics near their large-d limits",
        depends: "no",
    },
    Departure {
        chapter: "identity-path",
        claims: "C2",
        lesson: "one block, F = Linear(64,64)-GELU-Linear(64,64), PyTorch default init, x ~ N(0,1) (1, 64), loss sum(y^2), seed 3 (one PyTorch draw)",
        normlab: "the same block, init and loss over 200 seeds of normlab's RNG (median, quartiles, range)",
        why: "PyTorch's seed-3 draw cannot be reproduced outside PyTorch, so the spread over seeds is reported",
        depends: "possibly: one draw can only be placed in a range",
    },
    Departure {
        chapter: "identity-path",
        claims: "C2",
        lesson: "GELU in PyTorch (nn.GELU: the exact erf form)",
        normlab: "GELU, tanh form",
        why: "normlab implements the tanh form (GPT-2's); the two differ by under 1e-3",
        depends: "no",
    },
    Departure {
        chapter: "identity-path",
        claims: "C2",
        lesson: "deep stacks: not given (the gradient shrinks exponentially with depth without residuals)",
        normlab: "1-64 blocks of Linear(64,256)-GELU-Linear(256,64), N(0, 1/fan_in) init, 256 rows, loss sum(r*y), r ~ N(0,1)",
        why: "the lesson gives no deep-stack setting",
        depends: "no",
    },
    Departure {
        chapter: "residual-growth",
        claims: "C3",
        lesson: "12 one-sublayer Pre-LN blocks x + MLP(LayerNorm(x)), d 128, MLP 4d, PyTorch default init, x (2, 16, 128), seed 11 (one run), mean token L2 norm",
        normlab: "the same block, init, input shape and metric over 30 seeds of normlab's RNG (median and range per block)",
        why: "PyTorch's seed-11 draw cannot be reproduced, so the spread over seeds is reported",
        depends: "possibly: the lesson's single draw is judged against a median and range",
    },
    Departure {
        chapter: "residual-growth",
        claims: "C3",
        lesson: "GELU in PyTorch (nn.GELU: the exact erf form)",
        normlab: "GELU, tanh form",
        why: "normlab implements the tanh form; the two differ by under 1e-3",
        depends: "no",
    },
    Departure {
        chapter: "residual-growth",
        claims: "C3",
        lesson: "growth amplifies during training: model, data and steps not given",
        normlab: "a trained byte-level Shakespeare GPT (attention + MLP blocks), d 128, 12 blocks, AdamW lr 1e-3 cosine, 1000 steps, one seed (GPT-2 init; AdamW, weight decay 0.1, betas 0.9/0.95, gradient norm clipped at 1.0: docs/gpt.md)",
        why: "the lesson gives no training setting",
        depends: "yes: whether training amplifies the growth depends on model, data and run length",
    },
    Departure {
        chapter: "residual-growth",
        claims: "C3",
        lesson: "a Post-LN stream stays at sqrt(d): when it is measured is not given",
        normlab: "the trained Post-LN GPT of the same setting, with its trained norm gains",
        why: "normlab measures the stream after training",
        depends: "possibly: learned gains move a trained Post-LN stream off sqrt(d); at unit gains it sits there by construction",
    },
    Departure {
        chapter: "residual-growth",
        claims: "C20",
        lesson: "models named (GPT-2 ln_f, LLaMA norm); no test given",
        normlab: "the trained Pre-LN GPT with its final norm removed, and one trained without it",
        why: "the lesson gives no test, so normlab ablates its own GPT",
        depends: "no",
    },
    Departure {
        chapter: "depth-sim",
        claims: "C4",
        lesson: "course widget, N = 32 sublayers, gain 1; sublayer model, width and norm kind not given",
        normlab: "N = 32, gain 1, d 64, 64 rows; sublayer = random linear map W ~ N(0, g^2/d), pre-norm = unit-gain RMSNorm, f64",
        why: "the widget's sublayer model is unknown",
        depends: "possibly: the sizes depend on the sublayer model; the verdict uses only directions",
    },
    Departure {
        chapter: "collapse",
        claims: "C12",
        lesson: "toy net 20 layers (and 6, 12), Pre, Adam lr 1e-3 (and 1e-4), 3000 steps; task, width, data and seeds not given",
        normlab: "normlab's toy net (docs/toy-task.md: synthetic task, d 64, causal-mean mixer, no attention), 6/12/20 layers, 3000 steps, 3 seeds",
        why: "the lesson's toy task and net are not given",
        depends: "yes: whether a net without norms diverges depends on task, model and init",
    },
    Departure {
        chapter: "collapse",
        claims: "C12",
        lesson: "init not given",
        normlab: "both PyTorch's default (U(+-1/sqrt(fan_in))) and GPT-2's (N(0, 0.02^2)); the 20-layer net without norms also at lr 1e-4 .. 1e-2",
        why: "the lesson's init is unknown, so both are run, with a learning-rate sweep",
        depends: "possibly: the init decides where the net without norms diverges",
    },
    Departure {
        chapter: "collapse",
        claims: "C12",
        lesson: "losses 3.1 (no norm, 6 layers), ~2.4 normalised, 2.28 at 20 layers, on the lesson's task",
        normlab: "held-out loss on normlab's toy task (its own noise floor and unigram entropy)",
        why: "a different task puts the losses on another scale",
        depends: "no: only the directions are compared",
    },
    Departure {
        chapter: "lr-sensitivity",
        claims: "C13, C14",
        lesson: "toy net 12 and 30 layers, lr 1e-4 .. 1e-2, 3000 steps, warm-up 0 or 1000; task, width, init and seeds not given",
        normlab: "the same grid on normlab's toy net (d 64), PyTorch's default init (the lesson's toy net is a plain PyTorch model), Adam, constant lr, 3 seeds",
        why: "normlab's toy net stands in for the lesson's unspecified one",
        depends: "yes: where Post-LN diverges depends on model, task and init (until 2026-12-02 this chapter ran at GPT-2's init, whose 1/sqrt(2L) output projections steady Post-LN)",
    },
    Departure {
        chapter: "lr-sensitivity",
        claims: "C22",
        lesson: "a well-tuned Post-LN can match Pre-LN: model and tuning not given",
        normlab: "the best cell over lr x warm-up on the toy net, 12 and 30 layers, 3000 steps, 3 seeds",
        why: "normlab tunes over its own grid",
        depends: "possibly: matching depends on depth and on the tuning budget",
    },
    Departure {
        chapter: "warmup",
        claims: "C14",
        lesson: "toy net 12 layers, lr 1e-3, 1000 warm-up steps, 3000 steps",
        normlab: "byte-level Shakespeare GPT, 8 blocks, d 128, lr 1e-3 / 3e-3 / 1e-2, warm-up 0 or 100, 500 steps, constant lr after warm-up, 2 seeds (GPT-2 init; AdamW, weight decay 0.1, betas 0.9/0.95, gradient norm clipped at 1.0: docs/gpt.md)",
        why: "normlab also checks warm-up on its GPT (the toy setting is lr-sensitivity's)",
        depends: "yes: a GPT, 100 warm-up steps and 500 steps are not the lesson's toy setting",
    },
    Departure {
        chapter: "warmup",
        claims: "C16",
        lesson: "the course's small GPT (size, data, steps, seeds not given; not byte-level); lr 3e-3 with warm-up, 1e-2 and 1e-3 without",
        normlab: "byte-level Shakespeare GPT, 8 blocks, d 128, vocab 256, 500 steps, constant lr, warm-up 0 or 100, 2 seeds (GPT-2 init; AdamW, weight decay 0.1, betas 0.9/0.95, gradient norm clipped at 1.0: docs/gpt.md)",
        why: "normlab has no copy of the course's GPT or data",
        depends: "yes: where Post-LN stalls depends on model, data and depth",
    },
    Departure {
        chapter: "norm-kind",
        claims: "C15",
        lesson: "the course's small GPT; size, data, steps and seeds not given",
        normlab: "byte-level Shakespeare GPT, 4 blocks, d 128, Pre, AdamW lr 1e-3, 1000 steps, 2 seeds (GPT-2 init; AdamW, weight decay 0.1, betas 0.9/0.95, gradient norm clipped at 1.0: docs/gpt.md)",
        why: "normlab has no copy of the course's GPT or data",
        depends: "possibly: longer or larger runs are not tested",
    },
    Departure {
        chapter: "gain-decay",
        claims: "C17",
        lesson: "course widget; lr, decay and steps not given",
        normlab: "AdamW lr 3e-3, weight decay 0.1, no gradient, 5000 steps; then 4-block byte-level GPTs with decay on the gains, 2 seeds",
        why: "the widget's settings are not given, so common AdamW values are used",
        depends: "no",
    },
    Departure {
        chapter: "qk-norm",
        claims: "C18",
        lesson: "deep models, late loss spikes; model, depth and lr not given",
        normlab: "byte-level Shakespeare GPT, 4 blocks, d 128, lr 3e-3 and 1e-2, 1000 steps, 2 seeds, with and without QK-Norm; 100 warm-up steps, a cosine schedule and gradient clipping at 1.0 (docs/gpt.md), all of which damp loss spikes",
        why: "a small GPT at a high lr stands in for deep models",
        depends: "possibly: late spikes of deep models may not occur at 4 blocks and 1000 steps",
    },
    Departure {
        chapter: "placements",
        claims: "C19",
        lesson: "DeepNorm makes 1000-layer Post-LN trainable; Sandwich; no run setting given",
        normlab: "toy net 30 blocks (3000 steps) and byte-level GPT 4 blocks (1000 steps), lr 1e-3 and 1e-2, 2 seeds, 8 placements, GPT-2 init (its 1/sqrt(2L) output projections steady Post-LN on their own)",
        why: "CPU-sized models, far shallower than 1000 layers",
        depends: "possibly: DeepNorm's rescue is tested only where Post-LN fails at these depths",
    },
    Departure {
        chapter: "convert",
        claims: "C21",
        lesson: "LayerNorm weights into RMSNorm: drop beta, keep gamma, then fine-tune; model not given",
        normlab: "4-block byte-level GPTs (Pre, Post, Sandwich; 1000 steps); exact for Pre (centre the stream's writers, fold beta), else approximate plus distillation",
        why: "normlab shows where an exact conversion exists and calibrates by distillation, not fine-tuning",
        depends: "yes: the exact Pre-LN conversion is a method the lesson does not use",
    },
    Departure {
        chapter: "cure-all",
        claims: "C23",
        lesson: "not given (noise, bad labels, a bad schedule, too little capacity named only)",
        normlab: "toy net 12 layers, Pre, 2000 steps, 2 seeds; label noise 0.5, lr 1e-5, d 8 / hidden 32; no norm, LayerNorm, RMSNorm, GPT-2 init; every run scored on clean held-out targets, by its loss above the floor of a model that learned the rule and its training noise",
        why: "the lesson names the problems only, so normlab sets one version of each; clean targets keep the label noise's own entropy out of its cost",
        depends: "possibly: the problems' form and size are normlab's choices, and a cross-entropy excess is not the only way to score a problem's cost",
    },
    Departure {
        chapter: "precision",
        claims: "C8",
        lesson: "fp16/bf16; rows, width, magnitudes and kernels not given",
        normlab: "d 512 rows of magnitude 1e-8 .. 1e5 times N(0,1), bf16/f16 rounding emulated; naive (all half), upcast (f32 statistics) and normlab's kernel",
        why: "normlab builds a naive half-precision norm to show underflow beside f32-statistics kernels",
        depends: "possibly: underflow needs statistics kept in half precision",
    },
    Departure {
        chapter: "precision",
        claims: "C8",
        lesson: "in fp16 RMSNorm's output range is wider than LayerNorm's: inputs not given",
        normlab: "f16 outputs for rows c + N(0,1), offsets c 0, 10, 100, 1000, d 512",
        why: "the lesson gives no inputs, so offset rows are used",
        depends: "yes: other inputs could give another answer",
    },
    Departure {
        chapter: "precision-train",
        claims: "C8",
        lesson: "not given (the claim is about low-precision statistics and overflow)",
        normlab: "activations and gradients stored in bf16/f16; weights, Adam and kernel arithmetic f32; f16 loss scaling; toy 8 blocks, GPT d 64 4 blocks; 2 seeds",
        why: "mixed-precision storage as frameworks use it",
        depends: "yes: with f32 statistics the claim's failure modes cannot arise",
    },
    Departure {
        chapter: "llm",
        claims: "C3, C6, C8, C17, C18, C19, C20, C21",
        lesson: "not given (GPT-2 and LLaMA named only as examples; the course's anchor model uses zero-centred RMSNorm and QK-Norm)",
        normlab: "SmolLM2-135M-Instruct (Q4_1 GGUF) and Gemma 3 270M (Q4_K_M GGUF), weights dequantised to f32, f32 inference, 16 Shakespeare lines, 512 held-out tokens",
        why: "the small quantised GGUF files are what normlab reads; Gemma 3 has the anchor model's zero-centred gains, QK-Norm and sandwich norms",
        depends: "possibly: 4- and 5-bit weights perturb activations and losses",
    },
    Departure {
        chapter: "llm",
        claims: "C3",
        lesson: "12 one-sublayer Pre-LN blocks at init, d 128; amplified by training, model not given",
        normlab: "trained SmolLM2 (30 Pre-RMSNorm blocks) and Gemma 3 (18 sandwich blocks) with attention; the mean token norm, with the RMS over all elements and the median token norm beside it",
        why: "real trained models show what training does to the stream",
        depends: "yes: trained models with massive activations are not the lesson's stack at init",
    },
    Departure {
        chapter: "llm",
        claims: "C3",
        lesson: "amplified by training: model not given",
        normlab: "normlab's own Pre-RMSNorm byte-level GPT, d 128, 12 blocks, 1000 steps, lr 1e-3, one seed, for comparison",
        why: "a small GPT of SmolLM2's design trained here",
        depends: "no",
    },
    Departure {
        chapter: "llm",
        claims: "C6",
        lesson: "rows ~ N(1.5, 3^2)",
        normlab: "real rows entering the models' RMSNorms",
        why: "the claim checked on real activations",
        depends: "yes: real rows may lack the offset that makes RMSNorm's output non-zero-mean",
    },
    Departure {
        chapter: "llm",
        claims: "C8",
        lesson: "fp16/bf16, eps chosen per precision",
        normlab: "f32 inference, eps from the file; the smallest row mean square entering any norm over eps, the held-out loss with eps taken out of every norm, and the largest activation over f16's 65,504",
        why: "normlab's decoder runs in f32",
        depends: "possibly: only the eps-versus-mean-square part and the stream's f16 range are tested",
    },
    Departure {
        chapter: "llm",
        claims: "C17, C19",
        lesson: "course widget (C17); DeepNorm and Sandwich on deep Post-LN (C19)",
        normlab: "where two trained models' gains sit, and what their sublayers write, side by side; inconclusive by construction",
        why: "a checkpoint holds no record of its weight decay, and the models differ in more than placement",
        depends: "yes: descriptive only",
    },
    Departure {
        chapter: "llm",
        claims: "C18",
        lesson: "deep models, late loss spikes; model and lr not given",
        normlab: "Gemma 3's largest attention logit with its q/k norms and without them on the same queries and keys (the model was trained with them)",
        why: "removing a trained model's norm is the one causal comparison a checkpoint allows",
        depends: "possibly: without its norms the model is outside what it was trained for; loss spikes are not tested",
    },
    Departure {
        chapter: "llm",
        claims: "C20",
        lesson: "GPT-2 ln_f and LLaMA norm named; no test given",
        normlab: "each model with its final RMSNorm removed, 512 held-out tokens",
        why: "real models show the bug's cost",
        depends: "no",
    },
    Departure {
        chapter: "llm",
        claims: "C21",
        lesson: "LayerNorm weights into an RMSNorm model (drop beta, keep gamma, fine-tune)",
        normlab: "in reverse: every RMSNorm of each model replaced by a LayerNorm keeping its gain, no fine-tuning",
        why: "the real models are RMSNorm-based",
        depends: "possibly: LayerNorm -> RMSNorm on a real model is not in this verdict",
    },
    Departure {
        chapter: "real-causes",
        claims: "C24",
        lesson: "a clamp on the SwiGLU output of a trained model; Sun et al. 2024 zero the massive activations of LLaMA2-7B and larger",
        normlab: "SmolLM2-135M-Instruct and Gemma 3 270M (GGUF, dequantised to f32): the massive values at position 0 of the first block that holds them set to zero and to their mean over 64 sequences of 64 tokens; held-out loss on two 256-token sequences",
        why: "the small models normlab reads on this machine; zeroing is the limit of a clamp that cuts the values off",
        depends: "possibly: models a hundred times smaller than Sun et al.'s, and a 512-token held-out text",
    },
    Departure {
        chapter: "real-causes",
        claims: "C26",
        lesson: "the output gate trained from scratch (Qiu et al. 2025, 1.7B dense and 15B MoE); the sink itself not ablated",
        normlab: "attention to position 0 removed (rows renormalised) in every block and in each block alone on the two pretrained models; the gate added to a pretrained model and fine-tuned is not yet run",
        why: "a trained model's reliance on its sink is the causal question a checkpoint allows; the gate fine-tune needs the pretrained decoder's backward with the gate inserted",
        depends: "possibly: removing the sink tests reliance on it, not whether a gate would remove it",
    },
    Departure {
        chapter: "no-norm",
        claims: "C12",
        lesson: "toy net 20 layers, Pre, Adam lr 1e-3, 3000 steps",
        normlab: "toy net 12 and 30 layers, 1000 steps, lr 1e-4 / 1e-3 / 1e-2, GPT-2 init, 3 seeds; byte-level GPT 4 blocks, 600 steps, one seed",
        why: "a grid of 9 designs x 3 rates x 2 depths kept to CPU size",
        depends: "possibly: a divergence after step 1000 (toy) or 600 (GPT) would be missed",
    },
    Departure {
        chapter: "dyt-recipe",
        claims: "C12",
        lesson: "toy net 20 layers with no norm, 3000 steps; DyT and its recipe are not in the lesson",
        normlab: "byte-level GPT 4 blocks, d 128, 600 steps, lr 1e-3 only, 2 seeds; DyT variants (attention alpha 1.0, others 0.5) beside Pre-LN",
        why: "normlab checks whether statistics-free DyT can replace the norm in its GPT",
        depends: "yes: one learning rate and 600 steps",
    },
    Departure {
        chapter: "depth-use",
        claims: "C22",
        lesson: "not given (later layers' relative contribution shrinks)",
        normlab: "toy net 30 blocks, lr 1e-3, 2000 steps, 2 seeds, 5 designs; per-block relative update and skip cost, GPT-2 init",
        why: "the lesson gives no setting, so the deepest toy net is used",
        depends: "possibly: a toy net with a mean mixer; the gap may differ in a trained LLM",
    },
    Departure {
        chapter: "residual-routing",
        claims: "C25, C27",
        lesson: "C25: 64 layers x 2 sublayers = 128 unit-variance writes, sqrt(129); C27: no setting (the designs are named as the answers to one stream's bottleneck, 4 streams)",
        normlab: "C25: the arithmetic measured on 2^18 elements, then the ratio of the stream's mean square to the embedding's plus the writes' by depth in the trained Pre-LN GPT and toy net, SmolLM2 and Gemma 3; C27: toy net 30 blocks, 3000 steps, 3 seeds and GPT 12 blocks, 1000 steps (batch 16, 100 warm-up steps), 2 seeds, lr 1e-3 and 1e-2; Pre-LN against HC (static, dynamic) and mHC with 4 streams and block AttnRes with about 8 blocks; equal wall time read from each run's held-out curve at the step it reaches in Pre-LN's time",
        why: "the lesson gives no training setting for C27, so the chapters' own toy net and GPT are used; separate shorter runs per design for equal time would make the run ids depend on a measured time",
        depends: "yes: small models and short runs (the papers' gains are at billions of parameters); the GPT's equal-time losses are read before its cosine schedule has decayed, which favours Pre-LN",
    },
    Departure {
        chapter: "swiglu-clamp",
        claims: "C24",
        lesson: "SiLU(10) x 10 = 99.995; gpt-oss clamps at 7, DeepSeek V4 at 10; no training setting",
        normlab: "byte-level GPT with SwiGLU (the GPT chapters' size and 1000 steps), lr 3e-3 and 1e-2, activations stored in f32, bf16 and f16, clamp off / 10 / 7 in DeepSeek V4's form (gpt-oss's 7 without its sigmoid(1.702 g) and up + 1), 1 seed; values beyond f16's range counted on logged steps; SmolLM2 (SwiGLU) and Gemma 3 (GeGLU, clamped alike) clamped without retraining on 512 held-out tokens",
        why: "the lesson gives no training setting; one seed keeps the 18-run grid inside the book's budget (the verdict rests on bounds and sizes, not on small loss gaps)",
        depends: "yes: a small model trained briefly may never reach the clamps, so the cost of training with them can only show where they bite",
    },
    Departure {
        chapter: "attention-sink",
        claims: "C26",
        lesson: "Qwen's 15B MoE model (46.7% of attention on the first token, 4.8% with the gate), trained on 3.5T tokens",
        normlab: "GPTs on Bigram-Backcopy (Guo et al. 2024's task: BOS at position 0, copy after the 3 most frequent characters, else a character bigram), d 64, 3000 steps, batch 32, AdamW lr 1e-3, 1 layer with 1 head and 2 layers with 2 heads, 3 seeds; the ungated softmax against the elementwise and headwise gates, a learned sink logit, sigmoid and ReLU attention; the 4-block byte-level GPT with a fixed first byte, one seed; SmolLM2 and Gemma 3 measured beside them (not retrained)",
        why: "a sink forms only after enough training, which a CPU reaches on this task in seconds but not on text; the decision rule was fixed in claims.rs before the runs",
        depends: "yes: a synthetic task and models of one or two layers, not a 15B MoE on 3.5T tokens; the gate is judged by direction and size beyond the seed spread against the uniform share, not against 46.7% -> 4.8%",
    },
    Departure {
        chapter: "speed",
        claims: "C9",
        lesson: "d 4096, 32 layers, 2 norms per layer; the reference model's size not given",
        normlab: "a model built at d 4096, 32 layers, hidden 11008, vocab 32000",
        why: "the counts follow from d and layers; the share is computed on normlab's model",
        depends: "no",
    },
    Departure {
        chapter: "speed",
        claims: "C10",
        lesson: "operator: CPU, 1 thread, median of 2000 calls, shapes not given; model: the RMSNorm paper's Transformers",
        normlab: "the book's CPU, 1 thread, interleaved rounds over 6 shapes; a step of the byte-level GPT (d 128, 8 blocks)",
        why: "measured on the book's machine with normlab's kernels",
        depends: "possibly: speed-ups depend on CPU, SIMD level and kernel code",
    },
    Departure {
        chapter: "speed",
        claims: "C11",
        lesson: "Apple GPU (the course's device), 32x256x256 fwd+bwd, median of 200; PyTorch's fused LayerNorm vs its RMSNorm and a hand-written one",
        normlab: "CPU, 1 thread: normlab's fused LayerNorm vs an unfused RMSNorm it builds (one pass per operation), 6 shapes",
        why: "no Apple GPU; the unfused case shows the effect of fusion",
        depends: "yes: the verdict rests on the deliberately unfused RMSNorm",
    },
    Departure {
        chapter: "cross-check",
        claims: "C1, C2, C3, C5, C6, C12, C16, C24-C27",
        lesson: "PyTorch, one seed per setting (C1, C2, C3), inputs as each claim gives them; C12: a 20-layer toy net trained 3000 steps, its task not given; C16: the course's GPT; C24-C27: no setting",
        normlab: "the same settings in PyTorch (torch's modules and RNG, nn.GELU's exact form) and in normlab, 30 to 200 seeds each (quick: 15 to 50); SmolLM2 through transformers on the same file and tokens; C12 on normlab's toy task (docs/toy-task.md), 3 seeds a side (quick: 200 steps, 2 seeds), PyTorch drawing its own training data and scoring the documented held-out set; C16 on normlab's GPT (docs/gpt.md), 8 blocks, 500 steps, 2 seeds, and 30 seeds of the gradient at init; C24 and C25's arithmetic on 30 seeds; C26 on attention-sink's 1-layer Bigram-Backcopy GPT, 3 seeds; C27 on C12's toy net at 12 blocks and 1000 steps (residual-routing's is 30 blocks and 3000 steps), lr 1e-3, 2 seeds, Pre-LN, static HC, mHC and block AttnRes",
        why: "an independent implementation catches a misread setting or a bug shared by a forward and its backward; C27 is smaller than its chapter because PyTorch on one thread takes about 90 ms a step there",
        depends: "no: it checks agreement, not the claims",
    },
];

/// The table as Markdown (for findings.md): a chapter the book holds
/// (`present`) links to its report; one it lacks is named only.
pub fn markdown(present: impl Fn(&str) -> bool) -> String {
    let mut md = String::from(
        "| chapter | claims | the lesson's setting | normlab's | why | could the verdict depend on it? |\n|---|---|---|---|---|---|\n",
    );
    for d in DEPARTURES {
        let name = if present(d.chapter) {
            format!("[{}]({}/report.md)", d.chapter, d.chapter)
        } else {
            format!("{} (not in this book)", d.chapter)
        };
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            name, d.claims, d.lesson, d.normlab, d.why, d.depends
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exp::registry::EXPERIMENTS;

    #[test]
    fn every_chapter_says_where_it_departs() {
        for e in EXPERIMENTS {
            assert!(
                DEPARTURES.iter().any(|d| d.chapter == e.id),
                "{} has no row in the departures table",
                e.id
            );
        }
        for d in DEPARTURES {
            assert!(
                EXPERIMENTS.iter().any(|e| e.id == d.chapter),
                "{} is not an experiment",
                d.chapter
            );
            assert!(
                d.depends == "no"
                    || d.depends.starts_with("no:")
                    || d.depends.starts_with("possibly:")
                    || d.depends.starts_with("yes:"),
                "{}: {}",
                d.chapter,
                d.depends
            );
            assert!(![d.claims, d.lesson, d.normlab, d.why]
                .iter()
                .any(|f| f.contains('|')));
        }
    }
}
