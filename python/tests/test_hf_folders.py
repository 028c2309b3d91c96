"""Real weights through both routes (issue 63): transformers reads SmolLM2's
and Gemma 3's GGUF files (dequantised to float32) and writes each as a Hugging
Face folder (its state dict in a fresh model, save_pretrained, and the
tokenizer); `normlab inspect --json` on the folder must give the report it
gives on the GGUF file: every number within 2e-5 of the GGUF report's
(relative), every count and position equal. Measured on 2026-12-05: 7e-6
for SmolLM2 (its GGUF stores Q and K rows permuted for llama.cpp's RoPE,
so the dot products sum in another order) and 0 for Gemma 3; the bound
leaves room for other CPUs' SIMD paths. Needs transformers, gguf, the
model files and NORMLAB_BIN."""

import json
import os
import subprocess

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MODELS = {
    "smollm2": ("models/SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf", "fetch_smollm2.sh"),
    "gemma3": ("models/gemma-3-270m", "gemma-3-270m-q4_k_m.gguf", "fetch_gemma3.sh"),
}
REL = 2e-5


def _needs(name):
    folder, gguf_file, fetch = MODELS[name]
    binary = os.environ.get("NORMLAB_BIN")
    try:
        import gguf  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        binary = None
    if not binary or not os.path.exists(os.path.join(ROOT, folder, gguf_file)):
        if os.environ.get("NORMLAB_REQUIRE_MODEL"):
            pytest.fail(f"NORMLAB_REQUIRE_MODEL is set but {name}'s file, transformers, gguf or NORMLAB_BIN is missing")
        pytest.skip(f"needs {folder}/{gguf_file} (scripts/{fetch}), transformers, gguf and NORMLAB_BIN")
    return binary, os.path.join(ROOT, folder), gguf_file


def _write_folder(src, gguf_file, out):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    m = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf_file, dtype=torch.float32)
    fresh = type(m)(m.config)
    fresh.load_state_dict(m.state_dict())
    fresh.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(src, gguf_file=gguf_file).save_pretrained(out)


def _inspect(binary, model):
    # hang bound: 600 s (idle: 35 s, Gemma 3 270M inspected)
    out = subprocess.run([binary, "inspect", str(model), "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _compare(a, b, path, worst):
    if isinstance(a, dict):
        for k in a:
            if k in b and k != "model":
                _compare(a[k], b[k], f"{path}.{k}", worst)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _compare(x, y, f"{path}[{i}]", worst)
    elif isinstance(a, bool) or isinstance(a, int) and isinstance(b, int):
        assert a == b, f"{path}: {a} != {b}"
    elif isinstance(a, float) and isinstance(b, (int, float)):
        r = abs(a - b) / max(abs(b), 1e-6)
        if r > worst[0]:
            worst[:] = [r, path]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_folder_written_by_transformers_gives_the_gguf_report(name, tmp_path):
    binary, src, gguf_file = _needs(name)
    _write_folder(src, gguf_file, tmp_path)
    folder, gguf = _inspect(binary, tmp_path), _inspect(binary, os.path.join(src, gguf_file))
    assert folder["architecture"] == gguf["architecture"]
    worst = [0.0, ""]
    _compare(folder, gguf, name, worst)
    print(f"{name}: largest relative difference {worst[0]:.2e} at {worst[1]}")
    assert worst[0] <= REL, f"{worst[1]} differs by {worst[0]:.2e} (relative)"
