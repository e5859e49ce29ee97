#!/usr/bin/env bash
# Checks, without a GPU, where the compiler put the matvecs' loads around
# the programmatic-dependent-launch wait (kernels/launch.cuh). In the sm_90
# SASS of every kernel_matvec_* (int4, int8, int6, stream), before the first ACQBULK
# (griddepcontrol.wait) there may only be
#   - weight loads, LDG.*.NA (load_weights_*: issued early on purpose, so
#     they stream while the kernel before finishes), and
#   - scale loads of 16 or 32 bits through __ldg (LDG.*.CONSTANT);
# and there must be at least one weight load. A 64- or 128-bit load without
# .NA there is x (or y) read before the kernel that writes it has finished:
# ptxas moves read-only (.nc) loads across the wait (PERFORMANCE.md run 17).
# A kernel with no weight load before the wait has lost the overlap.
# The float matvec waits first thing and is only checked for the first rule.
#
# Needs CUDA >= 12 nvcc (sm_90) and nvdisasm (scripts/nvdisasm-path.sh:
# from PyPI, pinned, cached under ~/.cache/voltad when the toolkit has none).
# VOLTAD_CHECK_NVCC_FLAGS adds nvcc flags, to check a variant (for example
# -DVOLTAD_WEIGHTS_NC=1, which fails: ptxas then sinks the int8 kernels'
# early weight loads below the wait).
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[[ -x $nvcc ]] || { echo "check-pdl-loads: skipped: no nvcc"; exit 0; }
nvdisasm=$(bash scripts/nvdisasm-path.sh)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
checked=0
for src in kernels/matvec_int4.cu kernels/matvec_int8.cu kernels/matvec_stream.cu kernels/matvec_float.cu; do
  cubin=$work/$(basename "$src" .cu).cubin
  "$nvcc" -std=c++17 -I. -arch=sm_90 --expt-relaxed-constexpr ${VOLTAD_CHECK_NVCC_FLAGS:-} -cubin "$src" -o "$cubin"
  # One line per matvec kernel: name, weight loads before the wait, the
  # offending loads before it ("|"-separated SASS, "-" for none), whether it
  # waits.
  while IFS=$'\t' read -r name weights bad waits; do
    checked=$((checked + 1))
    problem=""
    [[ $waits == 1 ]] || problem="no griddepcontrol.wait in the SASS"
    [[ $bad != - ]] && problem="loads before the wait that are not weights or scales: $bad"
    [[ -z $problem && $name != *kernel_matvec_float* && $weights == 0 ]] &&
      problem="no weight load before the wait (the early loads were moved after it)"
    if [[ -n $problem ]]; then
      echo "check-pdl-loads: $(echo "$name" | c++filt 2>/dev/null || echo "$name"): $problem"
      failed=1
    fi
  done < <("$nvdisasm" -c "$cubin" | awk '
    function flush() { if (fn != "") printf "%s\t%d\t%s\t%d\n", fn, weights, bad == "" ? "-" : bad, waited }
    /^\.text\./ {
      flush(); fn = ""
      if ($0 ~ /kernel_matvec_/) { fn = $0; sub(/^\.text\./, "", fn); sub(/:.*$/, "", fn) }
      weights = 0; bad = ""; waited = 0; next
    }
    fn == "" { next }
    /ACQBULK/ { waited = 1; next }
    !waited && /LDG/ {
      line = $0; sub(/^[ \t]*\/\*[0-9a-f]*\*\/[ \t]*/, "", line); sub(/[ \t]*;.*$/, "", line)
      if (line ~ /\.NA\./) weights++
      else if (line ~ /CONSTANT/ && line !~ /\.(64|128)[ .]/) {}
      else bad = bad (bad == "" ? "" : " | ") line
    }
    END { flush() }')
done
if ((checked == 0)); then
  echo "check-pdl-loads: no matvec kernels found in the SASS (has the naming changed?)"
  exit 1
fi
if ((failed)); then
  echo "check-pdl-loads: FAILED (kernels/launch.cuh and device_common.cuh say what may come before the wait)"
  exit 1
fi
echo "check-pdl-loads: $checked matvec kernels: only weights and scales before the wait, weights there in each"
