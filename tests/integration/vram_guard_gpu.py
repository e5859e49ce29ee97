"""The VRAM guard on a real GPU (issue 8; docs/PLANNING.md, "While serving").
Run by vram_guard_gpu.sh; exit 0 all checks passed, 1 one failed, 77 skipped.

1. A context that cannot fit: voltad refuses to start, exit 75, with the
   plan's table and the ways out in its log.
2. Started normally; a second process (PyTorch) takes the card past
   memory.vram_fraction: voltad turns degraded, new requests get 503 with
   Retry-After, the stream that was running finishes; the process lets go:
   ready again.
3. A flood of long concurrent requests against a small KV pool (preemption):
   every request succeeds, no CUDA out-of-memory, the daemon keeps serving,
   and the card's usage -- sampled every 50 ms throughout -- stays under the
   budget and does not grow while serving.

usage: vram_guard_gpu.py VOLTAD_BIN_DIR MODEL WORK_DIR"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

from serve_http import Reader, build_request, connect, metrics, request, sse_events, wait_for

BIN, MODEL, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
SOCK = os.path.join(WORK, "voltad.sock")
MiB, GiB = 1 << 20, 1 << 30
failures = 0
summary = []


def check(what, cond, detail=""):
    global failures
    print(f"{'ok  ' if cond else 'FAIL'} {what}{'' if cond else ': ' + str(detail)}", flush=True)
    failures += not cond
    return cond


def note(line):
    print(line, flush=True)
    summary.append(line)


# --- the card, as voltad's monitor sees it (NVML: total - free), else nvidia-smi
try:
    import pynvml

    pynvml.nvmlInit()
    _handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    def card():
        m = pynvml.nvmlDeviceGetMemoryInfo(_handle)
        return m.total - m.free, m.total

    CARD_SOURCE = "NVML"
except Exception:  # no nvidia-ml-py: nvidia-smi, in MiB
    def card():
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits",
                              "-i", "0"], capture_output=True, text=True, check=True).stdout
        used, total = (int(x) * MiB for x in out.split(","))
        return used, total

    CARD_SOURCE = "nvidia-smi"


class Sampler(threading.Thread):
    """The card's usage every 50 ms, and the peak."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.samples, self.stop = 0, 0, threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, card()[0])
            self.samples += 1
            time.sleep(0.05)


