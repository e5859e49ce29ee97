#!/usr/bin/env bash
# Builds voltad's Debian 12 package: a Release build in build-deb/ with
# Debian's compiler flags (dpkg-buildflags: -O2, stack protector, fortify,
# relro, bindnow), then CPack's DEB generator (cmake/VoltadPackaging.cmake).
# Prints the .deb's path on its last line.
#
#   scripts/build-deb.sh [--build-dir DIR] [--cuda ON|OFF|AUTO] [--lintian] [-- CMAKE_ARGS...]
#   scripts/build-deb.sh --package-only BUILD_DIR [--out DIR] [--lintian]
#
# --package-only packages a tree that is already built (the tests package
# the CI build that way, without a second compile).
#
# CUDA: ON by default: without nvcc the build stops (the packaged config's
# backend is cuda; a package without it would not start). --cuda OFF makes
# a CPU-only package on purpose; AUTO takes CUDA when nvcc is found. The
# architectures default to the toolkit's list (70..90 with CUDA 12.x;
# 75..90 with CUDA 13, which cannot build for the V100). A package for a
# V100 server needs CUDA 12.x (12.9 at most):
#
#   PATH=/usr/local/cuda-12.9/bin:$PATH scripts/build-deb.sh -- -DCMAKE_CUDA_ARCHITECTURES=70
#
# (docs/V100.md). The CUDA runtime is linked statically; the package needs
# only the NVIDIA driver (libcuda.so.1), which it does not depend on.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-deb
cuda=ON
out=
package_only=
lintian=0
cmake_args=()
while (($#)); do
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --cuda) cuda=$2; shift 2 ;;
    --package-only) package_only=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --lintian) lintian=1; shift ;;
    --) shift; cmake_args=("$@"); break ;;
    *) echo "build-deb: unknown argument '$1' (see the comment at the top of $0)" >&2; exit 64 ;;
  esac
done

for tool in dpkg-deb dpkg-shlibdeps cpack; do
  command -v "$tool" >/dev/null || { echo "build-deb: $tool is missing (scripts/install-deps.sh)" >&2; exit 69; }
done

if [[ -n $package_only ]]; then
  build=$package_only
  [[ -f $build/CPackConfig.cmake ]] || { echo "build-deb: $build is not a configured build (no CPackConfig.cmake)" >&2; exit 66; }
else
  # Debian's flags for C++ and the linker; CUDA keeps CMake's Release flags.
  export DEB_BUILD_MAINT_OPTIONS=hardening=+all
  cppflags=$(dpkg-buildflags --get CPPFLAGS)
  cxxflags=$(dpkg-buildflags --get CXXFLAGS)
  ldflags=$(dpkg-buildflags --get LDFLAGS)
  generator=()
  command -v ninja >/dev/null && [[ ! -f $build/CMakeCache.txt ]] && generator=(-G Ninja)
  cmake -S . -B "$build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-DNDEBUG \
    -DCMAKE_CXX_FLAGS="$cppflags $cxxflags" -DCMAKE_EXE_LINKER_FLAGS="$ldflags" \
    -DVOLTAD_CUDA="$cuda" -DVOLTAD_TESTS=OFF "${cmake_args[@]}"
  cmake --build "$build" --parallel "$(nproc)"
fi

out=${out:-$build}
mkdir -p "$out"
# cpack runs the install rules into a staging tree, strips the binaries,
# asks dpkg-shlibdeps for the library dependencies and writes the archive.
cpack --config "$build/CPackConfig.cmake" -B "$out" >"$out/cpack.log" 2>&1 || {
  echo "build-deb: cpack failed; $out/cpack.log:" >&2
  tail -30 "$out/cpack.log" >&2
  exit 1
}
rm -rf "$out/_CPack_Packages"
deb=$(ls -t "$out"/voltad_*.deb | head -1)

if ((lintian)); then
  # The package's overrides (each with its reason) are in
  # packaging/debian/lintian-overrides; anything else that is an error or
  # a warning fails.
  lintian --fail-on error,warning --info "$deb"
fi
echo "$deb"
