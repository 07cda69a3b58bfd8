#!/usr/bin/env bash
# Unpacks CUDA's ptxas from the nvidia-cuda-nvcc wheel (PyPI) into
# target/ptxas/bin/ptxas, for `cargo xtask kernel-report` on a machine
# without CUDA. Nothing is installed system-wide.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=target/ptxas
if [ -x "$dest/bin/ptxas" ]; then "$dest/bin/ptxas" --version | tail -1; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps -d "$tmp" "nvidia-cuda-nvcc${OCTEX_NVCC_VERSION:+==$OCTEX_NVCC_VERSION}"
mkdir -p "$dest/bin"
python3 - "$tmp" "$dest/bin/ptxas" <<'PY'
import os, sys, zipfile
tmp, out = sys.argv[1], sys.argv[2]
wheel = next(os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".whl"))
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("/bin/ptxas"))
    with z.open(name) as src, open(out, "wb") as dst:
        dst.write(src.read())
os.chmod(out, 0o755)
PY
"$dest/bin/ptxas" --version | tail -1
