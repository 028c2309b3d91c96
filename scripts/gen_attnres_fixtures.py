#!/usr/bin/env python3
"""Write PyTorch fixtures for normlab's Attention Residuals (nn/attnres.rs).

A reference written from the paper (Kimi team, arXiv 2603.15031, Eq. 2-6
and its block pseudocode), not from normlab's code: per token a bank of
slots X (slots x d); a sublayer reads h = sum_i alpha_i X_i over slots
0..reads-1 with alpha = softmax_i(w . RMSNorm(X_i)) (the keys' RMSNorm
without gain, eps 1e-6, the values raw), and its output is added into its
own slot. The branch is a stand-in, o = tanh(h W) (W d x d). The query is
moved off its zero initialisation so that the scores matter; forward and
autograd backward of sum(X' * dy) in float32 on CPU; and the head's mix of
every slot, with its gradient for sum(head(X) * dh). The output,
crates/normlab/tests/fixtures/attnres.json, is committed; the Rust test
tests/hyper_fixtures.rs compares against it. CI never runs this.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy
    /tmp/venv/bin/python scripts/gen_attnres_fixtures.py
"""
import json
import os

import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "normlab", "tests", "fixtures", "attnres.json")


def mix(x, w, reads):
    """x: (rows, slots, d) -> the depth mix of slots 0..reads-1, (rows, d)."""
    v = x[:, :reads]
    k = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)
    alpha = torch.softmax(k @ w, dim=1)  # (rows, reads)
    return (alpha.unsqueeze(-1) * v).sum(1)


def case(rows, slots, own, reads, d, seed):
    torch.manual_seed(seed)
    w = (0.5 * torch.randn(d)).requires_grad_(True)
    wb = torch.randn(d, d) / d ** 0.5
    x = torch.randn(rows, slots, d)
    x[:, own + 1:] = 0.0  # slots after this block are still empty
    if reads == own:
        x[:, own] = 0.0  # the block's first sublayer: its slot is empty
    x.requires_grad_(True)
    dy = torch.randn(rows, slots, d)
    h = mix(x, w, reads)
    o = torch.tanh(h @ wb)
    onehot = torch.zeros(slots)
    onehot[own] = 1.0
    y = x + onehot.view(1, slots, 1) * o.unsqueeze(1)
    (y * dy).sum().backward()
    wh = (0.5 * torch.randn(d)).requires_grad_(True)
    xh = torch.randn(rows, slots, d).requires_grad_(True)
    dh = torch.randn(rows, d)
    out = mix(xh, wh, slots)
    (out * dh).sum().backward()
    flat = lambda t: t.detach().flatten().tolist()
    return {
        "rows": rows, "slots": slots, "own": own, "reads": reads, "d": d,
        "query": flat(w), "x": flat(x), "w": flat(wb), "dy": flat(dy),
        "h": flat(h), "y": flat(y), "dx": flat(x.grad), "dquery": flat(w.grad),
        "head": {"query": flat(wh), "x": flat(xh), "dh": flat(dh), "out": flat(out),
                 "dx": flat(xh.grad), "dquery": flat(wh.grad)},
    }


def main():
    cases = [case(5, 4, 2, 3, 8, 1), case(3, 5, 3, 3, 6, 2), case(4, 9, 8, 8, 5, 3), case(2, 2, 1, 1, 7, 4)]
    with open(OUT, "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f)
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
