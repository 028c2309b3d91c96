"""normlab for Python: normlab's fused CPU norm kernels (LayerNorm, RMSNorm,
zero-centred RMSNorm, ScaleNorm, DyT, Derf) for NumPy (:mod:`normlab.numpy`)
and PyTorch (:mod:`normlab.torch`: custom operators, drop-in modules,
``swap_norms``), and a run logger that writes normlab's run-folder format
from a PyTorch training loop (:mod:`normlab.logger`), so ``normlab report``
and ``normlab serve`` show PyTorch runs beside normlab's own, a GGUF
model's residual stream as NumPy arrays (:mod:`normlab.gguf`), and
``normlab inspect``'s report for a live transformers model
(:mod:`normlab.diagnose`).

The kernels are the Rust crate ``normlab-kernels``, compiled into
``normlab._native``; nothing here re-implements them.
"""

from ._core import KINDS, isa, kind_info, kinds

__all__ = ["KINDS", "isa", "kind_info", "kinds"]
