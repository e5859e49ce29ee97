# Sourced by the serve_*.sh tests: a real voltad on a temporary socket with
# the CPU backend and the SmolLM2 demo model, and a small check() helper.
# Exits 77 (skipped) when the demo model cannot be had.
bin=${VOLTAD_BIN_DIR:?}
src=${VOLTAD_SOURCE_DIR:?}
tmp=$(mktemp -d)
chmod 755 "$tmp"  # a second uid must be able to reach the socket (access tests)
sock=$tmp/run/voltad.sock
log=$tmp/voltad.log
daemon_pid=
fails=0

cleanup() {
  if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -KILL "$daemon_pid" 2>/dev/null
    wait "$daemon_pid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

check() {  # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}

finish() {
  if ((fails)); then
    echo "--- daemon log (last 40 lines)"
    tail -n 40 "$log" 2>/dev/null
    echo "$fails check(s) failed"
    exit 1
  fi
  echo "all checks passed"
  exit 0
}

model=$(bash "$src/scripts/fetch-demo-model.sh" 2>/dev/null) || true
if [[ -z $model || ! -s $model ]]; then
  echo "skipped: the SmolLM2 demo model is not available (scripts/fetch-demo-model.sh)"
  exit 77
fi

# write_config FILE; $PER_USER, $PER_USER_CONNECTIONS, $MAX_SEQUENCES, $SHUTDOWN_GRACE, $READ_TIMEOUT, $DBUS
# (server.dbus; off unless set: test daemons run side by side and must not compete for a bus
# name) and $EXTRA_SERVER (indented lines for the server section) adjust it.
write_config() {
  cat >"$1" <<YAML
model:
  path: "$model"
server:
  socket_path: "$sock"
  socket_mode: "0666"
  read_timeout: ${READ_TIMEOUT:-2s}
  write_timeout: 5s
  max_header_bytes: 4KiB
  max_body_bytes: 64KiB
  max_requests_per_user: ${PER_USER:-64}
  max_connections_per_user: ${PER_USER_CONNECTIONS:-256}
  shutdown_grace: ${SHUTDOWN_GRACE:-10s}
  dbus: ${DBUS:-off}
${EXTRA_SERVER:-}
engine:
  backend: cpu
  max_context: 512
  max_sequences: ${MAX_SEQUENCES:-8}
  max_batch_tokens: 256
log:
  level: debug
YAML
}

# start_daemon: starts voltad on $tmp/voltad.yaml and waits for /health ready.
start_daemon() {
  [[ -f $tmp/voltad.yaml ]] || write_config "$tmp/voltad.yaml"
  "$bin/voltad" --config "$tmp/voltad.yaml" >>"$log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 300); do
    if curl -s --max-time 2 --unix-socket "$sock" http://localhost/health 2>/dev/null | grep -q '"status":"ready"'; then
      return 0
    fi
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL voltad did not become ready"
  tail -n 30 "$log"
  exit 1
}

# stop_daemon: SIGTERM, wait; sets daemon_rc.
stop_daemon() {
  kill -TERM "$daemon_pid"
  wait "$daemon_pid"
  daemon_rc=$?
  daemon_pid=
}

api() {  # api PATH [curl args...]: the body, then the status on its own line
  local path=$1; shift
  curl -s --max-time 120 -w '\n%{http_code}' --unix-socket "$sock" "http://localhost$path" "$@"
}
