#!/usr/bin/env bash
# voltad --print-placement through the real binary (machines read from XML,
# and this one), and placement_probe --pid against another process.
set -uo pipefail
bin=${VOLTAD_BIN_DIR:?}
src=${VOLTAD_SOURCE_DIR:?}
topo=$src/tests/fixtures/topologies
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; [[ -n ${sleeper:-} ]] && kill "$sleeper" 2>/dev/null' EXIT
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
json_get() {  # json_get FILE PYTHON-EXPRESSION-ON-j
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}

out=$("$bin/voltad" --print-placement --topology-xml "$topo/nvidiaDGX2.xml" --gpu 0000:b7:00.0 2>&1); rc=$?
check "DGX-2 by bus id: exit 0" test "$rc" -eq 0
check "DGX-2: lists 16 GPUs" test "$(grep -c '^    #[0-9]' <<<"$out")" -eq 16
check "DGX-2: the GPU's node and cores" grep -q "NUMA node:    node 1 (the GPU's node)" <<<"$out"
check "DGX-2: CUDA sees it by UUID" grep -q "CUDA_VISIBLE_DEVICES=GPU-27ce06e8-97e8-a3d3-f1e7-f81e0dff7929" <<<"$out"
check "an XML plan binds nothing" grep -q "nothing can be bound" <<<"$out"

"$bin/voltad" --print-placement --topology-xml "$topo/32em64t-2n8c2t-pci-normalio.xml" --json >"$tmp/box.json"
check "2-socket JSON: exit 0" test $? -eq 0
check "2-socket JSON: auto picks the CUDA K40m" test "$(json_get "$tmp/box.json" "j['plan']['gpu']['bus_id']")" = 0000:84:00.0
check "2-socket JSON: node 1" test "$(json_get "$tmp/box.json" "j['plan']['nodes']")" = "[1]"
check "2-socket JSON: AMD listed as never used" \
  test "$(json_get "$tmp/box.json" "[d['bus_id'] for d in j['machine']['ignored_display_devices']]")" = "['0000:05:03.0', '0000:84:00.1']"

err=$("$bin/voltad" --print-placement --topology-xml "$topo/32em64t-2n8c2t-pci-normalio.xml" --gpu 0000:84:00.1 2>&1 >/dev/null); rc=$?
check "the AMD device: exit 74" test "$rc" -eq 74
check "the AMD device: not an NVIDIA GPU" grep -q "0000:84:00.1 is not an NVIDIA GPU" <<<"$err"
# A --topology-xml file that cannot be read (66) or parsed (65): sysexits'
# codes, not placement.strict's 74, and the message names the file.
err=$("$bin/voltad" --print-placement --topology-xml "$tmp/none.xml" 2>&1 >/dev/null); rc=$?
check "--topology-xml, no such file: exit 66" test "$rc" -eq 66
check "--topology-xml, no such file: names it" grep -q "$tmp/none.xml: cannot read the topology XML" <<<"$err"
echo 'this is not XML' >"$tmp/garbage.xml"
err=$("$bin/voltad" --print-placement --topology-xml "$tmp/garbage.xml" 2>&1 >/dev/null); rc=$?
check "--topology-xml, not XML: exit 65" test "$rc" -eq 65
check "--topology-xml, not XML: names it" grep -q "$tmp/garbage.xml: hwloc could not read this topology XML" <<<"$err"
"$bin/voltad" --print-placement --gpu banana >/dev/null 2>&1
check "bad --gpu: exit 64" test $? -eq 64
"$bin/voltad" --json >/dev/null 2>&1
check "--json without --print-placement: exit 64" test $? -eq 64
printf 'placement:\n  numa: 7\n' >"$tmp/node7.yaml"
err=$("$bin/voltad" --print-placement --config "$tmp/node7.yaml" --topology-xml "$topo/h200-1socket.xml" 2>&1 >/dev/null); rc=$?
check "node out of range: exit 74" test "$rc" -eq 74
check "node out of range: says which nodes exist" grep -q "NUMA node 7 does not exist in .*h200-1socket.xml (its nodes: 0)" <<<"$err"

