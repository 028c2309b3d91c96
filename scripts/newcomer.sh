#!/usr/bin/env bash
# The README's two set-up commands as a newcomer runs them, in a clean
# worktree of HEAD (only the committed files: no models/, no earlier demo)
# that shares this checkout's build folder (CARGO_TARGET_DIR, else
# target/): the demo in its quick form, and the test command on one test
# file. Their outputs are checked for the files and lines the README
# promises; any miss is named and exits 1. .ci/run runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
scratch="$(mktemp -d)"
tree="$scratch/normlab"
git worktree add --quiet --detach "$tree" HEAD
cleanup() {
  git -C "$root" worktree remove --force "$tree" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT
cd "$tree"
fail=0
miss() { echo "newcomer: $1" >&2; fail=1; }

# 1. The main job (README: cargo run --release -- demo), quick form.
demo_out="$scratch/demo.out"
t0=$SECONDS
if ! cargo run --release --quiet -- demo --quick >"$demo_out" 2>"$scratch/demo.err"; then
  tail -20 "$scratch/demo.err" >&2
  miss "cargo run --release -- demo --quick failed"
fi
echo "newcomer: demo --quick (with its build) took $((SECONDS - t0)) s"
for f in normlab-demo/report.md \
         normlab-demo/collapse/collapse.png normlab-demo/collapse/report.md \
         normlab-demo/lr-sensitivity/lr_sensitivity.png \
         normlab-demo/depth-sim/result.json normlab-demo/speed/result.json; do
  [ -s "$f" ] || miss "the demo did not write $f"
done
[ -n "$(ls normlab-demo/collapse/runs 2>/dev/null)" ] || miss "the demo's runs are not in normlab-demo/collapse/runs/ (README: serve --runs normlab-demo shows them)"
grep -q "^Wrote normlab-demo/report.md" "$demo_out" || miss "the demo did not end with 'Wrote normlab-demo/report.md'"
grep -q "^Conclusion: " "$demo_out" || miss "the demo printed no conclusion"
grep -q "published book" "$demo_out" || miss "the demo did not set its verdicts beside the published book's"

# 2. The test command (README: scripts/test.sh), on one test file.
test_out="$scratch/test.out"
if ! scripts/test.sh --test docs >"$test_out" 2>&1; then
  tail -30 "$test_out" >&2
  miss "scripts/test.sh --test docs failed"
fi
grep -q "^== scripts/test.sh: " "$test_out" || miss "scripts/test.sh printed no summary"
grep -qE "^Rust: [0-9]+ test binaries, [0-9]+ tests ran, [0-9]+ passed, 0 failed" "$test_out" || miss "scripts/test.sh's summary has no passing Rust line"
grep -qE "^(Skipped here|Nothing was skipped)" "$test_out" || miss "scripts/test.sh's summary says nothing of skips"

if [ "$fail" = 0 ]; then echo "newcomer: the README's two commands work in a clean worktree"; fi
exit "$fail"
