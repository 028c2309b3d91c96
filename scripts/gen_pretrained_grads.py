#!/usr/bin/env python3
"""Write the gradients that normlab's trainable pretrained families are
checked against (crates/normlab/tests/pretrained.rs): for each float32 tiny
folder of crates/normlab/tests/fixtures/hf_tiny/ (and gemma3_tiny/),
transformers' own *ForCausalLM, loaded from the folder in float32 with
eager attention, runs the 21 token ids (i * 7 + 3) % vocab on their first
20 (targets the last 20), and torch autograd gives the gradient of the mean
cross-entropy with respect to every tensor of the folder's
model.safetensors. They are written as grads.safetensors beside it, under
the same names and shapes (so that normlab reads them with the weights'
own loader and lays them out as its parameters), and the loss into
grads.json.

    /tmp/venv/bin/python scripts/gen_pretrained_grads.py [NAME ...]
"""

import json
import os
import sys

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FIX = os.path.join(ROOT, "crates", "normlab", "tests", "fixtures")


def folders(only):
    tiny = os.path.join(FIX, "hf_tiny")
    names = sorted(n for n in os.listdir(tiny) if not n.endswith("-bf16") and n != "gpt2-bare")
    out = [(n, os.path.join(tiny, n)) for n in names] + [("gemma3_tiny", os.path.join(FIX, "gemma3_tiny"))]
    return [(n, p) for n, p in out if not only or n in only]


def grads(path):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    vocab = model.config.get_text_config().vocab_size
    ids = torch.tensor([[(i * 7 + 3) % vocab for i in range(21)]])
    logits = model(ids[:, :-1], use_cache=False).logits[0]
    loss = torch.nn.functional.cross_entropy(logits.double(), ids[0, 1:])
    loss.backward()
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        stored = {n: f.get_tensor(n) for n in f.keys()}
    params = dict(model.named_parameters(remove_duplicate=False))
    out = {}
    for n, w in stored.items():
        # By name, or (a name transformers maps on load) the one parameter
        # holding the same values.
        p = params.get(n)
        if p is None:
            same = [q for q in params.values() if q.shape == w.shape and torch.equal(q.detach(), w.float())]
            if len(same) != 1:
                raise SystemExit(f"{path}: {n} matches {len(same)} parameters")
            p = same[0]
        out[n] = (p.grad if p.grad is not None else torch.zeros_like(p)).detach().contiguous()
    return out, loss.item()


def main():
    for name, path in folders(sys.argv[1:]):
        g, loss = grads(path)
        save_file(g, os.path.join(path, "grads.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(path, "grads.json"), "w") as f:
            json.dump({"generator": "scripts/gen_pretrained_grads.py", "torch": torch.__version__,
                       "transformers": transformers.__version__, "loss": loss}, f)
        print(f"{name}: loss {loss:.6f}, {len(g)} tensors")


if __name__ == "__main__":
    main()
