#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test: the unit and
# integration suites (ctest; GPU tests are reported as skipped where no CUDA
# device exists), the V100 (sm_70) compile check, the order of the matvecs'
# loads around the PDL wait (scripts/check-pdl-loads.sh), that the dev
# benches still compile and link (scripts/check-dev-benches.sh), the measurement
# scripts' self-tests, the unit and integration tests again under
# ThreadSanitizer (scripts/tsan.sh), and the fuzzers for a bounded time.
# .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

bash scripts/install-deps.sh
# The tests build CUDA kernels for one architecture (they cannot run here;
# the GPU tests run on a GPU machine through scripts/device-test.sh): it keeps
# CI well inside its time. scripts/ci-sm70.sh below proves the V100 build, and
# scripts/build.sh alone builds the full default list.
bash scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES="${VOLTAD_TEST_CUDA_ARCHITECTURES:-75}"
bash scripts/fetch-demo-model.sh >/dev/null

echo "== ctest"
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 900

echo "== V100 (sm_70) compile check"
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  bash scripts/ci-sm70.sh
else
  echo "ci-sm70: skipped: no nvcc on this machine"
fi

echo "== PDL load order (sm_90 SASS of the matvecs)"
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  bash scripts/check-pdl-loads.sh
else
  echo "check-pdl-loads: skipped: no nvcc on this machine"
fi

echo "== dev benches (nvcc front end)"
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  bash scripts/check-dev-benches.sh
else
  echo "check-dev-benches: skipped: no nvcc on this machine"
fi

echo "== measurement scripts (self-tests)"
python3 scripts/ncu-stalls.py --self-test
python3 scripts/sass-loop-mix.py --self-test
python3 scripts/sass-diff.py --self-test
bash scripts/device-ab-selftest.sh

echo "== ThreadSanitizer (daemon threads)"
bash scripts/tsan.sh

if [[ -f scripts/fuzz.sh ]]; then
  echo "== fuzzers (bounded)"
  bash scripts/fuzz.sh
fi

echo "== all tests passed in $(( $(date +%s) - start ))s"
