"""``normlab inspect`` for any PyTorch transformers model: the lessons' lens
on a live model, inside a training loop or a notebook::

    import normlab.diagnose
    report = normlab.diagnose.diagnose(model, [ids_1, ids_2], held_out=ids_3)
    report["blocks"][5]["row_norm_out"]    # the lesson's stream metric
    report["claims"]["massive"]             # the largest activation, where

The report is the one ``normlab inspect --json`` writes, computed by
normlab's library: forward hooks hand each block's tensors to the hook
points of normlab's decoder observer (``_native.Diagnosis``), which reduces
them as they pass (memory: one block's tensors, one layer's attention).
What it records, per text:

- each block's input and output stream (pre-hook and hook on the block);
- the stream between the attention and the MLP, where the family shows it
  (the MLP norm's input in Llama, Qwen, Mistral, GPT-2 and Gemma; the
  stream plus the attention output norm's output in OLMo 2; the stream
  plus the attention's output in a parallel block), else those fields are
  null;
- every norm's input, the MLP's hidden layer (the input of its last
  projection), and each layer's attention probabilities and largest logit
  (through an attention function that runs the model's own eager
  attention and reads the logits from the same queries and keys);
- on ``held_out`` (windows of 256 tokens, as ``inspect``): the logits with
  the final norm and with it skipped, the logit lens, and (``changed``)
  the loss with every block norm swapped between LayerNorm and RMSNorm
  (C21) and with every norm's eps taken out (C8), each norm rebuilt from
  its probed gain and bias.

Gains are probed, so a zero-centred ``1 + w`` norm reports its real gain:
each norm module is run on a zero-mean, unit-RMS row ``x`` and on ``-x``;
``g = (n(x) - n(-x)) / 2x`` and ``b = (n(x) + n(-x)) / 2``.

The model is left as it was: gradients off, its training mode, attention
implementation and hooks restored.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from . import _native

__all__ = ["diagnose", "Parts"]

_IMPL = "normlab_diagnose"
# The recorder of the pass under way (None outside diagnose).
_ACTIVE = None

_BLOCK_LISTS = ("model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers",
                "transformer.layers", "model.language_model.layers", "language_model.model.layers",
                "transformer.blocks", "layers", "h")
_FINAL_NORMS = ("model.norm", "transformer.ln_f", "gpt_neox.final_layer_norm",
                "model.decoder.final_layer_norm", "model.final_layernorm", "transformer.norm_f",
                "model.language_model.norm", "language_model.model.norm", "norm", "ln_f")
_ATTENTION = ("self_attn", "attn", "attention", "self_attention")
_MLP = ("mlp", "feed_forward", "ffn")
_ROLES = {
    "q_norm": "QK-Norm on queries", "q_layernorm": "QK-Norm on queries",
    "query_layernorm": "QK-Norm on queries",
    "k_norm": "QK-Norm on keys", "k_layernorm": "QK-Norm on keys",
    "key_layernorm": "QK-Norm on keys",
    "input_layernorm": "attention input", "ln_1": "attention input",
    "attention_norm": "attention input",
    "self_attn_layer_norm": "attention input",
    "pre_feedforward_layernorm": "MLP input", "ln_2": "MLP input", "ffn_norm": "MLP input",
    "final_layer_norm": "MLP input",
    "post_feedforward_layernorm": "MLP output",
}


def _get(obj, path):
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _is_norm(m) -> bool:
    w = getattr(m, "weight", None)
    return ("norm" in type(m).__name__.lower() and w is not None and w.dim() == 1
            and not any(True for _ in m.children()))


def _first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


def _np(t) -> np.ndarray:
    """A float32, C-contiguous NumPy copy of one sequence's tensor."""
    import torch
    return t.detach().to(dtype=torch.float32).contiguous().cpu().numpy().reshape(-1)


