#!/usr/bin/env python3
"""Write the Hugging Face fixtures for normlab's GGUF model tests:
crates/normlab/tests/fixtures/smollm2.json (SmolLM2-135M-Instruct, Llama,
Q4_1) and crates/normlab/tests/fixtures/gemma3.json (Gemma 3 270M, Q4_K_M).

transformers loads each GGUF file itself (it dequantises the weights to
float32, un-permutes llama.cpp's Llama Q/K rows, subtracts the one llama.cpp
added to Gemma's norm gains, and builds the tokenizer from the metadata);
this script records, per model, for 16 prompts (12 English, 4 Chinese):
the token ids of that tokenizer, the logits at every position for a fixed
set of 256 vocabulary columns plus each position's argmax and logit range,
a 32-token greedy continuation of 4 prompts; the perplexity on a held-out
slice of data/shakespeare.txt (1,024 tokens; Gemma in one window, so that
its 512-token sliding window is exercised); every layer's residual stream
on those tokens (`output_hidden_states`: the stream entering each block,
and the final norm's output) at sampled positions and channels, with each
sampled position's full-width L2 norm; and a few dequantised values of
tensors of every type the file uses (read with the `gguf` package).

    scripts/fetch_smollm2.sh && scripts/fetch_gemma3.sh
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers gguf accelerate numpy
    /tmp/venv/bin/python scripts/gen_gguf_fixtures.py [smollm2|gemma3|all]
"""

import json
import math
import os
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FIXTURES = os.path.join(ROOT, "crates", "normlab", "tests", "fixtures")

MODELS = {
    "smollm2": {
        "dir": "SmolLM2-135M-Instruct",
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "vocab": 49152,
        # The file sets add_bos_token false: no special tokens.
        "special": False,
        "ppl_window": 256,
        "dequantized": ("token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_norm.weight"),
    },
    "gemma3": {
        "dir": "gemma-3-270m",
        "file": "gemma-3-270m-q4_k_m.gguf",
        "vocab": 262144,
        # BOS (id 2) first, as the file asks.
        "special": True,
        "ppl_window": 1024,
        # Q8_0, Q5_0, Q4_K, Q6_K and F32 (a norm gain as stored: 1 + w).
        "dequantized": ("token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_output.weight",
                        "blk.0.ffn_down.weight", "blk.0.attn_norm.weight", "blk.0.attn_q_norm.weight"),
    },
}

PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a",
    "Layer normalization keeps deep networks trainable because",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "In 1969, Neil Armstrong became the first person to",
    "Water boils at 100 degrees Celsius, which is 212 degrees",
    "To be, or not to be, that is the question:",
    "The three primary colors are red, yellow and",
    "Photosynthesis converts sunlight, water and carbon dioxide into",
    "Residual connections add the input of a block to its output, so",
    "1, 2, 3, 5, 8, 13, 21,",
    "中国的首都是",
    "今天天气很好，我们去",
    "机器学习是人工智能的一个分支，它",
    "春眠不觉晓，处处闻啼鸟。",
]
GREEDY = [0, 1, 7, 12]
PPL_TOKENS = 1024
# Hidden states: every 32nd position (and the last) and every 8th channel.
HIDDEN_POS_STEP = 32
HIDDEN_CH_STEP = 8


def six(v):
    return float(f"{float(v):.7g}")


