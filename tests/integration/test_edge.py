"""Hostile clients at the HTTP edge (api/http/limits.c): slow clients are dropped at their header or
body deadline while normal ones are served, the per-address and global connection caps answer
or close the excess, and /health still answers under every cap. Raw sockets throughout: the
point is what a client that does not behave sees."""
import json
import re
import socket
import threading
import time

from conftest import MODEL_ID


def connect(server, source="127.0.0.1"):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", server.port))
    return s


def request_bytes(server, method, path, body=None):
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
    if body is not None:
        data = json.dumps(body).encode()
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        return (head + "\r\n").encode() + data
    return (head + "\r\n").encode()


def read_response(s):
    """Reads one response with a Content-Length body: (status, headers, body); (None, {}, b"")
    if the server closed the connection without answering."""
    buf = b""
    try:
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                return None, {}, b""
            buf += chunk
    except (ConnectionResetError, BrokenPipeError):
        return None, {}, b""
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    n = int(hdrs.get("content-length", "0"))
    while len(rest) < n:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, hdrs, rest[:n]


def closed_by_server(s, wait):
    """True if the server closes s (EOF or reset) within wait seconds."""
    s.settimeout(wait)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def health(server, source="127.0.0.1"):
    s = connect(server, source)
    s.sendall(request_bytes(server, "GET", "/health"))
    status, _, body = read_response(s)
    s.close()
    return status, body


def logged(server, text, wait=3.0):
    """True once text is in the daemon's stderr (read by a thread, so it may lag a little)."""
    t0 = time.monotonic()
    while text not in server.stderr():
        if time.monotonic() - t0 > wait:
            return False
        time.sleep(0.1)
    return True


def metric(server, name):
    m = re.search(r"^%s (\d+)$" % re.escape(name), server.metrics(), re.M)
    return int(m.group(1)) if m else None


def chat_ok(server):
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 2, "temperature": 0}
    status, _, data = server.request("POST", "/v1/chat/completions", body, timeout=60)
    return status == 200 and json.loads(data)["choices"][0]["message"]["role"] == "assistant"


def test_slow_header_dropped_at_deadline_normal_served(make_server):
    srv = make_server("--header-timeout", "2s", "--body-timeout", "30s")
    slow = []
    t0 = time.monotonic()
    for _ in range(20):
        s = connect(srv)
        s.sendall(b"GET /health HTTP/1.1\r\nHo")
        slow.append(s)
    # One byte every 0.3 s per connection: activity that MHD's idle timeout would accept.
    closed_at = {}
    served = []  # a normal client meanwhile
    normal = threading.Thread(target=lambda: served.append(chat_ok(srv) and health(srv)[0] == 200))
    normal.start()
    while time.monotonic() - t0 < 6 and len(closed_at) < len(slow):
        for i, s in enumerate(slow):
            if i in closed_at:
                continue
            try:
                s.sendall(b"s")
                s.settimeout(0.01)
                if s.recv(1) == b"":
                    closed_at[i] = time.monotonic() - t0
            except socket.timeout:
                pass
            except (ConnectionResetError, BrokenPipeError):
                closed_at[i] = time.monotonic() - t0
        time.sleep(0.3)
    normal.join(120)
    assert served == [True]
    assert len(closed_at) == len(slow), f"still open: {len(slow) - len(closed_at)}"
    assert all(1.9 <= t <= 4.0 for t in closed_at.values()), sorted(closed_at.values())
    assert metric(srv, 'ebb_http_refused_total{reason="header_timeout"}') >= 20
    assert logged(srv, "closed after header_timeout")
    # A connection that completes its head in time is served normally.
    s = connect(srv)
    s.sendall(request_bytes(srv, "GET", "/health")[:10])
    time.sleep(1)
    s.sendall(request_bytes(srv, "GET", "/health")[10:])
    assert read_response(s)[0] == 200
    # Kept alive, it may idle longer than header_timeout (request_timeout governs that)...
    assert not closed_by_server(s, 3)
    s.sendall(request_bytes(srv, "GET", "/health"))
    assert read_response(s)[0] == 200
    # ...but once its next request line is in, the rest of the head has header_timeout.
    s.sendall(b"GET /health HTTP/1.1\r\nHo")
    t1 = time.monotonic()
    for _ in range(20):
        try:
            s.sendall(b"s")
        except (ConnectionResetError, BrokenPipeError):
            break
        if closed_by_server(s, 0.3):
            break
    assert 1.9 <= time.monotonic() - t1 <= 4.0
    for s in slow:
        s.close()


