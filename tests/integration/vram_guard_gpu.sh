#!/usr/bin/env bash
# The VRAM guard on a real GPU: see vram_guard_gpu.py. Needs a voltad built
# with CUDA in $VOLTAD_BIN_DIR (scripts/device-vram-guard.sh ships one to
# the GPU machine), the SmolLM2 demo model ($VOLTAD_DEMO_MODEL, else
# scripts/fetch-demo-model.sh), and python3 with PyTorch on CUDA for the
# second process. Exits 77 (skipped) when any of those is missing.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${VOLTAD_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
bin=${VOLTAD_BIN_DIR:-$src/build/bin}
skip() { echo "skipped: $*"; exit 77; }
command -v nvidia-smi >/dev/null 2>&1 || skip "no nvidia-smi (no NVIDIA driver)"
nvidia-smi -L 2>/dev/null | grep -q '^GPU 0' || skip "no NVIDIA GPU"
[[ -x $bin/voltad && -x $bin/voltactl ]] || skip "no voltad and voltactl in $bin"
model=${VOLTAD_DEMO_MODEL:-}
[[ -s $model ]] || model=$(bash "$src/scripts/fetch-demo-model.sh" 2>/dev/null) || true
[[ -s $model ]] || skip "no demo model (set VOLTAD_DEMO_MODEL)"
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
  skip "python3 has no PyTorch with CUDA (the second process needs it)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PYTHONPATH="$here" python3 "$here/vram_guard_gpu.py" "$bin" "$model" "$work"
rc=$?
# Keep the daemon logs where the device tool brings files back.
if [[ -n ${OUT:-} ]]; then cp "$work"/*.log "$OUT/" 2>/dev/null || true; fi
exit $rc
