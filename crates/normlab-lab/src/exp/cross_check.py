"""The cross-check chapter's independent PyTorch side.

Written from the lesson's description and from normlab's documented
settings (docs/findings.md, shared claims), not from normlab's code: torch's
own modules (nn.Linear with its default init, nn.LayerNorm, nn.GELU), torch's
RNG (torch.manual_seed(seed) per seed), float32. `normlab exp cross-check`
runs it with its request as the one argument (JSON: seeds per claim) and
reads one JSON object from stdout; it can also be run by hand:

    python3 cross_check.py '{"C1": 3, "C2": 3, "C3": 3, "C6": 3}'
    python3 cross_check.py '{"C12": {"layers": 20, "lr": 0.001, "steps": 300, "seeds": 1, "norms": ["none", "layernorm"]}}'

Exit status 3 with a one-line message when torch is missing.
"""

import json
import math
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
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


# C12: the toy net of docs/toy-task.md ("The net and its training"),
# trained: token + position embeddings (nn.Embedding, N(0, 1)), per block
# x + Mixer(LN(x)) then x + MLP(LN(x)) (no LN without a norm), the mixer a
# causal mean followed by nn.Linear(d, d), the MLP nn.Linear(d, 128),
# tanh-GELU, nn.Linear(128, d), a final LN, an untied head without bias;
# torch's default init; Adam (0.9, 0.999, eps 1e-8), constant lr, batch 32;
# held-out loss on docs/toy-task.md's 512 held-out sequences (its documented
# generator): the training data come from torch's RNG.

V, T, D, H = 64, 16, 64, 128


def toy_targets(x, noise, gen):
    """docs/toy-task.md's shift-rank rule on a (B, T) batch of tokens 0..7."""
    b, t = x.shape
    y = torch.empty_like(x)
    xs = x.tolist()
    for i in range(b):
        counts, rank = {}, {}
        for j, xt in enumerate(xs[i]):
            c = counts.get(xt, 0)
            counts[xt] = c + 1
            z = (xt + c) % 8
            if z not in rank:
                rank[z] = len(rank)
            y[i, j] = z + 8 * rank[z]
    if noise == 0.0:
        return y
    flip = torch.rand(b, t, generator=gen) < noise
    y = torch.where(flip, torch.randint(0, V, (b, t), generator=gen), y)
    return y


def toy_batch(n, gen, noise=0.1):
    x = torch.randint(0, 8, (n, T), generator=gen)
    return x, toy_targets(x, noise, gen)


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(D, D)

    def forward(self, a):
        m = a.cumsum(1) / torch.arange(1, a.shape[1] + 1, dtype=a.dtype).view(1, -1, 1)
        return self.proj(m)


class Block(nn.Module):
    def __init__(self, norm):
        super().__init__()
        mk = (lambda: nn.LayerNorm(D)) if norm == "layernorm" else (lambda: nn.Identity())
        self.n1, self.n2 = mk(), mk()
        self.mix = Mixer()
        self.mlp = nn.Sequential(nn.Linear(D, H), nn.GELU(approximate="tanh"), nn.Linear(H, D))

    def forward(self, x):
        x = x + self.mix(self.n1(x))
        return x + self.mlp(self.n2(x))


class ToyNet(nn.Module):
    def __init__(self, layers, norm):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block(norm) for _ in range(layers))
        self.fin = nn.LayerNorm(D) if norm == "layernorm" else nn.Identity()
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        for b in self.blocks:
            h = b(h)
        return self.head(self.fin(h))


M64 = (1 << 64) - 1


def _splitmix(st):
    st = (st + 0x9E3779B97F4A7C15) & M64
    z = st
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return st, z ^ (z >> 31)


class HeldOutRng:
    """xoshiro256** seeded by splitmix64, as docs/toy-task.md specifies the
    held-out stream (so both sides score the same held-out sequences)."""

    def __init__(self, seed):
        st, self.s = seed & M64, []
        for _ in range(4):
            st, v = _splitmix(st)
            self.s.append(v)

    def next(self):
        s = self.s
        rotl = lambda x, k: ((x << k) | (x >> (64 - k))) & M64
        r = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return r

    def below(self, n):
        return (self.next() * n) >> 64

    def uniform(self):
        return (self.next() >> 11) * (1.0 / (1 << 53))


