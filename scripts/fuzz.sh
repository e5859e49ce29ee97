#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz and runs
# the GGUF reader fuzzer for a bounded time on the seed corpus.
#   scripts/fuzz.sh [SECONDS]   (default 60)
# Exits non-zero when the fuzzer finds a crash, leak or sanitizer error; the
# reproducer is left in build-fuzz/artifacts/ (run build-fuzz/bin/fuzz_gguf FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
build=build-fuzz

CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DVOLTAD_FUZZ=ON -DVOLTAD_CUDA=OFF \
  -DVOLTAD_DAEMON=OFF -DVOLTAD_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" fuzz_gguf make_gguf_corpus

# The fuzzer adds what it finds to a scratch copy, never to the committed seeds.
work="$build/corpus_gguf"
rm -rf "$work" && mkdir -p "$work" "$build/artifacts"
cp tests/fuzz/corpus_gguf/* "$work/"
"$build/bin/make_gguf_corpus" "$work"

echo "fuzz.sh: fuzzing the GGUF reader for ${seconds}s" >&2
"$build/bin/fuzz_gguf" "$work" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$build/artifacts/" -print_final_stats=1
