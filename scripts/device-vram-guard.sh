#!/usr/bin/env bash
# The VRAM guard scenario on a GPU machine (tests/integration/vram_guard_gpu.py;
# docs/PLANNING.md, "While serving"): a refused start (exit 75), degraded and
# back under a second process's memory, and a flood with the card's peak
# usage sampled and printed.
#
# The GPU machine has no Debian -dev packages, so voltad and voltactl are
# built here WITH CUDA (sm_90 by default) and travel in .deps/vram-guard/
# (git-ignored) with the shared libraries they need beyond glibc and the C++
# runtime (the CUDA runtime is linked statically; the driver's libcuda is the
# machine's). Once per change, here:
#   bash scripts/device-vram-guard.sh --prepare [BUILD_DIR] [--arch=90]   (default build-vram-guard)
# then, as the device tool's command with carry [".deps"]:
#   bash scripts/device-vram-guard.sh
# The SmolLM2 model comes from $VOLTAD_DEMO_MODEL there. Logs go to $OUT when
# set. Exit: 0 all checks passed, 1 one failed, 77 skipped (no GPU, torch).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/ship-binaries.sh
dest=.deps/vram-guard
programs=(voltad voltactl)

if [[ ${1:-} == --prepare ]]; then
  shift
  build=build-vram-guard
  arch=90
  for a in "$@"; do
    case $a in
      --arch=*) arch=${a#--arch=} ;;
      *) build=$a ;;
    esac
  done
  if [[ ! -f $build/CMakeCache.txt ]]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVOLTAD_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null || exit 1
  fi
  grep -q 'VOLTAD_CUDA:.*=ON' "$build/CMakeCache.txt" || {
    echo "device-vram-guard: $build is not a CUDA build" >&2; exit 1; }
  cmake --build "$build" --target "${programs[@]}" -j2 || exit 1
  # The CUDA runtime is static; the driver's libcuda and NVML are the machine's.
  ship_binaries "$dest" "$build" '/(libcuda|libnvidia-ml)\.so' "${programs[@]}" || exit 1
  echo "device-vram-guard: $dest ready ($(du -sh "$dest" | cut -f1)); run" \
    "'bash scripts/device-vram-guard.sh' there with carry [\".deps\"]"
  exit 0
fi
[[ $# -eq 0 ]] || { echo "usage: $0 [--prepare [BUILD_DIR] [--arch=NN]]" >&2; exit 2; }
require_shipped "$dest" device-vram-guard "${programs[@]}" || exit 1
export LD_LIBRARY_PATH=$PWD/$dest/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export VOLTAD_BIN_DIR=$PWD/$dest/bin VOLTAD_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
bash tests/integration/vram_guard_gpu.sh
