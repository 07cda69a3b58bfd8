#!/usr/bin/env bash
# Installs what builds the GPU kernels from source: the pinned nightly (with
# rust-src for -Zbuild-std=core) and llvm-bitcode-linker on the toolchain that
# runs the build. Without them the build embeds the committed PTX instead, and
# the test that compares the two is skipped, so failures here only warn.
# Keep KERNEL_TOOLCHAIN equal to crates/kernels/build.rs.
set -uo pipefail
KERNEL_TOOLCHAIN=nightly-2026-05-20
cd "$(dirname "$0")/.."
if ! rustup run "$KERNEL_TOOLCHAIN" rustc --version >/dev/null 2>&1 \
    || ! [ -d "$(rustup run "$KERNEL_TOOLCHAIN" rustc --print sysroot 2>/dev/null)/lib/rustlib/src/rust/library" ]; then
    rustup toolchain install "$KERNEL_TOOLCHAIN" --profile minimal -c rust-src -c llvm-tools \
        || echo "warning: could not install $KERNEL_TOOLCHAIN: the committed PTX will be used" >&2
fi
rustup component add llvm-bitcode-linker >/dev/null 2>&1 \
    || echo "warning: could not add llvm-bitcode-linker: the committed PTX will be used" >&2
exit 0
