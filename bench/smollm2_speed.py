#!/usr/bin/env python3
"""Prompt processing speed of SmolLM2-135M-Instruct (GGUF Q4_1, dequantised to
float32 by both): normlab (`normlab bench llama`) next to Hugging Face
transformers (float32, eager PyTorch) on the same machine in the same run,
the same 256-token prompt (the start of the bundled Shakespeare, tokenised
by each), 1 and 2 threads. Rounds alternate the two (each round: a median
of --reps forwards of transformers, then a `normlab bench llama` process
that loads the model, untimed, and reports its own median of --reps);
printed: medians over rounds and the per-round ratios (transformers time /
normlab time: > 1 means normlab is faster).

Generation speed is not measured: normlab's Llama path has no KV cache yet
(each greedy step recomputes the whole sequence), so a comparison with
transformers' cached generation would measure that, not the kernels.

    scripts/fetch_smollm2.sh && cargo build --release
    /tmp/venv/bin/pip install torch transformers gguf accelerate
    /tmp/venv/bin/python bench/smollm2_speed.py [--rounds 3] [--reps 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DIR = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct")
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--normlab", default=os.path.join(ROOT, "target", "release", "normlab"))
    a = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(DIR, gguf_file=FILE)
    model = AutoModelForCausalLM.from_pretrained(DIR, gguf_file=FILE, dtype=torch.float32).eval()
    text = open(os.path.join(ROOT, "data", "shakespeare.txt"), encoding="utf-8").read()[: 64 * a.tokens]
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"][: a.tokens]])
    cpus = len(os.sched_getaffinity(0))
    print(f"torch {torch.__version__}, {cpus} CPUs, prompt {ids.shape[1]} tokens, {a.rounds} rounds")
    rows = []
    for threads in sorted({1, cpus}):
        torch.set_num_threads(threads)
        with torch.no_grad():
            model(ids)
        hf, nl = [], []
        for _ in range(a.rounds):
            ts = []
            with torch.no_grad():
                for _ in range(a.reps):
                    t = time.perf_counter()
                    model(ids)
                    ts.append(time.perf_counter() - t)
            hf.append(statistics.median(ts))
            out = subprocess.run([a.normlab, "bench", "llama", os.path.join(DIR, FILE), "--tokens",
                                  str(a.tokens), "--threads", str(threads), "--reps", str(a.reps), "--json"],
                                 capture_output=True, text=True, check=True)
            nl.append(json.loads(out.stdout)[0]["median_s"])
        ratios = [h / n for h, n in zip(hf, nl)]
        r = {"threads": threads, "transformers_s": statistics.median(hf), "normlab_s": statistics.median(nl),
             "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
        rows.append(r)
        verdict = ("normlab faster" if r["ratio_min"] > 1 else "transformers faster" if r["ratio_max"] < 1
                   else "no measurable difference")
        print(f"{threads} thread(s): transformers {r['transformers_s']:.3f} s ({a.tokens / r['transformers_s']:.0f} tok/s), "
              f"normlab {r['normlab_s']:.3f} s ({a.tokens / r['normlab_s']:.0f} tok/s): {r['ratio']:.2f}x "
              f"(rounds {r['ratio_min']:.2f}-{r['ratio_max']:.2f}, {verdict})")


if __name__ == "__main__":
    main()
