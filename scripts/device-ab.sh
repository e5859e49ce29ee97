#!/usr/bin/env bash
# A/B comparison on a GPU machine: one voltad-bench binary run under several
# environments (the backend's comparison switches, e.g.
# VOLTAD_ROPE_IN_ATTENTION=0, VOLTAD_GEMM_MIN_TOKENS=4), each model and
# variant --reps times with the variants' order alternating, so that a
# machine drifting during the run favours none. Prints tok/s per batch, one
# row per run, then the median per variant. The runs' JSON goes, as one tar
# file, to $OUT (the device tool's folder) or build-device/out.
#
# Needs what scripts/device-bench.sh needs (.deps, .tok), which builds the
# tools and writes the models:
#   bash scripts/device-ab.sh [--models llama3-8b:q4_k_m] [--batches 1,8,32] [--ctx 512]
#        [--kernels auto] [--reps 2] [--steps 128] [--prompt 16] [--tests REGEX]
#        -- base VOLTAD_ROPE_IN_ATTENTION=0 ...
# --prompt N: the prefill each run times first (voltad-bench -p; 16 by
# default, which keeps runs short); with N > 16 the medians add the
# prefill's tok/s (pre=), so a prefill A/B is --prompt 512 --steps 4.
# --tests REGEX also builds and runs those GPU tests (scripts/device-test.sh
# --tests=REGEX) while the bench builds, and runs no A/B if they fail: a
# change's tests and its A/B in one device call.
# Each variant after `--` is `base` (no change) or a comma list of
# NAME=VALUE (environment) and --flag=value items (voltad-bench arguments,
# e.g. --omit=attention; a list inside a value takes +: --omit=norms+swiglu),
# such as VOLTAD_ROPE_IN_ATTENTION=0,--omit=norms; bin=PATH runs another
# voltad-bench binary (a build of another version of a file), and a NAME of
# --tree (or `before`) that version's build, e.g. p1,VOLTAD_X=0.
# --before DIR builds a second voltad-bench first, with the files under DIR
# (paths relative to the tree: DIR/kernels/x.cu stands for kernels/x.cu)
# in place of the tree's, then puts the tree's back; the variant `before`
# runs that binary. Keep DIR git-ignored (/.before/ is) and carry it:
#   mkdir -p .before/kernels && git show main:kernels/x.cu > .before/kernels/x.cu
#   bash scripts/device-ab.sh --before .before --tests gemm -- base before
# (carry [".deps", ".tok", ".before"]): a change and the code before it,
# one call, the tests on the change.
# --tree NAME=DIR (repeatable) does the same for another version of the
# code, run by the variant NAME, and with --tests runs the tests on it too
# (one at a time, before the A/B; a version whose tests fail is left out of
# it). Files DIR has and the tree has not are added for the build, then
# removed. Several probes against the tree in one call, each tested:
#   bash scripts/device-ab.sh --tree p1=.p1 --tree p2=.p2 --tests gemm -- base p1 p2
# (scripts/branch-files.sh BRANCH DIR makes such a DIR from a branch.)
set -euo pipefail
cd "$(dirname "$0")/.."
models="llama3-8b:q4_k_m"
batches="1,8,32"
ctx=512
kernels=auto
reps=2
steps=128
prompt=16
tests=""
trees=()  # NAME=DIR: other versions of files; --before DIR is before=DIR
while (($#)); do
  case $1 in
    --models) models=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --kernels) kernels=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    --tests) tests=$2; shift 2 ;;
    --before) trees+=("before=$2"); shift 2 ;;
    --tree)
      [[ $2 =~ ^[A-Za-z0-9_.-]+=.+ && ${2%%=*} != base ]] ||
        { echo "device-ab: --tree wants NAME=DIR (NAME not 'base'), not '$2'" >&2; exit 64; }
      trees+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--models M,...] [--batches B,...] [--ctx N] [--kernels K] [--reps N] [--steps N] [--prompt N] [--tests REGEX] [--before DIR] [--tree NAME=DIR]... -- VARIANT..." >&2
       exit 64 ;;
  esac
done
# A --tests pattern that picks no gpu test stops the call here, before the
# device builds anything (run 59's '^test_gemm$' ran none, and the A/B
# went on).
if [[ -n $tests ]]; then
  bash scripts/device-test.sh --tests="$tests" --select-only || exit 2
