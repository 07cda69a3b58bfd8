#!/usr/bin/env bash
# The measurement still owed to an opt-in GPU change (docs/RESULTS.md,
# "Built and not yet measured"): fused projection products with the
# principal block padded to a multiple of 4 columns (`OCTEX_GPU_PAD_PCS=1`),
# which aligns GloVe-50's projections for the lookup's 16-byte path. Lays
# out the carry folders (binaries, GloVe-50) and writes each call's steps
# into its run.sh:
#
#   scripts/device-pending.sh     then, one after the other, at once:
#   export OUT; rm -rf .carry && cp -r .carry-N .carry && bash .carry/run.sh
#   with carry [".carry-N"], N = 1, 2 (about 12 minutes of device time).
#
# The A/B runs the quick grid of one binary and index under both settings,
# twice each, interleaved; compare with
#   python3 scripts/ab-points.py DIR unpadded:g-unpadded padded:g-padded
# on the JSON files that come back ($OUT/carry-2.tar.xz). If padding wins,
# make it the default in crates/search/src/gpu/device_index.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/device-carry.sh bin glove-50
n=$(find . -maxdepth 1 -name '.carry-[0-9]*' | wc -l)
[ "$n" -eq 2 ] || { echo "expected 2 carry folders, got $n" >&2; exit 1; }

cat >> .carry-1/run.sh <<'EOF'
SECONDS=0
tests; echo "GPU tests (defaults) rc $? ${SECONDS}s"
OCTEX_GPU_PAD_PCS=1 tests padded; echo "GPU tests (padded) rc $? ${SECONDS}s"
EOF

cat >> .carry-2/run.sh <<'EOF'
SECONDS=0
OCTEX_DATA=$D/data OCTEX_LOG=warn $D/bin/xtask build-index --base glove-50 --backend gpu \
  --out $D/out/glove-50-gpu.octex > $OUT/build-glove.log 2>&1
echo "glove-50 indexed rc $? ${SECONDS}s"
G=$D/out/glove-50-gpu.octex
for rep in 1 2; do
  [ $SECONDS -lt 460 ] && quick $D/bin/xtask glove-50 $G g-unpadded$rep
  [ $SECONDS -lt 520 ] && quick $D/bin/xtask glove-50 $G g-padded$rep OCTEX_GPU_PAD_PCS=1
done
echo "done ${SECONDS}s"
EOF
for i in 1 2; do echo "== .carry-$i"; sed -n 2p ".carry-$i/run.sh"; done