class Parts:
    """Where a model keeps what diagnose reads: its ``blocks`` (a list of
    modules, each mapping the residual stream to the next), ``final_norm``,
    ``head`` (the output embedding) and, per block, the norms with their
    roles, the attention and MLP modules and how the stream between its
    sublayers is seen (``mid``). Found by the transformers families'
    names; give ``blocks`` and ``final_norm`` for any other model."""

    def __init__(self, model, blocks=None, final_norm=None):
        if blocks is None:
            blocks = next((b for b in (_get(model, p) for p in _BLOCK_LISTS)
                           if b is not None and len(b) > 0), None)
        if blocks is None:
            raise ValueError("cannot find the model's blocks: pass blocks=[...] (the modules "
                             "that each map the residual stream to the next)")
        if final_norm is None:
            final_norm = next((n for n in (_get(model, p) for p in _FINAL_NORMS)
                               if n is not None and _is_norm(n)), None)
        if final_norm is None:
            raise ValueError("cannot find the model's final norm: pass final_norm=module")
        self.blocks = list(blocks)
        self.final_norm = final_norm
        self.head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        cfg = getattr(model, "config", None)
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        self.softcap = getattr(cfg, "final_logit_softcapping", None)
        self.parallel = bool(getattr(cfg, "use_parallel_residual", False) or getattr(cfg, "parallel_attn", False))
        self.norms, self.attn, self.mlp_down, self.mid = [], [], [], []
        for b in self.blocks:
            named = dict(b.named_modules())
            names = {n.split(".")[-1] for n in named}
            sandwich = "post_feedforward_layernorm" in names
            norms = []
            for n, m in named.items():
                if not n or not _is_norm(m):
                    continue
                last = n.split(".")[-1]
                role = _ROLES.get(last)
                if last == "post_attention_layernorm":
                    role = "attention output" if sandwich else "MLP input"
                norms.append((n, m, role))
            self.norms.append(norms)
            self.attn.append(next((getattr(b, a) for a in _ATTENTION if hasattr(b, a)), None))
            mlp = next((getattr(b, a) for a in _MLP if hasattr(b, a)), None)
            linears = [] if mlp is None else [m for m in mlp.modules()
                                              if getattr(m, "weight", None) is not None
                                              and m.weight.dim() == 2]
            self.mlp_down.append(linears[-1] if linears else None)
            by_role = {r: m for _, m, r in norms}
            # A block with one stream norm feeding both sublayers is a
            # parallel block (GPT-J, Phi, Cohere, Falcon).
            stream_norms = [r for _, _, r in norms if not (r or "").startswith("QK")]
            parallel = self.parallel or (stream_norms == ["attention input"] and mlp is not None)
            if parallel and self.attn[-1] is not None:
                self.mid.append(("plus_output", self.attn[-1]))
            elif "pre_feedforward_layernorm" in names:
                self.mid.append(("input", named[next(n for n in named if n.endswith("pre_feedforward_layernorm"))]))
            elif sandwich and "attention output" in by_role:
                self.mid.append(("plus_output", by_role["attention output"]))
            elif "MLP input" in by_role:
                self.mid.append(("input", by_role["MLP input"]))
            else:
                self.mid.append(None)


def _probe(norm):
    """A norm module's gain and bias (float32 NumPy), its eps, whether it
    is zero-centred (multiplies by 1 + its weight) and whether it centres
    (LayerNorm) or not (RMSNorm)."""
    import torch
    w = norm.weight
    n = w.numel()
    x = torch.where(torch.arange(n) % 2 == 0, 1.0, -1.0).double()
    x = x - x.mean()
    x = x / x.pow(2).mean().sqrt()
    eps = next((float(getattr(norm, a)) for a in ("eps", "variance_epsilon", "epsilon")
                if isinstance(getattr(norm, a, None), (float, int))), 0.0)
    run = lambda v: norm(v.to(w.dtype).reshape(1, n)).double().reshape(n)  # noqa: E731
    y1, y2 = run(x), run(-x)
    xq = x.to(w.dtype).double()
    g = (y1 - y2) / (2 * xq) * (1 + eps) ** 0.5
    b = (y1 + y2) / 2
    centres = bool(torch.allclose(run(x + 3.0), y1, rtol=1e-3, atol=1e-3))
    wd = w.detach().double().reshape(n)
    zc = bool(torch.allclose(g, wd + 1, rtol=1e-3, atol=1e-3)
              and not torch.allclose(g, wd, rtol=1e-3, atol=1e-3))
    return {"g": g.float().numpy(), "b": b.float().numpy(), "eps": eps,
            "zero_centred": zc, "layernorm": centres}


