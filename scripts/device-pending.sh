#!/bin/bash
# The measurement the last session built and could not run (no device was
# lent after its second call; docs/experiments/README.md, "Order for the next
# lease"). Run here, it builds the binaries into .carry-pending/ (about 9 MB,
# one call) with a run.sh for the device; then, from the device tool:
#
#   export OUT; rm -rf .carry && cp -r .carry-pending .carry && bash .carry/run.sh
#
# with carry [".carry-pending"]. On the device (about 7 minutes, synth-1m
# made there, no data carried): the GPU tests of main's binary, then the quick
# synth-1m grid, each variant twice, interleaved:
#   main           main as it is;
#   fused          main with OCTEX_GPU_PROJECTION=fused (one projection
#                  product at batch 10,000 instead of two);
#   j1, j2         docs/experiments/probe-stragglers.patch with
#                  JOINT_PROBE_STEPS 1 and 2.
# Keep a variant only if its median over the grid is +0.5% or more, with
# recall identical; then run its GPU tests and the bench against cuVS.
# Then synth-1m with the rows of before (--reverse-max 16 --reverse-source
# 16) against main's default rows, quick grid, twice, interleaved (about 3
# more minutes).
# Remove this script once it has run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -z "$(git status --porcelain crates)" ] || { echo "crates/ has changes: commit or stash them first"; exit 1; }
out=.carry-pending
rm -rf "$out" && mkdir -p "$out"
bash scripts/device-pack.sh > /dev/null
mv .carry/bin.tar.xz "$out/"
variant() { # NAME JOINT_PROBE_STEPS
  git apply docs/experiments/probe-stragglers.patch
  sed -i "s/const JOINT_PROBE_STEPS: u32 = [0-9]*;/const JOINT_PROBE_STEPS: u32 = $2;/" crates/kernels/gpu/src/visit.rs
  OCTEX_UPDATE_PTX=1 cargo test --release -p octex-kernels committed_ptx > /dev/null
  cargo xtask kernel-report | tail -6 > "$out/kernel-report-$1.txt"
  cargo build --release -p xtask
  strip -o "/tmp/xtask-$1" target/release/xtask
  xz -T0 -c "/tmp/xtask-$1" > "$out/xtask-$1.xz"
  git checkout crates/kernels
}
variant j1 1
variant j2 2
OCTEX_UPDATE_PTX=1 cargo test --release -p octex-kernels committed_ptx > /dev/null
git diff --quiet crates/kernels || { echo "main's PTX did not come back"; exit 1; }
cp scripts/device-lib.sh "$out/common.sh"
cat > "$out/run.sh" <<'EOF'
#!/bin/bash
TAG=pending; source .carry/common.sh
bash scripts/device-run.sh > $OUT/setup.log 2>&1
export OCTEX_DATA=$D/data OCTEX_LOG=warn
for v in j1 j2; do mkdir -p $D/bin-$v && xz -dc .carry/xtask-$v.xz > $D/bin-$v/xtask && chmod +x $D/bin-$v/xtask; done
( time tests main ) 2>&1 | tail -6
[ -f "$D/data/synth-1m/gt.ivecs" ] || "$D/bin/xtask" synth --name synth-1m > $OUT/synth.log 2>&1
"$D/bin/xtask" build-index --base synth-1m --out $D/out/synth-1m.octex > $OUT/build-synth.log 2>&1
export GRID="--shapes 8x1,12x1,16x1,16x2 --read-depths 4,6,8 --reranks 16,24,32"
for rep in 1 2; do
  quick $D/bin/xtask synth-1m $D/out/synth-1m.octex ab-main$rep-synth-1m > /dev/null
  quick $D/bin/xtask synth-1m $D/out/synth-1m.octex ab-fused$rep-synth-1m OCTEX_GPU_PROJECTION=fused > /dev/null
  quick $D/bin-j1/xtask synth-1m $D/out/synth-1m.octex ab-j1$rep-synth-1m > /dev/null
  quick $D/bin-j2/xtask synth-1m $D/out/synth-1m.octex ab-j2$rep-synth-1m > /dev/null
done
python3 scripts/ab-points.py $OUT 'main:ab-main' 'fused:ab-fused' 'j1:ab-j1' 'j2:ab-j2' | tee $OUT/ab-pending-synth.txt | tail -8
# The rows of before (Lt/4 reverse entries from the first Lt/4 neighbours)
# against main's default (Lt/2 from Lt/2) on synth-1m, whose one-wave
# points lost up to 0.0016 of recall on the CPU (docs/RESULTS.md, "Reverse
# entries").
"$D/bin/xtask" build-index --base synth-1m --reverse-max 16 --reverse-source 16 --out $D/out/synth-1m-rev16.octex > $OUT/build-synth-rev16.log 2>&1
for rep in 1 2; do
  quick $D/bin/xtask synth-1m $D/out/synth-1m-rev16.octex ab-rev16$rep-synth-1m > /dev/null
  quick $D/bin/xtask synth-1m $D/out/synth-1m.octex ab-rev32$rep-synth-1m > /dev/null
done
python3 scripts/ab-points.py $OUT 'rev16:ab-rev16' 'rev32:ab-rev32' | tee $OUT/ab-rows-synth.txt | tail -8
EOF
chmod +x "$out/run.sh"
ls -la "$out"