def write_config(path, **engine):
    mem = engine.pop("memory", {})
    lines = [f'model:\n  path: "{MODEL}"', f'server:\n  socket_path: "{SOCK}"\n  socket_mode: "0666"\n'
             "  max_requests_per_user: 256\n  max_connections: 512\n  read_timeout: 30s\n  write_timeout: 120s",
             "engine:\n  backend: cuda\n" + "".join(f"  {k}: {v}\n" for k, v in engine.items()).rstrip(),
             "memory:\n" + "".join(f"  {k}: {v}\n" for k, v in mem.items()).rstrip(), "log:\n  level: info"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


class Daemon:
    def __init__(self, name, config):
        self.log_path = os.path.join(WORK, name + ".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([os.path.join(BIN, "voltad"), "--config", config], stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_ready(self, timeout=300):
        def ready():
            if self.proc.poll() is not None:
                return "exited"
            try:
                st, _, body = request(SOCK, "GET", "/health", timeout=5)
                return "ready" if json.loads(body).get("status") == "ready" else None
            except OSError:
                return None
        return wait_for(ready, timeout=timeout, interval=0.2) == "ready"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def health():
    st, h, body = request(SOCK, "GET", "/health", timeout=10)
    return st, h, json.loads(body)


def complete(prompt, max_tokens, timeout=600):
    st, h, body = request(SOCK, "POST", "/v1/completions",
                          {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0},
                          timeout=timeout)
    return st, h, body


# --- 1. a context that cannot fit -------------------------------------------------
cfg = os.path.join(WORK, "too-long.yaml")
write_config(cfg, max_context=1048576, max_sequences=16, memory={"vram_fraction": 0.10})
d = Daemon("too-long", cfg)
try:
    rc = d.proc.wait(timeout=300)
except subprocess.TimeoutExpired:
    rc = None
    d.stop()
log = d.text()
if "built without CUDA" in log:
    print("skipped: this voltad was built without CUDA (build with -DVOLTAD_CUDA=ON)")
    sys.exit(77)
check("a context that cannot fit: voltad refuses to start with exit 75", rc == 75, (rc, log[-2000:]))
check("... the log has the plan's table and the shortfall", "does not fit" in log and "KV cache pool" in log
      and "budget" in log, log[-2000:])
check("... and a way out with a number (engine.max_context)", "max_context" in log, log[-2000:])

# --- 2. pressure from another process ---------------------------------------------
cfg = os.path.join(WORK, "voltad.yaml")
write_config(cfg, max_context=4096, max_sequences=16, max_batch_tokens=512,
             memory={"vram_fraction": 0.90, "hysteresis": 0.02, "monitor_interval": "200ms",
                     "kv_cache_bytes": "512MiB"})
before_start, total = card()
d = Daemon("voltad", cfg)
if not check("voltad starts and becomes ready", d.wait_ready()):
    print(d.text()[-3000:])
    d.stop()
    sys.exit(1)
started, _ = card()
st, _, h = health()
vram = h.get("vram", {})
check("/health shows the guard (NVML or the CUDA runtime) and the card", vram.get("source") in ("nvml", "cuda runtime")
      and vram.get("card_total_bytes", 0) > 0, h)
m = metrics(SOCK)
held = m.get("voltad_device_memory_used_bytes", 0)
budget = int(0.90 * total)
note(f"card: {total / GiB:.2f} GiB, budget (0.90) {budget / GiB:.2f} GiB; {CARD_SOURCE} used before voltad "
     f"{before_start / GiB:.2f} GiB, after start {started / GiB:.2f} GiB: voltad + its context "
     f"{(started - before_start) / MiB:.0f} MiB, of which weights + KV + workspace {held / MiB:.0f} MiB")
plan = [line for line in d.text().splitlines() if "VRAM plan" in line]
note("start-up plan: " + (plan[0] if plan else "(no plan line in the log)"))

# The second process starts its CUDA context first and takes the memory on a
# word from us, so the stream below is surely running when the card fills.
used, _ = card()
grab = max(budget - used + 2 * GiB, GiB)
holder = subprocess.Popen(
    [sys.executable, "-c",
     "import sys, torch\n"
     "torch.zeros(1, device='cuda'); torch.cuda.synchronize(); print('ready', flush=True)\n"
     "sys.stdin.readline()\n"
     f"x = torch.empty({grab}, dtype=torch.uint8, device='cuda')\n"
     "x.fill_(1); torch.cuda.synchronize(); print('held', flush=True); sys.stdin.read()"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
check("a second process (PyTorch) is up on the card", holder.stdout.readline().strip() == "ready")

# A long stream that is running when the card fills up.
s = connect(SOCK, 600)
s.sendall(build_request("POST", "/v1/completions", {"prompt": "Count:", "max_tokens": 4000, "stream": True,
                                                     "ignore_eos": True}))
reader = Reader(s)
stream_status, _ = reader.head()
chunks = reader.chunks()
stream_data = next(chunks)
check("the long stream started", stream_status == 200)

holder.stdin.write("go\n")
holder.stdin.flush()
held_line = holder.stdout.readline().strip()
check("the second process takes the card past the budget", held_line == "held", held_line)
note(f"the second process holds {grab / GiB:.2f} GiB; the card: {card()[0] / GiB:.2f} GiB used")
t0 = time.time()
degraded = wait_for(lambda: health()[2]["status"] == "degraded", timeout=10, interval=0.05)
check("voltad turns degraded", degraded)
note(f"degraded {time.time() - t0:.2f} s after the other process had its memory")
st, hd, h = health()
check("/health while degraded: 503 with Retry-After, the stream still running",
      st == 503 and "retry-after" in hd and h.get("running", 0) >= 1, (st, hd, h))
st, hd, body = complete("Hello", 4, timeout=30)
check("a new request gets 503 with Retry-After and the numbers",
      st == 503 and "retry-after" in hd and b"GiB" in body, (st, hd, body[:300]))
ctl = subprocess.run([os.path.join(BIN, "voltactl"), "--socket", SOCK, "status"], capture_output=True, text=True,
                     timeout=30)
check("voltactl status says DEGRADED (and exits non-zero)", ctl.returncode != 0 and "DEGRADED" in ctl.stdout,
      (ctl.returncode, ctl.stdout))
for part in chunks:
    stream_data += part
s.close()
events = sse_events(stream_data)
last = json.loads(events[-2]) if len(events) >= 2 else {}
check("the stream that was running finished normally",
      events and events[-1] == "[DONE]" and "error" not in last
      and last.get("choices", [{}])[0].get("finish_reason") == "length", events[-2:])
holder.stdin.close()
holder.wait(timeout=60)
t0 = time.time()
check("the other process lets go: ready again", wait_for(lambda: health()[2]["status"] == "ready", timeout=10,
                                                          interval=0.05))
note(f"ready {time.time() - t0:.2f} s after the other process exited")
st, _, body = complete("Hello", 4, timeout=60)
check("new requests are served again", st == 200, (st, body[:300]))

# --- 3. a flood of long concurrent requests ---------------------------------------
st, _, body = request(SOCK, "POST", "/tokenize", {"prompt": "The quick brown fox jumps over the lazy dog. "},
                      timeout=30)
per = max(1, json.loads(body)["count"])
prompt = "The quick brown fox jumps over the lazy dog. " * (1000 // per)
n_requests, gen = 48, 1200
results = [None] * n_requests
baseline, _ = card()
sampler = Sampler()
sampler.start()
t0 = time.time()


def one(i):
    try:
        st, _, body = complete(f"{i}: {prompt}", gen)
        j = json.loads(body)
        results[i] = (st, j.get("choices", [{}])[0].get("finish_reason"), j.get("usage", {}).get("completion_tokens"))
    except Exception as e:  # noqa: BLE001 - any failure is a failed request
        results[i] = (0, repr(e), 0)


threads = [threading.Thread(target=one, args=(i,)) for i in range(n_requests)]
for t in threads:
    t.start()
for t in threads:
    t.join(timeout=900)
elapsed = time.time() - t0
sampler.stop.set()
sampler.join()
ok = sum(1 for r in results if r and r[0] == 200 and r[1] == "length" and r[2] == gen)
check(f"all {n_requests} long requests succeeded", ok == n_requests, [r for r in results if not r or r[0] != 200][:5])
m = metrics(SOCK)
preemptions = m.get("voltad_preemptions_total", 0)
check("the flood ran the KV pool out (preemptions happened)", preemptions > 0, preemptions)
log = d.text()
check("no CUDA out-of-memory and no failed step in the log", "out of memory" not in log
      and "engine step failed" not in log, [x for x in log.splitlines() if "memory" in x][-5:])
st, _, h = health()
check("the daemon still serves", st == 200 and h["status"] == "ready", h)
check(f"peak card usage ({sampler.peak / GiB:.2f} GiB) stayed under the budget ({budget / GiB:.2f} GiB)",
      sampler.peak <= budget)
check("the card's usage did not grow while serving (every device buffer allocated at start)",
      sampler.peak <= baseline + 16 * MiB, (baseline, sampler.peak))
note(f"flood: {n_requests} requests of ~1000 + {gen} tokens in {elapsed:.1f} s, {int(preemptions)} preemptions; "
     f"card {baseline / GiB:.3f} GiB before, peak {sampler.peak / GiB:.3f} GiB over {sampler.samples} samples "
     f"({CARD_SOURCE}, every 50 ms); budget {budget / GiB:.2f} GiB of {total / GiB:.2f} GiB")
rc = d.stop()
check("SIGTERM: exit 0", rc == 0, rc)
degraded_lines = [x for x in log.splitlines() if "degraded:" in x or "ready again:" in x]
print("\n== transitions in the log")
print("\n".join(degraded_lines))
print("\n== vram_guard_gpu summary")
print("\n".join(summary))
print(f"{'all checks passed' if not failures else str(failures) + ' check(s) failed'}")
sys.exit(1 if failures else 0)
