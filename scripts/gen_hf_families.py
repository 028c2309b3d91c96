#!/usr/bin/env python3
"""Write the tiny Hugging Face folders of normlab's decoder-family tests:
crates/normlab/tests/fixtures/hf_tiny/<name>/ (config.json and
model.safetensors as save_pretrained writes them) and expected.json beside
them (token ids, transformers' logits at every position, and each block's
output stream, recorded with forward hooks).

Each model is transformers' own *ForCausalLM built from its config class
with random weights (seed 0; norm gains N(1, 0.3^2), everything else
N(0, 0.2^2), so that no gain is the identity), eager attention, float32, at
a tiny size: vocab 64, d 32, 2 blocks, 4 query heads and 2 key/value heads,
a sequence of 20 tokens. Per family, what it switches on:

- gemma2: sandwich RMSNorms with 1 + w gains (the file stores w, drawn
  N(0, 0.3^2), so the gains are N(1, 0.3^2) as elsewhere), GeGLU, the sqrt(d) embedding scale, a window of 8 on layer 0 and
  full attention on layer 1, attention logits capped at 5 and final logits
  at 3 (small caps, so that both bite at these weights), head_dim 16,
  query_pre_attn_scalar 24, a tied head.
- llama: Pre-RMSNorm, SwiGLU, an untied head.
- llama-rope-llama3, llama-rope-linear: llama's with RoPE scaled as Llama
  3 does (factor 8, bands from an original context of 64, so that with
  head_dim 8 one frequency is kept, one blended and two divided) and
  linearly (factor 4); saved in float32 only.
- mistral: llama's, with a sliding window of 8 on every layer.
- olmo2: RMSNorm after each sublayer's output (no input norms), QK-Norm
  over the whole q and k, an untied head.
- phi3: llama's block with q/k/v in one qkv_proj and gate/up in one
  gate_up_proj, a sliding window of 8 on every layer, RoPE on half of each
  head (partial_rotary_factor 0.5, as Phi-4-mini's 0.75), an untied head.
- qwen2: llama's, with biases on q, k and v (random, like every weight).
- qwen3: QK-Norm per head before RoPE, head_dim 16 (queries wider than
  the stream), a tied head.
- gpt2: Pre-LayerNorm with bias (biases N(0, 0.2^2)), learned positions,
  q/k/v in one Conv1D stored [in, out], a plain MLP of width 48 (n_inner)
  with gelu_new, biases on every projection, a tied head; 4 heads (no
  grouped-query attention in this family). gpt2-bare: the same weights as
  OpenAI's files on the Hub store them (a bare GPT2Model: no
  `transformer.` prefix, no head, and the old attn.bias / attn.masked_bias
  buffers), float32 only, expected values as gpt2's.
- gpt_neox: Pre-LayerNorm with bias, attention and MLP in parallel, RoPE
  on half of each 8-wide head (partial_rotary_factor 0.5), q/k/v stored
  head by head, a plain exact-GELU MLP, an untied head.
  gpt_neox-sequential: use_parallel_residual false, RoPE on a quarter of
  each head, gelu_new; float32 only.

Each model is also saved in bfloat16 (<name>-bf16/). Every folder's
expected values come from transformers loading the saved folder back in
float32 (from_pretrained(dtype=float32): the bf16 weights upcast, the RoPE
tables computed afresh), which is what normlab computes from the file.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers numpy
    /tmp/venv/bin/python scripts/gen_hf_families.py [NAME ...]

With names, only those folders are written (the others stay as they are).
"""

import json
import os
import shutil
import sys

