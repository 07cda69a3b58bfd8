#!/usr/bin/env bash
# The test command: every unit, property and end-to-end test of the workspace
# (no GPU needed; GPU tests skip and say so when no driver is present).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace "$@"
