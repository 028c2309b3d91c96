"""The tiny GGUF files of scripts/gen_gguf_families.py read by transformers'
own GGUF loader (issue 63): for the families whose metadata that loader
maps completely (Llama, with its Q/K rows permuted as llama.cpp's
converter does, and Qwen2), transformers gives the folder's logits, so the
files are written by llama.cpp's conventions and not only by normlab's
reading of them (crates/normlab/tests/gguf_families.rs checks normlab's).
Needs torch, transformers and gguf; skipped without them unless
NORMLAB_REQUIRE_TORCH=1."""

import json
import os

import pytest

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "crates", "normlab",
                        "tests", "fixtures")


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_transformers_reads_the_tiny_gguf_files(name):
    try:
        import gguf  # noqa: F401
        import torch
        import transformers
    except ImportError:
        if os.environ.get("NORMLAB_REQUIRE_TORCH") == "1":
            pytest.fail("NORMLAB_REQUIRE_TORCH=1 but torch, transformers or gguf is missing")
        pytest.skip("needs torch, transformers and gguf")
    m = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.abspath(os.path.join(FIXTURES, "gguf_tiny")), gguf_file=f"{name}.gguf", dtype=torch.float32)
    e = json.load(open(os.path.join(FIXTURES, "hf_tiny", name, "expected.json")))
    with torch.no_grad():
        got = m(torch.tensor([e["ids"]])).logits[0]
    want = torch.tensor(e["logits"])
    rel = ((got - want).abs().max() / want.abs().max()).item()
    assert rel < 1e-5, f"{name}.gguf through transformers: {rel:.2e}"
