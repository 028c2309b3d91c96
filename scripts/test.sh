#!/usr/bin/env bash
# Every test of normlab: the Rust workspace (unit, integration, browser,
# Slurm and model tests; see .ci/run for what they need), then the Python
# package's tests (pytest), which build and install `python/` (the PyTorch
# and NumPy bridge) into the Python that has torch, numpy and pytest:
# $NORMLAB_PYTHON, else python3. Without such a Python the Python tests are
# skipped with a message, unless NORMLAB_REQUIRE_TORCH=1 (CI), which makes
# that an error. Extra arguments go to `cargo test`.
#
# Every test binary runs even after a failure (cargo's --no-fail-fast), and
# the Python tests run whatever the Rust tests did. It ends with a summary
# (scripts/test_summary.py): how many tests ran, passed and failed, each
# failed test by name, each test binary that died before finishing and how
# many of its tests never ran, whether the Python tests ran, and each part
# that was skipped because this machine lacks something (a model, a
# browser, Slurm, torch), with the command that gets it. The tests write
# those lines themselves (tests/common/skip.rs) to $NORMLAB_SKIP_LOG. The
# exit status is non-zero when anything failed or did not run.
# About 15 minutes on a 2-core machine after the build (docs/times.md).
set -euo pipefail
cd "$(dirname "$0")/.."
NORMLAB_SKIP_LOG="$(mktemp)"
export NORMLAB_SKIP_LOG
CARGO_LOG="$(mktemp)"
trap 'rm -f "$NORMLAB_SKIP_LOG" "$CARGO_LOG"' EXIT
started=$SECONDS
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
# Where cargo puts its build (CARGO_TARGET_DIR, .cargo/config, or target/).
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"

# The summary (scripts/test_summary.py), also after a failure: every
# failed test with its binary, each binary that died before its result and
# how many of its tests never ran, a failed build, Python tests that did
# not run, and what was skipped.
CARGO_RC=""
PY_LOG=""
PY_RC=0
PY_NOT_RUN=""
summary() {
  local rc=$?
  local args=(--seconds "$((SECONDS - started))" --cargo-log "$CARGO_LOG" --skip-log "$NORMLAB_SKIP_LOG")
  args+=(--cargo-rc "${CARGO_RC:-$rc}")
  if [ -n "$PY_LOG" ]; then
    args+=(--python-log "$PY_LOG" --python-rc "$PY_RC")
  else
    args+=(--python-not-run "${PY_NOT_RUN:-the run stopped before them (exit $rc)}")
  fi
  if [ "${NORMLAB_REQUIRE_TORCH:-}" = "1" ]; then args+=(--python-required); fi
  python3 scripts/test_summary.py "${args[@]}"
  local srx=$?
  rm -f "$NORMLAB_SKIP_LOG" "$CARGO_LOG" "$PY_LOG"
  if [ "$rc" = 0 ]; then rc=$srx; fi
  exit "$rc"
}
trap summary EXIT

# --no-fail-fast: a failing test binary does not stop the others.
set +e
cargo test --workspace --release --no-fail-fast "$@" 2>&1 | tee "$CARGO_LOG"
CARGO_RC=${PIPESTATUS[0]}
set -e
PY="${NORMLAB_PYTHON:-python3}"
if ! "$PY" -c "import torch, numpy, pytest" 2>/dev/null; then
  if [ "${NORMLAB_REQUIRE_TORCH:-}" = "1" ]; then
    echo "error: $PY cannot import torch, numpy and pytest, and NORMLAB_REQUIRE_TORCH=1" >&2
    PY_NOT_RUN="$PY cannot import torch, numpy and pytest (NORMLAB_REQUIRE_TORCH=1)"
  else
    PY_NOT_RUN="skipped (below)"
    echo "the Python tests: $PY cannot import torch, numpy and pytest; python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy pytest, then NORMLAB_PYTHON=/tmp/venv/bin/python" >> "$NORMLAB_SKIP_LOG"
  fi
# The logger test runs `normlab report` on the folders it writes: the
# binary the workspace's tests built (a plain `cargo build -p normlab-cli`
# resolves other features and rebuilds it).
elif ! cargo test --workspace --release --no-run --quiet; then
  PY_NOT_RUN="the workspace did not build (above), so the normlab binary they call is missing"
# Built in the workspace's target folder: the dependencies the Rust tests
# compiled are reused (a separate build took ~185 s in CI, ~90 s so).
elif ! CARGO_TARGET_DIR="$TARGET_DIR" "$PY" -m pip install --quiet ./python; then
  PY_NOT_RUN="the Python package did not build or install (above)"
else
  PY_LOG="$(mktemp)"
  set +e
  NORMLAB_BIN="$TARGET_DIR/release/normlab" "$PY" -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | tee "$PY_LOG"
  PY_RC=${PIPESTATUS[0]}
  set -e
  grep -E '^SKIPPED' "$PY_LOG" | sed 's/^SKIPPED \[[0-9]*\] /Python: /' >> "$NORMLAB_SKIP_LOG" || true
fi
