"""normlab.diagnose (issue 63): `normlab inspect`'s report for a live
PyTorch transformers model.

- On the tiny models of every family normlab loads natively (the
  fixtures of crates/normlab/tests/hf_families.rs, loaded by transformers
  in float32), every number of the report is within 1e-4 relative of
  `normlab inspect`'s on the same folder and token ids (the raw QK logit,
  which diagnose does not measure, aside).
- On tiny random models of further transformers families normlab cannot
  load (built from their config classes), the report is complete and sane.
- A massive activation planted in one channel of one token is found there.
- The model is left as it was; bad input is refused with ValueError.

Needs torch and transformers (CI pins the version); skipped without them
unless NORMLAB_REQUIRE_TORCH=1."""

import json
import math
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FIXTURES = os.path.join(ROOT, "crates", "normlab", "tests", "fixtures")
NATIVE = ["llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "olmo2", "gpt2", "gpt_neox",
          "gpt_neox-sequential", "gemma3"]
TEXTS = [[1, 5, 7, 9, 3, 2, 8, 4], [3, 3, 1, 0, 6, 9, 11, 2, 5, 7]]
REL = 1e-4


def _torch():
    try:
        import torch
        import transformers
    except ImportError:
        if os.environ.get("NORMLAB_REQUIRE_TORCH") == "1":
            pytest.fail("NORMLAB_REQUIRE_TORCH=1 but torch or transformers is missing")
        pytest.skip("needs torch and transformers")
    return torch, transformers


def _folder(name):
    return os.path.join(FIXTURES, "gemma3_tiny") if name == "gemma3" else os.path.join(FIXTURES, "hf_tiny", name)


def _held():
    import numpy as np
    return [int(x) for x in np.random.default_rng(0).integers(0, 30, 300)]


def _flat(v, path=""):
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _flat(x, f"{path}.{k}")
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _flat(x, f"{path}[{i}]")
    else:
        yield path, v


@pytest.mark.parametrize("name", NATIVE)
def test_diagnose_equals_native_inspect(name):
    torch, transformers = _torch()
    import normlab.diagnose as nd
    from normlab import _native

    m = transformers.AutoModelForCausalLM.from_pretrained(_folder(name), dtype=torch.float32)
    got = nd.diagnose(m, TEXTS, _held())
    want = json.loads(_native.inspect_ids(_folder(name), TEXTS, _held(), 1))
    worst = (0.0, "")
    for section in ["blocks", "final_norm", "claims", "gains", "logit_lens", "position0", "field_metrics"]:
        ours = dict(_flat(got[section], section))
        for k, w in _flat(want[section], section):
            g = ours.get(k, "missing")
            if k.endswith("attn_max_logit_raw"):
                assert g is None, k  # not measured from outside
                continue
            if isinstance(w, (int, float)) and not isinstance(w, bool):
                assert isinstance(g, (int, float)), f"{k}: {g} against {w}"
                rel = abs(g - w) / max(abs(w), 1e-6)
                worst = max(worst, (rel, k))
            else:
                assert g == w, f"{k}: {g} against {w}"
    assert worst[0] <= REL, f"{name}: {worst[1]} differs by {worst[0]:.2e}"
    # The placement in the lesson's terms, as normlab's own description says it.
    placement = want["description"].split("), ")[1].split(" (")[0]
    assert placement in got["description"], (got["description"], want["description"])
    assert abs(got["sublayer_check"]) < 1e-5
    assert len(got["blocks"]) == want["layers"]


