#!/usr/bin/env bash
# The VRAM guard while serving, without a GPU: the daemon runs on the CPU
# backend and reads "the card" from a file (VOLTAD_TEST_FAKE_VRAM, test only)
# that vram_guard.py rewrites to play another process growing and shrinking.
# What is checked: degraded above memory.vram_fraction (503 + Retry-After for
# new requests, the running stream finishes), no flapping inside the
# hysteresis band, ready again below it; /health, /metrics, voltactl status
# and the log show each transition.
set -uo pipefail
source "$(dirname "$0")/serve_lib.sh"
write_config "$tmp/voltad.yaml"
cat >>"$tmp/voltad.yaml" <<YAML
memory:
  vram_fraction: 0.90
  hysteresis: 0.05
  monitor_interval: 100ms
YAML
fake=$tmp/vram
echo "10GiB 100GiB" >"$fake"
export VOLTAD_TEST_FAKE_VRAM=$fake
start_daemon
unset VOLTAD_TEST_FAKE_VRAM

PYTHONPATH="$(dirname "$0")" python3 "$(dirname "$0")/vram_guard.py" "$sock" "$fake" "$bin/voltactl"
check "degraded and back (vram_guard.py)" test $? -eq 0
check "the log names the test-only source" grep -q "VOLTAD_TEST_FAKE_VRAM is set" "$log"
check "the log has the transition to degraded, with the numbers" \
  grep -q "degraded: the card's memory in use by all processes is 95.00 GiB of 100.00 GiB" "$log"
check "the log has the way back" grep -q "ready again: .* 50.00 GiB of 100.00 GiB" "$log"
check "exactly one transition each way (no flapping)" \
  test "$(grep -c 'degraded: the card' "$log"):$(grep -c 'ready again: the card' "$log")" = 1:1
stop_daemon
check "SIGTERM: exit 0" test "$daemon_rc" -eq 0
finish
