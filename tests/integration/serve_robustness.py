"""Malformed and hostile clients: each gets the right error or is cut off by
a deadline, and other clients are not held up.  usage: serve_robustness.py
SOCKET (the daemon runs with read_timeout 2s, max_header_bytes 4KiB,
max_body_bytes 64KiB, max_requests_per_user 2; serve_connections.py covers max_connections_per_user)."""
import json
import socket
import sys
import threading
import time

from serve_http import Reader, build_request, connect, metrics, request, wait_for

SOCK = sys.argv[1]
failures = 0


def check(what, cond, detail=""):
    global failures
    print(f"{'ok  ' if cond else 'FAIL'} {what}{'' if cond else ': ' + str(detail)}")
    failures += not cond


def raw_exchange(payload, timeout=10):
    """Sends bytes, returns (status, headers, body, closed_after)."""
    s = connect(SOCK, timeout)
    try:
        try:
            s.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass
        r = Reader(s)
        status, headers = r.head()
        body = r.body(headers)
        try:
            closed = s.recv(1) == b""
        except (ConnectionResetError, socket.timeout):
            closed = True
        return status, headers, body, closed
    finally:
        s.close()


def error_of(body):
    return json.loads(body)["error"]


def health_latency():
    t = time.time()
    status, _, _ = request(SOCK, "GET", "/health", timeout=10)
    return status, time.time() - t


# Broken HTTP.
status, _, body, closed = raw_exchange(b"GARBAGE\r\n\r\n")
check("broken request line: 400 and the connection closes", status == 400 and closed, (status, body))
status, _, body, closed = raw_exchange(b"POST /v1/completions HTTP/1.1\r\nContent-Length: nope\r\n\r\n")
check("bad Content-Length: 400", status == 400, status)

# Oversized header and body.
status, _, body, _ = raw_exchange(build_request("GET", "/health", headers={"X-Big": "a" * 5000}))
check("header over max_header_bytes: 431", status == 431, status)
big = b'{"prompt":"' + b"a" * 100000 + b'"}'
payload = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: " + str(len(big)).encode() + b"\r\n\r\n" + big)
status, _, body, _ = raw_exchange(payload)
check("body over max_body_bytes: 413 (not a broken pipe)", status == 413, status)

# Invalid JSON and wrong types: 400 naming the field.
status, _, body = request(SOCK, "POST", "/v1/chat/completions", b'{"messages": [', timeout=10)
check("invalid JSON: 400 invalid_json", status == 400 and error_of(body)["code"] == "invalid_json", body)