def held_out(n, noise=0.1):
    xs, ys = [], []
    for i in range(n):
        rng = HeldOutRng(0xE7A1 ^ (i << 20) ^ 0xD1B54A32D192ED03)
        x = [rng.below(8) for _ in range(T)]
        y = toy_targets(torch.tensor([x]), 0.0, None)[0].tolist()
        ys.append([rng.below(V) if rng.uniform() < noise else v for v in y])
        xs.append(x)
    return torch.tensor(xs), torch.tensor(ys)


def fit(model, opt, next_batch, vocab, steps, after_backward=None):
    """Train `steps` steps on next_batch(step); the divergence part of the
    status rule (a non-finite loss, or 50 steps in a row above 2 ln V):
    "diverged", else "converged" (the caller decides stalled)."""
    bound, above = 2 * math.log(vocab), 0
    for step in range(steps):
        x, y = next_batch(step)
        loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
        l = loss.item()
        above = above + 1 if not (l <= bound) else 0
        if not math.isfinite(l) or above >= 50:
            return "diverged"
        opt.zero_grad()
        loss.backward()
        if after_backward is not None:
            after_backward(step)
        opt.step()
    return "converged"


def train_toy(layers, norm, lr, steps, seed, batch=32, eval_n=512, make=None):
    """C12's (and C27's, with `make` building the net) training run."""
    torch.manual_seed(seed)
    net = make() if make is not None else ToyNet(layers, norm)
    opt = torch.optim.Adam(net.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8)
    gen = torch.Generator().manual_seed(1000 + seed)
    ex, ey = held_out(eval_n)
    status = fit(net, opt, lambda step: toy_batch(batch, gen), V, steps)
    growth = getattr(net, "growth", None)  # the last training step's, before the evaluation
    with torch.no_grad():
        ev = F.cross_entropy(net(ex).reshape(-1, V), ey.reshape(-1)).item()
    if status != "diverged" and not math.isfinite(ev):
        status = "diverged"
    # Stalled: still within 10% of the way from the unigram entropy (4.156)
    # down to the loss floor (0.7295), docs/toy-task.md.
    if status == "converged" and ev >= 4.156 - 0.1 * (4.156 - 0.7295):
        status = "stalled"
    out = {"status": status, "final_eval_loss": ev if math.isfinite(ev) else None}
    if growth is not None:
        out["growth"] = growth if math.isfinite(growth) else None
    return out


# C27: residual routing on C12's toy net (LayerNorm, Pre-LN, torch's default
# init), with 4 streams per token for hyper-connections and mHC:
# - "hc", static hyper-connections (Zhu et al. 2024, arXiv 2409.19606): per
#   sublayer l the branch reads sum_k Am[k] X_k and writes X'_j = B[j] o +
#   sum_k Ar[k, j] X_k, initialised as the paper does (Am = e_(l mod n),
#   Ar = I, B = 1); the embedding copied into each stream, the head reads
#   their sum.
# - "mhc", DeepSeek V4's form: transformers' DeepseekV4HyperConnection and
#   DeepseekV4HyperHead as they are (20 Sinkhorn iterations), initialised as
#   its _init_weights (W ~ N(0, 0.02), bias 0, scales 1), with its decoder
#   layer's update X' = post o + comb^T X.
# - "attnres", block Attention Residuals (Kimi team 2026, arXiv 2603.15031):
#   blocks of S = round(2L / 8) sublayers; sublayer l reads a softmax mix,
#   weights from a pseudo-query (init 0) dotted with each source's RMSNorm
#   (no gain, eps 1e-6), of the embedding, every finished block's sum and
#   its own block's partial sum (unless it opens the block); the head mixes
#   every slot with its own query.
# Stream growth: the RMS after the last block over after the first, on the
# last training step's batch (n streams: over all n x d values; AttnRes:
# the sum of its slots, what one plain stream would hold).
N_STREAMS = 4


