"""A run logger for PyTorch training loops that writes normlab's run-folder
format, so ``normlab report`` and ``normlab serve`` show PyTorch runs beside
normlab's own::

    log = RunLogger("runs/llama-pre", model, config={"lr": 3e-4, "norm": "rmsnorm"},
                    vocab_size=256)
    for step in range(steps):
        loss = loss_fn(model(x), y)
        loss.backward()
        log.step(loss, lr=opt.param_groups[0]["lr"], targets=y)  # after backward
        opt.step(); opt.zero_grad()
        if (step + 1) % 100 == 0:
            log.eval(held_out_loss())
    log.finish()

What it records, as ``normlab train`` does (``metrics.jsonl``, one line per
logged or evaluated step): loss, lr, the global and per-block gradient norm
(read after ``backward``, before the optimizer consumes the gradients), the
residual-stream RMS after each block (forward hooks on the blocks: the ones
given, or the longest ``nn.ModuleList`` of identical modules), and held-out
losses. ``summary.json`` (written by :meth:`RunLogger.finish`) classifies
the run with normlab's own rule (the native ``normlab::train::status``, not
a copy): diverged if the loss became non-finite, stayed above 2 ln V for 50
consecutive steps, or ended above it; stalled if the final held-out loss is
within 10% of the way from the unigram entropy of the targets seen to the
loss floor (0 unless given); else converged.

``config.json`` carries ``"source": "pytorch"``; keys of ``config`` that are
normlab settings (``lr``, ``steps``, ``norm``, ``placement``, ``layers``,
...) are shown by ``normlab report``, the others are kept in the file.
Every file is written atomically (temporary name, fsync, rename).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from typing import Iterable

import torch
from torch import nn

from . import _native

__all__ = ["RunLogger", "find_blocks"]

# The divergence rule and the classification are normlab's own (Rust,
# normlab::train::status, through the native module): not re-implemented here.
DIVERGENCE_WINDOW = _native.divergence_window()


def atomic_write(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a temporary file in the same
    folder, fsync, rename; the temporary file is removed on failure."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _num(v) -> float | None:
    """A float for JSON (non-finite values are written as null)."""
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def find_blocks(model: nn.Module) -> list:
    """The longest ``nn.ModuleList`` whose members are all of one class and
    have parameters: the block stack of most Transformer implementations."""
    best = []
    for m in model.modules():
        if isinstance(m, nn.ModuleList) and len(m) > len(best):
            kinds = {type(b) for b in m}
            if len(kinds) == 1 and all(any(True for _ in b.parameters()) for b in m):
                best = list(m)
    return best


def _detect_norm(model: nn.Module) -> str | None:
    from .torch import Norm

    kinds = set()
    for m in model.modules():
        if isinstance(m, Norm):
            kinds.add(m.kind)
        elif isinstance(m, nn.LayerNorm):
            kinds.add("layernorm")
        elif isinstance(m, nn.RMSNorm):
            kinds.add("rmsnorm")
    return kinds.pop() if len(kinds) == 1 else None


class RunLogger:
    """Records a PyTorch training run into a normlab run folder ``out``
    (refused if it already holds a run)."""

    def __init__(self, out: str, model: nn.Module, config: dict | None = None,
                 blocks: Iterable[nn.Module] | None = None, vocab_size: int | None = None,
                 unigram_entropy: float | None = None, loss_floor: float | None = None,
                 log_every: int = 10, tokens_per_step: int | None = None):
        if os.path.exists(os.path.join(out, "config.json")) or os.path.exists(
                os.path.join(out, "summary.json")):
            raise FileExistsError(f"{out} already holds a run; choose another folder")
        if log_every < 1:
            raise ValueError("log_every must be at least 1")
        os.makedirs(out, exist_ok=True)
        self.out = out
        self.model = model
        self.blocks = list(blocks) if blocks is not None else find_blocks(model)
        self.vocab_size = vocab_size
        self.unigram_entropy = unigram_entropy
        self.loss_floor = loss_floor
        self.log_every = log_every
        self.tokens_per_step = tokens_per_step
        self.steps = 0
        self.records: list = []
        self.first_loss = None
        self.best_loss = math.inf
        self.last_loss = math.nan
        self.evals: list = []
        self.diverged_at = None
        self._divergence = _native.DivergenceTracker()
        self._counts = None
        self._tokens = 0
        self._train_seconds = 0.0
        self._t_last = time.perf_counter()
        self._started = time.perf_counter()
        self._rms = [math.nan] * len(self.blocks)
        self._params = list(model.parameters())
        owner = {}
        for i, b in enumerate(self.blocks):
            for p in b.parameters():
                owner.setdefault(id(p), i)
        self._owner = [owner.get(id(p)) for p in self._params]
        self._last = None  # (loss, lr, grad_norm) of the latest step
        self._hooks = [b.register_forward_hook(self._hook(i)) for i, b in enumerate(self.blocks)]
        cfg = {"source": "pytorch", "model": "gpt", "log_every": log_every}
        if self.blocks:
            cfg["layers"] = len(self.blocks)
        norm = _detect_norm(model)
        if norm is not None:
            cfg["norm"] = norm
        cfg.update(config or {})
        cfg["pytorch_model"] = type(model).__name__
        self.config = cfg
        atomic_write(os.path.join(out, "config.json"), json.dumps(cfg, indent=2, default=str))

    def _hook(self, i: int):
        def hook(module, _inputs, output):
            if not module.training or not self._wants_details(self.steps + 1):
                return
            t = output[0] if isinstance(output, (tuple, list)) else output
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                with torch.no_grad():
                    self._rms[i] = float(t.detach().float().pow(2).mean().sqrt())
        return hook

    def _wants_details(self, step: int) -> bool:
        return step == 1 or step % self.log_every == 0

    def step(self, loss, lr: float | None = None, targets: torch.Tensor | None = None) -> None:
        """Record one optimisation step: call after ``backward()`` and before
        the optimizer step. ``targets`` (token ids) feed the unigram entropy
        the stall test compares against; they are only counted."""
        now = time.perf_counter()
        self._train_seconds += now - self._t_last
        self.steps += 1
        s = self.steps
        loss = float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)
        if self.first_loss is None:
            self.first_loss = loss
        if math.isfinite(loss):
            self.best_loss = min(self.best_loss, loss)
        self.last_loss = loss
        if targets is not None:
            t = targets.detach().reshape(-1).long().cpu()
            n = max(int(t.max()) + 1 if t.numel() else 0, self.vocab_size or 0)
            c = torch.bincount(t, minlength=n)
            if self._counts is None:
                self._counts = c
            else:
                if c.numel() > self._counts.numel():
                    self._counts = torch.nn.functional.pad(self._counts, (0, c.numel() - self._counts.numel()))
                self._counts[: c.numel()] += c
            self._tokens += t.numel()
        elif self.tokens_per_step:
            self._tokens += self.tokens_per_step
        self._track_divergence(s, loss)
        grad_norm, per_block = self._grad_norms(self._wants_details(s))
        self._last = (loss, lr, grad_norm)
        if self._wants_details(s) or not math.isfinite(loss):
            self.records.append(self._record(s, loss, lr, grad_norm, per_block))
            self._rms = [math.nan] * len(self.blocks)
            if len(self.records) % 20 == 0:
                self._flush()
        self._t_last = time.perf_counter()

    def _track_divergence(self, step: int, loss: float) -> None:
        if self.diverged_at is not None:
            return
        # Without a vocabulary size there is no bound: only a non-finite
        # loss diverges.
        bound = 2.0 * math.log(self.vocab_size) if self.vocab_size else math.inf
        self.diverged_at = self._divergence.track(step, loss, bound)

    @property
    def spikes(self) -> list:
        """The excursions above the bound that came back."""
        return [{"step": s, "peak_loss": p, "steps": n} for s, p, n in self._divergence.spikes()]

    def _grad_norms(self, per_block: bool) -> tuple:
        """The global gradient norm (every step: one norm per tensor) and,
        when asked, each block's."""
        idx = [i for i, p in enumerate(self._params) if p.grad is not None]
        if not idx:
            return math.nan, [math.nan] * len(self.blocks)
        norms = torch._foreach_norm([self._params[i].grad.detach() for i in idx])
        sq = torch.stack(norms).double().square().tolist()
        total = math.sqrt(sum(sq))
        blocks = []
        if per_block:
            acc = [0.0] * len(self.blocks)
            for i, v in zip(idx, sq):
                if self._owner[i] is not None:
                    acc[self._owner[i]] += v
            blocks = [math.sqrt(v) for v in acc]
        return total, blocks

    def _record(self, step: int, loss: float, lr, grad_norm: float, per_block: list) -> dict:
        rec = {
            "step": step,
            "loss": _num(loss),
            "lr": _num(lr) if lr is not None else 0.0,
            "grad_norm": _num(grad_norm),
            "grad_norm_per_block": [_num(v) for v in per_block],
            "residual_rms": [_num(v) for v in self._rms],
            "update_ratio": None,
            "update_ratio_per_block": [],
            "eval_loss": None,
        }
        return rec

    def eval(self, loss) -> None:
        """Record a held-out loss at the current step."""
        loss = float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)
        self.evals.append((self.steps, loss))
        if self.records and self.records[-1]["step"] == self.steps:
            self.records[-1]["eval_loss"] = _num(loss)
        else:
            # This step's own loss, lr and global gradient norm; the
            # per-block lists are left empty (not a detailed step).
            last_loss, lr, grad_norm = self._last or (math.nan, None, math.nan)
            rec = self._record(self.steps, last_loss, lr, grad_norm, [])
            rec["residual_rms"] = []
            rec["eval_loss"] = _num(loss)
            self.records.append(rec)
        self._flush()
        self._t_last = time.perf_counter()

    def _flush(self) -> None:
        text = "".join(json.dumps(r) + "\n" for r in self.records)
        atomic_write(os.path.join(self.out, "metrics.jsonl"), text)

    def _unigram(self) -> float:
        if self.unigram_entropy is not None:
            return float(self.unigram_entropy)
        if self._counts is None or self._counts.sum() == 0:
            return math.nan
        p = self._counts.double() / self._counts.sum()
        p = p[p > 0]
        return float(-(p * p.log()).sum())

    def status(self) -> str:
        """converged / stalled / diverged, by normlab's rule (the native one)."""
        final_eval = self.evals[-1][1] if self.evals else self.last_loss
        first = self.first_loss if self.first_loss is not None else math.inf
        floor = float(self.loss_floor) if self.loss_floor is not None else None
        return _native.classify(self.diverged_at is not None, final_eval, self._unigram(), floor, first)

    def finish(self) -> dict:
        """Write ``metrics.jsonl`` and ``summary.json`` (the mark of a finished
        run), remove the hooks, and return the summary."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self.diverged_at is None:
            # A run that ends above the bound has not recovered.
            self.diverged_at = self._divergence.unrecovered()
        self._flush()
        status = self.status()
        eval_loss = self.evals[-1][1] if self.evals else None
        if status == "diverged" or (eval_loss is not None and not math.isfinite(eval_loss)):
            eval_loss = None
        finite_evals = [v for _, v in self.evals if math.isfinite(v)]
        secs = max(self._train_seconds, 1e-9)
        summary = {
            "status": status,
            "final_loss": _num(self.last_loss),
            "best_loss": _num(self.best_loss),
            "eval_loss": _num(eval_loss),
            "final_eval_loss": _num(eval_loss),
            "best_eval_loss": _num(min(finite_evals)) if finite_evals else None,
            "diverged_at_step": self.diverged_at,
            "steps": self.steps,
            "steps_per_sec": _num(self.steps / secs),
            "tokens_per_sec": _num(self._tokens / secs),
            "wall_seconds": _num(time.perf_counter() - self._started),
            "params": sum(p.numel() for p in self.model.parameters()),
            "threads": torch.get_num_threads(),
            "unigram_entropy": _num(self._unigram()),
            "loss_floor": self.loss_floor,
            "first_loss": _num(self.first_loss),
            "spikes": self.spikes,
        }
        atomic_write(os.path.join(self.out, "summary.json"), json.dumps(summary, indent=2))
        return summary
