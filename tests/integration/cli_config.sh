#!/usr/bin/env bash
# voltad's config modes through the real binary: every problem as
# FILE:LINE:COL, exit codes, --dump-config round trip, clear start failures.
set -uo pipefail
bin=${VOLTAD_BIN_DIR:?}
src=${VOLTAD_SOURCE_DIR:?}
tmp=$(mktemp -d)
fake_pid=
trap '[[ -n $fake_pid ]] && kill "$fake_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}

cat >"$tmp/three.yaml" <<'YAML'
model:
  path: /m.gguf
memory:
  vram_fraktion: 0.9
engine:
  max_context: ten
log:
  level: loud
YAML
out=$("$bin/voltad" --verify-config "$tmp/three.yaml" 2>&1); rc=$?
check "three mistakes: non-zero exit (78)" test "$rc" -eq 78
check "three mistakes: three FILE:LINE:COL lines" \
  test "$(grep -cE "^$tmp/three.yaml:[0-9]+:[0-9]+: " <<<"$out")" -eq 3
check "unknown key suggests the nearest" grep -q "three.yaml:4:3: unknown key 'memory.vram_fraktion'; did you mean 'vram_fraction'?" <<<"$out"
check "wrong type names the key" grep -q "three.yaml:6:16: engine.max_context: expected an integer" <<<"$out"
check "bad choice names the choices" grep -q "three.yaml:8:10: log.level: invalid value 'loud'" <<<"$out"

"$bin/voltad" --verify-config "$src/etc/voltad.yaml" >/dev/null 2>&1
check "example config verifies" test $? -eq 0

"$bin/voltad" --dump-config --config "$src/etc/voltad.yaml" >"$tmp/dumped.yaml"
check "--dump-config exits 0" test $? -eq 0
"$bin/voltad" --verify-config "$tmp/dumped.yaml" >/dev/null 2>&1
check "--dump-config output verifies" test $? -eq 0
check "--dump-config carries help comments" grep -q "# Share of the card's total memory" "$tmp/dumped.yaml"

# Without --config and without the daemon's default file, --dump-config
# prints the built-in defaults (as --plan plans with them) and says so.
mkdir -p "$tmp/noconf"
CONFIGURATION_DIRECTORY="$tmp/noconf" "$bin/voltad" --dump-config >"$tmp/defaults.yaml" 2>"$tmp/defaults.err"
check "--dump-config without a config file: exit 0" test $? -eq 0
check "--dump-config without a config file: says the defaults are shown" \
  grep -q "^# $tmp/noconf/voltad.yaml does not exist: the built-in defaults" "$tmp/defaults.yaml"
out=$("$bin/voltad" --verify-config "$tmp/defaults.yaml" 2>&1)
check "--dump-config without a config file: the defaults verify, but for model.path (no default)" \
  test "$(grep -c "^$tmp/defaults.yaml:" <<<"$out")" -eq 1 -a "$(grep -c "model.path: must not be empty" <<<"$out")" -eq 1
printf 'log:\n  level: loud\n' >"$tmp/noconf/voltad.yaml"
CONFIGURATION_DIRECTORY="$tmp/noconf" "$bin/voltad" --dump-config >/dev/null 2>&1
check "--dump-config reads the default file where there is one (a bad one: 78)" test $? -eq 78

"$bin/voltad" --no-such-flag >/dev/null 2>&1
check "unknown flag exits 64" test $? -eq 64
out=$("$bin/voltad" --assume-vram 1GiB 2>&1); rc=$?
check "--assume-vram without --plan: 64, says it goes with --plan" \
  test "$rc" -eq 64 -a "$(grep -c -- "--assume-vram goes with --plan" <<<"$out")" -eq 1
printf 'model:\n  path: x\nplacement:\n  cpus: 5-2\n' >"$tmp/backwards.yaml"
out=$("$bin/voltad" --verify-config "$tmp/backwards.yaml" 2>&1); rc=$?
check "--verify-config, a CPU range that runs backwards: 78 at FILE:LINE:COL, as the daemon would refuse it" \
  test "$rc" -eq 78 -a "$(grep -c "^$tmp/backwards.yaml:4:[0-9]*: placement.cpus: invalid CPU list: the range '5-2' runs backwards" <<<"$out")" -eq 1

printf 'model:\n  path: %s/none.gguf\n' "$tmp" >"$tmp/nomodel.yaml"
out=$("$bin/voltad" --config "$tmp/nomodel.yaml" 2>&1); rc=$?
check "missing model: exit 66" test "$rc" -eq 66
check "missing model: says so and where" grep -q "no model to serve: model.path is '$tmp/none.gguf'" <<<"$out"
out=$("$bin/voltad" --plan --config "$tmp/nomodel.yaml" --assume-vram 1GiB 2>&1); rc=$?
check "--plan, missing model: 66, as the daemon says it" \
  test "$rc" -eq 66 -a -n "$(grep -F "no model to serve: model.path is '$tmp/none.gguf' in $tmp/nomodel.yaml, and no file is there" <<<"$out")"
out=$("$bin/voltad" --plan --model "$tmp" --assume-vram 1GiB 2>&1); rc=$?
check "--plan --model DIRECTORY: 66, not a regular file" \
  test "$rc" -eq 66 -a -n "$(grep -F "no model to serve: --model is '$tmp', which is not a regular file. Pass --model a GGUF file." <<<"$out")"

# A model behind a directory the daemon's user cannot enter is there, but
# unreadable: said as such, with the directory (exit 65), not "no file is
# there". Needs root and setpriv for a second uid.
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
if [[ $(id -u) -eq 0 ]] && command -v setpriv >/dev/null && as_nobody "$bin/voltad" --version >/dev/null 2>&1; then
  open=$(mktemp -d -p /tmp)  # $tmp's parents may be closed to uid 65534
  chmod 755 "$open"
  mkdir -m 700 "$open/locked"
  : >"$open/locked/m.gguf"
  printf 'model:\n  path: %s/locked/m.gguf\n' "$open" >"$open/locked.yaml"
  chmod 644 "$open/locked.yaml"
  out=$(as_nobody "$bin/voltad" --config "$open/locked.yaml" 2>&1); rc=$?
  check "model behind an unenterable directory: exit 65" test "$rc" -eq 65
  check "model behind an unenterable directory: names it" \
    grep -q "Permission denied: the directory '$open/locked' cannot be entered by uid 65534" <<<"$out"
  # --plan says what the daemon says, for model.path and for --model.
  out=$(as_nobody "$bin/voltad" --plan --config "$open/locked.yaml" --assume-vram 1GiB 2>&1); rc=$?
  check "--plan, model.path behind an unenterable directory: 65, names it, and where from" \
    test "$rc" -eq 65 -a -n "$(grep -F "(model.path in $open/locked.yaml): Permission denied: the directory '$open/locked'" <<<"$out")"
  out=$(as_nobody "$bin/voltad" --plan --model "$open/locked/m.gguf" --assume-vram 1GiB 2>&1); rc=$?
  check "--plan --model behind an unenterable directory: 65, names it" \
    test "$rc" -eq 65 -a -n "$(grep -F "(--model): Permission denied: the directory '$open/locked'" <<<"$out")"
  rm -rf "$open"
