"""normlab's fused CPU norms for PyTorch: custom operators (autograd,
``torch.compile`` and ``opcheck`` accept them), functional forms, drop-in
modules whose arguments and ``state_dict`` keys match ``torch.nn.LayerNorm``
/ ``torch.nn.RMSNorm``, one module per other kind, and :func:`swap_norms`.

In eager mode the modules and functions call the kernels through a plain
``torch.autograd.Function`` (the operator dispatcher's Python overhead,
about 0.1 ms per call, dominated small shapes); under ``torch.compile`` they
use the registered operators ``normlab::norm_fwd`` / ``normlab::norm_bwd``.
Both run the same two functions below. The operators take CPU tensors in
float32, bfloat16 or float16: the input, output and their gradients stay in
that type (read and written in it by the kernels, which compute every
statistic in float32 and round each output once), while the parameters are
used, and their gradients computed, in float32 (a bfloat16 module's weights
are widened for the call; their gradients come back in their own type).
Contiguous inputs are read in place (zero-copy); non-contiguous ones are
made contiguous first (one copy). Other devices or dtypes raise a
``TypeError`` naming what was given: there is no silent fall-back. The GIL is released while a kernel runs, on
``torch.get_num_threads()`` threads; results are bit-identical for any
thread count.
"""

from __future__ import annotations

import math
from typing import Sequence

try:
    import torch
except ModuleNotFoundError as e:  # pragma: no cover - depends on the environment
    raise ModuleNotFoundError(
        "normlab.torch needs PyTorch, which is not installed in this Python: "
        "pip install torch (the CPU wheel: pip install torch --index-url "
        "https://download.pytorch.org/whl/cpu); normlab's NumPy functions "
        "(import normlab) work without it"
    ) from e
import torch.nn.functional as F
from torch import Tensor, nn

from . import _core
from ._core import STATS, kind_info

__all__ = [
    "norm", "layer_norm", "rms_norm", "Norm", "LayerNorm", "RMSNorm", "ZeroCenteredRMSNorm",
    "ScaleNorm", "DyT", "Derf", "swap_norms",
]


_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def _check_tensor(t: Tensor, what: str) -> None:
    if t.device.type != "cpu":
        raise TypeError(
            f"normlab's kernels run on the CPU: {what} is on {t.device} "
            "(use torch.nn's norms on other devices)")
    if t.dtype not in _DTYPES:
        raise TypeError(
            f"normlab's kernels take float32, bfloat16 or float16: {what} is {t.dtype} "
            "(convert with .float(), or keep torch.nn's norm for this dtype)")


