#!/usr/bin/env python3
"""Generation speed and memory of the GGUF models (SmolLM2-135M-Instruct
Q4_1, Gemma 3 270M Q4_K_M): normlab's four ways of holding and applying the
weights (`--weights f32`: dequantised at load; `blocks`: the file's blocks,
f32 activations, the same numbers; `q8`: the blocks with 8-bit activations,
llama.cpp's way; `q16`: the blocks with 16-bit activations as two 8-bit
limbs) next to Hugging Face transformers (float32, eager PyTorch,
key/value cache on) on the same machine in the same run, 1 and 2 threads.

- generate: greedy decoding of --generate tokens after the same prompt (the
  start of the bundled Shakespeare, --tokens tokens by each tokenizer),
  seconds per token from the first generated token to the last, so the
  prompt's pass (many rows: the dense matmul path in every normlab mode) is
  not counted (transformers: a streamer's timestamps; normlab: `normlab
  bench llama`);
- memory: each normlab process's resident memory once the model is loaded
  (`bench llama` reads VmRSS), and transformers' growth in resident memory
  over loading the model (this process, measured once per model);
- deviation of `q8` and `q16` from `f32` on the transformers fixture
  prompts (crates/normlab/tests/fixtures/<model>.json): the largest logit
  difference of any of --generate steps relative to that step's logit
  range, and how many greedy continuations change.

Rounds alternate transformers and the four normlab modes; printed: medians
over rounds and, per normlab mode, the per-round ratios (transformers time /
normlab time: > 1 means normlab is faster).

    scripts/fetch_smollm2.sh && scripts/fetch_gemma3.sh && cargo build --release
    /tmp/venv/bin/pip install torch transformers gguf accelerate
    /tmp/venv/bin/python bench/gguf_generate.py [--rounds 3] [--generate 32] [--models smollm2,gemma3]
"""

import argparse
import json
import os
import statistics
import subprocess

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

# transformers' seconds per generated token, measured as the SmolLM2
# benchmark measures it (bench/ is this script's folder, so on sys.path).
from smollm2_speed import hf_generate_per_token

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODELS = {
    "smollm2": ("SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf", False),
    "gemma3": ("gemma-3-270m", "gemma-3-270m-q4_k_m.gguf", True),
}
MODES = ("f32", "blocks", "q8", "q16")


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def normlab(a, path, mode, threads, extra=()):
    out = subprocess.run([a.normlab, "bench", "llama", path, "--tokens", str(a.tokens),
                          "--generate", str(a.generate), "--threads", str(threads), "--reps",
                          str(a.reps), "--weights", mode, "--json", *extra],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def run_model(a, name, cpus):
    d, f, special = MODELS[name]
    path = os.path.join(ROOT, "models", d, f)
    before = rss_bytes()
    tok = AutoTokenizer.from_pretrained(os.path.join(ROOT, "models", d), gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(os.path.join(ROOT, "models", d), gguf_file=f,
                                                 dtype=torch.float32).eval()
    hf_mem = rss_bytes() - before
    text = open(os.path.join(ROOT, "data", "shakespeare.txt"), encoding="utf-8").read()[: 64 * a.tokens]
    ids = torch.tensor([tok(text, add_special_tokens=special)["input_ids"][: a.tokens]])
    print(f"\n## {name} ({f}): prompt {ids.shape[1]} tokens, {a.generate} generated, "
          f"{a.rounds} rounds; transformers grew by {hf_mem / 2**20:.0f} MiB loading it")
    fixture = os.path.join(ROOT, "crates", "normlab", "tests", "fixtures", f"{name}.json")
    rows, mem = [], {}
    # (`blocks` gives the f32 logits bit for bit: tests/gguf_models.rs.)
    for mode in ("q8", "q16"):
        dev = [r for r in normlab(a, path, mode, cpus, ("--against-f32", fixture))
               if r["phase"] == "deviation"][0]
        print(f"{mode} vs f32 on {dev['prompts']} fixture prompts x {dev['steps']} steps: largest "
              f"logit difference {dev['max_rel_logit_diff']:.2e} of the range, "
              f"{dev['greedy_changed']} greedy continuations changed")
        rows.append({"model": name, "phase": "deviation", **dev})
    for threads in sorted({1, cpus}):
        torch.set_num_threads(threads)
        hf_generate_per_token(model, ids, 4)
        hf, nl = [], {m: [] for m in MODES}
        for _ in range(a.rounds):
            hf.append(statistics.median(
                [hf_generate_per_token(model, ids, a.generate) for _ in range(a.reps)]))
            for mode in MODES:
                for rec in normlab(a, path, mode, threads):
                    if rec["phase"] == "generate":
                        nl[mode].append(rec["median_s"])
                        mem[mode] = rec["rss_bytes"]
        t_hf = statistics.median(hf)
        line = f"{threads} thread(s): transformers {t_hf * 1e3:.1f} ms/token ({1 / t_hf:.1f} tok/s)"
        for mode in MODES:
            ratios = [h / n for h, n in zip(hf, nl[mode])]
            t = statistics.median(nl[mode])
            r = {"model": name, "phase": "generate", "threads": threads, "weights": mode,
                 "transformers_s": t_hf, "normlab_s": t, "ratio": statistics.median(ratios),
                 "ratio_min": min(ratios), "ratio_max": max(ratios),
                 "rss_bytes": mem[mode], "transformers_mem_bytes": hf_mem}
            rows.append(r)
            line += (f"; {mode} {t * 1e3:.1f} ms/token ({1 / t:.1f} tok/s), {r['ratio']:.2f}x "
                     f"({r['ratio_min']:.2f}-{r['ratio_max']:.2f})")
        print(line)
    print("normlab resident once loaded: " +
          ", ".join(f"{m} {mem[m] / 2**20:.0f} MiB" for m in MODES))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--generate", type=int, default=32)
    ap.add_argument("--models", default="smollm2,gemma3")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--normlab", default=os.path.join(ROOT, "target", "release", "normlab"))
    a = ap.parse_args()
    cpus = len(os.sched_getaffinity(0))
    print(f"torch {torch.__version__}, {cpus} CPUs")
    rows = []
    for name in a.models.split(","):
        rows += run_model(a, name, cpus)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