else
  echo "skip the unenterable directory (needs root, setpriv, and a build uid 65534 can run)"
fi

# voltactl against what is not a working voltad (tests/integration/fake_voltad.py):
# a path that is not a socket, a daemon that never answers (--timeout), answers
# of unexpected shapes (an error, not an abort), a stream cut off mid-answer
# (exit 1, said); and its own input: text that is not UTF-8 (64, not an
# abort), a mistyped short option, "--" before text that starts with '-'.
start_fake() {  # start_fake SOCKET MODE
  [[ -n $fake_pid ]] && { kill "$fake_pid"; wait "$fake_pid" 2>/dev/null; }
  # Emptied here, not by the background job's redirection: that one may come
  # after the wait below has read the last fake's "ready" (a flaky test).
  : >"$tmp/fake.out"
  python3 "$src/tests/integration/fake_voltad.py" "$1" "$2" >>"$tmp/fake.out" &
  fake_pid=$!
  for _ in $(seq 200); do grep -q ready "$tmp/fake.out" && return; sleep 0.05; done
  echo "FAIL the fake daemon ($2) did not start"; fails=$((fails + 1))
}
: >"$tmp/regular"
out=$("$bin/voltactl" --socket "$tmp/regular" status 2>&1); rc=$?
check "voltactl, a regular file as the socket: 69, said as such" \
  test "$rc" -eq 69 -a "$(grep -c "it is a regular file, not voltad's socket" <<<"$out")" -eq 1
start_fake "$tmp/silent.sock" silent
t0=$(date +%s)
out=$("$bin/voltactl" --socket="$tmp/silent.sock" --timeout 2 status 2>&1); rc=$?
check "voltactl status, a daemon that never answers: 69 after --timeout" \
  test "$rc" -eq 69 -a $(($(date +%s) - t0)) -lt 10 -a "$(grep -c "no answer from .* within 2 s" <<<"$out")" -eq 1
for args in "generate hi" "generate hi --max-tokens 2" "models"; do
  t0=$(date +%s)
  # shellcheck disable=SC2086
  out=$(timeout 20 "$bin/voltactl" --socket "$tmp/silent.sock" --timeout 2 $args 2>&1); rc=$?
  check "voltactl $args, a daemon that never answers: 69 after --timeout" \
    test "$rc" -eq 69 -a $(($(date +%s) - t0)) -lt 10 -a "$(grep -c "no answer from" <<<"$out")" -eq 1
done
start_fake "$tmp/full.sock" full
t0=$(date +%s)
out=$(timeout 20 "$bin/voltactl" --socket "$tmp/full.sock" --timeout 2 status 2>&1); rc=$?
check "voltactl status, a daemon that no longer accepts: 69, no hang, said" \
  test "$rc" -eq 69 -a $(($(date +%s) - t0)) -lt 10 \
  -a "$(grep -Ec "no answer from|not taking connections" <<<"$out")" -eq 1
out=$("$bin/voltactl" --timeout 0 status 2>&1); rc=$?
check "voltactl --timeout 0: usage error 64" test "$rc" -eq 64
out=$("$bin/voltactl" --socket= status 2>&1); rc=$?
check "voltactl --socket= (empty): usage error 64, said" \
  test "$rc" -eq 64 -a "$(grep -c "needs a path, not an empty one" <<<"$out")" -eq 1
start_fake "$tmp/odd.sock" odd
for cmd in status models; do
  out=$("$bin/voltactl" --socket "$tmp/odd.sock" $cmd 2>&1); rc=$?
  check "voltactl $cmd, an answer of an unexpected shape: exit 1 with a message, no abort" \
    test "$rc" -eq 1 -a "$(grep -c "not what was expected" <<<"$out")" -eq 1
done
out=$("$bin/voltactl" --socket "$tmp/odd.sock" generate hi 2>&1); rc=$?
check "voltactl generate, a stream whose error is a bare string: exit 1 saying it" \
  test "$rc" -eq 1 -a "$(grep -c "the generation failed: \"boom\"" <<<"$out")" -eq 1
out=$("$bin/voltactl" --socket "$tmp/odd.sock" bench --concurrency 1,2 --max-tokens 2 2>&1); rc=$?
check "voltactl bench, streams of unexpected shapes: no abort (exit 0 or 1)" \
  test "$rc" -le 1
start_fake "$tmp/ssh.sock" ssh
out=$("$bin/voltactl" --socket "$tmp/ssh.sock" status 2>&1); rc=$?
check "voltactl status, another service's banner: exit 1, not HTTP, said" \
  test "$rc" -eq 1 -a "$(grep -c "is not HTTP (is another service listening there?)" <<<"$out")" -eq 1
start_fake "$tmp/plain.sock" plain
out=$("$bin/voltactl" --socket "$tmp/plain.sock" status 2>&1); rc=$?
check "voltactl status, a web server that is not voltad: exit 1, said (not 'answered 200')" \
  test "$rc" -eq 1 -a "$(grep -c "the answer is not voltad's" <<<"$out")" -eq 1 \
  -a "$(grep -c "answered 200" <<<"$out")" -eq 0
out=$("$bin/voltactl" --socket "$tmp/plain.sock" generate hi 2>&1); rc=$?
check "voltactl generate, a 200 that is not an event stream: exit 1, said" \
  test "$rc" -eq 1 -a "$(grep -c "is not an event stream (Content-Type 'text/plain')" <<<"$out")" -eq 1
