#!/usr/bin/env bash
# The placement a running voltad applied at start (issue 6): every thread of
# the daemon (main, I/O, engine, the CPU backend's workers) on the planned
# CPUs with the planned memory nodes allowed, read from
# /proc/<pid>/task/*/status by placement_probe --pid; the same placement in
# /health, /metrics and voltactl status; an explicit placement.cpus; the
# refusals (exit 74). The plan to compare with is voltad --print-placement's
# for the same config on this machine, whatever the machine is.
source "$(dirname "$0")/serve_lib.sh"

json_get() {  # json_get FILE PYTHON-EXPRESSION-ON-j
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}

# start_under PREFIX...: start_daemon, with a command (taskset) before voltad.
start_under() {
  "$@" "$bin/voltad" --config "$tmp/voltad.yaml" >>"$log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 300); do
    curl -s --max-time 2 --unix-socket "$sock" http://localhost/health 2>/dev/null |
      grep -q '"status":"ready"' && return 0
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL voltad did not become ready"
  tail -n 30 "$log"
  exit 1
}

# --- The default placement (auto), started on one CPU: voltad must move
# itself to the plan's CPUs, not keep what it inherited.
write_config "$tmp/voltad.yaml"
"$bin/voltad" --print-placement --config "$tmp/voltad.yaml" --json >"$tmp/plan.json"
check "print-placement plans for this machine" test $? -eq 0
cpus=$(json_get "$tmp/plan.json" "j['plan']['cpus']")
nodes=$(json_get "$tmp/plan.json" "','.join(map(str, j['plan']['nodes']))")
threads=$(json_get "$tmp/plan.json" "j['plan']['threads']")
policy=$(json_get "$tmp/plan.json" "j['plan']['memory_policy']")
gpu=$(json_get "$tmp/plan.json" "(j['plan']['gpu'] or {}).get('bus_id') or 'none'")
echo "plan: CPUs $cpus, nodes '${nodes}', $threads threads, memory $policy, GPU $gpu"
cpu_list() {  # cpu_list LIST: one CPU a line ("0-2,5" -> 0 1 2 5)
  python3 -c "import sys
for r in sys.argv[1].split(','):
    a, _, b = r.partition('-'); print(*range(int(a), int(b or a) + 1), sep='\n')" "$1"
}
inherited=$(cpu_list "$cpus" | tail -1)
start_under taskset -c "$inherited"

"$bin/placement_probe" --pid "$daemon_pid" --cpus "$cpus" ${nodes:+--nodes "$nodes"}
check "every thread of voltad runs on the planned CPUs $cpus (started on CPU $inherited)" test $? -eq 0
n_tasks=$(ls "/proc/$daemon_pid/task" | wc -l)
# main + 1 I/O thread + engine thread + the CPU backend's threads - 1 workers
check "those were all $n_tasks threads, the backend's $threads-thread pool among them" \
  test "$n_tasks" -ge $((threads + 2))
api /health >"$tmp/health.out"
sed '$d' "$tmp/health.out" >"$tmp/health.json"
check "/health: placement.cpus is the plan's" test "$(json_get "$tmp/health.json" "j['placement']['cpus']")" = "$cpus"
check "/health: the CPUs are bound" test "$(json_get "$tmp/health.json" "j['placement']['cpus_bound']")" = True
check "/health: placement.threads is the plan's" test "$(json_get "$tmp/health.json" "j['placement']['threads']")" = "$threads"
check "/health: the memory policy is the plan's" \
  test "$(json_get "$tmp/health.json" "j['placement']['memory_policy']")" = "$policy"
check "/health: the GPU is the plan's" \
  test "$(json_get "$tmp/health.json" "j['placement']['gpu_bus_id'] or 'none'")" = "$gpu"
