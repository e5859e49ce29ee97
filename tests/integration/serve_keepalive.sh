#!/usr/bin/env bash
# Keep-alive comments while a stream waits, and voltactl's --timeout as a
# stream's idle limit: see serve_keepalive.py.
set -uo pipefail
source "$(dirname "$0")/serve_lib.sh"
MAX_SEQUENCES=1 EXTRA_SERVER='  stream_keepalive: 200ms' write_config "$tmp/voltad.yaml"
start_daemon
VOLTAD_LOG=$log PYTHONPATH="$(dirname "$0")" \
  python3 "$(dirname "$0")/serve_keepalive.py" "$sock" "$bin/voltactl" "$tmp/voltad.yaml" "$daemon_pid"
check "keep-alive comments and voltactl's idle limit" test $? -eq 0
stop_daemon
check "SIGTERM: exit 0" test "$daemon_rc" -eq 0
finish
