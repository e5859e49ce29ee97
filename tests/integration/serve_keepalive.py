"""Keep-alive comments while a stream waits (server.stream_keepalive), and
voltactl's --timeout as a stream's idle limit.

With one sequence at a time, a long streamed request (the blocker) holds
the engine while a second request waits in the queue:
- a raw client's queued stream gets ': keep-alive' comments before its
  first event, then a whole, well-formed stream;
- `voltactl --timeout 1 generate`, queued as long, gets its text: the
  comments keep its idle limit from passing;
- after a reload with stream_keepalive 0s, the same command stops with
  "no word from the daemon" instead of waiting on.
usage: serve_keepalive.py SOCKET VOLTACTL CONFIG DAEMON_PID"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

from serve_http import Reader, build_request, connect, sse_comments, sse_events, wait_for

SOCK, VOLTACTL, CONFIG, PID = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
failures = 0


def check(what, ok, detail=""):
    global failures
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"), flush=True)
    failures += 0 if ok else 1


class Blocker:
    """A streamed completion of 400 tokens (seconds on the CPU backend), read
    in a thread; `running` is set once its first text has come."""

    def __init__(self):
        self.running = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()
        check("the blocker starts generating", self.running.wait(120))

    def run(self):
        s = connect(SOCK, 600)
        try:
            body = {"prompt": "Once upon a time", "max_tokens": 400, "stream": True,
                    "temperature": 0, "ignore_eos": True}
            s.sendall(build_request("POST", "/v1/completions", body))
            r = Reader(s)
            r.head()
            for chunk in r.chunks():
                if b'"text":"' in chunk:
                    self.running.set()
        finally:
            s.close()
            self.running.set()
            self.done.set()

    def join(self):
        self.thread.join(600)


def queued_stream():
    """A streamed request sent while the blocker runs: (comments seen before
    the first data event, the whole body)."""
    s = connect(SOCK, 600)
    try:
        s.sendall(build_request("POST", "/v1/completions",
                                {"prompt": "Hello", "max_tokens": 4, "stream": True,
                                 "temperature": 0}))
        r = Reader(s)
        status, headers = r.head()
        assert status == 200, status
        data = b""
        before = None
        for chunk in r.chunks():
            data += chunk
            if before is None and b"data: " in data:
                before = len(sse_comments(data[:data.index(b"data: ")]))
        return before, data
    finally:
        s.close()


# A raw client's queued stream.
blocker = Blocker()
before, data = queued_stream()
check("a queued stream gets keep-alive comments before its first event", before and before >= 1,
      f"{before} comment(s)")
events = sse_events(data)
check("... then a whole stream: events, [DONE]", events and events[-1] == "[DONE]", events[-3:])
chunks = [json.loads(e) for e in events[:-1]]
check("... its events are completions with text",
      chunks and all(c["object"] == "text_completion" for c in chunks)
      and "".join(c["choices"][0]["text"] for c in chunks), chunks[:2])
check("comments are all ': keep-alive'", set(sse_comments(data)) <= {": keep-alive"},
      sse_comments(data)[:3])
blocker.join()


def voltactl_queued():
    blocker = Blocker()
    started = time.time()
    p = subprocess.run([VOLTACTL, "--socket", SOCK, "--timeout", "1", "generate", "Hello",
                        "--max-tokens", "4"], capture_output=True, text=True, timeout=600)
    waited = time.time() - started
    still = not blocker.done.is_set()
    blocker.join()
    return p, waited, still


p, waited, still = voltactl_queued()
check(f"voltactl --timeout 1, queued {waited:.1f} s behind the blocker: its text",
      p.returncode == 0 and p.stdout.strip(), f"rc {p.returncode}, {p.stderr.strip()}")
check("... it waited longer than its --timeout", waited > 1.5 or not still, f"{waited:.1f} s")

# Keep-alives off by a reload: the same wait now passes voltactl's limit.
with open(CONFIG) as f:
    text = f.read()
assert "stream_keepalive: 200ms" in text, text
with open(CONFIG, "w") as f:
    f.write(text.replace("stream_keepalive: 200ms", "stream_keepalive: 0s"))
os.kill(PID, signal.SIGHUP)
check("the reload is applied",
      wait_for(lambda: "stream_keepalive: 200ms -> 0" in open(os.environ["VOLTAD_LOG"]).read(), 30),
      "no such line in the log")
p, waited, still = voltactl_queued()
check("keep-alives off: voltactl --timeout 1 queued behind the blocker stops",
      p.returncode == 69 and "no word from the daemon" in p.stderr,
      f"rc {p.returncode}, waited {waited:.1f} s, stderr {p.stderr.strip()!r}")
check("... after its second of silence, not at once or at the blocker's end",
      1.0 <= waited < 30 and still, f"{waited:.1f} s, blocker still running: {still}")
sys.exit(1 if failures else 0)
