#!/usr/bin/env python3
"""normlab's norms called from PyTorch (the `normlab` Python package) against
PyTorch's own, measured side by side in one process with PyTorch's default
allocator (what users run):

1. fwd+bwd of each norm at the `normlab bench norms` shapes, through
   autograd, Python and dispatch overhead included: PyTorch's fused
   F.layer_norm vs normlab.torch.layer_norm, F.rms_norm (a composite on
   CPU) vs normlab.torch.rms_norm, and the zero-centred RMSNorm and DyT as
   PyTorch ops vs normlab's;
2. a whole training step (forward, backward, AdamW) of the Llama-style model
   of examples/torch_llama.py (pre-RMSNorm, SwiGLU; d 512, 8 layers, seq
   256) with torch.nn.RMSNorm vs normlab's RMSNorm, and with the norms
   replaced by identity, which bounds what any norm kernel can save: the
   norms' share of the step is (t_torch - t_identity) / t_torch.

Each comparison is interleaved (A B A B ... in rounds; each round times
--reps calls of each side), at 1 thread and at all threads. Printed: the
median time of each side, the median of the per-round ratios (PyTorch time /
normlab time: > 1 means normlab is faster) and their min-max over rounds;
a difference is called only when every round agrees.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy ./python
    /tmp/venv/bin/python bench/torch_bridge.py [--quick] [--json out.json]
        [--dtype f32|bf16|f16] [--shapes 8192x1024,...] [--kinds ...] [--skip-model]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import normlab
import normlab.torch as nt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from torch_llama import build_model  # noqa: E402

SHAPES = [(512, 64), (8192, 256), (8192, 768), (8192, 1024), (2048, 4096), (256, 8192)]


def interleaved(a, b, rounds, reps):
    """Per-round mean seconds of a and b, alternating which goes first."""
    a()
    b()
    ta, tb = [], []
    for r in range(rounds):
        order = [(a, ta), (b, tb)] if r % 2 == 0 else [(b, tb), (a, ta)]
        for fn, acc in order:
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            acc.append((time.perf_counter() - t) / reps)
    return ta, tb


def summarise(ta, tb):
    ratios = [x / y for x, y in zip(ta, tb)]
    lo, hi = min(ratios), max(ratios)
    verdict = "normlab faster" if lo > 1 else "PyTorch faster" if hi < 1 else "no measurable difference"
    return {"torch_ms": 1e3 * statistics.median(ta), "normlab_ms": 1e3 * statistics.median(tb),
            "ratio": statistics.median(ratios), "ratio_min": lo, "ratio_max": hi, "verdict": verdict}


DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def norm_pair(kind, rows, d, dtype=torch.float32):
    """PyTorch's fwd+bwd and normlab's on the same tensors; x and dy in
    `dtype` (bf16/f16: PyTorch's mixed-type path with f32 parameters, as
    normlab's)."""
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(rows, d, generator=g) * 2 + 0.5).to(dtype).requires_grad_()
    dy = torch.randn(rows, d, generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(d, generator=g)).requires_grad_()
    b = (0.1 * torch.randn(d, generator=g)).requires_grad_()
    alpha = torch.full((1,), 0.5, requires_grad=True)
    if kind == "layernorm":
        ref = lambda: F.layer_norm(x, (d,), w, b, 1e-5)  # noqa: E731
        ours = lambda: nt.layer_norm(x, (d,), w, b, 1e-5)  # noqa: E731
        leaves = (x, w, b)
    elif kind == "rmsnorm":
        ref = lambda: F.rms_norm(x, (d,), w, 1e-6)  # noqa: E731
        ours = lambda: nt.rms_norm(x, (d,), w, 1e-6)  # noqa: E731
        leaves = (x, w)
    elif kind == "zrmsnorm":
        ref = lambda: F.rms_norm(x, (d,), 1 + w, 1e-6)  # noqa: E731
        ours = lambda: nt.norm("zrmsnorm", x, (d,), (w,), 1e-6)  # noqa: E731
        leaves = (x, w)
    else:
        ref = lambda: w * torch.tanh(alpha * x) + b  # noqa: E731
        ours = lambda: nt.norm("dyt", x, (d,), (alpha, w, b))  # noqa: E731
        leaves = (x, alpha, w, b)

    def step(f):
        def run():
            y = f()
            torch.autograd.grad(y, leaves, dy)
        return run

    return step(ref), step(ours)