def test_slow_body_dropped_at_deadline(make_server):
    srv = make_server("--header-timeout", "10s", "--body-timeout", "2s")
    s = connect(srv)
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    s.sendall(head.encode())
    t0 = time.monotonic()
    gone = None
    while time.monotonic() - t0 < 6:
        try:
            s.sendall(b" ")
        except (ConnectionResetError, BrokenPipeError):
            gone = time.monotonic() - t0
            break
        if closed_by_server(s, 0.3):
            gone = time.monotonic() - t0
            break
        if gone is None and time.monotonic() - t0 > 0.5:
            assert health(srv)[0] == 200
    assert gone is not None and 1.9 <= gone <= 4.0, gone
    assert metric(srv, 'ebb_http_refused_total{reason="body_timeout"}') == 1
    assert chat_ok(srv)
    # A body sent in time (with pauses) is served: the deadline is on the phase, not on idling.
    s = connect(srv)
    data = request_bytes(srv, "POST", "/v1/chat/completions",
                         {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    cut = data.index(b"\r\n\r\n") + 4
    s.sendall(data[:cut + 5])
    time.sleep(1)
    s.sendall(data[cut + 5:])
    assert read_response(s)[0] == 200
    s.close()


def test_per_client_cap_answers_excess_and_health(make_server):
    srv = make_server("--max-connections-per-client", "4", "--header-timeout", "300s",
                      "--silent-timeout", "0")  # the held connections stay silent
    time.sleep(0.5)  # the server has seen the start-up probes' connections close
    held = [connect(srv) for _ in range(4)]  # at the cap, idle
    time.sleep(0.2)
    # Over the cap: anything but /health is answered 429 and the connection is closed.
    s = connect(srv)
    s.sendall(request_bytes(srv, "GET", "/v1/models"))
    status, hdrs, body = read_response(s)
    assert status == 429, (status, body)
    err = json.loads(body)["error"]
    assert err["code"] == "too_many_connections" and "max_connections_per_client" in err["message"]
    assert hdrs["connection"].lower() == "close" and hdrs["retry-after"] == "1"
    assert closed_by_server(s, 2)
    # /health is answered from the headroom, under the cap.
    status, body = health(srv)
    assert status == 200 and json.loads(body)["status"] == "ok"
    # Another address is not affected by this one's cap (where 127.0.0.2 can be bound).
    try:
        other = chat_ok_from(srv, "127.0.0.2")
    except OSError:
        other = None
    assert other in (True, None)
    # Past the headroom (4 more), connections are closed at accept (or, if the server has not
    # yet accepted all four when it comes, it is one of them and has 2 s).
    extra = [connect(srv) for _ in range(4)]
    time.sleep(0.2)
    s = connect(srv)
    assert closed_by_server(s, 4)
    # Idle headroom connections lose their slot after 2 s; /health gets through again.
    for e in extra:
        assert closed_by_server(e, 4), srv.stderr()
    time.sleep(0.5)  # the server frees them at its next run
    assert health(srv)[0] == 200
    # The connections under the cap are still served.
    held[0].sendall(request_bytes(srv, "GET", "/v1/models"))
    assert read_response(held[0])[0] == 200
    for h in held + extra:
        h.close()
    time.sleep(0.3)
    assert metric(srv, 'ebb_http_refused_total{reason="per_client"}') >= 2
    # One warning for the 429 and the refusal at accept: the line is rate-limited.
    assert len(re.findall(r"over max_connections_per_client", srv.stderr())) == 1, srv.stderr()


def chat_ok_from(server, source):
    s = connect(server, source)
    s.sendall(request_bytes(server, "POST", "/v1/chat/completions",
                            {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}))
    status, _, _ = read_response(s)
    s.close()
    return status == 200


def test_global_cap_answers_503_but_health(make_server):
    srv = make_server("--max-connections", "6", "--max-connections-per-client", "0",
                      "--header-timeout", "300s")
    time.sleep(0.5)
    held = [connect(srv) for _ in range(6)]
    time.sleep(0.2)
    s = connect(srv)
    s.sendall(request_bytes(srv, "POST", "/v1/chat/completions",
                            {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}))
    status, hdrs, body = read_response(s)
    assert status == 503 and json.loads(body)["error"]["code"] == "server_busy", body
    assert closed_by_server(s, 2)
    for _ in range(3):
        assert health(srv)[0] == 200, srv.stderr()
    assert logged(srv, "over max_connections")
    for h in held:
        h.close()
    time.sleep(0.5)
    assert chat_ok(srv)
    assert metric(srv, "ebb_http_connections") is not None


def test_client_closing_mid_request_releases_its_slot_at_once(make_server):
    """A client that sends a request head (or half of one) and closes at once must not hold a
    connection in CLOSE-WAIT until the body or header deadline; it is counted as peer_closed,
    not as a slow client."""
    srv = make_server("--header-timeout", "15s", "--body-timeout", "30s")
    time.sleep(0.5)
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{").encode()
    socks = []
    for i in range(30):
        s = connect(srv)
        s.sendall(head if i % 3 else head[:30])
        s.shutdown(socket.SHUT_WR)
        socks.append(s)
    t0 = time.monotonic()
    assert all(closed_by_server(s, max(0.1, 3.0 - (time.monotonic() - t0))) for s in socks)
    assert time.monotonic() - t0 < 3.0
    for s in socks:
        s.close()
    # Only the /metrics request itself is open.
    assert metric(srv, "ebb_http_connections") == 1
    # Most are the edge's; libmicrohttpd frees one itself when it reads the FIN on its own.
    assert 1 <= metric(srv, 'ebb_http_refused_total{reason="peer_closed"}') <= 30
    assert metric(srv, 'ebb_http_refused_total{reason="body_timeout"}') == 0
    assert metric(srv, 'ebb_http_refused_total{reason="header_timeout"}') == 0
    assert logged(srv, "client closed before its request was complete")
    # A client that sends a whole request and then half-closes still gets its answer.
    s = connect(srv)
    s.sendall(request_bytes(srv, "GET", "/health"))
    s.shutdown(socket.SHUT_WR)
    assert read_response(s)[0] == 200
    s.close()