import torch
import transformers
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
OUT = os.path.join(ROOT, "crates", "normlab", "tests", "fixtures", "hf_tiny")
COMMON = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-6,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
FAMILIES = {
    "gemma2": (
        Gemma2Config,
        Gemma2ForCausalLM,
        dict(
            tie_word_embeddings=True,
            head_dim=16,
            query_pre_attn_scalar=24,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"],
            attn_logit_softcapping=5.0,
            final_logit_softcapping=3.0,
            hidden_activation="gelu_pytorch_tanh",
            rope_theta=10000.0,
        ),
    ),
    "llama": (LlamaConfig, LlamaForCausalLM, dict(tie_word_embeddings=False, rope_theta=10000.0)),
    "llama-rope-llama3": (
        LlamaConfig,
        LlamaForCausalLM,
        dict(
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        ),
    ),
    "llama-rope-linear": (
        LlamaConfig,
        LlamaForCausalLM,
        dict(tie_word_embeddings=False, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}),
    ),
    "mistral": (MistralConfig, MistralForCausalLM, dict(tie_word_embeddings=False, sliding_window=8, rope_theta=50000.0)),
    "olmo2": (Olmo2Config, Olmo2ForCausalLM, dict(tie_word_embeddings=False, rope_theta=500000.0)),
    "phi3": (
        Phi3Config,
        Phi3ForCausalLM,
        dict(
            tie_word_embeddings=False,
            sliding_window=8,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        ),
    ),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(tie_word_embeddings=False, rope_theta=1000000.0)),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(tie_word_embeddings=True, head_dim=16, rope_theta=1000000.0)),
}
# The older families name their sizes their own way: no COMMON.
GPT2 = dict(
    vocab_size=64,
    n_embd=32,
    n_inner=48,
    n_layer=2,
    n_head=4,
    n_positions=64,
    layer_norm_epsilon=1e-5,
    activation_function="gelu_new",
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_id=2,
)
NEOX = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
    layer_norm_eps=1e-5,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
)
OWN = {
    "gpt2": (GPT2Config, GPT2LMHeadModel, GPT2),
    "gpt_neox": (
        GPTNeoXConfig,
        GPTNeoXForCausalLM,
        dict(NEOX, hidden_act="gelu", rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
    ),
    "gpt_neox-sequential": (
        GPTNeoXConfig,
        GPTNeoXForCausalLM,
        dict(
            NEOX,
            hidden_act="gelu_new",
            use_parallel_residual=False,
            rope_parameters={"rope_type": "default", "rope_theta": 20000.0, "partial_rotary_factor": 0.25},
        ),
    ),
}


def record(model, ids):
    """Logits and each block's output stream (forward hooks)."""
    streams = []
    base = model.base_model
    layers = base.layers if hasattr(base, "layers") else base.h
    hooks = [
        layer.register_forward_hook(lambda m, i, o: streams.append((o[0] if isinstance(o, tuple) else o)[0].clone()))
        for layer in layers
    ]
    with torch.no_grad():
        logits = model(ids, use_cache=False).logits[0]
    for h in hooks:
        h.remove()
    return logits, streams


def save(model, Model, path, ids, dtype):
    """Save `model` in `dtype`, then load the folder back with transformers
    in float32 (fresh RoPE tables) and record what it computes."""
    if os.path.exists(path):
        shutil.rmtree(path)
    model.to(dtype).save_pretrained(path, safe_serialization=True)
    for extra in ["generation_config.json"]:
        p = os.path.join(path, extra)
        if os.path.exists(p):
            os.remove(p)
    back = Model.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    logits, streams = record(back, ids)
    rows = lambda t: [[float(v) for v in r] for r in t.tolist()]
    with open(os.path.join(path, "expected.json"), "w") as f:
        json.dump(
            {
                "generator": "scripts/gen_hf_families.py",
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "ids": ids[0].tolist(),
                "logits": rows(logits),
                "streams": [rows(s) for s in streams],
            },
            f,
        )


def bare_gpt2(src, path):
    """gpt2's folder as OpenAI's GPT-2 files store it: tensors without the
    `transformer.` prefix, no head, the old causal-mask buffers."""
    from safetensors.torch import load_file, save_file

    if os.path.exists(path):
        shutil.rmtree(path)
    os.makedirs(path)
    tensors = {k.removeprefix("transformer."): v for k, v in load_file(os.path.join(src, "model.safetensors")).items()}
    n = GPT2["n_positions"]
    for i in range(GPT2["n_layer"]):
        tensors[f"h.{i}.attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
        tensors[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    for f in ["config.json", "expected.json"]:
        shutil.copy(os.path.join(src, f), os.path.join(path, f))


def main():
    only = sys.argv[1:]
    ids = torch.randint(3, COMMON["vocab_size"], (1, 20), generator=torch.Generator().manual_seed(1))
    families = {k: (c, m, {**COMMON, **e}) for k, (c, m, e) in FAMILIES.items()}
    families.update(OWN)
    for name, (Config, Model, kwargs) in families.items():
        if only and name not in only:
            continue
        torch.manual_seed(0)
        cfg = Config(**kwargs)
        cfg._attn_implementation = "eager"
        model = Model(cfg).float().eval()
        with torch.no_grad():
            for pname, p in model.named_parameters():
                # Norm gains (GPT-2's ln_*): N(1, 0.3^2), Gemma's stored w
                # N(0, 0.3^2); every other weight and bias N(0, 0.2^2).
                gain = ("norm" in pname or ".ln_" in pname) and pname.endswith("weight")
                if gain:
                    p.normal_(0.0 if name.startswith("gemma") else 1.0, 0.3)
                else:
                    p.normal_(0.0, 0.2)
        save(model, Model, os.path.join(OUT, name), ids, torch.float32)
        if "-" not in name:
            save(model, Model, os.path.join(OUT, name + "-bf16"), ids, torch.bfloat16)
        if name == "gpt2":
            bare_gpt2(os.path.join(OUT, name), os.path.join(OUT, "gpt2-bare"))
        print(f"wrote {name}")


if __name__ == "__main__":
    main()
