#!/usr/bin/env bash
# Proves that every portable kernel compiles for the V100 (sm_70), and that the
# portable path's PTX uses no instruction the V100 lacks.
#
# How: PyPI's CUDA 12.9 compiler wheels (pinned, scripts/cuda12-toolkit.sh)
# carry ptxas and libnvvm but not nvcc's front end (cudafe++, cicc). So the
# machine's own nvcc parses each .cu with __CUDA_ARCH__ forced to 700 (the code
# paths a V100 compiles), emits PTX, and CUDA 12.9's ptxas assembles that PTX
# for sm_70. ptxas refuses any instruction sm_70 does not have ("Feature X
# requires .target sm_80"), and a scan of the PTX names the forbidden ones.
# ptxas's -v report then holds the decode kernels to their register and
# spill budgets (scripts/sm70-budgets.txt, scripts/ptxas-budgets.py).
# Files named *_sm80.cu / *_sm90.cu are per-architecture variants: they are
# not part of the portable path and are not compiled for sm_70.
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc13=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $nvcc13 ]] || { echo "ci-sm70: no nvcc on this machine" >&2; exit 1; }
ptxas12=$(bash scripts/cuda12-toolkit.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# PTX instructions (and types) that the V100 lacks or that the portable path
# must not use: async copies, ldmatrix/stmatrix, the sm_80+ mma shapes,
# bf16/tf32 arithmetic, Hopper's wgmma and bulk copies, redux.
forbidden='cp\.async|ldmatrix|stmatrix|mma\.sync\.aligned\.m16n8|mma\.sync\.aligned\.m16n8k|\.bf16|\.tf32|wgmma|cp\.reduce\.async|redux\.sync|mbarrier|elect\.sync|setmaxnreg'

fail=0
count=0
for cu in kernels/*.cu; do
  case "$cu" in *_sm80.cu|*_sm90.cu) continue ;; esac
  name=$(basename "$cu" .cu)
  ptx="$work/$name.ptx"
  if ! "$nvcc13" -std=c++17 -I. -arch=compute_75 -ptx -U__CUDA_ARCH__ -D__CUDA_ARCH__=700 \
       --expt-relaxed-constexpr "$cu" -o "$ptx"; then
    echo "ci-sm70: FAIL $cu: front end (with __CUDA_ARCH__=700)"; fail=1; continue
  fi
  sed -i 's/^\.target sm_75/.target sm_70/; s/^\.version 9\.[0-9]*/.version 8.8/' "$ptx"
  if grep -nE "$forbidden" "$ptx" | head -5 | grep -q .; then
    echo "ci-sm70: FAIL $cu: the portable path uses instructions the V100 lacks:"
    grep -nE "$forbidden" "$ptx" | head -5 | sed 's/^/    /'
    fail=1
  fi
  if ! "$ptxas12" -arch=sm_70 -v "$ptx" -o "$work/$name.cubin" 2>"$work/$name.ptxas"; then
    grep -v '^ptxas info' "$work/$name.ptxas" | head -20
    echo "ci-sm70: FAIL $cu: ptxas 12.9 for sm_70"; fail=1; continue
  fi
  count=$((count + 1))
done
# The scan must be able to fail: a planted cp.async must be caught.
printf '__global__ void k(float* d,const float* s){__shared__ float sh[32];unsigned a=__cvta_generic_to_shared(sh+threadIdx.x);asm volatile("cp.async.ca.shared.global [%%0], [%%1], 4;"::"r"(a),"l"(s+threadIdx.x));d[threadIdx.x]=sh[threadIdx.x];}\n' >"$work/planted.cu"
"$nvcc13" -arch=compute_80 -ptx "$work/planted.cu" -o "$work/planted.ptx"
sed -i 's/^\.target sm_80/.target sm_70/; s/^\.version 9\.[0-9]*/.version 8.8/' "$work/planted.ptx"
if "$ptxas12" -arch=sm_70 "$work/planted.ptx" -o "$work/planted.cubin" 2>/dev/null || ! grep -qE "$forbidden" "$work/planted.ptx"; then
  echo "ci-sm70: FAIL: the check did not catch a planted cp.async"; fail=1
fi
# Registers and spills of the V100's decode kernels (scripts/sm70-budgets.txt):
# the blocks an SM they get are what docs/V100.md's numbers assume.
if ((fail == 0)) && ! python3 scripts/ptxas-budgets.py scripts/sm70-budgets.txt "$work"/*.ptxas; then
  echo "ci-sm70: FAIL: a decode kernel is over its register or spill budget for sm_70"; fail=1
fi
((fail == 0)) || exit 1
echo "ci-sm70: $count kernel file(s) compile for sm_70 with CUDA 12.9's ptxas; PTX scan clean; register budgets hold"
