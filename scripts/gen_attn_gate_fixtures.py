#!/usr/bin/env python3
"""Write PyTorch fixtures for normlab's attention output gate
(`--attn-gate`, nn/attention.rs; Qiu et al. 2025, arXiv 2505.06708, G1):
the merged heads times sigmoid(a W_g^T) before the output projection.

- elementwise: Hugging Face transformers' own `Qwen3NextAttention`, whose
  q_proj interleaves each head's query and gate rows, with its zero-centred
  QK-Norm on and its partial RoPE neutralised (cos = 1, sin = 0), an explicit
  causal mask, eager attention; no biases (normlab's are set to 0). normlab's
  c_attn is the query rows, then k_proj, then v_proj; its gate the gate rows;
  its QK-Norm gains 1 + w.
- headwise: a reference written here from the paper (one gate per head,
  W_g d x heads), QK-Norm off; the same reference with the elementwise form
  is first checked against Qwen3NextAttention, so both forms share it.

Forward and autograd backward of sum(out * dy) in float32 on CPU. The
output, crates/normlab/tests/fixtures/attn_gate.json, is committed; the
Rust test tests/attn_gate.rs compares against it. CI never runs this.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy transformers
    /tmp/venv/bin/python scripts/gen_attn_gate_fixtures.py
"""
import json
import os

import torch
import transformers
from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "normlab", "tests", "fixtures", "attn_gate.json")
EPS = 1e-6  # normlab's RMSNorm eps, Qwen3-Next's rms_norm_eps


def flat(t):
    return [float(v) for v in t.detach().reshape(-1)]


def causal(t):
    m = torch.full((t, t), torch.finfo(torch.float32).min).triu(1)
    return m[None, None]


def reference(x, wq, wk, wv, wg, wo, qn, kn, heads, form):
    """The gated attention from the paper, written out (qn, kn: QK-Norm
    gains, or None)."""
    b, t, d = x.shape
    hd = d // heads

    def split(z):
        return z.view(b, t, heads, hd).transpose(1, 2)

    def rms(z, g):
        return z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + EPS) * g

    q, k, v = split(x @ wq.T), split(x @ wk.T), split(x @ wv.T)
    if qn is not None:
        q, k = rms(q, qn), rms(k, kn)
    s = (q @ k.transpose(-1, -2)) * hd**-0.5 + causal(t)
    ctx = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
    g = torch.sigmoid(x @ wg.T)
    if form == "headwise":
        g = g.repeat_interleave(hd, dim=-1)
    return (ctx * g) @ wo.T


def qwen_case(b, t, d, heads, seed):
    torch.manual_seed(seed)
    hd = d // heads
    cfg = Qwen3NextConfig(hidden_size=d, num_attention_heads=heads, num_key_value_heads=heads, head_dim=hd,
                          attention_bias=False, rms_norm_eps=EPS)
    cfg._attn_implementation = "eager"
    m = Qwen3NextAttention(cfg, layer_idx=3).float()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    x = torch.randn(b, t, d, requires_grad=True)
    rot = cos_dim = m.q_norm.weight.numel()
    cos, sin = torch.ones(b, t, rot), torch.zeros(b, t, cos_dim)
    out, _ = m(x, (cos, sin), causal(t).expand(b, 1, t, t))
    dy = torch.randn_like(out)
    (out * dy).sum().backward()
    # q_proj's rows: per head, hd query rows then hd gate rows.
    wqg = m.q_proj.weight.view(heads, 2, hd, d)
    dqg = m.q_proj.weight.grad.view(heads, 2, hd, d)
    wq, wg = wqg[:, 0].reshape(d, d), wqg[:, 1].reshape(d, d)
    qn, kn = 1 + m.q_norm.weight, 1 + m.k_norm.weight
    ref = reference(x, wq, m.k_proj.weight, m.v_proj.weight, wg, m.o_proj.weight, qn, kn, heads, "elementwise")
    assert torch.allclose(ref, out, atol=1e-5), (ref - out).abs().max()
    return {
        "form": "elementwise", "qk_norm": True, "batch": b, "t": t, "d": d, "heads": heads,
        "x": flat(x), "dy": flat(dy), "out": flat(out), "dx": flat(x.grad),
        "w_qkv": flat(torch.cat([wq, m.k_proj.weight, m.v_proj.weight])), "w_gate": flat(wg),
        "w_proj": flat(m.o_proj.weight), "q_norm": flat(qn), "k_norm": flat(kn),
        "d_qkv": flat(torch.cat([dqg[:, 0].reshape(d, d), m.k_proj.weight.grad, m.v_proj.weight.grad])),
        "d_gate": flat(dqg[:, 1].reshape(d, d)), "d_proj": flat(m.o_proj.weight.grad),
        "d_q_norm": flat(m.q_norm.weight.grad), "d_k_norm": flat(m.k_norm.weight.grad),
    }


def headwise_case(b, t, d, heads, seed):
    torch.manual_seed(seed)
    ws = [torch.randn(r, d) * 0.5 for r in (d, d, d, heads, d)]
    for w in ws:
        w.requires_grad_(True)
    wq, wk, wv, wg, wo = ws
    x = torch.randn(b, t, d, requires_grad=True)
    out = reference(x, wq, wk, wv, wg, wo, None, None, heads, "headwise")
    dy = torch.randn_like(out)
    (out * dy).sum().backward()
    return {
        "form": "headwise", "qk_norm": False, "batch": b, "t": t, "d": d, "heads": heads,
        "x": flat(x), "dy": flat(dy), "out": flat(out), "dx": flat(x.grad),
        "w_qkv": flat(torch.cat([wq, wk, wv])), "w_gate": flat(wg), "w_proj": flat(wo),
        "d_qkv": flat(torch.cat([wq.grad, wk.grad, wv.grad])), "d_gate": flat(wg.grad), "d_proj": flat(wo.grad),
    }


def main():
    cases = [qwen_case(2, 5, 8, 2, 1), qwen_case(1, 7, 12, 3, 2), headwise_case(2, 5, 8, 2, 3), headwise_case(1, 6, 12, 4, 4)]
    out = {
        "generator": "scripts/gen_attn_gate_fixtures.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cases": cases,
    }
    with open(OUT, "w") as f:
        json.dump(out, f)
    print(OUT, len(cases))


if __name__ == "__main__":
    main()
