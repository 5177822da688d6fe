#!/usr/bin/env python3
"""ebb pull, ls and rm against a local server that answers the way the Hugging Face hub does
(no network exists in the tests):

- the hub (one port) answers GET /api/models/OWNER/REPO with {"siblings": [{"rfilename"}]} and
  GET /OWNER/REPO/resolve/main/FILE with a 302 to a CDN on another port, carrying X-Linked-Etag
  (the sha256), X-Linked-Size and ETag, as the hub does for LFS files; 404 for what it lacks;
  a gated repository wants HF_TOKEN's Bearer token;
- the CDN serves the bytes with Range (206 + Content-Range, 416 past the end) and misbehaves on
  request: a connection cut mid-file, a corrupt body, a Range ignored (200), chunked encoding, a
  stall, a size larger than any disk;
- the same over HTTPS with a certificate made here (SSL_CERT_FILE), refused without it and for a
  host name the certificate does not carry.

Checked: a pull lands byte-identical with no .part left and the token never reaches the CDN;
OWNER/REPO:QUANT picks by name (not mmproj, Q4_K not taking Q4_K_M) and says what exists when
it cannot; a cut with --retries 0 keeps the .part and the next pull resumes it with a Range that
starts where it ends; a cut retried in one run; a corrupt download is refused with no file and
no .part left; 416 on a whole .part finishes it, on a stale one starts over; 200 to a Range
starts over; chunked bodies; timeouts; the disk-space check; a split model's every part; ls and
rm (all parts, the .part files too); a split GGUF made from TINY_GGUF pulled and loaded as one.

usage: test-pull.py EBB_BINARY TINY_GGUF
"""
import hashlib
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

fails = 0


def check(cond, what):
    global fails
    print(("ok  " if cond else "FAIL ") + what, flush=True)
    if not cond:
        fails += 1


class Hub:
    """Repositories: name -> {file: bytes}; per-file behaviour on the CDN in self.mode."""

    def __init__(self):
        self.repos = {}
        self.gated = set()
        self.mode = {}  # file name -> 'cut' | 'cut-always' | 'corrupt' | 'norange' | 'chunked' | ...
        self.cuts = {}  # file name -> cuts done
        self.log = []  # (server, method, path, headers dict)
        self.cdn_port = None
        self.cdn_scheme = "http"
        self.cdn_host = "127.0.0.1"