def _attention(module, query, key, value, attention_mask, **kw):
    """The model's own eager attention, with its probabilities and largest
    logits handed to the recorder of the pass under way."""
    import torch
    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if eager is None:
        raise RuntimeError(f"{type(module).__name__}: no eager attention to run")
    out, w = eager(module, query, key, value, attention_mask, **kw)
    rec = _ACTIVE
    if rec is not None and w is not None:
        q = query[0].float()
        k = key[0].float()
        if k.shape[0] != q.shape[0]:
            k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)
        s = (q @ k.transpose(-1, -2)) * float(kw.get("scaling") or getattr(module, "scaling", 1.0))
        cap = kw.get("softcap")
        if cap:
            s = cap * torch.tanh(s / cap)
        t, keys = s.shape[-2], s.shape[-1]
        if attention_mask is None:
            allowed = torch.ones(t, keys, dtype=torch.bool).tril(keys - t)
        elif attention_mask.dtype == torch.bool:
            allowed = attention_mask[0, 0, :, :keys]
        else:
            allowed = attention_mask[0, 0, :, :keys] > torch.finfo(attention_mask.dtype).min / 2
        top = s.masked_fill(~allowed, float("-inf")).amax(dim=(-1, -2))
        rec.attention(module, w[0], top, keys, kw.get("sliding_window"))
    return out, w


def _register():
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    AttentionInterface.register(_IMPL, _attention)
    AttentionMaskInterface.register(_IMPL, ALL_MASK_ATTENTION_FUNCTIONS["eager"])


