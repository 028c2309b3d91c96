#!/usr/bin/env python3
"""Write PyTorch fixtures for normlab's clamped SwiGLU (`--swiglu-clamp`,
nn/mlp.rs) from Hugging Face transformers' own `DeepseekV4MLP`: the gate
projection's output clamped to at most the limit, the up projection's to
[-limit, limit], SiLU, the down projection; used as it is, with biases on
(normlab's MLP has them) and weights drawn large enough that a good share
of both projections' outputs is clamped. Forward and autograd backward of
sum(y * dy) in float32 on CPU: the output, every input and parameter
gradient. normlab's `c_fc` is the gate's rows then the up's, `c_proj` the
down projection. The output, crates/normlab/tests/fixtures/swiglu_clamp.json,
is committed; the Rust test tests/swiglu_clamp.rs compares against it. CI
never runs this.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy transformers
    /tmp/venv/bin/python scripts/gen_swiglu_clamp_fixtures.py
"""
import json
import os

import torch
import transformers
from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config
from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4MLP

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "normlab", "tests", "fixtures", "swiglu_clamp.json")


def flat(t):
    return [float(v) for v in t.detach().reshape(-1)]


def case(rows, d, h, limit, seed):
    torch.manual_seed(seed)
    cfg = DeepseekV4Config(hidden_size=d, intermediate_size=h, swiglu_limit=limit, mlp_bias=True, hidden_act="silu")
    mlp = DeepseekV4MLP(cfg).float()
    with torch.no_grad():
        for p in mlp.parameters():
            p.copy_(torch.randn_like(p) * 0.8)
    x = torch.randn(rows, d, requires_grad=True)
    y = mlp(x)
    dy = torch.randn_like(y)
    (y * dy).sum().backward()
    gate = mlp.gate_proj(x)
    up = mlp.up_proj(x)
    return {
        "rows": rows, "d": d, "hidden": h, "limit": limit,
        "clamped_gate": int((gate > limit).sum()), "clamped_up": int((up.abs() > limit).sum()),
        "x": flat(x), "dy": flat(dy), "y": flat(y), "dx": flat(x.grad),
        "fc_w": flat(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])),
        "fc_b": flat(torch.cat([mlp.gate_proj.bias, mlp.up_proj.bias])),
        "proj_w": flat(mlp.down_proj.weight), "proj_b": flat(mlp.down_proj.bias),
        "d_fc_w": flat(torch.cat([mlp.gate_proj.weight.grad, mlp.up_proj.weight.grad])),
        "d_fc_b": flat(torch.cat([mlp.gate_proj.bias.grad, mlp.up_proj.bias.grad])),
        "d_proj_w": flat(mlp.down_proj.weight.grad), "d_proj_b": flat(mlp.down_proj.bias.grad),
    }


def main():
    cases = [case(5, 8, 12, 2.0, 1), case(7, 6, 10, 1.0, 2), case(4, 8, 16, 7.0, 3)]
    for c in cases:
        assert c["clamped_gate"] > 0 and c["clamped_up"] > 0 or c["limit"] == 7.0, c["limit"]
    out = {
        "generator": "scripts/gen_swiglu_clamp_fixtures.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cases": cases,
    }
    with open(OUT, "w") as f:
        json.dump(out, f)
    print(OUT, [(c["limit"], c["clamped_gate"], c["clamped_up"]) for c in cases])


if __name__ == "__main__":
    main()
