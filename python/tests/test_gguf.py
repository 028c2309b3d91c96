"""normlab.gguf.trace against the CLI's `normlab inspect --json` on the same
text: the per-block statistics the CLI computes in Rust and the ones the
Python side computes in NumPy from the returned streams agree. Needs the
model files (scripts/fetch_smollm2.sh, scripts/fetch_gemma3.sh); skipped
without them unless NORMLAB_REQUIRE_MODEL=1."""

import json
import os
import subprocess

import numpy as np
import pytest

import normlab.gguf

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = {
    "smollm2": ("SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf", "fetch_smollm2.sh"),
    "gemma3": ("gemma-3-270m/gemma-3-270m-q4_k_m.gguf", "fetch_gemma3.sh"),
}
TEXT = "Residual connections add the input of a block to its output, so"


def model(name):
    rel, fetch = MODELS[name]
    path = os.path.join(REPO, "models", rel)
    if not os.path.exists(path):
        if os.environ.get("NORMLAB_REQUIRE_MODEL") == "1":
            pytest.fail(f"{path} missing (run scripts/{fetch})")
        pytest.skip(f"{path} missing (scripts/{fetch})")
    return path


@pytest.mark.parametrize("name", sorted(MODELS))
def test_trace_matches_the_cli_inspector(name):
    path = model(name)
    t = normlab.gguf.trace(path, TEXT)
    layers, d = t.config["layers"], t.config["d"]
    assert t.streams.shape == (layers + 1, len(t.ids), d)
    assert t.final.shape == (len(t.ids), d)
    assert t.sublayers.shape == (2 * layers, 6)
    # before + write = after, for every sublayer.
    assert np.all(t.sublayers[:, 5] < 1e-5)
    binary = os.environ.get("NORMLAB_BIN", os.path.join(REPO, "target", "release", "normlab"))
    out = subprocess.run([binary, "inspect", path, "--text", TEXT, "--held-out-tokens", "8", "--json"],
                         check=True, capture_output=True, text=True).stdout
    cli = json.loads(out)
    blocks = cli["blocks"]
    assert len(blocks) == layers
    col = lambda k: np.array([b[k] if b[k] is not None else np.nan for b in blocks], dtype=np.float64)
    np.testing.assert_allclose(t.mean_token_norm[:layers], col("row_norm_in"), rtol=1e-6)
    np.testing.assert_allclose(t.mean_token_norm[1:], col("row_norm_out"), rtol=1e-6)
    np.testing.assert_allclose(t.rms[:layers], col("rms_in"), rtol=1e-6)
    np.testing.assert_allclose(t.max_abs[1:], col("max_abs"), rtol=1e-6)
    np.testing.assert_array_equal(t.max_token[1:], [b["max_at"][1] for b in blocks])
    np.testing.assert_allclose(t.attn_max_logit, col("attn_max_logit"), rtol=1e-6)
    np.testing.assert_allclose(t.attn_max_logit_raw, col("attn_max_logit_raw"), rtol=1e-6)
    if cli["config"]["qk_norm"]:
        assert np.sum(t.attn_max_logit < t.attn_max_logit_raw) >= 2 * layers / 3
    else:
        assert np.all(np.isnan(t.attn_max_logit_raw))


def test_trace_refuses_bad_input(tmp_path):
    with pytest.raises(ValueError):
        normlab.gguf.trace(tmp_path / "missing.gguf", "text")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    with pytest.raises(ValueError, match="GGUF"):
        normlab.gguf.trace(bad, "text")
    with pytest.raises(ValueError):
        normlab.gguf.trace(bad, "")
