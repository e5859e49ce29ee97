# Sourced by the device-*.sh scripts: binaries built here travel to the GPU
# machine (which has no Debian -dev packages) in a git-ignored folder under
# .deps/, with the shared libraries they need beyond the ones that machine
# has in newer versions.

# ship_binaries DEST BUILD_DIR EXCLUDE_REGEX PROGRAM...
#   Copies BUILD_DIR/bin/PROGRAM (debug info stripped) to DEST/bin and every
#   library ldd resolves for them, except the C library family, the loader,
#   the C++ runtime and the names matching EXCLUDE_REGEX (extended regex on
#   the file name, "" for none), to DEST/lib.
ship_binaries() {
  local dest=$1 build=$2 exclude=$3
  shift 3
  rm -rf "$dest"
  mkdir -p "$dest/bin" "$dest/lib"
  local p
  for p in "$@"; do strip --strip-debug -o "$dest/bin/$p" "$build/bin/$p" || return 1; done
  ldd "$dest"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' |
    { if [[ -n $exclude ]]; then grep -Ev "$exclude"; else cat; fi; } |
    while read -r lib; do cp -L "$lib" "$dest/lib/"; done
}

# require_shipped DEST SCRIPT PROGRAM...: on the GPU machine, every program
# must have arrived (carry .deps).
require_shipped() {
  local dest=$1 script=$2 p
  shift 2
  for p in "$@"; do
    [[ -x $dest/bin/$p ]] || {
      echo "$script: no $dest/bin/$p (run --prepare on the build machine, carry .deps)" >&2
      return 1
    }
  done
}