class StaticHC(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.am = nn.Parameter(F.one_hot(torch.tensor(layer % N_STREAMS), N_STREAMS).float())
        self.ar = nn.Parameter(torch.eye(N_STREAMS))
        self.b = nn.Parameter(torch.ones(N_STREAMS))

    def forward(self, x, branch):
        o = branch(torch.einsum("btkd,k->btd", x, self.am))
        return self.b.view(1, 1, -1, 1) * o.unsqueeze(2) + torch.einsum("btkd,kj->btjd", x, self.ar)


class DepthMix(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Parameter(torch.zeros(D))

    def forward(self, sources):
        v = torch.stack(sources, 2)
        k = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)
        a = torch.softmax(k @ self.q, dim=-1)
        return (a.unsqueeze(-1) * v).sum(2)


def rms(x):
    return x.detach().pow(2).mean().sqrt().item()


class RoutedToy(nn.Module):
    def __init__(self, layers, design):
        super().__init__()
        self.design, subs = design, 2 * layers
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block("layernorm") for _ in range(layers))
        self.fin, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)
        if design == "hc":
            self.conn = nn.ModuleList(StaticHC(l) for l in range(subs))
        elif design == "mhc":
            from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config
            from transformers.models.deepseek_v4.modeling_deepseek_v4 import (
                DeepseekV4HyperConnection,
                DeepseekV4HyperHead,
            )

            cfg = DeepseekV4Config(hidden_size=D, hc_mult=N_STREAMS, hc_sinkhorn_iters=20)
            self.conn = nn.ModuleList(DeepseekV4HyperConnection(cfg) for _ in range(subs))
            self.out = DeepseekV4HyperHead(cfg)
            with torch.no_grad():
                for m, (w, b, s) in [(c, ("fn", "base", "scale")) for c in self.conn] + [(self.out, ("hc_fn", "hc_base", "hc_scale"))]:
                    getattr(m, w).normal_(0.0, 0.02)
                    getattr(m, b).zero_()
                    getattr(m, s).fill_(1.0)
        elif design == "attnres":
            self.size = max(1, round(subs / 8))
            self.conn = nn.ModuleList(DepthMix() for _ in range(subs))
            self.out = DepthMix()

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        branches = [f for b in self.blocks for f in (lambda a, b=b: b.mix(b.n1(a)), lambda a, b=b: b.mlp(b.n2(a)))]
        ends = []
        if self.design == "pre-ln":
            for i, f in enumerate(branches):
                h = h + f(h)
                if i % 2:
                    ends.append(rms(h))
        elif self.design in ("hc", "mhc"):
            xs = h.unsqueeze(2).expand(-1, -1, N_STREAMS, -1).contiguous()
            for i, (f, c) in enumerate(zip(branches, self.conn)):
                if self.design == "hc":
                    xs = c(xs, f)
                else:
                    post, comb, a = c(xs)
                    xs = post.unsqueeze(-1) * f(a).unsqueeze(-2) + comb.transpose(-1, -2) @ xs
                if i % 2:
                    ends.append(rms(xs))
            h = xs.sum(2) if self.design == "hc" else self.out(xs)
        else:
            slots, part, total = [h], None, h
            for i, (f, c) in enumerate(zip(branches, self.conn)):
                o = f(c(slots + ([part] if part is not None else [])))
                part, total = (o if part is None else part + o), total + o
                if (i + 1) % self.size == 0:
                    slots, part = slots + [part], None
                if i % 2:
                    ends.append(rms(total))
            h = self.out(slots + ([part] if part is not None else []))
        self.growth = ends[-1] / ends[0]
        return self.head(self.fin(h))


# C16: the GPT of docs/gpt.md (byte-level, learned positions, GPT-2 init:
# N(0, 0.02^2) weights and embeddings, output projections N(0, (0.02 /
# sqrt(2L))^2), biases 0; Post-LN: x = LN(x + S(x)) and no final norm;
# Pre-LN: x + S(LN(x)) and a final LN), AdamW (0.9, 0.95, eps 1e-8, weight
# decay 0.1 on weights and embeddings), global grad-norm clip 1.0, constant
# lr, torch's RNG for the training windows, the documented held-out windows.

