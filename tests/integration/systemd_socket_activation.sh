#!/usr/bin/env bash
# Socket activation without systemd: systemd-socket-activate listens, starts
# voltad on the first connection and passes it the socket (LISTEN_FDS). voltad
# serves on that socket -- the first client, which connected before voltad
# existed, included -- binds nothing of its own, and leaves the socket file in
# place when it stops. A passed socket of the wrong kind is refused (exit 73).
set -uo pipefail
source "$(dirname "$0")/serve_lib.sh"

if ! command -v systemd-socket-activate >/dev/null; then
  echo "skipped: systemd-socket-activate is missing (Debian package systemd; scripts/install-deps.sh)"
  exit 77
fi

activated=$tmp/activated.sock
write_config "$tmp/voltad.yaml"  # server.socket_path is $sock: not used when a socket is passed
# systemd-socket-activate gives voltad only PATH, HOME, TERM, LISTEN_* and
# what -E names: the ThreadSanitizer stage's options (scripts/tsan.sh) too.
tsan_env=(${TSAN_OPTIONS+-E TSAN_OPTIONS})
systemd-socket-activate -l "$activated" "${tsan_env[@]}" "$bin/voltad" --config "$tmp/voltad.yaml" >>"$log" 2>&1 &
daemon_pid=$!  # systemd-socket-activate execs voltad in place: the same pid
# The socket file appears at bind(); "Listening on" is printed after listen().
for _ in $(seq 600); do grep -q "Listening on $activated" "$log" && break; sleep 0.05; done
check "systemd-socket-activate listens before voltad runs" test -S "$activated"
check "voltad is not started yet (it starts on the first connection)" \
  bash -c "! grep -q 'listening on' '$log'"

# The first connection starts voltad; it waits in the socket's queue and is answered.
first=$(curl -s --max-time 60 -o /dev/null -w '%{http_code}' --unix-socket "$activated" http://localhost/health)
check "the first client (before voltad existed) gets an answer ($first)" \
  bash -c "[[ '$first' == 200 || '$first' == 503 ]]"
ready=0
for _ in $(seq 300); do
  if curl -s --max-time 2 --unix-socket "$activated" http://localhost/health | grep -q '"status":"ready"'; then
    ready=1
    break
  fi
  sleep 0.1
done
check "ready on the passed socket" test $ready -eq 1
check "the log says the socket was passed" grep -q "listening on $activated (passed by systemd" "$log"
check "server.socket_path was not bound" test ! -e "$sock"
out=$(curl -s --max-time 120 --unix-socket "$activated" http://localhost/v1/completions \
  -H 'Content-Type: application/json' -d '{"prompt":"The capital of France is","max_tokens":4,"temperature":0}')
check "a completion on the passed socket" bash -c "grep -q '\"text\"' <<<'$out'"

kill -TERM "$daemon_pid"
wait "$daemon_pid"
rc=$?
daemon_pid=
check "SIGTERM: exit 0" test "$rc" -eq 0
check "the passed socket is left in place (the unit owns it)" test -S "$activated"

# A passed socket that is not a Unix stream socket: refused with exit 73.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
systemd-socket-activate -l "127.0.0.1:$port" "${tsan_env[@]}" "$bin/voltad" --config "$tmp/voltad.yaml" \
  >"$tmp/tcp.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "Listening on" "$tmp/tcp.log" && break; sleep 0.05; done
python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), timeout=5)" 2>/dev/null
# voltad starts on that connection; should it never have come, fail rather than hang.
for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill "$pid" 2>/dev/null
wait "$pid"
rc=$?
check "a TCP socket passed in: exit 73" test "$rc" -eq 73
check "a TCP socket passed in: says what is wrong" grep -q "not a listening Unix stream socket" "$tmp/tcp.log"
finish
