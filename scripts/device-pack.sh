#!/bin/bash
# Builds the release binaries the GPU machine runs (xtask and the GPU test
# binaries), strips them and packs them into .carry/bin.tar.xz for
# scripts/device-run.sh. Data pieces are added to .carry/ separately.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p xtask
tmp=$(mktemp -d)
cp target/release/xtask "$tmp/xtask"
cargo test --release -p octex-tests --test gpu --test gpu_build --test gpu_multi --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])' \
  | while read -r name exe; do cp "$exe" "$tmp/${name//_/-}-tests"; done
strip "$tmp"/*
mkdir -p .carry
tar -cJf .carry/bin.tar.xz -C "$tmp" .
ls -la "$tmp" .carry/bin.tar.xz
rm -rf "$tmp"
