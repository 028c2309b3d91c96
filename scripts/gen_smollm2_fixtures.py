#!/usr/bin/env python3
"""Write the Hugging Face fixtures for normlab's SmolLM2 (Llama, GGUF) tests:
crates/normlab/tests/fixtures/smollm2.json.

transformers loads the GGUF file itself (it dequantises Q4_1/Q8_0 to float32
and un-permutes llama.cpp's Q/K rows); this script records, for 16 prompts
(12 English, 4 Chinese): the token ids of transformers' tokenizer built from
the GGUF metadata, the logits at every position for a fixed set of 256
vocabulary columns plus each position's argmax and logit range, a 32-token
greedy continuation of 4 prompts, the perplexity of the model on a held-out
slice of data/shakespeare.txt, and a few dequantised values of three tensors
(read with the `gguf` package).

    scripts/fetch_smollm2.sh
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers gguf accelerate numpy
    /tmp/venv/bin/python scripts/gen_smollm2_fixtures.py
"""

import json
import math
import os

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DIR = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct")
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = os.path.join(ROOT, "crates", "normlab", "tests", "fixtures", "smollm2.json")

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
COLS = list(range(0, 49152, 192))  # 256 columns
PPL_TOKENS = 1024
PPL_WINDOW = 256


def main():
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    tok = AutoTokenizer.from_pretrained(DIR, gguf_file=FILE)
    model = AutoModelForCausalLM.from_pretrained(DIR, gguf_file=FILE, dtype=torch.float32)
    model.eval()
    out = {"source": f"transformers {__import__('transformers').__version__}, torch {torch.__version__}",
           "file": FILE, "cols": COLS, "prompts": []}
    print("pre-tokenizer:", tok.backend_tokenizer.pre_tokenizer)
    with torch.no_grad():
        for i, p in enumerate(PROMPTS):
            ids = tok(p, add_special_tokens=False)["input_ids"]
            logits = model(torch.tensor([ids])).logits[0]
            rec = {
                "text": p,
                "ids": ids,
                "logits": [[round(float(v), 5) for v in row[COLS]] for row in logits],
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
        # held-out perplexity: the last 10% of the bundled text, first PPL_TOKENS tokens
        text = open(os.path.join(ROOT, "data", "shakespeare.txt"), encoding="utf-8").read()
        held = text[int(0.9 * len(text)):]
        ids = tok(held, add_special_tokens=False)["input_ids"][:PPL_TOKENS + 1]
        nll, n = 0.0, 0
        for s in range(0, PPL_TOKENS, PPL_WINDOW):
            w = torch.tensor([ids[s: s + PPL_WINDOW + 1]])
            lg = model(w[:, :-1]).logits[0].double()
            nll += float(torch.nn.functional.cross_entropy(lg, w[0, 1:], reduction="sum"))
            n += w.shape[1] - 1
        out["perplexity"] = {"chars_from": int(0.9 * len(text)), "tokens": PPL_TOKENS, "window": PPL_WINDOW,
                             "first_ids": ids[:16], "nll_per_token": nll / n, "ppl": math.exp(nll / n)}
        print("ppl", out["perplexity"]["ppl"])
    try:
        from gguf import GGUFReader
        from gguf.quants import dequantize
        r = GGUFReader(os.path.join(DIR, FILE))
        deq = {}
        for t in r.tensors:
            if t.name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_norm.weight"):
                v = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(-1)
                deq[t.name] = {"first": [float(x) for x in v[:64]], "sum": float(v.sum()),
                               "abs_sum": float(np.abs(v).sum()), "n": int(v.size)}
        out["dequantized"] = deq
    except ImportError:
        print("gguf not installed: no dequantisation fixtures")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f)
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