# Codings voltad cannot undo are refused, not read as plain JSON (RFC 9112
# 6.1: 501; RFC 9110: 415); an absolute-form target is taken (RFC 9112
# 3.2.2).
gz_body = b'5\r\n{"a":\r\n0\r\n\r\n'
status, _, body, closed = raw_exchange(
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" + gz_body)
check("Transfer-Encoding gzip, chunked: 501, said", status == 501 and b"gzip, chunked" in body
      and closed, (status, body))
payload = json.dumps({"prompt": "x", "max_tokens": 1}).encode()
status, _, body, _ = raw_exchange(
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s"
    % (len(payload), payload))
check("Content-Encoding gzip: 415, said", status == 415 and b"uncompressed" in body, (status, body))
# Refused before routing, they are counted under the route their request
# line named, as 413 and 431 are: not under "" on a new connection, nor
# under the previous request's endpoint on a kept-alive one.
before = metrics(SOCK)
status, _, body, _ = raw_exchange(
    b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s"
    % (len(payload), payload))
after = metrics(SOCK)
key = 'voltad_requests_total{endpoint="%s",status="415"}'
check("415 after /health on one connection: counted under the route it named",
      after.get(key % "/v1/completions", 0) - before.get(key % "/v1/completions", 0) == 1
      and after.get(key % "/health", 0) == 0 and after.get(key % "", 0) == 0,
      {k: v for k, v in after.items() if 'status="415"' in k or 'status="501"' in k})
check("501 counted under the route it named, never under \"\"",
      after.get('voltad_requests_total{endpoint="/v1/completions",status="501"}', 0) >= 1
      and 'voltad_requests_total{endpoint="",status="501"}' not in after, after)
check("413 and 431 counted under the routes they named",
      after.get('voltad_requests_total{endpoint="/v1/completions",status="413"}', 0) >= 1
      and after.get('voltad_requests_total{endpoint="/health",status="431"}', 0) >= 1, after)
status, _, body, _ = raw_exchange(b"GET http://localhost/v1/models HTTP/1.1\r\nHost: localhost\r\n"
                                  b"Connection: close\r\n\r\n")
check("an absolute-form target: answered as its path", status == 200 and b'"list"' in body, (status, body))
cases = [
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "5"}, "max_tokens"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": "hello"}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "top_p": 7}, "top_p"),
    ({"messages": [{"role": "user", "content": "x"}], "stop": 5}, "stop"),
    ({"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
    ({"messages": [{"role": "user", "content": "x"}], "seed": 1.5}, "seed"),
    ({"model": 7, "messages": [{"role": "user", "content": "x"}]}, "model"),
]
for req, field in cases:
    status, _, body = request(SOCK, "POST", "/v1/chat/completions", req, timeout=10)
    err = error_of(body) if status == 400 else {}
    check(f"wrong '{field}': 400 naming it", status == 400 and err.get("param") == field and field in err.get("message", ""),
          (status, body))
status, _, body = request(SOCK, "POST", "/v1/completions", {"prompt": ["a", "b"]}, timeout=10)
check("several prompts: 400 on prompt", status == 400 and error_of(body)["param"] == "prompt", body)
status, _, body = request(SOCK, "POST", "/v1/completions", b"[" * 60000, timeout=10)
check("deeply nested JSON: 400, daemon fine", status == 400, status)

# Keep-alive and pipelining.
s = connect(SOCK, 10)
s.sendall(build_request("GET", "/health") + build_request("GET", "/v1/models"))
r = Reader(s)
st1, h1 = r.head()
r.body(h1)
st2, h2 = r.head()
b2 = r.body(h2)
check("two pipelined requests on one connection: two answers", st1 == 200 and st2 == 200 and b'"list"' in b2)
s.sendall(build_request("GET", "/health"))
st3, h3 = r.head()
r.body(h3)
check("the connection stays open for a third (keep-alive)", st3 == 200)
s.close()

# A request that arrives on a connection while its generation runs waits
# in the socket: it is answered after the generation, and the generation is
# not lost (the session used to drop its last reference and reset).
for stream in (False, True):
    s = connect(SOCK, 120)
    s.sendall(build_request("POST", "/v1/completions",
                            {"prompt": "Once upon a time", "max_tokens": 48, "stream": stream}))
    time.sleep(0.3)
    s.sendall(build_request("GET", "/health"))
    r = Reader(s)
    try:
        st1, h1 = r.head()
        b1 = b"".join(r.chunks()) if stream else r.body(h1)
        st2, h2 = r.head()
        r.body(h2)
        ok = st1 == 200 and st2 == 200 and (b"[DONE]" in b1 if stream else b'"choices"' in b1)
        detail = (st1, st2, b1[-120:])
    except (EOFError, ConnectionResetError, socket.timeout) as e:
        ok, detail = False, repr(e)
    s.close()
    check(f"a request pipelined behind a {'streamed ' if stream else ''}generation: both answered",
          ok, detail)

# HEAD: the GET answer's header, Content-Length included, and no body; the
# next answer on the connection starts right after the header.
s = connect(SOCK, 10)
s.sendall(build_request("HEAD", "/v1/models") + build_request("GET", "/health"))
r = Reader(s)
try:
    st1, h1 = r.head()
    st2, h2 = r.head()
    ok = st1 == 200 and int(h1.get("content-length", "0")) > 0 and st2 == 200
    detail = (st1, h1, st2)
except (EOFError, ValueError, IndexError) as e:
    ok, detail = False, repr(e)
s.close()
check("HEAD /v1/models: a Content-Length, no body, the next answer intact", ok, detail)

# A JSON type the server does not expect where it reads a string: 400, and
# the server goes on (response_format.type 5 used to throw past the handler).
status, _, body = request(SOCK, "POST", "/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "x"}],
                           "response_format": {"type": 5}}, timeout=10)
check("response_format.type 5: 400 on response_format",
      status == 400 and error_of(body).get("param") == "response_format", (status, body))
status, _ = health_latency()
check("... and the daemon still answers", status == 200, status)

# HTTP/1.0 streaming: no chunks, the end of the stream closes the connection.
s = connect(SOCK, 120)
body = json.dumps({"prompt": "Hi", "max_tokens": 2, "stream": True}).encode()
s.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: "
          + str(len(body)).encode() + b"\r\n\r\n" + body)