class _Recorder:
    """The hooks of one diagnosis: they feed ``diag`` while a text passes."""

    def __init__(self, parts: Parts, diag):
        self.p, self.diag = parts, diag
        self.block_of = {id(a): l for l, a in enumerate(parts.attn) if a is not None}
        self.handles = []
        self.state = {}
        self.streams = None  # set to a list to keep each block's output

    def attention(self, module, probs, top, keys, window):
        l = self.block_of.get(id(module), getattr(module, "layer_idx", None))
        if l is None:
            return
        self.diag.attention(l, _np(probs), [float(v) for v in top], keys, window)

    def install(self, record=True):
        p, d = self.p, self.diag
        for l, b in enumerate(p.blocks):
            def pre(mod, args, kwargs, l=l):
                x = args[0] if args else kwargs["hidden_states"]
                self.state = {"x": x}
                if record:
                    d.sublayer_in(l, 0, _np(x))

            def post(mod, args, kwargs, out, l=l):
                y = _first(out)
                if self.streams is not None:
                    self.streams.append(y)
                if not record:
                    return
                mid = self.state.get("mid")
                if mid is not None:
                    x = self.state["x"]
                    d.write(l, 0, _np(mid.float() - x.float()))
                    d.sublayer_out(l, 0, _np(mid))
                    d.sublayer_in(l, 1, _np(mid))
                    d.write(l, 1, _np(y.float() - mid.float()))
                d.sublayer_out(l, 1, _np(y))

            self.handles.append(b.register_forward_pre_hook(pre, with_kwargs=True))
            self.handles.append(b.register_forward_hook(post, with_kwargs=True))
            if not record:
                continue
            for _, m, _ in p.norms[l]:
                def norm_in(mod, args, l=l):
                    x = args[0]
                    d.norm_input(l, _np(x), x.shape[-1])
                self.handles.append(m.register_forward_pre_hook(norm_in))
            if p.mlp_down[l] is not None:
                def hidden(mod, args, l=l):
                    d.mlp_hidden(l, _np(args[0]))
                self.handles.append(p.mlp_down[l].register_forward_pre_hook(hidden))
            if p.mid[l] is not None:
                how, m = p.mid[l]
                if how == "input":
                    def mid_in(mod, args):
                        self.state["mid"] = args[0]
                    self.handles.append(m.register_forward_pre_hook(mid_in))
                else:
                    def mid_out(mod, args, out):
                        self.state["mid"] = self.state["x"] + _first(out)
                    self.handles.append(m.register_forward_hook(mid_out))
        if record:
            def final(mod, args):
                d.final_stream(_np(args[0]))
            self.handles.append(p.final_norm.register_forward_pre_hook(final))

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def tcfg_of(model):
    """The model's (text) configuration, or None."""
    cfg = getattr(model, "config", None)
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def _describe(parts, fin, probes, cfg) -> str:
    """The norms' placement in the lesson's terms, from the roles found and
    the probed final norm: "Pre-RMSNorm", "Sandwich-RMSNorm (zero-centred
    gains 1 + w)", "Output-RMSNorm, QK-Norm", "Pre-LayerNorm (with bias),
    attention and MLP in parallel", ..."""
    roles = {r for ns in parts.norms for _, _, r in ns if r}
    stream = roles - {"QK-Norm on queries", "QK-Norm on keys"}
    inputs = {"attention input", "MLP input"} & stream
    outputs = {"attention output", "MLP output"} & stream
    placement = ("Sandwich" if inputs and outputs else "Output" if outputs else "Pre" if inputs
                 else "no block norms found")
    kind = "LayerNorm" if fin["layernorm"] else "RMSNorm"
    notes = []
    if fin["zero_centred"]:
        notes.append("zero-centred gains 1 + w")
    if float(np.abs(fin["b"]).max()) > 0:
        notes.append("with bias")
    s = f"{placement}-{kind}" + (f" ({'; '.join(notes)})" if notes else "")
    if "QK-Norm on queries" in roles:
        s += ", QK-Norm"
    if any(m is not None and m[0] == "plus_output" and m[1] is a
           for m, a in zip(parts.mid, parts.attn)):
        s += ", attention and MLP in parallel"
    layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer", None)
    return f"{getattr(cfg, 'model_type', '?')}, {layers or len(parts.blocks)} layers, {s}"


def _ids(x):
    import torch
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().reshape(-1).tolist()
    return [int(v) for v in x]


def _replace_norms(norms, how):
    """Hooks that rebuild each (module, probe) norm as ``how(probe)`` gives:
    (LayerNorm or not, eps); returns the handles."""
    import torch

    def rebuilt(pr, layer, eps):
        g, b = torch.from_numpy(pr["g"]), torch.from_numpy(pr["b"])

        def hook(mod, args, out):
            x = args[0].float()
            if layer:
                x = x - x.mean(-1, keepdim=True)
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g + b
            return y.to(_first(out).dtype)
        return hook
    handles = []
    for m, pr in norms:
        layer, eps = how(pr)
        handles.append(m.register_forward_hook(rebuilt(pr, layer, eps)))
    return handles


