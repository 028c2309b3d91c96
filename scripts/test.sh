#!/usr/bin/env bash
# Every test of normlab: the Rust workspace (unit, integration, browser,
# Slurm and model tests; see .ci/run for what they need), then the Python
# package's tests (pytest), which build and install `python/` (the PyTorch
# and NumPy bridge) into the Python that has torch, numpy and pytest:
# $NORMLAB_PYTHON, else python3. Without such a Python the Python tests are
# skipped with a message, unless NORMLAB_REQUIRE_TORCH=1 (CI), which makes
# that an error. Extra arguments go to `cargo test`.
#
# It ends with a summary: how many tests ran, passed and failed, and each
# part that was skipped because this machine lacks something (a model, a
# browser, Slurm, torch), with the command that gets it. The tests write
# those lines themselves (tests/common/skip.rs) to $NORMLAB_SKIP_LOG.
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

# The summary, also after a failure.
summary() {
  local rc=$?
  local passed failed ignored
  read -r passed failed ignored < <(awk '/^test result:/ {
      for (i = 1; i <= NF; i++) {
        if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i
      } } END { print p + 0, f + 0, g + 0 }' "$CARGO_LOG")
  echo
  echo "== scripts/test.sh: $((SECONDS - started)) s"
  echo "Rust: $((passed + failed)) tests ran, $passed passed, $failed failed, $ignored ignored."
  if [ -n "${PY_SUMMARY:-}" ]; then echo "Python: $PY_SUMMARY"; fi
  if [ -s "$NORMLAB_SKIP_LOG" ]; then
    echo "Skipped here (each with what gets it):"
    sort -u "$NORMLAB_SKIP_LOG" | sed 's/^/  - /'
  else
    echo "Nothing was skipped."
  fi
  rm -f "$NORMLAB_SKIP_LOG" "$CARGO_LOG"
  exit "$rc"
}
trap summary EXIT

cargo test --workspace --release "$@" 2>&1 | tee "$CARGO_LOG"
# The logger test runs `normlab report` on the folders it writes: the
# binary the workspace's tests built (a plain `cargo build -p normlab-cli`
# resolves other features and rebuilds it).
cargo test --workspace --release --no-run --quiet
PY="${NORMLAB_PYTHON:-python3}"
if "$PY" -c "import torch, numpy, pytest" 2>/dev/null; then
  # Built in the workspace's target folder: the dependencies the Rust
  # tests compiled are reused (a separate build took ~185 s in CI, ~90 s so).
  CARGO_TARGET_DIR="$TARGET_DIR" "$PY" -m pip install --quiet ./python
  PY_OUT="$(mktemp)"
  set +e
  NORMLAB_BIN="$TARGET_DIR/release/normlab" "$PY" -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | tee "$PY_OUT"
  py_rc=${PIPESTATUS[0]}
  set -e
  PY_SUMMARY="$(grep -E '(passed|failed|skipped|error)' "$PY_OUT" | tail -1)"
  grep -E '^SKIPPED' "$PY_OUT" | sed 's/^SKIPPED \[[0-9]*\] /Python: /' >> "$NORMLAB_SKIP_LOG" || true
  rm -f "$PY_OUT"
  if [ "$py_rc" != 0 ]; then exit "$py_rc"; fi
elif [ "${NORMLAB_REQUIRE_TORCH:-}" = "1" ]; then
  echo "error: $PY cannot import torch, numpy and pytest, and NORMLAB_REQUIRE_TORCH=1" >&2
  exit 1
else
  PY_SUMMARY="not run"
  echo "the Python tests: $PY cannot import torch, numpy and pytest; python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch numpy pytest, then NORMLAB_PYTHON=/tmp/venv/bin/python" >> "$NORMLAB_SKIP_LOG"
fi
