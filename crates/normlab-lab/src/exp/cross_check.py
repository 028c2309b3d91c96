"""The cross-check chapter's independent PyTorch side.

Written from the lesson's description and from normlab's documented
settings (docs/findings.md, shared claims), not from normlab's code: torch's
own modules (nn.Linear with its default init, nn.LayerNorm, nn.GELU), torch's
RNG (torch.manual_seed(seed) per seed), float32. `normlab exp cross-check`
runs it with its request as the one argument (JSON: seeds per claim) and
reads one JSON object from stdout; it can also be run by hand:

    python3 cross_check.py '{"C1": 3, "C2": 3, "C3": 3, "C6": 3}'

Exit status 3 with a one-line message when torch is missing.
"""

import json
import sys

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("torch is not installed in this Python", file=sys.stderr)
    sys.exit(3)


def mean_token_norm(x):
    """The lesson's metric: the mean over tokens of each token's L2 norm."""
    return x.norm(dim=-1).mean().item()


def c1_drift(seed):
    """20 plain linear layers, d 64, x (4, 16, 64), W ~ N(0, 0.3^2/d): the
    geometric-mean factor by which each layer scales the mean token norm."""
    torch.manual_seed(seed)
    d, layers = 64, 20
    x = torch.randn(4, 16, d)
    first = mean_token_norm(x)
    for _ in range(layers):
        w = torch.randn(d, d) * (0.3 / d**0.5)
        x = x @ w.T
    return (mean_token_norm(x) / first) ** (1.0 / layers)


def c2_identity(seed):
    """One block y = x + F(x), F = Linear(64,64)-GELU-Linear(64,64) at
    PyTorch's default init, x ~ N(0,1) of shape (1, 64), loss sum(y^2):
    |identity term| / |dL/dx|, and |dL/dx|."""
    torch.manual_seed(seed)
    f = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 64))
    x = torch.randn(1, 64, requires_grad=True)
    y = x + f(x)
    (y**2).sum().backward()
    identity = (2 * y).detach().norm().item()  # dL/dy, passed on unchanged
    total = x.grad.norm().item()
    return identity / total, total


class LessonBlock(nn.Module):
    """x + Linear(4d, d)(GELU(Linear(d, 4d)(LayerNorm(x))))."""

    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.f = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        return x + self.f(self.ln(x))


def c3_growth(seed):
    """12 of the lesson's Pre-LN blocks, d 128, x ~ N(0,1) (2, 16, 128):
    the mean token norm after the stack over the input's, and after a final
    LayerNorm."""
    torch.manual_seed(seed)
    d = 128
    blocks = nn.Sequential(*[LessonBlock(d) for _ in range(12)])
    final = nn.LayerNorm(d)
    x = torch.randn(2, 16, d)
    with torch.no_grad():
        y = blocks(x)
        return mean_token_norm(y) / mean_token_norm(x), mean_token_norm(final(y))


def rmsnorm(x, eps=1e-6):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)


def c6_stats(seed):
    """RMSNorm (unit gain) of rows ~ N(1.5, 3^2), d 512, 4096 rows: the mean
    of the row means and of the row standard deviations."""
    torch.manual_seed(seed)
    x = 1.5 + 3.0 * torch.randn(4096, 512)
    y = rmsnorm(x)
    return y.mean(dim=-1).mean().item(), y.std(dim=-1, unbiased=False).mean().item()


def c5_invariance():
    """The largest output change under x -> 3x and x -> x + 2, for LayerNorm
    and RMSNorm (rows ~ N(1.5, 3^2), d 512, 256 rows, seed 0)."""
    torch.manual_seed(0)
    x = 1.5 + 3.0 * torch.randn(256, 512)
    ln = nn.LayerNorm(512, elementwise_affine=False)
    out = {}
    for name, f in [("layernorm", ln), ("rmsnorm", rmsnorm)]:
        with torch.no_grad():
            y = f(x)
            out[name] = {
                "scale_change": (f(3 * x) - y).abs().max().item(),
                "shift_change": (f(x + 2) - y).abs().max().item(),
            }
    return out


def smollm2(req):
    """SmolLM2 through Hugging Face transformers, loading the same GGUF file
    (transformers dequantises it itself): per text (normlab's token ids),
    per block, the mean and the median over tokens of each token's norm
    after the block, and the largest |activation|."""
    try:
        from transformers import AutoModelForCausalLM
        import gguf  # noqa: F401  (transformers reads GGUF through it)
        import accelerate  # noqa: F401
    except ImportError as e:
        return {"unavailable": f"{e.name} is not installed (pip install transformers gguf accelerate)"}
    import os
    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(req["path"]), gguf_file=os.path.basename(req["path"]), dtype=torch.float32)
    model.eval()
    outs = []
    for layer in model.model.layers:
        layer.register_forward_hook(
            lambda _m, _i, out: outs.append((out[0] if isinstance(out, tuple) else out).detach()))
    mean, med, mx = [], [], []
    with torch.no_grad():
        for ids in req["ids"]:
            outs.clear()
            model(torch.tensor([ids]))
            norms = [h[0].norm(dim=-1) for h in outs]
            mean.append([n.mean().item() for n in norms])
            # The median of an even count: the mean of the two middle values.
            med.append([n.sort().values[(len(n) - 1) // 2: len(n) // 2 + 1].mean().item() for n in norms])
            mx.append([h.abs().max().item() for h in outs])
    return {"row_norm_out": mean, "row_norm_median_out": med, "max_abs": mx}


def main():
    req = json.loads(sys.argv[1])
    out = {"torch": torch.__version__}
    torch.set_num_threads(1)
    if req.get("C1"):
        out["C1"] = {"per_layer_factor": [c1_drift(s) for s in range(req["C1"])]}
    if req.get("C2"):
        r = [c2_identity(s) for s in range(req["C2"])]
        out["C2"] = {"identity_ratio": [a for a, _ in r], "grad_norm": [b for _, b in r]}
    if req.get("C3"):
        r = [c3_growth(s) for s in range(req["C3"])]
        out["C3"] = {"growth": [a for a, _ in r], "after_final_norm": [b for _, b in r]}
    if req.get("C6"):
        r = [c6_stats(s) for s in range(req["C6"])]
        out["C6"] = {"row_mean": [a for a, _ in r], "row_std": [b for _, b in r]}
    if req.get("C5"):
        out["C5"] = c5_invariance()
    if req.get("smollm2"):
        out["smollm2"] = smollm2(req["smollm2"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
