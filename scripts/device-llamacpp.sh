#!/usr/bin/env bash
# voltad against llama.cpp on one GPU, the same GGUF files, one machine.
#
# Two halves:
#   bash scripts/device-llamacpp.sh --prepare
#     (here, with network) downloads the llama-cpp-python source package
#     pinned below from PyPI, takes the llama.cpp tree it vendors, drops
#     what a CUDA build of the benchmarks does not need (other backends'
#     sources, models, docs) and packs it as build-llamacpp/src.tar.xz
#     (~6 MB), to carry to the GPU machine.
#   bash scripts/device-llamacpp.sh [--build-only] [--deadline S] [--ctx N] [--models SHAPE:TYPE,...] [--arch 90]
#     (on the GPU machine; carry .deps, .tok and build-llamacpp/src.tar.xz)
#     builds llama.cpp's llama-bench and llama-batched-bench there (CUDA,
#     flash attention, CUDA graphs: its release defaults) and voltad's tools
#     (as scripts/device-bench.sh does), writes the random-weight models
#     with voltad-mkmodel, and runs on each file:
#       - prefill of 512 tokens, decode of 64 tokens after 512 (batch 1):
#         llama-bench -p 512 -n 64 -d 512 against voltad-bench -p 512 -n 64
#         --ctx 512 -b 1 (auto and portable kernels);
#       - aggregate decode of 1, 8 and 32 sequences of 512 tokens:
#         llama-batched-bench -npp 512 -ntg 64 -npl 1,8,32 against
#         voltad-bench -b 1,8,32.
#     --ctx N (512 by default) sets the context the decodes start from
#     (-d N, -npp N; voltad-bench --ctx N); prefill stays 512 tokens.
#     The raw outputs go, as one tar file, to $OUT or build-device/out; a
#     table is printed last. --build-only stops after the builds (a first
#     call when the machine's time per call is short: the builds stay in
#     build-llamacpp/ and build-bench/ for the next call). --deadline S starts
#     no model's runs after S seconds (~80 s a model), so that a call with a
#     time limit ends with the models it did run measured and packed.
# The llama.cpp sources are only run, never compiled into voltad.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
pkg=llama-cpp-python
pkg_version=0.3.36
dir=$root/build-llamacpp

