#!/usr/bin/env python3
"""Write each tiny Hugging Face family of crates/normlab/tests/fixtures/hf_tiny
(scripts/gen_hf_families.py) as a GGUF file, as llama.cpp's converter
(convert_hf_to_gguf.py) writes that family, with the `gguf` package: its
architecture name, metadata keys and tensor names (gguf's TensorNameMap),
F32 tensors. What the converter changes is changed here too: Llama's Q and K
rows permuted for llama.cpp's RoPE on adjacent pairs, Gemma 2's norm gains
stored as 1 + w, GPT-2's Conv1D weights transposed to [out, in] and its
attention-mask buffers left out. No tokenizer (the fixtures have none).

crates/normlab/tests/gguf_families.rs checks that each file gives its
folder's logits (transformers' own, in expected.json).

One addition the converter does not make: the tiny Gemma 2 scales its
queries by query_pre_attn_scalar 24, not head_dim 16 as llama.cpp assumes
for Gemma 2, so its file states the scale (`gemma2.attention.scale`, a key
llama.cpp defines).

    scripts/gen_gguf_families.py [NAME...]    (needs gguf, safetensors, numpy)
"""

import json
import os
import sys

import gguf
import numpy as np
from safetensors.numpy import load_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "crates", "normlab", "tests", "fixtures", "hf_tiny")
OUT = os.path.join(ROOT, "crates", "normlab", "tests", "fixtures", "gguf_tiny")
# Folder -> llama.cpp architecture.
FAMILIES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "olmo2": "olmo2",
            "gemma2": "gemma2", "gpt2": "gpt2"}
ARCH = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2, "qwen3": gguf.MODEL_ARCH.QWEN3,
        "olmo2": gguf.MODEL_ARCH.OLMO2, "gemma2": gguf.MODEL_ARCH.GEMMA2, "gpt2": gguf.MODEL_ARCH.GPT2}


def permute(w, heads):
    """llama.cpp's Q/K row order for Llama: each head's (i, i + hd/2) rows
    become (2i, 2i + 1)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write(name):
    arch = FAMILIES[name]
    folder = os.path.join(SRC, name)
    c = json.load(open(os.path.join(folder, "config.json")))
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    w = gguf.GGUFWriter(os.path.join(OUT, f"{name}.gguf"), arch)
    w.add_name(f"normlab tiny {name}")
    w.add_vocab_size(c["vocab_size"])
    names = gguf.get_tensor_name_map(ARCH[arch], c.get("num_hidden_layers") or c["n_layer"])
    if arch == "gpt2":
        w.add_block_count(c["n_layer"])
        w.add_context_length(c["n_positions"])
        w.add_embedding_length(c["n_embd"])
        w.add_feed_forward_length(c.get("n_inner") or 4 * c["n_embd"])
        w.add_head_count(c["n_head"])
        w.add_layer_norm_eps(c["layer_norm_epsilon"])
    else:
        heads = c["num_attention_heads"]
        w.add_block_count(c["num_hidden_layers"])
        w.add_context_length(c["max_position_embeddings"])
        w.add_embedding_length(c["hidden_size"])
        w.add_feed_forward_length(c["intermediate_size"])
        w.add_head_count(heads)
        w.add_head_count_kv(c.get("num_key_value_heads", heads))
        w.add_layer_norm_rms_eps(c["rms_norm_eps"])
        w.add_rope_freq_base(c.get("rope_theta") or c.get("rope_parameters", {}).get("rope_theta", 10000.0))
        if "head_dim" in c:
            w.add_key_length(c["head_dim"])
            w.add_value_length(c["head_dim"])
    if arch == "gemma2":
        w.add_sliding_window(c["sliding_window"])
        w.add_attn_logit_softcapping(c["attn_logit_softcapping"])
        w.add_final_logit_softcapping(c["final_logit_softcapping"])
        if c["query_pre_attn_scalar"] != c["head_dim"]:
            w.add_float32(f"{arch}.attention.scale", c["query_pre_attn_scalar"] ** -0.5)
    for key in sorted(tensors):
        t = tensors[key].astype(np.float32)
        if arch == "gpt2":
            if key.endswith((".attn.bias", ".attn.masked_bias")):
                continue
            if key.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
                t = t.T
        if arch == "llama" and key.endswith(("q_proj.weight", "k_proj.weight")):
            heads = c["num_attention_heads"] if "q_proj" in key else c.get("num_key_value_heads", c["num_attention_heads"])
            t = permute(t, heads)
        if arch == "gemma2" and key.endswith("norm.weight"):
            t = t + 1
        new = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if new is None:
            sys.exit(f"{name}: no GGUF name for {key}")
        w.add_tensor(new, np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {name}.gguf")


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in sys.argv[1:] or list(FAMILIES):
        write(name)


if __name__ == "__main__":
    main()
