#!/usr/bin/env bash
# Lays out the folders that carry binaries and data to the lent GPU machine,
# one folder per device call, each under what a call carries (64 MiB with the
# ~10 MiB work tree), from what `cargo xtask fetch glove-50` and
# `cargo xtask fetch debian-docs-minilm` left in data/:
#
#   .carry-bin     release binaries (scripts/device-pack.sh) and the
#                  device helpers (scripts/device-lib.sh as common.sh)
#   .carry-glove1  GloVe-50 base, xz pieces 00-01
#   .carry-glove2  GloVe-50 base piece 02, queries, top-100 truth, manifest
#   .carry-text    the text set's passages (base and query, xz)
#   .carry-model1  the MiniLM weights, pieces 00-01
#   .carry-model2  the MiniLM weights, pieces 02-03, config, package list
#
# scripts/device-run.sh on the machine puts the pieces together in
# /tmp/octex, which lasts while the machine stays warm (30 s idle), so the
# calls of one data set follow each other at once. Each folder gets a run.sh
# to fill in; a call is
#   export OUT; rm -rf .carry && cp -r .carry-NAME .carry && bash .carry/run.sh
# with carry [".carry-NAME"].
set -euo pipefail
cd "$(dirname "$0")/.."
data=${OCTEX_DATA:-data}
piece=27000000
new() { rm -rf ".carry-$1"; mkdir -p ".carry-$1"; cp scripts/device-lib.sh ".carry-$1/common.sh"; printf '#!/bin/bash\nTAG=%s; source .carry/common.sh\nbash scripts/device-run.sh > $OUT/setup.log 2>&1\n' "$1" > ".carry-$1/run.sh"; }

new bin
bash scripts/device-pack.sh >/dev/null
mv .carry/bin.tar.xz .carry-bin/

g="$data/glove-50"
if [ -f "$g/base.fvecs" ]; then
  new glove1; new glove2
  tmp=$(mktemp -d)
  xz -T0 -6 -c "$g/base.fvecs" | split -b $piece -d -a 2 - "$tmp/glove-base.xz.part"
  mv "$tmp"/glove-base.xz.part00 "$tmp"/glove-base.xz.part01 .carry-glove1/
  mv "$tmp"/glove-base.xz.part0* .carry-glove2/
  cp "$g/query.fvecs" .carry-glove2/glove-query.fvecs
  cp "$g/gt.ivecs" .carry-glove2/glove-50-gt10.ivecs
  cp "$g/manifest.json" .carry-glove2/glove-50.json
  rm -rf "$tmp"
else
  echo "no $g/base.fvecs: run cargo xtask fetch glove-50 first (GloVe-50 skipped)" >&2
fi

t="$data/downloads/debian-docs"
if [ -f "$t/base.txt" ] && [ -f "$t/model/model.safetensors" ]; then
  new text; new model1; new model2
  xz -T0 -6 -c "$t/base.txt" > .carry-text/text-base.txt.xz.part
  xz -T0 -6 -c "$t/query.txt" > .carry-text/text-query.txt.xz.part
  tmp=$(mktemp -d)
  split -b 23M -d -a 2 "$t/model/model.safetensors" "$tmp/minilm.safetensors.part"
  mv "$tmp"/minilm.safetensors.part00 "$tmp"/minilm.safetensors.part01 .carry-model1/
  mv "$tmp"/minilm.safetensors.part0* .carry-model2/
  tar -cf .carry-model2/minilm-config.tar -C "$t/model" --exclude=model.safetensors .
  cp "$t/packages.txt" .carry-model2/text-packages.txt
  printf 'OCTEX_TEXT_XFER=0 bash scripts/device-run.sh text > $OUT/text.log 2>&1\n' >> .carry-model2/run.sh
  rm -rf "$tmp"
else
  echo "no $t/base.txt or model: run cargo xtask fetch debian-docs-minilm first (text set skipped)" >&2
fi
du -sh .carry-bin .carry-glove* .carry-text .carry-model* 2>/dev/null
