#!/usr/bin/env python3
"""Write PyTorch golden fixtures for normlab's norm kernels.

Forward and backward of torch.nn.functional.layer_norm and rms_norm (and
rms_norm with weight 1 + w, which is normlab's zero-centred RMSNorm), and
of Dynamic Tanh (weight * tanh(alpha x) + bias) and Dynamic erf (weight *
erf(alpha x + shift) + bias) written with torch ops as in their papers'
reference code, in float32 on CPU, at several d (odd ones included) and eps. The output,
crates/normlab-kernels/tests/fixtures/torch_norms.json, is committed; the
Rust test tests/torch_fixtures.rs compares against it. CI never runs this.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy
    /tmp/venv/bin/python scripts/gen_torch_fixtures.py
"""
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "normlab-kernels", "tests", "fixtures", "torch_norms.json")


def case(op, rows, d, eps, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, d, generator=g) * 2.0 + 0.5).float()
    if seed % 3 == 0:
        x = x * 0.01 + 100.0  # rows with |mean| >> std
    dy = torch.randn(rows, d, generator=g).float()
    w = (1.0 + 0.3 * torch.randn(d, generator=g)).float()
    b = (0.3 * torch.randn(d, generator=g)).float()
    if op == "rms_norm_zero_centred":
        w = (0.3 * torch.randn(d, generator=g)).float()
    alpha = (0.5 + 0.2 * torch.randn(1, generator=g)).float()
    shift = (0.3 * torch.randn(1, generator=g)).float()
    xr = x.clone().requires_grad_(True)
    wr = w.clone().requires_grad_(True)
    br = b.clone().requires_grad_(True)
    ar = alpha.clone().requires_grad_(True)
    sr = shift.clone().requires_grad_(True)
    if op == "layer_norm":
        y = F.layer_norm(xr, (d,), wr, br, eps)
    elif op == "rms_norm":
        y = F.rms_norm(xr, (d,), wr, eps)
    elif op == "rms_norm_zero_centred":
        y = F.rms_norm(xr, (d,), 1.0 + wr, eps)
    elif op == "dyt":
        y = wr * torch.tanh(ar * xr) + br
    else:
        y = wr * torch.erf(ar * xr + sr) + br
    y.backward(dy)
    rec = {
        "op": op, "rows": rows, "d": d, "eps": eps,
        "x": x.flatten().tolist(), "weight": w.tolist(), "dy": dy.flatten().tolist(),
        "y": y.detach().flatten().tolist(), "dx": xr.grad.flatten().tolist(), "dweight": wr.grad.tolist(),
    }
    if op in ("layer_norm", "dyt", "derf"):
        rec["bias"] = b.tolist()
        rec["dbias"] = br.grad.tolist()
    if op in ("dyt", "derf"):
        rec["alpha"] = alpha.item()
        rec["dalpha"] = ar.grad.item()
    if op == "derf":
        rec["shift"] = shift.item()
        rec["dshift"] = sr.grad.item()
    return rec


def shortest(tok):
    v = np.float32(float(tok))
    r = np.format_float_positional(v, unique=True) if 1e-4 < abs(v) < 1e6 else np.format_float_scientific(v, unique=True)
    r = r.replace(".e", ".0e")
    return r + "0" if r.endswith(".") else r


def main():
    cases = []
    seed = 1
    for op in ["layer_norm", "rms_norm", "rms_norm_zero_centred", "dyt", "derf"]:
        for d in [1, 3, 4, 7, 64, 257, 4097]:
            epss = [1e-5, 1e-6, 1e-2] if d <= 257 and op not in ("dyt", "derf") else [1e-5]
            for eps in epss:
                rows = 1 if d > 1000 else 3
                cases.append(case(op, rows, d, eps, seed))
                seed += 1
    meta = {"torch": torch.__version__, "generator": "scripts/gen_torch_fixtures.py", "cases": cases}
    text = json.dumps(meta)
    # Shortest decimal that round-trips each float32 (halves the file).
    import re
    text = re.sub(r"-?\d+\.\d+(?:e-?\d+)?", lambda m: shortest(m.group(0)), text)
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {len(cases)} cases to {os.path.normpath(OUT)} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