out=$("$bin/voltactl" --socket "$tmp/plain.sock" bench --concurrency 1,2 --max-tokens 2 2>&1); rc=$?
check "voltactl bench, a web server that is not voltad: exit 1 before any level, said" \
  test "$rc" -eq 1 -a "$(grep -c "the answer is not voltad's" <<<"$out")" -eq 1 \
  -a "$(grep -c "client(s) failed" <<<"$out")" -eq 0
start_fake "$tmp/busy.sock" busy
out=$("$bin/voltactl" --socket "$tmp/busy.sock" status 2>&1); rc=$?
check "voltactl status, a daemon too busy for this caller (429): 69, as a health check expects, said" \
  test "$rc" -eq 69 -a "$(grep -c "answered 429: too many connections of yours" <<<"$out")" -eq 1
start_fake "$tmp/undone.sock" undone
out=$("$bin/voltactl" --socket "$tmp/undone.sock" generate hi --max-tokens 2 2>&1); rc=$?
check "voltactl generate, a stream without its [DONE]: exit 1, the text so far, said" \
  test "$rc" -eq 1 -a "$(grep -c "partial" <<<"$out")" -eq 1 \
  -a "$(grep -c "ended without its closing \[DONE\]" <<<"$out")" -eq 1
start_fake "$tmp/close.sock" close
for args in status reload "generate hi --max-tokens 2"; do
  # shellcheck disable=SC2086
  out=$("$bin/voltactl" --socket "$tmp/close.sock" $args 2>&1); rc=$?
  check "voltactl $args, a daemon that closes without answering: 69, the likely causes named" \
    test "$rc" -eq 69 -a "$(grep -c "closed the connection without answering: too many connections of yours" <<<"$out")" -eq 1 \
    -a "$(grep -c "answered 0" <<<"$out")" -eq 0
done
# COMMAND --help: the usage on stdout, exit 0, no daemon asked; after --
# it is a prompt like any other.
for cmd in generate chat status bench plan; do
  out=$("$bin/voltactl" --socket "$tmp/none.sock" $cmd --help 2>&1); rc=$?
  check "voltactl $cmd --help: exit 0, the usage" \
    test "$rc" -eq 0 -a "$(grep -c "^usage: voltactl" <<<"$out")" -eq 1
done
"$bin/voltactl" --socket "$tmp/none.sock" generate -- --help >/dev/null 2>&1
check "voltactl generate -- --help: a prompt, sent (no daemon: 69)" test $? -eq 69
start_fake "$tmp/broken.sock" broken
out=$("$bin/voltactl" --socket "$tmp/broken.sock" generate hello 2>&1); rc=$?
check "voltactl generate, the stream cut off: 69 (the daemon is gone), the text so far, why" \
  test "$rc" -eq 69 -a "$(grep -c "partial" <<<"$out")" -ge 1 -a "$(grep -c "closed the connection in the middle of the answer" <<<"$out")" -eq 1
out=$("$bin/voltactl" --socket "$tmp/broken.sock" generate "$(printf 'ok\xc3')" 2>&1); rc=$?
check "voltactl generate, a prompt that is not UTF-8: 64, the byte named" \
  test "$rc" -eq 64 -a "$(grep -c "the prompt is not valid UTF-8 (byte 2)" <<<"$out")" -eq 1
out=$(printf 'a\xff\n' | "$bin/voltactl" --socket "$tmp/broken.sock" chat 2>&1); rc=$?
check "voltactl chat, a line that is not UTF-8: not sent, the chat goes on" \
  test "$rc" -eq 0 -a "$(grep -c "that line is not valid UTF-8 (byte 1)" <<<"$out")" -eq 1
out=$("$bin/voltactl" --socket "$tmp/broken.sock" generate -n 3 hi 2>&1); rc=$?
check "voltactl generate -n: an unknown option (64), not prompt text" \
  test "$rc" -eq 64 -a "$(grep -c "unknown option -n" <<<"$out")" -eq 1
out=$("$bin/voltactl" --socket "$tmp/broken.sock" generate --max-tokens=2 -- -n 3 2>&1); rc=$?
check "voltactl generate -- TEXT: text that starts with '-' is sent (--name=value taken)" \
  test "$(grep -c "unknown option" <<<"$out")" -eq 0 -a "$rc" -eq 69  # sent; the fake cuts it off
kill "$fake_pid"; wait "$fake_pid" 2>/dev/null; fake_pid=

for tool in voltactl voltad-run voltad-bench; do
  "$bin/$tool" frobnicate >/dev/null 2>&1
  check "$tool: unknown subcommand exits non-zero" test $? -ne 0
done

# Account names only this machine can check: an unknown socket_group stops
# the daemon at start (78 here too); unknown names in the access lists are
# warnings (the daemon ignores them), with what an all-unknown allow_groups
# leaves.
printf 'model:\n  path: /srv/m.gguf\nserver:\n  socket_group: voltad-no-such-group\n' >"$tmp/nogroup.yaml"
out=$("$bin/voltad" --verify-config "$tmp/nogroup.yaml" 2>&1); rc=$?
check "--verify-config, unknown socket_group: exit 78" test "$rc" -eq 78
check "--verify-config, unknown socket_group: says the daemon would not start" \
  grep -q "server.socket_group 'voltad-no-such-group' is not a group on this system" <<<"$out"
check "--verify-config, unknown socket_group: at its FILE:LINE:COL" \
  grep -q "^$tmp/nogroup.yaml:4:17: server.socket_group" <<<"$out"
printf 'model:\n  path: /srv/m.gguf\nserver:\n  allow_groups: [voltad-no-such-group]\n  admin_groups: [voltad-no-such-admins]\n' \
  >"$tmp/nogroups.yaml"
out=$("$bin/voltad" --verify-config "$tmp/nogroups.yaml" 2>&1); rc=$?
check "--verify-config, unknown group names: exit 0" test "$rc" -eq 0
check "--verify-config, unknown group names: each named" \
  test "$(grep -c "warning: server.*no group 'voltad-no-such" <<<"$out")" -eq 2
check "--verify-config, unknown group names: the lock-out said" \
  grep -q "server.allow_groups names no group on this system" <<<"$out"
check "--verify-config, unknown group names and no model file: ok, 4 warnings" \
  grep -q ": ok, 4 warnings$" <<<"$out"
