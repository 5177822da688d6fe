"""Strict request framing at the HTTP edge (api/http/framing.c, RFC 9112): a request head whose
body length is ambiguous or which names Host twice is answered 400 and its connection closed
before a byte of its body is read, a transfer coding other than chunked 501 at once, so nothing a
client sends after such a head is ever served as a second request. Raw sockets: the point is the
bytes a hostile client sends."""
import json
import socket
import time

from test_edge import connect, metric, read_response


def exchange(server, raw, wait=5.0):
    """Sends raw on a fresh connection and reads until the server closes it (or wait passes):
    (list of status codes of the responses seen, all bytes read, closed by the server?)."""
    s = connect(server)
    s.sendall(raw)
    s.settimeout(0.2)
    buf, closed = b"", False
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            closed = True
            break
        if not chunk:
            closed = True
            break
        buf += chunk
    s.close()
    statuses = [int(line.split()[1]) for line in buf.split(b"\r\n") if line.startswith(b"HTTP/1.")]
    return statuses, buf, closed


def post_head(server, *extra, host=True, version="HTTP/1.1"):
    lines = [f"POST /v1/chat/completions {version}"]
    if host:
        lines.append(f"Host: 127.0.0.1:{server.port}")
    lines.append("Content-Type: application/json")
    lines.extend(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def smuggled(server):
    return f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode()


def test_cl_te_refused_and_smuggled_request_never_served(server):
    before = metric(server, 'ebb_http_refused_total{reason="bad_framing"}') or 0
    # The chunked body ends at once; a front end that frames by Content-Length would take the
    # GET that follows as part of this body, the server as a second request.
    body = b"0\r\n\r\n" + smuggled(server)
    raw = post_head(server, f"Content-Length: {len(body)}", "Transfer-Encoding: chunked") + body
    statuses, buf, closed = exchange(server, raw)
    assert statuses == [400], buf
    assert closed
    err = json.loads(buf.partition(b"\r\n\r\n")[2])["error"]
    assert "Content-Length and Transfer-Encoding" in err["message"]
    assert b"ebb_" not in buf  # the /metrics body never came back
    assert metric(server, 'ebb_http_refused_total{reason="bad_framing"}') == before + 1


def test_duplicate_or_invalid_content_length_refused(server):
    body = b'{"messages":[]}'
    for extra in ((f"Content-Length: {len(body)}", "Content-Length: 3"),
                  (f"Content-Length: {len(body)}", f"Content-Length: {len(body)}"),
                  ("Content-Length: 1x",),
                  ("Content-Length: -15",)):
        statuses, buf, closed = exchange(server, post_head(server, *extra) + body + smuggled(server))
        # libmicrohttpd 0.9.75 answers a Content-Length it cannot parse itself, before the
        # request reaches the daemon, and writes its 400 status line and headers twice.
        assert statuses and set(statuses) == {400}, (extra, buf)
        assert closed, extra
        assert b"ebb_" not in buf


def test_host_twice_or_missing_refused(server):
    raw = (f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nHost: evil.example\r\n\r\n"
           .encode())
    statuses, buf, closed = exchange(server, raw)
    assert statuses == [400] and closed, buf
    assert b"more than one Host" in buf
    statuses, buf, closed = exchange(server, b"GET /health HTTP/1.1\r\n\r\n")
    assert statuses == [400] and closed, buf
    # HTTP/1.0 has no Host requirement.
    statuses, buf, _ = exchange(server, b"GET /health HTTP/1.0\r\n\r\n")
    assert statuses == [200], buf


def test_other_transfer_codings_501_at_once(server):
    for te in ("identity", "gzip, chunked", "chunked, chunked", "gzip"):
        t0 = time.monotonic()
        statuses, buf, closed = exchange(server, post_head(server, f"Transfer-Encoding: {te}"),
                                         wait=3.0)
        expect = 400 if te == "chunked, chunked" else 501
        assert statuses == [expect], (te, buf)
        assert closed and time.monotonic() - t0 < 2.0, te
    # TE on HTTP/1.0 is faulty framing.
    statuses, buf, closed = exchange(
        server, post_head(server, "Transfer-Encoding: chunked", version="HTTP/1.0") + b"0\r\n\r\n")
    assert statuses == [400] and closed, buf


def test_plain_chunked_body_still_served(server):
    # /tokenize answers without suspending the connection; the generation endpoints, which
    # suspend it, are test_edge_chunked.py's.
    data = json.dumps({"content": "Hi"}).encode()
    body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)
    raw = (f"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
           "Content-Type: application/json\r\nTransfer-Encoding: Chunked\r\n\r\n").encode()
    s = connect(server)
    s.sendall(raw + body)
    status, _, got = read_response(s)
    s.close()
    assert status == 200, got
    assert json.loads(got)["tokens"]
