#!/usr/bin/env bash
# Prints the path of an nvdisasm for sm_90 cubins: the toolkit's beside
# nvcc, else one from PyPI, pinned and cached under ~/.cache/voltad
# (installed on first use). For scripts that read SASS without a GPU
# (check-pdl-loads.sh, sass-diff.sh).
set -euo pipefail
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [[ -x $(dirname "$nvcc")/nvdisasm ]]; then
  echo "$(dirname "$nvcc")/nvdisasm"
  exit 0
fi
pin=nvidia-cuda-nvdisasm==13.5.37
prefix="$HOME/.cache/voltad/${pin//=/-}"
if [[ ! -x $prefix/nvidia/cu13/bin/nvdisasm ]]; then
  rm -rf "$prefix"
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$prefix" "$pin" >&2
fi
echo "$prefix/nvidia/cu13/bin/nvdisasm"
