"""Tests of the Python package: values and gradients against PyTorch's norms
and float64 references, the custom operators under opcheck and
torch.compile, drop-in state_dicts, swap_norms, thread-count
bit-identity, the NumPy functions, bad input, and the run logger's folder
as `normlab report` reads it."""

import json
import math
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import normlab
import normlab.numpy as nnp
import normlab.torch as nt
from normlab.logger import RunLogger

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def rand(*shape, seed=0, scale=1.0, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale + offset


def params_of(kind, ns, seed=1):
    """Random (non-initial) parameter tensors for a kind."""
    info = normlab.kind_info(kind)
    d = math.prod(ns)
    out = []
    for i, p in enumerate(info.params):
        shape = ns if p.per_feature else (1,)
        base = p.init_value(d) if p.role != "slope" else 0.7
        out.append((base + 0.3 * rand(*shape, seed=seed + i)).requires_grad_())
    return out


def check_kind(kind, x, ns, eps, rtol=2e-5):
    """normlab's forward and backward against the composed float64 reference."""
    params = params_of(kind, ns)
    x = x.clone().requires_grad_()
    y = nt.norm(kind, x, ns, params, eps)
    x64 = x.detach().double().requires_grad_()
    p64 = [p.detach().double().requires_grad_() for p in params]
    y64 = nt.reference(kind, x64, ns, p64, eps)
    scale = float(y64.detach().abs().max()) + 1e-30
    assert float((y.double() - y64).detach().abs().max()) <= rtol * scale, kind
    dy = rand(*x.shape, seed=9)
    grads = torch.autograd.grad(y, [x, *params], dy)
    grads64 = torch.autograd.grad(y64, [x64, *p64], dy.double())
    for g, g64, name in zip(grads, grads64, ["x"] + [p.suffix for p in normlab.kind_info(kind).params]):
        s = float(g64.abs().max()) + 1e-30
        err = float((g.double() - g64).abs().max())
        assert err <= 2e-4 * s + 1e-5, f"{kind} d{name}: {err} vs scale {s}"


# (LayerNorm of a one-feature row is 0 by definition: zero variance.)
@pytest.mark.parametrize("kind,d", [(k, d) for k in normlab.kinds() if k != "none"
                                    for d in (1, 7, 37, 1000) if (k, d) != ("layernorm", 1)])
def test_every_kind_matches_float64_reference(kind, d):
    x = rand(3, 5, d, seed=d, scale=2.0, offset=0.3)
    check_kind(kind, x, (d,), None)


@pytest.mark.parametrize("eps", [0.0, 1e-12, 1e-6, 1e-5, 0.1])
def test_eps_and_multi_dim_normalized_shape(eps):
    x = rand(4, 3, 6, seed=3)
    for kind in ("layernorm", "rmsnorm", "zrmsnorm"):
        check_kind(kind, x, (3, 6), eps)


def test_layer_norm_and_rms_norm_match_pytorch_values_and_gradients():
    for shape in [(16, 37), (2, 5, 64), (3, 1024)]:
        d = shape[-1]
        x = rand(*shape, seed=d, scale=3.0, offset=1.5).requires_grad_()
        w = rand(d, seed=2).requires_grad_()
        b = rand(d, seed=3).requires_grad_()
        dy = rand(*shape, seed=4)
        for ours, theirs, params in [
            (lambda x, w, b: nt.layer_norm(x, (d,), w, b), lambda x, w, b: F.layer_norm(x, (d,), w, b), (w, b)),
            (lambda x, w: nt.rms_norm(x, (d,), w), lambda x, w: F.rms_norm(x, (d,), w), (w,)),
        ]:
            y1, y2 = ours(x, *params), theirs(x, *params)
            assert torch.allclose(y1, y2, rtol=1e-5, atol=2e-6)
            g1 = torch.autograd.grad(y1, [x, *params], dy)
            g2 = torch.autograd.grad(y2, [x, *params], dy)
            for a, c in zip(g1, g2):
                assert torch.allclose(a, c, rtol=1e-4, atol=1e-4 * float(c.abs().max()))


def test_non_contiguous_inputs():
    base = rand(37, 16, seed=5)
    x = base.t()  # (16, 37), not contiguous
    assert not x.is_contiguous()
    w = rand(37, seed=6)
    assert torch.allclose(nt.rms_norm(x, (37,), w), F.rms_norm(x, (37,), w), rtol=1e-5, atol=1e-6)
    xr = x.clone().requires_grad_()
    y = nt.layer_norm(xr[:, ::2].t().t(), (19,))
    assert torch.allclose(y, F.layer_norm(x[:, ::2], (19,)), rtol=1e-5, atol=2e-6)
    y.sum().backward()
    assert xr.grad.shape == x.shape


def test_modules_have_pytorch_arguments_and_state_dicts():
    ln_t = nn.LayerNorm(24, eps=1e-6)
    with torch.no_grad():
        ln_t.weight.normal_()
        ln_t.bias.normal_()
    ln = nt.LayerNorm(24, eps=1e-6)
    ln.load_state_dict(ln_t.state_dict())
    assert set(ln.state_dict()) == {"weight", "bias"}
    x = rand(5, 24, seed=7)
    assert torch.allclose(ln(x), ln_t(x), rtol=1e-5, atol=2e-6)
    back = nn.LayerNorm(24, eps=1e-6)
    back.load_state_dict(ln.state_dict())
    assert torch.equal(back.weight, ln_t.weight)

    assert set(nt.LayerNorm(8, bias=False).state_dict()) == set(nn.LayerNorm(8, bias=False).state_dict())
    assert nt.LayerNorm(8, elementwise_affine=False).state_dict() == {}
    rms_t = nn.RMSNorm([3, 8])  # eps=None: finfo(float32).eps
    with torch.no_grad():
        rms_t.weight.uniform_(0.5, 1.5)
    rms = nt.RMSNorm([3, 8])
    rms.load_state_dict(rms_t.state_dict())
    x = rand(2, 3, 8, seed=8, scale=1e-3)
    assert torch.allclose(rms(x), rms_t(x), rtol=1e-5, atol=1e-6)
    nn.RMSNorm([3, 8]).load_state_dict(rms.state_dict())
    # every kind has a module; DyT's alpha is a learnable scalar
    dyt = nt.DyT(16, alpha_init=0.3)
    assert set(dyt.state_dict()) == {"alpha", "weight", "bias"}
    assert float(dyt.alpha.detach()) == pytest.approx(0.3)
    x = rand(4, 16, seed=2)
    assert torch.allclose(dyt(x), torch.tanh(0.3 * x), atol=1e-6)
    assert set(nt.Derf(16).state_dict()) == {"alpha", "shift", "weight", "bias"}
    assert set(nt.ZeroCenteredRMSNorm(16).state_dict()) == {"weight"}
    assert float(nt.ScaleNorm(16).weight.detach()) == pytest.approx(4.0)


def test_opcheck_accepts_the_operators():
    x = rand(6, 37, seed=1)
    for kind in ("layernorm", "rmsnorm", "dyt"):
        d = 37
        params = torch.cat([p.detach().reshape(-1) for p in params_of(kind, (d,))]).requires_grad_()
        torch.library.opcheck(torch.ops.normlab.norm_fwd.default, (x.clone().requires_grad_(), params, kind, d, 1e-5))
        y, stats = torch.ops.normlab.norm_fwd(x, params.detach(), kind, d, 1e-5)
        torch.library.opcheck(torch.ops.normlab.norm_bwd.default, (rand(6, 37, seed=2), x, params.detach(), stats, kind, d))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_16_bit_inputs_match_pytorch(kind, dtype):
    """bf16 / f16 inputs, f32 parameters: output and input gradient in the
    input's type within one ulp of PyTorch's own kernels on the same tensors
    (both compute in f32 and round once), parameter gradients in f32 close
    to PyTorch's; the input is read in place."""
    d = 257
    x = (rand(9, d, seed=4) * 2 + 0.5).to(dtype)
    dy = rand(9, d, seed=5).to(dtype)
    w = (1 + 0.3 * rand(d, seed=6)).requires_grad_()
    b = (0.3 * rand(d, seed=7)).requires_grad_()
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    if kind == "layernorm":
        ours = nt.layer_norm(xa, (d,), w, b, 1e-5)
        wt, bt = w.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
        theirs = F.layer_norm(xb, (d,), wt, bt, 1e-5)
    else:
        ours = nt.rms_norm(xa, (d,), w, 1e-5)
        wt = w.detach().clone().requires_grad_()
        theirs = F.rms_norm(xb, (d,), wt, 1e-5)
    assert ours.dtype == dtype and theirs.dtype == dtype
    ours.backward(dy)
    theirs.backward(dy)
    ulp = 2.0 ** (-7 if dtype == torch.bfloat16 else -10)
    for a, t in ((ours, theirs), (xa.grad, xb.grad)):
        a, t = a.detach().float(), t.detach().float()
        scale = t.abs().amax(dim=-1, keepdim=True)
        assert ((a - t).abs() <= ulp * t.abs() + 1e-5 * scale).all()
    assert xa.grad.dtype == dtype and w.grad.dtype == torch.float32
    assert torch.allclose(w.grad, wt.grad, rtol=0, atol=4 * ulp * float(wt.grad.abs().max()))
    # A bfloat16 / float16 module: parameters in that type, their gradients too.
    m = nt.RMSNorm(d, dtype=dtype)
    m(x).float().sum().backward()
    assert m.weight.dtype == dtype and m.weight.grad.dtype == dtype


def test_16_bit_operators_pass_opcheck():
    for dtype in (torch.bfloat16, torch.float16):
        x = rand(6, 37, seed=1).to(dtype)
        params = torch.ones(37)
        torch.library.opcheck(torch.ops.normlab.norm_fwd.default, (x, params, "rmsnorm", 37, 1e-5))
        y, stats = torch.ops.normlab.norm_fwd(x, params, "rmsnorm", 37, 1e-5)
        assert y.dtype == dtype and stats.dtype == torch.float32
        torch.library.opcheck(torch.ops.normlab.norm_bwd.default,
                              (rand(6, 37, seed=2).to(dtype), x, params, stats, "rmsnorm", 37))


def test_torch_compile_full_graph():
    torch._dynamo.reset()
    m = nn.Sequential(nn.Linear(32, 32), nt.RMSNorm(32), nn.GELU(), nt.LayerNorm(32))
    x = rand(8, 32, seed=3).requires_grad_()
    eager = m(x)
    compiled = torch.compile(m, backend="aot_eager", fullgraph=True)
    y = compiled(x)
    assert torch.allclose(y, eager, rtol=1e-6, atol=1e-6)
    y.sum().backward()
    g_compiled = x.grad.clone()
    x.grad = None
    m(x).sum().backward()
    assert torch.allclose(g_compiled, x.grad, rtol=1e-5, atol=1e-6)


def test_results_are_bit_identical_for_any_thread_count():
    x = rand(4096, 256, seed=4).requires_grad_()
    out = []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            for kind in ("layernorm", "rmsnorm"):
                p = params_of(kind, (256,))
                y = nt.norm(kind, x, (256,), p)
                grads = torch.autograd.grad(y, [x, *p], rand(4096, 256, seed=5))
                out.append((threads, kind, y.detach(), grads))
    finally:
        torch.set_num_threads(before)
    ref = {k: (y, g) for t, k, y, g in out if t == 1}
    for t, k, y, g in out:
        assert torch.equal(y, ref[k][0]), (t, k)
        for a, b in zip(g, ref[k][1]):
            assert torch.equal(a, b), (t, k)


class LlamaStyleRMSNorm(nn.Module):
    """Like Hugging Face's LlamaRMSNorm (found by behaviour, not name)."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.variance_epsilon = eps

    def forward(self, h):
        var = h.pow(2).mean(-1, keepdim=True)
        return self.weight * (h * torch.rsqrt(var + self.variance_epsilon))


class GemmaStyleRMSNorm(LlamaStyleRMSNorm):
    def forward(self, h):
        return (1.0 + self.weight) * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


class NotANorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = 1e-5

    def forward(self, h):
        return h * self.weight + self.eps


class Block(nn.Module):
    def __init__(self, d, norm):
        super().__init__()
        self.norm = norm
        self.ff = nn.Linear(d, d)

    def forward(self, h):
        return h + self.ff(self.norm(h))


def test_swap_norms_keeps_outputs_gradients_and_parameters():
    torch.manual_seed(0)
    d = 48
    model = nn.Sequential(
        Block(d, nn.LayerNorm(d)), Block(d, nn.RMSNorm(d, eps=1e-5)), Block(d, LlamaStyleRMSNorm(d)),
        Block(d, GemmaStyleRMSNorm(d)), Block(d, NotANorm(d)), nn.LayerNorm(d, bias=False))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = rand(4, 9, d, seed=11)
    y0 = model(x)
    y0.square().mean().backward()
    g0 = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    params_before = {n: p for n, p in model.named_parameters()}
    replaced = nt.swap_norms(model)
    assert [(n, k) for n, _, k in replaced] == [
        ("0.norm", "layernorm"), ("1.norm", "rmsnorm"), ("2.norm", "rmsnorm"), ("3.norm", "zrmsnorm"),
        ("5", "layernorm")]
    assert isinstance(model[4].norm, NotANorm)
    for n, p in model.named_parameters():
        assert p is params_before[n], n
    y1 = model(x)
    assert torch.allclose(y1, y0, rtol=1e-5, atol=1e-5)
    y1.square().mean().backward()
    for n, p in model.named_parameters():
        assert torch.allclose(p.grad, g0[n], rtol=1e-4, atol=1e-5 * float(g0[n].abs().max()) + 1e-7), n


def test_numpy_functions():
    rng = np.random.default_rng(0)
    x = rng.normal(2.0, 3.0, size=(5, 7, 33)).astype(np.float32)
    w = rng.normal(1.0, 0.2, size=33).astype(np.float32)
    b = rng.normal(0.0, 0.2, size=33).astype(np.float32)
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    ref = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b
    assert np.abs(nnp.layer_norm(x, w, b) - ref).max() < 1e-5 * np.abs(ref).max()
    ref = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + np.finfo(np.float32).eps) * w
    assert np.abs(nnp.rms_norm(x, w) - ref).max() < 1e-5 * np.abs(ref).max()
    # backward against the torch autograd of the same kernels
    p = nnp.params_for("rmsnorm", 33, weight=w)
    y, stats = nnp.norm_forward("rmsnorm", x, p, 1e-6)
    dy = rng.normal(size=x.shape).astype(np.float32)
    dx, dp = nnp.norm_backward("rmsnorm", x, dy, p, stats)
    xt = torch.from_numpy(x).requires_grad_()
    wt = torch.from_numpy(w).requires_grad_()
    gx, gw = torch.autograd.grad(F.rms_norm(xt, (33,), wt, 1e-6), [xt, wt], torch.from_numpy(dy))
    assert np.allclose(dx, gx.numpy(), rtol=1e-4, atol=1e-5)
    assert np.allclose(dp, gw.numpy(), rtol=1e-4, atol=1e-3)
    with pytest.raises(TypeError, match="float32"):
        nnp.layer_norm(x.astype(np.float64))
    with pytest.raises(ValueError, match="takes 33 parameters"):
        nnp.norm_forward("rmsnorm", x, np.ones(5, dtype=np.float32))


def test_bad_input_is_a_clear_error():
    x = rand(3, 8)
    with pytest.raises(TypeError, match="on the CPU: input is on meta"):
        nt.rms_norm(torch.empty(3, 8, device="meta"), (8,))
    with pytest.raises(TypeError, match="float16: input is torch.float64"):
        nt.LayerNorm(8)(x.double())
    with pytest.raises(TypeError, match="not torch.float64"):
        nt.LayerNorm(8, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\)"):
        nt.rms_norm(x, (8,), torch.ones(7))
    with pytest.raises(ValueError, match="does not end in normalized_shape"):
        nt.LayerNorm(9)(x)
    with pytest.raises(ValueError, match="unknown norm kind 'foo'"):
        nt.Norm("foo", 8)
    with pytest.raises(TypeError, match="CPU"):
        nt.LayerNorm(8, device="cuda")


def normlab_bin():
    path = os.environ.get("NORMLAB_BIN", os.path.join(REPO, "target", "release", "normlab"))
    if not os.path.exists(path):
        pytest.fail(f"no normlab binary at {path} (run cargo build --release, or set NORMLAB_BIN)")
    return path


def tiny_lm(d=32, vocab=16, layers=3):
    class Blk(nn.Module):
        def __init__(self):
            super().__init__()
            self.n = nt.RMSNorm(d)
            self.f = nn.Linear(d, d)

        def forward(self, h):
            return h + self.f(self.n(h))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList([Blk() for _ in range(layers)])
            self.head = nn.Linear(d, vocab)

        def forward(self, t):
            h = self.emb(t)
            for b in self.blocks:
                h = b(h)
            return self.head(h)

    return LM()


def train_logged(out, lr, steps=60, vocab=16):
    torch.manual_seed(0)
    model = tiny_lm(vocab=vocab)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    log = RunLogger(str(out), model, config={"lr": lr, "steps": steps, "placement": "pre", "note": "x"},
                    vocab_size=vocab, log_every=5)
    g = torch.Generator().manual_seed(1)
    for s in range(steps):
        t = torch.randint(0, vocab, (8, 12), generator=g)
        y = (t * 3 + 1) % vocab
        loss = F.cross_entropy(model(t).reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        if s == 0:
            # each block's gradient norm, from its own parameters
            log.expected_block_norms = [
                math.sqrt(sum(float(p.grad.double().square().sum()) for p in b.parameters()))
                for b in model.blocks]
        log.step(loss, lr=lr, targets=y)
        opt.step()
        opt.zero_grad()
        if (s + 1) % 20 == 0 or s + 1 == 7:
            model.eval()
            with torch.no_grad():
                log.eval(F.cross_entropy(model(t).reshape(-1, vocab), y.reshape(-1)))
            model.train()
    return log.finish(), log


def test_logger_writes_a_run_folder_normlab_reports(tmp_path):
    good, log = train_logged(tmp_path / "good", lr=0.5)
    stuck, _ = train_logged(tmp_path / "stuck", lr=0.0)
    bad, _ = train_logged(tmp_path / "bad", lr=1e6)
    assert (good["status"], stuck["status"], bad["status"]) == ("converged", "stalled", "diverged")
    assert len(log.blocks) == 3
    lines = [json.loads(l) for l in open(tmp_path / "good" / "metrics.jsonl")]
    first = lines[0]
    assert first["step"] == 1 and len(first["residual_rms"]) == 3 and len(first["grad_norm_per_block"]) == 3
    assert all(v > 0 for v in first["residual_rms"])
    # per block: the norm of that block's own parameter gradients; together
    # at most the whole model's (the embedding and head hold the rest)
    assert first["grad_norm_per_block"] == pytest.approx(log.expected_block_norms, rel=1e-6)
    blocks = math.sqrt(sum(v * v for v in first["grad_norm_per_block"]))
    assert blocks <= first["grad_norm"] * (1 + 1e-9) and blocks > 0
    evals = [l for l in lines if l["eval_loss"] is not None]
    assert [l["step"] for l in evals] == [7, 20, 40, 60]
    # an evaluation between detailed steps carries that step's own loss and grad norm
    assert evals[0]["grad_norm"] > 0 and evals[0]["grad_norm_per_block"] == [] and evals[0]["loss"] > 0
    with pytest.raises(FileExistsError):
        RunLogger(str(tmp_path / "good"), tiny_lm())
    out = subprocess.run([normlab_bin(), "report", str(tmp_path), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    recs = {r["run"]: r for r in json.loads(out.stdout)}
    assert {r: recs[r]["status"] for r in recs} == {"good": "converged", "stuck": "stalled", "bad": "diverged"}
    assert all(r["source"] == "pytorch" for r in recs.values())
    assert recs["good"]["settings"]["lr"] == pytest.approx(0.5)
    # normlab refuses to resume what it did not record
    out = subprocess.run([normlab_bin(), "train", "--resume", str(tmp_path / "good")], capture_output=True, text=True)
    assert out.returncode != 0 and "cannot train or resume it" in out.stderr


def test_torch_compile_inductor():
    torch._dynamo.reset()
    m = nn.Sequential(nn.Linear(16, 16), nt.RMSNorm(16), nn.GELU(), nt.DyT(16))
    x = rand(4, 16, seed=3).requires_grad_()
    y = torch.compile(m, fullgraph=True)(x)
    assert torch.allclose(y, m(x), rtol=1e-5, atol=1e-6)
    y.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_logger_classifies_at_the_divergence_window_edge_by_the_native_rule(tmp_path):
    """The logger calls normlab's own rule (normlab::train::status, through
    the native module): a loss above 2 ln V for one step less than the
    window comes back as a spike; for the whole window it diverges where it
    rose; a run that ends above the bound diverges where it rose."""
    from normlab import _native

    window = _native.divergence_window()
    vocab = 16
    # Above the bound 2 ln V, and exact in float32 (the losses are f32 tensors).
    low, high = 1.0, math.floor(2.0 * math.log(vocab)) + 2.0

    def run(name, losses):
        log = RunLogger(str(tmp_path / name), tiny_lm(vocab=vocab), vocab_size=vocab,
                        unigram_entropy=math.log(vocab))
        for v in losses:
            log.step(torch.tensor(v))
        log.eval(low)
        return log.finish()

    short = run("short", [low] * 5 + [high] * (window - 1) + [low] * 5)
    assert (short["status"], short["diverged_at_step"]) == ("converged", None)
    assert short["spikes"] == [{"step": 6, "peak_loss": high, "steps": window - 1}]
    full = run("full", [low] * 5 + [high] * window + [low] * 5)
    assert (full["status"], full["diverged_at_step"]) == ("diverged", 6)
    ends = run("ends", [low] * 5 + [high] * 3)
    assert (ends["status"], ends["diverged_at_step"]) == ("diverged", 6)
    nan = run("nan", [low] * 3 + [math.nan])
    assert (nan["status"], nan["diverged_at_step"]) == ("diverged", 4)


def test_no_address_crosses_and_thread_counts_capped():
    """No raw address crosses into the native module: it takes arrays, and
    locates and checks their buffers itself. An int (the address 4096 that
    once crashed the interpreter), a non-array, the wrong element type or
    size, a strided or read-only array and outputs overlapping inputs are
    refused with ValueError before any memory is touched. Thread counts
    have the CLI's cap (normlab::limits), 0 and negatives included."""
    import normlab.numpy as nnp
    import normlab.torch as nt
    from normlab import _core, _native
    for mod in (nnp, nt, _core):
        for name in ("forward_raw", "backward_raw", "_forward_raw", "_backward_raw"):
            assert not hasattr(mod, name), (mod, name)
    x = np.ones((2, 8), dtype=np.float32)
    params = nnp.params_for("rmsnorm", 8)
    y = np.empty_like(x)
    stats = np.empty(2 * _core.STATS, dtype=np.float32)
    ok = dict(x=x, params=params, y=y, stats=stats)

    def call(**over):
        a = {**ok, **over}
        _native.forward("rmsnorm", 8, 1e-6, a["x"], a["params"], a["y"], a["stats"], 1, "f32")

    call()
    assert np.allclose(y, 1.0, atol=1e-5)
    ro = np.empty_like(x)
    ro.flags.writeable = False
    for over, msg in [
        (dict(x=4096), "x: not a NumPy array"),
        (dict(y=4096), "y: not a NumPy array"),
        (dict(x=[1.0] * 16), "x: not a NumPy array"),
        (dict(x=x.astype(np.float64)), "element type float64"),
        (dict(y=np.empty(15, dtype=np.float32)), "y: 15 elements, expected 16"),
        (dict(stats=np.empty(1, dtype=np.float32)), "stats: 1 elements"),
        (dict(x=np.ones((8, 2), dtype=np.float32).T), "x: not C-contiguous"),
        (dict(y=ro), "y: read-only"),
        (dict(y=x), "y overlaps x"),
        (dict(stats=y.reshape(-1)[: 2 * _core.STATS]), "y overlaps stats"),
    ]:
        with pytest.raises((ValueError, TypeError), match=msg):
            call(**over)
    dx, dp = np.empty_like(x), np.zeros_like(params)
    with pytest.raises(ValueError, match="dx overlaps dy"):
        _native.backward("rmsnorm", 8, x, y, params, stats, y, dp, 1, "f32")
    _native.backward("rmsnorm", 8, x, y, params, stats, dx, dp, 1, "f32")
    for bad in (0, -1, 10**6):
        with pytest.raises(ValueError, match="threads must be between 1 and"):
            nnp.norm_forward("rmsnorm", x, params, threads=bad)
    y, _ = nnp.norm_forward("rmsnorm", x, params, threads=2)
    assert np.allclose(y, 1.0, atol=1e-5)