# A model.path with no file there: a warning (a packaged file names the
# model an administrator copies later), with the exit the daemon would
# take at start; a file that is there, none.
check "--verify-config, no file at model.path: warned, with the daemon's exit 66" \
  grep -q "warning: no model to serve: model.path is '/srv/m.gguf'.* voltad would stop there at start (exit 66)" <<<"$out"
printf 'model:\n  path: "%s"\n' "$src/tests/fixtures/models/tiny-llama.F32.gguf" >"$tmp/tiny.yaml"
out=$("$bin/voltad" --verify-config "$tmp/tiny.yaml" 2>&1); rc=$?
check "--verify-config, a model file that is there: ok, no warning" \
  test "$rc" -eq 0 -a "$out" = "$tmp/tiny.yaml: ok"

# --kernels takes auto or portable; anything else is a usage error (64)
# that names the flag, before any model is read.
out=$("$bin/voltad-run" -m "$tmp/none.gguf" -p hi --backend cuda --kernels fast 2>&1); rc=$?
check "voltad-run --kernels fast: usage error 64" test "$rc" -eq 64
check "voltad-run --kernels fast: says the choices" grep -q -- "--kernels must be auto or portable, not 'fast'" <<<"$out"
out=$("$bin/voltad-bench" -m "$tmp/none.gguf" --kernels fast 2>&1); rc=$?
check "voltad-bench --kernels fast: usage error 64" test "$rc" -eq 64
check "voltad-bench --kernels fast: says the choices" grep -q "auto or portable" <<<"$out"
# --sampling: the host's sampling timed, no model or GPU (any build); JSON
# with every setting, each a positive time; --vocab's range named.
out=$("$bin/voltad-bench" --sampling --vocab 2000 --json 2>&1); rc=$?
check "voltad-bench --sampling: exit 0 without a model or GPU" test "$rc" -eq 0
check "voltad-bench --sampling --json: every setting timed" python3 -c '
import json, sys
j = json.loads(sys.argv[1])
t = j["sampling_ms_per_token"]
assert j["vocab"] == 2000 and len(t) == 7, j
assert all(v > 0 for v in t.values()), t
assert "temperature 1 (OpenAI'"'"'s default)" in t, t' "$out"
out=$("$bin/voltad-bench" --sampling --vocab 10 2>&1); rc=$?
check "voltad-bench --vocab 10: usage error 64" test "$rc" -eq 64
check "voltad-bench --vocab 10: says the range" grep -qF -- "--vocab takes a whole number from 64 to 1048576" <<<"$out"
out=$("$bin/voltad-run" -m "$tmp/none.gguf" -p hi --threads 5000 2>&1); rc=$?
check "voltad-run --threads 5000 (over 1024): usage error 64" test "$rc" -eq 64
check "voltad-run --threads 5000: says the range" grep -qF -- "--threads takes 0 (all) to 1024, not 5000" <<<"$out"
# One mode and one config file a run: a second one is a usage error, not a silent winner.
for pair in "--verify-config $src/etc/voltad.yaml --dump-config" \
  "--dump-config --verify-config $src/etc/voltad.yaml" \
  "--verify-config $src/etc/voltad.yaml --config $tmp/three.yaml" "--print-placement --dump-config"; do
  # shellcheck disable=SC2086
  "$bin/voltad" $pair >/dev/null 2>&1; rc=$?
  check "voltad $(sed "s|$src/||; s|$tmp/||" <<<"$pair"): usage error 64" test "$rc" -eq 64
done
mkdir "$tmp/confdir"
out=$("$bin/voltad" --verify-config "$tmp/confdir" 2>&1); rc=$?
check "a directory as the config file: 78, says so" \
  test "$rc" -eq 78 -a -n "$(grep "cannot read the config file: it is a directory" <<<"$out")"
# Output that cannot be written (a full disk) is a failure, not exit 0.
tiny=$src/tests/fixtures/models/tiny-llama.F32.gguf
out=$("$bin/voltad-run" -m "$tiny" -p hi -n 3 --quiet 2>&1 >/dev/full); rc=$?
check "voltad-run > /dev/full: exit 1, says so" \
  test "$rc" -eq 1 -a -n "$(grep "cannot write the output" <<<"$out")"
out=$("$bin/voltad-run" -m "$tiny" -p hi -n 3 --quiet --dump-logits /dev/full 2>&1 >/dev/null); rc=$?
check "voltad-run --dump-logits /dev/full: exit 1, names the file" \
  test "$rc" -eq 1 -a -n "$(grep "cannot write /dev/full" <<<"$out")"
"$bin/voltad-run" -m "$tiny" -p hi -n 3 --quiet >/dev/null 2>&1
check "voltad-run to a writable place: exit 0" test $? -eq 0
out=$("$bin/voltad-run" -m "$tiny" -p hi --chat --template llama3 -n 1 2>&1); rc=$?
check "voltad-run --chat --template llama3 on a ChatML vocabulary: 64, the markers named" \
  test "$rc" -eq 64 -a "$(grep -c "^voltad-run: --template llama3: the llama3 chat template's markers (<|start_header_id|>" <<<"$out")" -eq 1
printf 'model:\n  path: %s\n  chat_template: llama3\nengine:\n  backend: cpu\nserver:\n  socket_path: %s/tmpl.sock\n  dbus: "off"\n' \
  "$tiny" "$tmp" >"$tmp/tmpl.yaml"
out=$(timeout 60 "$bin/voltad" --config "$tmp/tmpl.yaml" 2>&1); rc=$?
check "voltad, model.chat_template llama3 on a ChatML vocabulary: 78 at start, the markers named" \
  test "$rc" -eq 78 -a "$(grep -c "model.chat_template is llama3, but the llama3 chat template's markers" <<<"$out")" -ge 1
# What should be small is read with a ceiling: /dev/zero by mistake is
# refused at once, not read until the OOM killer comes.
out=$(timeout 20 "$bin/voltad" --verify-config /dev/zero 2>&1); rc=$?
check "--verify-config /dev/zero: 78 at once, the ceiling said" \
  test "$rc" -eq 78 -a "$(grep -c "the config file is larger than 1 MiB, the most read" <<<"$out")" -eq 1
