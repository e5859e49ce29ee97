#!/usr/bin/env bash
# The unit files in systemd/, without systemd running:
#   - `systemd-analyze verify` on every unit (templates as instance 0) says
#     nothing at all: any output is a failure;
#   - `systemd-analyze security --offline=yes` scores each service at or below
#     the exposure threshold recorded in docs/SYSTEMD.md;
#   - every directive has a comment saying why;
#   - sysusers.d and tmpfiles.d, applied to an empty root, make the users,
#     groups and directories the units expect.
# ExecStart= points at the built voltad (verify checks that it exists).
set -uo pipefail
bin=${VOLTAD_BIN_DIR:?}
src=${VOLTAD_SOURCE_DIR:?}
units=$src/systemd

if ! command -v systemd-analyze >/dev/null; then
  echo "skipped: systemd-analyze is missing (Debian package systemd; scripts/install-deps.sh)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}

# Copies under their instance names, ExecStart= at the built binary.
for f in voltad.service voltad.socket voltad@.service voltad@.socket; do
  name=${f/@./@0.}
  sed "s|^ExecStart=/usr/bin/voltad |ExecStart=$bin/voltad |" "$units/$f" >"$tmp/$name"
done
check "ExecStart= rewritten to the built voltad" grep -q "^ExecStart=$bin/voltad " "$tmp/voltad@0.service"

for u in voltad.service voltad.socket voltad@0.service voltad@0.socket; do
  out=$(cd "$tmp" && systemd-analyze verify "./$u" 2>&1)
  rc=$?
  check "systemd-analyze verify $u: no output, exit 0" test -z "$out" -a $rc -eq 0
  [[ -z $out ]] || echo "$out" | sed 's/^/    /'
done

# A unit that is wrong must fail the same check (the check can fail).
sed 's/^Type=notify$/Type=notify-reload/' "$tmp/voltad.service" >"$tmp/broken.service"
out=$(cd "$tmp" && systemd-analyze verify ./broken.service 2>&1)
check "verify catches a mistake (Type=notify-reload, unknown to systemd 252)" test -n "$out"

threshold=$(sed -n 's/^.*exposure threshold: \([0-9.]*\).*$/\1/p' "$src/docs/SYSTEMD.md" | head -n 1)
check "docs/SYSTEMD.md records the exposure threshold" test -n "$threshold"
# --threshold= counts tenths: exposure 1.0 is 10.
tenths=$(awk -v t="${threshold:-0}" 'BEGIN { printf "%d", t * 10 + 0.5 }')
for u in voltad.service voltad@0.service; do
  out=$(cd "$tmp" && systemd-analyze security --offline=yes --threshold="$tenths" "./$u" 2>&1)
  rc=$?
  score=$(echo "$out" | LC_ALL=C sed -n 's/^.*Overall exposure level for [^:]*: \([0-9.]*\).*$/\1/p')
  echo "    $u: exposure $score (threshold $threshold)"
  check "systemd-analyze security $u at or below $threshold" test $rc -eq 0 -a -n "$score"
done

# Every directive has a comment in the lines just above it (its paragraph),
# except the self-describing Description= and Documentation=.
uncommented=$(awk '
  FNR == 1 { commented = 0 }
  /^[[:space:]]*$/ || /^\[/ { commented = 0; next }
  /^#/ { commented = 1; next }
  /^(Description|Documentation)=/ { next }
  !commented { print FILENAME ":" FNR ": " $0 }
' "$units"/voltad.service "$units"/voltad.socket "$units"/voltad@.service "$units"/voltad@.socket)
check "every directive has a comment saying why" test -z "$uncommented"
[[ -z $uncommented ]] || echo "$uncommented" | sed 's/^/    /'

# sysusers.d and tmpfiles.d applied to an empty root.
root=$tmp/root
mkdir -p "$root/etc"
check "sysusers.d/voltad.conf applies" systemd-sysusers --root="$root" "$units/sysusers.d/voltad.conf"
check "the user voltad, with /var/lib/voltad as home and no shell" \
  grep -q '^voltad:x:[0-9]*:[0-9]*:[^:]*:/var/lib/voltad:/usr/sbin/nologin$' "$root/etc/passwd"
for g in voltad voltad-clients voltad-admin; do
  check "the group $g" grep -q "^$g:" "$root/etc/group"
done
check "the socket units' SocketGroup= exists" \
  grep -q "^$(sed -n 's/^SocketGroup=//p' "$units/voltad.socket"):" "$root/etc/group"
if [[ $(id -u) -eq 0 ]]; then
  check "tmpfiles.d/voltad.conf applies" \
    systemd-tmpfiles --root="$root" --create "$units/tmpfiles.d/voltad.conf"
  uid=$(awk -F: '$1 == "voltad" { print $3 }' "$root/etc/passwd")
  check "/run/voltad: 0755, owned by voltad" test "$(stat -c '%a %u' "$root/run/voltad")" = "755 $uid"
  check "/var/lib/voltad/models: 0750, owned by voltad" \
    test "$(stat -c '%a %u' "$root/var/lib/voltad/models")" = "750 $uid"
else
  echo "skip tmpfiles.d checks (giving the directories to voltad needs root)"
fi

if ((fails)); then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all checks passed"
