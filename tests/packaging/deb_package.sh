#!/usr/bin/env bash
# The Debian package, end to end, from this build tree:
#   1. scripts/build-deb.sh --package-only: CPack's .deb of this build;
#   2. its control data and file list (dpkg-deb --info / --contents);
#   3. lintian: no error or warning beyond the explained overrides;
#   4. a fresh Debian 12 root (scripts/debian-root.sh: debootstrap
#      minbase), the package installed with `apt-get install ./FILE.deb` --
#      apt resolves its Depends field against bookworm;
#   5. in that root: the files, the user and groups sysusers made, the
#      directories, the binaries running against the root's libraries,
#      `systemd-analyze verify` of the installed units, `systemctl enable`;
#   6. reinstall keeps an edited conffile; remove keeps config and state;
#      purge removes them and the enablement links.
# Needs root (debootstrap, chroot) and a Debian mirror.
set -uo pipefail
src=${VOLTAD_SOURCE_DIR:?}
build=${VOLTAD_BUILD_DIR:?}
bin=${VOLTAD_BIN_DIR:?}

for tool in dpkg-deb dpkg-shlibdeps cpack lintian debootstrap chroot; do
  command -v "$tool" >/dev/null || { echo "SKIP: no $tool (scripts/install-deps.sh installs it)"; exit 77; }
done
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root to make and enter a Debian root (debootstrap, chroot)"; exit 77; }

