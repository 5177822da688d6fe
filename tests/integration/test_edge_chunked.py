"""Chunked request bodies (Transfer-Encoding: chunked) on the generation endpoints: the body is
reassembled whatever its chunk boundaries (inside a UTF-8 character, a byte at a time, one chunk
of more than 64 KiB, the terminating chunk sent late) and the answer, streamed or not, comes as
soon as it would for the same body sent with a Content-Length. Raw sockets: the point is the
bytes on the wire and when the answer starts."""
import json
import socket
import time

from conftest import MODEL_ID
from test_edge import connect


def head(server, path, framing):
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            f"Content-Type: application/json\r\n{framing}\r\n\r\n").encode()


def chunked(data, sizes):
    """data framed as chunks of the given sizes (the last size repeats), then the last chunk."""
    out, i, k = b"", 0, 0
    while i < len(data):
        n = sizes[min(k, len(sizes) - 1)]
        out += b"%x\r\n%s\r\n" % (len(data[i:i + n]), data[i:i + n])
        i, k = i + n, k + 1
    return out + b"0\r\n\r\n"


def read_answer(s, stream, wait):
    """Reads one answer: (status, body bytes, seconds until it was complete). A streamed answer
    is complete at its terminating chunk, a plain one at its Content-Length."""
    s.settimeout(0.5)
    buf, t0 = b"", time.monotonic()
    while time.monotonic() - t0 < wait:
        try:
            got = s.recv(65536)
        except socket.timeout:
            continue
        if not got:
            break
        buf += got
        hd, sep, rest = buf.partition(b"\r\n\r\n")
        if not sep:
            continue
        lines = hd.decode("latin-1").split("\r\n")
        hdrs = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        if "content-length" in hdrs and len(rest) >= int(hdrs["content-length"]):
            return int(lines[0].split()[1]), rest, time.monotonic() - t0
        if hdrs.get("transfer-encoding") == "chunked" and rest.endswith(b"\r\n0\r\n\r\n"):
            return int(lines[0].split()[1]), rest, time.monotonic() - t0
    return None, buf, time.monotonic() - t0


def send(server, raw, stream, parts=1, gap=0.0, wait=60.0):
    s = connect(server)
    step = (len(raw) + parts - 1) // parts
    for i in range(0, len(raw), step):
        s.sendall(raw[i:i + step])
        if gap:
            time.sleep(gap)
    out = read_answer(s, stream, wait)
    s.close()
    return out


def chat_body(content, stream, pad=0):
    doc = json.dumps({"messages": [{"role": "user", "content": content}], "max_tokens": 3,
                      "temperature": 0, "stream": stream}, ensure_ascii=False)
    # Whitespace before the closing brace makes a body of any size with the same prompt.
    return (doc[:-1] + " " * pad + "}").encode()


def answer_text(body, stream):
    if not stream:
        return json.loads(body)["choices"][0]["message"]["content"]
    text = ""
    for line in body.split(b"\n"):
        if line.startswith(b"data: {"):
            delta = json.loads(line[6:])["choices"][0]["delta"]
            text += delta.get("content") or ""
    return text


def test_chunked_chat_answers_like_content_length(server):
    # "é" is two bytes: odd chunk sizes put boundaries inside it; pad > 64 KiB makes chunks
    # larger than libmicrohttpd's read buffer.
    content = "Say é, ü and 日本 once."
    for stream in (False, True):
        for pad in (0, 70000):
            data = chat_body(content, stream, pad)
            path = "/v1/chat/completions"
            ref_status, ref, ref_s = send(server, head(server, path, f"Content-Length: {len(data)}")
                                          + data, stream)
            assert ref_status == 200, ref[:300]
            want = answer_text(ref, stream)
            split = [i for i in range(len(data)) if data[i] >= 0xC0][0] + 1
            for sizes, parts in (([len(data)], 1), ([split, 5, 7], 1), ([65536 + 3, 1000], 1),
                                 ([3, 1], 40 if not pad else 1)):
                raw = head(server, path, "Transfer-Encoding: chunked") + chunked(data, sizes)
                status, got, took = send(server, raw, stream, parts=parts,
                                         gap=0.01 if parts > 1 else 0.0)
                assert status == 200, (stream, pad, sizes, got[:300])
                assert answer_text(got, stream) == want, (stream, pad, sizes)
                # No stall: the same answer as fast as with a Content-Length, give or take.
                assert took < ref_s + 3.0 + 0.01 * parts, (stream, pad, sizes, took, ref_s)


def test_chunked_last_chunk_late_and_keep_alive(server):
    # The last chunk in its own segment half a second after the data, then a second chunked
    # request on the same connection (streamed this time) whose last chunk is cut after its
    # size line, before the empty trailer.
    s = connect(server)
    for stream, cut in ((False, 5), (True, 2)):
        data = chat_body("Hi é", stream)
        raw = head(server, "/v1/chat/completions", "Transfer-Encoding: chunked") + chunked(
            data, [len(data)])
        s.sendall(raw[:-cut])
        time.sleep(0.5)
        s.sendall(raw[-cut:])
        status, got, took = read_answer(s, stream, 60.0)
        assert status == 200, got[:300]
        assert answer_text(got, stream), got[:300]
        assert took < 10.0, took
    s.close()


def test_chunked_other_generation_endpoints(server):
    for path, doc in (("/v1/completions", {"prompt": "Hi é", "max_tokens": 2, "temperature": 0}),
                      ("/api/generate", {"model": MODEL_ID, "prompt": "Hi é", "stream": False,
                                         "options": {"num_predict": 2, "temperature": 0}})):
        data = json.dumps(doc, ensure_ascii=False).encode()
        raw = head(server, path, "Transfer-Encoding: chunked") + chunked(data, [4, 1])
        status, got, took = send(server, raw, False)
        assert status == 200, (path, got[:300])
        assert took < 10.0, (path, took)
