#!/usr/bin/env bash
# Where a decode step's time goes inside the decode graph, kernel by kernel,
# on the GPU machine: builds kernels/dev/trace_kernels.cpp (CUPTI's kernel
# records, injected through CUDA_INJECTION64_PATH: Nsight Systems makes no
# report there), runs voltad-bench under it with graphs as a server runs
# them, and prints scripts/trace-step.py's table (what each kernel adds to
# the step's chain). Run after scripts/device-bench.sh (or device-ab.sh)
# has built build-bench/ and written the model:
#   bash scripts/device-trace.sh [--model /tmp/voltad-models/llama3-8b-q4_k_m.gguf] [--batch 1]
#                                [--ctx 512] [--kernels auto] [--steps 8] [-- voltad-bench args]
# The trace's CSV goes to $OUT (the device tool's folder) or build-device/out.
# Comparison switches pass through the environment. The records add a
# little to each launch: compare variants under the trace, not a traced run
# with an untraced one (the script prints both steps' rates).
set -euo pipefail
cd "$(dirname "$0")/.."
model=/tmp/voltad-models/llama3-8b-q4_k_m.gguf
batch=1
ctx=512
kernels=auto
steps=8
while (($#)); do
  case $1 in
    --batch) [[ $2 =~ ^[0-9]+$ ]] || { echo "device-trace: --batch takes one number" >&2; exit 64; }
      batch=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --kernels) kernels=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--model FILE] [--batch N] [--ctx N] [--kernels K] [--steps N] [-- voltad-bench args]" >&2
       exit 64 ;;
  esac
done
out=${OUT:-$PWD/build-device/out}
mkdir -p "$out" build-device
cuda=${CUDA_HOME:-/usr/local/cuda}
lib=$PWD/build-device/libtrace_kernels.so
g++ -std=c++17 -O2 -shared -fPIC kernels/dev/trace_kernels.cpp -I"$cuda/include" -L"$cuda/lib64" -lcupti \
  -Wl,-rpath,"$cuda/lib64" -o "$lib"
[[ -x build-bench/bin/voltad-bench && -f $model ]] ||
  { echo "device-trace: run scripts/device-bench.sh first (build-bench/, $model)" >&2; exit 1; }
csv=$out/trace-b$batch-ctx$ctx-$kernels.csv
# One batch size (--batch takes one): the bench's last line is its row
# (batch, step ms, tok/s a sequence, tok/s in all, ...). 32 decode steps,
# more than --steps, so the steps summed are decode steps.
bench=(build-bench/bin/voltad-bench -m "$model" -p 16 -n 32 -b "$batch" --ctx "$ctx" --kernels "$kernels"
       --repeat 1 "$@")
"${bench[@]}" >"$out/untraced.txt" 2>"$out/untraced.log" || { tail -5 "$out/untraced.log"; exit 1; }
rm -f "$csv"
CUDA_INJECTION64_PATH=$lib VOLTAD_TRACE_OUT=$csv "${bench[@]}" >"$out/traced.txt" 2>"$out/trace.log" ||
  { tail -5 "$out/trace.log"; exit 1; }
[[ -s $csv ]] || { echo "device-trace: no records written ($out/trace.log)" >&2; tail -5 "$out/trace.log"; exit 1; }
echo "== untraced: $(tail -1 "$out/untraced.txt")"
echo "== traced:   $(tail -1 "$out/traced.txt")"
grep -a 'trace_kernels' "$out/trace.log" | tail -3
python3 scripts/trace-step.py "$csv" --steps "$steps"
