#!/usr/bin/env bash
# The socket's life: parent directory created, a live socket is not taken
# over (exit 73), a stale one is replaced, mode from the config; a CUDA
# config without a CUDA backend fails clearly (exit 69); max_connections.
set -uo pipefail
source "$(dirname "$0")/serve_lib.sh"

check "the socket's directory does not exist yet" test ! -e "$tmp/run"
# (A long read_timeout: the two idle connections held below must not time out first.)
READ_TIMEOUT=30s EXTRA_SERVER='  max_connections: 2' write_config "$tmp/voltad.yaml"
start_daemon
check "parent directory created 0755" test "$(stat -c %a "$tmp/run")" = 755
check "socket mode from the config" test "$(stat -c %a "$sock")" = 666

# A second daemon on the same socket: refused, the first keeps serving.
"$bin/voltad" --config "$tmp/voltad.yaml" >"$tmp/second.log" 2>&1
rc=$?
check "a live socket: the second daemon exits 73" test "$rc" -eq 73
check "a live socket: says another process listens" grep -q "already listening on $sock" "$tmp/second.log"
check "the first daemon still answers" test "$(api /health | tail -n 1)" = 200

# max_connections 2: hold two idle connections; the third is answered 503.
python3 - "$sock" <<'PY'
import socket, sys, time
path = sys.argv[1]
held = []
for _ in range(2):
    s = socket.socket(socket.AF_UNIX); s.connect(path); held.append(s)
time.sleep(0.3)
s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(path)
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
data = b""
while b"\r\n\r\n" not in data:
    part = s.recv(4096)
    if not part: break
    data += part
print(data.split(b"\r\n")[0].decode())
ok = data.startswith(b"HTTP/1.1 503") and b"Retry-After" in data
s.close()
# An administrator's /admin request (this test runs as root or as the
# daemon's user) is answered past it: resume while serving, 409.
s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(path)
s.sendall(b"POST /admin/resume HTTP/1.1\r\nHost: x\r\n\r\n")
data = b""
while b"\r\n\r\n" not in data:
    part = s.recv(4096)
    if not part:
        break
    data += part
print(data.split(b"\r\n")[0].decode())
admin_ok = data.startswith(b"HTTP/1.1 409") or data.startswith(b"HTTP/1.1 200")
sys.exit(0 if ok and admin_ok else 1)
PY
check "over max_connections: 503 with Retry-After; an administrator's /admin request answered" test $? -eq 0

# A daemon killed hard leaves its socket file; the next start replaces it.
kill -KILL "$daemon_pid"; wait "$daemon_pid" 2>/dev/null; daemon_pid=
check "after SIGKILL the socket file is left behind" test -S "$sock"
start_daemon
check "a stale socket is replaced" grep -q "replacing stale socket $sock" "$log"
check "and the new daemon answers" test "$(api /health | tail -n 1)" = 200
stop_daemon

# SIGTERM with a long stream running and shutdown_grace 2s (the two requests
# made while draining need the time; the 490-token stream takes far longer).
SHUTDOWN_GRACE=2s write_config "$tmp/voltad.yaml"
start_daemon
PYTHONPATH="$(dirname "$0")" python3 "$(dirname "$0")/serve_drain.py" "$sock" "$daemon_pid"
check "drain: refuses new work, cancels the rest after the grace period" test $? -eq 0
wait "$daemon_pid"
check "drain: the daemon exits 0" test $? -eq 0
daemon_pid=
check "drain: logged the cancellation" grep -q "shutdown_grace has passed with 1 request in flight; cancelling it" "$log"

# A second SIGTERM cuts a long grace short, and the log says that, not
# that the grace has passed.
SHUTDOWN_GRACE=60s write_config "$tmp/voltad.yaml"
start_daemon
curl -s -N --max-time 60 --unix-socket "$sock" http://localhost/v1/completions \
  -d '{"prompt": "Count:", "max_tokens": 500, "ignore_eos": true, "stream": true}' >/dev/null &
streamer=$!
for _ in $(seq 100); do
  [[ $(api /metrics | grep -E '^voltad_running_sequences ' | awk '{print $2}') == 1 ]] && break
  sleep 0.1
done
kill -TERM "$daemon_pid"; sleep 0.5; kill -TERM "$daemon_pid"
t0=$(date +%s)
wait "$daemon_pid"; rc=$?
daemon_pid=
wait "$streamer" 2>/dev/null
check "a second SIGTERM: exits 0 well within the 60 s grace" test "$rc" -eq 0 -a $(($(date +%s) - t0)) -lt 20
check "a second SIGTERM: logged as such" grep -q "a second stop signal with 1 request in flight; cancelling it" "$log"

touch "$tmp/run/not-a-socket"
sed "s|$sock|$tmp/run/not-a-socket|" "$tmp/voltad.yaml" >"$tmp/file.yaml"
"$bin/voltad" --config "$tmp/file.yaml" >"$tmp/file.log" 2>&1
rc=$?
check "a regular file at socket_path: exit 73, file kept" test "$rc" -eq 73 -a -f "$tmp/run/not-a-socket"
check "  ...and says it is not a socket" grep -q "exists and is not a socket" "$tmp/file.log"

sed 's/backend: cpu/backend: cuda/' "$tmp/voltad.yaml" >"$tmp/cuda.yaml"
"$bin/voltad" --config "$tmp/cuda.yaml" >"$tmp/cuda.log" 2>&1
rc=$?
check "engine.backend cuda without a CUDA backend: exit 69" test "$rc" -eq 69
check "  ...says so and how to use the CPU (no silent fallback)" grep -q "engine.backend: cpu" "$tmp/cuda.log"
check "  ...and created no socket" test ! -e "$sock"

sed "s|path: \"$model\"|path: \"$tmp/none.gguf\"|" "$tmp/voltad.yaml" >"$tmp/nomodel.yaml"
"$bin/voltad" --config "$tmp/nomodel.yaml" >"$tmp/nomodel.log" 2>&1
check "a missing model: exit 66" test $? -eq 66
printf 'GGUF-not-really' >"$tmp/bad.gguf"
sed "s|path: \"$model\"|path: \"$tmp/bad.gguf\"|" "$tmp/voltad.yaml" >"$tmp/bad.yaml"
"$bin/voltad" --config "$tmp/bad.yaml" >"$tmp/bad.log" 2>&1
check "an invalid model file: exit 65" test $? -eq 65
# The cpu backend's cache past half this machine's memory: a setting no
# restart can change, refused as a VRAM plan that does not fit (75, which
# the units do not restart), not as a failure worth retrying (1).
MAX_SEQUENCES=4 write_config "$tmp/bigcache.yaml"
sed -i 's/max_context: 512/max_context: 1048576/' "$tmp/bigcache.yaml"  # ~190 GB of cache
"$bin/voltad" --config "$tmp/bigcache.yaml" >"$tmp/bigcache.log" 2>&1
check "a cpu KV cache past the machine's memory: exit 75" test $? -eq 75
check "  ...says which settings to lower" grep -q "engine.max_context, engine.max_sequences" "$tmp/bigcache.log"
check "  ...and created no socket" test ! -e "$sock"
check "  ...and its socket is removed" test ! -e "$sock"
finish
