#!/usr/bin/env bash
# Configures and builds everything into build/ (binaries in build/bin/).
# Extra arguments go to cmake, e.g. -DVOLTAD_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build "${generator[@]}" -DVOLTAD_WERROR=ON "$@"
elif (($#)); then
  cmake -S . -B build "$@"
fi
cmake --build build --parallel "$(nproc)"
