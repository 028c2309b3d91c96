#!/usr/bin/env python3
"""Speed of SmolLM2-135M-Instruct (GGUF Q4_1, dequantised to float32 by
both): normlab (`normlab bench llama`) next to Hugging Face transformers
(float32, eager PyTorch) on the same machine in the same run, 1 and 2
threads, for two phases:

- prompt: one forward pass over the same 256-token prompt (the start of the
  bundled Shakespeare, tokenised by each);
- generate: greedy decoding of --generate tokens after that prompt over the
  key/value cache (transformers' `generate` with min_new_tokens so neither
  stops at end-of-sequence), timed per token from the first generated token
  to the last, so the prompt's pass is not counted (transformers: a
  streamer's timestamps; normlab: the same in Rust).

Rounds alternate the two (each round: transformers' medians, then a
`normlab bench llama` process that loads the model, untimed, and reports its
own medians); printed: medians over rounds and the per-round ratios
(transformers time / normlab time: > 1 means normlab is faster).

    scripts/fetch_smollm2.sh && cargo build --release
    /tmp/venv/bin/pip install torch transformers gguf accelerate
    /tmp/venv/bin/python bench/smollm2_speed.py [--rounds 3] [--reps 3] [--generate 64]
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


class Stamps:
    """A generate() streamer recording when each new token arrives."""

    def __init__(self):
        self.t, self.prompt_seen = [], False

    def put(self, value):
        if self.prompt_seen:
            self.t.append(time.perf_counter())
        self.prompt_seen = True

    def end(self):
        pass


def hf_generate_per_token(model, ids, n):
    s = Stamps()
    with torch.no_grad():
        model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, streamer=s,
                       attention_mask=torch.ones_like(ids), pad_token_id=0)
    assert len(s.t) == n, len(s.t)
    return (s.t[-1] - s.t[0]) / (n - 1)


def verdict(r):
    return ("normlab faster" if r["ratio_min"] > 1 else "transformers faster" if r["ratio_max"] < 1
            else "no measurable difference")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--generate", type=int, default=64)
    ap.add_argument("--normlab", default=os.path.join(ROOT, "target", "release", "normlab"))
    a = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(DIR, gguf_file=FILE)
    model = AutoModelForCausalLM.from_pretrained(DIR, gguf_file=FILE, dtype=torch.float32).eval()
    text = open(os.path.join(ROOT, "data", "shakespeare.txt"), encoding="utf-8").read()[: 64 * a.tokens]
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"][: a.tokens]])
    cpus = len(os.sched_getaffinity(0))
    print(f"torch {torch.__version__}, {cpus} CPUs, prompt {ids.shape[1]} tokens, "
          f"{a.generate} generated, {a.rounds} rounds")
    rows = []
    for threads in sorted({1, cpus}):
        torch.set_num_threads(threads)
        with torch.no_grad():
            model(ids)
        hf = {"prompt": [], "generate": []}
        nl = {"prompt": [], "generate": []}
        for _ in range(a.rounds):
            ts = []
            with torch.no_grad():
                for _ in range(a.reps):
                    t = time.perf_counter()
                    model(ids)
                    ts.append(time.perf_counter() - t)
            hf["prompt"].append(statistics.median(ts))
            hf["generate"].append(statistics.median(
                [hf_generate_per_token(model, ids, a.generate) for _ in range(min(a.reps, 3))]))
            out = subprocess.run([a.normlab, "bench", "llama", os.path.join(DIR, FILE), "--tokens",
                                  str(a.tokens), "--generate", str(a.generate), "--threads", str(threads),
                                  "--reps", str(a.reps), "--json"],
                                 capture_output=True, text=True, check=True)
            for rec in json.loads(out.stdout):
                nl[rec["phase"]].append(rec["median_s"])
        for phase, tokens in (("prompt", a.tokens), ("generate", a.generate)):
            ratios = [h / n for h, n in zip(hf[phase], nl[phase])]
            r = {"threads": threads, "phase": phase, "transformers_s": statistics.median(hf[phase]),
                 "normlab_s": statistics.median(nl[phase]), "ratio": statistics.median(ratios),
                 "ratio_min": min(ratios), "ratio_max": max(ratios)}
            rows.append(r)
            # prompt: seconds per pass over `tokens`; generate: seconds per token
            per = tokens if phase == "prompt" else 1
            print(f"{threads} thread(s), {phase}: transformers {r['transformers_s']:.4f} s "
                  f"({per / r['transformers_s']:.1f} tok/s), normlab {r['normlab_s']:.4f} s "
                  f"({per / r['normlab_s']:.1f} tok/s): {r['ratio']:.2f}x "
                  f"(rounds {r['ratio_min']:.2f}-{r['ratio_max']:.2f}, {verdict(r)})")


if __name__ == "__main__":
    main()