def test_only_real_arrays_cross_and_sizes_raise_value_error():
    """Only real NumPy arrays reach a kernel, their buffer and size read from
    the array itself: an object whose ``__array_interface__`` names address
    4096 (it segfaulted the interpreter), a real 4-float buffer that claims
    to be 8x4 (it was written 112 bytes past its end), a bytearray or a
    memoryview are refused with ValueError; an ndarray subclass that lies
    in its ``__array_interface__`` is read by its true buffer. Sizes like
    2**62 raise ValueError, never PanicException (which ``except
    Exception`` does not catch)."""
    from normlab import _core, _native

    x = np.ones((2, 8), dtype=np.float32)
    params = np.ones(8, dtype=np.float32)
    y = np.empty_like(x)
    stats = np.empty(2 * _core.STATS, dtype=np.float32)

    class Forged:
        def __init__(self, addr, shape):
            self.size = int(np.prod(shape))
            self.__array_interface__ = {"data": (addr, False), "shape": shape, "typestr": "<f4", "version": 3}

    small = np.zeros(4, dtype=np.float32)
    for name, bad in [
        ("address 4096", Forged(4096, (2, 8))),
        ("a 4-float buffer claiming 8x4", Forged(small.__array_interface__["data"][0], (8, 4))),
        ("bytearray", bytearray(64)),
        ("memoryview", memoryview(bytearray(64)).cast("f")),
    ]:
        for role in ("x", "y"):
            args = dict(x=x, y=y)
            args[role] = bad
            with pytest.raises(ValueError, match=f"{role}: not a NumPy array"):
                _native.forward("rmsnorm", 8, 1e-6, args["x"], params, args["y"], stats, 1, "f32")
            assert np.all(small == 0), name

    class Liar(np.ndarray):
        @property
        def __array_interface__(self):
            return {"data": (4096, False), "shape": (1 << 20,), "typestr": "<f4", "version": 3}

    lx = (np.arange(16, dtype=np.float32) + 1).reshape(2, 8).view(Liar)
    _native.forward("rmsnorm", 8, 1e-6, lx, params, y, stats, 1, "f32")
    want = np.asarray(lx) / np.sqrt((np.asarray(lx) ** 2).mean(axis=1, keepdims=True) + 1e-6)
    assert np.allclose(y, want, rtol=1e-5)
    empty = np.empty(0, dtype=np.float32)
    for d in (2**62, 2**63 - 1):
        with pytest.raises(ValueError):
            _native.forward("layernorm", d, 1e-5, empty, np.empty(0, np.float32), empty.copy(), np.empty(0, np.float32), 1, "f32")
    with pytest.raises((ValueError, OverflowError)):
        _native.forward("rmsnorm", 2**70, 1e-6, x, params, y, stats, 1, "f32")
    for args in [(2**62, 1, 8, 16), (1, 2**62, 8, 16), (1, 1, 2**62, 16), (1, 1, 8, 2**62), (0, 1, 8, 16)]:
        with pytest.raises(ValueError):
            _native.Diagnosis(*args)
    diag = _native.Diagnosis(1, 2, 8, 16)
    diag.begin([1, 2, 3])
    probs = np.zeros((2, 3, 3), dtype=np.float32)
    with pytest.raises(ValueError):
        diag.attention(0, probs, [0.0] * 5, 3, None)
    with pytest.raises(ValueError):
        diag.attention(0, probs, [0.0, 0.0], 2**62, None)
    with pytest.raises(ValueError, match="not a NumPy array"):
        diag.sublayer_in(0, 0, Forged(4096, (3, 8)))


def test_edge_cases_behave_as_torch():
    # A norm over no features: an empty output of the input's shape.
    for mod in (nn.RMSNorm(0), nt.RMSNorm(0), nn.LayerNorm(0), nt.LayerNorm(0)):
        assert mod(torch.randn(3, 0)).shape == (3, 0)
    # A weight of another shape with as many values is refused, as torch does.
    x = torch.randn(4, 16)
    with pytest.raises(RuntimeError):
        F.rms_norm(x, (16,), weight=torch.ones(2, 8))
    with pytest.raises(ValueError, match=r"weight must have shape \(16,\), got \(2, 8\)"):
        nt.rms_norm(x, (16,), torch.ones(2, 8))
    # No double backward: a clear message, not torch's generic one.
    w = torch.ones(16, requires_grad=True)
    xr = x.clone().requires_grad_()
    y = nt.rms_norm(xr, (16,), w)
    (g,) = torch.autograd.grad(y.square().sum(), xr, create_graph=False)
    assert g.shape == x.shape
    with pytest.raises(RuntimeError, match="no double backward"):
        torch.autograd.grad(nt.rms_norm(xr, (16,), w).square().sum(), xr, create_graph=True)