class Attn(nn.Module):
    def __init__(s, d, heads):
        super().__init__()
        s.h = heads
        s.c_attn, s.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(s, x):
        b, t, d = x.shape
        q, k, v = s.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, s.h, d // s.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return s.c_proj(y.transpose(1, 2).reshape(b, t, d))


class GptBlock(nn.Module):
    def __init__(s, d, heads, hidden, post):
        super().__init__()
        s.post = post
        s.ln_1, s.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.attn = Attn(d, heads)
        s.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, d))

    def forward(s, x):
        if s.post:
            x = s.ln_1(x + s.attn(x))
            return s.ln_2(x + s.mlp(x))
        x = x + s.attn(s.ln_1(x))
        return x + s.mlp(s.ln_2(x))


class Gpt(nn.Module):
    def __init__(s, layers, d, heads, seq, hidden, post, vocab=256, std=0.02, block=None):
        """block: makes one block (default: GptBlock(d, heads, hidden, post))."""
        super().__init__()
        s.wte, s.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        block = block or (lambda: GptBlock(d, heads, hidden, post))
        s.blocks = nn.ModuleList(block() for _ in range(layers))
        s.ln_f = nn.Identity() if post else nn.LayerNorm(d)
        s.lm_head = nn.Linear(d, vocab, bias=False)
        out_std = std / math.sqrt(2 * layers)
        for name, p in s.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln_" in name or name.startswith("ln_f"):
                nn.init.ones_(p)
            elif name.endswith("c_proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, 0.0, out_std)
            else:
                nn.init.normal_(p, 0.0, std)

    def forward(s, x):
        h = s.wte(x) + s.wpe(torch.arange(x.shape[1]))
        for b in s.blocks:
            h = b(h)
        return s.lm_head(s.ln_f(h))


def text_bytes(path):
    with open(path, "rb") as f:
        return torch.tensor(list(f.read()), dtype=torch.long)


def windows(data, starts, t):
    idx = torch.tensor(starts).view(-1, 1) + torch.arange(t + 1).view(1, -1)
    w = data[idx]
    return w[:, :-1], w[:, 1:]


def held_out_starts(n_bytes, n, t):
    train_end = n_bytes - n_bytes // 10
    span = max(n_bytes - train_end - t - 1, 1)
    return [train_end + (i * 7919 * t) % span for i in range(n)]


def block_grads(model):
    return [math.sqrt(sum(float((p.grad ** 2).sum()) for p in b.parameters())) for b in model.blocks]


def adamw(m, lr, wd):
    """AdamW (0.9, 0.95, eps 1e-8) with weight decay `wd` on weights and
    embeddings, none on the norms' gains and the biases."""
    decays = lambda n: n.endswith("weight") and ".ln_" not in n and not n.startswith("ln_f")
    decay = [p for n, p in m.named_parameters() if decays(n)]
    rest = [p for n, p in m.named_parameters() if not decays(n)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


def train_gpt(data, g, post, lr, steps, seed, eval_n=64):
    """g: dict(layers, d, heads, seq, hidden, batch)."""
    torch.manual_seed(seed)
    m = Gpt(g["layers"], g["d"], g["heads"], g["seq"], g["hidden"], post)
    opt = adamw(m, lr, 0.1)
    n, t, B = len(data), g["seq"], g["batch"]
    train_end = n - n // 10
    gen = torch.Generator().manual_seed(2000 + seed)
    ex, ey = windows(data, held_out_starts(n, eval_n, t), t)
    counts = torch.bincount(data[:train_end], minlength=256).double() / train_end
    unigram = float(-(counts[counts > 0] * counts[counts > 0].log()).sum())
    first_grads = []

    def clip(step):
        if step == 0:
            first_grads.extend(block_grads(m))
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)

    batch = lambda step: windows(data, torch.randint(0, train_end - t, (B,), generator=gen).tolist(), t)
    status = fit(m, opt, batch, 256, steps, clip)
    with torch.no_grad():
        ev = F.cross_entropy(m(ex).reshape(-1, 256), ey.reshape(-1)).item()
    if status != "diverged" and not math.isfinite(ev):
        status = "diverged"
    # Stalled: within 10% of the way from the unigram entropy down to 0.
    if status == "converged" and ev >= 0.9 * unigram:
        status = "stalled"
    return {"status": status, "final_eval_loss": ev if math.isfinite(ev) else None, "init_block_grads": first_grads or None}


def init_grad(data, g, post, seed):
    """Each block's gradient norm at initialisation on one training batch,
    averaged over blocks."""
    torch.manual_seed(seed)
    m = Gpt(g["layers"], g["d"], g["heads"], g["seq"], g["hidden"], post)
    n, t = len(data), g["seq"]
    gen = torch.Generator().manual_seed(3000 + seed)
    x, y = windows(data, torch.randint(0, n - n // 10 - t, (g["batch"],), generator=gen).tolist(), t)
    F.cross_entropy(m(x).reshape(-1, 256), y.reshape(-1)).backward()
    b = block_grads(m)
    return sum(b) / len(b)


# C24: SwiGLU's clamp in DeepSeek V4's form, silu(min(g, L)) * clamp(u, -L, L):
# its largest |value| over 2^18 gate and up pre-activations N(0, std^2),
# relative to the bound SiLU(L) * L.

def c24_peak(seed, std, limit=10.0, n=1 << 18):
    gen = torch.Generator().manual_seed(4000 + seed)
    g = torch.randn(n, generator=gen) * std
    u = torch.randn(n, generator=gen) * std
    act = F.silu(torch.clamp(g, max=limit)) * torch.clamp(u, -limit, limit)
    return float(act.abs().max()) / (limit * limit / (1.0 + math.exp(-limit)))


# C25: the std of a unit-variance embedding plus 128 independent
# unit-variance writes (2^18 elements each).

def c25_std(seed, writes=128, n=1 << 18):
    gen = torch.Generator().manual_seed(5000 + seed)
    acc = torch.zeros(n, dtype=torch.float64)
    for _ in range(writes + 1):
        acc += torch.randn(n, generator=gen).double()
    return float(acc.std(unbiased=False))


# C26: Bigram-Backcopy (docs/bigram-backcopy.md; Guo et al. 2024): BOS
# (byte 0) at position 0, a first character from the corpus's unigram
# without the triggers (its k most frequent characters), then after a
# trigger a copy of the character before it, otherwise a draw from the
# corpus's bigram table. A Pre-LN GPT (the C16 model's blocks with an
# explicit softmax attention and, optionally, the elementwise output gate
# sigmoid(a W_g) on the merged heads, W_g d x d without bias, a the
# attention's normalised input), AdamW (0.9, 0.95, eps 1e-8, weight decay
# 1e-4 on weights and embeddings), constant lr, no warm-up or clipping,
# fresh sequences every step from torch's RNG. The first-token share of a
# head: the mean over queries t >= 1 of the weight on position 0, over 64
# fresh sequences after training; the largest over (layer, head).

def bb_tables(path, k):
    data = text_bytes(path)
    uni = torch.bincount(data, minlength=256).double()
    chars = [b for b in range(256) if uni[b] > 0]
    triggers = sorted(chars, key=lambda b: (-float(uni[b]), b))[:k]
    first = uni.clone()
    first[triggers] = 0
    pairs = torch.zeros(256 * 256, dtype=torch.float64)
    pairs.index_add_(0, data[:-1] * 256 + data[1:], torch.ones(len(data) - 1, dtype=torch.float64))
    pairs = pairs.view(256, 256)
    empty = pairs.sum(1) == 0
    pairs[empty] = first
    trig = torch.zeros(256, dtype=torch.bool)
    trig[triggers] = True
    return {"first": first / first.sum(), "bigram": pairs / pairs.sum(1, keepdim=True), "trigger": trig}


def bb_batch(tabs, b, t, gen):
    x = torch.zeros(b, t + 1, dtype=torch.long)
    x[:, 1] = torch.multinomial(tabs["first"], b, replacement=True, generator=gen)
    for i in range(2, t + 1):
        prev = x[:, i - 1]
        drawn = torch.multinomial(tabs["bigram"][prev], 1, generator=gen).squeeze(1)
        x[:, i] = torch.where(tabs["trigger"][prev], x[:, i - 2], drawn)
    return x[:, :-1], x[:, 1:]


class SinkAttn(nn.Module):
    def __init__(s, d, heads, gate):
        super().__init__()
        s.h = heads
        s.c_attn, s.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.gate = nn.Linear(d, d, bias=False) if gate else None
        s.probs = None

    def forward(s, a):
        b, t, d = a.shape
        q, k, v = s.c_attn(a).split(d, dim=2)
        q, k, v = (z.view(b, t, s.h, d // s.h).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // s.h)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        p = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        s.probs = p.detach()
        y = (p @ v).transpose(1, 2).reshape(b, t, d)
        if s.gate is not None:
            y = y * torch.sigmoid(s.gate(a))
        return s.c_proj(y)


class SinkBlock(nn.Module):
    def __init__(s, d, heads, hidden, gate):
        super().__init__()
        s.ln_1, s.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.attn = SinkAttn(d, heads, gate)
        s.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, d))

    def forward(s, x):
        x = x + s.attn(s.ln_1(x))
        return x + s.mlp(s.ln_2(x))


def sink_gpt(g, gate):
    """The C16 model's Pre-LN GPT with SinkBlocks (same init)."""
    return Gpt(g["layers"], g["d"], g["heads"], g["seq"], g["hidden"], False,
               block=lambda: SinkBlock(g["d"], g["heads"], g["hidden"], gate))


def train_sink(tabs, g, gate, lr, steps, seed):
    torch.manual_seed(seed)
    m = sink_gpt(g, gate)
    opt = adamw(m, lr, 1e-4)
    gen = torch.Generator().manual_seed(6000 + seed)
    status = fit(m, opt, lambda step: bb_batch(tabs, g["batch"], g["seq"], gen), 256, steps)
    with torch.no_grad():
        x, y = bb_batch(tabs, 64, g["seq"], torch.Generator().manual_seed(7000 + seed))
        ev = F.cross_entropy(m(x).reshape(-1, 256), y.reshape(-1)).item()
        shares = [float(b.attn.probs[:, :, 1:, 0].mean(dim=(0, 2)).max()) for b in m.blocks]
    return {"status": status, "final_eval_loss": ev if math.isfinite(ev) else None, "share": max(shares)}


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
    if req.get("C12"):
        r = req["C12"]
        out["C12"] = {
            n: [train_toy(r["layers"], n, r["lr"], r["steps"], s) for s in range(r["seeds"])]
            for n in r["norms"]
        }
    if req.get("C27"):
        r = req["C27"]
        out["C27"] = {
            d: [train_toy(0, "", r["lr"], r["steps"], s, make=lambda: RoutedToy(r["layers"], d)) for s in range(r["seeds"])]
            for d in r["designs"]
        }
    if req.get("C16"):
        r = req["C16"]
        data, g = text_bytes(r["text"]), r["gpt"]
        out["C16"] = {
            p: [train_gpt(data, g, p == "post", r["lr"], r["steps"], s, eval_n=r["eval"]) for s in range(r["seeds"])]
            for p in ["post", "pre"]
        }
        out["C16"]["init_ratio"] = [
            init_grad(data, g, True, s) / init_grad(data, g, False, s) for s in range(r["init_seeds"])
        ]
    if req.get("C24"):
        r = req["C24"]
        out["C24"] = {"peak_std2": [c24_peak(s, 2.0) for s in range(r)], "peak_std20": max(c24_peak(s, 20.0) for s in range(r))}
    if req.get("C25"):
        out["C25"] = {"std": [c25_std(s) for s in range(req["C25"])]}
    if req.get("C26"):
        r = req["C26"]
        tabs = bb_tables(r["text"], r["triggers"])
        out["C26"] = {
            gate: [train_sink(tabs, r["gpt"], gate == "gated", r["lr"], r["steps"], s) for s in range(r["seeds"])]
            for gate in ["ungated", "gated"]
        }
    if req.get("smollm2"):
        out["smollm2"] = smollm2(req["smollm2"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
