#!/usr/bin/env bash
# Many clients at once, a third hanging up: see serve_concurrency.py.
set -uo pipefail
source "$(dirname "$0")/serve_lib.sh"
MAX_SEQUENCES=8 write_config "$tmp/voltad.yaml"
start_daemon
before=$(wc -l <"$log")  # start-up may warn (placement on a restricted runner): not counted
PYTHONPATH="$(dirname "$0")" python3 "$(dirname "$0")/serve_concurrency.py" "$sock"
check "32 streaming clients with disconnects" test $? -eq 0
check "no warnings during the storm (failed connections)" \
  test "$(tail -n +$((before + 1)) "$log" | grep -c ' warning ')" -eq 0
stop_daemon
check "SIGTERM after the storm: exit 0" test "$daemon_rc" -eq 0
finish
