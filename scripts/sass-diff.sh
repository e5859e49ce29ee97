#!/usr/bin/env bash
# Whether a change leaves kernels' machine code as it was, without a GPU:
# compiles FILE (a kernels/*.cu) at REV and in the working tree for one
# architecture and compares the SASS kernel by kernel (scripts/sass-diff.py;
# arguments after -- go to it, e.g. --rename ', false>\(=>>(' where the
# kernels gained a template argument). Run 63 used it to show that the
# plain narrow GEMMs compile as before the norm's pieces.
#   bash scripts/sass-diff.sh [--arch 90] REV kernels/gemm_narrow.cu [-- --rename ...]
# Needs nvcc for the architecture (CUDA 13 here: sm_75 and up) and
# nvdisasm (scripts/nvdisasm-path.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
arch=90
if [[ ${1:-} == --arch ]]; then arch=$2; shift 2; fi
(($# >= 2)) || { sed -n '2,11p' "$0"; exit 2; }
rev=$1 file=$2
shift 2
[[ ${1:-} == -- ]] && shift
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
nvdisasm=$(bash scripts/nvdisasm-path.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/old"
git archive "$rev" | tar -x -C "$work/old"
flags=(-std=c++17 -O3 -I. -arch="sm_$arch" --expt-relaxed-constexpr -cubin)
(cd "$work/old" && "$nvcc" "${flags[@]}" "$file" -o "$work/old.cubin") &
"$nvcc" "${flags[@]}" "$file" -o "$work/new.cubin"
wait $!
"$nvdisasm" -c "$work/old.cubin" > "$work/old.sass"
"$nvdisasm" -c "$work/new.cubin" > "$work/new.sass"
python3 scripts/sass-diff.py "$@" "$work/old.sass" "$work/new.sass"
