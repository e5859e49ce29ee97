"""Graceful stop: the caller sends SIGTERM once a long stream has started.
While draining on SIGTERM, /health says "stopping" with 503 and new generations get 503 +
Retry-After; past shutdown_grace the running stream ends with an error event
and [DONE].  usage: serve_drain.py SOCKET DAEMON_PID"""
import json
import os
import signal
import sys
import time

from serve_http import Reader, build_request, connect, request, sse_events

SOCK, PID = sys.argv[1], int(sys.argv[2])
failures = 0


def check(what, cond, detail=""):
    global failures
    print(f"{'ok  ' if cond else 'FAIL'} {what}{'' if cond else ': ' + str(detail)}")
    failures += not cond


s = connect(SOCK, 60)
s.sendall(build_request("POST", "/v1/completions", {"prompt": "Count:", "max_tokens": 490, "stream": True,
                                                      "ignore_eos": True}))
r = Reader(s)
status, headers = r.head()
chunks = r.chunks()
data = next(chunks)  # the stream is running
t0 = time.monotonic()
os.kill(PID, signal.SIGTERM)
# Until the daemon has handled the signal /health still says ready: ask
# again rather than sleep a fixed time (a loaded CI machine can be slow).
while True:
    st, h, body = request(SOCK, "GET", "/health", timeout=10)
    if st == 503 or time.monotonic() - t0 > 2:
        break
    time.sleep(0.02)
check("draining: /health 503 with status stopping", st == 503 and json.loads(body)["status"] == "stopping", (st, body))
st, h, body = request(SOCK, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 2}, timeout=10)
check("draining: a new generation gets 503 with Retry-After", st == 503 and "retry-after" in h, (st, h))
for part in chunks:
    data += part
elapsed = time.monotonic() - t0
events = sse_events(data)
check("past the grace period the stream ends with an error event, then [DONE]",
      events[-1] == "[DONE]" and "error" in json.loads(events[-2]), events[-2:])
check("within shutdown_grace (2 s) and a little", elapsed < 7, elapsed)
sys.exit(1 if failures else 0)
