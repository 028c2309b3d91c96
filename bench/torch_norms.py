#!/usr/bin/env python3
"""PyTorch side of `normlab bench norms`: F.layer_norm and F.rms_norm (and
rms_norm with weight 1 + w, normlab's zrmsnorm; and, in eager PyTorch ops as
the DyT and Derf papers write them, dyt = w * tanh(alpha x) + b and
derf = w * erf(alpha x + s) + b) forward and forward+backward
on the same shapes, with 1 thread and all threads, medians of repeated runs.

PyTorch's timings on this kind of machine swing by 2x from run to run
(every call allocates its outputs; at 32 MiB glibc hands out fresh mmap'd
pages, so page faults land inside the timed region). To compare against
PyTorch at its best, each point is measured --trials times (default 3) and
the smallest median is kept.

With --normlab FILE (the output of `normlab bench norms --json`) it prints
both side by side with ratios (PyTorch time / normlab time: > 1 means normlab
is faster).

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy
    cargo run --release -- bench norms --json > /tmp/normlab.json
    /tmp/venv/bin/python bench/torch_norms.py --normlab /tmp/normlab.json
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

SHAPES = [(512, 64), (8192, 256), (8192, 768), (8192, 1024), (2048, 4096), (256, 8192)]
KINDS = ["layernorm", "rmsnorm", "zrmsnorm", "dyt", "derf"]


def time_median(fn, target=0.3, min_reps=11):
    t0 = time.perf_counter()
    fn()
    first = max(time.perf_counter() - t0, 1e-9)
    reps = max(min_reps, min(10000, int(target / first)))
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def bench(kind, rows, d, backward):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(rows, d, generator=g) * 2 + 0.5
    dy = torch.randn(rows, d, generator=g)
    w = torch.ones(d)
    b = torch.zeros(d)
    alpha = torch.tensor(0.5)
    shift = torch.tensor(0.0)
    if backward:
        for t in (x, w, b, alpha, shift):
            t.requires_grad_(True)

    def fwd():
        if kind == "layernorm":
            return F.layer_norm(x, (d,), w, b, 1e-5)
        if kind == "rmsnorm":
            return F.rms_norm(x, (d,), w, 1e-6)
        if kind == "dyt":
            return w * torch.tanh(alpha * x) + b
        if kind == "derf":
            return w * torch.erf(alpha * x + shift) + b
        return F.rms_norm(x, (d,), 1.0 + w, 1e-6)

    if not backward:
        with torch.no_grad():
            return time_median(fwd)

    def fwd_bwd():
        for t in (x, w, b, alpha, shift):
            t.grad = None
        fwd().backward(dy)

    return time_median(fwd_bwd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--normlab", help="JSON from `normlab bench norms --json`")
    ap.add_argument("--threads", default=f"1,{os.cpu_count()}")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--shapes", help="ROWSxD,... (default: the standard sweep)")
    args = ap.parse_args()
    ours = {}
    if args.normlab:
        for r in json.load(open(args.normlab)):
            ours[(r["kind"], r["pass"], r["rows"], r["d"], r["threads"])] = r["median_us"]
    threads = sorted({int(t) for t in args.threads.split(",")})
    kinds = [k for k in args.kinds.split(",") if k]
    shapes = SHAPES
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    print(f"# torch {torch.__version__}, {os.cpu_count()} cpus, {time.strftime('%Y-%m-%d')}, best of {args.trials} medians")
    print(f"{'kind':9} {'pass':8} {'shape':>10} {'thr':>3} {'torch_us':>10} {'normlab_us':>10} {'speedup':>7}")
    for t in threads:
        torch.set_num_threads(t)
        for rows, d in shapes:
            for kind in kinds:
                for passname, bwd in [("forward", False), ("forward_backward", True)]:
                    tt = min(bench(kind, rows, d, bwd) for _ in range(args.trials)) * 1e6
                    ov = ours.get((kind, passname, rows, d, t))
                    label = "fwd" if not bwd else "fwd+bwd"
                    if ov:
                        print(f"{kind:9} {label:8} {rows:>5}x{d:<5} {t:>3} {tt:10.1f} {ov:10.1f} {tt / ov:6.2f}x")
                    else:
                        print(f"{kind:9} {label:8} {rows:>5}x{d:<5} {t:>3} {tt:10.1f} {'-':>10} {'-':>7}")


if __name__ == "__main__":
    main()