def sink_windows(ids, bos=None):
    """The windows the field's measures run on, as inspect cuts them: up to
    16 of 64 tokens from the start of ``ids`` (a shorter text: all of it);
    when ``ids`` begins with the model's ``bos``, every window begins with
    it, then the next 63 tokens."""
    SINK_TOKENS, FIELD_WINDOWS = _native.field_windows()
    if len(ids) < SINK_TOKENS:
        return [ids] if ids else []
    if bos is not None and ids[0] == bos:
        n = min((len(ids) - 1) // (SINK_TOKENS - 1), FIELD_WINDOWS)
        return [[bos] + ids[1 + i * (SINK_TOKENS - 1):1 + (i + 1) * (SINK_TOKENS - 1)] for i in range(n)]
    n = min(len(ids) // SINK_TOKENS, FIELD_WINDOWS)
    return [ids[i * SINK_TOKENS:(i + 1) * SINK_TOKENS] for i in range(n)]


def _bos(tokenizer, tcfg):
    """The BOS a text begins with: the one ``tokenizer`` puts before a
    text, else the configuration's ``bos_token_id``."""
    if tokenizer is not None:
        ids = tokenizer("a")["input_ids"]
        b = getattr(tokenizer, "bos_token_id", None)
        return b if ids and ids[0] == b else None
    return getattr(tcfg, "bos_token_id", None)


def diagnose(model, texts, held_out=None, *, blocks=None, final_norm=None, changed=True,
             tokenizer=None, window=256, lens_tokens=64) -> dict:
    """The report ``normlab inspect --json`` writes, for a PyTorch causal
    language model (transformers' ``AutoModelForCausalLM`` or any module
    whose ``forward(ids)`` returns logits or an object with ``.logits``).

    ``texts``: token id sequences (lists, 1-D tensors, or a 2-D tensor of
    one text per row), each run on its own for the per-block rows.
    ``held_out``: token ids (at least 2) for the final norm's effect, the
    logit lens and the claims' losses; default: the texts joined.
    ``blocks``, ``final_norm``: the model's blocks and final norm where
    its family's names do not find them. ``changed``: also measure C21's
    and C8's losses (two more passes over ``held_out``). ``tokenizer``: to
    name tokens (else ``#id``)."""
    import torch
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive number of tokens (got {window!r})")
    if hasattr(texts, "dim") and texts.dim() == 2:
        texts = list(texts)
    texts = [_ids(t) for t in texts]
    if not texts or any(len(t) == 0 for t in texts):
        raise ValueError("texts must be one or more non-empty token id sequences")
    held = _ids(held_out) if held_out is not None else [i for t in texts for i in t]
    if len(held) < 2:
        raise ValueError("held_out needs at least 2 tokens")
    parts = Parts(model, blocks, final_norm)
    # (inspect's windows: 256 tokens, or the context when it is shorter)
    window = min(window, int(getattr(tcfg_of(model), "max_position_embeddings", None)
                             or getattr(tcfg_of(model), "n_positions", None) or window))
    cfg = getattr(model, "config", None)
    tcfg = tcfg_of(model)
    d = parts.final_norm.weight.numel()
    heads = int(getattr(tcfg, "num_attention_heads", 0) or getattr(tcfg, "n_head", 0) or 1)
    param = next(model.parameters())
    # The held-out windows (each `window` predictions, as inspect reads them).
    windows = [held[s:s + window + 1] for s in range(0, len(held) - 1, window)]
    # Each module's own mode (a block left in eval inside a training model
    # comes back in eval), restored even when a pass raises.
    modes = [(m, m.training) for m in model.modules()]
    impl = getattr(cfg, "_attn_implementation", None)
    global _ACTIVE
    rec = None
    try:
        model.eval()
        if impl is not None:
            _register()
            model.set_attn_implementation(_IMPL)

        def logits(ids):
            out = model(torch.tensor([ids], device=param.device))
            return _first(getattr(out, "logits", out))[0].float()
        # The head's rows (no extra pass to learn the vocabulary).
        vocab = parts.head.weight.shape[0] if parts.head is not None else int(tcfg.vocab_size)
        diag = _native.Diagnosis(len(parts.blocks), heads, d, vocab)
        with torch.no_grad():
            rec = _Recorder(parts, diag)
            rec.install()
            _ACTIVE = rec
            for t in texts:
                diag.begin(t)
                logits(t)
            # The field's measures (Gu et al.'s Sink metric, Sun et al.'s
            # massive activations) on 64-token windows of the held-out
            # text, as inspect takes them.
            for w in sink_windows(held, _bos(tokenizer, tcfg)):
                diag.field_begin(w)
                logits(w)
            rec.remove()
            _ACTIVE = None
            # The final norm's effect over held-out windows.
            for w in windows:
                a = logits(w[:-1])
                skip = parts.final_norm.register_forward_hook(lambda mod, args, out: args[0])
                try:
                    b = logits(w[:-1])
                finally:
                    skip.remove()
                diag.final_norm_window(_np(a), _np(b), w[1:])
            # The logit lens: each block's output through the final norm
            # and the head.
            ids = held[:lens_tokens + 1]
            rec = _Recorder(parts, diag)
            rec.streams = []
            rec.install(record=False)
            own = logits(ids[:-1])
            rec.remove()
            diag.lens(None, _np(own), ids[1:])
            for b, y in enumerate(rec.streams):
                if b + 1 == len(rec.streams) or parts.head is None:
                    z = own
                else:
                    z = parts.head(parts.final_norm(y)).float()[0]
                    if parts.softcap:
                        z = parts.softcap * torch.tanh(z / parts.softcap)
                diag.lens(b, _np(z), ids[1:])
            probes = {id(m): (m, _probe(m)) for ns in parts.norms for _, m, _ in ns}
            fin = _probe(parts.final_norm)
            lost = None
            if changed:
                own_layer = fin["layernorm"]
                block_norms = [(m, pr) for ns in parts.norms for _, m, r in ns
                               if not r or not r.startswith("QK")
                               for pr in [probes[id(m)][1]]] + [(parts.final_norm, fin)]
                every = list(probes.values()) + [(parts.final_norm, fin)]

                def loss(norms, how):
                    hs = _replace_norms(norms, how)
                    try:
                        total, n = 0.0, 0
                        for w in windows:
                            z = logits(w[:-1])
                            total += float(torch.nn.functional.cross_entropy(
                                z.double(), torch.tensor(w[1:]), reduction="sum"))
                            n += len(w) - 1
                        return total / n
                    finally:
                        for h in hs:
                            h.remove()
                swapped = loss(block_norms, lambda pr: (not own_layer, pr["eps"]))
                without = loss(every, lambda pr: (pr["layernorm"], 1e-30))
                lost = (swapped, "rmsnorm" if own_layer else "layernorm", without)
    finally:
        _ACTIVE = None
        if rec is not None:
            rec.remove()
        if impl is not None:
            model.set_attn_implementation(impl)
        for m, mode in modes:
            m.training = mode
    gains, block_gains = [], []
    by_role = {}
    for ns in parts.norms:
        roles = {}
        for _, m, r in ns:
            pr = probes[id(m)][1]
            if r:
                roles[r] = pr["g"]
                by_role.setdefault(r, []).append(pr)
        attn = roles.get("attention input", roles.get("attention output", np.zeros(0, np.float32)))
        mlp = roles.get("MLP input", roles.get("MLP output", np.zeros(0, np.float32)))
        block_gains.append((attn.tolist(), mlp.tolist()))
    for r, prs in by_role.items():
        gains.append((r, np.concatenate([p["g"] for p in prs]).tolist(),
                      prs[0]["zero_centred"]))
    gains.append(("final", fin["g"].tolist(), fin["zero_centred"]))
    head = {
        "model": type(model).__name__,
        "architecture": getattr(tcfg, "model_type", None),
        "layers": len(parts.blocks), "d": d, "heads": heads,
        "kv_heads": getattr(tcfg, "num_key_value_heads", None) or heads,
        "eps": fin["eps"], "rope_base": getattr(tcfg, "rope_theta", None),
        "config": tcfg.to_dict() if hasattr(tcfg, "to_dict") else None,
        "texts": len(texts), "ffn_clamp": None, "source": "normlab.diagnose",
        "description": _describe(parts, fin, probes, tcfg),
    }
    name = None
    if tokenizer is not None:
        name = lambda i: tokenizer.decode([i])  # noqa: E731
    return json.loads(diag.report(json.dumps(head, default=str), block_gains, gains,
                                  fin["g"].tolist(), fin["eps"], lost, name))
