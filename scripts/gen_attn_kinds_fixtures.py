#!/usr/bin/env python3
"""Write PyTorch fixtures for normlab's attention kinds (`--attn-kind`,
nn/attn_fn.rs), the attention-sink removers:

- sink-logit: Hugging Face transformers' own `GptOssAttention` (eager
  attention, learned per-head sinks in the softmax's denominator), with its
  RoPE neutralised (cos = 1, sin = 0), an explicit causal mask and its
  biases on (normlab's c_attn is q_proj | k_proj | v_proj, rows stacked).
- sigmoid (Gu et al. 2024) and relu (Guo et al. 2024): a reference written
  here from the papers, P = sigmoid(S) and P = relu(S) / (i + 1) on the
  causal scores S = q k^T / sqrt(hd), without normalisation; the same
  reference with the softmax is first checked against GptOssAttention with
  its sinks at -inf, so the three share it.

Forward and autograd backward of sum(out * dy) in float32 on CPU. The
output, crates/normlab/tests/fixtures/attn_kinds.json, is committed; the
Rust test tests/attn_kinds.rs compares against it. CI never runs this.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy transformers
    /tmp/venv/bin/python scripts/gen_attn_kinds_fixtures.py
"""
import json
import os

import torch
import transformers
from transformers.models.gpt_oss.configuration_gpt_oss import GptOssConfig
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "normlab", "tests", "fixtures", "attn_kinds.json")


def flat(t):
    return [float(v) for v in t.detach().reshape(-1)]


def causal(t):
    m = torch.full((t, t), torch.finfo(torch.float32).min).triu(1)
    return m[None, None]


def reference(x, wqkv, bqkv, wo, bo, heads, kind):
    """Attention with the score map `kind`, written out."""
    b, t, d = x.shape
    hd = d // heads
    q, k, v = (x @ wqkv.T + bqkv).split(d, dim=-1)

    def split(z):
        return z.view(b, t, heads, hd).transpose(1, 2)

    q, k, v = split(q), split(k), split(v)
    s = (q @ k.transpose(-1, -2)) * hd**-0.5
    keep = torch.ones(t, t).tril().bool()
    if kind == "softmax":
        p = (s + causal(t)).softmax(-1)
    elif kind == "sigmoid":
        p = torch.sigmoid(s) * keep
    elif kind == "relu":
        n = torch.arange(1, t + 1, dtype=torch.float32)[:, None]
        p = torch.relu(s) / n * keep
    ctx = (p @ v).transpose(1, 2).reshape(b, t, d)
    return ctx @ wo.T + bo


def gpt_oss(d, heads):
    hd = d // heads
    cfg = GptOssConfig(hidden_size=d, num_attention_heads=heads, num_key_value_heads=heads, head_dim=hd,
                       attention_bias=True, num_hidden_layers=1, layer_types=["full_attention"])
    cfg._attn_implementation = "eager"
    return GptOssAttention(cfg, layer_idx=0).float()


def run_gpt_oss(m, x, t):
    b, hd = x.shape[0], m.head_dim
    cos, sin = torch.ones(b, t, hd // 2), torch.zeros(b, t, hd // 2)
    out, _ = m(x, (cos, sin), causal(t).expand(b, 1, t, t))
    return out


def stacked(m):
    w = torch.cat([m.q_proj.weight, m.k_proj.weight, m.v_proj.weight])
    b = torch.cat([m.q_proj.bias, m.k_proj.bias, m.v_proj.bias])
    return w, b


def sink_case(b, t, d, heads, seed):
    torch.manual_seed(seed)
    m = gpt_oss(d, heads)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    x = torch.randn(b, t, d, requires_grad=True)
    out = run_gpt_oss(m, x, t)
    dy = torch.randn_like(out)
    (out * dy).sum().backward()
    w, bb = stacked(m)
    dw = torch.cat([m.q_proj.weight.grad, m.k_proj.weight.grad, m.v_proj.weight.grad])
    db = torch.cat([m.q_proj.bias.grad, m.k_proj.bias.grad, m.v_proj.bias.grad])
    return {
        "kind": "sink-logit", "batch": b, "t": t, "d": d, "heads": heads,
        "x": flat(x), "dy": flat(dy), "out": flat(out), "dx": flat(x.grad),
        "w_qkv": flat(w), "b_qkv": flat(bb), "w_proj": flat(m.o_proj.weight), "b_proj": flat(m.o_proj.bias),
        "sinks": flat(m.sinks),
        "d_w_qkv": flat(dw), "d_b_qkv": flat(db), "d_w_proj": flat(m.o_proj.weight.grad),
        "d_b_proj": flat(m.o_proj.bias.grad), "d_sinks": flat(m.sinks.grad),
    }


def check_reference(b, t, d, heads, seed):
    """The written-out softmax attention equals GptOssAttention with its
    sinks at -inf."""
    torch.manual_seed(seed)
    m = gpt_oss(d, heads)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
        m.sinks.fill_(-1e30)
        x = torch.randn(b, t, d)
        w, bb = stacked(m)
        ref = reference(x, w, bb, m.o_proj.weight, m.o_proj.bias, heads, "softmax")
        assert torch.allclose(ref, run_gpt_oss(m, x, t), atol=1e-5)


def reference_case(kind, b, t, d, heads, seed):
    torch.manual_seed(seed)
    ws = [torch.randn(3 * d, d) * 0.5, torch.randn(3 * d) * 0.5, torch.randn(d, d) * 0.5, torch.randn(d) * 0.5]
    for w in ws:
        w.requires_grad_(True)
    x = torch.randn(b, t, d, requires_grad=True)
    out = reference(x, *ws, heads, kind)
    dy = torch.randn_like(out)
    (out * dy).sum().backward()
    w, bb, wo, bo = ws
    return {
        "kind": kind, "batch": b, "t": t, "d": d, "heads": heads,
        "x": flat(x), "dy": flat(dy), "out": flat(out), "dx": flat(x.grad),
        "w_qkv": flat(w), "b_qkv": flat(bb), "w_proj": flat(wo), "b_proj": flat(bo),
        "d_w_qkv": flat(w.grad), "d_b_qkv": flat(bb.grad), "d_w_proj": flat(wo.grad), "d_b_proj": flat(bo.grad),
    }


def main():
    check_reference(2, 5, 8, 2, 0)
    cases = [sink_case(2, 5, 8, 2, 1), sink_case(1, 7, 12, 3, 2)]
    for kind in ["sigmoid", "relu"]:
        cases += [reference_case(kind, 2, 5, 8, 2, 3), reference_case(kind, 1, 7, 12, 3, 4)]
    out = {
        "generator": "scripts/gen_attn_kinds_fixtures.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cases": cases,
    }
    with open(OUT, "w") as f:
        json.dump(out, f)
    print(OUT, len(cases))


if __name__ == "__main__":
    main()