data = b""
while True:
    part = s.recv(65536)
    if not part:
        break
    data += part
s.close()
check("HTTP/1.0 stream: raw SSE ending in [DONE], then close", data.startswith(b"HTTP/1.0 200")
      and b"transfer-encoding" not in data.lower() and data.rstrip().endswith(b"data: [DONE]"), data[-200:])

# Slow loris: a byte every 0.3 s never completes a request; the read deadline
# (2 s) cuts it off while others are served promptly.
loris = connect(SOCK, 10)
start = time.time()
cut_off = [None]


def trickle():
    try:
        for ch in b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n":
            loris.send(bytes([ch]))
            time.sleep(0.3)
    except OSError:
        pass
    cut_off[0] = time.time() - start


t = threading.Thread(target=trickle)
t.start()
latencies = []
for _ in range(5):
    time.sleep(0.3)
    latencies.append(health_latency())
t.join(timeout=30)
check("other clients answered quickly during the slow loris", all(st == 200 and dt < 1.5 for st, dt in latencies),
      latencies)
check("slow loris cut off by the read deadline (~2 s)", cut_off[0] is not None and cut_off[0] < 6, cut_off[0])
loris.close()

idle = connect(SOCK, 10)
t0 = time.time()
try:
    closed = idle.recv(1) == b""
except OSError:
    closed = True
check("an idle connection is closed after read_timeout", closed and 1.5 < time.time() - t0 < 6, time.time() - t0)
idle.close()

# A request whose body stops short is answered 408 at the deadline (the
# client learns why), then closed; before, the socket was just closed.
short = connect(SOCK, 10)
t0 = time.time()
short.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100\r\n\r\n{\"prompt\": ")
data = b""
try:
    while True:
        got = short.recv(65536)
        if not got:
            break
        data += got
except OSError:
    pass
elapsed = time.time() - t0
check("an incomplete body gets 408 request_timeout at read_timeout, then the close",
      data.startswith(b"HTTP/1.1 408") and b'"request_timeout"' in data and b"2000 ms" in data
      and 1.5 < elapsed < 6, (data[:300], elapsed))
short.close()

# A client that shuts down its sending side after the request (shutdown(SHUT_WR),
# `nc -N`) still reads: it gets the whole answer, streamed or not, and then
# the server closes the connection.
def half_closed(stream):
    c = connect(SOCK, 120)
    try:
        c.sendall(build_request("POST", "/v1/completions", {"prompt": "Count:", "max_tokens": 12,
                                                              "ignore_eos": True, "stream": stream}))
        c.shutdown(socket.SHUT_WR)
        rd = Reader(c)
        st, hd = rd.head()
        body = rd.body(hd)
        try:
            closed = c.recv(1) == b""
        except OSError:
            closed = True
        return st, body, closed
    except (OSError, EOFError, ValueError) as e:
        return None, repr(e), None
    finally:
        c.close()


before = metrics(SOCK)["voltad_disconnect_cancels_total"]
st, body, closed = half_closed(False)
ok = st == 200 and json.loads(body)["usage"]["completion_tokens"] == 12
check("a half-closed client gets its whole answer, then the close", ok and closed, (st, body, closed))
st, body, closed = half_closed(True)
check("a half-closed client gets its whole stream", st == 200 and body.endswith(b"data: [DONE]\n\n")
      and b'"finish_reason":"length"' in body and closed, (st, body[-200:] if body else body, closed))
check("neither counted as a hang-up", metrics(SOCK)["voltad_disconnect_cancels_total"] == before)



