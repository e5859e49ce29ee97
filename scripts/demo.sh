#!/usr/bin/env bash
# The main job: install what is needed, build, fetch the demo model
# (SmolLM2-135M-Instruct), write a config, start voltad in the background on
# a socket under your runtime directory, wait until it is ready, answer a
# sample chat through it, and say how to talk to it and how to stop it.
# The daemon keeps running after the script ends. Running the script again
# stops the previous demo daemon first.
#
# The backend is chosen here, explicitly (the daemon never falls back on its
# own): cuda when an NVIDIA GPU is visible, cpu otherwise.
# VOLTAD_DEMO_BACKEND=cpu|cuda overrides the choice.
# Without a GPU a first build compiles the CUDA kernels (where nvcc is
# found) for one architecture only, the list scripts/test.sh uses, not the
# default list: they cannot run here. With a GPU whose architecture the
# build lacks (a build made before its driver was installed), the build is
# configured again with the default list.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [[ -n ${VOLTAD_DEMO_BACKEND:-} ]]; then
  backend=$VOLTAD_DEMO_BACKEND why="VOLTAD_DEMO_BACKEND"
  [[ $backend == cpu || $backend == cuda ]] ||
    { echo "demo: VOLTAD_DEMO_BACKEND must be cpu or cuda, not '$backend'" >&2; exit 64; }
elif command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  backend=cuda why="NVIDIA GPU visible"
else
  backend=cpu why="no NVIDIA GPU visible"
fi

bash scripts/install-deps.sh
cached_archs() { sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' build/CMakeCache.txt 2>/dev/null; }
if [[ $backend == cpu && ! -f build/CMakeCache.txt ]]; then
  echo "demo: no GPU to serve on: CUDA kernels, if built, for one architecture"
  bash scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES="${VOLTAD_TEST_CUDA_ARCHITECTURES:-75}"
elif [[ $backend == cuda && -f build/CMakeCache.txt ]] &&
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d . ) &&
  [[ -n $cap && $(cached_archs) =~ ^[0-9\;]+$ && ";$(cached_archs);" != *";$cap;"* ]]; then
  echo "demo: the build has CUDA code for $(cached_archs), not this GPU's sm_$cap: configuring again"
  bash scripts/build.sh -UCMAKE_CUDA_ARCHITECTURES
else
  bash scripts/build.sh
fi
model=$(bash scripts/fetch-demo-model.sh)

# Where voltad's ${RUNTIME_DIRECTORY} points when systemd does not set it
# (daemon/config_paths.cpp): the same rule, so voltactl finds the socket too.
if [[ -n ${RUNTIME_DIRECTORY:-} ]]; then
  runtime=${RUNTIME_DIRECTORY%%:*}
elif [[ $(id -u) -eq 0 ]]; then
  runtime=/run/voltad
elif [[ -n ${XDG_RUNTIME_DIR:-} ]]; then
  runtime=$XDG_RUNTIME_DIR/voltad
else
  runtime=/tmp/voltad-$(id -u)
fi
sock=$runtime/voltad.sock
demo=$runtime/demo
mkdir -p "$demo"
config=$demo/voltad.yaml
log=$demo/voltad.log
pidfile=$demo/voltad.pid

echo "demo: backend $backend ($why)"

# The new config, checked before a previous demo daemon is stopped.
cat >"$config.new" <<EOF
# Written by scripts/demo.sh. Every key: docs/CONFIG.md.
model:
  path: "$model"
server:
  socket_path: "$sock"
  socket_mode: "0660"
engine:
  backend: $backend
  max_context: 2048
  max_sequences: 4
log:
  level: info
EOF
build/bin/voltad --verify-config "$config.new" >/dev/null || { rm -f "$config.new"; exit 78; }

# A previous demo daemon is stopped (it drains, then removes its socket).
if [[ -f $pidfile ]]; then
  old=$(cat "$pidfile")
  if [[ -n $old && -r /proc/$old/comm && $(cat "/proc/$old/comm") == voltad ]]; then
    echo "demo: stopping the previous demo daemon (pid $old)"
    kill -TERM "$old" 2>/dev/null || true
    for _ in $(seq 100); do [[ -e /proc/$old ]] || break; sleep 0.1; done
  fi
  rm -f "$pidfile"
fi

mv "$config.new" "$config"

# setsid: the daemon outlives this script and ignores its terminal's Ctrl-C.
nohup setsid build/bin/voltad --config "$config" >"$log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$pidfile"
echo "demo: voltad started (pid $pid), log in $log"

health() { curl -s --max-time 5 --unix-socket "$sock" http://localhost/health 2>/dev/null || true; }
for _ in $(seq 600); do
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid" && code=0 || code=$?
    echo "demo: voltad exited with code $code before becoming ready; its log:" >&2
    tail -n 20 "$log" >&2
    [[ $backend == cuda ]] && echo "demo: to try the CPU backend instead: VOLTAD_DEMO_BACKEND=cpu bash scripts/demo.sh" >&2
    exit 1
  fi
  [[ $(health) == *'"status":"ready"'* ]] && break
  sleep 0.2
done
if [[ $(health) != *'"status":"ready"'* ]]; then
  echo "demo: voltad did not become ready in 2 minutes; its log: $log" >&2
  exit 1
fi
echo "demo: ready: $(health)"

question="In one sentence, what is a lighthouse for?"
echo
echo "demo: voltactl chat <<< \"$question\""
echo "$question" | build/bin/voltactl --socket "$sock" chat --max-tokens 48
echo
echo "demo: the same through curl (OpenAI chat completions):"
curl -s --unix-socket "$sock" http://localhost/v1/chat/completions -H 'Content-Type: application/json' \
  -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$question\"}],\"max_tokens\":48}"
echo
cat <<EOF

voltad is running (pid $pid) on $sock, serving $(basename "$model") on backend $backend.
  chat:     $root/build/bin/voltactl --socket $sock chat
  generate: $root/build/bin/voltactl --socket $sock generate "Once upon a time"
  status:   $root/build/bin/voltactl --socket $sock status
  bench:    $root/build/bin/voltactl --socket $sock bench
  curl:     curl --unix-socket $sock http://localhost/v1/chat/completions \\
              -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"Hello"}]}'
  OpenAI SDK (Python, openai 3.x; with 1.x or 2.x, httpx for httpx2):
              OpenAI(base_url="http://localhost/v1", api_key="none",
              http_client=httpx2.Client(transport=httpx2.HTTPTransport(uds="$sock")))
  log:      $log
  stop:     kill $pid      (finishes running requests first, then exits)
EOF
