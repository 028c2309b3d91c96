#!/usr/bin/env python3
"""PyTorch side of `normlab bench train`: the same two models, timed the
same way (median step time after 2 warm-up steps), 1 thread and all threads.

- toy: vocab 64, seq 16, d 64, FFN 128 GELU(tanh), 20 pre-LN blocks whose
  mixer is a causal mean over positions <= t followed by Linear(d, d);
  batch 32; Adam (fused where available), lr 1e-3.
- gpt: byte-level, d 128, 4 heads, 8 pre-LN blocks, seq 128, MLP 4d GELU,
  batch 16, AdamW (fused where available), grad clip 1.0.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy
    cargo run --release -- bench train --json > /tmp/nl_train.json
    /tmp/venv/bin/python bench/torch_train.py --normlab /tmp/nl_train.json

On a VM whose speed drifts from minute to minute, a ratio of two numbers
measured minutes apart is not worth much. `--interleave BIN` alternates the
two instead: each round runs `BIN bench train --json` for one model and
thread count (a subprocess, which times its own steps) and then the PyTorch
model (or the other way round, alternating), and reports the median and the
range of the per-round speed-ups:

    /tmp/venv/bin/python bench/torch_train.py --interleave target/release/normlab --rounds 5
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Mixer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        t = x.shape[1]
        counts = torch.arange(1, t + 1, device=x.device, dtype=x.dtype).view(1, t, 1)
        return self.proj(x.cumsum(1) / counts)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))


class Block(nn.Module):
    def __init__(self, d, hidden, mixer):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.mix = mixer
        self.ln_2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, hidden)
        self.proj = nn.Linear(hidden, d)

    def forward(self, x):
        x = x + self.mix(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class Net(nn.Module):
    def __init__(self, vocab, seq, d, hidden, layers, heads=None):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(
            [Block(d, hidden, Mixer(d) if heads is None else Attention(d, heads)) for _ in range(layers)]
        )
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def make_opt(params, kind, lr):
    cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
    try:
        return cls(params, lr=lr, fused=True), "fused"
    except (RuntimeError, TypeError):
        return cls(params, lr=lr), "foreach"


def bench(model_name, steps):
    torch.manual_seed(0)
    if model_name == "toy":
        net = Net(64, 16, 64, 128, 20)
        batch, seq, vocab = 32, 16, 64
        opt, how = make_opt(net.parameters(), "adam", 1e-3)
        clip = None
    else:
        net = Net(256, 128, 128, 512, 8, heads=4)
        batch, seq, vocab = 16, 128, 256
        opt, how = make_opt(net.parameters(), "adamw", 1e-3)
        clip = 1.0
    g = torch.Generator().manual_seed(1)
    times = []
    for i in range(steps + 2):
        idx = torch.randint(0, vocab, (batch, seq), generator=g)
        tgt = torch.randint(0, vocab, (batch, seq), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = net(idx, tgt)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times), batch * seq, how


def normlab_round(binary, model, threads, steps):
    """One `normlab bench train` round for one model and thread count."""
    out = subprocess.run(
        [binary, "bench", "train", "--model", model, "--threads", str(threads), "--steps", str(steps), "--json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (rec,) = json.loads(out)
    return rec["ms_per_step"] / 1e3


def interleaved(args):
    print(f"# torch {torch.__version__}, {os.cpu_count()} cpus, {time.strftime('%Y-%m-%d %H:%M')}, {args.rounds} interleaved rounds")
    print(f"{'model':5} {'thr':>3} {'torch ms':>9} {'normlab ms':>10} {'speedup (range over rounds)':>28}")
    for t in sorted({int(x) for x in args.threads.split(",")}):
        torch.set_num_threads(t)
        for m in ["toy", "gpt"]:
            ours, theirs = [], []
            for r in range(args.rounds):
                if r % 2 == 0:
                    ours.append(normlab_round(args.interleave, m, t, args.steps))
                    theirs.append(bench(m, args.steps)[0])
                else:
                    theirs.append(bench(m, args.steps)[0])
                    ours.append(normlab_round(args.interleave, m, t, args.steps))
            ratios = [b / a for a, b in zip(ours, theirs)]
            span = f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
            print(f"{m:5} {t:>3} {statistics.median(theirs) * 1e3:9.2f} {statistics.median(ours) * 1e3:10.2f} {span:>28}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--normlab", help="JSON from `normlab bench train --json`")
    ap.add_argument("--interleave", metavar="NORMLAB", help="the normlab binary: alternate its rounds with PyTorch's")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of each side with --interleave")
    ap.add_argument("--threads", default=f"1,{os.cpu_count()}")
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    if args.interleave:
        interleaved(args)
        return
    ours = {}
    if args.normlab:
        for r in json.load(open(args.normlab)):
            ours[(r["model"], r["threads"])] = r
    print(f"# torch {torch.__version__}, {os.cpu_count()} cpus, {time.strftime('%Y-%m-%d')}")
    print(f"{'model':5} {'thr':>3} {'torch ms':>9} {'normlab ms':>10} {'speedup':>7} {'torch tok/s':>11} {'normlab tok/s':>13}")
    for t in sorted({int(x) for x in args.threads.split(",")}):
        torch.set_num_threads(t)
        for m in ["toy", "gpt"]:
            s, tokens, how = bench(m, args.steps)
            o = ours.get((m, t))
            if o:
                print(f"{m:5} {t:>3} {s * 1e3:9.2f} {o['ms_per_step']:10.2f} {s * 1e3 / o['ms_per_step']:6.2f}x {tokens / s:11.0f} {o['tokens_per_sec']:13.0f}  ({how} Adam)")
            else:
                print(f"{m:5} {t:>3} {s * 1e3:9.2f} {'-':>10} {'-':>7} {tokens / s:11.0f} {'-':>13}  ({how} Adam)")


if __name__ == "__main__":
    main()