tmp=$(mktemp -d /tmp/voltad-deb.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
step() { echo "== $* ($(( $(date +%s) - t0 ))s)"; }
t0=$(date +%s)

# --- 1. Build the package.
step "package"
deb=$(bash "$src/scripts/build-deb.sh" --package-only "$build" --out "$tmp/out" | tail -1)
[[ -f $deb ]] || { echo "FAIL: no package built"; exit 1; }
echo "$deb: $(du -k "$deb" | cut -f1) KiB"
version=$("$bin/voltad" --version | awk '{print $2}')

# --- 2. Control data and contents.
step "control and contents"
field() { dpkg-deb -f "$deb" "$1"; }
check "Package is voltad" test "$(field Package)" = voltad
check "Version is $version-1 (CMake's project version)" test "$(field Version)" = "$version-1"
check "Architecture is $(dpkg --print-architecture)" test "$(field Architecture)" = "$(dpkg --print-architecture)"
depends=$(field Depends)
echo "Depends: $depends"
# Every package name in Depends, one a line, without versions.
dep_names=$(tr ',|' '\n\n' <<<"$depends" | sed -E 's/\(.*\)//; s/[[:space:]]//g' | grep .)
for lib in libc6 libstdc++6 libyaml-cpp0.7 libspdlog1.10-fmt9 libfmt9 libhwloc15 libnuma1 libsystemd0; do
  check "Depends names $lib (dpkg-shlibdeps)" grep -qxF "$lib" <<<"$dep_names"
done
check "Depends names systemd (sysusers, tmpfiles)" grep -q "systemd | systemd-sysusers" <<<"$depends"
check "Depends names procps (/bin/kill in ExecReload=)" grep -qxF procps <<<"$dep_names"
check "no CUDA package in Depends (the runtime is static)" bash -c '! grep -qi cuda <<<"$1"' _ "$depends"
mkdir -p "$tmp/control"
dpkg-deb -e "$deb" "$tmp/control"
check "conffiles lists /etc/voltad/voltad.yaml" grep -qxF /etc/voltad/voltad.yaml "$tmp/control/conffiles"
for s in postinst prerm postrm; do
  check "$s is there and executable" test -x "$tmp/control/$s"
  check "$s is valid sh" sh -n "$tmp/control/$s"
done
dpkg-deb --contents "$deb" >"$tmp/contents"
expected=(
  ./usr/bin/voltad ./usr/bin/voltactl ./usr/bin/voltad-run ./usr/bin/voltad-bench
  ./etc/voltad/voltad.yaml
  ./lib/systemd/system/voltad.service ./lib/systemd/system/voltad.socket
  ./lib/systemd/system/voltad@.service ./lib/systemd/system/voltad@.socket
  ./usr/lib/sysusers.d/voltad.conf ./usr/lib/tmpfiles.d/voltad.conf
  ./usr/share/dbus-1/system.d/org.voltad.Daemon1.conf
  ./usr/share/man/man8/voltad.8.gz ./usr/share/man/man1/voltactl.1.gz
  ./usr/share/man/man5/voltad.yaml.5.gz ./usr/share/man/man1/voltad-run.1.gz
  ./usr/share/man/man1/voltad-bench.1.gz
  ./usr/share/doc/voltad/copyright ./usr/share/doc/voltad/changelog.Debian.gz
  ./usr/share/doc/voltad/OPERATIONS.md ./usr/share/doc/voltad/V100.md
  ./usr/share/doc/voltad/TROUBLESHOOTING.md ./usr/share/doc/voltad/SYSTEMD.md
  ./usr/share/doc/voltad/CONFIG.md ./usr/share/doc/voltad/PLACEMENT.md
  ./usr/share/doc/voltad/API.md
)
missing=()
for f in "${expected[@]}"; do awk '{print $6}' "$tmp/contents" | grep -qxF "$f" || missing+=("$f"); done
check "the package holds every expected file${missing:+ (missing: ${missing[*]})}" test ${#missing[@]} -eq 0
check "every file is owned by root:root" bash -c "! awk '\$2 != \"root/root\"' '$tmp/contents' | grep -q ."
check "binaries are 0755, other files 0644" bash -c "! awk '\$1 ~ /^-/ && \$1 != \"-rwxr-xr-x\" && \$1 != \"-rw-r--r--\"' '$tmp/contents' | grep -q ."

# --- 3. lintian.
step "lintian"
lintian --fail-on error,warning --display-info "$deb" >"$tmp/lintian.txt" 2>&1
lintian_rc=$?
sed 's/^/    /' "$tmp/lintian.txt"
check "lintian: no errors or warnings (overrides in packaging/debian/lintian-overrides)" test "$lintian_rc" -eq 0

# --- 4. A fresh Debian 12 root; the package installed the way an operator
# would, `apt-get install ./voltad_*.deb`: apt resolves the Depends field
# against bookworm and fetches the libraries and systemd.
step "debian root"
root=$tmp/root
bash "$src/scripts/debian-root.sh" "$root"
rc=$?
((rc == 0)) || { echo "FAIL: could not make the Debian root (exit $rc)"; exit 1; }
check "the root is Debian 12" grep -q '^12\.' "$root/etc/debian_version"

# Commands in the root run with their own /proc, in a mount namespace of
# their own, so nothing stays mounted when they end.
inroot() {
  unshare --mount --fork -- bash -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$root" "$@"
}
cp "$deb" "$root/tmp/voltad.deb"
step "install"
# apt's downloads are kept beside debootstrap's between runs.
cache=${VOLTAD_DEBOOTSTRAP_CACHE:-$HOME/.cache/voltad/debootstrap}
cp -n "$cache"/*.deb "$root/var/cache/apt/archives/" 2>/dev/null
export DEBIAN_FRONTEND=noninteractive
inroot apt-get install -y --no-install-recommends /tmp/voltad.deb >"$tmp/install.log" 2>&1
rc=$?
cp -n "$root"/var/cache/apt/archives/*.deb "$cache/" 2>/dev/null
sed 's/^/    /' "$tmp/install.log" | grep -vE '^    (Get|Selecting|Preparing|Unpacking|Setting up|Processing|\(Reading)' 
check "apt-get install ./voltad.deb in the fresh root succeeds (Depends resolve in bookworm)" test "$rc" -eq 0
check "dpkg says installed" bash -c "chroot '$root' dpkg-query -W -f='\${Status}' voltad | grep -qx 'install ok installed'"
check "apt pulled systemd in (sysusers, tmpfiles)" test -x "$root/usr/bin/systemd-sysusers"

# --- 5. What the installation made.
step "installed files, user, units"
missing=()
while read -r f; do [[ -e $root$f ]] || missing+=("$f"); done < <(chroot "$root" dpkg -L voltad)
check "every file dpkg lists exists${missing:+ (missing: ${missing[*]})}" test ${#missing[@]} -eq 0
pw=$(chroot "$root" getent passwd voltad)
echo "    $pw"
IFS=: read -r _ _ uid gid _ home shell <<<"$pw"
check "user voltad exists" test -n "$pw"
check "voltad is a system user (uid < 1000)" test "${uid:-9999}" -lt 1000
check "voltad's home is /var/lib/voltad" test "$home" = /var/lib/voltad
check "voltad cannot log in" test "$shell" = /usr/sbin/nologin
check "voltad's primary group is voltad" test "$(chroot "$root" getent group "$gid" | cut -d: -f1)" = voltad
for g in voltad-clients voltad-admin; do
  check "group $g exists" chroot "$root" getent group "$g"
done
check "voltad is in group video (the NVIDIA device nodes)" \
  bash -c "chroot '$root' getent group video | cut -d: -f4 | tr , '\n' | grep -qx voltad"
check "/var/lib/voltad/models is voltad's, 0750" \
  test "$(chroot "$root" stat -c '%U:%G %a' /var/lib/voltad/models 2>/dev/null)" = "voltad:voltad 750"
check "voltad --version runs on the root's libraries" \
  test "$(inroot /usr/bin/voltad --version 2>&1)" = "voltad $version"
check "voltactl --version runs on the root's libraries" \
  test "$(inroot /usr/bin/voltactl --version 2>&1)" = "voltactl $version"
for b in voltad voltactl voltad-run voltad-bench; do
  check "$b: every library resolves in the root" bash -c "! chroot '$root' ldd /usr/bin/$b | grep -q 'not found'"
done
check "the packaged config verifies" inroot /usr/bin/voltad --verify-config /etc/voltad/voltad.yaml

# systemd-analyze verify in the root, with the root's own systemd 252: the
# units as installed (ExecStart=/usr/bin/voltad must exist there, the user
# and groups must resolve). Any output is a failure.
units=(voltad.service voltad.socket voltad@0.service voltad@0.socket)
verify=$(inroot systemd-analyze verify "${units[@]/#//lib/systemd/system/}" 2>&1)
rc=$?
[[ -n $verify ]] && sed 's/^/    /' <<<"$verify"
check "systemd-analyze verify of the installed units: no output, exit 0" test -z "$verify" -a "$rc" -eq 0
for u in voltad.service voltad@0.service; do
  exposure=$(systemd-analyze security --offline=yes --root="$root" "$u" 2>/dev/null | grep -oE 'exposure level for [^ ]+: [0-9.]+' | awk '{print $NF}')
  echo "    systemd-analyze security --offline=yes $u (installed): ${exposure:-?}"
  check "$u has an exposure score" test -n "$exposure"
done
check "systemctl enable voltad.service voltad@0.service works offline" \
  inroot systemctl enable voltad.service voltad@0.service
check "enabling linked the service and its socket" \
  test -L "$root/etc/systemd/system/multi-user.target.wants/voltad.service" \
    -a -L "$root/etc/systemd/system/sockets.target.wants/voltad@0.socket"

# --- 6. Reinstall, remove, purge.
step "reinstall, remove, purge"
echo "# edited by the administrator" >>"$root/etc/voltad/voltad.yaml"
inroot dpkg -i --force-confold /tmp/voltad.deb >"$tmp/reinstall.log" 2>&1
check "reinstalling (an upgrade to the same version) succeeds" test $? -eq 0
check "the edited conffile is kept" grep -q "edited by the administrator" "$root/etc/voltad/voltad.yaml"

echo "not a model" >"$root/var/lib/voltad/models/model.gguf"
cp "$root/etc/voltad/voltad.yaml" "$root/etc/voltad/gpu0.yaml"
inroot dpkg -r voltad >"$tmp/remove.log" 2>&1
check "dpkg -r succeeds" test $? -eq 0
check "remove: the binaries are gone" test ! -e "$root/usr/bin/voltad"
check "remove: the units are gone" test ! -e "$root/lib/systemd/system/voltad.service"
check "remove: the config stays" test -f "$root/etc/voltad/voltad.yaml"
check "remove: the models stay" test -f "$root/var/lib/voltad/models/model.gguf"

inroot dpkg --purge voltad >"$tmp/purge.log" 2>&1
check "dpkg --purge succeeds" test $? -eq 0
check "purge: /etc/voltad is gone (per-GPU configs too)" test ! -e "$root/etc/voltad"
check "purge: /var/lib/voltad is gone" test ! -e "$root/var/lib/voltad"
check "purge: no enablement link is left" \
  bash -c "! find '$root/etc/systemd/system' -name 'voltad*' | grep -q ."
check "purge: the user stays (files elsewhere may be its)" chroot "$root" getent passwd voltad
check "purge: dpkg forgot the package" \
  bash -c "! chroot '$root' dpkg-query -W -f='\${Status}' voltad 2>/dev/null | grep -q installed"

step "done"
((fails == 0)) || { echo "$fails check(s) failed"; exit 1; }
echo "all package checks passed"