out=$(timeout 20 "$bin/voltad" --print-placement --topology-xml /dev/zero 2>&1); rc=$?
check "--print-placement --topology-xml /dev/zero: refused at once, the ceiling said" \
  test "$rc" -ne 0 -a "$rc" -ne 124 -a "$(grep -c "the topology XML is larger than 64 MiB" <<<"$out")" -eq 1
out=$(timeout 20 "$bin/voltad-run" -m "$tiny" -f /dev/zero -n 1 2>&1); rc=$?
check "voltad-run -f /dev/zero: 64 at once, the ceiling said" \
  test "$rc" -eq 64 -a "$(grep -c "the prompt from /dev/zero is larger than 16 MiB" <<<"$out")" -eq 1
out=$("$bin/voltad-run" -m "$tiny" -p - -n 1 2>&1 <"$tmp"); rc=$?
check "voltad-run -p - from a directory: 64, said (not 'empty')" \
  test "$rc" -eq 64 -a "$(grep -c "standard input: it is a directory" <<<"$out")" -eq 1
# A raw prompt is read as voltad reads a completion's: a control token
# written in it is that one token (it was 12 tokens of text).
out=$("$bin/voltad-run" -m "$tiny" -p "<|im_start|>" -n 1 2>&1 >/dev/null)
check "voltad-run, a control token in the prompt: one prompt token" \
  grep -q "^voltad-run: 1 prompt tokens in" <<<"$out"
# A KV cache this machine cannot give is the backend unable to run here
# (69), as CUDA without memory is: not a failed generation (1).
# (Not under ThreadSanitizer: its shadow memory needs more address space
# than the ulimit leaves.)
if [[ -z ${TSAN_OPTIONS+set} ]]; then
  out=$( (ulimit -v 600000; "$bin/voltad-run" -m "$tiny" -p hi -n 2 --ctx 1048576) 2>&1); rc=$?
  check "voltad-run --ctx past the memory at hand: 69, the cache and --ctx named" \
    test "$rc" -eq 69 -a "$(grep -c "a KV cache of 768 MiB could not be allocated.*voltad-run --ctx" <<<"$out")" -eq 1
else
  echo "skip voltad-run under ulimit -v (ThreadSanitizer)"
fi
# One token comes from the prompt's step: no decode step, so no decode rate.
out=$("$bin/voltad-run" -m "$tiny" -p hi -n 1 2>&1 >/dev/null)
check "voltad-run -n 1: no decode rate (the token came from the prompt's step)" \
  grep -q "1 generated (from the prompt's step), backend cpu" <<<"$out"
out=$("$bin/voltad-run" -m "$tiny" -p hi -n 3 --temp 0 2>&1 >/dev/null)
check "voltad-run -n 3: the rate counts 2 decode steps" \
  grep -qE "3 generated in [0-9.]+ s \(2 decode steps, [0-9.]+ tok/s\)" <<<"$out"
# The logits file: never the model (writing it would destroy the file the
# engine reads), never an empty name; checked before the model loads.
cp "$tiny" "$tmp/copy.gguf"
sum=$(md5sum <"$tmp/copy.gguf")
out=$("$bin/voltad-run" -m "$tmp/copy.gguf" -p hi -n 2 --dump-logits "$tmp/copy.gguf" 2>&1); rc=$?
check "voltad-run --dump-logits MODEL: refused (64), the model intact" \
  test "$rc" -eq 64 -a "$(md5sum <"$tmp/copy.gguf")" = "$sum" -a "$(grep -c "is the model file" <<<"$out")" -eq 1
out=$("$bin/voltad-run" -m "$tmp/none.gguf" -p hi --dump-logits "" 2>&1); rc=$?
check "voltad-run --dump-logits '': usage error 64" test "$rc" -eq 64
out=$("$bin/voltad-run" -m "$tmp/none.gguf" -p hi --dump-logits "$tmp/no/such/dir/l.bin" 2>&1); rc=$?
check "voltad-run --dump-logits in a missing directory: 1 before the model is read" \
  test "$rc" -eq 1 -a "$(grep -c "cannot write $tmp/no/such/dir/l.bin" <<<"$out")" -eq 1
# A FIFO as the model: refused at once (it once waited for a writer).
mkfifo "$tmp/fifo.gguf"
out=$(timeout 20 "$bin/voltad-run" -m "$tmp/fifo.gguf" --info 2>&1); rc=$?
check "voltad-run -m FIFO: 65 at once, not a regular file" \
  test "$rc" -eq 65 -a "$(grep -c "not a regular file" <<<"$out")" -eq 1
printf 'model:\n  path: %s\nengine:\n  backend: cpu\n' "$tmp/fifo.gguf" >"$tmp/fifo.yaml"
out=$(timeout 20 "$bin/voltad" --config "$tmp/fifo.yaml" 2>&1); rc=$?
check "voltad, model.path a FIFO: 66, not a regular file (not 'no file is there')" \
  test "$rc" -eq 66 -a "$(grep -c "which is not a regular file" <<<"$out")" -eq 1
# The prompt from a file (-f) or standard input (-p -): the same tokens as -p.
printf 'Hello there' >"$tmp/prompt.txt"
a=$("$bin/voltad-run" -m "$tiny" -p 'Hello there' -n 3 --temp 0 --quiet 2>/dev/null)
b=$("$bin/voltad-run" -m "$tiny" -f "$tmp/prompt.txt" -n 3 --temp 0 --quiet 2>/dev/null)
c=$(echo 'Hello there' | "$bin/voltad-run" -m "$tiny" -p - -n 3 --temp 0 --quiet 2>/dev/null)
check "voltad-run -f FILE and -p - give what -p gives (echo's line break dropped)" \
  test -n "$a" -a "$a" = "$b" -a "$a" = "$c"
out=$("$bin/voltad-run" -m "$tiny" -f "$tmp/prompt.txt" -p hi 2>&1); rc=$?
check "voltad-run -f and -p together: usage error 64" test "$rc" -eq 64
out=$("$bin/voltad-run" -m "$tiny" -f "$tmp/confdir" 2>&1); rc=$?
check "voltad-run -f DIRECTORY: 64, says so" \
  test "$rc" -eq 64 -a "$(grep -c "it is a directory" <<<"$out")" -eq 1
out=$("$bin/voltad-run" -m "$tiny" -p hi --temp -1 2>&1); rc=$?
check "voltad-run --temp -1: 64, named as the option" \
  test "$rc" -eq 64 -a "$(grep -c -- "--temp: must be between 0 and 100" <<<"$out")" -eq 1
