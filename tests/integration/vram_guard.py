"""The VRAM guard against a fake card (see vram_guard.sh).
usage: vram_guard.py SOCKET FAKE_VRAM_FILE VOLTACTL"""
import json
import os
import subprocess
import sys
import time

from serve_http import Reader, build_request, connect, metrics, request, sse_events, wait_for

SOCK, FAKE, VOLTACTL = sys.argv[1], sys.argv[2], sys.argv[3]
failures = 0


def check(what, cond, detail=""):
    global failures
    print(f"{'ok  ' if cond else 'FAIL'} {what}{'' if cond else ': ' + str(detail)}")
    failures += not cond


def card(used):
    """Another process on the card: the file is replaced whole (no torn reads)."""
    with open(FAKE + ".tmp", "w") as f:
        f.write(f"{used} 100GiB\n")
    os.replace(FAKE + ".tmp", FAKE)


def health():
    st, h, body = request(SOCK, "GET", "/health", timeout=10)
    return st, h, json.loads(body)


def generate(max_tokens=2):
    return request(SOCK, "POST", "/v1/completions", {"prompt": "Hello", "max_tokens": max_tokens}, timeout=60)


st, _, h = health()
check("ready: /health 200 with the card as the guard sees it",
      st == 200 and h["status"] == "ready" and h["vram"]["card_used_bytes"] == 10 << 30
      and h["vram"]["card_total_bytes"] == 100 << 30 and h["vram"]["source"].startswith("test file"), h)
check("/health gives the lines: degraded above 90 GiB, ready below 85 GiB",
      h["vram"]["degraded_above_bytes"] == 90 << 30 and h["vram"]["ready_below_bytes"] == 85 << 30, h["vram"])
m = metrics(SOCK)
check("/metrics: card used and total", m.get("voltad_vram_card_used_bytes") == 10 << 30
      and m.get("voltad_vram_card_total_bytes") == 100 << 30, m)

# A long stream starts while the card is fine.
s = connect(SOCK, 120)
s.sendall(build_request("POST", "/v1/completions",
                        {"prompt": "Count:", "max_tokens": 150, "stream": True, "ignore_eos": True}))
r = Reader(s)
status, _ = r.head()
chunks = r.chunks()
data = next(chunks)
check("the long stream started", status == 200)

card("95GiB")  # another process grows past 90%
degraded = wait_for(lambda: health()[2]["status"] == "degraded", timeout=5, interval=0.05)
check("degraded within a few sampling intervals", degraded)
st, hd, h = health()
check("/health while degraded: 503, Retry-After, the card's numbers",
      st == 503 and "retry-after" in hd and h["vram"]["degraded"] and h["vram"]["card_used_bytes"] == 95 << 30,
      (st, hd, h))
check("the long stream is still running while degraded", h.get("running", 0) >= 1, h)
st, hd, body = generate()
err = json.loads(body).get("error", {})
check("a new request gets 503 with Retry-After", st == 503 and int(hd.get("retry-after", "0")) >= 1, (st, hd, body))
check("... and the numbers: used, total, and where it resumes",
      "95.00 GiB" in err.get("message", "") and "100.00 GiB" in err.get("message", "")
      and "85.00 GiB" in err.get("message", ""), err)
st, _, body = request(SOCK, "POST", "/v1/chat/completions",
                      {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, timeout=30)
check("chat completions are refused the same way", st == 503, (st, body))
st, _, body = request(SOCK, "POST", "/tokenize", {"prompt": "hi"}, timeout=30)
check("tokenize still works (it needs no card)", st == 200, (st, body))
m = metrics(SOCK)
check("/metrics: state degraded, one transition, card used 95 GiB",
      m.get('voltad_health_state{state="degraded"}') == 1 and m.get("voltad_vram_degraded_total") == 1
      and m.get("voltad_vram_card_used_bytes") == 95 << 30, m)
ctl = subprocess.run([VOLTACTL, "--socket", SOCK, "status"], capture_output=True, text=True, timeout=30)
check("voltactl status: degraded, the card's numbers, a non-zero exit",
      ctl.returncode != 0 and "degraded" in ctl.stdout and "95.00 of 100.00 GiB" in ctl.stdout
      and "DEGRADED" in ctl.stdout, (ctl.returncode, ctl.stdout, ctl.stderr))

# Inside the hysteresis band (85..90 GiB) nothing changes, however long.
card("88GiB")
time.sleep(1.0)
check("inside the band it stays degraded", health()[2]["status"] == "degraded")
card("91GiB")
time.sleep(0.3)
card("87GiB")
time.sleep(0.5)
check("swings around the threshold do not flap", health()[2]["status"] == "degraded"
      and metrics(SOCK).get("voltad_vram_degraded_total") == 1)

# The stream that was running when the card filled up finishes normally.
for part in chunks:
    data += part
events = sse_events(data)
last = json.loads(events[-2]) if len(events) >= 2 else {}
check("the running stream finished normally while degraded",
      events[-1] == "[DONE]" and "error" not in last
      and last.get("choices", [{}])[0].get("finish_reason") == "length", events[-2:])
s.close()

card("50GiB")  # the other process let go
ready = wait_for(lambda: health()[2]["status"] == "ready", timeout=5, interval=0.05)
check("ready again below vram_fraction - hysteresis", ready)
st, _, body = generate()
check("new requests are served again", st == 200, (st, body))
st, _, h = health()
check("/health 200, not degraded, the transition counted once",
      st == 200 and not h["vram"]["degraded"] and h["vram"]["times_degraded"] == 1, h)
ctl = subprocess.run([VOLTACTL, "--socket", SOCK, "status"], capture_output=True, text=True, timeout=30)
check("voltactl status: ready, exit 0", ctl.returncode == 0 and "50.00 of 100.00 GiB" in ctl.stdout
      and "DEGRADED" not in ctl.stdout, (ctl.returncode, ctl.stdout))

# A broken reading keeps the state and is counted.
with open(FAKE, "w") as f:
    f.write("nonsense\n")
wait_for(lambda: health()[2]["vram"]["sample_errors"] >= 1, timeout=10, interval=0.05)
st, _, h = health()
check("an unreadable sample keeps the state and is counted",
      h["status"] == "ready" and h["vram"]["sample_errors"] >= 1 and "last_error" in h["vram"], h)
card("20GiB")
sys.exit(1 if failures else 0)
