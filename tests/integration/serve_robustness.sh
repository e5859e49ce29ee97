#!/usr/bin/env bash
# Malformed, slow and greedy clients (serve_robustness.py), and access
# control with a second uid: a peer not on the lists gets 403 and a log line.
set -uo pipefail
source "$(dirname "$0")/serve_lib.sh"
PER_USER=2 write_config "$tmp/voltad.yaml"
start_daemon
PYTHONPATH="$(dirname "$0")" python3 "$(dirname "$0")/serve_robustness.py" "$sock"
check "malformed input, deadlines, per-user limit" test $? -eq 0
stop_daemon
READ_TIMEOUT=10s PER_USER_CONNECTIONS=8 write_config "$tmp/voltad.yaml"
start_daemon
PYTHONPATH="$(dirname "$0")" python3 "$(dirname "$0")/serve_connections.py" "$sock"
check "per-user connections" test $? -eq 0
# Its nine refusals within a few seconds (the ninth connection, one that
# waited for "100 Continue", an administrator's request let past on a
# ninth, then a flood of six) make one log line: one a uid every 10 s.
refusal_lines=$(grep -c "refused a connection from uid $(id -u) .*max_connections_per_user" "$log")
check "refusals of one uid: one log line, not one each (got $refusal_lines)" test "$refusal_lines" -eq 1
# The eight left out are told once that uid's 10 s are over, though it
# sends nothing more (a timer, not its next refusal).
for _ in $(seq 1 130); do
  grep -q "refused 8 more connections from uid $(id -u) since the last such line" "$log" && break
  sleep 0.1
done
check "the refusals left out are told when the period ends" \
  grep -q "refused 8 more connections from uid $(id -u) since the last such line" "$log"
# Refusals left out when the daemon stops are told as it stops: three
# more within the period that line began, then SIGTERM.
PYTHONPATH="$(dirname "$0")" python3 -c '
import sys, time
from serve_http import connect
held = [connect(sys.argv[1], 10) for _ in range(8)]
time.sleep(0.2)
for _ in range(3):
    c = connect(sys.argv[1], 10)
    time.sleep(0.2)
    c.close()
' "$sock"
stop_daemon
check "refusals left out when the daemon stops are told" \
  grep -q "refused 3 more connections from uid $(id -u) since the last such line (the daemon stops)" "$log"

# server.max_connections raised by a reload: the queue behind the one
# running sequence grows with it (it stayed at 4x the old limit, 8, and
# 3 of 12 requests got 503).
MAX_SEQUENCES=1 EXTRA_SERVER='  max_connections: 2' write_config "$tmp/voltad.yaml"
start_daemon
MAX_SEQUENCES=1 EXTRA_SERVER='  max_connections: 64' write_config "$tmp/voltad.yaml"
"$bin/voltactl" --socket "$sock" reload >"$tmp/reload.out" 2>&1
check "reload: max_connections 2 -> 64 applied" grep -q "server.max_connections: 2 -> 64 (applied)" "$tmp/reload.out"
clients=()
for i in $(seq 1 12); do
  curl -s -o /dev/null -w '%{http_code}\n' --max-time 120 --unix-socket "$sock" \
    -H 'Content-Type: application/json' http://localhost/v1/completions \
    -d '{"prompt": "One, two,", "max_tokens": 4}' >"$tmp/queued.$i" &
  clients+=($!)
done
wait "${clients[@]}"
codes=$(cat "$tmp"/queued.* | sort | uniq -c | tr -s ' ' | tr '\n' ';')
check "12 requests at once after the reload, one sequence running: all 200 ($codes)" \
  test "$(cat "$tmp"/queued.* | grep -c '^200$')" -eq 12
# A reload that turns the log down still leaves its own record, by SIGHUP
# as by voltactl: the summary is logged before the new level applies.
MAX_SEQUENCES=1 EXTRA_SERVER='  max_connections: 64' write_config "$tmp/voltad.yaml"
sed -i 's/level: debug/level: warn/' "$tmp/voltad.yaml"
kill -HUP "$daemon_pid"
for _ in $(seq 1 50); do grep -q 'log.level: "debug" -> "warn" (applied)' "$log" && break; sleep 0.1; done
check "reload to log.level warn: its summary is in the log" \
  grep -q 'log.level: "debug" -> "warn" (applied)' "$log"
