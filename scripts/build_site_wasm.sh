#!/usr/bin/env bash
# Build the static lab's WebAssembly package: normlab-wasm (the web lab's
# widgets, normlab_lab::widgets) for wasm32-unknown-unknown, then its
# JavaScript bindings with wasm-bindgen, into target/site-wasm (or $1),
# where `normlab site` looks for it.
#
# Needs the target (rustup target add wasm32-unknown-unknown) and the
# wasm-bindgen CLI of the version Cargo.lock pins for the bindings crate
# (cargo install wasm-bindgen-cli --version V); .ci/run installs both.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/site-wasm}
want=$(awk '$0 == "name = \"wasm-bindgen\"" { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have" != "$want" ]; then
  echo "build_site_wasm: wasm-bindgen ${have:-is not installed}, Cargo.lock needs $want: cargo install wasm-bindgen-cli --version $want" >&2
  exit 1
fi
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  echo "build_site_wasm: the wasm32-unknown-unknown target is missing: rustup target add wasm32-unknown-unknown" >&2
  exit 1
fi
target_dir=${CARGO_TARGET_DIR:-target}
cargo build --release --target wasm32-unknown-unknown -p normlab-wasm
wasm-bindgen --target web --no-typescript --out-dir "$out" \
  "$target_dir/wasm32-unknown-unknown/release/normlab_wasm.wasm"
echo "build_site_wasm: wrote $out ($(du -k "$out/normlab_wasm_bg.wasm" | cut -f1) KiB of WebAssembly)"
