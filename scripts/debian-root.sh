#!/usr/bin/env bash
# Makes a fresh Debian 12 (bookworm) root file system in DIR, to install
# voltad's package into (tests/packaging/deb_install.sh): debootstrap
# --variant=minbase (essential and required packages, apt), plus PACKAGES.
#
#   scripts/debian-root.sh DIR [PACKAGE...]
#
# Needs root and a Debian mirror (VOLTAD_DEBIAN_MIRROR, default
# deb.debian.org). The downloaded packages are kept in
# VOLTAD_DEBOOTSTRAP_CACHE (default ~/.cache/voltad/debootstrap) so a second
# root costs the unpacking only (about a minute) instead of the downloads.
set -euo pipefail
(($# >= 1)) || { echo "usage: $0 DIR [PACKAGE...]" >&2; exit 64; }
dir=$1
shift
mirror=${VOLTAD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${VOLTAD_DEBOOTSTRAP_CACHE:-$HOME/.cache/voltad/debootstrap}

[[ $(id -u) -eq 0 ]] || { echo "debian-root: debootstrap needs root" >&2; exit 77; }
command -v debootstrap >/dev/null || { echo "debian-root: no debootstrap (scripts/install-deps.sh installs it)" >&2; exit 77; }
if [[ -e $dir && -n $(ls -A "$dir" 2>/dev/null) ]]; then
  echo "debian-root: $dir is not empty" >&2
  exit 73
fi

mkdir -p "$dir" "$cache"
include=()
(($#)) && include=(--include="$(IFS=,; echo "$*")")
log="$dir.debootstrap.log"
start=$(date +%s)
# --cache-dir must be absolute; the mirror's Release file is checked against
# the keyring debootstrap ships (debian-archive-keyring).
if ! debootstrap --variant=minbase "${include[@]}" --cache-dir="$(realpath "$cache")" \
     bookworm "$dir" "$mirror" >"$log" 2>&1; then
  echo "debian-root: debootstrap failed; the end of $log:" >&2
  tail -20 "$log" >&2
  exit 1
fi
echo "debian-root: bookworm minbase in $dir ($(( $(date +%s) - start ))s, $(du -sh "$dir" | cut -f1))"
