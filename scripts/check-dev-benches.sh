#!/usr/bin/env bash
# The dev benches (kernels/dev/bench_*.cu) are not part of the build: they
# include the kernel sources and run only on a GPU machine
# (scripts/device-test.sh --bench). So that a change to a kernel's template
# or launcher cannot leave them broken until the next GPU session, each is
# compiled and linked here: its device code as PTX for sm_90 without
# optimization (no SASS, so no ptxas: 2-25 s a file), its host code whole,
# so that a kernel source the bench should include and does not (an
# undefined symbol) fails here, as bench_gemm, bench_matvec and
# bench_stream had until run 59.
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $nvcc ]] || { echo "check-dev-benches: no nvcc on this machine" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
count=0
for cu in kernels/dev/bench_*.cu; do
  if ! "$nvcc" -std=c++17 -I. -gencode arch=compute_90,code=compute_90 --expt-relaxed-constexpr \
       -Xcicc -O0 "$cu" -o "$work/$(basename "$cu" .cu)" 2>"$work/err"; then
    grep -m 10 -E "error|undefined reference" "$work/err" || tail -10 "$work/err"
    echo "check-dev-benches: FAIL $cu"
    fail=1
  fi
  count=$((count + 1))
done
((fail == 0)) || exit 1
echo "check-dev-benches: $count bench file(s) compile and link"
