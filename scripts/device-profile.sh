#!/usr/bin/env bash
# Where a decode step's time goes, kernel by kernel, on the GPU machine: runs
# voltad-bench (batch 1 or --batch N sequences, no graphs, a few steps)
# under Nsight Compute and sums each kernel's duration over the decode
# steps. Run after scripts/device-bench.sh has built build-bench/ and
# written the model:
#   bash scripts/device-profile.sh [--model /tmp/voltad-models/llama3-8b-q4_k_m.gguf] [--steps 4] [--batch 1]
#                                  [--kernels auto|portable]
#                                  [--ctx 512]
# Prints two tables (share, us, launches, us a launch, kernel): the totals
# over every launch of the run (voltad-bench's two 1-token prefills, its 3
# warm-up steps and the --steps decode steps), then a step's average over
# the measured decode steps alone (a step ends at the sampler's
# kernel_topk_merge). The CSV goes to $OUT. The decode steps attend to
# --ctx positions (voltad-bench starts them there; -p only sizes its
# prefill run).
#   bash scripts/device-profile.sh --stalls REGEX [--skip N] [--count N] [--model ...]
#                                  [--batch N] [--steps N] [--ctx N]
# instead profiles --count launches (8) of the kernels whose names match
# REGEX (Nsight's -k: the plain function name, e.g. kernel_narrow_sm80,
# without namespaces or template arguments), after skipping --skip of them (200: past the prompt and the first
# layers), with Nsight Compute's warp state and source sections, and prints where their warps stall
# (scripts/ncu-stalls.py: reasons, and the SASS instructions with the most
# samples), with each launch's duration, DRAM throughput and issue rate.
# --name-base demangled matches REGEX against the whole demangled name, template
# arguments included (e.g. 'kernel_gemm_narrow.*\(int\)32,' for the 32-token
# blocks alone).
# Comparison switches pass through the environment, e.g.
# VOLTAD_MATVEC_STREAM=0 bash scripts/device-profile.sh --stalls kernel_matvec
set -euo pipefail
cd "$(dirname "$0")/.."
model=/tmp/voltad-models/llama3-8b-q4_k_m.gguf
steps=4
batch=1
ctx=512
kernel_set=auto
stalls=""
skip=200
count=8
name_base=function
while (($#)); do
  case $1 in
    --model) model=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --kernels) kernel_set=$2; shift 2 ;;
    --stalls) stalls=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    --name-base) name_base=$2; shift 2 ;;
    *) echo "usage: $0 [--model FILE] [--steps N] [--batch N] [--ctx N] [--kernels auto|portable] [--stalls REGEX [--skip N] [--count N] [--name-base function|demangled]]" >&2
       exit 64 ;;
  esac
done
out=${OUT:-$PWD/build-device/out}
mkdir -p "$out"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
[[ -n $ncu ]] || { echo "device-profile: no ncu on this machine" >&2; exit 1; }
if [[ -n $stalls ]]; then
  "$ncu" --clock-control none --kernel-name-base "$name_base" -k "regex:$stalls" --launch-skip "$skip" --launch-count "$count" \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section SourceCounters \
    --section Occupancy --section LaunchStats \
    --import-source no -f -o "$out/stalls" \
    build-bench/bin/voltad-bench -m "$model" -p 1 -n "$steps" -b "$batch" --ctx "$ctx" --repeat 1 --no-graphs --kernels "$kernel_set" \
    >"$out/stalls-ncu.log" 2>&1 || { tail -20 "$out/stalls-ncu.log"; exit 1; }
  "$ncu" -i "$out/stalls.ncu-rep" --page details --csv >"$out/stalls-details.csv"
  python3 - "$out/stalls-details.csv" <<'PY'
import csv, sys
want = {"Duration", "DRAM Throughput", "Issued Warp Per Scheduler", "Achieved Active Warps Per SM",
        "Registers Per Thread", "Grid Size", "L2 Cache Throughput", "L1/TEX Cache Throughput"}
rows = list(csv.reader(open(sys.argv[1])))
head = rows[0]
ii, ki, mi, ui, vi = (head.index(c) for c in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
seen = {}
for r in rows[1:]:
    if len(r) > vi and r[mi] in want:
        seen.setdefault((r[ii], r[ki][:90]), []).append(f"{r[mi]} {r[vi]} {r[ui]}".strip())
for (i, k), v in seen.items():
    print(f"launch {i}: {k}\n    " + "; ".join(v))
PY
  "$ncu" -i "$out/stalls.ncu-rep" --page source --csv --print-source sass >"$out/stalls-source.csv"
  python3 scripts/ncu-stalls.py "$out/stalls-source.csv"
  exit 0
fi
# A prompt of 1 token keeps voltad-bench's prefill runs (two, with --repeat
# 1) to single-token steps; the second table leaves them and the warm-up
# out.
csv=$out/profile-decode-b$batch.csv
"$ncu" --clock-control none --csv --metrics gpu__time_duration.sum \
  build-bench/bin/voltad-bench -m "$model" -p 1 -n "$steps" -b "$batch" --ctx "$ctx" --repeat 1 --no-graphs --kernels "$kernel_set" \
  >"$csv" 2>"$out/profile-ncu.log" || { tail -20 "$out/profile-ncu.log"; exit 1; }
python3 - "$csv" "$steps" <<'PY'
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
steps = int(sys.argv[2])
head = rows[0]
ki, vi, ui = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
seq = []
for r in rows[1:]:
    if not r[vi].replace(",", "").replace(".", "").isdigit(): continue
    v = float(r[vi].replace(",", ""))
    v = v / 1000 if r[ui] in ("nsecond", "ns") else v * (1000 if r[ui] in ("msecond", "ms") else 1)
    name = re.sub(r"\(.*", "", r[ki]).replace("void ", "")
    seq.append((re.sub(r"voltad::kernels::", "", name), v))

def table(part, title, per=1):
    total = collections.Counter(); count = collections.Counter()
    for name, v in part:
        total[name] += v; count[name] += 1
    s = sum(total.values())
    print(f"== {title}: {sum(count.values())} launches, {s:.0f} us of kernel time" +
          (f" ({s / per:.0f} us a step)" if per > 1 else ""))
    for name, v in total.most_common(25):
        print(f"{v/s*100:5.1f}%  {v/per:9.1f} us  {count[name]/per:6.1f} x  {v/count[name]:7.2f} us  {name[:110]}")

table(seq, "every launch")
# The last decode steps: the segments before the final sampler kernels.
ends = [i for i, (name, _) in enumerate(seq) if "kernel_topk_merge" in name]
n = min(steps, len(ends) - 1)
if n >= 1:
    table(seq[ends[-n - 1] + 1:ends[-1] + 1], f"the last {n} decode steps, a step", per=n)
else:
    print("no decode steps found (no kernel_topk_merge launches): the per-step table is left out")
PY
