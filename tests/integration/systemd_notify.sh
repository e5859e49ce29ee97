#!/usr/bin/env bash
# sd_notify without systemd: a NOTIFY_SOCKET listener sees the start
# (STATUS, EXTEND_TIMEOUT_USEC, READY=1 after the warm-up), watchdog pings
# that stop while the engine hangs, reloads valid and invalid (SIGHUP and
# voltactl), drain/resume and the stop (STOPPING=1, exit 0).
set -uo pipefail
source "$(dirname "$0")/serve_lib.sh"

# uid 65534 (nobody) may use the API but is no administrator.
EXTRA_SERVER='  allow_users: ["65534"]' write_config "$tmp/voltad.yaml"
python3 "$(dirname "$0")/systemd_notify.py" "$bin/voltad" "$bin/voltactl" "$tmp/voltad.yaml" \
  "$sock" "$tmp"
check "the notify sequence (see above)" test $? -eq 0
finish
