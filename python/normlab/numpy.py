"""normlab's fused norm kernels for NumPy arrays (no torch needed).

Every function takes float32 arrays whose last axis is the feature axis
(``d``) and normalises each row over it. Parameters are the kind's tensors
in its flat order (see ``normlab.kind_info(kind).params``), concatenated
into one float32 vector: layernorm ``[gamma(d), beta(d)]``, rmsnorm
``[gamma(d)]``, zrmsnorm ``[w(d)]`` (gain ``1 + w``), scalenorm ``[g]``,
dyt ``[alpha, gamma(d), beta(d)]``, derf ``[alpha, s, gamma(d), beta(d)]``.
C-contiguous inputs are read in place; others are copied once.
"""

from __future__ import annotations

import numpy as np

from . import _core
from ._core import STATS, default_threads, kind_info

__all__ = ["norm_forward", "norm_backward", "layer_norm", "rms_norm", "params_for"]


def _f32(a, what: str) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what} must be a numpy array, got {type(a).__name__}")
    if a.dtype != np.float32:
        raise TypeError(f"{what} must be float32 (normlab's kernels are float32), got {a.dtype}")
    return np.ascontiguousarray(a)


def _rows(x: np.ndarray) -> tuple:
    if x.ndim == 0:
        raise ValueError("x must have at least one axis (the features)")
    d = x.shape[-1]
    if d == 0:
        raise ValueError("the feature axis of x is empty")
    return d, x.size // d


def params_for(kind: str, d: int, **values) -> np.ndarray:
    """The flat parameter vector of ``kind`` at feature size ``d``, each
    tensor at its initial value unless given by suffix (``weight=``,
    ``bias=``, ``alpha=``, ``shift=``)."""
    info = kind_info(kind)
    parts = []
    for p in info.params:
        v = values.pop(p.suffix, None)
        if v is None:
            parts.append(np.full(p.numel(d), p.init_value(d), dtype=np.float32))
        else:
            v = np.asarray(v, dtype=np.float32).reshape(-1)
            if v.size != p.numel(d):
                raise ValueError(f"{info.name} {p.suffix} needs {p.numel(d)} values, got {v.size}")
            parts.append(v)
    if values:
        raise ValueError(f"{info.name} has no parameter {', '.join(values)}")
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def norm_forward(kind: str, x: np.ndarray, params: np.ndarray, eps: float | None = None,
                 threads: int | None = None) -> tuple:
    """Forward of a row-wise norm: ``(y, stats)``, with ``stats`` (3 floats
    per row) what :func:`norm_backward` needs."""
    info = kind_info(kind)
    x = _f32(x, "x")
    params = _f32(params, "params").reshape(-1)
    d, rows = _rows(x)
    if params.size != info.num_params(d):
        raise ValueError(f"{info.name} with d = {d} takes {info.num_params(d)} parameters, got {params.size}")
    y = np.empty_like(x)
    stats = np.empty(rows * STATS, dtype=np.float32)
    if x.size:
        _core._forward(info.name, d, info.default_eps if eps is None else eps, x, params, y, stats,
                       default_threads() if threads is None else threads)
    return y, stats


def norm_backward(kind: str, x: np.ndarray, dy: np.ndarray, params: np.ndarray,
                  stats: np.ndarray, threads: int | None = None) -> tuple:
    """Backward of a row-wise norm: ``(dx, dparams)``."""
    info = kind_info(kind)
    x = _f32(x, "x")
    dy = _f32(dy, "dy")
    params = _f32(params, "params").reshape(-1)
    stats = _f32(stats, "stats").reshape(-1)
    d, rows = _rows(x)
    if dy.shape != x.shape:
        raise ValueError(f"dy has shape {dy.shape}, x has {x.shape}")
    if params.size != info.num_params(d):
        raise ValueError(f"{info.name} with d = {d} takes {info.num_params(d)} parameters, got {params.size}")
    if stats.size != rows * STATS:
        raise ValueError(f"stats must hold {STATS} floats per row ({rows * STATS}), got {stats.size}")
    dx = np.empty_like(x)
    dparams = np.zeros(params.size, dtype=np.float32)
    if x.size:
        _core._backward(info.name, d, x, dy, params, stats, dx, dparams,
                        default_threads() if threads is None else threads)
    return dx, dparams


def layer_norm(x: np.ndarray, weight=None, bias=None, eps: float = 1e-5,
               threads: int | None = None) -> np.ndarray:
    """LayerNorm over the last axis (``torch.nn.functional.layer_norm``)."""
    d = np.shape(x)[-1]
    return norm_forward("layernorm", x, params_for("layernorm", d, weight=weight, bias=bias), eps, threads)[0]


def rms_norm(x: np.ndarray, weight=None, eps: float | None = None,
             threads: int | None = None) -> np.ndarray:
    """RMSNorm over the last axis; ``eps=None`` is float32's machine epsilon,
    as in ``torch.nn.functional.rms_norm``."""
    d = np.shape(x)[-1]
    e = float(np.finfo(np.float32).eps) if eps is None else eps
    return norm_forward("rmsnorm", x, params_for("rmsnorm", d, weight=weight), e, threads)[0]
