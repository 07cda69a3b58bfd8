#!/usr/bin/env bash
# The test command: every unit, property, doc and end-to-end test of the
# workspace (no GPU needed), the C API's C program (through cargo test), and
# the Python package's pytest suite in a venv this script makes
# (target/pyvenv: maturin, numpy, pytest and Ray (for octex.ray's tests on a
# local cluster) from PyPI; the extension is built in
# debug into it, reusing the workspace's build). Ends with one total line.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/kernel-toolchain.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
rust=$(awk '/^test result:/ { p += $4; f += $6 } END { printf "%d %d", p, f }' "$log")

echo "== python"
venv=target/pyvenv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check maturin numpy pytest "ray[serve,data]>=2.60"
(cd python && VIRTUAL_ENV="$PWD/../$venv" PATH="$PWD/../$venv/bin:$PATH" maturin develop -q)
pylog=$(mktemp)
"$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests 2>&1 | tee "$pylog" || status=$?
py=$(awk '/ passed| failed/ { for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } } END { printf "%d %d", p, f }' "$pylog")
rm -f "$pylog"
set -- $rust $py
printf "tests: %d passed, %d failed\n" $(($1 + $3)) $(($2 + $4))
exit "$status"
