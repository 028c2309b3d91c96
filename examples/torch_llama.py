#!/usr/bin/env python3
"""A small Llama-style model (pre-RMSNorm, RoPE, SwiGLU, tied embeddings)
trained in plain PyTorch on the bundled Shakespeare (bytes), with normlab's
fused RMSNorm swapped in and normlab's run logger recording the run, so
that `normlab serve` / `normlab report` show it beside normlab's own runs.

    pip install ./python                      # the normlab Python package
    python3 examples/torch_llama.py --out runs/torch-llama --steps 300
    cargo run --release -- report runs        # or: normlab serve --runs runs

`build_model` is also what bench/torch_bridge.py times.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


class Rope(nn.Module):
    def __init__(self, head_dim: int, seq: int, base: float = 10000.0):
        super().__init__()
        inv = base ** (-torch.arange(0, head_dim, 2).float() / head_dim)
        ang = torch.arange(seq).float()[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, x):  # (B, H, T, hd), rotate-half pairing as in Llama
        t = x.shape[-2]
        c, s = self.cos[:t], self.sin[:t]
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)


class Block(nn.Module):
    def __init__(self, d: int, heads: int, hidden: int, seq: int, norm):
        super().__init__()
        self.heads = heads
        self.attn_norm = norm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.mlp_norm = norm(d)
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)
        self.rope = Rope(d // heads, seq)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(self.rope(q), self.rope(k), v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, vocab=256, d=512, layers=8, heads=8, seq=256, norm=None):
        super().__init__()
        norm = norm or (lambda n: nn.RMSNorm(n, eps=1e-5))
        hidden = 32 * math.ceil(8 * d / 3 / 32)
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d, heads, hidden, seq, norm) for _ in range(layers)])
        self.norm = norm(d)
        self.apply(self._init)
        for b in self.blocks:  # GPT-2-style scaled init of the residual writers
            for w in (b.proj.weight, b.down.weight):
                nn.init.normal_(w, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, tokens):
        h = self.emb(tokens)
        for b in self.blocks:
            h = b(h)
        return F.linear(self.norm(h), self.emb.weight)  # tied head


def build_model(d=512, layers=8, heads=8, seq=256, norm=None, seed=0):
    torch.manual_seed(seed)
    return Llama(256, d, layers, heads, seq, norm)


def load_bytes():
    with open(os.path.join(ROOT, "data", "shakespeare.txt"), "rb") as f:
        data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    cut = int(0.9 * len(data))
    return data[:cut], data[cut:]


def batch(data, b, seq, gen):
    i = torch.randint(0, len(data) - seq - 1, (b,), generator=gen)
    x = torch.stack([data[j: j + seq] for j in i.tolist()])
    y = torch.stack([data[j + 1: j + seq + 1] for j in i.tolist()])
    return x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/torch-llama")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--torch-norms", action="store_true", help="keep torch.nn.RMSNorm")
    a = ap.parse_args()

    from normlab.logger import RunLogger
    from normlab.torch import swap_norms

    model = build_model(a.d, a.layers, a.heads, a.seq)
    if not a.torch_norms:
        print(f"swapped {len(swap_norms(model))} norms for normlab's")
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / a.warmup) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / a.steps)))))
    train, held = load_bytes()
    log = RunLogger(a.out, model, vocab_size=256, config={
        "d_model": a.d, "layers": a.layers, "heads": a.heads, "seq_len": a.seq, "batch": a.batch,
        "lr": a.lr, "warmup": a.warmup, "steps": a.steps, "placement": "pre", "optimizer": "adamw",
        "mlp": "swiglu", "tie_embeddings": True})
    gen = torch.Generator().manual_seed(0)
    eval_gen = torch.Generator().manual_seed(1)
    held_batches = [batch(held, a.batch, a.seq, eval_gen) for _ in range(4)]
    t0 = time.perf_counter()
    for step in range(1, a.steps + 1):
        x, y = batch(train, a.batch, a.seq, gen)
        loss = F.cross_entropy(model(x).view(-1, 256), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        log.step(loss, lr=sched.get_last_lr()[0], targets=y)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        if step % 50 == 0 or step == a.steps:
            model.eval()
            with torch.no_grad():
                ev = sum(F.cross_entropy(model(hx).view(-1, 256), hy.view(-1)) for hx, hy in held_batches) / 4
            model.train()
            log.eval(ev)
            print(f"step {step:4d}  loss {loss.item():.3f}  held-out {ev.item():.3f}  "
                  f"{(time.perf_counter() - t0) / step:.3f} s/step")
    s = log.finish()
    print(f"{s['status']}: held-out loss {s['final_eval_loss']:.3f} after {s['steps']} steps "
          f"(unigram entropy {s['unigram_entropy']:.3f}); run folder {a.out}")


if __name__ == "__main__":
    main()
