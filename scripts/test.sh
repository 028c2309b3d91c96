#!/usr/bin/env bash
# Every test of normlab: the Rust workspace (unit, integration, browser,
# Slurm and model tests; see .ci/run for what they need), then the Python
# package's tests (pytest), which build and install `python/` (the PyTorch
# and NumPy bridge) into the Python that has torch, numpy and pytest:
# $NORMLAB_PYTHON, else python3. Without such a Python the Python tests are
# skipped with a message, unless NORMLAB_REQUIRE_TORCH=1 (CI), which makes
# that an error. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
# The static lab's WebAssembly package (normlab site), which the browser
# test serves and compares with the server: built when the wasm32 target and
# the wasm-bindgen CLI are installed (scripts/build_site_wasm.sh says how;
# without them that part of the test skips, or fails under
# NORMLAB_REQUIRE_BROWSER=1).
if command -v wasm-bindgen >/dev/null 2>&1 \
   && rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  scripts/build_site_wasm.sh \
    || echo "note: the WebAssembly package was not built (above); the browser test's static-lab part skips (fails under NORMLAB_REQUIRE_BROWSER=1)"
fi
cargo test --workspace --release "$@"
# The logger test runs `normlab report` on the folders it writes: the
# binary the workspace's tests built (target/release/normlab; a plain
# `cargo build -p normlab-cli` resolves other features and rebuilds it).
cargo test --workspace --release --no-run --quiet
PY="${NORMLAB_PYTHON:-python3}"
if "$PY" -c "import torch, numpy, pytest" 2>/dev/null; then
  # Built in the workspace's target folder: the dependencies the Rust
  # tests compiled are reused (a separate build took ~185 s in CI, ~90 s so).
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" "$PY" -m pip install --quiet ./python
  NORMLAB_BIN="$PWD/target/release/normlab" "$PY" -m pytest -q -p no:cacheprovider python/tests
elif [ "${NORMLAB_REQUIRE_TORCH:-}" = "1" ]; then
  echo "error: $PY cannot import torch, numpy and pytest, and NORMLAB_REQUIRE_TORCH=1" >&2
  exit 1
else
  echo "note: Python tests skipped: $PY cannot import torch, numpy and pytest (python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy pytest, then NORMLAB_PYTHON=/tmp/venv/bin/python)"
fi