fi
(($#)) || { echo "device-ab: name the variants after --, e.g. base VOLTAD_ROPE_IN_ATTENTION=0" >&2; exit 64; }
variants=("$@")
out=${OUT:-$PWD/build-device/out}
work=$PWD/build-device/ab
rm -rf "$work"
mkdir -p "$out" "$work"
trap 'tar -C "$work" -cf "$out/ab.tar" --exclude=build --exclude=tree-out --exclude=tree-bin --exclude=after .' EXIT
# Each other version's binary: its files in place, built (and with --tests
# and a --tree, tested), then the tree's files back (device-fresh-sources.sh
# rebuilds them by content). Before the tree's own tests start, which build
# the tree as it is.
declare -A tree_bin=()
for spec in "${trees[@]}"; do
  name=${spec%%=*} dir=${spec#*=}
  [[ -d $dir ]] || { echo "device-ab: $name: $dir: no such folder" >&2; exit 64; }
  mapfile -t swapped < <(cd "$dir" && find . -type f -printf '%P\n')
  ((${#swapped[@]})) || { echo "device-ab: $name: $dir holds no files" >&2; exit 64; }
  rm -rf "$work/after"
  for f in "${swapped[@]}"; do
    if [[ -f $f ]]; then
      mkdir -p "$work/after/$(dirname "$f")"
      cp "$f" "$work/after/$f"
    else  # the tree has none: removed after
      mkdir -p "$(dirname "$f")"
    fi
    cp "$dir/$f" "$f"
  done
  tree_rc=0
  OUT="$work/tree-out/$name" bash scripts/device-bench.sh --models "$models" --ctx "$ctx" --batches 1 \
    --kernels "$kernels" >"$work/build-$name.log" 2>&1 || tree_rc=$?
  mkdir -p "$work/tree-bin"
  ((tree_rc == 0)) && cp build-bench/bin/voltad-bench "$work/tree-bin/$name"
  test_rc=0
  if ((tree_rc == 0)) && [[ -n $tests && $name != before ]]; then
    OUT="$work/tests-$name" bash scripts/device-test.sh --tests="$tests" >"$work/tests-$name.log" 2>&1 ||
      test_rc=$?
    echo "device-ab: the tests on '$name':"
    sed -n '/== device-test summary ==/,$p' "$work/tests-$name.log"
  fi
  for f in "${swapped[@]}"; do
    if [[ -f $work/after/$f ]]; then cp "$work/after/$f" "$f"; else rm -f "$f"; fi
  done
  ((tree_rc == 0)) || { tail -20 "$work/build-$name.log"; exit 1; }
  if ((test_rc == 0)); then
    tree_bin[$name]=$work/tree-bin/$name
    echo "device-ab: '$name' is ${swapped[*]} from $dir"
  else
    echo "device-ab: the tests failed on '$name' (tests-$name.log in ab.tar): left out of the A/B" >&2
  fi
done
tests_pid=""
if [[ -n $tests ]]; then
  OUT="$work/tests" bash scripts/device-test.sh --tests="$tests" >"$work/tests.log" 2>&1 &
  tests_pid=$!
fi
# The bench builds the tools and writes the models (batch 1 at the first
# model's context: cheap); a prebuilt binary may be named instead.
bench=${VOLTAD_BENCH_BIN:-}
if [[ -z $bench ]]; then
  OUT="$work/build" bash scripts/device-bench.sh --models "$models" --ctx "$ctx" --batches 1 \
    --kernels "$kernels" >"$work/build.log" 2>&1 || { tail -20 "$work/build.log"; exit 1; }
  bench=build-bench/bin/voltad-bench
fi
if [[ -n $tests_pid ]]; then  # before the timed runs: nothing else on the GPU then
  tests_rc=0
  wait "$tests_pid" || tests_rc=$?
  sed -n '/== device-test summary ==/,$p' "$work/tests.log"
  ((tests_rc == 0)) || { echo "device-ab: the tests failed (tests.log and tests/ in ab.tar); no A/B" >&2; exit 1; }
fi
model_dir=${VOLTAD_MODEL_DIR:-/tmp/voltad-models}

rows=()
for spec in ${models//,/ }; do
  model=$model_dir/${spec%%:*}-${spec##*:}.gguf
  for ((rep = 1; rep <= reps; ++rep)); do
    order=("${variants[@]}")
    if ((rep % 2 == 0)); then  # alternate the order
      order=()
      for ((i = ${#variants[@]} - 1; i >= 0; --i)); do order+=("${variants[i]}"); done
    fi
    for v in "${order[@]}"; do
      env_args=() bench_args=() items=()
      [[ $v == base ]] || IFS=, read -r -a items <<<"$v"
      run_bench=$bench skip=""
      for item in "${items[@]}"; do
        if [[ $item == bin=* ]]; then
          run_bench=${item#bin=}
        elif [[ $item == --* ]]; then
          bench_args+=("${item%%=*}")
          [[ $item == *=* ]] && { value=${item#*=}; bench_args+=("${value//+/,}"); }
        elif [[ $item != *=* ]]; then  # a version's binary (--before, --tree)
          if [[ -v tree_bin[$item] ]]; then
            run_bench=${tree_bin[$item]}
          elif [[ " ${trees[*]} " == *" $item="* ]]; then
            skip=1  # its tests failed
          else
            echo "device-ab: variant '$v': '$item' is no --tree NAME (nor 'before' with --before)" >&2
            exit 64
          fi
        else
          env_args+=("$item")
        fi
      done
      [[ -n $skip ]] && continue
      json=$work/ab-${spec//:/-}-${v//[^A-Za-z0-9_=.-]/_}-$rep.json
      if ! env "${env_args[@]}" "$run_bench" -m "$model" -p "$prompt" -n "$steps" -b "$batches" --ctx "$ctx" \
        --kernels "$kernels" "${bench_args[@]}" --json >"$json"; then
        echo "device-ab: $spec under '$v' (run $rep) failed; left out" >&2
        continue
      fi
      rows+=("$spec	$v	$json")
    done
  done
done

printf '%s\n' "${rows[@]}" | PROMPT=$prompt python3 -c '
import json, os, statistics, sys
with_prefill = int(os.environ["PROMPT"]) > 16
label = lambda b: b if b == "pre" else f"b{b}"
runs = {}
for line in sys.stdin:
    spec, variant, path = line.rstrip("\n").split("\t")
    d = json.load(open(path))
    tps = {r["batch"]: r["tokens_per_second"] for r in d["decode"]}
    if with_prefill:
        tps["pre"] = d["prefill"]["tokens_per_second"]
    runs.setdefault((spec, variant), []).append(tps)
    print(f"{spec:20} {variant:40} " + " ".join(f"{label(b)}={t:.1f}" for b, t in tps.items()))
print("== median per variant (tok/s)")
for (spec, variant), rs in runs.items():
    print(f"{spec:20} {variant:40} " +
          " ".join(f"{label(b)}={statistics.median(r[b] for r in rs):.1f}" for b in rs[0]))
'