stop_daemon
READ_TIMEOUT=10s PER_USER_CONNECTIONS=8 write_config "$tmp/voltad.yaml"  # as before this part
start_daemon

# A second uid (nobody, 65534) can reach the socket (mode 0666) but is on no
# allow list: refused. Needs root (setpriv); elsewhere this part is skipped.
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
if [[ $(id -u) -eq 0 ]] && command -v setpriv >/dev/null; then
  out=$(as_nobody curl -s -w '\n%{http_code}' --unix-socket "$sock" http://localhost/health)
  check "uid 65534 not on the lists: 403" test "$(tail -n 1 <<<"$out")" = 403
  check "403 is an OpenAI permission_error" grep -q '"type":"permission_error"' <<<"$out"
  check "the refusal is logged with uid and pid" grep -q "refused a connection from uid 65534 .* pid [0-9]" "$log"
  as_nobody "$bin/voltactl" --socket "$sock" status >"$tmp/ctl.out" 2>"$tmp/ctl.err"
  check "voltactl status as a refused user: exit 1" test $? -eq 1
  check "voltactl status as a refused user: the 403 and why, no state" \
    grep -q "answered 403: .*access denied" "$tmp/ctl.err"
  check "voltactl status as a refused user: no '?' lines" test ! -s "$tmp/ctl.out"
  as_nobody "$bin/voltactl" --socket "$sock" generate Hi >/dev/null 2>"$tmp/ctl.err"
  check "voltactl generate as a refused user: exit 1" test $? -eq 1
  check "voltactl generate as a refused user: the 403 and why" \
    grep -q "answered 403: .*access denied" "$tmp/ctl.err"
  stop_daemon
  # (read_timeout 10s: the connection below waits 3 s between requests.)
  READ_TIMEOUT=10s EXTRA_SERVER='  allow_users: ["65534"]' write_config "$tmp/voltad.yaml"
  start_daemon
  out=$(as_nobody curl -s -w '\n%{http_code}' --unix-socket "$sock" http://localhost/health)
  check "uid 65534 in allow_users: 200" test "$(tail -n 1 <<<"$out")" = 200
  # Taken off the list by a reload: a connection it already holds is refused
  # from its next request on (access is checked per request).
  as_nobody env PYTHONPATH="$(dirname "$0")" python3 -c '
import sys, time
from serve_http import Reader, build_request, connect
s = connect(sys.argv[1], 10)
r = Reader(s)
s.sendall(build_request("GET", "/health")); st, h = r.head(); r.body(h); print(st, flush=True)
time.sleep(3)
s.sendall(build_request("GET", "/health")); st, h = r.head(); r.body(h); print(st, flush=True)
' "$sock" >"$tmp/revoke.out" 2>&1 &
  revoker=$!
  sleep 1
  READ_TIMEOUT=10s write_config "$tmp/voltad.yaml"  # no allow_users: only the daemon's own uid
  kill -HUP "$daemon_pid"
  wait "$revoker"
  check "a held connection after its user is taken off allow_users: 200, then 403" \
    test "$(tr '\n' ' ' <"$tmp/revoke.out")" = "200 403 "
  check "the per-request refusal is logged" grep -q "refused a request from uid 65534" "$log"
  # A refused connection that sends nothing is closed within ~3 s, not after
  # read_timeout (10 s here): it holds a connection slot meanwhile.
  idle=$(as_nobody env PYTHONPATH="$(dirname "$0")" python3 -c '
import sys, time
from serve_http import connect
s = connect(sys.argv[1], 20)
t = time.time()
s.recv(1)
print(int(time.time() - t))
' "$sock" 2>&1)
  check "an idle refused connection is closed within 3 s (read_timeout 10 s): ${idle}s" \
    test "${idle:-99}" -le 4
  EXTRA_SERVER='  allow_groups: ["65534"]' write_config "$tmp/voltad.yaml"
  stop_daemon
  start_daemon
  out=$(setpriv --reuid=65534 --regid=1 --groups=65534 curl -s -w '\n%{http_code}' --unix-socket "$sock" http://localhost/health)
  check "a process with allow_groups as a supplementary group: 200" test "$(tail -n 1 <<<"$out")" = 200
else
  echo "skip access control with a second uid (needs root and setpriv)"
fi
stop_daemon
check "stopped cleanly" test "$daemon_rc" -eq 0
finish
