#!/usr/bin/env bash
# Prints the V100's (sm_70) machine code for a kernel file: what the portable
# path runs there, for counting a loop's instructions and memory operations
# without a V100 (docs/KERNEL-NOTES-RUNS-49-51.md, "sm_70 SASS").
#
# usage: scripts/sm70-sass.sh FILE.cu [NAME-REGEX]
#   NAME-REGEX keeps the kernels whose (demangled) name matches (an awk
#   extended regular expression).
#   VOLTAD_SM70_CUBIN=PATH also keeps the cubin there.
#
# How: the machine's nvcc parses FILE with __CUDA_ARCH__ forced to 700 and
# CUDA 12.9's ptxas assembles the PTX for sm_70, as scripts/ci-sm70.sh does.
# CUDA 13's disassemblers refuse sm_70 and PyPI has none older, so the
# disassembler is CUDA 11.8's cuobjdump from Debian 12's non-free
# nvidia-cuda-toolkit (about 80 MB, fetched once with a private apt
# configuration: the system's sources are not touched; cached under
# ~/.cache/voltad/cuda11.8-disasm). It reads the cubins ptxas 12.9 writes.
set -euo pipefail
self=$(realpath "$0")
[[ $# -ge 1 && -f $1 ]] || { sed -n '6,10p' "$self" | sed 's/^# \{0,1\}//' >&2; exit 2; }
cu=$(realpath "$1")
filter=${2:-}
cubin_copy=${VOLTAD_SM70_CUBIN:+$(realpath -m "$VOLTAD_SM70_CUBIN")}
cd "$(dirname "$self")/.."
apt_dir='' work=''
trap 'rm -rf ${apt_dir:+"$apt_dir"} ${work:+"$work"}' EXIT
nvcc13=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $nvcc13 ]] || { echo "sm70-sass: no nvcc on this machine" >&2; exit 1; }
ptxas12=$(bash scripts/cuda12-toolkit.sh)

cache="${VOLTAD_SM70_DISASM:-$HOME/.cache/voltad/cuda11.8-disasm}"
if [[ ! -x $cache/cuobjdump || ! -x $cache/nvdisasm ]]; then
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null || [[ ! -f $keyring ]]; then
    echo "sm70-sass: fetching the disassembler needs apt-get, dpkg and $keyring (Debian's" \
      "debian-archive-keyring); or put CUDA 11.8's cuobjdump and nvdisasm in $cache" \
      "(VOLTAD_SM70_DISASM names another folder)" >&2
    exit 1
  fi
  echo "sm70-sass: fetching CUDA 11.8's disassembler (Debian 12 non-free nvidia-cuda-toolkit, once)" >&2
  apt_dir=$(mktemp -d)
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/x"
  echo "deb [signed-by=$keyring] http://deb.debian.org/debian bookworm non-free" \
    >"$apt_dir/sources.list"
  opts=(-o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache"
        -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)")
  apt-get "${opts[@]}" -qq update >&2
  (cd "$apt_dir" && apt-get "${opts[@]}" -qq download nvidia-cuda-toolkit >&2)
  dpkg -x "$apt_dir"/nvidia-cuda-toolkit_*.deb "$apt_dir/x"
  mkdir -p "$cache"
  cp "$apt_dir/x/usr/bin/cuobjdump" "$apt_dir/x/usr/bin/nvdisasm" "$cache/"
fi

work=$(mktemp -d)
"$nvcc13" -std=c++17 -I. -arch=compute_75 -ptx -U__CUDA_ARCH__ -D__CUDA_ARCH__=700 \
  --expt-relaxed-constexpr "$cu" -o "$work/k.ptx"
sed -i 's/^\.target sm_75/.target sm_70/; s/^\.version 9\.[0-9]*/.version 8.8/' "$work/k.ptx"
"$ptxas12" -arch=sm_70 "$work/k.ptx" -o "$work/k.cubin"
if [[ -n $cubin_copy ]]; then cp "$work/k.cubin" "$cubin_copy"; fi
# One kernel's listing runs from its "Function :" line to the next.
"$cache/cuobjdump" -sass "$work/k.cubin" |
  awk -v re="$filter" -v cxxfilt="$(command -v c++filt || true)" '
    /Function :/ {
      name = $0; sub(/.*Function : /, "", name)
      if (cxxfilt != "") { cmd = cxxfilt " \"" name "\""; cmd | getline name; close(cmd) }
      keep = (re == "" || name ~ re)
      if (keep) print "\t\tFunction : " name
      next
    }
    keep { print }'
