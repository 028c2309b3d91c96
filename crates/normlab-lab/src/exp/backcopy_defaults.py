"""Bigram-Backcopy with and without the attention output gate, written the
way a PyTorch user would write it from the papers, with PyTorch's defaults
and none of normlab's choices (C26's recipe test; issue 72).

What it shares with normlab's attention-sink chapter is only the task and
the setting's sizes: Guo et al. 2024 (arXiv 2410.13835)'s Bigram-Backcopy
on the bundled Shakespeare (a BOS at position 0; the k = 3 most frequent
characters are triggers; after a trigger the next character copies the one
before it, otherwise it is drawn from the corpus's bigram table), d 64,
seq 64, MLP 256, 1 layer with 1 head and 2 layers with 2 heads, batch 32,
3000 steps at a constant lr 1e-3. Everything else is PyTorch's default or
a plain choice of its own:

- a character vocabulary (the corpus's characters plus a BOS token of its
  own), not bytes;
- nn.Linear / nn.Embedding default initialisation, no biases on the
  Linear layers (nn.Linear(..., bias=False)), nn.LayerNorm with its bias;
- a ReLU MLP; learned positions; an untied head;
- the elementwise gate of Qiu et al. 2025 (G1): sigmoid(h W_g) times the
  merged heads before the output projection, h the attention's normalised
  input, W_g an nn.Linear(d, d, bias=False) with its default init;
- torch.optim.AdamW(model.parameters(), lr=1e-3) with its defaults:
  betas (0.9, 0.999), eps 1e-8, weight decay 0.01 on every parameter;
- the sequences drawn by its own sampler from torch's generator;
- the first-token share read after training on one fixed evaluation batch
  of 64 sequences: per (layer, head) the mean over sequences and queries
  t >= 1 of the weight on position 0; reported as the largest over
  (layer, head) and as the largest block's mean over heads.

Usage: python3 backcopy_defaults.py [--text data/shakespeare.txt]
[--seeds 5] [--steps 3000] [--settings 1x1,2x2]; prints one JSON object.
"""

import argparse
import json
import math
import sys
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F


class Task:
    """Bigram-Backcopy over a character vocabulary: id 0 is BOS."""

    def __init__(self, text, k=3):
        counts = Counter(text)
        self.chars = sorted(counts)
        self.vocab = len(self.chars) + 1
        index = {c: i + 1 for i, c in enumerate(self.chars)}
        ids = torch.tensor([index[c] for c in text])
        uni = torch.zeros(self.vocab, dtype=torch.float64)
        for c, n in counts.items():
            uni[index[c]] = n
        order = sorted(counts, key=lambda c: (-counts[c], c))
        self.triggers = [index[c] for c in order[:k]]
        self.first = uni.clone()
        self.first[self.triggers] = 0
        pairs = torch.zeros(self.vocab, self.vocab, dtype=torch.float64)
        pairs.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64), accumulate=True)
        dead = pairs.sum(1) == 0
        pairs[dead] = self.first
        self.bigram = pairs / pairs.sum(1, keepdim=True)
        self.first = self.first / self.first.sum()
        self.is_trigger = torch.zeros(self.vocab, dtype=torch.bool)
        self.is_trigger[self.triggers] = True

    def batch(self, n, t, gen):
        seq = torch.zeros(n, t + 1, dtype=torch.long)
        seq[:, 1] = torch.multinomial(self.first, n, replacement=True, generator=gen)
        for i in range(2, t + 1):
            prev = seq[:, i - 1]
            nxt = torch.multinomial(self.bigram[prev], 1, generator=gen).squeeze(1)
            seq[:, i] = torch.where(self.is_trigger[prev], seq[:, i - 2], nxt)
        return seq[:, :-1], seq[:, 1:]


class Attention(nn.Module):
    def __init__(self, d, heads, gated):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate = nn.Linear(d, d, bias=False) if gated else None
        self.weights = None

    def forward(self, h):
        b, t, d = h.shape
        split = lambda z: z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        causal = torch.ones(t, t, dtype=torch.bool, device=h.device).tril()
        w = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        self.weights = w.detach()
        y = (w @ v).transpose(1, 2).reshape(b, t, d)
        if self.gate is not None:
            y = y * torch.sigmoid(self.gate(h))
        return self.o(y)


class Block(nn.Module):
    def __init__(self, d, heads, hidden, gated):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads, gated)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, hidden, bias=False), nn.ReLU(), nn.Linear(hidden, d, bias=False))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, vocab, seq, d, layers, heads, hidden, gated):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, hidden, gated) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for blk in self.blocks:
            h = blk(h)
        return self.head(self.norm(h))


def shares(model):
    """Per block, per head: the mean weight on position 0 over the
    sequences and the queries t >= 1 of the last forward."""
    return [blk.attn.weights[:, :, 1:, 0].mean(dim=(0, 2)).tolist() for blk in model.blocks]


def train(task, layers, heads, gated, seed, steps, d=64, seq=64, hidden=256, batch=32, lr=1e-3, eval_n=64):
    torch.manual_seed(seed)
    model = Model(task.vocab, seq, d, layers, heads, hidden, gated)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(steps):
        x, y = task.batch(batch, seq, gen)
        loss = F.cross_entropy(model(x).reshape(-1, task.vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        x, y = task.batch(eval_n, seq, torch.Generator().manual_seed(10_000))
        ev = F.cross_entropy(model(x).reshape(-1, task.vocab), y.reshape(-1)).item()
        s = shares(model)
    finite = all(math.isfinite(v) for v in losses)
    return {
        "seed": seed,
        "final_loss": losses[-1] if finite else None,
        "eval_loss": ev if math.isfinite(ev) else None,
        "head_share": s,
        "share_top": max(max(h) for h in s),
        "share_head_mean": max(sum(h) / len(h) for h in s),
    }


def run(text, seeds, steps, settings, threads=1):
    torch.set_num_threads(threads)
    task = Task(text)
    out = {
        "torch": torch.__version__,
        "vocab": task.vocab,
        "triggers": [task.chars[i - 1] for i in task.triggers],
        "uniform": sum(1.0 / (t + 1) for t in range(1, 64)) / 63,
        "steps": steps,
        "settings": {},
    }
    for layers, heads in settings:
        name = f"{layers}x{heads}"
        out["settings"][name] = {
            design: [train(task, layers, heads, design == "gated", s, steps) for s in seeds]
            for design in ("ungated", "gated")
        }
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--text", default="data/shakespeare.txt")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--settings", default="1x1,2x2", help="layers x heads, comma-separated")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    settings = [tuple(int(v) for v in s.split("x")) for s in a.settings.split(",")]
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    seeds = list(range(a.first_seed, a.first_seed + a.seeds))
    json.dump(run(text, seeds, a.steps, settings, a.threads), sys.stdout)
    print()


if __name__ == "__main__":
    main()
