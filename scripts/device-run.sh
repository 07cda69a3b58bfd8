#!/bin/bash
# Runs on the lent GPU machine, which has CUDA but no Rust: unpacks what the
# call carried in .carry/ (release binaries built here, data bundles in xz
# pieces, the cuVS site)
# into /tmp/octex, which lasts while the machine stays warm, then runs the
# steps named on the command line. Logs and results go to $OUT.
#
#   scripts/device-run.sh tests bench:fashion-mnist bench:glove-50 build:glove-50
#
# bench runs the cuVS peers (--peers) when the cuVS site was carried.
set -u
C=.carry
D=/tmp/octex
OUT=${OUT:-/tmp/octex/out}
mkdir -p "$D/bin" "$D/data/parts" "$D/out" "$OUT"
if [ -f "$C/bin.tar.xz" ]; then tar -xJf "$C/bin.tar.xz" -C "$D/bin"; fi
for f in "$C"/*.part* "$C"/*.pieces; do [ -e "$f" ] && cp "$f" "$D/data/parts/"; done

# Data bundles (scripts/device-carry.sh): NAME.tar.xz in pieces
# (NAME.tar.xz.partNN) over one or more calls, with NAME.pieces (their count)
# in each; a bundle unpacks under $D/data once its last piece has come, and
# its pieces are then deleted.
for p in "$D"/data/parts/*.pieces; do
  [ -e "$p" ] || continue
  name=$(basename "$p" .pieces)
  [ -f "$D/data/parts/$name.unpacked" ] && continue
  have=$(find "$D/data/parts" -name "$name.tar.xz.part*" | wc -l)
  if [ "$have" = "$(cat "$p")" ]; then
    cat "$D/data/parts/$name.tar.xz.part"* | tar -xJf - -C "$D/data" \
      && touch "$D/data/parts/$name.unpacked" && rm -f "$D/data/parts/$name.tar.xz.part"*
    echo "bundle $name unpacked (rc $?)"
  else
    echo "bundle $name: $have of $(cat "$p") pieces so far"
  fi
done
# cuVS for `bench --peers` (../shared/tools/cuvs): site.tar.xz and its env.sh
# (carried as cuvs-env.sh) unpack to /tmp/site once per warm machine.
if [ -f "$C/site.tar.xz" ] && [ ! -f /tmp/site/env.sh ]; then
  tar -xJf "$C/site.tar.xz" -C /tmp && cp "$C/cuvs-env.sh" /tmp/site/env.sh
fi
# shellcheck disable=SC1091
[ -f /tmp/site/env.sh ] && source /tmp/site/env.sh
ls -la "$D/data"/* "$D/bin" | tee "$OUT/files.log"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.log"
export OCTEX_DATA="$D/data" OCTEX_LOG=${OCTEX_LOG:-info} OCTEX_REQUIRE_GPU=1
for step in "$@"; do
  echo "=== $step"
  case "$step" in
    tests)
      for t in "$D"/bin/*-tests; do
        echo "--- $(basename "$t")"
        "$t" --test-threads=1 --nocapture
      done 2>&1 | tee "$OUT/tests.log" ;;
    bench:*)
      name=${step#bench:}
      idx=()
      [ -f "$D/out/$name/$name.octex" ] && idx=(--index "$D/out/$name/$name.octex")
      peers=()
      [ -f /tmp/site/env.sh ] && peers=(--peers)
      "$D/bin/xtask" bench --data "$name" --backend gpu --out "$D/out/$name" --repeats 3 "${idx[@]}" "${peers[@]}" 2>&1 | tee "$OUT/bench-$name.log"
      cp "$D/out/$name/results-gpu.json" "$OUT/$name-results-gpu.json" 2>/dev/null
      cp "$D/out/$name/pareto-gpu.png" "$OUT/$name-pareto-gpu.png" 2>/dev/null ;;
    build:*)
      # build:NAME:BACKEND[:ROWS]
      IFS=: read -r _ name backend rows <<< "$step"
      "$D/bin/xtask" build-index --base "$name" --backend "$backend" --rows "${rows:-auto}" --out "$D/out/$name-$backend.octex" 2>&1 | tee "$OUT/build-$name-$backend.log" ;;
    search:*)
      # search:NAME:BACKEND-OF-THE-BUILD:SEARCH-BACKEND (default parameters)
      IFS=: read -r _ name built backend <<< "$step"
      "$D/bin/xtask" search --index "$D/out/$name-$built.octex" --queries "$D/data/$name/query.fvecs" --gt "$D/data/$name/gt.ivecs" --backend "$backend" 2>&1 | tee -a "$OUT/search.log" ;;
    text)
      # debian-docs-minilm: the `text` bundle (passages, package list and
      # the MiniLM model under downloads/debian-docs/) embedded on the GPU,
      # then `fetch` computes the ground truth.
      T="$D/data/downloads/debian-docs"
      if [ ! -f "$D/data/debian-docs-minilm/gt.ivecs" ]; then
        ls -la "$T" "$T/model"
        "$D/bin/xtask" fetch debian-docs-minilm 2>&1 | tr '\r' '\n' | grep -v "Batches:.*it/s]$" | tee "$OUT/text-fetch.log"
        # The embeddings as float16 (exact: they were rounded so), xz'd, in
        # 15 MiB pieces for the trip back (xfer:FIRST-LAST); OCTEX_TEXT_XFER=0
        # skips it.
        [ "${OCTEX_TEXT_XFER:-1}" = 0 ] && continue
        mkdir -p "$D/xfer"
        python3 -c "
import numpy as np, sys
for n in ['base', 'query']:
    np.load('$T/' + n + '.npy').astype(np.float16).tofile('$D/xfer/' + n + '.f16')
"
        (cd "$D/xfer" && cat query.f16 base.f16 | xz -1 -T0 > emb.f16.xz && split -b 15M -d -a 2 emb.f16.xz emb.f16.xz.part && ls -la)
      fi ;;
    xfer:*)
      IFS=- read -r first last <<< "${step#xfer:}"
      for i in $(seq -f %02g "$first" "$last"); do cp "$D/xfer/emb.f16.xz.part$i" "$OUT/" 2>/dev/null; done ;;
    profile:*)
      # profile:NAME:BUILT:S:W:R[:wave] -- Nsight Compute on one wave_search
      # launch of a search of the index built by build:NAME:BUILT; the
      # details page and the per-instruction (SASS) counters come back.
      IFS=: read -r _ name built s w r wave <<< "$step"
      tag="$name-S$s-W$w-R$r${wave:+-wave}"
      extra=()
      [ -n "${wave:-}" ] && extra=(--wave-rerank)
      OCTEX_GPU_GRAPHS=0 ncu --clock-control none --kernel-name regex:^wave_search --launch-skip 0 --launch-count 1 \
        --set full --import-source no -f -o "$D/out/prof-$tag" \
        "$D/bin/xtask" search --index "$D/out/$name-$built.octex" --queries "$D/data/$name/query.fvecs" \
        --gt "$D/data/$name/gt.ivecs" --backend gpu --start-points "$s" --waves "$w" --rerank "$r" "${extra[@]}" \
        > "$OUT/prof-$tag.details.txt" 2>&1
      ncu -i "$D/out/prof-$tag.ncu-rep" --page details >> "$OUT/prof-$tag.details.txt" 2>&1
      ncu -i "$D/out/prof-$tag.ncu-rep" --page raw --csv 2>&1 | python3 -c "
import csv, sys
rows = list(csv.reader(sys.stdin))
for name, unit, value in zip(*rows[:3]):
    if any(w in name for w in ('stall', 'pcsamp', 'occupancy', 'dram__bytes', 'throughput', 'sm__warps_active', 'launch__')):
        print(name, unit, value)" > "$OUT/prof-$tag.raw.txt"
      ncu -i "$D/out/prof-$tag.ncu-rep" --page source --print-source sass --csv 2>&1 | xz -6 > "$OUT/prof-$tag.sass.csv.xz"
      grep -E "Duration|Throughput|Occupancy|Registers|Shared Memory Config|Block Limit" "$OUT/prof-$tag.details.txt" | head -30 ;;
    synth)
      [ -f "$D/data/synth-1m/gt.ivecs" ] || "$D/bin/xtask" synth --name synth-1m 2>&1 | tee "$OUT/synth.log" ;;
    *) echo "unknown step $step" ;;
  esac
done
