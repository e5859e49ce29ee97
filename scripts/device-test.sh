#!/usr/bin/env bash
# Builds engine + kernels on the GPU machine and runs the `gpu` tests; with
# --bench also times the matvecs (kernels/dev/bench_matvec.cu) and the
# prefill GEMM (kernels/dev/bench_gemm.cu; --bench=gemm or --bench=matvec for
# one; --bench=persistent for the kernel-boundary harness,
# kernels/dev/bench_persistent.cu, and --bench=stream for the batch-1
# streaming matvecs alone, kernels/dev/bench_stream.cu (seconds to build,
# for Nsight Compute), and --bench=attention for the decode attention's three
# pass-1 kernels alone, kernels/dev/bench_attention.cu; --bench alone leaves
# those three out);
# --tests=REGEX builds and runs only the gpu tests whose target name
# (kernels_test_*) matches; a REGEX that matches none stops it (exit 2), and
# --select-only just checks that and lists them. The summary is printed
# last. Logs go to $OUT (the device tool's folder) when set.
#
# The GPU machine has no Debian -dev packages, so doctest and nlohmann-json
# travel in .deps/ (git-ignored). Once, here:
#   bash scripts/device-test.sh --prepare-deps
# then, as the device tool's command with carry [".deps"]:
#   bash scripts/device-test.sh [--bench[=matvec|gemm|persistent|stream|attention]] [--tests=REGEX] [--arch=90]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
deps=$root/.deps

if [[ ${1:-} == --prepare-deps ]]; then
  mkdir -p "$deps/include" "$deps/share/cmake"
  cp -r /usr/include/doctest "$deps/include/"
  cp -r /usr/include/nlohmann "$deps/include/"
  cp -r /usr/share/cmake/nlohmann_json "$deps/share/cmake/"
  echo "device-test: .deps/ ready ($(du -sh "$deps" | cut -f1)); pass carry [\".deps\"]"
  exit 0
fi

arch=90
bench=0
benches="matvec gemm"
tests_re=""
select_only=0
for arg in "$@"; do
  case $arg in
    --bench) bench=1 ;;
    --bench=*) bench=1; benches=${arg#--bench=}; benches=${benches//,/ } ;;
    --tests=*) tests_re=${arg#--tests=} ;;
    --arch=*) arch=${arg#--arch=} ;;
    --select-only) select_only=1 ;;
    *) echo "usage: $0 [--prepare-deps | [--bench[=matvec|gemm|persistent|stream|attention]] [--tests=REGEX [--select-only]] [--arch=NN]]" >&2; exit 2 ;;
  esac
done
# The gpu tests --tests picks (target names, kernels_test_*). A pattern that
# picks none is a mistake (run 59's '^test_gemm$' ran no test, and its A/B
# went on as if the tests had passed): stop before the device is used.
targets=()
for f in tests/kernels/test_*.cpp; do
  t="kernels_$(basename "$f" .cpp)"
  [[ -z $tests_re || $t =~ $tests_re ]] && targets+=("$t")
