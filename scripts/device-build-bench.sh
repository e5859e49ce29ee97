#!/usr/bin/env bash
# Builds voltad-bench and voltad-mkmodel as the headline runs take them
# (Release, CUDA for one architecture, no daemon, no tests; the Debian
# headers from .deps), into BUILD_DIR, and unpacks the tokenizers the bench
# models use into /tmp/voltad-tok. Shared by scripts/device-bench.sh and
# scripts/device-llamacpp.sh. The logs stay in BUILD_DIR; on a failure
# their tail is printed and the script exits 1.
#   bash scripts/device-build-bench.sh BUILD_DIR ARCH
set -euo pipefail
cd "$(dirname "$0")/.."
(($# == 2)) || { echo "usage: $0 BUILD_DIR ARCH" >&2; exit 64; }
root=$PWD build=$1 arch=$2
mkdir -p "$build" /tmp/voltad-tok
tar -C /tmp/voltad-tok -xJf .tok/tok.tar.xz
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVOLTAD_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DVOLTAD_DAEMON=OFF -DVOLTAD_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="$root/.deps" >"$build/bench-configure.log" 2>&1 || { tail -20 "$build/bench-configure.log"; exit 1; }
bash scripts/device-fresh-sources.sh "$build" >"$build/bench-build.log"
ninja -C "$build" voltad-bench voltad-mkmodel >>"$build/bench-build.log" 2>&1 || { tail -30 "$build/bench-build.log"; exit 1; }
