#!/usr/bin/env bash
# voltad's D-Bus interface (docs/DBUS.md) end to end, on private buses:
#  1. a session bus (server.dbus: user, server.instance: t1): busctl reads
#     every property, Drain / Resume / Reload with their effects on State and
#     /health, PropertiesChanged seen by `busctl monitor`;
#  2. no bus to reach: a warning, and voltad serves;
#  3. a system-like bus with a copy of packaging/dbus/org.voltad.Daemon1.conf
#     (this user as the owner): properties readable by anyone, the methods
#     refused with AccessDenied to a caller outside the admin group and
#     allowed to one inside (a second uid needs root and setpriv; without,
#     the test user itself is the outsider).
set -uo pipefail
source "$(dirname "$0")/serve_lib.sh"

for tool in dbus-daemon busctl dbus-send; do
  command -v "$tool" >/dev/null || {
    echo "skipped: $tool is missing (Debian: dbus, systemd; scripts/install-deps.sh)"
    exit 77
  }
done

bus_pids=()
monitor_pid=
stop_buses() {
  [[ -n $monitor_pid ]] && kill "$monitor_pid" 2>/dev/null
  for p in "${bus_pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  cleanup
}
trap stop_buses EXIT

# start_bus SOCKET ARGS...: a dbus-daemon listening on unix:path=SOCKET.
start_bus() {
  local socket=$1; shift
  dbus-daemon --nofork --nopidfile "$@" 2>>"$tmp/dbus-daemon.log" &
  bus_pids+=($!)
  # The socket file appears at bind(); connections work from listen() on.
  for _ in $(seq 100); do
    [[ -S $socket ]] && busctl --address="unix:path=$socket" status >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "FAIL dbus-daemon did not start"; cat "$tmp/dbus-daemon.log"; exit 1
}

name=org.voltad.Daemon1
path=/org/voltad/Daemon1
prop() { busctl --address="$addr" get-property "$name" "$path" org.voltad.Daemon1 "$1" 2>&1; }
call() { busctl --address="$addr" call "$name" "$path" org.voltad.Daemon1 "$1" 2>&1; }
health_status() {
  curl -s --max-time 5 --unix-socket "$sock" http://localhost/health |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])'
}
health_field() {
  curl -s --max-time 5 --unix-socket "$sock" http://localhost/health |
    python3 -c "import json,sys; print(json.load(sys.stdin)[\"$1\"])"
}
# eventually COMMAND...: true once COMMAND is, retrying for 10 s.
eventually() {
  for _ in $(seq 100); do "$@" && return 0; sleep 0.1; done
  return 1
}
prop_is() { [[ $(prop "$1") == "$2" ]]; }

# restart_daemon: (re)writes the config with $EXTRA_SERVER and starts voltad.
restart_daemon() {
  [[ -n $daemon_pid ]] && stop_daemon
  write_config "$tmp/voltad.yaml"
  start_daemon
}

# --- 1. a session bus -------------------------------------------------------
addr=unix:path=$tmp/session.sock
start_bus "$tmp/session.sock" --session --address="$addr"
export DBUS_SESSION_BUS_ADDRESS=$addr
DBUS=user EXTRA_SERVER='  instance: t1'
restart_daemon
name=org.voltad.Daemon1.t1
check "the name carries the instance" grep -q "D-Bus: $name on the user bus" "$log"

check "State reads ready" prop_is State 's "ready"'
check "Model is /health's model" prop_is Model "s \"$(health_field model)\""
check "GpuBusId is a string (empty on the CPU)" prop_is GpuBusId 's ""'
check "NumaNode is an int32" grep -Eq '^i -?[0-9]+$' <<<"$(prop NumaNode)"
check "VramBudgetBytes is a uint64 (0 on the CPU)" prop_is VramBudgetBytes "t 0"
check "VramUsedBytes is a uint64 (0 on the CPU)" prop_is VramUsedBytes "t 0"
kv_total=$(health_field kv_blocks_total)
check "KvBlocksFree is every block when idle ($kv_total)" prop_is KvBlocksFree "t $kv_total"
check "RunningRequests is 0" prop_is RunningRequests "u 0"
check "QueuedRequests is 0" prop_is QueuedRequests "u 0"
check "DecodeTokensPerSecond is 0 when idle" prop_is DecodeTokensPerSecond "d 0"
intro=$(busctl --address="$addr" introspect "$name" "$path" org.voltad.Daemon1 2>&1)
check "introspection lists the methods (sas replies)" \
  test "$(grep -Ec '^\.(Reload|Drain|Resume) +method +- +sas' <<<"$intro")" = 3

