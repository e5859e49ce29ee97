#!/usr/bin/env bash
# Installs every Debian package that voltad's build and tests need (the
# Python packages the tests drive it with go into a venv: scripts/test-venv.sh).
# Idempotent and non-interactive:
# a second run on a machine that has everything does nothing but check.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git curl ca-certificates unzip
  clang libclang-rt-14-dev            # libFuzzer targets for the parsers
  libhwloc-dev hwloc libnuma-dev      # placement (daemon/)
  libyaml-cpp-dev                     # config (daemon/)
  libboost1.74-dev                    # Asio + Beast (daemon/)
  libsystemd-dev systemd dbus         # notify, sd-bus (daemon/); systemd-analyze and
                                      # systemd-socket-activate for the unit and activation tests
  libspdlog-dev libfmt-dev            # logging
  nlohmann-json3-dev                  # JSON (daemon/, engine tools)
  doctest-dev                         # unit tests
  python3 python3-venv python3-pip    # fixture and client scripts; pip fetches the demo model
  lintian debootstrap groff-base      # the .deb: lint, a fresh Debian 12 root, man pages (tests/packaging)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "install-deps: all Debian packages present"
fi
