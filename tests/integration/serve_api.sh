#!/usr/bin/env bash
# Every endpoint through curl, and voltactl's commands, against a real
# voltad (CPU backend, SmolLM2) on a temporary socket; then a graceful stop.
set -uo pipefail
source "$(dirname "$0")/serve_lib.sh"

# py EXPR: evaluates a Python expression over j (the JSON on stdin); true when truthy.
py() { python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($1) else 1)"; }
body() { sed '$d' <<<"$1"; }
status() { tail -n 1 <<<"$1"; }

start_daemon
check "socket created with the configured mode" test "$(stat -c %a "$sock")" = 666

r=$(api /health)
check "/health: 200 ready" test "$(status "$r")" = 200
check "/health: names model and backend" py 'j["status"]=="ready" and j["backend"]=="cpu" and j["model"].startswith("SmolLM2")' <<<"$(body "$r")"

r=$(api /v1/models)
check "/v1/models lists the model" py 'j["object"]=="list" and j["data"][0]["id"].startswith("SmolLM2") and j["data"][0]["max_model_len"]==512' <<<"$(body "$r")"
model_id=$(body "$r" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
r=$(api "/v1/models/$model_id")
check "/v1/models/{id}: 200" test "$(status "$r")" = 200
r=$(api /v1/models/nope)
check "/v1/models/nope: 404" test "$(status "$r")" = 404
check "/v1/models/nope: model_not_found on param model" py 'j["error"]["code"]=="model_not_found" and j["error"]["param"]=="model"' <<<"$(body "$r")"
r=$(api /v1/models/)
check "/v1/models/ (no id): 404 saying so" py '"no model id" in j["error"]["message"]' <<<"$(body "$r")"
# The SDKs percent-encode the id ("org/name" as "org%2Fname"): '.' as %2E here.
r=$(api "/v1/models/${model_id//./%2E}")
check "/v1/models/{id} percent-encoded: 200, the id decoded" \
  py "j['id']=='$model_id'" <<<"$(body "$r")"

chat='{"messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":6,"temperature":0}'
r=$(api /v1/chat/completions -H 'Content-Type: application/json' -d "$chat")
check "chat: 200" test "$(status "$r")" = 200
check "chat: OpenAI shape with usage" py 'j["object"]=="chat.completion" and j["choices"][0]["message"]["role"]=="assistant" and len(j["choices"][0]["message"]["content"])>0 and j["choices"][0]["finish_reason"] in ("stop","length") and j["usage"]["total_tokens"]==j["usage"]["prompt_tokens"]+j["usage"]["completion_tokens"] and j["usage"]["completion_tokens"]<=6' <<<"$(body "$r")"
check "chat: greedy answer mentions Paris" grep -q Paris <<<"$(body "$r")"

r=$(api /v1/chat/completions -d '{"model":"'"$model_id"'","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true}')
b=$(body "$r")
check "chat stream: 200 text/event-stream" test "$(status "$r")" = 200
first=$(grep -m1 '^data: ' <<<"$b" | sed 's/^data: //')
check "chat stream: delta.role assistant first" py 'j["choices"][0]["delta"]["role"]=="assistant"' <<<"$first"
check "chat stream: ends with [DONE]" test "$(grep '^data: ' <<<"$b" | tail -n 1)" = "data: [DONE]"
last=$(grep '^data: ' <<<"$b" | tail -n 2 | head -n 1 | sed 's/^data: //')
check "chat stream: final chunk has finish_reason and usage" py 'j["choices"][0]["finish_reason"]=="length" and j["usage"]["completion_tokens"]==4' <<<"$last"

r=$(api /v1/chat/completions -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}')
usage_chunk=$(grep '^data: ' <<<"$(body "$r")" | tail -n 2 | head -n 1 | sed 's/^data: //')
check "chat stream include_usage: separate usage chunk with no choices" py 'j["choices"]==[] and j["usage"]["completion_tokens"]==3' <<<"$usage_chunk"

r=$(api /v1/completions -d '{"prompt":"Once upon a time","max_tokens":5,"temperature":0,"ignore_eos":true}')
check "completions: text_completion with 5 tokens" py 'j["object"]=="text_completion" and j["usage"]["completion_tokens"]==5 and j["choices"][0]["finish_reason"]=="length" and len(j["choices"][0]["text"])>0' <<<"$(body "$r")"
r=$(api /v1/completions -d '{"prompt":"Once upon a time","temperature":0,"ignore_eos":true}')
check "completions without max_tokens: 16 tokens (the legacy API's default)" \
  py 'j["usage"]["completion_tokens"]==16 and j["choices"][0]["finish_reason"]=="length"' <<<"$(body "$r")"
r=$(api /v1/completions -d '{"prompt":"","max_tokens":2}')
check "completions with an empty prompt: 400 on prompt" \
  py 'j["error"]["param"]=="prompt"' <<<"$(body "$r")"
r=$(api /v1/completions -d '{"prompt":"Once upon a time","max_tokens":4,"stream":true,"seed":7}')
b=$(body "$r")
check "completions stream: chunks of text, then [DONE]" test "$(grep -c '"text_completion"' <<<"$b")" -ge 2 -a "$(grep '^data: ' <<<"$b" | tail -n 1)" = "data: [DONE]"

# logit_bias: +100 on one token makes it the answer at every step; an id
# past the vocabulary is refused on logit_bias.
tok=$(body "$(api /tokenize -d '{"prompt":"Paris","add_special":false}')" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"][0])')
twice=$(body "$(api /detokenize -d "{\"tokens\":[$tok,$tok,$tok]}")" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["prompt"]))')
r=$(api /v1/completions -d "{\"prompt\":\"Once upon a time\",\"max_tokens\":3,\"temperature\":0,\"logit_bias\":{\"$tok\":100}}")
check "completions with logit_bias +100: that token three times" py "j['choices'][0]['text']==$twice" <<<"$(body "$r")"
r=$(api /v1/chat/completions -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"logit_bias":{"99999999":5}}')
check "logit_bias past the vocabulary: 400 on logit_bias" \
  py 'j["error"]["param"]=="logit_bias" and "outside the vocabulary" in j["error"]["message"]' <<<"$(body "$r")"

r=$(api /v1/completions -d '{"prompt":"Hello","max_tokens":4,"stop":["\n"," "]}')
check "completions with stop strings: 200" test "$(status "$r")" = 200
check "stop strings never appear in the output" py '" " not in j["choices"][0]["text"] and "\n" not in j["choices"][0]["text"]' <<<"$(body "$r")"

# "Expect: 100-continue" (curl sends it for large bodies): answered at once,
# not after the client's own wait (10 s here) for a "100 Continue".
t=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --expect100-timeout 10 \
  -H 'Expect: 100-continue' --unix-socket "$sock" http://localhost/tokenize -d '{"prompt":"hi"}')
check "Expect: 100-continue is answered (200 well within 10 s): $t" \
  python3 -c "import sys; c, s = sys.argv[1].split(); sys.exit(0 if c == '200' and float(s) < 5 else 1)" "$t"
r=$(api /tokenize -d '{"prompt":"hello world"}')
check "/tokenize: tokens and count" py 'j["count"]==len(j["tokens"])==2' <<<"$(body "$r")"
tokens=$(body "$r" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["tokens"]))')
r=$(api /detokenize -d "{\"tokens\":$tokens}")
check "/detokenize gives the text back" py 'j["prompt"]=="hello world"' <<<"$(body "$r")"
r=$(api /tokenize -d '{"messages":[{"role":"user","content":"hi"}]}')
check "/tokenize of messages uses the chat template" py 'j["count"]>5' <<<"$(body "$r")"

r=$(api /metrics)
m=$(body "$r")
check "/metrics: 200" test "$(status "$r")" = 200
check "/metrics: requests by endpoint and status" grep -q 'voltad_requests_total{endpoint="/v1/chat/completions",status="200"}' <<<"$m"
check "/metrics: TTFT histogram" grep -q 'voltad_time_to_first_token_seconds_bucket{le="+Inf"}' <<<"$m"
check "/metrics: inter-token latency histogram" grep -q '^voltad_inter_token_latency_seconds_count [1-9]' <<<"$m"
check "/metrics: KV gauges and running sequences" grep -q '^voltad_kv_cache_blocks_free ' <<<"$m"
check "/metrics: info with model and backend" grep -q '^voltad_info{.*model="SmolLM2.*backend="cpu"' <<<"$m"
check "/metrics: generated tokens counted" grep -q '^voltad_generated_tokens_total [1-9]' <<<"$m"

r=$(api /nope)
check "unknown route: 404 OpenAI error" py 'j["error"]["type"]=="invalid_request_error" and "no route" in j["error"]["message"]' <<<"$(body "$r")"
check "unknown route: status 404" test "$(status "$r")" = 404
r=$(api /v1/chat/completions)
check "GET on a POST route: 405" test "$(status "$r")" = 405
r=$(api /v1/chat/completions -d '{"model":"gpt-4","messages":[{"role":"user","content":"x"}]}')
check "unknown model: 404 model_not_found" py 'j["error"]["code"]=="model_not_found"' <<<"$(body "$r")"
r=$(api /v1/chat/completions -d '{"messages":[{"role":"user","content":"x"}],"max_tokens":600}')
check "prompt + max_tokens past the context: 400 with the numbers" py 'j["error"]["code"]=="context_length_exceeded" and "512" in j["error"]["message"] and "600" in j["error"]["message"]' <<<"$(body "$r")"
check "past the context: status 400" test "$(status "$r")" = 400
r=$(api /v1/chat/completions -d '{"messages":[{"role":"user","content":"x"}],"max_tokens":100000000000}')
check "a huge max_tokens: context_length_exceeded with its number" py 'j["error"]["code"]=="context_length_exceeded" and "100000000000" in j["error"]["message"]' <<<"$(body "$r")"
check "... the field it names in param" py 'j["error"]["param"]=="max_tokens"' <<<"$(body "$r")"
r=$(api /v1/completions -d '{"prompt":"x","max_tokens":99999999999999999999}')
check "a max_tokens past int64: context_length_exceeded quoting its value (1e+20), not INT64_MAX" \
  py 'j["error"]["code"]=="context_length_exceeded" and "asks for 1e+20 more" in j["error"]["message"]' <<<"$(body "$r")"
r=$(api /v1/chat/completions -d '{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":600}')
check "max_completion_tokens past the context: param names it" py 'j["error"]["code"]=="context_length_exceeded" and j["error"]["param"]=="max_completion_tokens" and "lower max_completion_tokens" in j["error"]["message"]' <<<"$(body "$r")"
long=$(python3 -c 'print(" ".join(["word"] * 700))')
r=$(api /v1/completions -d "{\"prompt\":\"$long\",\"max_tokens\":4}")
check "a prompt longer than the context: param prompt, not max_tokens" py 'j["error"]["code"]=="context_length_exceeded" and j["error"]["param"]=="prompt" and "shorten the prompt" in j["error"]["message"] and "max_tokens" not in j["error"]["message"]' <<<"$(body "$r")"
r=$(api /v1/chat/completions -d '[1]')
check "a body that is JSON but not an object: invalid_json" py 'j["error"]["code"]=="invalid_json" and "an array" in j["error"]["message"]' <<<"$(body "$r")"

export VOLTAD_SOCKET=$sock
out=$("$bin/voltactl" status 2>&1)
check "voltactl status: ready, model, kv cache" grep -q "ready" <<<"$out"
check "voltactl status: shows the KV cache" grep -q "kv cache" <<<"$out"
out=$("$bin/voltactl" models 2>&1)
check "voltactl models" grep -q "^SmolLM2" <<<"$out"
out=$("$bin/voltactl" generate "The capital of France is" --max-tokens 4 --temperature 0 2>&1)
check "voltactl generate streams text" test -n "$(tr -d '[:space:]' <<<"$out")"
# Without --max-tokens, generate asks for 256 tokens or what the context
# (512 here) leaves after the prompt, whichever is less; an explicit
# --max-tokens is sent as given (and refused when it does not fit).
long_prompt=$(printf 'the %.0s' $(seq 490))
r=$(api /tokenize -d "{\"prompt\": \"$long_prompt\"}")
check "the long prompt leaves less than 256 tokens of the 512" py '256 < j["count"] < 511' <<<"$(body "$r")"
out=$("$bin/voltactl" generate "$long_prompt" --temperature 0 2>&1); rc=$?
check "voltactl generate, a long prompt, no --max-tokens: fits what the context leaves" test "$rc" -eq 0
out=$("$bin/voltactl" generate "$long_prompt" --max-tokens 256 --temperature 0 2>&1); rc=$?
check "... with --max-tokens 256: refused, with the numbers" \
  test "$rc" -eq 1 -a "$(grep -c "max_tokens asks for 256" <<<"$out")" -eq 1
out=$(printf 'Say hello.\nNow say goodbye.\n' | "$bin/voltactl" chat --max-tokens 4 2>&1)
check "voltactl chat answers two turns (piped)" test "$(grep -c . <<<"$out")" -ge 2
# A refused line (max_tokens past the 512-token context) is said on stderr;
# stdout stays empty (no blank line for an answer that never came).
out=$(echo "Hi" | "$bin/voltactl" chat --max-tokens 600 2>"$tmp/chat_err"); rc=$?
check "voltactl chat, a refused line: said on stderr, nothing on stdout, exit 1" \
  test "$rc" -eq 1 -a -z "$out" -a "$(grep -c "max_tokens asks for 600" "$tmp/chat_err")" -eq 1
# Seven long turns outgrow the 512-token context from the sixth: the oldest
# exchanges are forgotten (said), every turn is answered, none refused.
turn="Please tell me a short story about a lighthouse keeper who finds a message in a bottle on a stormy night, and what the message says, and what he does next with it. Make it about an old sailor, a lost ship, a storm, and a lamp that never goes out, told in the voice of the keeper's daughter."
out=$(for i in 1 2 3 4 5 6 7; do echo "$i. $turn"; done |
  "$bin/voltactl" chat --max-tokens 8 --temperature 0 2>&1); rc=$?
check "voltactl chat, a conversation longer than the context: the oldest forgotten, said, none refused" \
  test "$rc" -eq 0 -a "$(grep -c "outgrew the model's context (512 tokens); forgot the oldest" <<<"$out")" -ge 1 \
  -a "$(grep -c "answered 400" <<<"$out")" -eq 0
out=$("$bin/voltactl" bench --max-tokens 4 --concurrency 1,2 --json 2>&1)
check "voltactl bench --json: two levels with rates" python3 -c "
import json,sys; j=json.loads(sys.argv[1]); l=j['levels']
assert [x['concurrency'] for x in l]==[1,2] and all(x['errors']==0 and x['ttft_s']>0 and x['aggregate_tokens_per_s']>0 for x in l)
assert 550 <= j['prompt_chars'] <= 650" "$out"
out=$("$bin/voltactl" bench --max-tokens 1 --json 2>&1)
check "voltactl bench: concurrencies 1,2,4,8 by default (as its help and man page say)" \
  python3 -c "import json,sys; l=json.loads(sys.argv[1])['levels']
assert [x['concurrency'] for x in l]==[1,2,4,8], l" "$out"
# Ctrl-C during an answer cancels it (the connection closes) and chat goes on.
mkfifo "$tmp/chat_in"
"$bin/voltactl" chat --max-tokens 400 <"$tmp/chat_in" >"$tmp/chat_out" 2>&1 &
chat_pid=$!
exec 7>"$tmp/chat_in"
echo "Write a very long story about a dragon who learns to sing." >&7
for _ in $(seq 600); do [[ -s $tmp/chat_out ]] && break; sleep 0.1; done
kill -INT "$chat_pid"
for _ in $(seq 100); do grep -q cancelled "$tmp/chat_out" && break; sleep 0.1; done
check "voltactl chat: Ctrl-C cancels the answer" grep -q '^\[cancelled\]' "$tmp/chat_out"
check "  ...and the daemon frees the sequence" python3 -c "
import sys, time, subprocess
sys.path.insert(0, '$(dirname "$0")')
from serve_http import metrics, wait_for
sys.exit(0 if wait_for(lambda: metrics('$sock')['voltad_running_sequences'] == 0, 20) else 1)"
check "  ...and the log says the client hung up (at the default level, as API.md says)" \
  grep -qE " info +client uid [0-9]+ pid [0-9]+ hung up during a generation; cancelling it" "$log"
echo "/exit" >&7
exec 7>&-
wait "$chat_pid"
check "  ...and chat goes on, then leaves on /exit (exit 0)" test $? -eq 0
# The CPU backend plans no card: /plan says so (404 no_vram_plan), and so
# does voltactl plan (exit 1), naming the offline plan instead.
r=$(api /plan)
check "GET /plan on the CPU backend: 404 no_vram_plan" test "$(status "$r")" = 404
check "  ...with the code and the way to an offline plan" \
  py 'j["error"]["code"]=="no_vram_plan" and "voltad --plan" in j["error"]["message"]' <<<"$(body "$r")"
out=$("$bin/voltactl" plan 2>&1); rc=$?
check "voltactl plan on the CPU backend: exit 1, says there is no VRAM plan" \
  test "$rc" -eq 1 -a -n "$(grep "holds no VRAM plan" <<<"$out")"
"$bin/voltactl" plan --bogus >/dev/null 2>&1
check "voltactl plan --bogus: usage error 64" test $? -eq 64
"$bin/voltactl" --socket "$tmp/none.sock" status >/dev/null 2>"$tmp/err"
check "voltactl on a missing socket: clear error" grep -q "is voltad running" "$tmp/err"

stop_daemon
check "SIGTERM: exit 0" test "$daemon_rc" -eq 0
check "SIGTERM: socket removed" test ! -e "$sock"
check "SIGTERM: drained in the log" grep -q "drained" "$log"
finish