busctl --address="$addr" monitor --json=short \
  --match="type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path='$path'" \
  >"$tmp/monitor.json" 2>"$tmp/monitor.err" &
monitor_pid=$!
# busctl says so on stderr once it is subscribed (a signal sent before would be
# missed); newer versions say nothing with --json, so wait at most 3 s for it.
for _ in $(seq 30); do grep -q "Monitoring bus message stream" "$tmp/monitor.err" && break; sleep 0.1; done
# changed PROPERTY VALUE-REGEX: some PropertiesChanged seen carries PROPERTY with such a value.
changed() {
  python3 - "$tmp/monitor.json" "$1" "$2" <<'PY'
import json, re, sys
path, prop, pattern = sys.argv[1:]
for line in open(path):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    iface, values, _ = m["payload"]["data"]
    if iface == "org.voltad.Daemon1" and prop in values and re.fullmatch(pattern, str(values[prop]["data"])):
        sys.exit(0)
sys.exit(1)
PY
}

# A long generation (streamed, so the client is there until it hangs up):
# the counters move, and each move is announced.
curl -s -N --max-time 300 --unix-socket "$sock" http://localhost/v1/completions \
  -d '{"prompt":"Count:","max_tokens":450,"ignore_eos":true,"stream":true}' >"$tmp/gen.txt" &
gen_pid=$!
check "RunningRequests becomes 1 during a generation" eventually prop_is RunningRequests "u 1"
check "KvBlocksFree drops during a generation" eventually test "$(prop KvBlocksFree)" != "t $kv_total"
rate_positive() { python3 -c "import sys; sys.exit(0 if float('$(prop DecodeTokensPerSecond | cut -d' ' -f2)') > 0 else 1)"; }
check "DecodeTokensPerSecond is above 0 during a generation" eventually rate_positive
check "PropertiesChanged announces RunningRequests 1" eventually changed RunningRequests 1
check "PropertiesChanged announces a decode rate" eventually changed DecodeTokensPerSecond '[0-9.e+]+'

r=$(call Drain)
check "Drain replies with a summary ($r)" grep -q '^sas "draining' <<<"$r"
check "State becomes draining" prop_is State 's "draining"'
check "/health says draining" test "$(health_status)" = draining
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 --unix-socket "$sock" \
  http://localhost/v1/completions -d '{"prompt":"x","max_tokens":2}')
check "a new generation gets 503 while draining" test "$code" = 503
check "PropertiesChanged announces State draining" eventually changed State draining
# The client hangs up: its sequence is dropped and the counters come back.
kill "$gen_pid" 2>/dev/null
wait "$gen_pid" 2>/dev/null
check "RunningRequests back to 0" eventually prop_is RunningRequests "u 0"
check "KvBlocksFree back to every block" eventually prop_is KvBlocksFree "t $kv_total"
check "PropertiesChanged announces RunningRequests 0" eventually changed RunningRequests 0

r=$(call Resume)
check "Resume replies ($r)" grep -q '^sas "resumed' <<<"$r"
check "State becomes ready" prop_is State 's "ready"'
check "/health says ready" test "$(health_status)" = ready
check "PropertiesChanged announces State ready" eventually changed State ready

# Reload: a file with problems changes nothing and the error lists them;
# a good file is applied.
cp "$tmp/voltad.yaml" "$tmp/good.yaml"
sed 's/^  max_requests_per_user: 64$/  max_requests_per_user: lots\n  no_such_key: 1/' "$tmp/good.yaml" \
  >"$tmp/voltad.yaml"
r=$(call Reload)
check "Reload of a bad file is refused" grep -q "Call failed" <<<"$r"
check "the refusal lists every problem as FILE:LINE:COL ($r)" \
  test "$(grep -Ec 'voltad.yaml:[0-9]+:[0-9]+:' <<<"$r")" -ge 2
check "State stays ready after a refused reload" prop_is State 's "ready"'
sed 's/max_requests_per_user: 64/max_requests_per_user: 32/' "$tmp/good.yaml" >"$tmp/voltad.yaml"
r=$(call Reload)
check "Reload of a good file is done ($r)" grep -q '^sas ' <<<"$r"
check "State is ready after the reload" eventually prop_is State 's "ready"'

kill "$monitor_pid" 2>/dev/null
monitor_pid=
stop_daemon
check "voltad stopped with 0" test "$daemon_rc" = 0

