#!/usr/bin/env bash
# The measurements still owed to opt-in GPU changes (docs/RESULTS.md):
# - fused projection products with the principal block padded to a multiple
#   of 4 columns (`OCTEX_GPU_PAD_PCS=1`), which aligns GloVe-50's
#   projections for the lookup's 16-byte path;
# - narrow launches with visited sets of a multiple of 32 slots
#   (`OCTEX_GPU_NARROW_SETS=step`, `wave_search_narrow_any`), and, as the
#   same question asked with the power-of-two build, half the slots per
#   entry (`OCTEX_GPU_VISITED_SLOTS_PER_ENTRY=0.5`): less shared memory a
#   block, more L1 for each multiprocessor.
# Lays out the carry folders (binaries, GloVe-50, then two folders with
# steps only) and writes each call's steps into its run.sh:
#
#   scripts/device-pending.sh     then, one after the other, at once:
#   export OUT; rm -rf .carry && cp -r .carry-N .carry && bash .carry/run.sh
#   with carry [".carry-N"], N = 1 .. 4 (about 20 minutes of device time).
#
# Every A/B runs the same binary and index under each setting, twice,
# interleaved; compare with
#   python3 scripts/ab-points.py DIR base:s-base step:s-step half:s-half
#   python3 scripts/ab-points.py DIR unpadded:g-unpadded padded:g-padded
# on the JSON files that come back ($OUT/carry-N.tar.xz).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/device-carry.sh bin glove-50
n=$(find . -maxdepth 1 -name '.carry-[0-9]*' | wc -l)
[ "$n" -eq 2 ] || { echo "expected 2 carry folders, got $n" >&2; exit 1; }
for i in 3 4; do
  mkdir -p ".carry-$i"
  cp scripts/device-lib.sh ".carry-$i/common.sh"
  printf '#!/bin/bash\n# Carries: nothing (steps only)\nTAG=carry-%s; source .carry/common.sh\nbash scripts/device-run.sh > $OUT/setup.log 2>&1\n' "$i" > ".carry-$i/run.sh"
done

# The synth-1m grid: its narrow W1 shapes (the 0.99 point is r4 S12 W1 R24)
# and one dense shape.
cat >> .carry-1/run.sh <<'EOF'
SECONDS=0
tests; echo "GPU tests (defaults) rc $? ${SECONDS}s"
[ $SECONDS -lt 280 ] && { OCTEX_GPU_PAD_PCS=1 OCTEX_GPU_NARROW_SETS=step tests opt; echo "GPU tests (padded, step sets) rc $? ${SECONDS}s"; }
if [ $SECONDS -lt 420 ]; then
  bash scripts/device-run.sh synth > $OUT/synth-step.log 2>&1; echo "synth rc $? ${SECONDS}s"
fi
EOF

cat >> .carry-2/run.sh <<'EOF'
SECONDS=0
bash scripts/device-run.sh synth > $OUT/synth-step.log 2>&1; echo "synth rc $? ${SECONDS}s"
OCTEX_DATA=$D/data OCTEX_LOG=warn $D/bin/xtask build-index --base synth-1m --backend gpu \
  --out $D/out/synth-1m-gpu.octex > $OUT/build-synth.log 2>&1
echo "synth-1m indexed rc $? ${SECONDS}s"
OCTEX_DATA=$D/data OCTEX_LOG=warn $D/bin/xtask build-index --base glove-50 --backend gpu \
  --out $D/out/glove-50-gpu.octex > $OUT/build-glove.log 2>&1
echo "glove-50 indexed rc $? ${SECONDS}s"
export GRID="--shapes 8x1,12x1,16x1,24x1,32x2 --read-depths 4,8 --reranks 16,24,32"
S=$D/out/synth-1m-gpu.octex
[ $SECONDS -lt 400 ] && quick $D/bin/xtask synth-1m $S s-base1
[ $SECONDS -lt 460 ] && quick $D/bin/xtask synth-1m $S s-step1 OCTEX_GPU_NARROW_SETS=step
[ $SECONDS -lt 520 ] && quick $D/bin/xtask synth-1m $S s-half1 OCTEX_GPU_VISITED_SLOTS_PER_ENTRY=0.5
echo "done ${SECONDS}s"
EOF

cat >> .carry-3/run.sh <<'EOF'
SECONDS=0
export GRID="--shapes 8x1,12x1,16x1,24x1,32x2 --read-depths 4,8 --reranks 16,24,32"
S=$D/out/synth-1m-gpu.octex
quick $D/bin/xtask synth-1m $S s-base2
quick $D/bin/xtask synth-1m $S s-step2 OCTEX_GPU_NARROW_SETS=step
quick $D/bin/xtask synth-1m $S s-half2 OCTEX_GPU_VISITED_SLOTS_PER_ENTRY=0.5
# Launch statistics and memory at the 0.99 point, each setting.
for v in base:X=0 step:OCTEX_GPU_NARROW_SETS=step half:OCTEX_GPU_VISITED_SLOTS_PER_ENTRY=0.5; do
  [ $SECONDS -lt 500 ] || break
  env "${v#*:}" OCTEX_GPU_GRAPHS=0 OCTEX_DATA=$D/data OCTEX_LOG=warn timeout 90 ncu --clock-control none \
    --kernel-name regex:^wave_search --launch-skip 0 --launch-count 1 \
    --section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis \
    $D/bin/xtask search --index $S --queries $D/data/synth-1m/query.fvecs --gt $D/data/synth-1m/gt.ivecs \
    --backend gpu --read-depth 4 --start-points 12 --waves 1 --rerank 24 > $OUT/ncu-${v%%:*}.txt 2>&1
  grep -E "Duration|DRAM Throughput|L1/TEX Hit|L2 Hit|Shared Memory Config|Dynamic Shared|Block Limit Shared|Achieved Occ" $OUT/ncu-${v%%:*}.txt | sed "s/^/${v%%:*} /"
done
echo "done ${SECONDS}s"
EOF

cat >> .carry-4/run.sh <<'EOF'
SECONDS=0
export GRID="--shapes 16x1,24x1,16x2,32x2,32x3,48x3 --read-depths 8,16 --reranks 16,32"
G=$D/out/glove-50-gpu.octex
for rep in 1 2; do
  [ $SECONDS -lt 400 ] && quick $D/bin/xtask glove-50 $G g-unpadded$rep
  [ $SECONDS -lt 470 ] && quick $D/bin/xtask glove-50 $G g-padded$rep OCTEX_GPU_PAD_PCS=1
done
echo "done ${SECONDS}s"
EOF
for i in 1 2 3 4; do echo "== .carry-$i"; sed -n 2p ".carry-$i/run.sh"; done
