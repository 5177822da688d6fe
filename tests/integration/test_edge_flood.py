"""Connection admission under a flood from many addresses (api/http/limits.c): a reconnecting
flood from 20 loopback addresses that keeps the global cap and its headroom full must not hide
/health from a fresh address; the accept rate per address and connections that send nothing
are cut early. Linux routes all of 127.0.0.0/8 to lo, so each source address is a client."""
import selectors
import socket
import threading
import time

from test_edge import connect, health, logged, metric, read_response, request_bytes


def flood(port, sources, per_source, stop, stats):
    """Holds per_source connections from each source address that send nothing, and opens a new
    one as soon as the server closes one (at accept, or at a deadline)."""
    sel = selectors.DefaultSelector()

    def open_one(src):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((src, 0))
            s.connect_ex(("127.0.0.1", port))
        except OSError:
            s.close()
            return
        sel.register(s, selectors.EVENT_READ, src)
        stats["connects"] += 1

    for src in sources:
        for _ in range(per_source):
            open_one(src)
    while not stop.is_set():
        for key, _ in sel.select(0.05):
            s = key.fileobj
            try:
                if s.recv(4096):
                    continue
            except BlockingIOError:
                continue
            except OSError:
                pass
            sel.unregister(s)
            s.close()
            open_one(key.data)
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    sel.close()


def test_health_reachable_from_fresh_address_under_reconnecting_flood(make_server):
    srv = make_server("--max-connections", "48", "--header-timeout", "15s")
    time.sleep(0.5)
    stop, stats = threading.Event(), {"connects": 0}
    sources = [f"127.0.0.{i}" for i in range(2, 22)]
    t = threading.Thread(target=flood, args=(srv.port, sources, 5, stop, stats), daemon=True)
    t.start()
    try:
        time.sleep(1.5)  # the cap and its headroom are full, refused sockets reopen at once
        late = []
        for i in range(10):
            t0 = time.monotonic()
            try:
                status, _ = health(srv, source="127.0.0.99")
            except OSError as e:
                status = repr(e)
            dt = time.monotonic() - t0
            if status != 200 or dt > 2.0:
                late.append((i, status, round(dt, 2)))
            time.sleep(0.3)
        assert not late, (late, stats)
    finally:
        stop.set()
        t.join(10)
    assert stats["connects"] > 200, stats  # it really was a reconnecting flood
    time.sleep(0.5)
    assert metric(srv, 'ebb_http_refused_total{reason="global"}') > 0
    assert logged(srv, "its share")


def test_silent_connection_closed_early(make_server):
    srv = make_server("--silent-timeout", "1s", "--header-timeout", "15s")
    time.sleep(0.3)
    s = connect(srv)
    t0 = time.monotonic()
    s.settimeout(5)
    try:
        got = s.recv(1)
    except (ConnectionResetError, socket.timeout) as e:
        got = e
    assert got == b"", got
    assert 0.9 <= time.monotonic() - t0 <= 2.5
    assert metric(srv, 'ebb_http_refused_total{reason="silent"}') == 1
    # A client that has sent its request line has header_timeout for the rest of its head.
    s = connect(srv)
    s.sendall(b"GET /health HTTP/1.1\r\n")
    time.sleep(1.6)
    s.sendall(f"Host: 127.0.0.1:{srv.port}\r\n\r\n".encode())
    assert read_response(s)[0] == 200
    s.close()


def test_accept_rate_per_address(make_server):
    srv = make_server("--accept-rate", "10")
    time.sleep(1.2)  # the start-up probes' tokens are back
    socks, closed = [], 0
    t0 = time.monotonic()
    for _ in range(30):
        s = connect(srv, "127.0.0.5")
        s.sendall(request_bytes(srv, "GET", "/health"))
        socks.append(s)
    let_in = 10 + int(10 * (time.monotonic() - t0)) + 1  # the burst, and what refilled meanwhile
    for s in socks:
        status, _, _ = read_response(s)
        closed += status is None
        s.close()
    assert max(5, 30 - let_in) <= closed <= 20, (closed, let_in)
    assert metric(srv, 'ebb_http_refused_total{reason="accept_rate"}') == closed
    # Another address is not affected, and the address gets its rate back.
    assert health(srv, "127.0.0.6")[0] == 200
    time.sleep(0.5)
    assert health(srv, "127.0.0.5")[0] == 200