# --- 2. no bus ---------------------------------------------------------------
export DBUS_SESSION_BUS_ADDRESS=unix:path=$tmp/nothing-here.sock
DBUS=user EXTRA_SERVER=
: >"$log"
restart_daemon
check "an unreachable bus is a warning" grep -q "D-Bus: cannot connect to the user bus" "$log"
check "and voltad serves without it" test "$(health_status)" = ready
unset DBUS_SESSION_BUS_ADDRESS

# --- 3. a system-like bus with the policy -----------------------------------
me=$(id -un)
if [[ $(id -u) -eq 0 ]] && command -v setpriv >/dev/null; then
  # A second uid (nobody) plays the outsider, and the insider when given the
  # admin group. The admin group: one nobody is not in.
  admin_group= admin_gid=
  for g in $(getent group | cut -d: -f1,3); do
    gid=${g#*:}
    ((gid != 0 && gid != 65534)) && { admin_group=${g%%:*} admin_gid=$gid; break; }
  done
  as_outsider() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
  as_insider() { setpriv --reuid=65534 --regid=65534 --groups="$admin_gid" "$@"; }
  second_uid=1
else
  # Only this user: make it the outsider with an admin group it is not in.
  admin_group=
  for g in $(getent group | cut -d: -f1,3); do
    gid=${g#*:}
    id -G | tr ' ' '\n' | grep -qx "$gid" || { admin_group=${g%%:*}; break; }
  done
  as_outsider() { "$@"; }
  second_uid=0
fi
if [[ -z $admin_group ]]; then
  echo "FAIL no group to play the admin group (getent group lists none besides root and nogroup)"
  fails=$((fails + 1))
  finish
fi
sed -e "s/user=\"voltad\"/user=\"$me\"/" -e "s/group=\"voltad-admin\"/group=\"$admin_group\"/" \
  "$src/packaging/dbus/org.voltad.Daemon1.conf" >"$tmp/org.voltad.Daemon1.conf"
check "the policy copy names this user and the admin group" \
  grep -q "user=\"$me\"" "$tmp/org.voltad.Daemon1.conf"
# The default policy of Debian's system bus (/usr/share/dbus-1/system.conf),
# then the policy under test.
cat >"$tmp/system.conf" <<XML
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <auth>EXTERNAL</auth>
  <listen>unix:path=$tmp/system.sock</listen>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
  </policy>
  <include>$tmp/org.voltad.Daemon1.conf</include>
</busconfig>
XML
addr=unix:path=$tmp/system.sock
start_bus "$tmp/system.sock" --config-file="$tmp/system.conf"
chmod 666 "$tmp/system.sock" 2>/dev/null
export DBUS_SYSTEM_BUS_ADDRESS=$addr
name=org.voltad.Daemon1
# auto means the system bus for root and for a service with no user session.
DBUS=auto EXTRA_SERVER=
[[ $(id -u) -eq 0 ]] || DBUS=system
: >"$log"
restart_daemon
check "voltad owns $name on the system bus under the policy" \
  grep -q "D-Bus: $name on the system bus" "$log"

out=$(as_outsider busctl --address="$addr" get-property "$name" "$path" org.voltad.Daemon1 State 2>&1)
check "an outsider reads State ($out)" test "$out" = 's "ready"'
out=$(as_outsider busctl --address="$addr" get-property "$name" "$path" org.voltad.Daemon1 KvBlocksFree 2>&1)
check "an outsider reads KvBlocksFree ($out)" grep -Eq '^t [0-9]+$' <<<"$out"
for method in Drain Resume Reload; do
  out=$(as_outsider dbus-send --bus="$addr" --print-reply --dest="$name" "$path" \
    "org.voltad.Daemon1.$method" 2>&1)
  check "an outsider is refused $method with AccessDenied" \
    grep -q "org.freedesktop.DBus.Error.AccessDenied" <<<"$out"
done
check "the refused Drain changed nothing" prop_is State 's "ready"'
check "voltad never saw the refused calls" bash -c "! grep -q 'D-Bus: Drain from' '$log'"

if ((second_uid)); then
  out=$(as_insider dbus-send --bus="$addr" --print-reply --dest="$name" "$path" \
    org.voltad.Daemon1.Drain 2>&1)
  check "a member of the admin group may Drain ($out)" grep -q 'string "draining' <<<"$out"
  check "State becomes draining" prop_is State 's "draining"'
  check "/health says draining" test "$(health_status)" = draining
  r=$(call Resume)
  check "root may Resume ($r)" grep -q '^sas "resumed' <<<"$r"
  check "State becomes ready" prop_is State 's "ready"'
else
  echo "skip the admin-group caller and root (needs root and setpriv for a second uid)"
fi

stop_daemon
check "voltad stopped with 0" test "$daemon_rc" = 0
finish