# --logit-bias: +100 on a token makes greedy decoding repeat it, each
# token its own; malformed, repeated or past-the-vocabulary ids are usage
# errors (64) that name the option.
plain=$("$bin/voltad-run" -m "$tiny" -p hi -n 6 --temp 0 --quiet 2>/dev/null)
x=$("$bin/voltad-run" -m "$tiny" -p hi -n 6 --temp 0 --quiet --logit-bias 41=100 2>/dev/null)
y=$("$bin/voltad-run" -m "$tiny" -p hi -n 6 --temp 0 --quiet --logit-bias 50=100 2>/dev/null)
check "voltad-run --logit-bias ID=100: the token repeated, not the plain answer" \
  test -n "$x" -a "$x" != "$plain" -a "$x" != "$y" -a "$x" = "$(printf "%s" "${x:0:1}${x:0:1}${x:0:1}${x:0:1}${x:0:1}${x:0:1}")"
while IFS='|' read -r args why; do
  # shellcheck disable=SC2086
  out=$("$bin/voltad-run" -m "$tiny" -p hi -n 2 --quiet $args 2>&1); rc=$?
  check "voltad-run $args: usage error 64" test "$rc" -eq 64
  check "voltad-run $args: says why" grep -qF -- "voltad-run: $why" <<<"$out"
done <<'CASES'
--logit-bias 41|--logit-bias takes TOKEN_ID=BIAS (such as 128009=-100), not '41'
--logit-bias x=5|--logit-bias takes TOKEN_ID=BIAS (such as 128009=-100), not 'x=5'
--logit-bias 41=5 --logit-bias 41=-5|--logit-bias names token 41 twice; give each token once
--logit-bias 41=101|--logit-bias: token 41: the bias must be in [-100, 100]
--logit-bias -3=1|--logit-bias: token -3: not a token id
--logit-bias 320=1|--logit-bias: token 320 is past the model's 320-token vocabulary
--presence-penalty 3|--presence-penalty: must be in [-2, 2]
--frequency-penalty -2.5|--frequency-penalty: must be in [-2, 2]
-n -1|-n takes a whole number of tokens, 0 to 1048576, not '-1'
-n abc|-n takes a whole number of tokens, 0 to 1048576, not 'abc'
-n 2147483648|-n takes a whole number of tokens, 0 to 1048576, not '2147483648'
--top-k 99999999999999999999|--top-k takes a whole number, 0 (off) to 2147483647, not '99999999999999999999'
--logit-bias 99999999999999999999=1|--logit-bias: token 99999999999999999999 is past any vocabulary
--temp 1e400|--temp takes a number within a float's range, not '1e400'
--ctx 99999999999|--ctx takes a whole number of tokens, 1 to 1048576, not '99999999999'
--temp nan|--temp takes a number within a float's range, not 'nan'
--seed -1|--seed takes a whole number, 0 to 18446744073709551615, not '-1'
--top-k|--top-k needs a value
CASES
out=$("$bin/voltad-run" -m "$tiny" -p '' -n 2 2>&1); rc=$?
check "voltad-run -p '': usage error 64, says the prompt given is empty" \
  test "$rc" -eq 64 -a "$(grep -c "the prompt given with -p is empty" <<<"$out")" -eq 1
"$bin/voltad-run" -m "$tiny" -p hi -n 4 --temp 0 --quiet --presence-penalty 2 --frequency-penalty -2 \
  --logit-bias 319=-100 >/dev/null 2>&1
check "voltad-run with both penalties and a bias in range: exit 0" test $? -eq 0
# voltad-run options that would have no effect are usage errors (64) that
# say why, before the model is read; with what they need, they run.
while IFS='|' read -r args why; do
  # shellcheck disable=SC2086
  out=$("$bin/voltad-run" -m "$tmp/none.gguf" -p hi $args 2>&1); rc=$?
  check "voltad-run $args: usage error 64" test "$rc" -eq 64
  check "voltad-run $args: says why" grep -qF -- "voltad-run: $why" <<<"$out"
done <<'CASES'
--chat --template bogus|--template must be auto, llama3 or chatml, not 'bogus'
--template chatml|--template chooses the chat template, which only --chat uses; add --chat
--system be-brief|--system is a chat message, which only --chat sends; add --chat
--kernels portable|--kernels chooses the CUDA kernels; it needs --backend cuda
--backend cuda --threads 4|--threads sets the CPU backend's threads; --backend cuda does not use them
--info|--info describes the file and exits; -p would have no effect
CASES
out=$("$bin/voltad-run" -m "$tiny" --info -n 3 2>&1); rc=$?
check "voltad-run --info -n 3: usage error 64, says why" \
  test "$rc" -eq 64 -a -n "$(grep -F -- "-n would have no effect" <<<"$out")"
# A --ctx shorter than the prompt plus -n, or more tokens than any context:
# usage errors that say what would do, before a backend is made.
out=$("$bin/voltad-run" -m "$tiny" -p "hello world how are you" --ctx 2 -n 5 --quiet 2>&1); rc=$?
check "voltad-run --ctx 2 for a longer prompt: usage error 64" test "$rc" -eq 64
check "voltad-run --ctx 2: says the context that would do" \
  grep -q -- "--ctx 2 holds fewer tokens than the prompt (.*) plus -n (5); give --ctx" <<<"$out"
out=$("$bin/voltad-run" -m "$tiny" -p hi --ctx 1048577 --quiet 2>&1); rc=$?
check "voltad-run --ctx 1048577: usage error 64" test "$rc" -eq 64
check "voltad-run --ctx 1048577: says the range" grep -qF -- "--ctx takes 1 to 1048576 tokens, not 1048577" <<<"$out"
out=$("$bin/voltad-run" -m "$tiny" -p hi -n 2147483000 --ctx 100 --quiet 2>&1); rc=$?
check "voltad-run -n 2147483000: usage error 64" test "$rc" -eq 64
check "voltad-run -n 2147483000: says the range (the longest context)" \
  grep -q "takes a whole number of tokens, 0 to 1048576" <<<"$out"
