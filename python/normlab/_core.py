"""The one place that calls the native kernels: kind descriptions (from the
kernels' own ``KindSpec``), argument checks, and the forward/backward calls
on NumPy arrays shared by the NumPy and PyTorch front ends."""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import _native

STATS = _native.stats_per_row()
MAX_THREADS = _native.max_threads()


@dataclass(frozen=True)
class ParamInfo:
    """One parameter tensor of a norm kind, in flat order."""

    suffix: str  # state_dict name: weight, bias, alpha, shift
    role: str  # gain, bias, slope, shift
    per_feature: bool  # d values (else one scalar)
    init: object  # a number, or "sqrt_d"

    def numel(self, d: int) -> int:
        return d if self.per_feature else 1

    def init_value(self, d: int) -> float:
        return float(d) ** 0.5 if self.init == "sqrt_d" else float(self.init)


@dataclass(frozen=True)
class KindInfo:
    """A row-wise norm kind as the kernels describe it."""

    name: str
    aliases: tuple
    formula: str
    default_eps: float
    elementwise: bool
    params: tuple

    def num_params(self, d: int) -> int:
        return sum(p.numel(d) for p in self.params)


def _load_kinds() -> dict:
    out = {}
    for k in _native.kinds():
        info = KindInfo(
            name=k["name"],
            aliases=tuple(k["aliases"]),
            formula=k["formula"],
            default_eps=float(k["default_eps"]),
            elementwise=bool(k["elementwise"]),
            params=tuple(ParamInfo(**p) for p in k["params"]),
        )
        out[info.name] = info
    return out


KINDS = _load_kinds()


def kinds() -> list:
    """Names of every row-wise norm kind the kernels provide."""
    return list(KINDS)


def kind_info(name: str) -> KindInfo:
    """The description of a kind, by name or alias (case-insensitive)."""
    low = name.lower()
    for k in KINDS.values():
        if low == k.name or low in k.aliases:
            return k
    raise ValueError(f"unknown norm kind '{name}' (known: {', '.join(KINDS)})")


def default_threads() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def check_threads(threads) -> int:
    """A thread count as normlab's CLI takes it: an int in 1..=MAX_THREADS
    (the library's one cap, ``normlab::limits``), else ValueError."""
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"threads must be an int (got {type(threads).__name__})")
    if not 1 <= threads <= MAX_THREADS:
        raise ValueError(f"threads must be between 1 and {MAX_THREADS} (got {threads})")
    return threads


def _forward(kind: str, d: int, eps: float, x, params, y, stats, threads: int,
             dtype: str = "f32") -> None:
    """Forward over NumPy arrays (the PyTorch front end passes its tensors'
    NumPy views): x and y stored as ``dtype`` ("f32", "bf16" viewed as
    int16, "f16"), params and stats float32. The native call locates each
    buffer from the array itself and checks type, size, contiguity and
    overlap before touching it."""
    _native.forward(kind, d, float(eps), x, params, y, stats, check_threads(threads), dtype)


def _backward(kind: str, d: int, x, dy, params, stats, dx, dparams, threads: int,
              dtype: str = "f32") -> None:
    """Backward over NumPy arrays (as :func:`_forward`); ``dparams``
    (float32) is added to; x, dy, dx stored as ``dtype``."""
    _native.backward(kind, d, x, dy, params, stats, dx, dparams, check_threads(threads), dtype)


def isa() -> str:
    """The instruction set the kernels use on this machine."""
    return _native.isa()