# A client that reads a stream to its end and hangs up at once (curl -N)
# cancelled nothing, though its hang-up may reach the daemon before the
# write of the last chunk has completed there.
def stream_to_done():
    c = connect(SOCK, 10)
    try:
        c.sendall(build_request("POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "stream": True}))
        got = b""
        while not got.endswith(b"0\r\n\r\n"):
            part = c.recv(65536)
            if not part:
                break
            got += part
        return b"data: [DONE]" in got
    finally:
        c.close()


before = metrics(SOCK)["voltad_disconnect_cancels_total"]
done = sum(stream_to_done() for _ in range(40))
after = metrics(SOCK)["voltad_disconnect_cancels_total"]
check("40 streams read to [DONE], then closed: none counted as a hang-up",
      done == 40 and after == before, (done, before, after))


# A client that hangs up during a non-streamed answer (nothing is written
# until the end, so only the watch can see it) cancels the generation:
# closing at once, or after a half-close.
def hang_up_during(half_close_first, pipeline_first=False):
    cancels = metrics(SOCK)["voltad_disconnect_cancels_total"]
    c = connect(SOCK, 10)
    c.sendall(build_request("POST", "/v1/completions", {"prompt": "Count:", "max_tokens": 400,
                                                          "ignore_eos": True}))
    if half_close_first:
        c.shutdown(socket.SHUT_WR)
    wait_for(lambda: metrics(SOCK)["voltad_running_sequences"] >= 1, timeout=10)
    if pipeline_first:
        # The next request, sent before the answer (it waits in the socket).
        c.sendall(build_request("GET", "/v1/models"))
    time.sleep(0.3)
    c.close()
    return wait_for(lambda: (lambda m: m["voltad_disconnect_cancels_total"] == cancels + 1
                             and m["voltad_running_sequences"] == 0)(metrics(SOCK)), timeout=10)


check("a hang-up during a non-streamed answer cancels it", hang_up_during(False))
check("so does one after a half-close", hang_up_during(True))
check("so does one after pipelining its next request", hang_up_during(False, pipeline_first=True))

# An answer that ends on the end-of-sequence token: one inter-token sample
# per token after the first (the end token is none of the answer's).
before = metrics(SOCK)["voltad_inter_token_latency_seconds_count"]
status, _, body = request(SOCK, "POST", "/v1/chat/completions", {
    "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 40, "temperature": 0})
answer = json.loads(body)
after = metrics(SOCK)["voltad_inter_token_latency_seconds_count"]
n = answer["usage"]["completion_tokens"]
check("an answer ended by its end token: completion_tokens - 1 inter-token samples",
      status == 200 and answer["choices"][0]["finish_reason"] == "stop" and after - before == n - 1,
      (status, answer.get("choices"), n, before, after))

# A stream cut off by its client is counted once in voltad_requests_total
# (when its header went out) and timed once in the duration histogram.
def counted_and_timed():
    m = metrics(SOCK)
    return (m.get('voltad_requests_total{endpoint="/v1/completions",status="200"}', 0),
            m.get('voltad_request_duration_seconds_count{endpoint="/v1/completions"}', 0))


before = counted_and_timed()
c = connect(SOCK, 10)
c.sendall(build_request("POST", "/v1/completions", {"prompt": "Count:", "max_tokens": 400,
                                                      "ignore_eos": True, "stream": True}))
rd = Reader(c)
st, _ = rd.head()
c.close()
wait_for(lambda: metrics(SOCK)["voltad_running_sequences"] == 0, timeout=10)
# Both within a moment (the count at the header, the time at the cut).
wait_for(lambda: counted_and_timed()[1] - before[1] >= 1, timeout=5)
after = counted_and_timed()
check("a stream closed by its client: counted once and timed once",
      st == 200 and after[0] - before[0] == 1 and after[1] - before[1] == 1, (before, after))

# Per-user limit: two running requests are this user's share; a third gets 429.
held = []
for i in range(2):
    c = connect(SOCK, 60)
    c.sendall(build_request("POST", "/v1/completions", {"prompt": f"Count {i}:", "max_tokens": 400,
                                                          "stream": True, "ignore_eos": True}))
    rd = Reader(c)
    st, _ = rd.head()
    held.append((c, st))
check("two streams within the per-user limit: 200", all(st == 200 for _, st in held))
status, headers, body = request(SOCK, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 2}, timeout=10)
check("the third request: 429 with Retry-After", status == 429 and headers.get("retry-after") == "1"
      and error_of(body)["code"] == "rate_limit_exceeded", (status, body))
for c, _ in held:
    c.close()
m = wait_for(lambda: (lambda m: m["voltad_running_sequences"] == 0 and m["voltad_kv_cache_blocks_used"] == 0)(metrics(SOCK)),
             timeout=20)
check("closing them cancels both and frees their blocks", m)
status, _, body = request(SOCK, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 2}, timeout=120)
check("then the user may send again", status == 200, status)

status, _, body = request(SOCK, "GET", "/health", timeout=10)
check("the daemon is still up", status == 200)
sys.exit(1 if failures else 0)
