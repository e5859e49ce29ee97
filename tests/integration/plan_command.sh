#!/usr/bin/env bash
# voltad --plan through the real binaries, on a model made by voltad-mkmodel
# and an assumed card: text and JSON, the table adding up, a refusal whose
# way out really fits, and the exit codes (0 fits, 75 does not fit, 64 usage,
# 65 bad model, 66 no model, 69 no card to measure, 78 bad config).
set -uo pipefail
bin=${VOLTAD_BIN_DIR:?}
shared=${VOLTAD_SHARED_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
jqt() { jq -e "$1" >/dev/null <<<"$2"; }  # jqt FILTER JSON: the filter is true
command -v jq >/dev/null || { echo "SKIP: jq is needed to read the JSON plan"; exit 77; }

# No default config file unless a check makes one (the daemon's rule:
# $CONFIGURATION_DIRECTORY/voltad.yaml, else /etc/voltad/voltad.yaml).
export CONFIGURATION_DIRECTORY=$tmp/noconf
mkdir -p "$CONFIGURATION_DIRECTORY"
model=$tmp/smollm2.gguf
"$bin/voltad-mkmodel" --shape smollm2-135m --type q4_k_m --tokenizer "$shared/tokenizers/llama3" \
  -o "$model" >"$tmp/mkmodel.log" 2>&1
check "voltad-mkmodel wrote the model" test -s "$model"

# Ctrl-C while voltad-mkmodel replaces a copy of that file (with an f16
# model, ~270 MB; stopped as soon as its partial file appears, so the
# signal surely lands mid-write): 130, the copy unchanged, no partial file.
victim=$tmp/victim.gguf
cp "$model" "$victim"
sum_before=$(md5sum <"$victim")
"$bin/voltad-mkmodel" --shape smollm2-135m --type f16 --tokenizer "$shared/tokenizers/llama3" \
  -o "$victim" >"$tmp/interrupted.log" 2>&1 &
writer=$!
for _ in $(seq 1000); do compgen -G "$victim.partial-*" >/dev/null && break; sleep 0.01; done
kill -STOP "$writer"; kill -INT "$writer"; kill -CONT "$writer"
wait "$writer"; rc=$?
check "voltad-mkmodel interrupted: exit 130, says so" \
  test "$rc" -eq 130 -a "$(grep -c "was interrupted at byte" "$tmp/interrupted.log")" -eq 1
check "... the file already there is unchanged" test "$(md5sum <"$victim")" = "$sum_before"
check "... no partial file is left" test -z "$(compgen -G "$victim.partial-*")"
# Killed outright (SIGKILL): the partial file stays; the next write names it.
"$bin/voltad-mkmodel" --shape smollm2-135m --type f16 --tokenizer "$shared/tokenizers/llama3" \
  -o "$victim" >/dev/null 2>&1 &
writer=$!
for _ in $(seq 1000); do compgen -G "$victim.partial-*" >/dev/null && break; sleep 0.01; done
kill -KILL "$writer"; wait "$writer" 2>/dev/null
stale=$(compgen -G "$victim.partial-*" | head -1)
check "voltad-mkmodel killed: its partial file is left" test -n "$stale"
"$bin/voltad-mkmodel" --shape smollm2-135m --type q4_k_m --tokenizer "$shared/tokenizers/llama3" \
  -o "$victim" >"$tmp/after-kill.log" 2>&1
check "... the next write names it in a warning" grep -qF "warning: $stale is a partial file" "$tmp/after-kill.log"
check "... and leaves it (another writer may own it)" test -e "$stale"
rm -f "$stale"

# Defaults (4096 tokens x 16 sequences) on an assumed 4 GiB card: fits.
out=$("$bin/voltad" --plan --model "$model" --assume-vram 0 2>&1); rc=$?
check "--assume-vram 0: usage error 64 that says so" \
  test "$rc" -eq 64 -a -n "$(grep -- "'0' is 0 bytes, smaller than any card" <<<"$out")"
# A unit left out: 32 is bytes, not a card; the message says to write one.
out=$("$bin/voltad" --plan --model "$model" --assume-vram 32 2>&1); rc=$?
check "--assume-vram 32: usage error 64, says a bare number is bytes" \
  test "$rc" -eq 64 -a -n "$(grep -- "'32' is 32 bytes, smaller than any card (at least 256MiB); a bare number is bytes" <<<"$out")"
out=$("$bin/voltad" --plan --model "$model" --assume-vram 99999999999999999999999 2>&1); rc=$?
check "--assume-vram past 8 EiB: 64, says too large, not 'not a number'" \
  test "$rc" -eq 64 -a -n "$(grep -- "is not a size (too large" <<<"$out")"
out=$("$bin/voltad" --plan --model "$model" --assume-vram 32Gb 2>&1); rc=$?
check "--assume-vram 32Gb: 64, names the unknown unit" \
  test "$rc" -eq 64 -a -n "$(grep -- "unknown unit 'Gb'" <<<"$out")"
out=$("$bin/voltad" --plan --model "$model" --assume-vram 4GiB); rc=$?
check "fits: exit 0" test "$rc" -eq 0
check "fits: says so" grep -q "^Fits: yes.$" <<<"$out"
check "fits: names the model file" grep -q "^model: $model$" <<<"$out"
check "no --config, no default file: says every key is at its default" \
  grep -q "^config: none (no $tmp/noconf/voltad.yaml; pass --config FILE): every key at its default$" <<<"$out"
# The default file, where it exists, is what the daemon would run with.
mkdir -p "$tmp/conf"
printf 'engine:\n  max_context: 1024\n' >"$tmp/conf/voltad.yaml"
out=$(CONFIGURATION_DIRECTORY=$tmp/conf "$bin/voltad" --plan --model "$model" --assume-vram 4GiB); rc=$?
check "the default file: exit 0" test "$rc" -eq 0
check "the default file: named" grep -q "^config: $tmp/conf/voltad.yaml$" <<<"$out"
json=$(CONFIGURATION_DIRECTORY=$tmp/conf "$bin/voltad" --plan --model "$model" --assume-vram 4GiB --json)
check "the default file: its max_context planned" jqt '.limits.max_context == 1024' "$json"
check "the default file: json names it" test "$(jq -r .config <<<"$json")" = "$tmp/conf/voltad.yaml"
for row in "other processes" "CUDA context + libraries" "weights (repacked)" "workspace" \
           "CUDA graphs" "KV cache pool (fp16)" "total" "budget (90% of card)"; do
  check "fits: row '$row'" grep -qF "  $row " <<<"$out"
done

# --json without a plan (no model there): the reason as JSON on stdout, the
# exit status in it, and the message on stderr as without --json.
json=$("$bin/voltad" --plan --model "$tmp/none.gguf" --assume-vram 4GiB --json 2>"$tmp/err"); rc=$?
check "json, no model file: 66, why on stdout as JSON and on stderr" \
  test "$rc" -eq 66 -a "$(jq -r .exit_code <<<"$json")" = 66 -a "$(jq -r .fits <<<"$json")" = null \
  -a -n "$(jq -r .error <<<"$json" | grep -F "no model to serve: --model is '$tmp/none.gguf'")" \
  -a -n "$(grep -F "no model to serve" "$tmp/err")"
json=$("$bin/voltad" --plan --model "$model" --assume-vram 4GiB --json); rc=$?
check "json: exit 0" test "$rc" -eq 0
check "json: fits" test "$(jq -r .fits <<<"$json")" = true
check "json: the components add up to the total" \
  test "$(jq '[.components[].bytes] | add' <<<"$json")" = "$(jq .planned_bytes <<<"$json")"
check "json: total within the budget" jqt '.planned_bytes <= .budget_bytes' "$json"
check "json: budget is 90% of the card" jqt '.budget_bytes == ((0.9 * 4294967296) | floor)' "$json"
check "json: pool tokens = blocks x 16" jqt '.kv_pool.tokens == .kv_pool.blocks * 16' "$json"
check "json: the pool is capped at 16 sequences of 4096" jqt '.kv_pool.blocks == 16 * 256' "$json"
check "json: the workspace row is the workspace total" \
  jqt '(.components[] | select(.name == "workspace") | .bytes) == .workspace.total' "$json"
check "json: the workspace's buffers add up to its total" \
  jqt '([.workspace | to_entries[] | select(.key != "total") | .value] | add) == .workspace.total' "$json"
check "json: model path" test "$(jq -r .model.path <<<"$json")" = "$model"
check "json: no config file: null" jqt '.config == null' "$json"
check "json: 4096 within the trained positions: no warning" jqt '.warnings == []' "$json"

# Others' usage counts against the budget.
used=$("$bin/voltad" --plan --model "$model" --assume-vram 2GiB --assume-used 512MiB --json)
check "others: their row holds --assume-used" jqt '.components[0].bytes == 536870912' "$used"

# A long context on a small card: refused, with a shorter context that fits.
cat >"$tmp/long.yaml" <<YAML
model:
  path: $model
engine:
  max_context: 65536
YAML
out=$("$bin/voltad" --plan --config "$tmp/long.yaml" --assume-vram 1GiB); rc=$?
check "long context: exit 75" test "$rc" -eq 75
check "long context: says why" grep -q "^Does not fit: .*one full-context sequence (65536 tokens)" <<<"$out"
check "long context: past the trained positions, warned" \
  grep -q "^warning: engine.max_context 65536 is past the 8192 positions the model was trained on" <<<"$out"
check "long context: INT8 KV named" grep -q "engine.kv_cache_type: int8" <<<"$out"
check "long context: a smaller quantization considered" grep -q "a smaller quantization" <<<"$out"
ctx=$(sed -n 's/.*engine.max_context: \([0-9]*\) fits.*/\1/p' <<<"$out")
check "long context: a shorter context is given" test -n "$ctx"
sed "s/max_context: 65536/max_context: ${ctx:-0}/" "$tmp/long.yaml" >"$tmp/short.yaml"
"$bin/voltad" --plan --config "$tmp/short.yaml" --assume-vram 1GiB >/dev/null
check "long context: the context given fits (exit 0)" test $? -eq 0
json=$("$bin/voltad" --plan --config "$tmp/long.yaml" --assume-vram 1GiB --json); rc=$?
check "long context json: exit 75" test "$rc" -eq 75
check "long context json: fits false, ways out listed" \
  jqt '.fits == false and (.ways_out | length) >= 3 and (.refusal | length) > 0' "$json"

# INT8 KV halves the bytes per token.
printf 'engine:\n  kv_cache_type: int8\n' >"$tmp/int8.yaml"
f16=$("$bin/voltad" --plan --model "$model" --assume-vram 1GiB --json | jq .kv_pool.bytes_per_token)
i8=$("$bin/voltad" --plan --config "$tmp/int8.yaml" --model "$model" --assume-vram 1GiB --json |
     jq .kv_pool.bytes_per_token)
# (half, plus one fp16 scale per 64-value head: 3%)
check "int8: about half the bytes per token ($i8 vs $f16)" test $((i8 * 2)) -lt $((f16 * 104 / 100))

# Errors.
"$bin/voltad" --plan --model "$model" --assume-vram lots >/dev/null 2>&1
check "bad --assume-vram: exit 64" test $? -eq 64
"$bin/voltad" --plan --model "$model" --assume-vram 1GiB --frobnicate >/dev/null 2>&1
check "unknown flag: exit 64" test $? -eq 64
"$bin/voltad" --plan --model "$tmp/none.gguf" --assume-vram 1GiB >/dev/null 2>&1
check "missing model: exit 66" test $? -eq 66
echo "not a model" >"$tmp/text.gguf"
err=$("$bin/voltad" --plan --model "$tmp/text.gguf" --assume-vram 1GiB 2>&1); rc=$?
check "bad model: exit 65" test "$rc" -eq 65
check "bad model: names the file" grep -q "$tmp/text.gguf" <<<"$err"
err=$("$bin/voltad" --plan --model "$model" 2>&1); rc=$?
check "no card and no --assume-vram: exit 69" test "$rc" -eq 69
check "no card: says what to pass" grep -q -- "--assume-vram" <<<"$err"
printf 'engine:\n  max_context: lots\n' >"$tmp/bad.yaml"
"$bin/voltad" --plan --config "$tmp/bad.yaml" --model "$model" --assume-vram 1GiB >/dev/null 2>&1
check "bad config: exit 78" test $? -eq 78
"$bin/voltad" --plan --help | grep -q -- "--assume-used"
check "--plan --help lists the flags" test $? -eq 0

# voltactl plan against a daemon's answer (GET /plan, as the CUDA backend's
# daemon gives it; the daemon's side is tests/daemon/test_server_plan.cpp):
# a stand-in server on a Unix socket answers this plan, then 503.
cat >"$tmp/answer.py" <<'PY'
import http.server, json, os, socketserver, sys
sock, plan_file, text_file = sys.argv[1:4]
answers = [(200, {"plan": json.load(open(plan_file)), "text": open(text_file).read(),
                  "measured_with": "nvml, before and after voltad's context",
                  "vram": {"card_used_bytes": 3 << 30, "card_total_bytes": 4 << 30,
                           "source": "nvml", "degraded_above_bytes": 3865470566,
                           "ready_below_bytes": 3650722201, "degraded": False}})] * 2 + \
          [(503, {"error": {"message": "the model is still loading; retry shortly",
                            "type": "server_error", "code": "unavailable"}})]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        status, body = answers.pop(0) if self.path == "/plan" else (404, {})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a): pass
    def address_string(self): return "local"
class S(socketserver.UnixStreamServer):
    pass
srv = S(sock, H)
for _ in range(3): srv.handle_request()
PY
"$bin/voltad" --plan --model "$model" --assume-vram 4GiB >"$tmp/plan.txt"
jq . <<<"$json" >"$tmp/plan.json"
python3 "$tmp/answer.py" "$tmp/ctl.sock" "$tmp/plan.json" "$tmp/plan.txt" &
server=$!
for _ in $(seq 50); do [[ -S $tmp/ctl.sock ]] && break; sleep 0.1; done
out=$("$bin/voltactl" --socket "$tmp/ctl.sock" plan 2>&1); rc=$?
check "voltactl plan: exit 0" test "$rc" -eq 0
check "voltactl plan: says what measured the card" grep -q "the card measured by nvml" <<<"$out"
check "voltactl plan: the daemon's table" grep -q "^Fits: yes.$" <<<"$out"
check "voltactl plan: the card now" grep -q "^now: 3.00 of 4.00 GiB in use by all processes (nvml)" <<<"$out"
out=$("$bin/voltactl" --socket "$tmp/ctl.sock" plan --json 2>&1); rc=$?
check "voltactl plan --json: exit 0, the plan as the daemon sent it" \
  test "$rc" -eq 0 -a "$(jq .plan.planned_bytes <<<"$out")" = "$(jq .planned_bytes <<<"$json")"
out=$("$bin/voltactl" --socket "$tmp/ctl.sock" plan 2>&1); rc=$?
check "voltactl plan while loading: exit 69 with the daemon's reason" \
  test "$rc" -eq 69 -a -n "$(grep "still loading" <<<"$out")"
wait "$server"

echo "plan_command: $fails failure(s)"
exit $((fails > 0))
