#!/usr/bin/env bash
# Many clients at once, a third hanging up: see serve_concurrency.py.
set -uo pipefail
source "$(dirname "$0")/serve_lib.sh"
MAX_SEQUENCES=8 write_config "$tmp/voltad.yaml"
start_daemon
PYTHONPATH="$(dirname "$0")" python3 "$(dirname "$0")/serve_concurrency.py" "$sock"
check "32 streaming clients with disconnects" test $? -eq 0
check "no warnings about failed connections in the log" test "$(grep -c ' warning ' "$log")" -eq 0
stop_daemon
check "SIGTERM after the storm: exit 0" test "$daemon_rc" -eq 0
finish
