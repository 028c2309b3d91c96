#!/usr/bin/env python3
"""Write PyTorch fixtures for normlab's mHC (nn/mhc.rs) from Hugging Face
transformers' own modules: `DeepseekV4HyperConnection` (one sublayer's
pre/post/comb maps, Sinkhorn included) and `DeepseekV4HyperHead` (the
final collapse), used as they are, with the decoder layer's update
X' = post (outer) o + comb^T X written as transformers'
`DeepseekV4DecoderLayer` writes it. The branch is a stand-in,
o = tanh(collapsed W) (W d x d), so that the fixture tests the connection
and nothing else. Parameters are moved off transformers' initialisation
(W ~ N(0, 0.02), bias 0, scales 1) so that each gradient term matters;
forward and autograd backward of sum(X' * dy) (and of sum(head(X) * dh)
for the head) in float32 on CPU. The output,
crates/normlab/tests/fixtures/mhc.json, is committed; the Rust test
tests/hyper_fixtures.rs compares against it. CI never runs this.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy transformers
    /tmp/venv/bin/python scripts/gen_mhc_fixtures.py
"""
import json
import os

import torch
import transformers
from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config
from transformers.models.deepseek_v4.modeling_deepseek_v4 import (
    DeepseekV4HyperConnection,
    DeepseekV4HyperHead,
)

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "normlab", "tests", "fixtures", "mhc.json")


def case(rows, n, d, iters, seed):
    torch.manual_seed(seed)
    cfg = DeepseekV4Config(hidden_size=d, hc_mult=n, hc_sinkhorn_iters=iters)
    hc = DeepseekV4HyperConnection(cfg).float()
    head = DeepseekV4HyperHead(cfg).float()
    with torch.no_grad():
        # transformers' init (as _init_weights), then moved off it.
        for m, (fn, base, scale) in [(hc, ("fn", "base", "scale")), (head, ("hc_fn", "hc_base", "hc_scale"))]:
            getattr(m, fn).normal_(0.0, 0.02)
            getattr(m, base).zero_()
            getattr(m, scale).fill_(1.0)
            getattr(m, fn).add_(0.3 * torch.randn_like(getattr(m, fn)))
            getattr(m, base).add_(0.5 * torch.randn_like(getattr(m, base)))
            getattr(m, scale).add_(0.3 * torch.randn_like(getattr(m, scale)))
    w = torch.randn(d, d) / d ** 0.5
    x = torch.randn(1, rows, n, d).requires_grad_(True)
    dy = torch.randn(1, rows, n, d)
    post, comb, collapsed = hc(x)
    o = torch.tanh(collapsed @ w)
    y = post.unsqueeze(-1) * o.unsqueeze(-2) + torch.matmul(comb.transpose(-1, -2), x)
    (y * dy).sum().backward()
    xh = x.detach().clone().requires_grad_(True)
    dh = torch.randn(1, rows, d)
    hy = head(xh)
    (hy * dh).sum().backward()
    flat = lambda t: t.detach().flatten().tolist()
    return {
        "rows": rows, "n": n, "d": d, "iters": iters,
        "x": flat(x), "w": flat(w), "dy": flat(dy),
        "h": flat(collapsed), "y": flat(y), "dx": flat(x.grad),
        "params": {"fn": flat(hc.fn), "base": flat(hc.base), "scale": flat(hc.scale)},
        "grads": {"fn": flat(hc.fn.grad), "base": flat(hc.base.grad), "scale": flat(hc.scale.grad)},
        "head": {
            "params": {"fn": flat(head.hc_fn), "base": flat(head.hc_base), "scale": flat(head.hc_scale)},
            "dh": flat(dh), "out": flat(hy), "dx": flat(xh.grad),
            "grads": {"fn": flat(head.hc_fn.grad), "base": flat(head.hc_base.grad), "scale": flat(head.hc_scale.grad)},
        },
    }


def main():
    # rows 11: two groups of the 8-token Sinkhorn lanes, the second partial.
    cases = [case(5, 4, 8, 20, 1), case(3, 2, 6, 3, 2), case(4, 3, 5, 20, 3), case(11, 4, 6, 20, 4)]
    with open(OUT, "w") as f:
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__, "cases": cases}, f)
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
