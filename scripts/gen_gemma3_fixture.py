#!/usr/bin/env python3
"""Write the tiny Gemma-3-style fixture of normlab's decoder test:
crates/normlab/tests/fixtures/gemma3_tiny/ (config.json and model.safetensors
as Hugging Face's save_pretrained writes them, and logits.json).

The model is transformers' own Gemma3ForCausalLM with random weights (seed 0)
at a tiny size: sandwich norms whose file stores w (the model multiplies by
1 + w; every gain is random, so 1 + w is exercised), QK-Norm before RoPE,
GeGLU with tanh-GELU, the sqrt(d) embedding scale, grouped-query attention
(4 query heads, 2 key/value heads, head_dim 16 with d 32, so q is wider than
the stream), query_pre_attn_scalar 24 (not head_dim), a sliding window of 8
on layers 0, 1 and 3 and full attention on layer 2, two RoPE bases (10^4
local, 10^6 global), a tied head, eager attention in float32. logits.json
holds the token ids (a sequence of 24, longer than the window) and the
logits at every position.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers numpy
    /tmp/venv/bin/python scripts/gen_gemma3_fixture.py
"""

import json
import os

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
OUT = os.path.join(ROOT, "crates", "normlab", "tests", "fixtures", "gemma3_tiny")


def main():
    torch.manual_seed(0)
    cfg = Gemma3TextConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        query_pre_attn_scalar=24,
        sliding_window=8,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
        },
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        tie_word_embeddings=True,
    )
    cfg._attn_implementation = "eager"
    model = Gemma3ForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.3 if "norm" in name else 0.2)
    ids = torch.randint(3, cfg.vocab_size, (1, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(ids, use_cache=False).logits[0]
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT, safe_serialization=True)
    for extra in ["generation_config.json"]:
        p = os.path.join(OUT, extra)
        if os.path.exists(p):
            os.remove(p)
    with open(os.path.join(OUT, "logits.json"), "w") as f:
        json.dump(
            {
                "generator": "scripts/gen_gemma3_fixture.py",
                "torch": torch.__version__,
                "ids": ids[0].tolist(),
                "logits": [[float(v) for v in row] for row in logits.tolist()],
            },
            f,
        )
    print(f"wrote {OUT}: {logits.shape[0]} positions x {logits.shape[1]} logits")


if __name__ == "__main__":
    main()