"$bin/voltad-run" -m "$tiny" --info --quiet >/dev/null 2>&1
check "voltad-run --info --quiet: exit 0" test $? -eq 0
# --info on a GGUF file of an architecture voltad does not run: the file
# described on stdout, why it cannot run on stderr, exit 65.
out=$("$bin/voltad-run" -m "$src/tests/fixtures/gguf/dequant_reference.gguf" --info 2>"$tmp/info.err"); rc=$?
check "voltad-run --info, unsupported architecture: exit 65" test "$rc" -eq 65
check "voltad-run --info, unsupported architecture: the file described" \
  grep -q "^  tensors:" <<<"$out"
check "voltad-run --info, unsupported architecture: says why on stderr" \
  grep -q "architecture 'dequant-reference' is not supported" "$tmp/info.err"
# ... and on one whose tokenizer voltad refuses (a BOS id past the
# vocabulary, patched into a copy of the tiny model): described, then why,
# the path said once.
python3 - "$tiny" "$tmp/bad-bos.gguf" <<'GGUF'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
key = b"tokenizer.ggml.bos_token_id"
at = data.find(key) + len(key)
assert at > len(key) and struct.unpack_from("<I", data, at)[0] == 4  # a uint32 follows
struct.pack_into("<I", data, at + 4, 999999)
open(sys.argv[2], "wb").write(data)
GGUF
out=$("$bin/voltad-run" -m "$tmp/bad-bos.gguf" --info 2>"$tmp/info.err"); rc=$?
check "voltad-run --info, a tokenizer voltad refuses: exit 65, the file described" \
  test "$rc" -eq 65 -a "$(grep -c "^tokenizer:" <<<"$out")" -eq 1
check "voltad-run --info, a tokenizer voltad refuses: says why, the path once" \
  test "$(grep -c "bos_token_id is not a token id" "$tmp/info.err")" -eq 1 \
  -a "$(grep -o "bad-bos.gguf" "$tmp/info.err" | wc -l)" -eq 1
"$bin/voltad-run" -m "$tiny" -p hi -n 3 --quiet --chat --template chatml --system be-brief \
  --threads 2 >/dev/null 2>&1
check "voltad-run --chat --template chatml --system --threads: exit 0" test $? -eq 0
# --backend cuda where CUDA cannot run (no driver, no GPU, or a build
# without CUDA): 69, as voltad and voltad-bench, with the reason. Skipped
# where it can run.
out=$("$bin/voltad-run" -m "$tiny" -p hi -n 3 --quiet --backend cuda 2>&1 >/dev/null); rc=$?
if ((rc == 0)); then
  echo "skip voltad-run --backend cuda without a usable GPU (CUDA runs here)"
else
  check "voltad-run --backend cuda, CUDA unusable: exit 69" test "$rc" -eq 69
  check "voltad-run --backend cuda, CUDA unusable: says why" \
    grep -Eq "^voltad-run: (cuda backend: |--backend cuda: this build has no CUDA backend)" <<<"$out"
  # No driver at all (no libcuda.so.1): said so, not "insufficient driver".
  if ! grep -q "this build has no CUDA backend" <<<"$out" &&
    ! /sbin/ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
    check "voltad-run --backend cuda, no driver installed: says so" \
      grep -q "no NVIDIA driver is installed" <<<"$out"
  fi
fi
out=$("$bin/voltad-run" -m "$tiny" -p hi --backend gpu 2>&1); rc=$?
check "voltad-run --backend gpu: usage error 64" test "$rc" -eq 64
check "voltad-run --backend gpu: names the choices" grep -q -- "--backend must be cpu or cuda, not 'gpu'" <<<"$out"
# voltad-bench's numbers take the whole text, in range, and name the option.
for bad in "-p abc" "-n 4294967297" "-b 2x,4" "-b 1,,2" "--top-k abc" "--ctx 2147483000" \
  "--max-context 8k" "--max-context 15" "--max-context 1048577"; do
  # shellcheck disable=SC2086
  out=$("$bin/voltad-bench" -m "$tmp/none.gguf" $bad 2>&1); rc=$?
  check "voltad-bench $bad: usage error 64 naming ${bad%% *}" \
    test "$rc" -eq 64 -a -n "$(grep -- "voltad-bench: ${bad%% *} takes" <<<"$out")"
done
# --max-context below what the run needs (--ctx + -n + 1) is a usage error
# that says both numbers.
out=$("$bin/voltad-bench" -m "$tmp/none.gguf" --ctx 512 -n 64 --max-context 576 2>&1); rc=$?
check "voltad-bench --max-context 576 at --ctx 512 -n 64: usage error 64" test "$rc" -eq 64
check "voltad-bench --max-context 576: says what the run needs" \
  grep -q -- "--max-context 576 is shorter than the run needs (577: the larger of" <<<"$out"
# --omit (timing only) names the kernels it knows; a wrong one is a usage
# error before any model is read.
out=$("$bin/voltad-bench" -m "$tmp/none.gguf" --omit norms,softmax 2>&1); rc=$?
check "voltad-bench --omit softmax: usage error 64" test "$rc" -eq 64
check "voltad-bench --omit softmax: names it and the choices" grep -q "norms, rope, attention, swiglu, matvecs, qkv, wo, gate_up, down, output; not 'softmax'" <<<"$out"
for bad in "norms," "" ",rope" "norms,,rope"; do
  out=$("$bin/voltad-bench" -m "$tmp/none.gguf" --omit "$bad" 2>&1); rc=$?
  check "voltad-bench --omit '$bad': usage error 64 (an empty item)" \
    test "$rc" -eq 64 -a "$(grep -c "no empty item" <<<"$out")" -eq 1
done
# --sampling times the host alone: a model, a batch or a KV type given with
# it would change nothing, and is said so; --vocab alone goes with it.
out=$("$bin/voltad-bench" --sampling -m "$tmp/none.gguf" 2>&1); rc=$?
check "voltad-bench --sampling -m: usage error 64, says -m has no effect" \
  test "$rc" -eq 64 -a "$(grep -c -- "-m has no effect with --sampling" <<<"$out")" -eq 1
out=$("$bin/voltad-bench" --vocab 1000 2>&1); rc=$?
check "voltad-bench --vocab without --sampling: 64, said" \
  test "$rc" -eq 64 -a "$(grep -c -- "--vocab goes with --sampling" <<<"$out")" -eq 1
