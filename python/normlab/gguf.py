"""A GGUF model's residual stream as NumPy arrays (no PyTorch needed).

normlab runs the model with its own decoder (SmolLM2 and other Llama
files; Gemma 3), the one that ``normlab inspect`` uses and that matches
Hugging Face transformers' hidden states to about 1e-5, so a NumPy or
PyTorch user can study a model's stream without loading it into PyTorch::

    import normlab.gguf
    t = normlab.gguf.trace("models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf",
                           "The capital of France is")
    t.streams.shape             # (layers + 1, tokens, d)
    t.mean_token_norm           # the lesson's metric per stream
    t.max_abs, t.max_token      # the largest |value| and which token holds it

The last model loaded stays in memory for the next call on the same file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from . import _native
from ._core import default_threads

__all__ = ["Trace", "trace"]


@dataclass(frozen=True)
class Trace:
    """One text through a GGUF decoder.

    ``streams[i]`` is the residual stream entering block ``i`` for
    ``i < layers`` and ``streams[layers]`` the stream after the last block
    (before the final norm): Hugging Face's ``output_hidden_states`` but
    for the last entry, which transformers records after the final norm
    (here ``final``). Per stream: ``mean_token_norm`` (the mean over tokens
    of each token's L2 norm, the lesson's metric), ``rms`` (over all
    elements of all tokens), ``max_abs`` and ``max_token`` (the position
    holding it). Per block: ``attn_max_logit`` and, for a model with
    QK-Norm, ``attn_max_logit_raw`` (the same queries and keys without it;
    NaN otherwise), ``attn_entropy``. Per sublayer (two per block):
    ``sublayers`` rows of (block, sublayer, stream RMS before, write RMS,
    stream RMS after, max |after - (before + write)| / max |after|).
    """

    config: dict
    ids: np.ndarray
    tokens: list
    streams: np.ndarray
    final: np.ndarray
    mean_token_norm: np.ndarray
    rms: np.ndarray
    max_abs: np.ndarray
    max_token: np.ndarray
    attn_max_logit: np.ndarray
    attn_max_logit_raw: np.ndarray
    attn_entropy: np.ndarray
    sublayers: np.ndarray


def trace(path, text: str, max_tokens: int = 4096, threads: int | None = None) -> Trace:
    """Run ``text`` (after the model's BOS, if it adds one; at most
    ``max_tokens`` tokens) through the GGUF model at ``path``."""
    if not isinstance(text, str) or not text:
        raise ValueError("text must be a non-empty string")
    if int(max_tokens) < 1:
        raise ValueError("max_tokens must be at least 1")
    r = _native.gguf_trace(str(path), text, int(max_tokens), threads or default_threads())
    d, n = r["d"], r["n_streams"]
    streams = np.frombuffer(r["streams"], dtype="<f4").reshape(n, -1, d)
    final = np.frombuffer(r["final"], dtype="<f4").reshape(-1, d)
    s64 = streams.astype(np.float64)
    flat = np.abs(s64).reshape(n, -1)
    at = flat.argmax(axis=1)
    return Trace(
        config=json.loads(r["config"]),
        ids=np.asarray(r["ids"], dtype=np.int64),
        tokens=list(r["tokens"]),
        streams=streams,
        final=final,
        mean_token_norm=np.linalg.norm(s64, axis=-1).mean(axis=-1),
        rms=np.sqrt((s64 * s64).mean(axis=(1, 2))),
        max_abs=flat[np.arange(n), at],
        max_token=at // d,
        attn_max_logit=np.asarray(r["attn_max_logit"], dtype=np.float64),
        attn_max_logit_raw=np.asarray(r["attn_max_logit_raw"], dtype=np.float64),
        attn_entropy=np.asarray(r["attn_entropy"], dtype=np.float64),
        sublayers=np.asarray(r["sublayers"], dtype=np.float64),
    )
