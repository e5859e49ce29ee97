"""A stand-in for voltad on a Unix socket, for voltactl's error paths:
  silent  accepts connections and never answers (a stopped or hung daemon);
  full    never accepts, its listen queue full (a connect blocks);
  odd     answers every request 200 with JSON of unexpected shapes (a
          stream's one event: {"error": "boom"});
  broken  starts a stream, sends one chunk, then closes mid-answer;
  ssh     another service: a banner that is not HTTP, then the close;
  plain   a web server that is not voltad: 200 with a text body;
  close   reads each request and closes without a word (voltad past a
          user's server.max_connections_per_user, or stopping);
  undone  every stream ends properly but without its [DONE];
  busy    answers every request 429, as voltad past a user's connections.
usage: fake_voltad.py SOCKET MODE   (runs until killed; prints "ready")"""
import os
import socket
import sys
import threading

path, mode = sys.argv[1], sys.argv[2]
if os.path.exists(path):
    os.unlink(path)
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(0 if mode == "full" else 16)
held = []
if mode == "full":  # one connection fills a queue of 0; the next connect blocks
    filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    filler.connect(path)
    print("ready", flush=True)
    threading.Event().wait()


def stream(conn, events, whole):
    """A 200 event stream of one chunk, ended properly or cut off."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    conn.sendall(b"%x\r\n%s\r\n%s" % (len(events), events, b"0\r\n\r\n" if whole else b""))
    conn.close()


def answer(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        part = conn.recv(65536)
        if not part:
            return
        data += part
    head = data.split(b"\r\n\r\n", 1)[0].decode()
    length = next((int(l.split(":", 1)[1]) for l in head.split("\r\n")
                   if l.lower().startswith("content-length:")), 0)
    while len(data.split(b"\r\n\r\n", 1)[1]) < length:
        part = conn.recv(65536)
        if not part:  # the client left mid-body
            return
        data += part
    target = head.split(" ")[1]
    if mode == "close":
        return conn.close()
    if mode == "undone" and target.startswith("/v1/"):
        return stream(conn, b'data: {"choices":[{"text":"partial"}]}\n\n', whole=True)
    if mode == "ssh":
        conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
        return conn.close()
    if mode == "busy":
        body = (b'{"error": {"message": "too many connections of yours (max_connections_per_user)",'
                b' "type": "rate_limit_exceeded", "code": "rate_limit_exceeded"}}')
        conn.sendall(b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                     b"Retry-After: 1\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                     % (len(body), body))
        return conn.close()
    if mode == "plain":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
                     b"Connection: close\r\n\r\nhello")
        return conn.close()
    if mode == "odd" and target.startswith("/v1/completions"):
        return stream(conn, b'data: {"error": "boom", "usage": {"prompt_tokens": "x"}}\n\n'
                      b"data: [DONE]\n\n", whole=True)
    if mode == "broken" and target.startswith("/v1/"):
        return stream(conn, b'data: {"choices":[{"text":"partial"}]}\n\n', whole=False)
    body = {"/health": b'{"status": 5, "model": 7}',
            "/v1/models": b'{"data": [5]}'}.get(target, b'{"error": "boom"}')
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                 b"Connection: close\r\n\r\n%s" % (len(body), body))
    conn.close()


print("ready", flush=True)
while True:
    conn, _ = server.accept()
    if mode == "silent":
        held.append(conn)  # never read, never answered
        continue
    threading.Thread(target=answer, args=(conn,), daemon=True).start()