api /metrics >"$tmp/metrics.txt"
info=$(grep '^voltad_info{' "$tmp/metrics.txt")
check "/metrics: voltad_info has cpus=\"$cpus\"" grep -q "cpus=\"$cpus\"" <<<"$info"
check "/metrics: voltad_info has gpu_bus_id=\"$gpu\"" grep -q "gpu_bus_id=\"$gpu\"" <<<"$info"
check "/metrics: voltad_info has numa_node" grep -q "numa_node=\"${nodes:-none}\"" <<<"$info"
status=$("$bin/voltactl" --socket "$sock" status)
check "voltactl status: a placement line with the CPUs" grep -q "^  placement .*CPUs $cpus" <<<"$status"
check "log: the applied placement" grep -q "placement: .*CPUs $cpus" "$log"
check "log: placement came before any other thread" bash -c "! grep -q 'threads already run' '$log'"
stop_daemon
check "voltad stops with 0" test "$daemon_rc" -eq 0

# --- An explicit CPU list and node: every thread on that one CPU.
one=$(cpu_list "$cpus" | head -1)
write_config "$tmp/voltad.yaml"
printf 'placement:\n  cpus: "%s"\n  numa: "0"\n  membind: bind\n  threads: 2\n' "$one" >>"$tmp/voltad.yaml"
: >"$log"
start_under
"$bin/placement_probe" --pid "$daemon_pid" --cpus "$one" --nodes 0
check "placement.cpus $one: every thread runs on CPU $one only, memory bound to node 0" test $? -eq 0
api /health | sed '$d' >"$tmp/health.json"
check "/health: numa_node 0, policy bind" \
  test "$(json_get "$tmp/health.json" "(j['placement']['numa_node'], j['placement']['memory_policy'])")" = "(0, 'bind')"
check "/health: 2 worker threads as configured" test "$(json_get "$tmp/health.json" "j['placement']['threads']")" = 2
check "log: warned once that 2 threads share 1 core" \
  test "$(grep -c 'placement.threads 2 exceeds the 1 physical cores' "$log")" -eq 1
status=$("$bin/voltactl" --socket "$sock" status)
check "voltactl status: memory bind to node 0, CPUs $one, and the warnings" \
  bash -c 'grep -q "memory bind to node 0; CPUs '"$one"';" <<<"$1" && grep -q "warning.* at start" <<<"$1"' _ "$status"
stop_daemon

# --- Refusals: a node this machine lacks is refused whatever strict says.
write_config "$tmp/voltad.yaml"
printf 'placement:\n  numa: "999"\n' >>"$tmp/voltad.yaml"
"$bin/voltad" --config "$tmp/voltad.yaml" >"$tmp/refused.log" 2>&1
check "placement.numa 999: exit 74" test $? -eq 74
check "  ...says the node does not exist" grep -q "NUMA node 999 does not exist" "$tmp/refused.log"
check "  ...and created no socket" test ! -e "$sock"

if [[ $gpu == none ]] && ! "$bin/voltad" --print-placement --gpu auto >/dev/null 2>&1; then
  # No NVIDIA GPU here: an engine that needs one gets CPUs and memory placed
  # anyway (CUDA may still see a GPU hwloc cannot), unless strict.
  sed 's/backend: cpu/backend: cuda/' "$tmp/voltad.yaml" | sed '/^placement:/,$d' >"$tmp/cuda.yaml"
  printf 'placement:\n  strict: true\n' >>"$tmp/cuda.yaml"
  "$bin/voltad" --config "$tmp/cuda.yaml" >"$tmp/strict.log" 2>&1
  check "no GPU, engine cuda, placement.strict: exit 74" test $? -eq 74
  check "  ...says strict refused and why" grep -q "placement.strict is true .*no NVIDIA GPU" "$tmp/strict.log"
  sed -i 's/strict: true/strict: false/' "$tmp/cuda.yaml"
  "$bin/voltad" --config "$tmp/cuda.yaml" >"$tmp/lenient.log" 2>&1
  check "no GPU, engine cuda, not strict: placement only warns (the engine ends it: 69)" test $? -eq 69
  check "  ...the warning says what was done instead" \
    grep -q "placement: engine.backend is cuda, but .*placed without a GPU" "$tmp/lenient.log"
else
  echo "skip the no-GPU refusals: this machine has an NVIDIA GPU"
fi
finish
