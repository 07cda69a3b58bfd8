#!/bin/bash
# Helpers for the run.sh of one device call (scripts/device-carry.sh copies
# this file into each carry folder as common.sh). Set TAG first; everything
# the call writes goes to /tmp/octex/$TAG and comes back as $OUT/$TAG.tar.xz.
#
#   bench SET [ARGS]          the full grid (with cuVS peers when the site is
#                             unpacked in /tmp/site), bounded in time
#   quick BIN SET INDEX NAME [ENV...]   the quick grid (or $GRID's
#                             bench arguments) of one binary and index
#   tests [SUFFIX]            every GPU test binary (logs named with SUFFIX);
#                             non-zero if one failed
#   ab2 SET INDEX             the quick grid, $D/bin-old/xtask against
#                             $D/bin/xtask, twice each, interleaved
#   abv SET INDEX V...        the quick grid of $D/bin-V/xtask for each V,
#                             twice each, interleaved
#   variants SET INDEX NAME=ENV...   the quick grid under each environment
set -u
D=/tmp/octex
FINAL=$OUT; OUT=$D/$TAG; rm -rf "$OUT"; mkdir -p "$OUT"; export OUT
finish() { rm -f "$OUT/files.log"; tar -cJf "$FINAL/$TAG.tar.xz" -C "$OUT" .; }
trap finish EXIT
bench() {
  local set=$1; shift
  local peers=(); [ -f /tmp/site/env.sh ] && source /tmp/site/env.sh && peers=(--peers)
  OCTEX_DATA=$D/data OCTEX_LOG=warn timeout "${BENCH_LIMIT:-480}" "$D/bin/xtask" bench --data "$set" --backend gpu --out "$D/out/b-$set" --repeats 3 --recall 0.95 --recall 0.99 "${peers[@]}" "$@" > "$OUT/bench-$set.log" 2>&1
  echo "== $set ${peers[*]} $* (rc $?)"; grep -E "^  0\.|^--recall|kernel phases|parity|octex build|peak DRAM" "$OUT/bench-$set.log" | cut -c1-330 | head -40
  cp "$D/out/b-$set/results-gpu.json" "$OUT/$set-results-gpu.json"
}
tests() { # [SUFFIX of the logs' names; the caller's environment applies]
  local ok=0 log
  for t in "$D"/bin/*-tests; do
    log="$OUT/$(basename "$t")${1:+-$1}.log"
    echo "--- $t ${1:-}"
    OCTEX_REQUIRE_GPU=1 timeout 300 "$t" --test-threads=1 --nocapture > "$log" 2>&1 || ok=1
    grep -E "test result|FAILED|panicked|failed" "$log" | head
  done
  return $ok
}
quick() { # BINARY SET INDEX NAME [ENV...]; GRID (default --quick) picks the grid
  local bin=$1 set=$2 index=$3 name=$4; shift 4
  # shellcheck disable=SC2086
  env "$@" OCTEX_DATA=$D/data OCTEX_LOG=warn timeout 200 "$bin" bench --data "$set" --backend gpu --index "$index" --out "$D/out/$name" --repeats 3 ${GRID:---quick} > "$OUT/$name.log" 2>&1
  echo "== $name"; grep -E "kernel phases" "$OUT/$name.log" | cut -c1-230
  cp "$D/out/$name/results-gpu.json" "$OUT/$name.json"
}
ab2() {
  local set=$1 index=$2
  for rep in 1 2; do
    quick "$D/bin-old/xtask" "$set" "$index" "ab-old$rep-$set"
    quick "$D/bin/xtask" "$set" "$index" "ab-new$rep-$set"
  done
}
abv() {
  local set=$1 index=$2; shift 2
  for rep in 1 2; do for v in "$@"; do quick "$D/bin-$v/xtask" "$set" "$index" "ab-$v$rep-$set"; done; done
}
variants() {
  local set=$1 index=$2; shift 2
  for v in "$@"; do
    local name=${v%%=*} envs=${v#*=}
    [ "$envs" = "-" ] && envs=""
    # shellcheck disable=SC2086
    quick "$D/bin/xtask" "$set" "$index" "v-$name-$set" $envs
  done
}
