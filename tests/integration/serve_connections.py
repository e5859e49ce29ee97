"""Per-user connections (server.max_connections_per_user 8, read_timeout
10s, so that idle connections stay open through the test).
usage: serve_connections.py SOCKET"""
import json
import socket
import sys
import time

from serve_http import Reader, build_request, connect, metrics, request, wait_for

SOCK = sys.argv[1]
failed = []


def check(what, cond, detail=""):
    print(f"{'ok  ' if cond else 'FAIL'} {what}{'' if cond else ': ' + str(detail)}")
    if not cond:
        failed.append(what)


def on_new_connection(method="GET", target="/health"):
    """(status, headers, body, whether the server closed the connection after)."""
    s = connect(SOCK, 10)
    try:
        s.sendall(build_request(method, target))
        r = Reader(s)
        status, headers = r.head()
        body = r.body(headers)
        try:
            closed = s.recv(1) == b""
        except OSError:
            closed = True
        return status, headers, body, closed
    finally:
        s.close()

# Per-user connections: eight open connections are this user's share; the
# ninth is answered 429 and closed, and once one closes a new one is served.
held = [connect(SOCK, 10) for _ in range(8)]
time.sleep(0.2)  # all eight accepted before the ninth
status, headers, body, closed = on_new_connection()
err = json.loads(body)["error"] if status == 429 else {}
check("a ninth connection of the same user: 429, Retry-After, closed", status == 429
      and headers.get("retry-after") == "1" and err.get("code") == "rate_limit_exceeded"
      and "max_connections_per_user" in err.get("message", "") and closed, (status, err))
# A ninth connection's request that waits for "100 Continue" before its
# body is not invited to send it: the 429 comes at once, the body unread.
s9 = connect(SOCK, 10)
try:
    s9.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: 1000\r\nExpect: 100-continue\r\n\r\n")
    r = Reader(s9)
    status, headers = r.head()
    body = r.body(headers)
finally:
    s9.close()
check("a ninth connection with Expect: 100-continue: 429 at once, no 100 Continue", status == 429
      and b"max_connections_per_user" in body, (status, body))
# An administrator's /admin request on a ninth connection gets through
# (this test runs as root or as the daemon's own user), once: the
# connection then closes. (resume while serving: 409, nothing to resume.)
# /metrics read on a held connection (keep-alive): a new connection for it
# would be refused here, and one made before the eight could still hold a
# place while the server has not yet seen it close.
ACCEPTED = 'voltad_connections_total{result="accepted"}'
PER_USER = 'voltad_connections_total{result="refused",reason="max_connections_per_user"}'


def metrics_on(conn):
    conn.sendall(build_request("GET", "/metrics"))
    r = Reader(conn)
    status, headers = r.head()
    values = {}
    for line in r.body(headers).decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


before = metrics_on(held[0])
status, _, body, closed = on_new_connection("POST", "/admin/resume")
time.sleep(0.3)  # its refused slot freed before the flood below
check("an administrator's /admin request past its connection limit: answered, then closed",
      status in (200, 409) and b"state" in body and closed, (status, body))
# Counted when it was let through, before its answer: accepted, not refused.
after = metrics_on(held[0])
check("the administrator's connection is counted accepted, not refused",
      after.get(ACCEPTED, 0) - before.get(ACCEPTED, 0) == 1
      and after.get(PER_USER, 0) == before.get(PER_USER, 0) >= 1,
      (before.get(ACCEPTED), after.get(ACCEPTED), before.get(PER_USER), after.get(PER_USER)))
# Refused connections being answered count against the user too: four at
# once, the rest are closed at once (so a flood of them cannot fill
# server.max_connections). Here six, sending nothing: two closed at once.
flood = [connect(SOCK, 10) for _ in range(6)]
for c in flood:
    c.setblocking(False)
closed = set()


def count_closed():
    for i, c in enumerate(flood):
        if i in closed:
            continue
        try:
            if c.recv(1) == b"":
                closed.add(i)
        except BlockingIOError:
            pass  # open, waiting for a request
        except OSError:
            closed.add(i)
    return len(closed)


# The listener takes them in turn: wait for two to be closed, then a
# moment for a third that must not come; all well inside the answered
# ones' 3 s for a request (after which they close too).
t0 = time.time()
while count_closed() < 2 and time.time() - t0 < 2.0:
    time.sleep(0.05)
time.sleep(0.2)
closed_at_once = count_closed()
check("past four refused connections of a user, the next are closed at once", closed_at_once == 2,
      closed_at_once)
for c in flood:
    c.close()
# A close frees its connection once the server has read it: a moment
# for that (a request taken before it would be one more refusal, which the
# log check of serve_robustness.sh counts), then served at the first try.


def health_ok():
    try:
        return request(SOCK, "GET", "/health", timeout=10)[0] == 200
    except (OSError, EOFError):
        return False


held.pop().close()
time.sleep(0.3)
t0 = time.time()
served = wait_for(health_ok, timeout=1.0)
check("after one of them closes, a new connection is served", served and time.time() - t0 < 1.2,
      time.time() - t0)
for c in held:
    c.close()
time.sleep(0.3)  # (the server may take a new connection before an old one's close)
refused = metrics(SOCK).get(PER_USER, 0)
check("the refusals are counted in /metrics", refused >= 7, refused)

sys.exit(1 if failed else 0)
