"""The allocation-failure walk: ebb-failalloc (tests/failalloc) fails the Nth allocation of a
request (header X-Ebb-Fail-Alloc: N); N walks over the allocations of one chat request, plain
and streamed. Every answer must be a success or a 500/503 with an error object (a stream that
has begun: complete, or ending with an error event, or cut when even that cannot be written),
never a connection closed without an answer, a crash or a hang,
and the next normal request must be served (one slot: a leaked slot would block it). At the end
/metrics shows the engine idle.

The first WALK_ALL values of N are walked one by one; past them N grows by 1/8 each step to the
end of the request's allocations (the first N that injects nothing), so the walk stays within a
couple of minutes under ASan; set EBB_ALLOC_WALK_FULL=1 to walk every N."""
import json
import os
import re
import socket
import time

import pytest

from conftest import MODEL_ID, Server

WALK_ALL = int(os.environ.get("EBB_ALLOC_WALK_ALL", "60"))
CHAT = {"model": MODEL_ID, "messages": [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Say hi"}],
        "max_tokens": 4, "temperature": 0, "logprobs": True, "top_logprobs": 2}


def raw_post(srv, path, body, headers, timeout=60):
    """(status, headers, body) of one request on a fresh connection; status None if the server
    closed the connection without a (complete) answer."""
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n")
    for k, v in headers.items():
        head += f"{k}: {v}\r\n"
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=timeout)
    s.sendall(head.encode() + b"\r\n" + data)
    buf = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    except ConnectionResetError:
        pass
    s.close()
    if b"\r\n\r\n" not in buf:
        return None, {}, buf
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    hdrs = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    if hdrs.get("transfer-encoding") == "chunked":
        out = b""
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size, 16)
            if n == 0:
                break
            out += rest[:n]
            rest = rest[n + 2:]
        rest = out
    return int(lines[0].split()[1]), hdrs, rest


def check_answer(status, hdrs, body, stream):
    """Returns the outcome's name; fails on a bad one."""
    if status in (500, 503):
        err = json.loads(body)["error"]
        assert err["message"] and err["type"] == "server_error", body
        return f"{status}"
    assert status is not None, "closed without an answer"
    assert status == 200, (status, body[:300])
    if not stream:
        o = json.loads(body)
        assert o["choices"][0]["message"]["role"] == "assistant"
        return "200"
    events = [l[6:] for l in body.decode().split("\n") if l.startswith("data: ")]
    if events and events[-1] == "[DONE]":
        for e in events[:-1]:
            json.loads(e)
        return "200"
    if events and "error" in json.loads(events[-1]):
        return "200+error"
    return "cut"  # 200, then the stream ended without [DONE]: no memory to write more


def raw_get(srv, path):
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    return (int(buf.split()[1]) if buf.startswith(b"HTTP/") else None), {}, buf


def normal_ok(srv):
    status, _, body = raw_post(srv, "/v1/chat/completions",
                               dict(CHAT, stream=False, max_tokens=1), {}, timeout=60)
    return status == 200 and json.loads(body)["choices"][0]["message"]["content"] is not None


def walk(srv, stream):
    outcomes = {}
    n, steps = 1, 0
    full = os.environ.get("EBB_ALLOC_WALK_FULL") == "1"
    while True:
        mark = len(srv.stderr_lines)
        t0 = time.monotonic()
        status, hdrs, body = raw_post(srv, "/v1/chat/completions", dict(CHAT, stream=stream),
                                      {"X-Ebb-Fail-Alloc": str(n)})
        assert time.monotonic() - t0 < 60, f"N={n}: hang"
        assert srv.proc.poll() is None, f"N={n}: the daemon died: {srv.stderr()}"
        try:
            kind = check_answer(status, hdrs, body, stream)
        except (AssertionError, ValueError, KeyError) as e:
            raise AssertionError(f"N={n}: {e!r}: {status} {body[:2000]!r}") from e
        # A request without the header disarms the hook. Its connection is accepted (and
        # tracked, an allocation) before the hook sees its request, so an N past the end of
        # the request's path may fail there: this one may be answered 503.
        status, _, _ = raw_get(srv, "/health")
        assert status in (200, 503), f"N={n}: /health answered {status}"
        # The next normal request is served (one slot: a leaked slot would queue it for ever).
        assert normal_ok(srv), f"N={n}: the next request failed: {srv.stderr()}"
        assert srv.proc.poll() is None, f"N={n}: the daemon died: {srv.stderr()}"
        # (the daemon's stderr is read by a thread: on a loaded machine its line can trail the
        # answers above, so an absent one is looked for again for a while before the walk ends)
        deadline = time.monotonic() + 3
        while True:
            injected = any(f"failing allocation #{n} " in l for l in srv.stderr_lines[mark:])
            if injected or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        steps += 1
        if not injected:
            return n - 1, steps, outcomes
        outcomes[kind] = outcomes.get(kind, 0) + 1
        n = n + 1 if full or n < WALK_ALL else n + max(1, n // 8)


@pytest.fixture(scope="module")
def failalloc_server():
    binary = os.environ.get("EBB_FAILALLOC_BIN")
    if not binary:
        pytest.skip("EBB_FAILALLOC_BIN is not set (ebb-failalloc is built on Linux only)")
    saved = {k: os.environ.get(k) for k in ("EBB_BIN", "ASAN_OPTIONS")}
    os.environ["EBB_BIN"] = binary
    # Under ASan: the OpenCL driver's LLVM gives its threads an alternate signal stack from
    # malloc, which ASan's thread exit then tries to munmap ("unable to unmap", abort at
    # SIGTERM; plain ebb does the same). ASan's own alternate stacks are not needed here.
    os.environ["ASAN_OPTIONS"] = (saved["ASAN_OPTIONS"] or "") + ":use_sigaltstack=0"
    try:
        srv = Server("--parallel", "1", "--queue", "4", "--ctx", "512")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    yield srv
    rc = srv.stop()
    assert rc == 0, srv.stderr()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_allocation_failure_walk(failalloc_server, stream):
    srv = failalloc_server
    total, steps, outcomes = walk(srv, stream)
    print(f"stream={stream}: {total}+ allocations, {steps} requests, outcomes {outcomes}")
    assert total > 20, "the hook injected nothing: is this ebb-failalloc?"
    m = srv.metrics()
    assert re.search(r"^ebb_active_slots 0$", m, re.M), m
    assert re.search(r"^ebb_queue_depth 0$", m, re.M), m
