#!/usr/bin/env bash
# The placement check on a GPU machine (docs/PLACEMENT.md, "On a GPU
# machine"): after voltad's start-up placement CUDA sees exactly the planned
# GPU, for each GPU in turn, with every thread on the planned CPUs.
#
# The GPU machine has no Debian -dev packages (hwloc, libnuma, yaml-cpp,
# spdlog, ...), so the binaries are built here (x86-64, no CUDA needed) and
# travel in .deps/placement/ (git-ignored) with the shared libraries they
# need beyond glibc and the C++ runtime. Once per change, here:
#   bash scripts/device-placement-check.sh --prepare [BUILD_DIR]   (default: build)
# then, as the device tool's command with carry [".deps"]:
#   bash scripts/device-placement-check.sh
# Logs go to $OUT when set. Exit: 0 every check passed, 1 one failed,
# 77 nothing could be checked (no NVIDIA GPU or driver seen).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/ship-binaries.sh
dest=.deps/placement
programs=(voltad placement_probe placement_gpu_check)

if [[ ${1:-} == --prepare ]]; then
  build=${2:-build}
  if [[ ! -f $build/CMakeCache.txt ]]; then
    cmake -S . -B "$build" -G Ninja -DVOLTAD_CUDA=OFF >/dev/null || exit 1
  fi
  cmake --build "$build" --target "${programs[@]}" -j2 || exit 1
  ship_binaries "$dest" "$build" "" "${programs[@]}" || exit 1
  echo "device-placement-check: $dest ready ($(du -sh "$dest" | cut -f1)); run" \
    "'bash scripts/device-placement-check.sh' there with carry [\".deps\"]"
  exit 0
fi
[[ $# -eq 0 ]] || { echo "usage: $0 [--prepare [BUILD_DIR]]" >&2; exit 2; }
require_shipped "$dest" device-placement-check "${programs[@]}" || exit 1

export LD_LIBRARY_PATH=$PWD/$dest/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bin=$PWD/$dest/bin
out=${OUT:-$PWD/build-device/placement}
mkdir -p "$out"

echo "== nvidia-smi -L"
nvidia-smi -L 2>&1 | tee "$out/nvidia-smi.txt"
echo "== CUDA_VISIBLE_DEVICES before voltad: '${CUDA_VISIBLE_DEVICES-<unset>}'"
echo "== voltad --print-placement"
"$bin/voltad" --print-placement 2>&1 | tee "$out/print-placement.txt"
print_rc=${PIPESTATUS[0]}
"$bin/voltad" --print-placement --json >"$out/placement.json" 2>&1
echo "== placement_probe backend=cuda (the plan applied to a process, checked from /proc)"
"$bin/placement_probe" backend=cuda 2>&1 | tee "$out/probe.txt"
probe_rc=${PIPESTATUS[0]}
echo "== placement_gpu_check --each (CUDA after the placement, one process per GPU)"
"$bin/placement_gpu_check" --each 2>&1 | tee "$out/gpu-check.txt"
gpu_rc=${PIPESTATUS[0]}

word() { case $1 in 0) echo ok ;; 77) echo skipped ;; *) echo "FAILED (exit $1)" ;; esac; }
echo
echo "== device-placement-check summary =="
echo "gpus: $(grep -c '^GPU' "$out/nvidia-smi.txt") seen by nvidia-smi"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "voltad --print-placement: $(word "$print_rc")"
echo "placement_probe backend=cuda: $(word "$probe_rc")"
echo "placement_gpu_check --each: $(word "$gpu_rc") -- $(tail -1 "$out/gpu-check.txt")"
((print_rc == 0 && probe_rc == 0 && gpu_rc == 0)) && exit 0
((gpu_rc == 77 && probe_rc != 1 && print_rc != 0)) && exit 77
exit 1