def run(name):
    spec = MODELS[name]
    mdir = os.path.join(ROOT, "models", spec["dir"])
    out_path = os.path.join(FIXTURES, f"{name}.json")
    tok = AutoTokenizer.from_pretrained(mdir, gguf_file=spec["file"])
    model = AutoModelForCausalLM.from_pretrained(mdir, gguf_file=spec["file"], dtype=torch.float32)
    model.eval()
    cols = list(range(0, spec["vocab"], spec["vocab"] // 256))  # 256 columns
    out = {"source": f"transformers {__import__('transformers').__version__}, torch {torch.__version__}",
           "file": spec["file"], "cols": cols, "prompts": []}
    print(name, "pre-tokenizer:", tok.backend_tokenizer.pre_tokenizer)
    with torch.no_grad():
        for i, p in enumerate(PROMPTS):
            ids = tok(p, add_special_tokens=spec["special"])["input_ids"]
            logits = model(torch.tensor([ids])).logits[0]
            rec = {
                "text": p,
                "ids": ids,
                "logits": [[round(float(v), 5) for v in row[cols]] for row in logits],
                "argmax": [int(v) for v in logits.argmax(-1)],
                "top2_gap": [float(v[0] - v[1]) for v in logits.topk(2, dim=-1).values],
                "range": [float(row.max() - row.min()) for row in logits],
            }
            if i in GREEDY:
                g = model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False,
                                   attention_mask=torch.ones(1, len(ids), dtype=torch.long))
                rec["greedy"] = [int(v) for v in g[0, len(ids):]]
                rec["greedy_text"] = tok.decode(rec["greedy"])
            out["prompts"].append(rec)
            print(i, len(ids), repr(tok.decode(rec["argmax"][-1:])))
        # Held-out perplexity: the last 10% of the bundled text, its first
        # PPL_TOKENS predictions, in windows of ppl_window.
        text = open(os.path.join(ROOT, "data", "shakespeare.txt"), encoding="utf-8").read()
        held = text[int(0.9 * len(text)):]
        ids = tok(held, add_special_tokens=spec["special"])["input_ids"][:PPL_TOKENS + 1]
        window = spec["ppl_window"]
        nll, n = 0.0, 0
        for s in range(0, PPL_TOKENS, window):
            w = torch.tensor([ids[s: s + window + 1]])
            lg = model(w[:, :-1]).logits[0].double()
            nll += float(torch.nn.functional.cross_entropy(lg, w[0, 1:], reduction="sum"))
            n += w.shape[1] - 1
        out["perplexity"] = {"chars_from": int(0.9 * len(text)), "tokens": PPL_TOKENS, "window": window,
                             "first_ids": ids[:16], "nll_per_token": nll / n, "ppl": math.exp(nll / n)}
        print("ppl", out["perplexity"]["ppl"])
        # Every layer's stream on the first PPL_TOKENS tokens, in one pass.
        hs = model(torch.tensor([ids[:PPL_TOKENS]]), output_hidden_states=True).hidden_states
        d = hs[0].shape[-1]
        pos = list(range(0, PPL_TOKENS, HIDDEN_POS_STEP)) + [PPL_TOKENS - 1]
        ch = list(range(0, d, HIDDEN_CH_STEP))
        out["hidden"] = {
            "tokens": PPL_TOKENS, "positions": pos, "channels": ch,
            "what": "hidden_states[i] for i < layers: the stream entering block i; the last: the final norm's output",
            "values": [[[six(h[0, p, c]) for c in ch] for p in pos] for h in hs],
            "row_norms": [[six(h[0, p].norm()) for p in pos] for h in hs],
        }
    try:
        from gguf import GGUFReader
        from gguf.quants import dequantize
        r = GGUFReader(os.path.join(mdir, spec["file"]))
        deq = {}
        for t in r.tensors:
            if t.name in spec["dequantized"]:
                v = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(-1)
                deq[t.name] = {"type": t.tensor_type.name, "first": [float(x) for x in v[:64]],
                               "sum": float(v.sum()), "abs_sum": float(np.abs(v).sum()), "n": int(v.size)}
        out["dequantized"] = deq
    except ImportError:
        print("gguf not installed: no dequantisation fixtures")
    os.makedirs(FIXTURES, exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(out, f)
    print("wrote", out_path, os.path.getsize(out_path), "bytes")


def main():
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    if which not in (*MODELS, "all"):
        sys.exit(f"usage: {sys.argv[0]} [{'|'.join(MODELS)}|all]")
    for name in MODELS if which == "all" else [which]:
        run(name)


if __name__ == "__main__":
    main()