def handler(hub, role):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def send(self, code, body=b"", headers=()):
            self.send_response(code)
            for k, v in headers:
                self.send_header(k, v)
            if not any(k.lower() == "content-length" for k, _ in headers):
                self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self.close_connection = True

        def do_HEAD(self):
            self.do_GET()

        def do_GET(self):
            hub.log.append((role, self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
            if role == "hub":
                self.hub_get()
            else:
                self.cdn_get()

        def hub_get(self):
            p = self.path.split("?")[0]
            if p.startswith("/hop/"):  # relative redirects: an absolute path, then a relative one
                repo, tail = p[len("/hop/"):].split("/", 1)
                if tail.startswith("next/"):
                    return self.send(302, b"", [("Location", "http://127.0.0.1:%d/repos/%s/%s" % (hub.cdn_port, repo, tail[5:]))])
                return self.send(303, b"", [("Location", "next/" + tail)])
            if p.startswith("/loop/"):
                return self.send(302, b"", [("Location", "/loop/%d" % (int(p[6:]) + 1))])
            if p.startswith("/api/models/"):
                repo = p[len("/api/models/"):]
                if repo not in hub.repos:
                    return self.send(404, b'{"error":"Repository not found"}')
                if repo in hub.gated and self.headers.get("Authorization") != "Bearer sekrit":
                    return self.send(401, b'{"error":"Access to this repo is restricted"}')
                sib = [{"rfilename": f} for f in sorted(hub.repos[repo])] + [{"rfilename": "README.md"}]
                return self.send(200, json.dumps({"id": repo, "siblings": sib}).encode(),
                                 [("Content-Type", "application/json")])
            parts = p.lstrip("/").split("/", 4)
            if len(parts) < 5 or parts[2] != "resolve" or parts[3] != "main":
                return self.send(404, b"Entry not found")
            repo, f = parts[0] + "/" + parts[1], parts[4]
            if repo not in hub.repos or f not in hub.repos[repo]:
                return self.send(404, b"Entry not found", [("X-Error-Code", "EntryNotFound")])
            if repo in hub.gated and self.headers.get("Authorization") != "Bearer sekrit":
                return self.send(401, b"gated")
            data = hub.repos[repo][f]
            sha = hashlib.sha256(data).hexdigest()
            size = len(data)
            if hub.mode.get(f) == "huge":
                size = 1 << 50
            loc = "%s://%s:%d/repos/%s/%s?sig=abc" % (hub.cdn_scheme, hub.cdn_host, hub.cdn_port,
                                                      repo.replace("/", "--"), f)
            if hub.mode.get(f) == "relative":
                loc = "/hop/%s/%s" % (repo.replace("/", "--"), f)
            elif hub.mode.get(f) == "loop":
                loc = "/loop/0"
            code = 307 if hub.mode.get(f) == "relative" else 302
            self.send(code, b"", [("Location", loc), ("X-Linked-Etag", '"%s"' % sha),
                                 ("X-Linked-Size", str(size)), ("ETag", '"deadbeef"'),
                                 ("X-Repo-Commit", "0123abc")])

        def cdn_get(self):
            p = self.path.split("?")[0]
            try:
                _, _, rname, f = p.split("/", 3)
                data = hub.repos[rname.replace("--", "/")][f]
            except (ValueError, KeyError):
                return self.send(404, b"NoSuchKey")
            mode = hub.mode.get(f, "")
            sha = hashlib.sha256(data).hexdigest()
            if mode == "corrupt":
                data = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
            start = 0
            rng = self.headers.get("Range")
            if rng and mode != "norange":
                start = int(rng.split("=")[1].split("-")[0])
                if start >= len(data):
                    return self.send(416, b"", [("Content-Range", "bytes */%d" % len(data))])
            body = data[start:]
            hdrs = [("ETag", '"%s"' % sha), ("Accept-Ranges", "bytes")]
            code = 200
            if start:
                code = 206
                hdrs.append(("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data))))
            if mode == "huge":
                hdrs.append(("Content-Length", str(1 << 50)))
            if mode in ("stall", "stall-long"):
                self.send_response(code)
                for k, v in hdrs + [("Content-Length", str(len(body)))]:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body[:1000])
                self.wfile.flush()
                time.sleep(4 if mode == "stall" else 20)
                self.close_connection = True
                return
            if mode == "garbage":  # not HTTP at all
                self.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
                self.close_connection = True
                return
            if mode == "badchunk":  # a chunk size that is no hex number
                self.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n")
                self.close_connection = True
                return
            cut = mode == "cut-always" or (mode == "cut" and hub.cuts.get(f, 0) == 0)
            if cut:
                hub.cuts[f] = hub.cuts.get(f, 0) + 1
                self.send_response(code)
                for k, v in hdrs + [("Content-Length", str(len(body)))]:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body[:len(body) // 2])
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if mode == "chunked":
                self.send_response(code)
                for k, v in hdrs + [("Transfer-Encoding", "chunked")]:
                    self.send_header(k, v)
                self.end_headers()
                for i in range(0, len(body), 7777):
                    c = body[i:i + 7777]
                    self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(c), c))
                self.wfile.write(b"0\r\nX-Trailer: yes\r\n\r\n")
                self.close_connection = True
                return
            self.send(code, body, hdrs)

    return H


def serve(hub, role, ctx=None):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler(hub, role))
    srv.daemon_threads = True
    if ctx:
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.server_address[1]


def main():
    ebb, tiny = sys.argv[1], sys.argv[2]
    tiny_bytes = open(tiny, "rb").read()
    rnd = os.urandom(3 << 20)
    hub = Hub()
    hub.repos = {
        "org/tiny-GGUF": {"tiny-llama.gguf": tiny_bytes},
        "org/quants-GGUF": {
            "Model-Q4_K_M.gguf": rnd[:200000], "Model-Q4_K_S.gguf": rnd[:1000],
            "Model-Q8_0.gguf": rnd[:3000], "mmproj-Model-Q4_K_M.gguf": rnd[:10],
            "Q6_K/Model-Q6_K-00001-of-00003.gguf": rnd[:40000],
            "Q6_K/Model-Q6_K-00002-of-00003.gguf": rnd[40000:90000],
            "Q6_K/Model-Q6_K-00003-of-00003.gguf": rnd[90000:100000],
        },
        "org/big": {"big.gguf": rnd, "cut.gguf": rnd[::-1], "again.gguf": rnd[1:],
                    "corrupt.gguf": rnd[:500000], "norange.gguf": rnd[2:], "chunked.gguf": rnd[3:],
                    "stall.gguf": rnd[:100000], "huge.gguf": rnd[:1000], "whole.gguf": rnd[4:],
                    "stale.gguf": rnd[5:100005], "rel.gguf": rnd[6:], "loop.gguf": rnd[:10],
                    "garbage.gguf": rnd[:10], "badchunk.gguf": rnd[:10], "busy.gguf": rnd[:100000]},
        "org/gated": {"g.gguf": rnd[:5000]},
    }
    hub.gated.add("org/gated")
    hub.mode = {"cut.gguf": "cut-always", "again.gguf": "cut", "corrupt.gguf": "corrupt",
                "norange.gguf": "norange", "chunked.gguf": "chunked", "stall.gguf": "stall",
                "huge.gguf": "huge", "rel.gguf": "relative", "loop.gguf": "loop",
                "garbage.gguf": "garbage", "badchunk.gguf": "badchunk", "busy.gguf": "stall"}
    _, hub_port = serve(hub, "hub")
    _, hub.cdn_port = serve(hub, "cdn")
    endpoint = "http://127.0.0.1:%d" % hub_port
    work = tempfile.mkdtemp(prefix="ebb-pull-")
    models = os.path.join(work, "models")

    def pull(*args, env_extra=None, timeout=60):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EBB_", "HF_"))}
        env.update({"EBB_CONFIG": "/dev/null", "HF_ENDPOINT": endpoint, "EBB_MODELS_DIR": models})
        env.update(env_extra or {})
        return subprocess.run([ebb] + list(args), env=env, capture_output=True, text=True,
                              timeout=timeout)

    def same(name, data):
        p = os.path.join(models, name)
        return os.path.exists(p) and open(p, "rb").read() == data

    def cdn_ranges(f):
        return [h.get("range") for (r, _, p, h) in hub.log if r == "cdn" and p.split("?")[0].endswith("/" + f)]

    try:
        # A file by its path, with a token: the hub sees it, the CDN never does.
        r = pull("pull", "hf://org/tiny-GGUF/tiny-llama.gguf", env_extra={"HF_TOKEN": "tok1"})
        check(r.returncode == 0 and r.stdout.strip() == os.path.join(models, "tiny-llama.gguf"),
              "pull hf://org/tiny-GGUF/tiny-llama.gguf (rc %d, %s)" % (r.returncode, r.stderr.strip()[-200:]))
        check(same("tiny-llama.gguf", tiny_bytes), "the file is byte-identical")
        check(not os.path.exists(os.path.join(models, "tiny-llama.gguf.part")), "no .part left")
        check("sha256 verified" in r.stderr, "the plain progress lines say the sha256 was verified")
        auth = [(role, h.get("authorization")) for (role, _, p, h) in hub.log if "tiny-llama" in p]
        check(("hub", "Bearer tok1") in auth and all(a is None for (ro, a) in auth if ro == "cdn"),
              "the token went to the hub and not to the CDN: %s" % auth)
        r = pull("pull", "hf://org/tiny-GGUF/tiny-llama.gguf")
        check(r.returncode == 0 and "already present" in r.stderr, "a second pull keeps the file")

        # OWNER/REPO:QUANT
        r = pull("pull", "org/quants-GGUF:Q4_K_M")
        check(r.returncode == 0 and same("Model-Q4_K_M.gguf", rnd[:200000]),
              "org/quants-GGUF:Q4_K_M picks Model-Q4_K_M.gguf, not the mmproj (%s)" % r.stderr.strip()[-200:])
        r = pull("pull", "org/quants-GGUF:q4_k_s")
        check(r.returncode == 0 and same("Model-Q4_K_S.gguf", rnd[:1000]), "the quant is matched without case")
        r = pull("pull", "org/quants-GGUF:Q4_K")
        check(r.returncode == 1 and "no Q4_K file" in r.stderr and "Model-Q8_0.gguf" in r.stderr,
              "Q4_K takes no Q4_K_M and the error lists the files: %s" % r.stderr.strip()[-300:])
        r = pull("pull", "org/quants-GGUF")
        check(r.returncode == 1 and "OWNER/REPO:QUANT" in r.stderr, "no quant with several files asks for one")
        r = pull("pull", "org/nothere-GGUF:Q4_K_M")
        check(r.returncode == 1 and "not found" in r.stderr and "404" in r.stderr,
              "an unknown repository: %s" % r.stderr.strip()[-200:])
        r = pull("pull", "hf://org/tiny-GGUF/other.gguf")
        check(r.returncode == 1 and "404" in r.stderr and not os.path.exists(os.path.join(models, "other.gguf.part")),
              "an unknown file: 404, no .part left: %s" % r.stderr.strip()[-200:])
        r = pull("pull", "not a spec")
        check(r.returncode == 1 and "is not a model to pull" in r.stderr, "a bad spec is named")
        r = pull("pull", "hf://org/tiny-GGUF/../x.gguf")
        check(r.returncode == 1 and "is not a model to pull" in r.stderr, "a path with .. is refused")

        # Gated: without the token a clear message, with it the file.
        r = pull("pull", "org/gated:g")
        check(r.returncode == 1 and "HF_TOKEN" in r.stderr, "gated without a token names HF_TOKEN")
        r = pull("pull", "hf://org/gated/g.gguf", env_extra={"HF_TOKEN": "sekrit"})
        check(r.returncode == 0 and same("g.gguf", rnd[:5000]), "gated with HF_TOKEN")

        # Split: every part from the first's name.
        r = pull("pull", "org/quants-GGUF:Q6_K")
        ok = all(same("Model-Q6_K-%05d-of-00003.gguf" % k, d) for k, d in
                 [(1, rnd[:40000]), (2, rnd[40000:90000]), (3, rnd[90000:100000])])
        check(r.returncode == 0 and ok and "part 3 of 3" in r.stderr,
              "a split model's three parts (%s)" % r.stderr.strip()[-200:])

        # A cut with no retries: the .part stays, the next pull resumes it where it ends.
        data = rnd[::-1]
        r = pull("pull", "--retries", "0", "hf://org/big/cut.gguf")
        part = os.path.join(models, "cut.gguf.part")
        have = os.path.getsize(part) if os.path.exists(part) else -1
        check(r.returncode == 1 and have == len(data) // 2 and "pull again to resume" in r.stderr,
              "a cut mid-file keeps %d bytes in the .part: %s" % (have, r.stderr.strip()[-200:]))
        hub.mode["cut.gguf"] = ""
        r = pull("pull", "hf://org/big/cut.gguf")
        check(r.returncode == 0 and same("cut.gguf", data), "the next pull finishes it")
        check(cdn_ranges("cut.gguf")[-1] == "bytes=%d-" % have and "resuming at" in r.stderr,
              "with Range: bytes=%d- (ranges asked: %s)" % (have, cdn_ranges("cut.gguf")))

        # A cut retried within one pull.
        r = pull("pull", "hf://org/big/again.gguf")
        check(r.returncode == 0 and same("again.gguf", rnd[1:]) and "retrying" in r.stderr,
              "a cut retried and resumed in one run (%s)" % r.stderr.strip()[-200:])

        # A corrupt body: refused, nothing left.
        r = pull("pull", "hf://org/big/corrupt.gguf")
        check(r.returncode == 1 and "sha256 mismatch" in r.stderr and
              not os.path.exists(os.path.join(models, "corrupt.gguf")) and
              not os.path.exists(os.path.join(models, "corrupt.gguf.part")),
              "a corrupt download is refused, no file and no .part: %s" % r.stderr.strip()[-200:])

        # A server that ignores Range: the .part's bytes are dropped and the file starts over.
        with open(os.path.join(models, "norange.gguf.part"), "wb") as f:
            f.write(b"x" * 1000)
        r = pull("pull", "hf://org/big/norange.gguf")
        check(r.returncode == 0 and same("norange.gguf", rnd[2:]), "200 to a Range starts over")

        # 416: a whole .part is finished (verified), a stale one starts over.
        with open(os.path.join(models, "whole.gguf.part"), "wb") as f:
            f.write(rnd[4:])
        r = pull("pull", "hf://org/big/whole.gguf")
        check(r.returncode == 0 and same("whole.gguf", rnd[4:]) and
              cdn_ranges("whole.gguf") == ["bytes=%d-" % len(rnd[4:])],
              "416 on a whole .part: verified and renamed (%s)" % r.stderr.strip()[-200:])
        with open(os.path.join(models, "stale.gguf.part"), "wb") as f:
            f.write(b"y" * 200000)
        r = pull("pull", "hf://org/big/stale.gguf")
        check(r.returncode == 0 and same("stale.gguf", rnd[5:100005]),
              "416 on a stale .part longer than the file starts over (%s)" % r.stderr.strip()[-200:])

        r = pull("pull", "hf://org/big/rel.gguf")
        hops = [p for (ro, _, p, _) in hub.log if "rel.gguf" in p]
        check(r.returncode == 0 and same("rel.gguf", rnd[6:]) and len(hops) == 4,
              "redirects by absolute path (307) and relative path (303), then to the CDN: %s" % hops)
        r = pull("pull", "hf://org/big/loop.gguf")
        check(r.returncode == 1 and "more than 10 redirects" in r.stderr,
              "a redirect loop stops after 10: %s" % r.stderr.strip()[-150:])
        r = pull("pull", "org/tiny-GGUF", "--dir", os.path.join(work, "one"))
        check(r.returncode == 0 and os.path.exists(os.path.join(work, "one", "tiny-llama.gguf")),
              "OWNER/REPO with a single .gguf needs no quant")
        r = pull("pull", "hf://org/big/chunked.gguf")
        check(r.returncode == 0 and same("chunked.gguf", rnd[3:]), "a chunked body")
        t0 = time.time()
        r = pull("pull", "--timeout", "1", "--retries", "0", "hf://org/big/stall.gguf")
        check(r.returncode == 1 and "timed out" in r.stderr and time.time() - t0 < 4,
              "a stalled body times out after --timeout: %s" % r.stderr.strip()[-200:])
        r = pull("pull", "hf://org/big/garbage.gguf")
        check(r.returncode == 1 and "not an HTTP response" in r.stderr, "a server that speaks no HTTP: %s" % r.stderr.strip()[-120:])
        r = pull("pull", "--retries", "0", "hf://org/big/badchunk.gguf")
        check(r.returncode == 1 and "bad chunk size" in r.stderr, "a malformed chunk: %s" % r.stderr.strip()[-120:])
        # Two pulls of one file: the second says another is writing it (the .part is locked).
        bg = subprocess.Popen([ebb, "pull", "--retries", "0", "hf://org/big/busy.gguf"],
                              env=dict({k: v for k, v in os.environ.items() if not k.startswith(("EBB_", "HF_"))},
                                       EBB_CONFIG="/dev/null", HF_ENDPOINT=endpoint, EBB_MODELS_DIR=models),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline and not os.path.exists(os.path.join(models, "busy.gguf.part")):
            time.sleep(0.05)
        time.sleep(0.3)
        r = pull("pull", "hf://org/big/busy.gguf")
        check(r.returncode == 1 and "another pull is writing" in r.stderr, "a second pull of one file: %s" % r.stderr.strip()[-120:])
        bg.wait(30)
        r = pull("pull", "hf://org/big/huge.gguf")
        check(r.returncode == 1 and "not enough disk space" in r.stderr and
              not os.path.exists(os.path.join(models, "huge.gguf.part")),
              "a file larger than the disk is refused first: %s" % r.stderr.strip()[-200:])

        # ls and rm
        r = pull("ls")
        rows = {l.split()[0]: l for l in r.stdout.splitlines()[1:]}
        check(r.returncode == 0 and "tiny-llama" in rows and "llama" in rows["tiny-llama"].split()[2],
              "ls shows tiny-llama with its family: %s" % rows.get("tiny-llama"))
        check("Model-Q6_K-00001-of-00003" in rows and rows["Model-Q6_K-00001-of-00003"].split()[-1] == "3"
              and not any("00002" in k for k in rows), "ls shows the split model once with 3 parts")
        r = pull("ls", "--json")
        js = json.loads(r.stdout)
        check(any(m["name"] == "cut" and m["size"] == len(rnd) for m in js), "ls --json sizes")
        open(os.path.join(models, "Model-Q6_K-00002-of-00003.gguf.part"), "wb").write(b"z")
        r = pull("rm", "Model-Q6_K-00001-of-00003")
        left = [f for f in os.listdir(models) if "Q6_K" in f]
        check(r.returncode == 0 and not left, "rm removes every part and the .part files: %s" % left)
        r = pull("rm", "tiny-llama.gguf", "g")
        check(r.returncode == 0 and not os.path.exists(os.path.join(models, "tiny-llama.gguf")),
              "rm NAME.gguf and NAME")
        r = pull("rm", "nothere")
        check(r.returncode == 1 and "no model 'nothere'" in r.stderr, "rm of an unknown model fails")
        r = pull("rm", "../models/cut")
        check(r.returncode == 1 and os.path.exists(os.path.join(models, "cut.gguf")), "rm refuses paths")

        split_model_tests(hub, pull, models, work, tiny, ebb)
        api_pull_tests(hub, endpoint, work, tiny, tiny_bytes, ebb)
        https_tests(hub, pull, models, work, tiny_bytes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("%d failure(s)" % fails)
    return 1 if fails else 0


def split_model_tests(hub, pull, models, work, tiny, ebb):
    """A real split model: tiny-llama.gguf cut into 3 parts by scripts/gguf-split.py, pulled by
    its quant name, loaded as one by ebb run (the same greedy tokens as the whole file on the
    reference and the OpenCL engines), refused with a clear message when a part is missing."""
    split = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                         "gguf-split.py")
    out = os.path.join(work, "split")
    os.makedirs(out)
    subprocess.run([sys.executable, split, tiny, os.path.join(out, "tiny-Q8_0"), "3"], check=True)
    hub.repos["org/split-GGUF"] = {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)}
    r = pull("pull", "org/split-GGUF:Q8_0")
    first = os.path.join(models, "tiny-Q8_0-00001-of-00003.gguf")
    check(r.returncode == 0 and r.stdout.strip() == first and
          all(os.path.exists(os.path.join(models, "tiny-Q8_0-%05d-of-00003.gguf" % k)) for k in (1, 2, 3)),
          "a split GGUF made by gguf-split.py pulled by its quant (%s)" % r.stderr.strip()[-200:])
    for dev in ("ref", "auto"):
        toks = []
        for m in (tiny, first):
            r = pull("run", "-m", m, "--device", dev, "-p", "hello", "-n", "8", "--temp", "0", "--json",
                     timeout=300)
            try:
                toks.append(json.loads(r.stdout.strip().splitlines()[-1])["tokens"])
            except (ValueError, IndexError, KeyError):
                toks.append("rc %d: %s" % (r.returncode, r.stderr.strip()[-200:]))
        check(len(toks[0]) == 8 and toks[0] == toks[1],
              "the split model loads as one (%s): the same greedy tokens %s / %s" % (dev, toks[0], toks[1]))
    # The layer streamer reads one file: a split model streams from a pack (ebb pack reads the
    # parts through the mapping) and is refused, saying so, without one.
    r = pull("run", "-m", first, "--device", "auto", "-p", "hello", "-n", "8", "--temp", "0",
             "--residency", "0", timeout=300)
    check(r.returncode != 0 and "split in 3 files" in r.stderr and "ebb pack" in r.stderr,
          "streaming a split model without a pack is refused: %s" % r.stderr.strip()[-200:])
    pk = os.path.join(work, "split.pack")
    r = pull("pack", first, "-o", pk, timeout=300)
    r = pull("run", "-m", first, "--pack", pk, "--device", "auto", "-p", "hello", "-n", "8",
             "--temp", "0", "--residency", "0", "--json", timeout=300)
    try:
        streamed = json.loads(r.stdout.strip().splitlines()[-1])["tokens"]
    except (ValueError, IndexError, KeyError):
        streamed = "rc %d: %s" % (r.returncode, r.stderr.strip()[-200:])
    check(streamed == toks[0], "streamed from its pack: the same tokens %s" % (streamed,))
    r = pull("info", os.path.join(models, "tiny-Q8_0-00002-of-00003.gguf"))
    check(r.returncode != 0 and "open its first part" in r.stderr, "a later part alone is refused: %s" % r.stderr.strip()[-150:])
    # Parts that do not agree are refused, naming what is wrong (scripts/gguf-set-kv.py edits
    # one key of a copy).
    setkv = os.path.join(os.path.dirname(split), "gguf-set-kv.py")
    bad = os.path.join(work, "bad")
    for name, part, kv, want in (("no", 2, "split.no=u16:2", "does not say it is part 2 of 3"),
                                 ("count", 1, "split.tensors.count=i32:99", "split.tensors.count says 99")):
        d = os.path.join(bad, name)
        os.makedirs(d)
        for k in (1, 2, 3):
            f = "tiny-Q8_0-%05d-of-00003.gguf" % k
            if k == part:
                subprocess.run([sys.executable, setkv, os.path.join(out, f), os.path.join(d, f), kv], check=True)
            else:
                shutil.copy(os.path.join(out, f), d)
        r = pull("info", os.path.join(d, "tiny-Q8_0-00001-of-00003.gguf"))
        check(r.returncode != 0 and want in r.stderr, "a split model whose %s is wrong: %s" % (kv, r.stderr.strip()[-150:]))
    os.unlink(os.path.join(models, "tiny-Q8_0-00003-of-00003.gguf"))
    r = pull("info", first)
    check(r.returncode != 0 and "part 3 of 3" in r.stderr, "a missing part is named: %s" % r.stderr.strip()[-150:])


def api_pull_tests(hub, endpoint, work, tiny, tiny_bytes, ebb):
    """Ollama's /api/pull on a several-model ebb serve: NDJSON progress as ollama streams it,
    the pulled model served by name at once, stream false, errors; the official ollama client
    when it is installed (the integration venv has it)."""
    mdir = os.path.join(work, "served")
    os.makedirs(mdir)
    shutil.copy(tiny, os.path.join(mdir, "tiny-llama.gguf"))
    hub.repos["org/served-GGUF"] = {"tiny2-Q8_0.gguf": tiny_bytes, "tiny3-Q4_0.gguf": tiny_bytes,
                                    "slow.gguf": tiny_bytes}
    hub.mode["slow.gguf"] = "stall-long"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EBB_", "HF_"))}
    env.update({"EBB_CONFIG": "/dev/null", "HF_ENDPOINT": endpoint, "EBB_MODELS_DIR": mdir})
    # A section for a file the daemon pulls later: the pulled model takes its settings.
    conf = os.path.join(work, "served.conf")
    with open(conf, "w") as f:
        f.write("[model.tiny3]\npath = tiny3-Q4_0.gguf\nkeep_alive = 7m\nctx = 32\n")
    p = subprocess.Popen([ebb, "serve", "--config", conf, "--port", "0", "--device", "ref",
                          "--ctx", "64", "--chat-template", "chatml"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out, err = [], []
    for f, sink in ((p.stdout, out), (p.stderr, err)):
        threading.Thread(target=lambda f=f, sink=sink: sink.extend(iter(f.readline, "")),
                         daemon=True).start()
    port = None
    deadline = time.time() + 60
    while port is None and time.time() < deadline and p.poll() is None:
        for line in out:
            if "listening on http://127.0.0.1:" in line:
                port = int(line.rsplit(":", 1)[1].split("/")[0].strip())
        time.sleep(0.05)
    import urllib.request
    import urllib.error

    def post(path, body):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.headers.get("Content-Type"), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type"), e.read().decode()

    try:
        check(port is not None, "serve (several models) listens: %s" % "".join(err)[-300:])
        st, ct, body = post("/api/pull", {"model": "hf.co/org/served-GGUF:Q8_0"})
        lines = [json.loads(l) for l in body.splitlines() if l.strip()]
        check(st == 200 and ct == "application/x-ndjson" and lines and lines[0] == {"status": "pulling manifest"}
              and lines[-1] == {"status": "success"}, "/api/pull streams NDJSON from pulling manifest to success")
        sha = hashlib.sha256(tiny_bytes).hexdigest()
        prog = [l for l in lines if l.get("digest")]
        check(prog and prog[-1]["digest"] == "sha256:" + sha and prog[-1]["completed"] == prog[-1]["total"] == len(tiny_bytes),
              "its progress lines carry the digest, total and completed: %s" % prog[-1:])
        check(open(os.path.join(mdir, "tiny2-Q8_0.gguf"), "rb").read() == tiny_bytes, "the file is in models_dir")
        with urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % port, timeout=30) as r:
            ids = [m["id"] for m in json.loads(r.read())["data"]]
        check("tiny2-Q8_0" in ids and "tiny-llama" in ids, "the pulled model is served at once: %s" % ids)
        st, _, body = post("/v1/completions", {"model": "tiny2-Q8_0", "prompt": "hello", "max_tokens": 3})
        check(st == 200 and json.loads(body)["model"] == "tiny2-Q8_0", "a completion on the pulled model (%d)" % st)
        st, _, body = post("/api/pull", {"name": "org/served-GGUF:Q4_0", "stream": False})
        check(st == 200 and json.loads(body) == {"status": "success"}, "stream false: one object (%d %s)" % (st, body))
        with urllib.request.urlopen("http://127.0.0.1:%d/models/status" % port, timeout=30) as r:
            by = {m["id"]: m for m in json.loads(r.read())["data"]}
        check("tiny3" in by and "tiny3-Q4_0" not in by and by["tiny3"]["keep_alive"] == 420,
              "the pulled file is served under its [model.tiny3] section, with its keep_alive: %s"
              % {k: v.get("keep_alive") for k, v in by.items()})
        st, _, body = post("/v1/completions", {"model": "tiny3", "prompt": "hello", "max_tokens": 2})
        check(st == 200, "a completion on it (%d %s)" % (st, body[:200]))
        with urllib.request.urlopen("http://127.0.0.1:%d/models/status" % port, timeout=30) as r:
            by = {m["id"]: m for m in json.loads(r.read())["data"]}
        check(by["tiny3"]["context"] == 32, "with the section's ctx: %s" % by["tiny3"]["context"])
        st, _, body = post("/api/pull", {"model": "llama3.2"})
        check(st == 400 and "hf.co/OWNER/REPO:QUANT" in json.loads(body)["error"], "an ollama library name: 400 saying what to give")
        st, _, body = post("/api/pull", {"model": "org/nothere-GGUF:Q8_0"})
        lines = [json.loads(l) for l in body.splitlines() if l.strip()]
        check(st == 200 and "not found" in lines[-1].get("error", ""), "an unknown repository streamed: an error line %s" % lines[-1:])
        st, _, body = post("/api/pull", {"model": "org/nothere-GGUF:Q8_0", "stream": False})
        check(st == 404 and "not found" in json.loads(body)["error"], "and not streamed: 404 (%d)" % st)
        try:
            import ollama
        except ImportError:
            ollama = None
            print("skip the ollama client (not installed here; tests/integration's venv has it)")
        if ollama:
            os.unlink(os.path.join(mdir, "tiny3-Q4_0.gguf"))
            c = ollama.Client(host="http://127.0.0.1:%d" % port)
            got = list(c.pull("hf.co/org/served-GGUF:Q4_0", stream=True))
            check(got and got[-1].status == "success" and any(g.digest for g in got),
                  "the ollama client's pull(stream=True) ends in success")
        # Stopping the daemon while a pull waits on a silent server: it stops at once (the
        # pull is canceled within a quarter second, not after its 30 s read timeout) and the
        # .part stays for the next pull.
        first = []

        def slow_pull():
            req = urllib.request.Request("http://127.0.0.1:%d/api/pull" % port,
                                         json.dumps({"model": "hf://org/served-GGUF/slow.gguf"}).encode())
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    for line in r:
                        first.append(line)
            except Exception:
                pass
        threading.Thread(target=slow_pull, daemon=True).start()
        deadline = time.time() + 10
        while time.time() < deadline and not os.path.exists(os.path.join(mdir, "slow.gguf.part")):
            time.sleep(0.05)
        time.sleep(0.5)
        t0 = time.time()
        p.terminate()
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            pass
        took = time.time() - t0
        check(p.returncode is not None and took < 5 and
              os.path.getsize(os.path.join(mdir, "slow.gguf.part")) == 1000,
              "SIGTERM during a stalled /api/pull: the daemon exits in %.1f s, the .part kept" % took)
    finally:
        if p.poll() is None:
            p.terminate()
            p.wait(30)


def https_tests(hub, pull, models, work, tiny_bytes):
    """The hub and its CDN over TLS with a certificate for localhost made here."""
    if not shutil.which("openssl"):
        print("FAIL openssl is needed to make the test certificate")
        global fails
        fails += 1
        return
    cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    tls = Hub()
    tls.repos = {"org/tiny-GGUF": {"tiny-llama.gguf": tiny_bytes}}
    tls.cdn_scheme, tls.cdn_host = "https", "localhost"
    _, hp = serve(tls, "hub", ctx)
    _, tls.cdn_port = serve(tls, "cdn", ctx)
    os.makedirs(os.path.join(work, "tls"))
    r = pull("pull", "--dir", os.path.join(work, "tls"), "hf://org/tiny-GGUF/tiny-llama.gguf",
             env_extra={"HF_ENDPOINT": "https://localhost:%d" % hp, "SSL_CERT_FILE": cert})
    ok = r.returncode == 0 and open(os.path.join(work, "tls", "tiny-llama.gguf"), "rb").read() == tiny_bytes
    check(ok, "over HTTPS with the certificate trusted (%s)" % r.stderr.strip()[-200:])
    r = pull("pull", "--dir", os.path.join(work, "tls2"), "hf://org/tiny-GGUF/tiny-llama.gguf",
             env_extra={"HF_ENDPOINT": "https://localhost:%d" % hp,
                        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"})
    check(r.returncode == 1 and "not trusted" in r.stderr,
          "an unknown issuer is refused: %s" % r.stderr.strip()[-200:])
    r = pull("pull", "--dir", os.path.join(work, "tls3"), "hf://org/tiny-GGUF/tiny-llama.gguf",
             env_extra={"HF_ENDPOINT": "https://127.0.0.1:%d" % hp, "SSL_CERT_FILE": cert})
    check(r.returncode == 1 and "not trusted" in r.stderr,
          "a host name the certificate lacks is refused: %s" % r.stderr.strip()[-200:])


if __name__ == "__main__":
    sys.exit(main())
