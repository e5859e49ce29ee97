#!/usr/bin/env bash
# The files a branch changes since it left main (or BASE), as the branch has
# them, copied under DIR: a version of the tree for scripts/device-ab.sh
# --tree NAME=DIR (keep DIR git-ignored and carry it). Files the branch
# deletes are not expressible there; they are named and left out.
#   bash scripts/branch-files.sh next/paired-b .pb [BASE]
set -euo pipefail
cd "$(dirname "$0")/.."
(($# >= 2)) || { echo "usage: $0 BRANCH DIR [BASE]" >&2; exit 64; }
branch=$1 dir=$2 base=${3:-main}
git rev-parse --verify -q "$branch^{commit}" >/dev/null || { echo "branch-files: no branch $branch" >&2; exit 64; }
rm -rf "$dir"
n=0
while IFS=$'\t' read -r status path; do
  if [[ $status == D ]]; then
    echo "branch-files: $branch deletes $path: left out" >&2
    continue
  fi
  mkdir -p "$dir/$(dirname "$path")"
  git show "$branch:$path" >"$dir/$path"
  n=$((n + 1))
done < <(git diff --no-renames --name-status "$base...$branch")
echo "branch-files: $n file(s) of $branch under $dir"
