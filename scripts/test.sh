#!/usr/bin/env bash
# The test command: every unit, property, doc and end-to-end test of the
# workspace (no GPU needed). Ends with one total line over all test binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/kernel-toolchain.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace "$@" 2>&1 | tee "$log" || status=$?
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