def _further():
    torch, transformers = _torch()
    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=50, max_position_embeddings=64,
                 pad_token_id=None, bos_token_id=None, eos_token_id=None)
    return {
        "starcoder2": lambda: transformers.Starcoder2Config(**small),
        "stablelm": lambda: transformers.StableLmConfig(**small),
        "granite": lambda: transformers.GraniteConfig(**small),
        "mixtral": lambda: transformers.MixtralConfig(**small, num_local_experts=2, num_experts_per_tok=1),
        "qwen3_moe": lambda: transformers.Qwen3MoeConfig(**small, num_experts=2, num_experts_per_tok=1,
                                                         moe_intermediate_size=32, head_dim=8),
        "phi": lambda: transformers.PhiConfig(**small),
        "cohere": lambda: transformers.CohereConfig(**small),
        "gptj": lambda: transformers.GPTJConfig(n_embd=32, n_layer=2, n_head=4, vocab_size=50,
                                                n_positions=64, rotary_dim=4),
        "falcon": lambda: transformers.FalconConfig(hidden_size=32, num_hidden_layers=2,
                                                    num_attention_heads=4, vocab_size=50,
                                                    new_decoder_architecture=False, parallel_attn=True),
        "opt": lambda: transformers.OPTConfig(hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                                              num_attention_heads=4, vocab_size=50,
                                              max_position_embeddings=64, word_embed_proj_dim=32),
    }


FURTHER = ["starcoder2", "stablelm", "granite", "mixtral", "qwen3_moe", "phi", "cohere",
           "gptj", "falcon", "opt"]


@pytest.mark.parametrize("name", FURTHER)
def test_diagnose_further_families(name):
    torch, transformers = _torch()
    import normlab.diagnose as nd

    torch.manual_seed(0)
    m = transformers.AutoModelForCausalLM.from_config(_further()[name]())
    r = nd.diagnose(m, TEXTS, list(range(1, 40)))
    assert len(r["blocks"]) == 2
    for b in r["blocks"]:
        # The stream between the sublayers is found in every one of these
        # families, and the writes add up to the block's change.
        assert b["rms_attn"] is not None and b["rms_attn"] > 0
        assert 0 < b["attn_sink"] < 1 and b["attn_sink_uniform"] > 0
        assert 0 < b["attn_entropy"] <= math.log(max(len(t) for t in TEXTS)) + 1e-9
        assert b["row_norm_out"] > 0 and b["ms_min"] > 0
        assert math.isfinite(b["attn_max_logit"])
    assert r["sublayer_check"] < 1e-5
    assert "final" in [g["role"] for g in r["gains"]]
    f = r["final_norm"]
    assert f["tokens"] == 38 and math.isfinite(f["loss_with"]) and math.isfinite(f["loss_without"])
    assert math.isfinite(r["claims"]["loss_layernorm"]) and math.isfinite(r["claims"]["loss_without_eps"])
    assert len(r["logit_lens"]) == 2


def test_diagnose_finds_a_planted_massive_activation():
    torch, transformers = _torch()
    import normlab.diagnose as nd

    m = transformers.AutoModelForCausalLM.from_pretrained(_folder("llama"), dtype=torch.float32)
    emb = m.get_input_embeddings().weight
    with torch.no_grad():
        emb[TEXTS[1][4], 5] = 400.0  # text 1, position 4, channel 5
    r = nd.diagnose(m, TEXTS, _held())["claims"]["massive"]
    assert (r["text"], r["position"], r["channel"]) == (1, 4, 5), r
    assert r["token"] == f"#{TEXTS[1][4]}" and r["value"] > 100


def test_diagnose_leaves_the_model_as_it_was():
    torch, transformers = _torch()
    import normlab.diagnose as nd

    m = transformers.AutoModelForCausalLM.from_pretrained(_folder("gemma2"), dtype=torch.float32)
    m.train()
    impl = m.config._attn_implementation
    ids = torch.tensor([TEXTS[0]])
    m.eval()
    before = m(ids).logits
    m.train()
    # One block left in eval inside a training model keeps its own mode.
    m.model.layers[0].eval()
    nd.diagnose(m, TEXTS, _held())
    assert m.training and m.config._attn_implementation == impl
    assert not m.model.layers[0].training and not m.model.layers[0].self_attn.training
    assert all(mod.training for mod in m.model.layers[1].modules())
    m.train()
    assert all(not mod._forward_hooks and not mod._forward_pre_hooks for mod in m.modules())
    assert all(p.requires_grad for p in m.parameters())
    m.eval()
    assert torch.equal(m(ids).logits, before)