# A machine without NVIDIA GPUs (the 2-socket box with its NVIDIA devices
# taken out), planned as the daemon plans at start: with placement.gpu auto
# the CUDA backend gets CPUs and memory without a GPU (a shortfall, shown;
# CUDA then decides), and a GPU, node or CPU the config names that the
# machine lacks is 74, whatever the backend.
python3 - "$topo/32em64t-2n8c2t-pci-normalio.xml" "$tmp/nogpu.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
tree = ET.parse(sys.argv[1])
for parent in tree.iter():
    for child in list(parent):
        if child.get("type") == "PCIDev" and "[10de:" in child.get("pci_type", ""):
            parent.remove(child)
tree.write(sys.argv[2])
PY
out=$("$bin/voltad" --print-placement --topology-xml "$tmp/nogpu.xml" 2>&1); rc=$?
check "no NVIDIA GPU, CUDA backend, gpu auto: exit 0" test "$rc" -eq 0
check "... CPUs and memory placed without a GPU, said" \
  grep -q "CPUs and memory are placed without a GPU" <<<"$out"
check "... the GPU line does not say the backend needs none, and the stop at start is said" \
  test "$(grep -c "engine.backend needs none" <<<"$out")" -eq 0 \
  -a "$(grep -c "though engine.backend cuda needs one" <<<"$out")" -eq 1 \
  -a "$(grep -c "voltad stops there (exit 69)" <<<"$out")" -eq 1
printf 'placement:\n  gpu: "0"\n' >"$tmp/gpu0.yaml"
err=$("$bin/voltad" --print-placement --config "$tmp/gpu0.yaml" --topology-xml "$tmp/nogpu.xml" 2>&1 >/dev/null); rc=$?
check "no NVIDIA GPU, gpu 0 named: exit 74" test "$rc" -eq 74
printf 'placement:\n  numa: 7\n' >"$tmp/cuda-node7.yaml"
err=$("$bin/voltad" --print-placement --config "$tmp/cuda-node7.yaml" --topology-xml "$tmp/nogpu.xml" 2>&1 >/dev/null); rc=$?
check "no NVIDIA GPU, CUDA backend, gpu auto, node 7: exit 74 naming the node" \
  test "$rc" -eq 74 -a "$(grep -c "NUMA node 7 does not exist" <<<"$err")" -eq 1
printf 'engine:\n  backend: cpu\nplacement:\n  numa: 7\n' >"$tmp/cpu-node7.yaml"
err=$("$bin/voltad" --print-placement --config "$tmp/cpu-node7.yaml" --topology-xml "$tmp/nogpu.xml" 2>&1 >/dev/null); rc=$?
check "no NVIDIA GPU, CPU backend, node out of range: exit 74" test "$rc" -eq 74
check "... and says which nodes exist" grep -q "NUMA node 7 does not exist" <<<"$err"
printf 'engine:\n  backend: cpu\n' >"$tmp/cpu-only.yaml"
"$bin/voltad" --print-placement --config "$tmp/cpu-only.yaml" --topology-xml "$tmp/nogpu.xml" >/dev/null 2>&1
check "no NVIDIA GPU, CPU backend: exit 0" test $? -eq 0

# This machine, planned for the CPU backend so that it needs no GPU.
printf 'engine:\n  backend: cpu\nplacement:\n  numa: 0\n' >"$tmp/cpu.yaml"
"$bin/voltad" --print-placement --config "$tmp/cpu.yaml" --json >"$tmp/here.json"
check "this machine: exit 0" test $? -eq 0
check "this machine: the plan is for it" test "$(json_get "$tmp/here.json" "j['plan']['for_this_system']")" = True

# --pid: another process, bound from outside with taskset, checked from /proc.
cpu=$(json_get "$tmp/here.json" "j['plan']['cpus'].split(',')[0].split('-')[0]")
taskset -c "$cpu" sleep 60 &
sleeper=$!
# taskset execs sleep only once the mask is set: until then /proc shows the inherited one.
for _ in $(seq 200); do [[ $(cat "/proc/$sleeper/comm" 2>/dev/null) == sleep ]] && break; sleep 0.05; done
"$bin/placement_probe" --pid "$sleeper" --cpus "$cpu" --nodes 0
check "probe --pid: a process on CPU $cpu is seen there" test $? -eq 0
"$bin/placement_probe" --pid "$sleeper" --cpus "$cpu,999" >/dev/null
check "probe --pid: a different CPU list is a mismatch" test $? -eq 1

((fails == 0)) || { echo "$fails check(s) failed"; exit 1; }
