#!/usr/bin/env bash
# Nsight Compute's memory counters for the batch-1 streaming matvecs on the
# GPU machine: builds kernels/dev/bench_stream.cu (seconds) and profiles one
# launch of each kernel instance whose demangled name matches a pattern,
# printing the Speed of Light, memory workload and occupancy sections (DRAM
# throughput, L1/L2 hit rates, warps an SM). The default patterns: the
# packed Q4_K kernel at one warp a row group, the tiled-layout probe
# (bench_stream's Int4KTiledProbe: the same bytes, each warp step
# contiguous) and the Q6_K kernel. PERFORMANCE.md run 22 has the first two
# readings' context.
#   bash scripts/device-stream-counters.sh ['regex' ...]
set -uo pipefail
cd "$(dirname "$0")/.."
patterns=("$@")
((${#patterns[@]})) || patterns=('kernel_matvec_stream<.*Int4Chunk[^,]*, [^,]*4, [^,]*1>' 'Int4KTiledProbe' 'kernel_matvec_stream<.*Int6Chunk')
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
[[ -n $ncu ]] || { echo "device-stream-counters: no ncu on this machine" >&2; exit 1; }
work=$(mktemp -d)
nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -lineinfo -I. kernels/dev/bench_stream.cu \
  -o "$work/bench_stream" || exit 1
rc=0
for p in "${patterns[@]}"; do
  echo "=== $p"
  if ! "$ncu" --clock-control none --kernel-name-base demangled -k "regex:$p" --launch-skip 8 \
      --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
      -f -o "$work/r" "$work/bench_stream" >"$work/ncu.log" 2>&1 || [[ ! -s $work/r.ncu-rep ]]; then
    tail -5 "$work/ncu.log"; rc=1; continue
  fi
  "$ncu" -i "$work/r.ncu-rep" --page details --csv | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
h = rows[0]
ki, mi, ui, vi = (h.index(c) for c in ("Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
want = ("Duration", "DRAM Throughput", "Memory Throughput", "L1/TEX Hit Rate", "L2 Hit Rate",
        "Mem Busy", "Compute (SM) Throughput", "Achieved Active Warps Per SM",
        "Theoretical Active Warps per SM", "Block Limit Registers")
print(rows[1][ki][:110])
for r in rows[1:]:
    if len(r) > vi and r[mi] in want:
        print(f"  {r[mi]:36} {r[vi]} {r[ui]}")
'
  rm -f "$work/r.ncu-rep"
done
rm -rf "$work"
exit $rc
