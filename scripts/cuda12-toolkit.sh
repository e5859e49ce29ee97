#!/usr/bin/env bash
# Provides CUDA 12.9's assembler (the last that targets the V100, sm_70) from
# PyPI, pinned, cached under ~/.cache/voltad/cuda12.9 between runs, with the
# runtime's and CCCL's headers beside it. Prints the path of ptxas. The
# nvcc wheel carries ptxas and libnvvm but not nvcc's front end, so there is
# no nvcc there (scripts/ci-sm70.sh compiles with the machine's own nvcc).
# CUDA 13, which the machine has, dropped sm_70.
set -euo pipefail
prefix="${VOLTAD_CUDA12_PREFIX:-$HOME/.cache/voltad/cuda12.9}"
pins=(nvidia-cuda-nvcc-cu12==12.9.86 nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-cccl-cu12==12.9.27)
stamp="$prefix/.installed-$(echo "${pins[*]}" | md5sum | cut -c1-12)"
if [[ ! -f $stamp ]]; then
  rm -rf "$prefix"
  mkdir -p "$prefix"
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$prefix/site" "${pins[@]}" >&2
  touch "$stamp"
fi
root="$prefix/site/nvidia/cuda_nvcc"
# nvcc finds its headers and libraries relative to itself: gather the three
# wheels into one toolkit-shaped tree.
tk="$prefix/toolkit"
if [[ ! -x $tk/bin/ptxas || ! -f $tk/include/cuda_runtime.h ]]; then
  mkdir -p "$tk"
  cp -r "$root"/. "$tk"/
  for w in cuda_runtime cuda_cccl; do
    cp -r "$prefix/site/nvidia/$w/include/." "$tk/include/"
    [[ -d $prefix/site/nvidia/$w/lib ]] && mkdir -p "$tk/lib64" && cp -r "$prefix/site/nvidia/$w/lib/." "$tk/lib64/"
  done
  # CCCL's headers sit under include/cccl in the wheel.
  if [[ -d $tk/include/cccl ]]; then cp -r "$tk/include/cccl/." "$tk/include/"; fi
  ln -sf lib64 "$tk/lib" 2>/dev/null || true
  # The runtime wheel ships libcudart.so.12 only; link the unversioned name.
  [[ -e $tk/lib64/libcudart.so ]] || ln -sf libcudart.so.12 "$tk/lib64/libcudart.so"
fi
echo "$tk/bin/ptxas"
