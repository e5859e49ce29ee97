"""A deliberately small HTTP/1.1 client over a Unix socket (standard library
only), for the serve_* tests that need control a real client does not give:
closing mid-stream, sending broken or slow requests, checking every byte of
an SSE stream."""
import json
import socket
import time


def connect(path, timeout=120):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    return s


def build_request(method, target, body=None, headers=None):
    data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    lines = [f"{method} {target} HTTP/1.1", "Host: voltad"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


class Reader:
    """Buffered reads of one response: head, then a Content-Length or chunked body."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed")
        self.buf += data

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line.decode("latin-1")

    def exactly(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def head(self):
        status_line = self.line()
        status = int(status_line.split()[1])
        headers = {}
        while True:
            line = self.line()
            if not line:
                return status, headers
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()

    def chunks(self):
        """Yields the body's chunks; ends after the terminating 0-size chunk."""
        while True:
            size = int(self.line().split(";")[0], 16)
            if size == 0:
                self.line()
                return
            data = self.exactly(size)
            if self.exactly(2) != b"\r\n":
                raise ValueError("chunk not followed by CRLF")
            yield data

    def body(self, headers):
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return b"".join(self.chunks())
        return self.exactly(int(headers.get("content-length", "0")))


def request(path, method, target, body=None, headers=None, timeout=120):
    """One request on a fresh connection: (status, headers, body bytes)."""
    s = connect(path, timeout)
    try:
        s.sendall(build_request(method, target, body, headers))
        r = Reader(s)
        status, h = r.head()
        return status, h, r.body(h)
    finally:
        s.close()


def sse_events(data):
    """The payloads of 'data: ...' events in an SSE body; comments (voltad's
    ': keep-alive' while a stream has nothing to send) are left out."""
    events = []
    for block in data.decode().split("\n\n"):
        if block.strip() and not block.startswith(":"):
            assert block.startswith("data: "), f"not an SSE data event: {block!r}"
            events.append(block[len("data: "):])
    return events


def sse_comments(data):
    """The comment lines (': ...') of an SSE body."""
    return [b for b in data.decode().split("\n\n") if b.startswith(":")]


def wait_for(predicate, timeout=30, interval=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def metrics(path):
    status, _, body = request(path, "GET", "/metrics", timeout=10)
    assert status == 200
    values = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values
