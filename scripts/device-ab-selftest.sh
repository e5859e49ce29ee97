#!/usr/bin/env bash
# Self-test of scripts/device-ab.sh's own logic, without a GPU: a scratch
# tree whose device-bench.sh and device-test.sh are stubs (the "bench"
# prints tok/s from the version of a file it was built with, and from an
# environment switch), then versions of that file (--tree, --before), a
# version whose tests fail, a file only a version has, a variant that is a
# version plus a switch, the refusals, and a --tests pattern that picks no
# gpu test (device-test.sh's own check of it too). Run by scripts/test.sh.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}

cd "$tmp" || exit 1
mkdir -p scripts kernels .p1/kernels .p2/kernels .p3/kernels
cp "$here/device-ab.sh" scripts/
echo main >kernels/k.cu
echo p1 >.p1/kernels/k.cu
echo p2 >.p2/kernels/k.cu
echo p3 >.p3/kernels/k.cu
echo only-p3 >.p3/kernels/new.cu
cat >scripts/device-bench.sh <<'STUB'
#!/usr/bin/env bash
# Stub: "builds" a bench whose tok/s says which k.cu it was built from.
mkdir -p build-bench/bin
v=$(cat kernels/k.cu)
t=100; [[ $v == p1 ]] && t=110; [[ $v == p2 ]] && t=90; [[ $v == p3 ]] && t=120
[[ $v == p3 && ! -f kernels/new.cu ]] && t=1  # p3's own file must be there
cat >build-bench/bin/voltad-bench <<EOB
#!/usr/bin/env bash
t=$t; [[ \${VOLTAD_X:-} == 0 ]] && t=\$((t - 5))
echo "{\"decode\":[{\"batch\":8,\"tokens_per_second\":\$t}]}"
EOB
chmod +x build-bench/bin/voltad-bench
STUB
cat >scripts/device-test.sh <<'STUB'
#!/usr/bin/env bash
# A stand-in for the real script: --tests=none picks no test; the tests fail on version p2.
if [[ " $* " == *" --select-only "* ]]; then [[ " $* " != *" --tests=none "* ]]; exit; fi
echo "== device-test summary =="
[[ $(cat kernels/k.cu) != p2 ]]
STUB

median() {  # median VARIANT OUTPUT: the variant's median b8
  awk -v v="$1" '/^== median/ {m = 1; next} m && $2 == v {sub("b8=", "", $3); print $3}' <<<"$2"
}
out=$(VOLTAD_MODEL_DIR=$tmp OUT=$tmp/out bash scripts/device-ab.sh --reps 2 --tree p1=.p1 \
  --tree p2=.p2 --tree p3=.p3 --before .p1 --tests x -- base p1 p1,VOLTAD_X=0 p2 p3 before 2>&1)
rc=$?
check "versions: exit 0" test "$rc" -eq 0
check "base runs the tree's build" test "$(median base "$out")" = 100.0
check "a --tree version runs its build" test "$(median p1 "$out")" = 110.0
check "a version with a switch" test "$(median p1,VOLTAD_X=0 "$out")" = 105.0
check "a version's own file is there for its build" test "$(median p3 "$out")" = 120.0
check "--before is the variant before" test "$(median before "$out")" = 110.0
check "a version whose tests fail is left out" test -z "$(median p2 "$out")"
check "and said so" grep -q "the tests failed on 'p2'" <<<"$out"
check "the tree's file is back" test "$(cat kernels/k.cu)" = main
check "a version's own file is removed" test ! -e kernels/new.cu
check "the runs' JSON in ab.tar" test -s "$tmp/out/ab.tar"

out=$(VOLTAD_MODEL_DIR=$tmp bash scripts/device-ab.sh --reps 1 -- base nope 2>&1); rc=$?
check "an unknown variant: exit 64" test "$rc" -eq 64
check "an unknown variant: named" grep -q "'nope' is no --tree NAME" <<<"$out"
out=$(bash scripts/device-ab.sh --tree base=.p1 -- base 2>&1); rc=$?
check "--tree base=...: exit 64" test "$rc" -eq 64
out=$(bash scripts/device-ab.sh --tree p9=.nowhere -- base p9 2>&1); rc=$?
check "--tree to no folder: exit 64" test "$rc" -eq 64

rm -rf build-bench
out=$(bash scripts/device-ab.sh --tests none -- base 2>&1); rc=$?
check "--tests that picks no test: exit 2" test "$rc" -eq 2
check "--tests that picks no test: nothing built" test ! -e build-bench

# The real device-test.sh's pick (no GPU needed): a pattern that picks no
# gpu test stops it, naming the targets; --select-only lists a good pick.
out=$(cd "$here/.." && bash scripts/device-test.sh --tests='^test_gemm$' --select-only 2>&1); rc=$?
check "device-test: a pattern that picks no test: exit 2" test "$rc" -eq 2
check "device-test: and the targets named" grep -q "kernels_test_gemm" <<<"$out"
out=$(cd "$here/.." && bash scripts/device-test.sh --tests='test_gemm$' --select-only 2>&1); rc=$?
check "device-test --select-only: exit 0" test "$rc" -eq 0
check "device-test --select-only: the pick" grep -q "picks kernels_test_gemm\$" <<<"$out"

((fails == 0)) || { echo "device-ab-selftest: $fails failure(s)"; exit 1; }
echo "device-ab-selftest: all checks passed"