def test_diagnose_refuses_bad_input():
    torch, transformers = _torch()
    import normlab.diagnose as nd

    m = transformers.AutoModelForCausalLM.from_pretrained(_folder("llama"), dtype=torch.float32)
    for texts, held, what in [([], [1, 2], "texts"), ([[]], [1, 2], "texts"), ([[1, 2]], [1], "held_out"),
                              ([[1, 10_000]], [1, 2], "outside the vocabulary")]:
        with pytest.raises(ValueError) as e:
            nd.diagnose(m, texts, held)
        assert what in str(e.value)
    with pytest.raises(ValueError, match="blocks"):
        nd.diagnose(torch.nn.Linear(2, 2), TEXTS, [1, 2])
    for window in [0, -3, 2.5, True]:
        with pytest.raises(ValueError, match="window must be a positive number"):
            nd.diagnose(m, TEXTS, _held(), window=window)


def test_diagnose_inside_a_training_loop_changes_nothing():
    """A training loop that calls diagnose between steps ends with the same
    weights, bit for bit, as one that does not (no gradients added, no
    random numbers drawn, mode and hooks restored)."""
    torch, transformers = _torch()
    import normlab.diagnose as nd

    def train(with_diagnose):
        torch.manual_seed(0)
        # (attention dropout: training draws random numbers)
        m = transformers.AutoModelForCausalLM.from_pretrained(_folder("qwen3"), dtype=torch.float32,
                                                              attention_dropout=0.1)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        m.train()
        ids = torch.tensor([TEXTS[1]])
        for step in range(3):
            loss = m(ids, labels=ids).loss
            loss.backward()
            if with_diagnose and step == 1:
                nd.diagnose(m, TEXTS, _held()[:40])
            opt.step()
            opt.zero_grad()
        return torch.cat([p.detach().reshape(-1) for p in m.parameters()])

    assert torch.equal(train(False), train(True))


@pytest.mark.parametrize("name,folder,gguf_file", [
    ("smollm2", "models/SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    ("gemma3", "models/gemma-3-270m", "gemma-3-270m-q4_k_m.gguf"),
])
def test_diagnose_on_real_weights_equals_inspect_of_the_gguf(name, folder, gguf_file):
    """transformers reads the GGUF file (dequantised to float32) and
    diagnose runs on it; normlab inspects the same file on the same token
    ids: every number within 1e-4 (measured 2026-12-05: 8.9e-6 SmolLM2,
    2.3e-6 Gemma 3)."""
    torch, transformers = _torch()
    import normlab.diagnose as nd
    from normlab import _native

    src = os.path.join(ROOT, folder)
    if not os.path.exists(os.path.join(src, gguf_file)):
        if os.environ.get("NORMLAB_REQUIRE_MODEL"):
            pytest.fail(f"NORMLAB_REQUIRE_MODEL is set but {folder}/{gguf_file} is missing")
        pytest.skip(f"needs {folder}/{gguf_file}")
    tok = transformers.AutoTokenizer.from_pretrained(src, gguf_file=gguf_file)
    m = transformers.AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf_file, dtype=torch.float32)
    texts = [tok.encode(t) for t in ["The capital of France is Paris, and the capital of Italy is Rome.",
                                     "Residual connections keep deep networks trainable."]]
    held = tok.encode(" ".join(["To be, or not to be, that is the question:"] * 30))[:200]
    got = nd.diagnose(m, texts, held, tokenizer=tok)
    want = json.loads(_native.inspect_ids(os.path.join(src, gguf_file), texts, held, 2))
    worst = (0.0, "")
    for section in ["blocks", "final_norm", "claims", "gains", "logit_lens"]:
        ours = dict(_flat(got[section], section))
        for k, w in _flat(want[section], section):
            g = ours.get(k)
            if k.endswith("attn_max_logit_raw") or isinstance(w, bool) or not isinstance(w, (int, float)):
                continue
            worst = max(worst, (abs(g - w) / max(abs(w), 1e-6), k))
    assert worst[0] <= REL, f"{name}: {worst[1]} differs by {worst[0]:.2e}"
    assert got["claims"]["massive"]["token"] == want["claims"]["massive"]["token"]
