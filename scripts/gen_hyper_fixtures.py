#!/usr/bin/env python3
"""Write PyTorch fixtures for normlab's hyper-connections (nn/hyper.rs).

A reference written from the paper (Zhu et al. 2024, arXiv 2409.19606,
the static and dynamic forms and their initialisation as its pseudocode
gives them), not from normlab's code: per token the n streams H (n x d),
alpha (n x (n+1)) and beta (n); the sublayer reads alpha[:, 0]^T H and
writes beta o + alpha[:, 1:]^T H; the dynamic form adds
s_a tanh(LayerNorm(H) W_a) to alpha and s_b tanh(LayerNorm(H) w_b) to beta.
The branch is a stand-in, o = tanh(h W) (W d x d), so that the fixture
tests the connection and nothing else. Every parameter is moved off its
initial value (so that each gradient term matters); forward and autograd
backward of sum(X' * dy) in float32 on CPU. The output,
crates/normlab/tests/fixtures/hyper.json, is committed; the Rust test
tests/hyper_fixtures.rs compares against it. CI never runs this.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy
    /tmp/venv/bin/python scripts/gen_hyper_fixtures.py
"""
import json
import os

import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "normlab", "tests", "fixtures", "hyper.json")


class HyperConnection(torch.nn.Module):
    """One layer's hyper-connection, as the paper's pseudocode sets it up."""

    def __init__(self, d, n, layer_id, dynamic):
        super().__init__()
        self.n, self.dynamic = n, dynamic
        a0 = torch.zeros(n, 1)
        a0[layer_id % n, 0] = 1.0
        self.static_alpha = torch.nn.Parameter(torch.cat([a0, torch.eye(n)], dim=1))
        self.static_beta = torch.nn.Parameter(torch.ones(n))
        if dynamic:
            self.norm = torch.nn.LayerNorm(d, eps=1e-5)
            self.dynamic_alpha_fn = torch.nn.Parameter(torch.zeros(d, n + 1))
            self.dynamic_alpha_scale = torch.nn.Parameter(torch.ones(1) * 0.01)
            self.dynamic_beta_fn = torch.nn.Parameter(torch.zeros(d))
            self.dynamic_beta_scale = torch.nn.Parameter(torch.ones(1) * 0.01)

    def width(self, h):
        """h: (rows, n, d) -> the layer input (rows, d), alpha, beta."""
        alpha = self.static_alpha.expand(h.shape[0], -1, -1)
        beta = self.static_beta.expand(h.shape[0], -1)
        if self.dynamic:
            hn = self.norm(h)
            alpha = alpha + self.dynamic_alpha_scale * torch.tanh(hn @ self.dynamic_alpha_fn)
            beta = beta + self.dynamic_beta_scale * torch.tanh(hn @ self.dynamic_beta_fn)
        mix = alpha.transpose(1, 2) @ h  # (rows, n+1, d)
        return mix[:, 0], mix[:, 1:], beta

    def depth(self, rest, o, beta):
        return beta.unsqueeze(-1) * o.unsqueeze(1) + rest


def case(rows, n, d, layer_id, dynamic, seed):
    torch.manual_seed(seed)
    hc = HyperConnection(d, n, layer_id, dynamic)
    with torch.no_grad():
        for p in hc.parameters():
            p.add_(0.2 * torch.randn_like(p))
    w = (torch.randn(d, d) / d ** 0.5).requires_grad_(False)
    x = torch.randn(rows, n, d).requires_grad_(True)
    dy = torch.randn(rows, n, d)
    h, rest, beta = hc.width(x)
    o = torch.tanh(h @ w)
    y = hc.depth(rest, o, beta)
    (y * dy).sum().backward()
    flat = lambda t: t.detach().flatten().tolist()
    rec = {
        "rows": rows, "n": n, "d": d, "layer_id": layer_id, "dynamic": dynamic,
        "x": flat(x), "w": flat(w), "dy": flat(dy),
        "h": flat(h), "y": flat(y), "dx": flat(x.grad),
        "params": {
            "static_alpha": flat(hc.static_alpha),
            "static_beta": flat(hc.static_beta),
        },
        "grads": {
            "static_alpha": flat(hc.static_alpha.grad),
            "static_beta": flat(hc.static_beta.grad),
        },
    }
    if dynamic:
        # normlab stores W_a as [n+1, d] (out x in, as a Linear).
        for name, t in [
            ("norm.weight", hc.norm.weight), ("norm.bias", hc.norm.bias),
            ("dynamic_alpha_fn", hc.dynamic_alpha_fn.t()), ("dynamic_alpha_scale", hc.dynamic_alpha_scale),
            ("dynamic_beta_fn", hc.dynamic_beta_fn), ("dynamic_beta_scale", hc.dynamic_beta_scale),
        ]:
            rec["params"][name] = flat(t)
        for name, g in [
            ("norm.weight", hc.norm.weight.grad), ("norm.bias", hc.norm.bias.grad),
            ("dynamic_alpha_fn", hc.dynamic_alpha_fn.grad.t()), ("dynamic_alpha_scale", hc.dynamic_alpha_scale.grad),
            ("dynamic_beta_fn", hc.dynamic_beta_fn.grad), ("dynamic_beta_scale", hc.dynamic_beta_scale.grad),
        ]:
            rec["grads"][name] = flat(g)
    return rec


def main():
    cases = [
        case(5, 2, 8, 0, False, 1),
        case(3, 4, 7, 5, False, 2),
        case(4, 4, 8, 2, True, 3),
        case(6, 3, 5, 1, True, 4),
    ]
    with open(OUT, "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f)
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
