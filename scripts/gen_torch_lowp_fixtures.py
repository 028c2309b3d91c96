#!/usr/bin/env python3
"""Write PyTorch golden fixtures for normlab's 16-bit norm kernels.

F.layer_norm, F.rms_norm and rms_norm with weight 1 + w (normlab's
zero-centred RMSNorm) on CPU with inputs and output gradients stored in
bfloat16 or float16 and float32 parameters (PyTorch's mixed-type path:
statistics in float32, outputs rounded to the input's type), forward and
backward, several d (odd ones, and rows longer than normlab's sub-blocks).
Values are written as the 16-bit patterns (uint16), so nothing is rounded
on the way. The output, crates/normlab-kernels/tests/fixtures/torch_lowp.json,
is committed; tests/lowp.rs compares against it. CI never runs this.

    /tmp/venv/bin/python scripts/gen_torch_lowp_fixtures.py
"""
import json
import os

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "normlab-kernels", "tests", "fixtures", "torch_lowp.json")
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def bits(t):
    return t.contiguous().view(torch.int16).flatten().to(torch.int32).bitwise_and(0xFFFF).tolist()


def case(op, dtype, rows, d, eps, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, d, generator=g) * 2.0 + 0.5)
    if seed % 3 == 0:
        x = x * 0.01 + 100.0  # rows with |mean| >> std
    x = x.to(DTYPES[dtype])
    dy = torch.randn(rows, d, generator=g).to(DTYPES[dtype])
    w = (1.0 + 0.3 * torch.randn(d, generator=g)).float()
    b = (0.3 * torch.randn(d, generator=g)).float()
    if op == "rms_norm_zero_centred":
        w = (0.3 * torch.randn(d, generator=g)).float()
    xr = x.clone().requires_grad_(True)
    wr = w.clone().requires_grad_(True)
    br = b.clone().requires_grad_(True)
    if op == "layer_norm":
        y = F.layer_norm(xr, (d,), wr, br, eps)
    elif op == "rms_norm":
        y = F.rms_norm(xr, (d,), wr, eps)
    else:
        y = F.rms_norm(xr, (d,), 1.0 + wr, eps)
    assert y.dtype == x.dtype, (op, y.dtype)
    y.backward(dy)
    rec = {
        "op": op, "dtype": dtype, "rows": rows, "d": d, "eps": eps,
        "x": bits(x), "dy": bits(dy), "weight": w.tolist(),
        "y": bits(y.detach()), "dx": bits(xr.grad), "dweight": wr.grad.float().tolist(),
    }
    if op == "layer_norm":
        rec["bias"] = b.tolist()
        rec["dbias"] = br.grad.float().tolist()
    return rec


def main():
    cases = []
    seed = 1
    for dtype in DTYPES:
        for op in ["layer_norm", "rms_norm", "rms_norm_zero_centred"]:
            for d in [1, 3, 7, 64, 257, 4097]:
                for eps in ([1e-5, 1e-2] if d <= 257 else [1e-5]):
                    rows = 1 if d > 1000 else 5
                    cases.append(case(op, dtype, rows, d, eps, seed))
                    seed += 1
    meta = {"torch": torch.__version__, "generator": "scripts/gen_torch_lowp_fixtures.py", "cases": cases}
    text = json.dumps(meta, separators=(",", ":"))
    # Shortest decimal that round-trips each float32 parameter or gradient.
    import re
    from gen_torch_fixtures import shortest
    text = re.sub(r"-?\d+\.\d+(?:e-?\d+)?", lambda m: shortest(m.group(0)), text)
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {len(cases)} cases to {os.path.normpath(OUT)} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