def _view(t: Tensor):
    """The NumPy view of a CPU tensor's memory (no copy): bfloat16, which
    NumPy lacks, viewed as int16."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy()


def _fwd_impl(x: Tensor, params: Tensor, kind: str, d: int, eps: float) -> tuple[Tensor, Tensor]:
    x = x.contiguous()
    params = params.contiguous()
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    rows = x.numel() // d
    stats = torch.empty(rows * STATS, dtype=torch.float32)
    if x.numel():
        _core._forward(kind, d, eps, _view(x), _view(params), _view(y), _view(stats),
                       min(torch.get_num_threads(), _core.MAX_THREADS), _DTYPES[x.dtype])
    return y, stats


@torch.library.custom_op("normlab::norm_fwd", mutates_args=(), device_types="cpu")
def _norm_fwd(x: Tensor, params: Tensor, kind: str, d: int, eps: float) -> tuple[Tensor, Tensor]:
    return _fwd_impl(x, params, kind, d, eps)


@_norm_fwd.register_fake
def _(x, params, kind, d, eps):
    rows = x.numel() // d
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            x.new_empty(rows * STATS, dtype=torch.float32))


def _bwd_impl(dy: Tensor, x: Tensor, params: Tensor, stats: Tensor, kind: str,
              d: int) -> tuple[Tensor, Tensor]:
    dy = dy.contiguous().to(x.dtype)
    x = x.contiguous()
    params = params.contiguous()
    stats = stats.contiguous()
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    dparams = torch.zeros_like(params)
    if x.numel():
        _core._backward(kind, d, _view(x), _view(dy), _view(params), _view(stats), _view(dx),
                        _view(dparams), min(torch.get_num_threads(), _core.MAX_THREADS), _DTYPES[x.dtype])
    return dx, dparams


@torch.library.custom_op("normlab::norm_bwd", mutates_args=(), device_types="cpu")
def _norm_bwd(dy: Tensor, x: Tensor, params: Tensor, stats: Tensor, kind: str,
              d: int) -> tuple[Tensor, Tensor]:
    return _bwd_impl(dy, x, params, stats, kind, d)


@_norm_bwd.register_fake
def _(dy, x, params, stats, kind, d):
    return torch.empty_like(x, memory_format=torch.contiguous_format), torch.empty_like(params)


def _setup_context(ctx, inputs, output):
    x, params, kind, d, _eps = inputs
    _y, stats = output
    ctx.save_for_backward(x, params, stats)
    ctx.kind = kind
    ctx.d = d


def _backward(ctx, dy, _dstats):
    x, params, stats = ctx.saved_tensors
    dx, dparams = torch.ops.normlab.norm_bwd(dy, x, params, stats, ctx.kind, ctx.d)
    return dx, dparams, None, None, None


_norm_fwd.register_autograd(_backward, setup_context=_setup_context)


class _EagerNorm(torch.autograd.Function):
    """The same kernels for eager mode, without the operator dispatcher's
    Python overhead (about 0.1 ms per call, which dominated small shapes);
    under torch.compile the registered operators are used instead."""

    @staticmethod
    def forward(ctx, x, params, kind, d, eps):
        y, stats = _fwd_impl(x, params, kind, d, eps)
        ctx.save_for_backward(x, params, stats)
        ctx.kind, ctx.d = kind, d
        return y

    @staticmethod
    def backward(ctx, dy):
        if torch.is_grad_enabled():
            # create_graph=True: the backward itself would need a gradient.
            raise RuntimeError(
                f"normlab's {ctx.kind} has no double backward (a gradient of its gradient, "
                "create_graph=True): use torch's own norm where higher-order gradients are needed")
        x, params, stats = ctx.saved_tensors
        dx, dparams = _bwd_impl(dy, x, params, stats, ctx.kind, ctx.d)
        return dx, dparams, None, None, None


def _normalized_shape(shape) -> tuple:
    if isinstance(shape, int):
        return (shape,)
    return tuple(int(s) for s in shape)


def norm(kind: str, x: Tensor, normalized_shape, params: Sequence[Tensor | None] = (),
         eps: float | None = None) -> Tensor:
    """A normlab norm over the trailing ``normalized_shape`` dims of ``x``.

    ``params`` are the kind's tensors in its order (``kind_info(kind).params``);
    ``None`` stands for a tensor at its initial value (no gradient), as for
    ``elementwise_affine=False``. ``eps=None`` is the kind's default.
    """
    info = kind_info(kind)
    ns = _normalized_shape(normalized_shape)
    _check_tensor(x, "input")
    if tuple(x.shape[x.dim() - len(ns):]) != ns or x.dim() < len(ns):
        raise ValueError(f"input of shape {tuple(x.shape)} does not end in normalized_shape {ns}")
    d = math.prod(ns)
    if d == 0:
        # Rows of no features: an empty output of the input's shape, as torch.
        return x.clone()
    if len(params) != len(info.params):
        raise ValueError(f"{info.name} takes {len(info.params)} parameter tensors "
                         f"({', '.join(p.suffix for p in info.params)}), got {len(params)}")
    flat = []
    for spec, p in zip(info.params, params):
        if p is None:
            flat.append(torch.full((spec.numel(d),), spec.init_value(d), dtype=torch.float32))
            continue
        _check_tensor(p, spec.suffix)
        # As torch: a per-feature tensor has exactly normalized_shape (a
        # (2, 8) weight for (8,) is refused, not read as 16 values).
        if (tuple(p.shape) != ns) if spec.per_feature else (p.numel() != 1):
            want = ns if spec.per_feature else (1,)
            raise ValueError(f"{info.name} {spec.suffix} must have shape {want}, got {tuple(p.shape)}")
        flat.append(p.reshape(-1).float())
    flat_params = torch.cat(flat) if flat else x.new_zeros(0, dtype=torch.float32)
    eps = info.default_eps if eps is None else float(eps)
    if torch.compiler.is_compiling():
        return torch.ops.normlab.norm_fwd(x, flat_params, info.name, d, eps)[0]
    return _EagerNorm.apply(x, flat_params, info.name, d, eps)


def layer_norm(x: Tensor, normalized_shape, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """``torch.nn.functional.layer_norm`` through normlab's fused kernel."""
    return norm("layernorm", x, normalized_shape, (weight, bias), eps)


