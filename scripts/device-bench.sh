#!/usr/bin/env bash
# The headline benchmarks on a GPU machine: builds the engine tools there,
# writes random-weight models of real shapes with voltad-mkmodel, and runs
# voltad-bench on them. The JSON results go to build-bench/json and, as one
# tar file (the device tool returns only a few files), to $OUT (the device
# tool's folder) or build-device/out; a table is printed last.
#
# Needs .deps (scripts/device-test.sh --prepare-deps) and .tok/tok.tar.xz
# (the shared llama3 and qwen3 tokenizers: tar -C ../shared/tokenizers
# -cJf .tok/tok.tar.xz llama3 qwen3), carried to the machine.
#   bash scripts/device-bench.sh [--models llama3-8b:q4_k_m,llama3-8b:q4_0] [--ctx 512,4096] [--arch 90]
#                                [--batches 1,8] [--kernels auto,portable]
# Each model runs every context with engine.kernels auto; with portable in
# the list also once more with the portable kernels (the first context,
# batch 1, 8 and 32: prefill and decode as a V100 runs them).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
models="llama3-8b:q4_k_m,llama3-8b:q4_0,qwen3-8b:q4_k_m"
contexts="512,4096"
arch=90
batches="1,2,4,8,16,32"
kernel_sets="auto,portable"
while (($#)); do
  case $1 in
    --models) models=$2; shift 2 ;;
    --ctx) contexts=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --kernels) kernel_sets=$2; shift 2 ;;
    *) echo "usage: $0 [--models SHAPE:TYPE,...] [--ctx N,...] [--arch NN] [--batches B,...] [--kernels auto,portable]" >&2; exit 64 ;;
  esac
done
out=${OUT:-$root/build-device/out}
build=$root/build-bench
json_dir=$build/json
rm -rf "$json_dir"
mkdir -p "$out" "$build" "$json_dir" /tmp/voltad-models /tmp/voltad-tok
bash scripts/device-build-bench.sh "$build" "$arch"
# The device copy of the tree may carry a stale .git: the caller can name the commit.
commit=${VOLTAD_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
# The JSON of every run that finished, also when a later one fails.
trap 'tar -C "$json_dir" -cf "$out/bench-$commit.tar" .' EXIT
summary=()
for spec in ${models//,/ }; do
  shape=${spec%%:*}
  type=${spec##*:}
  case $shape in qwen*) tok=qwen3 ;; *) tok=llama3 ;; esac
  file=/tmp/voltad-models/$shape-$type.gguf
  [[ -s $file ]] || "$build/bin/voltad-mkmodel" --shape "$shape" --type "$type" --tokenizer /tmp/voltad-tok/$tok -o "$file" 2>&1 | tail -1
  runs=()
  for ctx in ${contexts//,/ }; do
    b=$batches
    [[ $ctx -gt 1024 ]] && b=1,8
    [[ ,$kernel_sets, == *,auto,* ]] && runs+=("auto $ctx $b")
  done
  [[ ,$kernel_sets, == *,portable,* ]] && runs+=("portable ${contexts%%,*} 1,8,32")
  for run in "${runs[@]}"; do
    read -r kernels ctx b <<<"$run"
    json=$json_dir/bench-$shape-$type-ctx$ctx-$kernels.json
    "$build/bin/voltad-bench" -m "$file" -p 512 -n 64 -b "$b" --ctx "$ctx" --kernels "$kernels" --json >"$json"
    summary+=("$(python3 - "$json" "$shape-$type" "$ctx" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = " ".join(f"b{r['batch']}={r['tokens_per_second']:.0f}tok/s({r['efficiency']:.2f})" for r in d["decode"])
print(f"{sys.argv[2]} ctx{sys.argv[3]} kernels {d['kernels']}: prefill {d['prefill']['tokens_per_second']:.0f} tok/s; "
      f"{rows}; weights {d['weights_bytes']/1e9:.3f} GB vs GGUF {d['gguf_tensor_bytes']/1e9:.3f} GB; "
      f"workspace {d['workspace_bytes']/1e6:.0f} MB; load {d['load_seconds']:.1f} s; copy {d['copy_bandwidth_gbps']:.0f} GB/s")
PY
)")
    echo "${summary[-1]}"  # as it comes: a run cut short still shows what it measured
  done
done
echo "== voltad-bench at commit $commit (arch sm_$arch); JSON: $out/bench-$commit.tar"
printf '%s\n' "${summary[@]}"
