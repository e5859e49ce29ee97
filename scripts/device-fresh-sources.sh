#!/usr/bin/env bash
# Makes ninja see every source that changed since the last build in BUILD_DIR.
#
# The GPU machine receives a copy of the working tree that keeps each file's
# modification time from this machine, while its build directories survive
# between calls. A file whose content differs from what was built there, but
# whose time is older than the object built from it (it was edited here
# before a patch was applied and built there, say), is then not rebuilt:
# PERFORMANCE.md run 16 measured such a binary. This script keeps a list of
# the sources' SHA-1 sums in BUILD_DIR and touches each file whose sum
# changed; a build directory without the list (made before this script, or
# by hand) gets every source touched once.
#   bash scripts/device-fresh-sources.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: $0 BUILD_DIR}
mkdir -p "$build"
list=$build/.source-sums
new=$(mktemp)
trap 'rm -f "$new"' EXIT
find kernels engine daemon tests cmake CMakeLists.txt -type f \
  \( -name '*.cu' -o -name '*.cuh' -o -name '*.h' -o -name '*.cpp' -o -name '*.cmake' -o -name CMakeLists.txt \) \
  -print0 2>/dev/null | sort -z | xargs -0 sha1sum >"$new"
if [[ -f $list ]]; then
  # Lines of the new list not in the old one: changed or new files.
  changed=$(comm -13 <(sort "$list") <(sort "$new") | awk '{print $2}')
else
  changed=$(awk '{print $2}' "$new")
fi
n=0
for f in $changed; do
  touch "$f"
  n=$((n + 1))
done
cp "$new" "$list"
echo "device-fresh-sources: $n file(s) marked for rebuild in $build"