out=$("$bin/voltad-bench" 2>&1); rc=$?
check "voltad-bench with nothing: 64, says no model" \
  test "$rc" -eq 64 -a "$(grep -c "no model: pass -m MODEL.gguf (or --sampling)" <<<"$out")" -eq 1
out=$("$bin/voltad-bench" -m "$tmp/none.gguf" --ctx 1048576 -n 1048576 2>&1); rc=$?
check "voltad-bench, a run past 1048576 positions: usage error 64 saying so" \
  test "$rc" -eq 64 -a "$(grep -c "the engine takes at most 1048576" <<<"$out")" -eq 1
# The model before the card: a file that is not a model is 65 wherever CUDA
# is (no driver: said so, after the model); a build without CUDA says that (69).
out=$("$bin/voltad-bench" -m "$tmp/none.gguf" 2>&1); rc=$?
if grep -q "this build has no CUDA backend" <<<"$out"; then
  check "voltad-bench without CUDA: 69" test "$rc" -eq 69
else
  check "voltad-bench -m a missing file: 65, named (before the card)" \
    test "$rc" -eq 65 -a "$(grep -c "cannot open model file '$tmp/none.gguf'" <<<"$out")" -eq 1
  if ! /sbin/ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
    out=$("$bin/voltad-bench" -m "$tiny" 2>&1); rc=$?
    check "voltad-bench, no driver installed: 69, says so" \
      test "$rc" -eq 69 -a "$(grep -c "no NVIDIA driver is installed" <<<"$out")" -eq 1
  fi
fi
printf 'engine:\n  kernels: fastest\n' >"$tmp/kernels.yaml"
out=$("$bin/voltad" --verify-config "$tmp/kernels.yaml" 2>&1); rc=$?
check "engine.kernels: fastest is a config error (78)" test "$rc" -eq 78
check "engine.kernels: the error names the choices" grep -q "engine.kernels: invalid value .fastest. (one of: auto, portable)" <<<"$out"

# server.socket_path that no Unix socket can have (empty, or past sun_path's
# 107 bytes) is a config problem naming the key, the length and the limit,
# not exit 73 at start.
long=$tmp/$(printf 'a%.0s' {1..150}).sock
printf 'model:\n  path: /m.gguf\nserver:\n  socket_path: %s\n' "$long" >"$tmp/longsock.yaml"
out=$("$bin/voltad" --verify-config "$tmp/longsock.yaml" 2>&1); rc=$?
check "server.socket_path of ${#long} bytes: --verify-config exits 78" test "$rc" -eq 78
check "server.socket_path of ${#long} bytes: names the key, length and limit" \
  grep -q "longsock.yaml:4:16: server.socket_path: '$long' is ${#long} bytes; a Unix socket path is at most 107" <<<"$out"
printf 'model:\n  path: /m.gguf\nserver:\n  socket_path: ""\n' >"$tmp/emptysock.yaml"
out=$("$bin/voltad" --verify-config "$tmp/emptysock.yaml" 2>&1); rc=$?
check "empty server.socket_path: --verify-config exits 78" test "$rc" -eq 78
check "empty server.socket_path: names the key and the limit" \
  grep -q "emptysock.yaml:4:16: server.socket_path: empty (0 bytes); a Unix socket path is 1 to 107 bytes" <<<"$out"

# voltactl: a number option takes the whole text as a number (usage error
# 64, naming it, before any connection); a socket path too long for a Unix
# socket is an error, not an abort.
for bad in "generate hi --max-tokens 12abc" "generate hi --temperature nan" \
  "generate hi --seed 1.5" "bench --concurrency 2x" "bench --max-tokens 10abc"; do
  # shellcheck disable=SC2086
  out=$("$bin/voltactl" --socket "$tmp/none.sock" $bad 2>&1); rc=$?
  check "voltactl $bad: usage error 64" test "$rc" -eq 64
done
out=$("$bin/voltactl" --socket "$tmp/none.sock" generate hi --max-tokens 12abc 2>&1)
check "voltactl --max-tokens 12abc: names the option and the text" \
  grep -q -- "--max-tokens takes a whole number from 1 to 2147483647, not '12abc'" <<<"$out"
out=$("$bin/voltactl" --socket "$tmp/none.sock" bench --max-tokens 10abc 2>&1)
check "voltactl bench --max-tokens 10abc: names that option alone" \
  test "$(grep -c -- "--max-tokens takes a whole number from 1 to 2147483647, not '10abc'" <<<"$out")" -eq 1 \
  -a "$(grep -c -- "--concurrency" <<<"$out")" -eq 0
# Out of range is said with the range (3e9 is a whole number, past int's).
out=$("$bin/voltactl" --socket "$tmp/none.sock" generate hi --max-tokens 3000000000 2>&1); rc=$?
check "voltactl --max-tokens 3000000000: 64, the range said" \
  test "$rc" -eq 64 -a "$(grep -c -- "from 1 to 2147483647, not '3000000000'" <<<"$out")" -eq 1
out=$("$bin/voltactl" --socket "$tmp/none.sock" bench --concurrency 2x 2>&1)
check "voltactl bench --concurrency 2x: names that option alone" \
  test "$(grep -c -- "--concurrency takes a list of 1 to 1024 like 1,2,4,8, not '2x'" <<<"$out")" -eq 1
out=$("$bin/voltactl" --socket "$tmp/none.sock" chat --max-tokens abc </dev/null 2>&1); rc=$?
check "voltactl chat --max-tokens abc: 64 before reading a line" test "$rc" -eq 64
# An option that takes a value, given last without one: "needs a value"
# (64), not "unknown option".
for args in "--socket" "generate hi --max-tokens" "chat --system" "bench --concurrency"; do
  # shellcheck disable=SC2086
  out=$(VOLTAD_SOCKET=$tmp/none.sock "$bin/voltactl" $args </dev/null 2>&1); rc=$?
  check "voltactl $args (no value): usage error 64" test "$rc" -eq 64
  check "voltactl $args (no value): says it needs a value" grep -q -- "${args##* } needs a value" <<<"$out"
done
out=$("$bin/voltactl" --socket "$long" status 2>&1); rc=$?
check "voltactl, a 150-byte socket path: exit 69, says the limit" \
  test "$rc" -eq 69 -a -n "$(grep "path is 1 to 107 bytes" <<<"$out")"

echo "cli_config: $fails failure(s)"
exit $((fails > 0))