done
if ((${#targets[@]} == 0)); then
  echo "device-test: --tests='$tests_re' picks no gpu test; the targets are:" >&2
  for f in tests/kernels/test_*.cpp; do echo "  kernels_$(basename "$f" .cpp)" >&2; done
  exit 2
fi
if ((select_only)); then  # scripts/device-ab.sh's check before it builds anything
  echo "device-test: --tests picks ${targets[*]}"
  exit 0
fi

[[ -f $deps/include/doctest/doctest.h ]] || {
  echo "device-test: no .deps/ (run --prepare-deps here and carry .deps)" >&2; exit 1; }

out=${OUT:-$root/build-device/out}
build=$root/build-device
mkdir -p "$out" "$build"
jobs=$(nproc)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
  --format=csv,noheader | tee "$out/gpu.txt"

t0=$SECONDS
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
     -DVOLTAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DVOLTAD_DAEMON=OFF \
     -DVOLTAD_DOCTEST_DIR="$deps/include" -DCMAKE_PREFIX_PATH="$deps" \
     >"$out/configure.log" 2>&1; then
  tail -30 "$out/configure.log"
  echo "device-test: configure FAILED"
  exit 1
fi
# The bench (one nvcc call, independent of CMake) builds alongside.
if ((bench)) && [[ " $benches " == *" matvec "* ]]; then
  nvcc -std=c++17 -O3 -I"$root" -arch="sm_$arch" --expt-relaxed-constexpr -lineinfo \
    kernels/dev/bench_matvec.cu -o "$build/bench_matvec" >"$out/bench-build.log" 2>&1 &
fi
# The benches that build from one file and print their own table.
simple_benches="persistent stream attention"
for b in $simple_benches; do
  if ((bench)) && [[ " $benches " == *" $b "* ]]; then
    nvcc -std=c++17 -O3 -I"$root" -arch="sm_$arch" --expt-relaxed-constexpr -lineinfo \
      "kernels/dev/bench_$b.cu" -o "$build/bench_$b" >"$out/bench-$b-build.log" 2>&1 &
  fi
done
# bench_gemm compares with cuBLAS where the image has it, else builds without.
if ((bench)) && [[ " $benches " == *" gemm "* ]]; then
  gemm_flags=(-std=c++17 -O3 -I"$root" -arch="sm_$arch" --expt-relaxed-constexpr -lineinfo)
  (nvcc "${gemm_flags[@]}" -DVOLTAD_BENCH_CUBLAS kernels/dev/bench_gemm.cu -o "$build/bench_gemm" -lcublas ||
   nvcc "${gemm_flags[@]}" kernels/dev/bench_gemm.cu -o "$build/bench_gemm") >"$out/bench-gemm-build.log" 2>&1 &
fi
# Only the gpu tests and what they link: the rest of the tree is CI's job.
bash scripts/device-fresh-sources.sh "$build" >"$out/build.log"
ninja -C "$build" -k 0 -j "$jobs" "${targets[@]}" >>"$out/build.log" 2>&1
build_rc=$?
((build_rc == 0)) || grep -E "error|FAILED" "$out/build.log" | head -30
build_s=$((SECONDS - t0))

# VOLTAD_GEMM_SM80_ALWAYS: the sm_80 GEMM wherever it runs, also on the
# small test models whose matrices auto would leave to the portable one.
(cd "$build" && VOLTAD_GEMM_SM80_ALWAYS=1 ctest -L gpu ${tests_re:+-R "$tests_re"} -V --timeout 300) \
  >"$out/ctest.log" 2>&1
test_rc=$?
grep -E "MESSAGE|Test +#|tests passed|Skipped|FAILED|ERROR|got .* want|test cases:" \
  "$out/ctest.log" | sed 's/^[0-9]*: //' | head -80
# The first run used engine.kernels: auto (the default); the whole-model
# tests again with portable, the kernels a V100 runs (issue 4: both modes).
portable_line="not run (no backend test selected)"
auto_line=$portable_line
if [[ " ${targets[*]} " == *" kernels_test_backend_cuda "* ]]; then
  (cd "$build" && VOLTAD_TEST_KERNELS=portable ctest -L gpu -R backend_cuda -V --timeout 300) \
    >"$out/ctest-portable.log" 2>&1 || test_rc=1
  portable_line=$(grep -E 'tests passed' "$out/ctest-portable.log" || echo 'no result')
  grep -E "FAILED|ERROR" "$out/ctest-portable.log" | head -20
  # And auto as it runs in production: without VOLTAD_GEMM_SM80_ALWAYS the
  # decode-sized steps take the sm_80 narrow GEMM where it applies.
  (cd "$build" && VOLTAD_TEST_KERNELS=auto ctest -L gpu -R backend_cuda -V --timeout 300) \
    >"$out/ctest-auto.log" 2>&1 || test_rc=1
  auto_line=$(grep -E 'tests passed' "$out/ctest-auto.log" || echo 'no result')
  grep -E "FAILED|ERROR" "$out/ctest-auto.log" | head -20
fi

bench_line=""
((bench)) && wait  # the bench builds started before the CMake build
if ((bench)) && [[ " $benches " == *" gemm "* ]]; then
  if [[ -x $build/bench_gemm ]]; then
    "$build/bench_gemm" >"$out/bench_gemm.txt" 2>&1
    rc=$?
    sed -n "1,2p;/== summary/,\$p" "$out/bench_gemm.txt"
    bench_line="bench gemm: $([[ $rc == 0 ]] && echo ok || echo FAILED) (full table: bench_gemm.txt)"
  else
    tail -20 "$out/bench-gemm-build.log"
    bench_line="bench gemm: build FAILED"
  fi
fi
if ((bench)) && [[ " $benches " == *" matvec "* ]]; then
  if [[ -x $build/bench_matvec ]]; then
    "$build/bench_matvec" >"$out/bench_matvec.txt" 2>&1
    rc=$?
    sed -n "1,3p;/== summary/,\$p" "$out/bench_matvec.txt"
    bench_line="${bench_line:+$bench_line; }bench matvec: $([[ $rc == 0 ]] && echo ok || echo FAILED) (full table: bench_matvec.txt)"
  else
    tail -20 "$out/bench-build.log"
    bench_line="${bench_line:+$bench_line; }bench matvec: build FAILED"
  fi
fi
for b in $simple_benches; do
  ((bench)) && [[ " $benches " == *" $b "* ]] || continue
  if [[ -x $build/bench_$b ]]; then
    "$build/bench_$b" 2>&1 | tee "$out/bench_$b.txt"
    rc=${PIPESTATUS[0]}
    bench_line="${bench_line:+$bench_line; }bench $b: $([[ $rc == 0 ]] && echo ok || echo FAILED)"
  else
    tail -20 "$out/bench-$b-build.log"
    bench_line="${bench_line:+$bench_line; }bench $b: build FAILED"
  fi
done

echo
echo "== device-test summary =="
echo "gpu: $(head -1 "$out/gpu.txt")"
# VOLTAD_COMMIT names the commit where the machine's copy of the tree
# carries stale git metadata (the device tool's copies have shown an older
# HEAD than the tree they hold), as for scripts/device-bench.sh.
if [[ -n ${VOLTAD_COMMIT:-} ]]; then
  echo "commit: $VOLTAD_COMMIT (given)"
else
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
    git -C "$root" diff --quiet 2>/dev/null || echo ' (+ local changes)')"
fi
echo "build: $([[ $build_rc == 0 ]] && echo ok || echo FAILED) in ${build_s}s (sm_$arch)"
echo "ctest -L gpu (engine.kernels auto): $(grep -E 'tests passed' "$out/ctest.log" || echo 'no result')$(
  n=$(grep -c '\*\*\*Skipped' "$out/ctest.log"); ((n)) && echo ", $n SKIPPED (no device?)")"
echo "backend tests with engine.kernels portable: $portable_line"
echo "backend tests with engine.kernels auto (no VOLTAD_GEMM_SM80_ALWAYS): $auto_line"
echo "${bench_line:-bench: not run}"
((build_rc == 0 && test_rc == 0))