if [[ ${1:-} == --prepare ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "device-llamacpp: downloading $pkg $pkg_version (source, ~77 MB) from PyPI..." >&2
  python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
    -d "$tmp" "$pkg==$pkg_version" >&2
  tar -C "$tmp" -xzf "$tmp/llama_cpp_python-$pkg_version.tar.gz"
  src=$tmp/llama_cpp_python-$pkg_version/vendor/llama.cpp
  [[ -f $src/CMakeLists.txt && -d $src/ggml/src/ggml-cuda ]] || {
    echo "device-llamacpp: $pkg $pkg_version has no vendor/llama.cpp with a CUDA backend" >&2
    exit 1
  }
  (cd "$src" && rm -rf models docs media tests examples pocs benches conversion .git* \
    ggml/src/ggml-{et,metal,hexagon,sycl,vulkan,opencl,cann,musa,webgpu,zdnn,kompute,rpc})
  mkdir -p "$dir"
  tar -C "$tmp/llama_cpp_python-$pkg_version/vendor" -cJf "$dir/src.tar.xz" llama.cpp
  echo "device-llamacpp: $dir/src.tar.xz ($(du -h "$dir/src.tar.xz" | cut -f1)); carry build-llamacpp/src.tar.xz" >&2
  exit 0
fi

models="llama3-8b:q4_k_m,llama3-8b:q4_0,qwen3-8b:q4_k_m"
arch=90
build_only=0
deadline=0
ctx=512
while (($#)); do
  case $1 in
    --models) models=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --deadline) deadline=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    *) echo "usage: $0 --prepare | [--build-only] [--deadline S] [--ctx N] [--models SHAPE:TYPE,...] [--arch NN]" >&2; exit 64 ;;
  esac
done
[[ -f $dir/src.tar.xz ]] || { echo "device-llamacpp: no $dir/src.tar.xz: run $0 --prepare here and carry it" >&2; exit 1; }
out=${OUT:-$root/build-device/out}
mkdir -p "$out" "$dir/results" /tmp/voltad-models /tmp/voltad-tok

# llama.cpp: its benchmarks only, for this GPU.
if [[ ! -x $dir/build/bin/llama-bench || ! -x $dir/build/bin/llama-batched-bench ]]; then
  rm -rf "$dir/src" && mkdir -p "$dir/src"
  tar -C "$dir/src" -xJf "$dir/src.tar.xz"
  cmake -S "$dir/src/llama.cpp" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >"$dir/configure.log" 2>&1 \
    || { tail -20 "$dir/configure.log"; exit 1; }
fi
ninja -C "$dir/build" llama-bench llama-batched-bench >"$dir/build.log" 2>&1 &
llama_build=$!

# voltad's tools, as the headline runs build them.
build=$root/build-bench
mkdir -p "$build"
bash scripts/device-build-bench.sh "$build" "$arch"
for spec in ${models//,/ }; do
  shape=${spec%%:*} type=${spec##*:}
  case $shape in qwen*) tok=qwen3 ;; *) tok=llama3 ;; esac
  file=/tmp/voltad-models/$shape-$type.gguf
  [[ -s $file ]] || "$build/bin/voltad-mkmodel" --shape "$shape" --type "$type" --tokenizer /tmp/voltad-tok/$tok -o "$file" 2>&1 | tail -1
done
wait "$llama_build" || { tail -30 "$dir/build.log"; exit 1; }
echo "device-llamacpp: built llama-bench and llama-batched-bench ($(grep -c '\.cu\.o' "$dir/build.log" || true) CUDA objects this call)"
((build_only)) && exit 0

results=$dir/results
rm -f "$results"/*
trap 'tar -C "$results" -cf "$out/llamacpp.tar" .' EXIT
table() {
  python3 - "$results" "$ctx" "$@" <<'PY'
import json, os, sys
results, ctx, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    except (OSError, ValueError):
        pass
    return rows
fmt = lambda v: f"{v:,.1f}" if isinstance(v, (int, float)) else "-"
print(f"| model | engine | prefill 512 | b1 after {ctx} | b8 aggregate | b32 aggregate |")
print("| --- | --- | --- | --- | --- | --- |")
for spec in specs:
    name = spec.replace(":", "-")
    pp = load(f"{results}/{name}-llama-pp512.json") or []
    tg = load(f"{results}/{name}-llama-tg64-d{ctx}.json") or []
    batched = {r.get("pl"): r.get("speed_tg") for r in jsonl(f"{results}/{name}-llama-batched.jsonl")}
    pp_ts = pp[0]["avg_ts"] if pp else None
    tg_ts = tg[0]["avg_ts"] if tg else None
    print(f"| {spec} | llama.cpp | {fmt(pp_ts)} | {fmt(tg_ts)} | {fmt(batched.get(8))} | {fmt(batched.get(32))} |")
    for kernels in ("auto", "portable"):
        d = load(f"{results}/{name}-voltad-{kernels}.json")
        if not d:
            print(f"| {spec} | voltad {kernels} | - | - | - | - |")
            continue
        dec = {r["batch"]: r["tokens_per_second"] for r in d["decode"]}
        print(f"| {spec} | voltad {kernels} | {fmt(d['prefill']['tokens_per_second'])} | {fmt(dec.get(1))} "
              f"| {fmt(dec.get(8))} | {fmt(dec.get(32))} |")
PY
}
lb=$dir/build/bin
for spec in ${models//,/ }; do
  shape=${spec%%:*} type=${spec##*:}
  file=/tmp/voltad-models/$shape-$type.gguf
  name=$shape-$type
  if ((deadline && SECONDS > deadline)); then
    echo "device-llamacpp: past --deadline $deadline s ($SECONDS s): $spec and the rest not run"
    break
  fi
  "$lb/llama-bench" -m "$file" -ngl 99 -fa 1 -p 512 -n 0 -r 3 -o json >"$results/$name-llama-pp512.json" 2>"$results/$name-llama-pp512.log" \
    || tail -5 "$results/$name-llama-pp512.log"
  "$lb/llama-bench" -m "$file" -ngl 99 -fa 1 -p 0 -n 64 -d "$ctx" -r 3 -o json >"$results/$name-llama-tg64-d$ctx.json" 2>"$results/$name-llama-tg64-d$ctx.log" \
    || tail -5 "$results/$name-llama-tg64-d$ctx.log"
  "$lb/llama-batched-bench" -m "$file" -ngl 99 -fa on -c $((32 * (ctx + 64) + 1536)) -b 2048 -ub 512 -npp "$ctx" -ntg 64 -npl 1,8,32 \
    --output-format jsonl >"$results/$name-llama-batched.jsonl" 2>"$results/$name-llama-batched.log" \
    || tail -5 "$results/$name-llama-batched.log"
  for kernels in auto portable; do
    "$build/bin/voltad-bench" -m "$file" -p 512 -n 64 -b 1,8,32 --ctx "$ctx" --kernels "$kernels" --json \
      >"$results/$name-voltad-$kernels.json" 2>"$results/$name-voltad-$kernels.log" \
      || tail -5 "$results/$name-voltad-$kernels.log"
  done
  table "$spec" | tail -3  # as it comes: a call cut short still shows what it measured
done
echo "== voltad (commit ${VOLTAD_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}) and llama.cpp ($pkg $pkg_version), tok/s; raw output: $out/llamacpp.tar"
table ${models//,/ }
