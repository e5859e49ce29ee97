"""32 concurrent streaming clients, a third of them hanging up (some while
queued, some mid-stream). Every stream that runs to the end must be complete
and well-formed; the daemon must stay up; afterwards no sequence runs and
every KV block is free.  usage: serve_concurrency.py SOCKET"""
import json
import sys
import threading

from serve_http import Reader, build_request, connect, metrics, request, sse_events, wait_for

SOCK = sys.argv[1]
CLIENTS = 32
MAX_TOKENS = 6
results = [None] * CLIENTS


def client(i):
    body = {"prompt": f"Story {i}: once upon a time", "max_tokens": MAX_TOKENS, "stream": True,
            "temperature": 0.8, "seed": i, "ignore_eos": True}
    s = connect(SOCK)
    try:
        s.sendall(build_request("POST", "/v1/completions", body))
        if i % 6 == 0:  # hangs up at once, most likely while queued
            results[i] = ("hung up", None)
            return
        r = Reader(s)
        status, headers = r.head()
        if status != 200:
            results[i] = ("error", f"status {status}")
            return
        data = b""
        for chunk in r.chunks():
            data += chunk
            if i % 6 == 3 and b'"text":"' in data and data.count(b"data: ") >= 2:  # mid-stream
                results[i] = ("hung up", None)
                return
        results[i] = ("done", (headers, data))
    except Exception as e:  # noqa: BLE001 - reported below
        results[i] = ("error", repr(e))
    finally:
        s.close()


def check_stream(headers, data):
    assert headers.get("content-type") == "text/event-stream", headers
    events = sse_events(data)
    assert events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(e) for e in events[:-1]]
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1, ids
    assert all(c["object"] == "text_completion" for c in chunks)
    final = chunks[-1]
    assert final["choices"][0]["finish_reason"] == "length", final
    assert final["usage"]["completion_tokens"] == MAX_TOKENS, final
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert text, "no text"


threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
for t in threads:
    t.start()
for t in threads:
    t.join(timeout=300)

failures = 0
done = hung = 0
for i, (kind, detail) in enumerate(results):
    if kind == "done":
        try:
            check_stream(*detail)
            done += 1
        except AssertionError as e:
            print(f"FAIL client {i}: malformed stream: {e}")
            failures += 1
    elif kind == "hung up":
        hung += 1
    else:
        print(f"FAIL client {i}: {detail}")
        failures += 1
print(f"{'ok  ' if done == CLIENTS - hung and not failures else 'FAIL'} {done} complete, well-formed streams; {hung} clients hung up")
failures += done != CLIENTS - hung

status, _, body = request(SOCK, "GET", "/health", timeout=10)
ok = status == 200 and json.loads(body)["status"] == "ready"
print(f"{'ok  ' if ok else 'FAIL'} the daemon is still up and ready")
failures += not ok


def drained():
    m = metrics(SOCK)
    return (m["voltad_running_sequences"] == 0 and m["voltad_queue_depth"] == 0
            and m["voltad_kv_cache_blocks_used"] == 0 and m) or None


m = wait_for(drained, timeout=30)
ok = bool(m)
print(f"{'ok  ' if ok else 'FAIL'} afterwards: 0 running sequences, empty queue, all KV blocks free")
failures += not ok
if m:
    total, free = m["voltad_kv_cache_blocks_total"], m["voltad_kv_cache_blocks_free"]
    ok = total == free and total > 0
    print(f"{'ok  ' if ok else 'FAIL'} kv blocks free == total ({free:.0f}/{total:.0f})")
    failures += not ok
    cancelled = m['voltad_generations_finished_total{reason="cancelled"}']
    ok = cancelled >= 1 and m["voltad_disconnect_cancels_total"] >= 1
    print(f"{'ok  ' if ok else 'FAIL'} disconnects cancelled generations ({cancelled:.0f} cancelled)")
    failures += not ok
    ok = m['voltad_generations_finished_total{reason="length"}'] >= done
    print(f"{'ok  ' if ok else 'FAIL'} every complete stream counted as finished by length")
    failures += not ok
sys.exit(1 if failures else 0)