def rms_norm(x: Tensor, normalized_shape, weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """``torch.nn.functional.rms_norm`` through normlab's fused kernel
    (``eps=None``: ``torch.finfo(torch.float32).eps``, as in PyTorch)."""
    e = torch.finfo(torch.float32).eps if eps is None else eps
    return norm("rmsnorm", x, normalized_shape, (weight,), e)


class Norm(nn.Module):
    """Any normlab row-wise norm kind as a module. Parameters are registered
    under the kind's names (``weight``, ``bias``, ``alpha``, ``shift``), with
    shape ``normalized_shape`` (per feature) or ``(1,)`` (scalars).
    ``elementwise_affine=False`` leaves out the gain and bias (registered as
    ``None``, as torch does); ``bias=False`` the bias alone."""

    def __init__(self, kind: str, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, bias: bool = True, device=None, dtype=None,
                 init: dict | None = None):
        super().__init__()
        info = kind_info(kind)
        if device is not None and torch.device(device).type != "cpu":
            raise TypeError(f"normlab's kernels run on the CPU, not {device}")
        if dtype is not None and dtype not in _DTYPES:
            raise TypeError(f"normlab's kernels take float32, bfloat16 or float16, not {dtype}")
        self.kind = info.name
        self.normalized_shape = _normalized_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        init = dict(init or {})
        d = math.prod(self.normalized_shape)
        self._suffixes = []
        for spec in info.params:
            self._suffixes.append(spec.suffix)
            keep = (spec.role not in ("gain", "bias") or elementwise_affine) and (
                spec.role != "bias" or bias)
            if not keep:
                self.register_parameter(spec.suffix, None)
                continue
            shape = self.normalized_shape if spec.per_feature else (1,)
            value = init.pop(spec.suffix, spec.init_value(d))
            self.register_parameter(spec.suffix, nn.Parameter(
                torch.full(shape, float(value), dtype=dtype or torch.float32)))
        if init:
            raise ValueError(f"{info.name} has no parameter {', '.join(init)}")

    def _eps(self) -> float | None:
        return self.eps

    def forward(self, x: Tensor) -> Tensor:
        params = [getattr(self, s) for s in self._suffixes]
        return norm(self.kind, x, self.normalized_shape, params, self._eps())

    def extra_repr(self) -> str:
        return (f"{self.kind}, {self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class LayerNorm(Norm):
    """Drop-in for ``torch.nn.LayerNorm`` (same arguments and state_dict)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None):
        super().__init__("layernorm", normalized_shape, eps, elementwise_affine, bias, device, dtype)


class RMSNorm(Norm):
    """Drop-in for ``torch.nn.RMSNorm``: ``eps=None`` means
    ``torch.finfo(torch.float32).eps``, as there."""

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, device=None, dtype=None):
        super().__init__("rmsnorm", normalized_shape, eps, elementwise_affine, True, device, dtype)

    def _eps(self) -> float:
        return torch.finfo(torch.float32).eps if self.eps is None else self.eps


class ZeroCenteredRMSNorm(Norm):
    """RMSNorm with gain ``1 + weight`` (weight init 0; Gemma's, OLMo's
    zero-centred form), so weight decay pulls the gain towards 1."""

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, device=None, dtype=None):
        super().__init__("zrmsnorm", normalized_shape, eps, elementwise_affine, True, device, dtype)


class ScaleNorm(Norm):
    """ScaleNorm: ``g * x / max(||x||, eps)`` with one scalar ``g`` (init sqrt(d))."""

    def __init__(self, normalized_shape, eps: float | None = None, device=None, dtype=None):
        super().__init__("scalenorm", normalized_shape, eps, True, True, device, dtype)


class DyT(Norm):
    """Dynamic Tanh (Zhu et al., 2025): ``weight * tanh(alpha * x) + bias``."""

    def __init__(self, normalized_shape, alpha_init: float = 0.5, bias: bool = True,
                 device=None, dtype=None):
        super().__init__("dyt", normalized_shape, None, True, bias, device, dtype,
                         init={"alpha": alpha_init})


class Derf(Norm):
    """Dynamic erf: ``weight * erf(alpha * x + shift) + bias``."""

    def __init__(self, normalized_shape, alpha_init: float = 0.5, shift_init: float = 0.0,
                 bias: bool = True, device=None, dtype=None):
        super().__init__("derf", normalized_shape, None, True, bias, device, dtype,
                         init={"alpha": alpha_init, "shift": shift_init})


# ---------------------------------------------------------------- swap_norms

def _eps_attr(m: nn.Module) -> float | None:
    for name in ("eps", "variance_epsilon", "epsilon", "rms_norm_eps"):
        v = getattr(m, name, None)
        if isinstance(v, (float, int)) and not isinstance(v, bool):
            return float(v)
    return None


def _probe(m: nn.Module) -> tuple | None:
    """What a module with one 1-D float32 ``weight`` and an eps attribute
    computes, found by running it: ``(kind, eps)`` if it matches RMSNorm
    (gain w) or zero-centred RMSNorm (gain 1 + w) within float32 rounding,
    else None. The probe runs under ``no_grad`` on a random input and never
    changes the module."""
    params = dict(m.named_parameters(recurse=True))
    if set(params) != {"weight"} or list(m.children()):
        return None
    w = params["weight"]
    if w.dim() != 1 or w.dtype != torch.float32 or w.device.type != "cpu":
        return None
    eps = _eps_attr(m)
    if eps is None:
        return None
    d = w.numel()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, d, generator=g) * 3.0 + 0.5
    with torch.no_grad():
        try:
            y = m(x)
        except Exception:
            return None
        if not isinstance(y, Tensor) or y.shape != x.shape or y.dtype != torch.float32:
            return None
        base = x * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + eps).float()
        for kind, gain in (("rmsnorm", w), ("zrmsnorm", 1.0 + w)):
            ref = base * gain
            if torch.allclose(y, ref, rtol=1e-4, atol=1e-5 * float(ref.abs().max()) + 1e-6):
                return kind, eps
    return None


def swap_norms(model: nn.Module, probe: bool = True) -> list:
    """Replace every ``nn.LayerNorm`` and ``nn.RMSNorm`` in ``model`` (and,
    with ``probe``, every RMSNorm-like module such as Hugging Face's
    ``LlamaRMSNorm`` or Gemma's ``1 + w`` form, found by what it computes,
    not its name) by normlab's, sharing the same ``Parameter`` objects (an
    optimizer built before the swap keeps working). Modules not in float32
    on the CPU are left alone. Returns ``[(qualified name, old class, kind)]``."""
    replaced = []
    for full, child in list(model.named_modules()):
        if not full or isinstance(child, Norm):
            continue
        parent_name, _, child_name = full.rpartition(".")
        parent = model.get_submodule(parent_name)
        if getattr(parent, child_name, None) is not child:
            continue  # replaced already (a module registered twice) or not an attribute
        new = None
        if isinstance(child, nn.LayerNorm):
            if _torch_module_ok(child):
                new = LayerNorm(child.normalized_shape, child.eps, child.elementwise_affine,
                                child.bias is not None)
        elif isinstance(child, nn.RMSNorm):
            if _torch_module_ok(child):
                new = RMSNorm(child.normalized_shape, child.eps, child.elementwise_affine)
        elif probe:
            found = _probe(child)
            if found is not None:
                kind, eps = found
                cls = RMSNorm if kind == "rmsnorm" else ZeroCenteredRMSNorm
                new = cls(child.weight.shape, eps)
        if new is None:
            continue
        for suffix in new._suffixes:
            if getattr(new, suffix) is not None:
                setattr(new, suffix, getattr(child, suffix))
        new.train(child.training)
        setattr(parent, child_name, new)
        replaced.append((full, type(child).__name__, new.kind))
    return replaced


def _torch_module_ok(m: nn.Module) -> bool:
    return all(p.dtype == torch.float32 and p.device.type == "cpu" for p in m.parameters())


def reference(kind: str, x: Tensor, normalized_shape, params: Sequence[Tensor | None] = (),
              eps: float | None = None) -> Tensor:
    """The same norm composed from PyTorch operations (slow; for tests and
    for devices normlab's kernels do not serve)."""
    info = kind_info(kind)
    ns = _normalized_shape(normalized_shape)
    d = math.prod(ns)
    eps = info.default_eps if eps is None else eps
    vals = {}
    for spec, p in zip(info.params, params):
        vals[spec.suffix] = (torch.full(ns if spec.per_feature else (1,), spec.init_value(d),
                                        dtype=x.dtype) if p is None else p)
    dims = tuple(range(-len(ns), 0))
    if info.name == "layernorm":
        return F.layer_norm(x, ns, vals["weight"], vals["bias"], eps)
    if info.name in ("rmsnorm", "zrmsnorm"):
        g = vals["weight"] + (1.0 if info.name == "zrmsnorm" else 0.0)
        return x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps) * g
    if info.name == "scalenorm":
        n = x.pow(2).sum(dims, keepdim=True).sqrt().clamp_min(eps)
        return vals["weight"] * x / n
    if info.name == "dyt":
        return vals["weight"] * torch.tanh(vals["alpha"] * x) + vals["bias"]
    if info.name == "derf":
        return vals["weight"] * torch.erf(vals["alpha"] * x + vals["shift"]) + vals["bias"]
    if info.name == "none":
        return x.clone()
    raise ValueError(f"no PyTorch reference for {info.name}")