def train_step_fn(model, x, y):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def run():
        loss = F.cross_entropy(model(x).view(-1, 256), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return run


def main():
    ap = argparse.ArgumentParser(description="normlab vs PyTorch norms inside PyTorch")
    ap.add_argument("--quick", action="store_true", help="fewer rounds, 2 shapes, a smaller model")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--kinds", default="layernorm,rmsnorm,zrmsnorm,dyt")
    ap.add_argument("--skip-model", action="store_true")
    ap.add_argument("--dtype", default="f32", choices=sorted(DTYPES),
                    help="storage type of x, y and their gradients (parameters stay f32)")
    ap.add_argument("--shapes", default=None, help="ROWSxD,... (default: the bench norms shapes)")
    a = ap.parse_args()
    rounds = a.rounds or (4 if a.quick else 8)
    shapes = [(8192, 1024), (512, 64)] if a.quick else SHAPES
    if a.shapes:
        shapes = [tuple(int(v) for v in s.lower().split("x")) for s in a.shapes.split(",")]
    threads_all = len(os.sched_getaffinity(0))
    thread_counts = [1] + ([threads_all] if threads_all > 1 else [])
    out = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
           "cpus": threads_all, "torch": torch.__version__, "isa": normlab.isa(), "norms": [], "step": []}
    print(f"torch {torch.__version__}, normlab kernels {normlab.isa()}, {threads_all} CPUs, "
          f"{rounds} interleaved rounds per comparison, x and gradients in {a.dtype}")
    out["dtype"] = a.dtype
    print(f"{'kind':9} {'shape':>11} {'thr':>3} {'torch ms':>9} {'normlab ms':>10} "
          f"{'speed-up':>8} {'min-max':>11}  verdict")
    for th in thread_counts:
        torch.set_num_threads(th)
        for kind in a.kinds.split(","):
            for rows, d in shapes:
                ref, ours = norm_pair(kind, rows, d, DTYPES[a.dtype])
                reps = max(3, int(2e7 / (rows * d)))
                r = summarise(*interleaved(ref, ours, rounds, reps))
                r.update(kind=kind, rows=rows, d=d, threads=th)
                out["norms"].append(r)
                print(f"{kind:9} {f'{rows}x{d}':>11} {th:>3} {r['torch_ms']:9.3f} {r['normlab_ms']:10.3f} "
                      f"{r['ratio']:7.2f}x {r['ratio_min']:5.2f}-{r['ratio_max']:<5.2f}  {r['verdict']}")
    if not a.skip_model:
        d, layers, seq, b = (256, 4, 128, 4) if a.quick else (512, 8, 256, 4)
        print(f"\nLlama-style training step (d {d}, {layers} layers, seq {seq}, batch {b}; "
              "fwd + bwd + AdamW), interleaved")
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, 256, (b, seq), generator=g)
        y = torch.randint(0, 256, (b, seq), generator=g)
        variants = {}
        for name in ("torch", "normlab", "identity"):
            m = build_model(d, layers, 8, seq, norm=(lambda n: nn.Identity()) if name == "identity" else None)
            if name == "normlab":
                nt.swap_norms(m)
            variants[name] = train_step_fn(m, x, y)
        for th in thread_counts:
            torch.set_num_threads(th)
            ta, tb = interleaved(variants["torch"], variants["normlab"], max(3, rounds // 2), 1)
            ti, _ = interleaved(variants["identity"], variants["normlab"], max(3, rounds // 2), 1)
            r = summarise(ta, tb)
            share = (statistics.median(ta) - statistics.median(ti)) / statistics.median(ta)
            r.update(threads=th, identity_ms=1e3 * statistics.median(ti), norm_share=share)
            out["step"].append(r)
            print(f"{th} thread(s): torch.nn.RMSNorm {r['torch_ms']:.1f} ms, normlab RMSNorm "
                  f"{r['normlab_ms']:.1f} ms, no norms {r['identity_ms']:.1f} ms: speed-up "
                  f"{r['ratio']:.3f}x (rounds {r['ratio_min']:.3f}-{r['ratio_max']:.3f}, {r['verdict']}); "
                  f"norms are {100 * share:.1f}% of PyTorch's step")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
